"""Graphs under a memory budget (issue 26): each target of the issue, on its four workloads,
at two sizes.

The workloads of :mod:`remat.graph_workloads` (a U-Net, a ResNet, a transformer op
by op, an adaptive ODE solver) each run at two sizes, the same graph at each (the
same ops; only the arrays grow):

* **small**: the data larger than the builders' defaults, so that the saved values
  outweigh the parameters; store-all saves 2-7 MiB and spends tens of us an op (3-14
  ms for 88-335 ops, idle), so what DTR pays per eviction and recomputation in Python
  (tens of us) weighs as much as the arithmetic;
* **large**: wider layers, longer signals, a larger batch: store-all saves 74-118 MiB
  and spends milliseconds an op (its forward and backward, over the ops; the ODE the
  least, its step-size ops being scalars), so the arithmetic outweighs the
  bookkeeping, as on the GPU nets of the DTR paper, whose figure (3x less memory for
  about 20% more compute) the 33% target holds DTR to.  The optimal plan runs at this
  size too (about two minutes of solving in all): its prediction and DTR's distance
  to it are measured where the per-op costs are not Python's.

Each size is measured by :func:`remat.graph_compare.compare_graph` (the function
``remat compare --graph`` prints): store-all, ``rm.checkpoint`` per block, DTR with
each heuristic and the optimal plan, at 50% and 33% of store-all's saved bytes,
every method in one run, interleaved, median of the repeats, every gradient checked
bit for bit against store-all's.  A table sets the two sizes side by side; then
each target is printed beside its figure, at each size:

* the optimal plan's measured time within 10% of its prediction;
* the optimal plan's solve time (at most 30 s on graphs of 300 ops);
* DTR (``h_dtr_eq``, the default heuristic) at 33%: at most 1.25x store-all's time;
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
from remat.graph_compare import METHODS, compare_graph, failures_of
from remat.graph_workloads import adaptive_ode, resnet, transformer_ops, unet
from remat.units import format_bytes

SIZES = ("small", "large")
WORKLOADS = {  # name: (builder, {size: its keywords}, quick keywords)
    "unet": (
        unet,
        {"small": dict(length=256, batch=8), "large": dict(width=32, length=512, batch=16)},
        dict(levels=2, width=4, length=16, batch=2),
    ),
    "resnet": (
        resnet,
        {"small": dict(length=128, batch=16), "large": dict(width=64, length=256, batch=16)},
        dict(stages=2, width=4, length=8, batch=2),
    ),
    "transformer_ops": (
        transformer_ops,
        {"small": dict(context=64, batch=4), "large": dict(width=256, context=128, batch=4)},
        dict(blocks=1, width=8, heads=2, context=8, batch=2),
    ),
    "adaptive_ode": (  # the same steps at both sizes (7, none rejected): the same graph
        adaptive_ode,
        {"small": dict(horizon=0.7, batch=512), "large": dict(horizon=0.7, batch=32768)},
        dict(horizon=0.2, dim=2, batch=8),
    ),
}
STATIC = ("unet", "resnet", "transformer_ops")  # the ODE's graph follows its data
BUDGETS = (0.5, 0.33)
DTR = "dtr:h_dtr_eq"  # the default heuristic: what the targets hold DTR to
LARGE_METHODS = METHODS  # the optimal plan too (about 2 minutes of the run's solving)
QUICK_LARGE = tuple(m for m in METHODS if m != "optimal")  # the smoke test plans once a size


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


def _ratio(row):
    """A row's time over store-all's, as a cell ("-" where it did not run)."""
    return f"{row.time_ratio:.2f}x" if row is not None and row.available else "-"


def _sizes_table(by_size):
    """Each method of a workload at each budget, its two sizes side by side: time over
    store-all's and ops recomputed (``by_size``: size -> its rows)."""
    small, large = by_size["small"], by_size["large"]
    cells = []
    for row in small[1:]:  # store-all is 1.00x at both
        other = next((r for r in large if r.label == row.label), None)
        cells.append(
            [
                row.label,
                _ratio(row),
                _ratio(other),
                "-" if not row.available else row.recomputed_ops,
                "-" if other is None or not other.available else other.recomputed_ops,
            ]
        )
    headers = ["method", "small: vs store-all", "large: vs store-all"]
    return table([*headers, "small: recomputed ops", "large: recomputed ops"], cells)


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


def _targets(name, size, rows, x):
    """The target rows of one workload at one size (``x``: its transients): [target,
    workload, figure, met]."""
    out = []
    for share in BUDGETS:
        optimal, dtr = _at(rows, "optimal", share), _at(rows, DTR, share)
        where = f"{name} ({size}) @ {share:.0%}"
        if optimal is not None:  # (not run at the large size of a quick run)
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
    where = f"{name} ({size})"
    out.append(
        [
            "memory within budget, counted (every run)",
            where,
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
            where,
            f"worst {worst[1]}: budget + {format_bytes(worst[0])}; X = {format_bytes(x)}",
            _met(worst[0] <= x),
        ]
    )
    return out


def _side_by_side(*targets):
    """Target rows of several sizes, each target's rows together (the sizes in the order
    given), in the order the targets first come."""
    key = lambda row: (row[0], row[1].split(" @ ")[-1] if " @ " in row[1] else "")  # noqa: E731
    first = {}
    for rows in targets:
        for row in rows:
            first.setdefault(key(row), len(first))
    return sorted((row for rows in targets for row in rows), key=lambda row: first[key(row)])


def bench(name, size, quick, repeats):
    """One workload at one size: (its section's text, its rows, its target rows)."""
    builder, sizes, tiny = WORKLOADS[name]
    workload = builder(**(tiny if quick else sizes[size]))
    measured = workload.measure()
    methods = METHODS if size == "small" else QUICK_LARGE if quick else LARGE_METHODS
    rows = compare_graph(workload, BUDGETS, repeats, methods, time_limit=0.5 if quick else 30.0)
    failures = failures_of(rows)
    per_op = rows[0].seconds / measured.ops * 1e6
    head = (
        f"### {name}, {size}: {workload.description}\n\n{measured.ops} ops; store-all saves "
        f"{format_bytes(measured.saved_bytes)} and runs forward and backward in "
        f"{rows[0].seconds * 1e3:.1f} ms ({per_op:.0f} us an op)\n\n"
    )
    tail = "\n\n" + "\n".join(f"**FAILURE**: {f}" for f in failures) if failures else ""
    targets = _targets(name, size, rows, transients(workload, measured.ops))
    return head + _rows_table(rows) + tail, rows, targets


def run(quick=False):
    repeats = 1 if quick else 7
    how = (
        f"Time: median of {repeats} runs of forward + backward, every method interleaved "
        "in one run; traced: tracemalloc peak of one more run; tape peak: "
        "`tape.stats.peak_bytes` (store-all: the bytes it saves); budgets: shares of "
        f"store-all's saved bytes; DTR in the targets: `{DTR}`. Each workload at two sizes, "
        "one graph: small (tens of us an op: DTR's bookkeeping in Python weighs as much as "
        "the arithmetic) and large (milliseconds an op, 74-118 MiB saved: the arithmetic "
        "outweighs the bookkeeping, as on the GPU nets of the DTR paper)."
    )
    if quick:
        how += f" Quick: both sizes tiny; the large one runs {', '.join(QUICK_LARGE)}."
    parts = [
        "## Any program under a budget: graph workloads (`python -m benchmarks graph`)\n",
        environment(),
        "",
        how,
        "",
    ]
    targets = []
    for name in WORKLOADS:
        by_size, sized = {}, []
        for size in SIZES:
            text, by_size[size], rows = bench(name, size, quick, repeats)
            parts += [text, ""]
            sized.append(rows)
        parts += [f"### {name}: the two sizes side by side\n", _sizes_table(by_size), ""]
        targets += _side_by_side(*sized)
    parts += [
        "### Targets\n",
        table(["target", "workload", "figure", "met"], targets),
    ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
