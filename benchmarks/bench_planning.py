"""Planning byte budgets: exact plans of long chains that repeat a few kinds of layers.

``python -m benchmarks planning``.  ``Optimal``'s exact programme keeps one
row per distinct segment (:mod:`remat.schedules.planning`): a chain that cycles
through ``p`` kinds of layers has about ``p n`` distinct segments instead of
``n^2 / 2``, and its split search is ``p n^2 / 2`` cells a level instead of
``n^3 / 6``.  This benchmark plans 1000-step chains of period 1, 2, 4, 8 and
16 (and one whose steps all differ, like measured costs), exactly and over
200 blocks, at 1.5, 3 and 10 times the least memory, 128 levels.  A time is
this process's CPU time (``time.process_time``), the median of
``REPEATS`` plans, one BLAS thread, the contenders of a cell interleaved.
Where the exact programme is refused (its tables too large), the exact plan
of shorter random chains gives its cubic cost.

The second table measures what planning over blocks gives up near the least
memory, where its plans are furthest from the exact ones, on random chains
small enough to plan exactly (n = 150 and 250).

The last table is ``Tape(memory=)`` on 1000-step chains of residual layers
that cycle through a few kinds (each step with weights of its own), whose
measured times are pooled by kind of layer (:func:`remat.memory.pool_times`),
against the same chains with every step's own measurement.
"""

from benchmarks.common import block_ratio, environment, side_by_side, table  # noqa: I001  (BLAS first)

import os
import random
import statistics
import time

import numpy as np

import remat as rm
from remat import memory as budget_memory
from remat import schedules
from remat.schedules.planning import table_rows

STEPS = 1000
PERIODS = (1, 2, 4, 8, 16)
TIMES = (1.5, 3, 10)
BLOCKS = 200
REPEATS = 3
RANDOM_STEPS = (100, 200, 250)
GAP_STEPS = (150, 250)
GAP_TIMES = (1.2, 1.5, 3, 10)


def periodic_costs(steps, period, seed=0, jitter=0.0):
    """A chain cycling through ``period`` kinds of tanh layers (``period=None``: every step
    its own kind): widths from 32 to 256 (batch 16, float64), an advance about 1e-4 s
    per 64 columns, taping and reversing about three times that; the tape holds the input
    state and two of the output's size.  ``jitter`` spreads each step's times by that
    share, as measuring does (then no two steps cost the same)."""
    rng = random.Random(seed)
    count = steps if period is None else period
    kinds = []
    for _ in range(count):
        width = rng.choice((32, 48, 64, 96, 128, 192, 256))
        forward = width / 64 * 1e-4 * rng.uniform(0.9, 1.1)
        kinds.append((width, forward, 3 * forward * rng.uniform(0.9, 1.1)))
    order = [i % count for i in range(steps)]
    state = [16 * 8 * kinds[k][0] for k in order] + [16 * 8 * kinds[order[0]][0]]
    spread = [1 + jitter * rng.uniform(-1, 1) for _ in range(2 * steps)]
    return schedules.ChainCosts(
        [kinds[k][1] * spread[i] for i, k in enumerate(order)],
        [kinds[k][2] * spread[steps + i] for i, k in enumerate(order)],
        state,
        [state[i] + 2 * state[i + 1] for i in range(steps)],
    )


def cpu_seconds(plan, repeats):
    """Median CPU seconds of ``plan()`` and its last result; a refusal is its message."""
    seconds, result = [], None
    for _ in range(repeats):
        begin = time.process_time()
        try:
            result = plan()
        except ValueError as error:
            return None, str(error)
        seconds.append(time.process_time() - begin)
    return statistics.median(seconds), result


def period_rows(quick):
    steps, periods, times = (40, (1, 4), (3,)) if quick else (STEPS, PERIODS, TIMES)
    blocks, repeats = (8, 1) if quick else (BLOCKS, REPEATS)
    rows = []
    for period in (*periods, None):
        costs = periodic_costs(steps, period)
        sizes = (costs.state_bytes, costs.tape_bytes, costs.forward_time, costs.reverse_time)
        distinct = table_rows(*sizes)
        least = schedules.minimum_bytes(costs)
        for factor in times:
            memory = int(factor * least)
            exact_s, exact = cpu_seconds(lambda: schedules.Optimal(costs, memory), repeats)
            block_s, block = cpu_seconds(
                lambda: schedules.Optimal(costs, memory, blocks=blocks), repeats
            )
            if exact_s is None:
                size = exact.split("would take ")[1].split(" (")[0]
                exact_cell, gap = f"refused (tables of {size})", "-"
            else:
                exact_cell = f"{exact_s:.3f}"
                ratio = None if block_s is None else block.predicted_time / exact.predicted_time
                gap = "too tight" if ratio is None else f"{ratio:.3f}"
            rows.append(
                (
                    steps,
                    "all differ" if period is None else period,
                    distinct,
                    f"{factor} x least",
                    exact_cell,
                    "too tight" if block_s is None else f"{block_s:.3f}",
                    gap,
                )
            )
    return rows


def random_rows(quick):
    """The exact programme on chains whose steps all differ: cubic in the length."""
    rows = []
    for steps in (20, 30) if quick else RANDOM_STEPS:
        costs = periodic_costs(steps, None, seed=1)
        memory = 3 * schedules.minimum_bytes(costs)
        seconds, _ = cpu_seconds(lambda: schedules.Optimal(costs, memory), 1 if quick else REPEATS)
        rows.append((steps, f"{seconds:.3f}", f"{seconds / steps**3 * 1e9:.1f}"))
    return rows


def block_gap_rows(quick):
    """Block plans near the least memory: even blocks against blocks starting at small
    states (the default), both against the exact plan (predicted times)."""
    rows = []
    chains = (
        ("5 widths in a cycle, times measured-like (+-5%)", 5, 0.05),
        ("every step its own width and times", None, 0.0),
    )
    for name, period, jitter in chains:
        for steps in (30,) if quick else GAP_STEPS:
            costs = periodic_costs(steps, period, seed=3, jitter=jitter)
            least = schedules.minimum_bytes(costs)
            for factor in (1.5,) if quick else GAP_TIMES:
                memory = int(factor * least)
                exact = schedules.Optimal(costs, memory).predicted_time
                row = [name, steps, f"{factor} x least"]
                for size in (5, 2):
                    blocks = steps // size
                    for given in (schedules.block_starts(steps, blocks), blocks):
                        row.append(block_ratio(costs, memory, given, exact))
                rows.append(tuple(row))
    return rows


def residual_layers(steps, period, seed=0):
    """``steps`` residual layers ``h + tanh(h @ w) @ v`` on a (16, 32) state, cycling through
    ``period`` inner widths (32 to 128), each step with weights of its own."""
    rng = np.random.default_rng(seed)
    inner = [32, 64, 96, 128, 48, 80, 112, 40][:period]
    layers = []
    for i in range(steps):
        w = rm.tensor(rng.standard_normal((32, inner[i % period])) / 6, requires_grad=True)
        v = rm.tensor(rng.standard_normal((inner[i % period], 32)) / 12, requires_grad=True)
        layers.append(lambda h, w=w, v=v: h + rm.tanh(h @ w) @ v)
    return layers, rm.tensor(rng.standard_normal((16, 32)), requires_grad=True)


def repeated_rows(quick):
    """Tape(memory=) on a chain of repeated layers, times pooled by kind or not: the plan
    it makes, and the CPU seconds of planning it from the measured costs and of the
    whole call (measuring, planning, running the forward sweep), the two settings
    interleaved, medians of ``REPEATS``."""
    steps, periods, repeats = (40, (1, 2), 1) if quick else (STEPS, (1, 2, 4, 8), REPEATS)
    pooled_kind = budget_memory.step_kind
    settings = {"pooled by kind": pooled_kind, "each step its own": id}
    rows = []
    for period in periods:
        layers, x = residual_layers(steps, period)
        budget_memory.clear_plans()
        with rm.Tape(memory=2**40) as tape:  # everything fits: the costs, measured once
            tape.chain(layers, x)
        budget = 3 * schedules.minimum_bytes(tape.plans[0][1])
        tapes = {}

        def call(name):
            budget_memory.step_kind = settings[name]  # id: every step a kind of its own
            budget_memory.clear_plans()
            try:
                with rm.Tape(memory=budget) as tapes[name]:
                    tapes[name].chain(layers, x)
            finally:
                budget_memory.step_kind = pooled_kind

        whole = side_by_side(
            {name: lambda name=name: call(name) for name in settings},
            repeats=repeats,
            warmup=0,
            clock=time.process_time,
        )
        plans = {name: tape.plans[0] for name, tape in tapes.items()}
        planning = side_by_side(
            {
                name: lambda costs=costs: budget_memory.plan_optimal(costs, budget)
                for name, (_, costs) in plans.items()
            },
            repeats=repeats,
            warmup=0,
            clock=time.process_time,
        )
        for name, (plan, _) in plans.items():
            kind = "exact" if getattr(plan, "blocks", None) is None else f"blocks={plan.blocks}"
            rows.append(
                (
                    steps,
                    period,
                    name,
                    f"{type(plan).__name__}, {kind}",
                    f"{planning[name]:.3f}",
                    f"{whole[name]:.3f}",
                    f"{tapes[name].stats.peak_bytes} <= {budget}",
                )
            )
    return rows


def run(quick=False):
    load_before = os.getloadavg()[0]
    periods = table(
        [
            "steps",
            "period (kinds)",
            "table rows",
            "budget",
            "exact s (CPU)",
            f"blocks={BLOCKS} s (CPU)",
            "blocks / exact time",
        ],
        period_rows(quick),
    )
    randoms = table(["steps", "exact s (CPU)", "ns per step^3"], random_rows(quick))
    gaps = table(
        [
            "costs",
            "steps",
            "budget",
            "5 steps a block, even",
            "5 a block, at small states",
            "2 steps a block, even",
            "2 a block, at small states",
        ],
        block_gap_rows(quick),
    )
    repeated = table(
        [
            "steps",
            "kinds of layer",
            "times",
            "plan",
            "planning s (CPU)",
            "Tape(memory=) call s (CPU)",
            "peak bytes",
        ],
        repeated_rows(quick),
    )
    load_after = os.getloadavg()[0]
    return "\n".join(
        [
            "## Planning byte budgets exactly (`python -m benchmarks planning`)",
            "",
            environment(),
            "",
            f"Load average (1 min) {load_before:.2f} before, {load_after:.2f} after, on "
            f"{os.cpu_count()} cores (shared with other work; CPU time leaves most of it out).",
            "",
            f"Time to plan chains of a few kinds of layers in a cycle, `Optimal(costs, "
            f"memory)` (exact) and `Optimal(costs, memory, blocks={BLOCKS})`, 128 levels; "
            f"CPU seconds, median of {REPEATS}; 'table rows' is what each of the exact "
            "programme's two tables holds: a row per distinct segment and the stacks of "
            "the longest (period 1 is a loop, planned by its own length-only table); the "
            "last column is the block plan's predicted time over the exact plan's.",
            "",
            periods,
            "",
            "The exact programme where every step differs (the same kind of costs, one kind a "
            "step, 3 x least): cubic in the length, so 1000 steps would take about "
            "(1000 / 250)^3 = 64 times the 250-step figure, and 2 GB of tables, which "
            "`Optimal` refuses.",
            "",
            randoms,
            "",
            "What planning over blocks gives up near the least memory: the block plan's "
            "predicted time over the exact plan's, blocks of even lengths "
            "(`blocks=block_starts(n, B)`) against blocks whose boundaries move to the "
            "smallest state within half a block (`blocks=B`, the default placement).",
            "",
            gaps,
            "",
            "`Tape(memory=3 x least)` on chains of residual layers (16 x 32 states) cycling "
            "through a few inner widths, each step with weights of its own: measured times "
            "pooled by kind of layer (the default), or each step's own (a stand-in "
            "`step_kind`); the plan's CPU seconds (`plan_optimal` on the measured costs) "
            "and the whole call's (measuring 1000 steps, planning, the forward "
            f"sweep); the two settings interleaved, medians of {REPEATS}. One kind of layer "
            "pooled is a loop to the planner.",
            "",
            repeated,
            "",
        ]
    )
