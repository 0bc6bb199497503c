"""Graphs under a memory budget (issue 26): each target of the issue, on its four workloads.

The workloads of :mod:`remat.graph_workloads` (a U-Net, a ResNet, a transformer op
by op, an adaptive ODE solver), their data made larger than the defaults so that
the saved values outweigh the parameters and each op's arithmetic outweighs its
bookkeeping, are measured by :func:`remat.graph_compare.compare_graph` (the
function ``remat compare --graph`` prints): store-all, ``rm.checkpoint`` per
block, DTR with each heuristic and the optimal plan, at 50% and 33% of store-all's
saved bytes, every method in one run, interleaved, median of the repeats, every
gradient checked bit for bit against store-all's.  Then each target is printed
beside its figure:

* the optimal plan's measured time within 10% of its prediction;
* the optimal plan's solve time (at most 30 s on graphs of 300 ops);
* DTR (``h_dtr``, the default heuristic) at 33%: at most 1.25x store-all's time;
* DTR within 1.15x of the optimal plan's time, on the static workloads (the ODE's
  graph depends on its data);
* memory within the budget as the tape counts it, every run;
* memory within the budget as traced: the tracemalloc peak of forward + backward at
  most the budget plus the transients ``X`` of DTR's documented bound
  (:mod:`remat.graph.dtr`): ``4 V + 2 G + U + c``, with ``V`` the largest value,
  ``G`` the parameters' bytes, ``U`` taken as ``4 V`` (the U-Net's skips, the ODE's
  state, slope and step) and ``c`` 64 KiB and 2 KiB a record.
"""

from benchmarks.common import environment, table  # noqa: I001  (pins BLAS threads first)

import math

import remat as rm
from remat.graph_compare import compare_graph, failures_of
from remat.graph_workloads import adaptive_ode, resnet, transformer_ops, unet
from remat.units import format_bytes

WORKLOADS = {  # name: (builder, its sizes, quick sizes)
    "unet": (unet, dict(length=256, batch=8), dict(levels=2, width=4, length=16, batch=2)),
    "resnet": (resnet, dict(length=128, batch=16), dict(stages=2, width=4, length=8, batch=2)),
    "transformer_ops": (
        transformer_ops,
        dict(context=64, batch=4),
        dict(blocks=1, width=8, heads=2, context=8, batch=2),
    ),
    "adaptive_ode": (
        adaptive_ode,
        dict(horizon=0.7, batch=512),
        dict(horizon=0.2, dim=2, batch=8),
    ),
}
STATIC = ("unet", "resnet", "transformer_ops")  # the ODE's graph follows its data
BUDGETS = (0.5, 0.33)
DTR = "dtr:h_dtr"  # the default heuristic: what the targets hold DTR to


def transients(workload, ops):
    """``X`` of DTR's documented traced bound for ``workload`` (see the module's doc)."""
    with rm.Recorder() as recorder:
        workload.forward()
    sizes = [t.data.nbytes for t in workload.inputs]
    for r in recorder.records:
        sizes.append(math.prod(r.shape) * 8)  # the workloads are float64
        sizes += [a.nbytes for a in (*(r.args or ()), r.ans) if hasattr(a, "nbytes")]
    params = sum(p.data.nbytes for p in workload.params)
    return 8 * max(sizes) + 2 * params + 64 * 1024 + 2048 * ops


def _short(reason, width=110):
    """A row's reason in a table cell: its first ``width`` characters."""
    return reason if len(reason) <= width else reason[: width - 3].rstrip() + "..."


def _rows_table(rows):
    cells = []
    for r in rows:
        budget = "-" if r.budget is None else format_bytes(r.budget)
        if not r.available:
            cells.append([r.label, budget, f"not available: {_short(r.reason)}", *[""] * 7])
            continue
        predicted = "-" if r.predicted_seconds is None else f"{r.predicted_seconds * 1e3:.1f}"
        cells.append(
            [
                r.label,
                budget,
                f"{r.seconds * 1e3:.1f}",
                f"{r.time_ratio:.2f}x",
                "-" if r.tape_peak_bytes is None else format_bytes(r.tape_peak_bytes),
                format_bytes(r.traced_peak_bytes),
                r.recomputed_ops,
                "-" if r.solve_seconds is None else f"{r.solve_seconds:.2f}",
                predicted,
                "yes" if r.bit_identical else "**NO**",
            ]
        )
    headers = ["method", "budget", "ms", "vs store-all", "tape peak", "traced peak"]
    headers += ["recomputed ops", "solve s", "predicted ms", "gradients bit for bit"]
    return table(headers, cells)


def _met(ok):
    return "yes" if ok else "**no**"


def _at(rows, method, share):
    return next((r for r in rows if r.method == method and r.share is not None
                 and round(r.share, 2) == share), None)  # fmt: skip


def _followed(optimal):
    """Whether the optimal row ran under its plan, every run (else it ran under DTR)."""
    return optimal is not None and optimal.available and not optimal.reason


def _optimal_targets(optimal, where):
    """The optimal plan's target rows at one budget: measured against predicted, solve time
    (judged on graphs of at most 300 ops, forward and backward, as the planner sees them)."""
    target = "optimal: measured within 10% of predicted"
    if optimal is None or not optimal.available:
        why = "not run" if optimal is None else _short(optimal.reason)
        return [[target, where, why, "**no** (a bug)" if optimal and optimal.crashed else "n/a"]]
    ops = optimal.plan_ops
    solve = [
        "optimal: solve <= 30 s at 300 ops",
        where,
        f"{optimal.solve_seconds:.2f} s, {ops} ops forward and backward ({optimal.plan_method})",
        _met(optimal.solve_seconds <= 30 and optimal.plan_method != "dtr")
        if ops is not None and ops <= 300
        else "n/a",
    ]
    if not _followed(optimal):
        return [[target, where, _short(optimal.reason), "**no**"], solve]
    error = optimal.seconds / optimal.predicted_seconds - 1
    figure = (
        f"{optimal.seconds * 1e3:.1f} ms measured, {optimal.predicted_seconds * 1e3:.1f} ms "
        f"predicted ({error:+.0%})"
    )
    return [[target, where, figure, _met(abs(error) <= 0.10)], solve]


def _targets(name, rows, x):
    """The target rows of one workload (``x``: its transients): [target, workload, figure,
    met]."""
    out = []
    for share in BUDGETS:
        optimal, dtr = _at(rows, "optimal", share), _at(rows, DTR, share)
        where = f"{name} @ {share:.0%}"
        out += _optimal_targets(optimal, where)
        if dtr is None or not dtr.available:
            why = "not run" if dtr is None else _short(dtr.reason)
            out.append([f"{DTR}: runs at this budget", where, why, "**no**"])
            continue
        if share == 0.33:
            out.append(
                [
                    f"{DTR} at 33%: <= 1.25x store-all",
                    where,
                    f"{dtr.time_ratio:.2f}x",
                    _met(dtr.time_ratio <= 1.25),
                ]
            )
        if name in STATIC and _followed(optimal):
            ratio = dtr.seconds / optimal.seconds
            out.append(
                [f"{DTR}: <= 1.15x the optimal plan", where, f"{ratio:.2f}x", _met(ratio <= 1.15)]
            )
    budgeted = [r for r in rows if r.budget is not None and r.available]
    over = [r.label for r in budgeted if r.tape_peak_bytes > r.budget]
    out.append(
        [
            "memory within budget, counted (every run)",
            name,
            f"{len(budgeted) - len(over)} of {len(budgeted)} rows"
            + (f"; over: {', '.join(over)}" if over else ""),
            _met(not over),
        ]
    )
    excess = [(r.traced_peak_bytes - r.budget, r.label) for r in budgeted]
    worst = max(excess, default=(0, "-"))
    out.append(
        [
            "memory within budget, traced (peak <= budget + X)",
            name,
            f"worst {worst[1]}: budget + {format_bytes(worst[0])}; X = {format_bytes(x)}",
            _met(worst[0] <= x),
        ]
    )
    return out


def bench(name, quick, repeats):
    builder, sizes, tiny = WORKLOADS[name]
    workload = builder(**(tiny if quick else sizes))
    size = workload.measure()
    rows = compare_graph(workload, BUDGETS, repeats, time_limit=0.5 if quick else 30.0)
    failures = failures_of(rows)
    head = (
        f"### {name}: {workload.description}\n\n{size.ops} ops; store-all saves "
        f"{format_bytes(size.saved_bytes)}\n\n"
    )
    tail = "\n\n" + "\n".join(f"**FAILURE**: {f}" for f in failures) if failures else ""
    targets = _targets(name, rows, transients(workload, size.ops))
    return head + _rows_table(rows) + tail, targets


def run(quick=False):
    repeats = 1 if quick else 7
    how = (
        f"Time: median of {repeats} runs of forward + backward, every method interleaved "
        "in one run; traced: tracemalloc peak of one more run; tape peak: "
        "`tape.stats.peak_bytes` (store-all: the bytes it saves); budgets: shares of "
        f"store-all's saved bytes; DTR in the targets: `{DTR}`."
    )
    parts = [
        "## Any program under a budget: graph workloads (`python -m benchmarks graph`)\n",
        environment(),
        "",
        how,
        "",
    ]
    targets = []
    for name in WORKLOADS:
        text, rows = bench(name, quick, repeats)
        parts += [text, ""]
        targets += rows
    parts += [
        "### Targets\n",
        table(["target", "workload", "figure", "met"], targets),
    ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
