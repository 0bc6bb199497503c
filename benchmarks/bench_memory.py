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

If torch imports, the 200-block residual MLP (width 256, float64, one thread)
also runs under torch's ``checkpoint_sequential`` with ``round(sqrt(n))``
segments (non-reentrant), and remat's optimal plan gets the bytes that
schedule holds under remat's memory model: ``segments - 1`` stored segment
inputs and the last segment's ``ceil(n / segments)`` step tapes.  Each
library's time is a ratio to its own run without checkpointing (whole
forward and backward, wall time, interleaved medians).
"""

from benchmarks.common import environment, side_by_side, table  # noqa: I001  (BLAS first)

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


def torch_rows(width, steps, repeats):
    """[(library, plan, seconds, ratio to its own no-checkpoint run)], or a reason string."""
    try:
        import torch
        from torch.utils.checkpoint import checkpoint_sequential
    except ImportError as error:
        return f"torch skipped: {error}"
    torch.set_num_threads(1)
    workload = resmlp(steps=steps, width=width)
    w, b, v = (torch.tensor(p.numpy(), requires_grad=True) for p in workload.params)
    h0 = torch.tensor(workload.state.numpy())

    def block(h):
        return h + torch.tanh(h @ w + b) @ v

    segments = max(1, round(steps**0.5))

    def plain():
        h = h0
        for _ in range(steps):
            h = block(h)
        (h * h).mean().backward()

    def sequential():
        h = checkpoint_sequential([block] * steps, segments, h0, use_reentrant=False)
        (h * h).mean().backward()

    memory.clear_plans()
    probe = Tape(memory=2 * 2**30)
    workload.loss_and_gradients(probe)
    costs = probe.plans[0][1]
    per = -(-steps // segments)
    budget = (segments - 1) * costs.state_bytes[0] + per * costs.tape_bytes[0]
    times = side_by_side(
        {
            "torch": plain,
            "torch ckpt": sequential,
            "remat": lambda: workload.loss_and_gradients(Tape()),
            "remat budget": lambda: workload.loss_and_gradients(Tape(memory=budget)),
        },
        repeats=repeats,
    )
    return [
        ("torch", "no checkpointing", times["torch"], 1.0),
        (
            "torch",
            f"checkpoint_sequential, {segments} segments",
            times["torch ckpt"],
            times["torch ckpt"] / times["torch"],
        ),
        ("remat", "store-all", times["remat"], 1.0),
        (
            "remat",
            f"Tape(memory={budget / MiB:.3f} MiB), optimal",
            times["remat budget"],
            times["remat budget"] / times["remat"],
        ),
    ]


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
    width, blocks = (16, 20) if quick else (256, STEPS)
    found = torch_rows(width, blocks, 1 if quick else REPEATS)
    if isinstance(found, str):
        torch_part = [found, ""]
    else:
        torch_part = [
            f"Against torch at the same bytes: {blocks}-block residual MLP, width {width}.",
            "",
            table(
                ["library", "plan", "s (fwd+bwd)", "ratio to its own no-checkpoint run"],
                [(lib, plan, f"{t:.4f}", f"{r:.2f}") for lib, plan, t, r in found],
            ),
            "",
        ]
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
            *torch_part,
        ]
    )


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
