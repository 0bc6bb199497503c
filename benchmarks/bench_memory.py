"""Byte budgets: the plan's predicted time against the measured one, the bytes held
against the budget, and the optimal plan against revolve at the same byte budget.

``python -m benchmarks memory``.  The workload is remat's residual MLP
(``h <- h + tanh(h W + b) V``, batch 32, 200 steps) at widths 16 and 256.
For each width the costs are measured once by ``Tape(memory=)``; the budgets
are multiples of the least any plan needs (and a share of what store-all
holds).  Every (budget, schedule) is planned in a first run (which measures),
then timed ``REPEATS`` times, interleaved; a time is the median of
``tape.stats.seconds`` (the chain's own forward and backward, without
tracemalloc).  Revolve gets the most slots that fit in the same bytes
(``Tape(memory=b, schedule="revolve")``).  Gradients are checked equal to
store-all's, and every run's ``tape.stats.peak_bytes`` against its budget.
"""

from benchmarks.common import environment, table  # noqa: I001  (pins BLAS threads first)

import gc
import os
import statistics

import numpy as np

from remat import memory, schedules
from remat.budget import Tape
from remat.workloads import resmlp

STEPS = 200
WIDTHS = (16, 256)
REPEATS = 7
MiB = 2**20


def budgets_for(costs):
    """A few budgets from tight to roomy: multiples of the least, and shares of store-all."""
    least = schedules.minimum_bytes(costs)
    full = sum(costs.tape_bytes)
    picked = {2 * least, 4 * least, full // 10, full // 3}
    return sorted(b for b in picked if least <= b < full)


def measure(width, steps, repeats):
    workload = resmlp(steps=steps, width=width)
    reference = workload.loss_and_gradients(Tape())[1]
    memory.clear_plans()
    probe = Tape(memory=2 * 2**30)
    workload.loss_and_gradients(probe)
    costs = probe.plans[0][1]
    cells = [(b, name) for b in budgets_for(costs) for name in ("optimal", "revolve")]
    memory.clear_plans()
    rows = {}
    for round_ in range(repeats + 1):  # round 0 measures and plans: not timed
        for cell in cells:
            budget, name = cell
            tape = Tape(memory=budget, schedule=None if name == "optimal" else name)
            gc.collect()
            grads = workload.loss_and_gradients(tape)[1]
            stats = tape.stats
            if not all(np.array_equal(g, r) for g, r in zip(grads, reference)):
                raise AssertionError(f"width {width}, {name} at {budget} B: gradients differ")
            row = rows.setdefault(
                cell,
                dict(
                    snapshots=stats.snapshots,
                    forward_steps=stats.forward_steps,
                    predicted=stats.predicted_seconds,
                    common=schedules.simulate(tape.plans[0][0], costs).time,
                    peak=0,
                    seconds=[],
                ),
            )
            row["peak"] = max(row["peak"], stats.peak_bytes)
            if round_:
                row["seconds"].append(stats.seconds)
    for row in rows.values():
        row["measured"] = statistics.median(row["seconds"])
        row["best"] = min(row["seconds"])
    return costs, rows


def run(quick=False):
    steps, widths, repeats = (20, (16, 32), 1) if quick else (STEPS, WIDTHS, REPEATS)
    load_before = os.getloadavg()[0]
    predicted_rows, versus_rows, worst, worst_median = [], [], 0.0, 0.0
    for width in widths:
        costs, rows = measure(width, steps, repeats)
        for (budget, name), row in rows.items():
            ratio = row["measured"] / row["predicted"]
            best = row["best"] / row["predicted"]
            worst = max(worst, abs(best - 1))
            worst_median = max(worst_median, abs(ratio - 1))
            predicted_rows.append(
                (
                    width,
                    f"{budget / MiB:.3f}",
                    name,
                    row["snapshots"],
                    row["forward_steps"],
                    f"{row['predicted']:.4f}",
                    f"{row['measured']:.4f}",
                    f"{ratio:.3f}",
                    f"{row['best']:.4f}",
                    f"{best:.3f}",
                    f"{row['peak'] / MiB:.3f}",
                    "yes" if row["peak"] <= budget else "**NO**",
                )
            )
        for budget in sorted({b for b, _ in rows}):
            best, rev = rows[budget, "optimal"], rows[budget, "revolve"]
            versus_rows.append(
                (
                    width,
                    f"{budget / MiB:.3f}",
                    f"{best['measured']:.4f}",
                    rev["snapshots"],
                    f"{rev['measured']:.4f}",
                    f"{rev['measured'] / best['measured']:.2f}",
                    f"{rev['common'] / best['common']:.2f}",
                )
            )
    return "\n".join(
        [
            "## Byte budgets: plan against measurement (`python -m benchmarks memory`)",
            "",
            environment(("numpy", "remat")),
            "",
            f"Residual MLP, batch 32, {steps} steps, `rm.Tape(memory=budget)`; times are the "
            f"median (and the fastest) of {repeats} runs of the chain's forward and backward "
            "(`tape.stats.seconds`), the plan measured once before; gradients checked equal "
            "to store-all's. Target: measured within 10% of predicted.",
            "",
            table(
                [
                    "width",
                    "budget MiB",
                    "plan",
                    "slots",
                    "forward_steps",
                    "predicted s",
                    "measured s",
                    "measured / predicted",
                    "fastest run s",
                    "fastest / predicted",
                    "peak MiB held",
                    "within budget",
                ],
                predicted_rows,
            ),
            "",
            f"Load average (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, "
            f"on {os.cpu_count()} cores: on a machine busy with other work, a whole run is "
            "slowed by what shares its cores while the short timings of the measurement "
            "mostly are not, so runs are slower than predicted there.",
            "",
            f"Largest |fastest / predicted - 1|: {worst:.1%}; of the medians: "
            f"{worst_median:.1%}. (The costs are the least of five timings of the first "
            "steps, so the fastest run is what they predict; on a machine shared with other "
            "work the median is slower.)",
            "",
            "At the same byte budget: the optimal plan against revolve with the most slots "
            "that fit (each planned by `Tape(memory=)` from its own measurement; the "
            "predicted ratio prices both plans with one measurement of the costs).",
            "",
            table(
                [
                    "width",
                    "budget MiB",
                    "optimal s",
                    "revolve slots",
                    "revolve s",
                    "revolve / optimal (measured)",
                    "revolve / optimal (predicted)",
                ],
                versus_rows,
            ),
            "",
        ]
    )


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
