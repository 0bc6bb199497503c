"""Write the notebooks in this folder from the Python source below.

The notebooks are generated so that they can be reviewed (and diffed) as
code: edit the cells here, then run

    python notebooks/build.py            # rewrites notebooks/*.ipynb
    python notebooks/build.py OUTDIR     # writes them to OUTDIR instead

The files are written without outputs or execution counts, with fixed cell
ids, so building twice gives identical bytes (tests/test_notebooks.py checks
that the committed notebooks are what this script writes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from textwrap import dedent

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def md(text):
    return ("markdown", dedent(text).strip("\n"))


def code(text):
    return ("code", dedent(text).strip("\n"))


# Every notebook starts with this cell.  Inside Jupyter (and under nbclient)
# the kernel's inline backend renders figures headless as PNG; anywhere else
# (e.g. the cells pasted into a script on a machine without a display) Agg is
# selected, so no notebook ever needs a display.
SETUP = """
import matplotlib

if "inline" not in matplotlib.get_backend():
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import remat as rm
from remat import schedules
"""


# --- 01: revolve vs store-all ------------------------------------------------------

REVOLVE_VS_STORE_ALL = [
    md(
        """
        # Revolve vs store-all

        Differentiating a loop `state = step(state)` of `n` steps the ordinary way keeps
        every step's intermediate values (its *tape*) until the backward sweep: memory
        grows like `n`. `rm.Tape(snapshots=s)` keeps at most `s` *states* instead and
        recomputes the missing steps during the backward sweep, following the binomial
        *revolve* schedule (Griewank and Walther, 2000).

        This notebook runs one real workload both ways (and two more schedules for
        context) and measures:

        * the gradients: **bit-for-bit identical**;
        * the memory held by the loop: `n` step tapes against `s` states and one step tape;
        * the work: step evaluations rise from `n` to the binomial optimum `T(n, s)`, and
          wall time with them.

        Each claim is checked with an `assert`, so running the notebook is a test
        (`tests/test_notebooks.py` runs it).
        """
    ),
    code(
        SETUP
        + """
import gc
import time
import tracemalloc

from remat.plot import budget_curve, memory_timeline
from remat.workloads import make_workload
"""
    ),
    md(
        """
        ## The workload

        `remat.workloads.resmlp`: one residual block with shared weights,
        `h <- h + tanh(h W + b) V`, applied 1000 times to a batch of 32 vectors of width 64
        (a deep weight-tied network, or an explicit ODE solver). The loss is the mean square
        of the final state; the parameters are `W`, `b` and `V`.
        """
    ),
    code(
        """
        N, S = 1000, 10  # loop length, snapshot budget
        work = make_workload("resmlp", steps=N)
        w, b, v = work.params
        print(f"{work.description}, {N} steps; one state = {work.state_bytes / 1024:.0f} KiB")
        """
    ),
    md(
        """
        ## Setting a budget

        The budget belongs to the tape. `rm.Tape()` stores everything; on
        `rm.Tape(snapshots=S)` every `tape.loop` is reversed with revolve and at most `S`
        stored states. The step function, the loss and the call to `backward` do not change.
        """
    ),
    code(
        """
        def step(h):  # the same step as work.step
            return h + rm.tanh(h @ w + b) @ v


        def loss_and_gradients(tape):
            for p in work.params:
                p.grad = None
            h = tape.loop(step, work.state, steps=N)
            loss = (h * h).mean()
            loss.backward()
            return loss.item(), [p.grad for p in work.params]


        store_all, revolve = rm.Tape(), rm.Tape(snapshots=S)
        loss_a, grads_a = loss_and_gradients(store_all)
        loss_b, grads_b = loss_and_gradients(revolve)
        print(store_all.stats)
        print(revolve.stats)

        assert loss_a == loss_b
        assert all(np.array_equal(ga, gb) for ga, gb in zip(grads_a, grads_b))
        assert revolve.stats.forward_steps == schedules.optimal_forward_steps(N, S)
        print("gradients bit-for-bit identical")
        """
    ),
    md(
        """
        Why *identical*, not merely close: a recomputed step starts from the same array
        (a stored state, or one recomputed from it by the same operations) and runs the
        same floating-point operations in the same order, and each step is reversed
        through its own tape. Nothing is reassociated, so nothing is rounded differently.
        (A step that draws random numbers is replayed exactly too: a snapshot includes
        the state of `rm.random`'s generator.)

        ## Four schedules, measured

        * `store_all`: `rm.Tape()`, one taped sweep, `n` evaluations;
        * `sqrt`: `rm.Tape(schedule="sqrt")` (Chen et al., 2016) stores every
          `ceil(sqrt(n))`-th state and re-tapes one segment at a time: fewer than `2n`
          evaluations, but a whole segment of about `sqrt(n)` step tapes alive at once;
        * `revolve`: `rm.Tape(snapshots=S)`, the fewest evaluations possible with `S` states;
        * `online`: the same budget for a loop whose length is not known in advance,
          `tape.loop(step, state, until=predicate)`.

        For each, `tape.stats` counts what the executor did (`forward_steps`: step
        evaluations, taped or not; `peak_bytes`: the most bytes the loop held in snapshots
        and step tapes, each array counted once). `tracemalloc` measures everything Python
        allocated during forward and backward, temporaries included. Wall time is the best
        of five runs made without `tracemalloc` (which slows allocation down).
        """
    ),
    code(
        """
        TAPES = {  # trace=True also records bytes held over time (for the plot below)
            "store_all": lambda trace=False: rm.Tape(trace=trace),
            "sqrt": lambda trace=False: rm.Tape(schedule="sqrt", trace=trace),
            "revolve": lambda trace=False: rm.Tape(snapshots=S, trace=trace),
            "online": lambda trace=False: rm.Tape(snapshots=S, schedule="online", trace=trace),
        }
        OPTIMUM = {  # the fewest evaluations for the memory model of each schedule
            "store_all": N,  # every step once
            "sqrt": None,  # keeps a segment of tapes: outside the binomial model
            "revolve": schedules.optimal_forward_steps(N, S),
            "online": schedules.optimal_forward_steps(N, S),
        }


        def measure(name, repeats=5):
            online = name == "online"
            seconds = []
            for _ in range(repeats):
                gc.collect()
                start = time.perf_counter()
                work.loss_and_gradients(TAPES[name](), online=online)
                seconds.append(time.perf_counter() - start)
            tape = TAPES[name]()
            gc.collect()
            tracemalloc.start()
            loss, grads = work.loss_and_gradients(tape, online=online)
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            traced_tape = TAPES[name](trace=True)  # a traced run, for the timeline
            work.loss_and_gradients(traced_tape, online=online)
            return dict(name=name, tape=traced_tape, stats=tape.stats, loss=loss, grads=grads,
                        traced=traced, seconds=min(seconds))


        rows = [measure(name) for name in TAPES]
        MiB = 2**20
        print(f"{'schedule':<10}{'forward':>9}{'optimum':>9}{'factor':>8}{'held MiB':>10}"
              f"{'traced MiB':>12}{'time s':>8}")
        for r in rows:
            st = r["stats"]
            print(f"{r['name']:<10}{st.forward_steps:>9}{OPTIMUM[r['name']] or '-':>9}"
                  f"{st.forward_steps / N:>8.2f}{st.peak_bytes / MiB:>10.3f}"
                  f"{r['traced'] / MiB:>12.3f}{r['seconds']:>8.3f}")
        """
    ),
    md(
        """
        What the table shows, checked below:

        * every schedule gives store-all's loss and gradients exactly;
        * revolve makes exactly `T(n, s)` evaluations; online, which learns `n` only when
          the loop ends, stays within a few percent of it;
        * store-all holds one tape per step; revolve holds `S` states plus the tape of the
          one step being reversed, and nothing else.
        """
    ),
    code(
        """
        by = {r["name"]: r for r in rows}
        reference = by["store_all"]
        for r in rows:
            assert r["loss"] == reference["loss"], r["name"]
            assert all(np.array_equal(g, h) for g, h in zip(r["grads"], reference["grads"])), r["name"]

        rev, onl, sto, sq = (by[k]["stats"] for k in ("revolve", "online", "store_all", "sqrt"))
        assert sto.forward_steps == N and sq.forward_steps < 2 * N
        assert rev.forward_steps == OPTIMUM["revolve"]
        assert OPTIMUM["online"] <= onl.forward_steps <= 1.05 * OPTIMUM["online"]

        step_tape = sto.peak_bytes / N  # bytes one step's tape holds
        assert rev.peak_bytes <= S * work.state_bytes + 1.5 * step_tape
        assert onl.peak_bytes <= S * work.state_bytes + 1.5 * step_tape
        assert rev.peak_snapshots == S
        print(f"one step tape = {step_tape / 1024:.0f} KiB, one state = {work.state_bytes / 1024:.0f} KiB")
        print(f"revolve holds {sto.peak_bytes / rev.peak_bytes:.0f}x less than store-all, "
              f"for {rev.forward_steps / N:.2f}x the step evaluations and "
              f"{by['revolve']['seconds'] / by['store_all']['seconds']:.2f}x the wall time")
        print(f"tracemalloc peak: {reference['traced'] / MiB:.1f} MiB (store-all) against "
              f"{by['revolve']['traced'] / MiB:.1f} MiB (revolve)")
        assert by["revolve"]["traced"] < reference["traced"] / 5
        """
    ),
    code(
        """
        names = [r["name"] for r in rows]
        colors = ["tab:gray", "tab:orange", "tab:red", "tab:purple"]
        fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 3.6))
        left.bar(names, [r["stats"].peak_bytes / MiB for r in rows], color=colors)
        left.set_yscale("log")
        left.set_ylabel("MiB held by the loop (log)")
        middle.bar(names, [r["stats"].forward_steps for r in rows], color=colors)
        for i, name in enumerate(names):
            if OPTIMUM[name]:
                middle.hlines(OPTIMUM[name], i - 0.4, i + 0.4, color="black", lw=2,
                              label="optimum for the memory model" if i == 0 else None)
        middle.set_ylabel("step evaluations")
        middle.set_ylim(0, 1.2 * max(r["stats"].forward_steps for r in rows))
        middle.legend(fontsize=8, frameon=False, loc="upper left")
        right.bar(names, [r["seconds"] for r in rows], color=colors)
        right.set_ylabel("wall time, forward + backward (s)")
        fig.suptitle(f"resmlp, n = {N} steps, budget S = {S}")
        fig.tight_layout()
        plt.show()
        """
    ),
    md(
        """
        ## Memory over time

        With `trace=True` the executor records the bytes it holds after every step it
        evaluates and every action of the schedule; `remat.plot.memory_timeline` draws
        them against the number of step evaluations so far. Store-all climbs one step tape
        at a time to its peak and drops at once when its single `Reverse(0, 1000)` has run
        (reversals are not step evaluations, so they take no width here). Revolve never
        holds more than its `S` states and one step tape, while it spends about `4.6 n`
        evaluations.
        """
    ),
    code(
        """
        fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4))
        for r in rows:
            memory_timeline(r["tape"], ax=left, label=r["name"])
        left.set_yscale("log")
        left.set_title("every schedule (log scale)")
        memory_timeline(by["revolve"]["tape"], ax=right, label="revolve")
        right.axhline((S * work.state_bytes + step_tape) / MiB, ls="--", color="black",
                      label=f"{S} states + 1 step tape")
        right.set_ylim(0, None)
        right.legend(fontsize=8, frameon=False, loc="lower right")
        right.set_title(f"revolve, S = {S} (linear scale)")
        fig.suptitle("bytes held by the loop, after each step evaluation and schedule action")
        fig.tight_layout()
        plt.show()
        """
    ),
    md(
        """
        ## Choosing the budget

        The budget trades memory for work. `T(n, s) / n` falls fast as `s` grows: 9.0 at
        `s = 4`, 4.6 at `s = 10`, 2.9 at `s = 50`. It reaches `2 - 1/n` at `s = n - 1` and
        no lower, however large `s`: slots hold states, not tapes, so every step but the
        last is evaluated once in the forward sweep and once more, taped, just before it is
        reversed. Only store-all, which keeps tapes, reaches `n`.
        Below, each budget runs for real; the evaluations counted by the executor land
        on the binomial optimum (left, the line from `remat.plot.budget_curve`), and the
        right panel shows the trade-off actually measured. Sqrt sits below revolve's curve
        where it fits: it spends memory on a segment of step tapes, which is outside
        revolve's model of states plus one tape (see notebook 02). Revolve is what reaches
        the small budgets.
        """
    ),
    code(
        """
        BUDGETS = [4, 6, 10, 20, 50, 200, N - 1]
        sweep = []
        for s in BUDGETS:
            tape = rm.Tape(snapshots=s)
            gc.collect()
            start = time.perf_counter()
            loss, grads = work.loss_and_gradients(tape)
            seconds = time.perf_counter() - start
            assert all(np.array_equal(g, h) for g, h in zip(grads, reference["grads"]))
            assert tape.stats.forward_steps == schedules.optimal_forward_steps(N, s)
            sweep.append((s, tape.stats, seconds))
            print(f"s = {s:>3}: {tape.stats.forward_steps:>5} evaluations "
                  f"({tape.stats.forward_steps / N:.2f} n), "
                  f"{tape.stats.peak_bytes / MiB:.3f} MiB held, {seconds:.2f} s")

        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
        budget_curve(N, [*range(3, 20), *range(20, N, 20), N - 1], ax=left)
        left.plot([s for s, _, _ in sweep], [st.forward_steps / N for _, st, _ in sweep],
                  "kx", ms=9, label="measured by tape.stats")
        left.set_xscale("log")
        left.legend(fontsize=8, frameon=False)
        right.plot([st.peak_bytes / MiB for _, st, _ in sweep], [t for _, _, t in sweep],
                   "o-", color="tab:red", label="revolve")
        for s, st, t in sweep:
            right.annotate(f"s={s}", (st.peak_bytes / MiB, t), textcoords="offset points",
                           xytext=(4, 4), fontsize=8)
        for name, marker in (("store_all", "s"), ("sqrt", "D")):
            r = by[name]
            right.plot(r["stats"].peak_bytes / MiB, r["seconds"], marker, color="tab:gray",
                       label=name)
        right.set_xscale("log")
        right.set_xlabel("MiB held by the loop (log)")
        right.set_ylabel("wall time (s)")
        right.legend(fontsize=8, frameon=False)
        right.set_title("measured: memory against time")
        fig.tight_layout()
        plt.show()
        """
    ),
    md(
        """
        ## Summary

        One argument, `rm.Tape(snapshots=S)`, turns a loop whose tape grows with `n` into
        one whose memory is fixed by `S`, with the same gradients to the last bit. The
        price is recomputation, exactly the binomial optimum `T(n, S)` step evaluations;
        wall time grows by less than that factor because the backward sweep, which every
        schedule runs once per step, costs the same. `02_schedules_explained.ipynb` shows
        where `T(n, S)` comes from.
        """
    ),
]


# --- 02: schedules explained -------------------------------------------------------

SCHEDULES_EXPLAINED = [
    md(
        """
        # Schedules explained

        A *schedule* decides, for a loop `x_0 -> x_1 -> ... -> x_n` (step `i` maps `x_i` to
        `x_(i+1)`), which states to keep, which steps to recompute and when, so that the
        backward sweep can visit steps `n-1, n-2, ..., 0` in turn. This notebook draws the
        schedules of `remat.schedules` for small `n`, derives the binomial formula that
        revolve attains, checks it against a brute-force search, and measures the
        `O(log n)` memory / `O(n log n)` work regime and the price of not knowing `n`.

        Everything here is pure Python arithmetic on schedules (`schedules.simulate` plays
        a schedule on paper and counts it); nothing is differentiated, so it runs in
        seconds.
        """
    ),
    code(
        SETUP
        + """
from functools import lru_cache
from math import ceil, comb, log2

from remat.plot import schedule_diagram
"""
    ),
    md(
        """
        ## A schedule is a list of actions

        The executor behind `tape.loop` understands a small vocabulary:
        `Advance(a, b)` evaluates steps `a..b-1` without recording, `Tape(a, b)` evaluates
        them recording each step's tape, `Snapshot(i, slot)` / `Restore(i, slot)` /
        `Free(slot)` store, reload and drop the state `x_i`, `Reverse(a, b)` backpropagates
        through taped steps `b-1` down to `a`, and `EndForward()` marks the end of the
        user's forward pass. Here is revolve reversing 6 steps with 2 slots:
        """
    ),
    code(
        """
        for action in schedules.Revolve(6, 2):
            print(action)
        sim = schedules.simulate(schedules.Revolve(6, 2))
        print(sim)
        assert sim.forward_steps == 6 + sim.advances and sim.peak_snapshots == 2
        """
    ),
    md(
        """
        `simulate` checks every rule (a step is reversed only once it is taped, steps are
        reversed `n-1` down to `0`, slots stay within the budget, ...) and counts the cost:
        `forward_steps` is every evaluation of a step, taped or not. Each step is taped
        exactly once, right before it is reversed, so
        `forward_steps = n + (untaped evaluations)`.

        ## Diagrams for n = 20

        Time (step evaluations and reversals) runs across, the step index up. Blue lines are
        untaped advances, green taped steps, red reversals; squares are snapshots and dots
        restores.

        * **Sqrt** stores every 5th state in the forward sweep, then restores each stored
          state in turn and re-tapes its whole segment: each step is evaluated at most twice,
          but a segment of 5 step tapes is alive at once, besides the 3 snapshots.
        * **Revolve** with 3 slots holds 3 states and *one* step tape; it re-advances more
          often, in a recursive pattern.
        * **Online** with 3 slots does not know that the loop will stop at 20: it tapes each
          step as it goes (and drops the tape before the next), moving its checkpoints as
          the loop grows, and reverses with revolve once the end is known.
        """
    ),
    code(
        """
        n = 20
        fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
        schedule_diagram(schedules.Sqrt(n), ax=axes[0])
        schedule_diagram(schedules.Revolve(n, 3), ax=axes[1])
        schedule_diagram(schedules.Online(3), steps=n, ax=axes[2])
        fig.tight_layout()
        plt.show()

        for sched, steps in ((schedules.StoreAll(n), None), (schedules.Sqrt(n), None),
                             (schedules.Revolve(n, 3), None), (schedules.Online(3), n)):
            sim = schedules.simulate(sched, steps=steps)
            print(f"{sched!r:<34} {sim.forward_steps:>3} evaluations, "
                  f"{sim.peak_snapshots} snapshots, {sim.peak_tapes:>2} step tapes at most")
        """
    ),
    md(
        """
        Memory counts *both* snapshots and step tapes, and revolve is optimal within its
        model: `s` stored states and *one* step tape at a time. Sqrt is outside that model:
        it spends memory on a segment of tapes, so the re-tape of a segment is the only
        re-evaluation of its steps. When that memory is available, sqrt can need fewer
        evaluations than revolve given the same memory as states. In the resmlp workload
        of notebook 01 a step's tape is twice the size of a state, so at `n = 1000` sqrt
        holds as much as about 95 states, and revolve with 95 slots needs more
        evaluations. Revolve's ground is the small budget: with 10 states it reverses the
        same loop in 4636 evaluations, with about an eighth of sqrt's memory.
        """
    ),
    code(
        """
        sq = schedules.simulate(schedules.Sqrt(1000))
        units = sq.peak_snapshots + 2 * sq.peak_tapes  # a step tape = 2 states (resmlp)
        rv = schedules.simulate(schedules.Revolve(1000, units))
        rv10 = schedules.simulate(schedules.Revolve(1000, 10))
        print(f"sqrt:             {sq.peak_snapshots} states + {sq.peak_tapes} tapes "
              f"(~{units} states): {sq.forward_steps} evaluations")
        print(f"revolve, {units} slots: {units} states + 1 tape: {rv.forward_steps} evaluations")
        print(f"revolve, 10 slots: 10 states + 1 tape: {rv10.forward_steps} evaluations")
        assert sq.forward_steps < rv.forward_steps and units > 7 * (10 + 2)
        """
    ),
    md(
        """
        ## The binomial formula

        The model: `s` slots for states (one of them holds `x_0`), one step tape alive at
        a time, and the cost is counted in step evaluations. Call a schedule
        `t`-*repetition* if no step is evaluated untaped more than `t` times. The longest
        chain a `t`-repetition schedule can reverse is

        $$\\beta(s, t) = \\binom{s + t}{s}.$$

        Why: with `s >= 2` slots, a schedule starts by advancing from `x_0` to some `x_j`
        and storing it. The right part, `x_j .. x_n`, must then be reversed with one slot
        fewer (`x_0`'s slot stays taken) and still `t` repetitions; the left part,
        `x_0 .. x_j`, keeps all `s` slots, but every step in it has already been advanced
        over once, so it has only `t - 1` repetitions left. Hence Pascal's rule,
        `beta(s, t) = beta(s - 1, t) + beta(s, t - 1)`, with `beta(s, 0) = 1` (with no
        repetition only the last step, taped in the forward sweep, can be reversed) and
        `beta(1, t) = t + 1` (with `x_0` alone, every step restarts from `x_0`).

        The *repetition number* of `n` steps is the smallest `r` with `beta(s, r) >= n`.
        """
    ),
    code(
        """
        print("beta(s, t):")
        print("s\\\\t " + "".join(f"{t:>7}" for t in range(8)))
        for s in range(1, 7):
            print(f"{s:<4}" + "".join(f"{schedules.beta(s, t):>7}" for t in range(8)))
            for t in range(1, 8):
                assert schedules.beta(s, t) == schedules.beta(s - 1, t) + schedules.beta(s, t - 1)
        print("repetition number r(1000, s) for s = 1..10:",
              [schedules.repetition_number(1000, s) for s in range(1, 11)])
        """
    ),
    md(
        """
        **The cost.** The same induction shows more: in any schedule of this recursive
        form, at most `beta(s, t)` steps get by with `t` or fewer untaped evaluations (at
        most `beta(s - 1, t)` in the right part, `beta(s, t - 1)` in the left). So for every
        `t`, at least `n - beta(s, t)` steps need more than `t`. Adding up over
        `t = 0 .. r - 1` (where `r` is the repetition number) bounds the untaped
        evaluations from below, and the hockey-stick identity
        `sum_{t<r} C(s+t, s) = C(s+r, s+1)` gives the closed form:

        $$E(n, s) \\ge \\sum_{t=0}^{r-1} \\bigl(n - \\beta(s, t)\\bigr) = r n - \\binom{s+r}{s+1},
        \\qquad T(n, s) = n + E(n, s).$$

        Revolve attains the bound: each of its splits gives every step exactly the count
        the bound allows (`remat/schedules/revolve.py` explains the split it takes), so
        `T(n, s) = n + r n - C(s + r, s + 1)` is the optimum. Restricting to the recursive
        form loses nothing (Griewank, 1992). An independent check is a brute-force search
        over that form: choose where the first checkpoint goes, then solve both parts
        optimally,

        $$E(n, s) = \\min_{1 \\le j < n} \\; j + E(n - j, s - 1) + E(j, s),
        \\qquad E(1, s) = 0, \\quad E(n, 1) = \\tfrac{n(n-1)}{2}$$

        (advance `j` steps and store `x_j`; reverse the right part with a slot less; then
        the left part with all the slots). The cell below solves the recursion for every
        `n <= 120`, `s <= 8` and checks the closed form, `optimal_forward_steps`, and what
        `simulate` counts for `Revolve` against it.
        """
    ),
    code(
        """
        @lru_cache(maxsize=None)
        def E(n, s):
            if n == 1:
                return 0
            if s == 1:
                return n * (n - 1) // 2
            return min(j + E(n - j, s - 1) + E(j, s) for j in range(1, n))


        def closed_form(n, s):
            r = schedules.repetition_number(n, s)
            return n + r * n - comb(s + r, s + 1)


        checked = 0
        for s in range(1, 9):
            for n in range(1, 121):
                t = n + E(n, s)
                assert t == closed_form(n, s) == schedules.optimal_forward_steps(n, s), (n, s)
                assert schedules.simulate(schedules.Revolve(n, s)).forward_steps == t, (n, s)
                checked += 1
        print(f"T(n, s) = DP = closed form = simulate(Revolve) for all {checked} pairs")
        print("T(100, s) for s = 1..8:", [schedules.optimal_forward_steps(100, s) for s in range(1, 9)])
        """
    ),
    md(
        """
        Two boundary cases fall out: one slot gives `T = n + n(n - 1)/2` (restart from `x_0`
        for every step), and `s >= n - 1` gives `r = 1` and `T = 2n - 1`.

        ## O(log n) memory for O(n log n) work

        Let the budget grow like the logarithm of the loop: `s = ceil(log2 n)`. Since
        `beta(s, s) = C(2s, s) >= 2^s >= n`, the repetition number is at most `s`, so
        every step is evaluated at most `s + 1` times: `T(n, s) <= (1 + log2 n) n`, memory
        `O(log n)` states for work `O(n log n)`. In practice `r` is well below `s` (about
        `0.4 s` at `n = 2^14`). `simulate` counts the actual schedules for
        `n = 2^4 .. 2^14` in a fraction of a second (revolve's generator does O(1) work per
        action).
        """
    ),
    code(
        """
        rows = []
        for k in range(4, 15):
            n = 2**k
            s = ceil(log2(n))
            sim = schedules.simulate(schedules.Revolve(n, s))
            r = schedules.repetition_number(n, s)
            assert sim.forward_steps == schedules.optimal_forward_steps(n, s)
            assert sim.peak_snapshots == s and sim.peak_tapes == 1
            assert r <= s and sim.forward_steps <= (1 + log2(n)) * n
            sq = schedules.simulate(schedules.Sqrt(n))
            rows.append((n, s, r, sim.forward_steps, sq.peak_snapshots + sq.peak_tapes))
            print(f"n = {n:>6}  s = {s:>2}  r = {r}  T = {sim.forward_steps:>6}  "
                  f"T/n = {sim.forward_steps / n:.2f}  T/(n log2 n) = {sim.forward_steps / (n * k):.3f}")

        ns = np.array([row[0] for row in rows])
        ratio = np.array([row[3] / row[0] for row in rows])
        assert np.all(np.diff(ratio) > 0) and np.all(np.diff(ratio / np.log2(ns)) < 0)

        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
        left.plot(ns, ratio, "o-", color="tab:red", label="revolve, s = ceil(log2 n)")
        left.plot(ns, [row[2] for row in rows], "s--", color="tab:gray", label="repetition number r")
        left.plot(ns, 1 + np.log2(ns), ":", color="black", label="bound 1 + log2 n")
        left.set_xscale("log", base=2)
        left.set_xlabel("n")
        left.set_ylabel("step evaluations / n")
        left.set_title("work: O(n log n)")
        left.legend(fontsize=8, frameon=False)
        right.plot(ns, ns, "s-", color="tab:gray", label="store-all: n step tapes")
        right.plot(ns, [row[4] for row in rows], "D-", color="tab:orange",
                   label="sqrt: about 2 sqrt(n) states and tapes")
        right.plot(ns, [row[1] + 1 for row in rows], "o-", color="tab:red",
                   label="revolve: log2 n states + 1 tape")
        right.set_xscale("log", base=2)
        right.set_yscale("log", base=2)
        right.set_xlabel("n")
        right.set_ylabel("states or step tapes held")
        right.set_title("memory: O(log n)")
        right.legend(fontsize=8, frameon=False)
        fig.tight_layout()
        plt.show()
        """
    ),
    md(
        """
        ## Online vs offline

        Revolve needs `n` before the loop starts: its first checkpoint already depends on
        it. A loop that runs `until` a condition holds (an adaptive ODE solver, a
        fixed-point iteration) learns `n` only at the end. `schedules.Online(s)` (what
        `tape.loop(step, state, until=...)` uses) keeps a placement of at most `s`
        checkpoints that it revises at every step, and, once the loop has ended, reverses
        the segments between them with revolve. Its forward sweep tapes each step as it goes
        and drops the tape before the next, so the last step's tape is at hand whenever the
        loop stops; a taped evaluation replaces an untaped one, so this costs recording
        time but no extra evaluations, and one step tape of memory.

        Up to `n = beta(s, 2)` the policy is provably within one evaluation of the offline
        optimum; beyond, it is a greedy rule with the exact cost model (see the docstring of
        `remat/schedules/online.py`). The grid below compares it with `T(n, s)`:
        """
    ),
    code(
        """
        BUDGETS = [3, 5, 10, 20]
        LENGTHS = [10, 30, 100, 300, 1000, 3000]
        print("online / offline step evaluations")
        print("s \\\\ n" + "".join(f"{n:>8}" for n in LENGTHS))
        grid = {}
        for s in BUDGETS:
            line = f"{s:<6}"
            for n in LENGTHS:
                online = schedules.simulate(schedules.Online(s), steps=n)
                offline = schedules.optimal_forward_steps(n, s)
                grid[s, n] = online.forward_steps / offline
                assert online.peak_snapshots <= s and online.peak_tapes == 1
                assert offline <= online.forward_steps
                if n <= schedules.beta(s, 2):
                    assert online.forward_steps <= offline + 1, (n, s)
                line += f"{grid[s, n]:>8.3f}"
            print(line)
        worst = max(grid.values())
        assert worst < 1.1
        print(f"worst ratio on this grid: {worst:.3f}")

        fig, ax = plt.subplots(figsize=(7, 3.5))
        for s in BUDGETS:
            ax.plot(LENGTHS, [grid[s, n] for n in LENGTHS], "o-", label=f"s = {s}")
        ax.set_xscale("log")
        ax.set_xlabel("n (unknown to the online schedule until the loop ends)")
        ax.set_ylabel("online / offline evaluations")
        ax.legend(fontsize=8, frameon=False)
        plt.show()
        """
    ),
    md(
        """
        Not knowing `n` costs a few percent of recomputation on this grid, and no extra
        memory: the budget is the same `s` slots plus one step tape.
        """
    ),
]


# --- 03: a model under a memory budget ---------------------------------------------

MODEL_UNDER_A_BUDGET = [
    md(
        """
        # A real model under a memory budget

        A character-level recurrent network is a loop over the characters of a sequence: to
        differentiate the loss over `T` characters, store-all keeps `T` step tapes, and a
        long sequence quickly costs more memory than the model. Here a small RNN is
        trained twice with plain SGD, once on `rm.Tape()` and once on `rm.Tape(snapshots=8)`.
        Because revolve's gradients are bit-for-bit those of store-all, the two training
        runs are the same run: every loss and every parameter agrees exactly, while the
        budgeted run holds a fraction of the memory and spends more time recomputing.
        """
    ),
    code(
        SETUP
        + """
import gc
import time
import tracemalloc

import remat.functional
import remat.loop
import remat.schedules.binomial
import remat.schedules.online
import remat.schedules.revolve
import remat.tape
"""
    ),
    md(
        """
        ## Data

        The text is remat's own documentation (the docstrings of a few modules),
        lower-cased, with characters outside a 32-symbol alphabet replaced by spaces. Each
        SGD step sees a batch of 16 windows of `T + 1 = 301` characters at random offsets;
        the model reads characters `0..T-1` and predicts characters `1..T`.
        """
    ),
    code(
        """
        MODULES = [rm.tape, rm.loop, rm.functional, rm.schedules, rm.schedules.binomial,
                   rm.schedules.revolve, rm.schedules.online]
        ALPHABET = "abcdefghijklmnopqrstuvwxyz .,()-"
        raw = " ".join(" ".join(m.__doc__.split()) for m in MODULES).lower()
        text = "".join(c if c in ALPHABET else " " for c in raw)
        codes = np.array([ALPHABET.index(c) for c in text])
        V = len(ALPHABET)
        print(f"{len(text)} characters, alphabet of {V}")
        print(repr(text[:160]))

        T, B, H = 300, 16, 64  # sequence length, batch, hidden units
        ITERATIONS, LR, SNAPSHOTS = 40, 0.3, 8
        rng = np.random.default_rng(0)
        OFFSETS = [rng.integers(0, len(codes) - T - 1, size=B) for _ in range(ITERATIONS)]
        EYE = np.eye(V)


        def batch(offsets, length=T):
            window = np.stack([codes[o:o + length + 1] for o in offsets], axis=1)  # (length + 1, B)
            onehot = EYE[window]  # (length + 1, B, V)
            return rm.tensor(onehot[:-1]), rm.tensor(onehot[1:])
        """
    ),
    md(
        """
        ## Model

        `h_(t+1) = tanh(x_t W_x + h_t W_h + b)`, next-character logits `h_(t+1) W_y + c`.
        The loop's state carries the hidden vector, the position `t` and the running sum of
        the cross-entropy, so the whole sequence is one `tape.loop` of `T` steps. The
        position must live in the state, not in a Python counter: under revolve a step is
        evaluated several times, in an order the schedule decides, and it must compute the
        same thing each time.

        Parameters are updated by rebinding their data, `p.data = p.data - LR * p.grad`: the
        arrays a tape saved are read-only, so an in-place `p.data -= ...` would raise.
        """
    ),
    code(
        """
        def init_params():
            r = np.random.default_rng(1)
            return [
                rm.tensor(r.standard_normal((V, H)) / V**0.5, requires_grad=True),  # W_x
                rm.tensor(r.standard_normal((H, H)) / H**0.5, requires_grad=True),  # W_h
                rm.tensor(r.standard_normal((H, V)) / H**0.5, requires_grad=True),  # W_y
                rm.tensor(np.zeros(H), requires_grad=True),  # b
                rm.tensor(np.zeros(V), requires_grad=True),  # c
            ]


        def sgd_step(params, tape, x, y):
            wx, wh, wy, b, c = params

            def step(state):
                h, t, total = state
                h = rm.tanh(x[t] @ wx + h @ wh + b)
                total = total - (rm.log_softmax(h @ wy + c) * y[t]).sum()
                return h, t + 1, total

            length = x.shape[0]
            state = (rm.tensor(np.zeros((B, H))), rm.tensor(0), rm.tensor(0.0))
            _, _, total = tape.loop(step, state, steps=length)
            loss = total / (length * B)  # mean cross-entropy per character, in nats
            for p in params:
                p.grad = None
            loss.backward()
            for p in params:
                p.data = p.data - LR * p.grad
            return loss.item()


        def train(make_tape):
            params = init_params()
            losses = []
            start = time.perf_counter()
            for offsets in OFFSETS:
                tape = make_tape()
                losses.append(sgd_step(params, tape, *batch(offsets)))
            return dict(losses=losses, params=params, stats=tape.stats,
                        seconds=time.perf_counter() - start)
        """
    ),
    md(
        """
        ## Training twice

        Same initial parameters, same batches, same learning rate; only the tape differs.
        """
    ),
    code(
        """
        runs = {
            "store-all": train(lambda: rm.Tape()),
            f"revolve, {SNAPSHOTS} snapshots": train(lambda: rm.Tape(snapshots=SNAPSHOTS)),
        }
        (name_a, a), (name_b, b) = runs.items()
        assert a["losses"] == b["losses"]  # exact equality, every step
        assert all(np.array_equal(p.data, q.data) for p, q in zip(a["params"], b["params"]))
        assert a["losses"][-1] < a["losses"][0] - 0.5
        print(f"loss {a['losses'][0]:.3f} -> {a['losses'][-1]:.3f} nats per character "
              f"(uniform guessing: ln {V} = {np.log(V):.3f}); identical in both runs")
        for name, run in runs.items():
            print(f"{name:<22} {run['seconds']:5.2f} s   {run['stats']}")

        fig, ax = plt.subplots(figsize=(8, 3.8))
        ax.plot(a["losses"], "-", lw=4, color="tab:gray", alpha=0.5, label=name_a)
        ax.plot(b["losses"], "--", color="tab:red", label=name_b)
        ax.set_xlabel("SGD step")
        ax.set_ylabel("cross-entropy (nats per character)")
        ax.set_title("the two loss curves coincide exactly")
        ax.legend(frameon=False)
        plt.show()
        """
    ),
    md(
        """
        ## Memory and time

        `tape.stats.peak_bytes` counts what the loop held (step tapes and snapshots);
        `tracemalloc` measures everything one SGD step allocated, forward and backward,
        temporaries included (the batch is built before measuring). Revolve keeps 8 states
        (hidden vector, position, running loss) plus one step's tape, where store-all keeps
        300 step tapes.
        """
    ),
    code(
        """
        def traced_step(make_tape):
            params = init_params()
            x, y = batch(OFFSETS[0])
            tape = make_tape()
            gc.collect()
            tracemalloc.start()
            sgd_step(params, tape, x, y)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return peak, tape.stats


        MiB = 2**20
        traced_a, stats_a = traced_step(lambda: rm.Tape())
        traced_b, stats_b = traced_step(lambda: rm.Tape(snapshots=SNAPSHOTS))
        print(f"{'':<22}{'held MiB':>10}{'traced MiB':>12}{'evaluations':>13}{'train s':>9}")
        for name, traced, stats in ((name_a, traced_a, stats_a), (name_b, traced_b, stats_b)):
            print(f"{name:<22}{stats.peak_bytes / MiB:>10.3f}{traced / MiB:>12.3f}"
                  f"{stats.forward_steps:>13}{runs[name]['seconds']:>9.2f}")
        print(f"revolve: {stats_a.peak_bytes / stats_b.peak_bytes:.0f}x less held, "
              f"{traced_a / traced_b:.1f}x less traced, "
              f"{stats_b.forward_steps / T:.2f}x the evaluations, "
              f"{b['seconds'] / a['seconds']:.2f}x the time")

        assert stats_b.forward_steps == schedules.optimal_forward_steps(T, SNAPSHOTS)
        assert stats_b.peak_bytes * 20 < stats_a.peak_bytes and traced_b * 3 < traced_a

        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
        names = [name_a, name_b]
        left.bar(names, [stats_a.peak_bytes / MiB, stats_b.peak_bytes / MiB],
                 color=["tab:gray", "tab:red"], label="held by the loop")
        left.bar(names, [traced_a / MiB, traced_b / MiB], fill=False, edgecolor="black",
                 label="tracemalloc peak")
        left.set_ylabel("MiB, one SGD step")
        left.legend(frameon=False, fontsize=8)
        right.bar(names, [a["seconds"], b["seconds"]], color=["tab:gray", "tab:red"])
        right.set_ylabel(f"seconds, {ITERATIONS} SGD steps")
        fig.tight_layout()
        plt.show()
        """
    ),
    md(
        """
        ## Longer sequences

        Store-all's memory grows linearly with the sequence length; with a fixed budget,
        revolve's does not grow at all, and its work grows like `r T` with the repetition
        number `r` creeping up slowly. One gradient per length:
        """
    ),
    code(
        """
        print(f"{'T':>5}{'store-all MiB':>15}{'revolve MiB':>13}{'evaluations':>13}{'per step':>9}")
        held = []
        for length in (75, 150, 300, 600):
            offsets = np.random.default_rng(length).integers(0, len(codes) - length - 1, size=B)
            x, y = batch(offsets, length)
            sa, rv = rm.Tape(), rm.Tape(snapshots=SNAPSHOTS)
            assert sgd_step(init_params(), sa, x, y) == sgd_step(init_params(), rv, x, y)
            assert rv.stats.forward_steps == schedules.optimal_forward_steps(length, SNAPSHOTS)
            held.append((length, sa.stats.peak_bytes, rv.stats.peak_bytes))
            print(f"{length:>5}{sa.stats.peak_bytes / MiB:>15.3f}{rv.stats.peak_bytes / MiB:>13.3f}"
                  f"{rv.stats.forward_steps:>13}{rv.stats.forward_steps / length:>9.2f}")
        assert len({r for _, _, r in held}) == 1  # revolve's memory does not depend on T
        assert all(s2 > 1.9 * s1 for (_, s1, _), (_, s2, _) in zip(held, held[1:]))
        """
    ),
    md(
        """
        Revolve makes the memory of backpropagation through time a constant you choose,
        paid for in recomputation and not in accuracy: the training run above is the
        store-all run, to the last bit.
        """
    ),
]


NOTEBOOKS = {
    "01_revolve_vs_store_all.ipynb": REVOLVE_VS_STORE_ALL,
    "02_schedules_explained.ipynb": SCHEDULES_EXPLAINED,
    "03_model_under_a_memory_budget.ipynb": MODEL_UNDER_A_BUDGET,
}


def build(cells):
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, (kind, source) in enumerate(cells):
        cell = new_code_cell(source) if kind == "code" else new_markdown_cell(source)
        cell.id = f"cell-{index:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def main(outdir=HERE):
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, cells in NOTEBOOKS.items():
        nbformat.write(build(cells), outdir / name)
    return sorted(outdir / name for name in NOTEBOOKS)


if __name__ == "__main__":
    for path in main(*sys.argv[1:]):
        print(path)
