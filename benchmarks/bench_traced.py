"""The bytes a budget counts against the bytes actually held: tracemalloc's peak of a
budgeted run, across budgets and schedules, beside the budget and ``tape.stats``.

``python -m benchmarks traced``.  The workload is remat's residual MLP
(``h <- h + tanh(h W + b) V``, width 64, batch 32, 100 steps, float64: 16 KiB
states).  Under ``rm.Tape(memory=b)`` (the optimal plan, and revolve and mixed
with the most slots that fit) the budgets are shares of what store-all holds as
tracemalloc sees it; under ``rm.Tape(snapshots=s)`` every schedule runs with a few
slot counts.  Each tape runs twice (the first measures, plans and caches the plan);
the second is traced from before the forward to after the backward.  Nothing is
timed.  Gradients are checked equal to store-all's.

A run may hold, besides its budget, what the budget does not count (the step
being evaluated, cotangents, gradients): X, measured here for this workload
with tracemalloc (:func:`transients`).  The full run draws docs/memory_traced.png:
tracemalloc's peak against the budget (``memory=``) and against
``tape.stats.peak_bytes`` (``snapshots=``), with the lines y = x and y = x + X.
"""

from benchmarks.common import environment, figure, table, traced_peak  # noqa: I001  (BLAS first)

from pathlib import Path

import numpy as np

from remat import memory
from remat.budget import Tape
from remat.tape import Recorder
from remat.workloads import resmlp

PLOT = Path(__file__).resolve().parent.parent / "docs" / "memory_traced.png"
KiB = 1024
SHARES = (0.02, 0.04, 0.08, 0.15, 0.3, 0.6, 1.0)
BUDGETED = ("optimal", "revolve", "mixed")
SLOTTED = ("revolve", "online", "mixed", "periodic")
SLOTS = (2, 4, 8, 16)


def transients(workload):
    """X, in bytes, for ``workload``: ``2 M + 3 S + 3 G + c`` (the README's memory model).

    Measured with tracemalloc and NumPy, apart from remat's own count: M is the peak
    of one recorded call of the step (its tape, temporaries and output), S the
    state's bytes, G the parameters', c = 64 KiB and 1 KiB for each record of each
    step (the records of one recorded call, counted; at most every step is held).
    """
    state = workload.state
    with Recorder() as recorder:
        m = traced_peak(lambda: workload.step(state))
    s = state.numpy().nbytes
    g = sum(p.numpy().nbytes for p in workload.params)
    return 2 * m + 3 * s + 3 * g + 64 * KiB + 1024 * len(recorder.records) * workload.steps


def measure(quick=False):
    """Rows: (kind, schedule, budget or slots, budget bytes, peak_bytes, traced), and X."""
    steps, width = (20, 16) if quick else (100, 64)
    workload = resmlp(steps=steps, width=width, batch=32)
    memory.clear_plans()
    reference = workload.loss_and_gradients(Tape())[1]
    store_all = traced_peak(lambda: workload.loss_and_gradients(Tape()))
    x = transients(workload)
    rows = []

    def add(kind, name, setting, budget, make_tape):
        try:
            workload.loss_and_gradients(make_tape())  # measures, plans, caches
        except ValueError as error:
            if "too small" not in str(error):
                raise
            return
        tape = make_tape()
        peak = traced_peak(lambda: workload.loss_and_gradients(tape))
        grads = [p.grad for p in workload.params]
        if not all(np.array_equal(g, r) for g, r in zip(grads, reference)):
            raise AssertionError(f"{kind} {name} {setting}: gradients differ from store-all's")
        rows.append((kind, name, setting, budget, tape.stats.peak_bytes, peak))

    for share in SHARES[1::2] if quick else SHARES:
        budget = int(share * store_all)
        for name in BUDGETED:
            schedule = None if name == "optimal" else name
            add("memory", name, f"{share} x store-all", budget, _budgeted(budget, schedule))
    for name in SLOTTED:
        for s in SLOTS[:2] if quick else SLOTS:
            add("snapshots", name, f"s = {s}", None, _slotted(s, name))
    for name in ("sqrt", "store_all"):
        add("snapshots", name, "-", None, _slotted(None, name))
    memory.clear_plans()
    return rows, x, store_all, workload.description, steps


def _budgeted(budget, schedule):
    return lambda: Tape(memory=budget, schedule=schedule)


def _slotted(slots, schedule):
    return lambda: Tape(snapshots=slots, schedule=schedule)


def markdown(rows, x):
    headers = [
        "tape",
        "schedule",
        "budget",
        "budget KiB",
        "tape.stats.peak_bytes KiB",
        "tracemalloc KiB",
        "tracemalloc / budget",
        "within budget + X",
    ]
    cells = []
    for kind, name, setting, budget, counted, peak in rows:
        bound = (budget if budget is not None else counted) + x
        cells.append(
            (
                f"{kind}=",
                name,
                setting,
                "-" if budget is None else f"{budget / KiB:.0f}",
                f"{counted / KiB:.0f}",
                f"{peak / KiB:.0f}",
                "-" if budget is None else f"{peak / budget:.2f}",
                "yes" if peak <= bound else "**NO**",
            )
        )
    return table(headers, cells)


def _kib(value, _position=None):
    return f"{value / KiB:.0f} KiB" if value < 1024 * KiB else f"{value / KiB**2:g} MiB"


def plot(rows, x, description, path):
    """Two panels: peak against the budget (memory=) and against peak_bytes (snapshots=)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    fig, panels = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    styles = {  # one marker and colour for each schedule, in both panels
        "optimal": ("o", "C0"),
        "revolve": ("s", "C1"),
        "mixed": ("D", "C2"),
        "online": ("^", "C3"),
        "periodic": ("v", "C4"),
        "sqrt": ("P", "C5"),
        "store_all": ("X", "C7"),
    }
    values = [v for r in rows for v in (r[3] or r[4], r[5])]
    low, high = min(values) / 1.5, max(values) * 1.5
    ticks = [2**k * KiB for k in range(0, 20) if low <= 2**k * KiB <= high]
    for panel, kind, xlabel in (
        (panels[0], "memory", "budget, rm.Tape(memory=...)"),
        (panels[1], "snapshots", "tape.stats.peak_bytes, rm.Tape(snapshots=s)"),
    ):
        for name, (marker, colour) in styles.items():
            chosen = [r for r in rows if r[0] == kind and r[1] == name]
            if chosen:
                panel.plot(
                    [r[3] if kind == "memory" else r[4] for r in chosen],
                    [r[5] for r in chosen],
                    marker,
                    color=colour,
                    mfc="none",
                    ms=8 if name == "optimal" else 6,
                    label=name,
                )
        line = np.geomspace(low, high, 100)
        panel.plot(line, line, "k-", lw=1, label="y = x")
        panel.plot(line, line + x, "k--", lw=1, label=f"y = x + X (X = {_kib(x)})")
        panel.set(xscale="log", yscale="log", xlim=(low, high), ylim=(low, high))
        for axis in (panel.xaxis, panel.yaxis):
            axis.set_major_locator(FixedLocator(ticks))
            axis.set_major_formatter(FuncFormatter(_kib))
            axis.set_minor_locator(NullLocator())
        panel.set_xlabel(xlabel)
        panel.grid(alpha=0.3)
        panel.legend(fontsize="small", loc="lower right")
    panels[0].set_ylabel("tracemalloc peak (forward + backward)")
    fig.suptitle(f"Bytes held against bytes budgeted: {description}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(quick=False):
    rows, x, store_all, description, steps = measure(quick)
    out = [
        "## Bytes held against the budget (`python -m benchmarks traced`)",
        "",
        environment(("numpy", "remat")),
        "",
        f"{description}, {steps} steps; store-all peaks at {store_all / KiB:.0f} KiB in "
        f"tracemalloc; X = {x / KiB:.0f} KiB (the transients a budget does not count).",
        "",
        markdown(rows, x),
        "",
    ]
    if not quick:
        draw = lambda: plot(rows, x, f"{description}, {steps} steps", PLOT)  # noqa: E731
        out += figure(draw, f"![tracemalloc peak against the budget](../docs/{PLOT.name})")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
