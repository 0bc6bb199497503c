"""Byte budgets: the time to plan, what planning over blocks gives up, the plan's
predicted time against the measured one, the bytes held against the budget, and the
optimal plan against revolve and torch at the same byte budget.

``python -m benchmarks memory``.  Planning is timed on chains of 100, 1000 and
10000 steps (heterogeneous, and all alike) at 3 and 30 times the least memory;
the block plan is compared with the exact one on a 300-step chain.  The timed
tables run twice, in whole passes: in CPU time (``time.perf_counter`` made
``time.process_time`` for remat's measuring, ``tape.stats.seconds`` and the
torch runs alike: see :func:`clock`) and in wall time.  The workload is remat's residual MLP
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

from benchmarks.common import block_ratio, environment, side_by_side, table  # noqa: I001  (BLAS first)

import gc
import os
import random
import statistics
import time
from contextlib import contextmanager

import numpy as np

from remat import memory, schedules
from remat.budget import Tape
from remat.workloads import resmlp

STEPS = 200
WIDTHS = (16, 256)
REPEATS = 7
MiB = 2**20
PLAN_STEPS = (100, 1000, 10000)
CLOCKS = ("cpu", "wall")


@contextmanager
def clock(kind):
    """Make ``time.perf_counter`` (what remat's measuring, ``tape.stats.seconds`` and
    ``side_by_side`` read) this process's CPU time for ``kind == "cpu"``.

    On a machine shared with other work, a whole run is slowed by what shares its
    cores while the short timings of the measurement (the least of five) mostly are
    not; CPU time leaves the machine's contention out and tests the cost model.
    """
    saved = time.perf_counter
    if kind == "cpu":
        time.perf_counter = time.process_time
    try:
        yield
    finally:
        time.perf_counter = saved


def chain_costs(steps, seed=0):
    """Costs of a heterogeneous chain like remat's ``widths`` workload: tanh layers of
    widths cycling through 64, 96, 32, 128, 48 (batch 16, float64), times drawn
    around 0.1 ms per advance and three times that per taped-and-reversed step."""
    rng = random.Random(seed)
    cycle = (64, 96, 32, 128, 48)
    state = [16 * cycle[i % len(cycle)] * 8 for i in range(steps + 1)]
    forward = [rng.uniform(1.0, 1.3) * 1e-4 for _ in range(steps)]
    return schedules.ChainCosts(
        forward,
        [3 * f * rng.uniform(0.9, 1.1) for f in forward],
        state,
        [state[i] + 2 * state[i + 1] for i in range(steps)],
    )


def plan_rows(quick):
    """Seconds to plan (as ``Tape(memory=)`` does, after measuring) n steps."""
    rows = []
    for steps in (10, 100) if quick else PLAN_STEPS:
        hetero = chain_costs(steps)
        alike = schedules.ChainCosts.uniform(steps, 1e-4, 3e-4, 8192, 24576)
        for kind, costs in (("heterogeneous", hetero), ("all steps alike", alike)):
            least = schedules.minimum_bytes(costs)
            for times in (3, 30):
                begin = time.perf_counter()
                plan = memory.plan_optimal(costs, times * least)
                seconds = time.perf_counter() - begin
                blocks = getattr(plan, "blocks", None)
                how = type(plan).__name__ + (f", {blocks} blocks" if blocks else "")
                rows.append((steps, kind, f"{times} x least", how, f"{seconds:.3f}"))
    return rows


def block_gap_rows(quick):
    """The block plan's predicted time against the exact plan's, where both are affordable."""
    steps = 30 if quick else 300
    costs = chain_costs(steps, seed=1)
    least = schedules.minimum_bytes(costs)
    rows = []
    for times in (1.5, 3, 10):
        budget = int(times * least)
        exact = schedules.Optimal(costs, budget).predicted_time
        row = [steps, f"{times} x least"]
        for blocks in (steps // 5, steps // 2):
            row.append(block_ratio(costs, budget, blocks, exact))
        rows.append(tuple(row))
    return rows


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
    steps, widths, repeats = (20, (16,), 1) if quick else (STEPS, WIDTHS, REPEATS)
    load_before = os.getloadavg()[0]
    predicted_rows, versus_rows, torch_parts = [], [], []
    worst = dict.fromkeys(CLOCKS, 0.0)
    for kind in CLOCKS:  # whole passes, one clock each (costs measured under it too)
        with clock(kind):
            for width in widths:
                costs, rows = measure(width, steps, repeats)
                for (budget, name), row in rows.items():
                    ratio = row["measured"] / row["predicted"]
                    worst[kind] = max(worst[kind], abs(ratio - 1))
                    predicted_rows.append(
                        (
                            kind,
                            width,
                            f"{budget / MiB:.3f}",
                            name,
                            row["snapshots"],
                            row["forward_steps"],
                            f"{row['predicted']:.4f}",
                            f"{row['measured']:.4f}",
                            f"{ratio:.3f}",
                            f"{row['best'] / row['predicted']:.3f}",
                            f"{row['peak'] / MiB:.3f}",
                            "yes" if row["peak"] <= budget else "**NO**",
                        )
                    )
                for budget in sorted({b for b, _ in rows}):
                    best, rev = rows[budget, "optimal"], rows[budget, "revolve"]
                    versus_rows.append(
                        (
                            kind,
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
                torch_parts = [found, ""]
            else:
                torch_parts += [(kind, *row) for row in found]
    load_after = os.getloadavg()[0]
    if torch_parts and not isinstance(torch_parts[0], str):
        torch_part = [
            f"Against torch at the same bytes: {blocks}-block residual MLP, width {width}, "
            "float64, one thread each; medians of interleaved runs.",
            "",
            table(
                ["clock", "library", "plan", "s (fwd+bwd)", "ratio to its own no-checkpoint run"],
                [(k, lib, plan, f"{t:.4f}", f"{r:.2f}") for k, lib, plan, t, r in torch_parts],
            ),
            "",
        ]
    else:
        torch_part = torch_parts
    return "\n".join(
        [
            "## Byte budgets: plan against measurement (`python -m benchmarks memory`)",
            "",
            environment(("numpy", "remat", "torch")),
            "",
            f"Load average (1 min) {load_before:.2f} before, {load_after:.2f} after, on "
            f"{os.cpu_count()} cores: the machine was shared with other work (other "
            "sessions' tests and benchmarks), so every table is timed twice, in whole "
            "passes: in this process's CPU time (`cpu`: what the cost model can predict; "
            "what shares the cores is left out) and in wall time (`wall`: what a user "
            "sees, here slowed by the machine's load).",
            "",
            "Time to plan (`memory.plan_optimal`, what `Tape(memory=)` runs after measuring; "
            "wall time of one run each, on the loaded machine). Heterogeneous costs are "
            "those of a chain like the `widths` workload; budgets are multiples of the least "
            "any plan needs.",
            "",
            table(["steps", "costs", "budget", "plan", "seconds"], plan_rows(quick)),
            "",
            "What planning over blocks gives up, where the exact programme is affordable: "
            "the block plan's predicted time over the exact plan's (`Optimal(costs, "
            "budget, blocks=B)` against `Optimal(costs, budget)`, same 128 levels).",
            "",
            table(
                ["steps", "budget", "5 steps a block", "2 steps a block"],
                block_gap_rows(quick),
            ),
            "",
            f"Residual MLP, batch 32, {steps} steps, `rm.Tape(memory=budget)`; times are the "
            f"median (and the fastest) of {repeats} runs of the chain's forward and backward "
            "(`tape.stats.seconds`), the plan measured once before, all cells interleaved; "
            "gradients checked equal to store-all's. Target: measured within 10% of "
            "predicted.",
            "",
            table(
                [
                    "clock",
                    "width",
                    "budget MiB",
                    "plan",
                    "slots",
                    "forward_steps",
                    "predicted s",
                    "measured s",
                    "measured / predicted",
                    "fastest / predicted",
                    "peak MiB held",
                    "within budget",
                ],
                predicted_rows,
            ),
            "",
            "Largest |measured / predicted - 1| of the medians: "
            + ", ".join(f"{k} {v:.1%}" for k, v in worst.items())
            + ".",
            "",
            "At the same byte budget: the optimal plan against revolve with the most slots "
            "that fit (each planned by `Tape(memory=)` from its own measurement; the "
            "predicted ratio prices both plans with one measurement of the costs).",
            "",
            table(
                [
                    "clock",
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
