# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: -all
#     notebook_metadata_filter: kernelspec,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Schedules explained
#
# A *schedule* decides, for a loop `x_0 -> x_1 -> ... -> x_n` (step `i` maps `x_i` to
# `x_(i+1)`), which states to keep, which steps to recompute and when, so that the
# backward sweep can visit steps `n-1, n-2, ..., 0` in turn. This notebook draws the
# schedules of `remat.schedules` for small `n`, derives the binomial formula that
# revolve attains, checks it against a brute-force search, and measures the
# `O(log n)` memory / `O(n log n)` work regime and the price of not knowing `n`.
#
# Everything here is pure Python arithmetic on schedules (`schedules.simulate` plays
# a schedule on paper and counts it); nothing is differentiated, so it runs in
# seconds.

# %%
from functools import lru_cache
from io import BytesIO
from math import ceil, comb, log2

import matplotlib

if "inline" not in matplotlib.get_backend():
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
from IPython.display import Image, display

import remat as rm
from remat import schedules
from remat.plot import schedule_diagram


def show(fig, alt):
    """Show ``fig`` as a PNG at 100 dpi, with ``alt`` saying what it shows.

    The PNG keeps 256 colours (a plot has few), a third of the bytes, so that the
    executed notebook stays small.
    """
    drawn, png = BytesIO(), BytesIO()
    fig.savefig(drawn, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    PIL.Image.open(drawn).convert("RGB").quantize(256).save(png, format="png", optimize=True)
    display(Image(png.getvalue(), alt=alt))


# %% [markdown]
# ## A schedule is a list of actions
#
# The executor behind `tape.loop` understands a small vocabulary:
# `Advance(a, b)` evaluates steps `a..b-1` without recording, `Tape(a, b)` evaluates
# them recording each step's tape, `Snapshot(i, slot)` / `Restore(i, slot)` /
# `Free(slot)` store, reload and drop the state `x_i`, `Reverse(a, b)` backpropagates
# through taped steps `b-1` down to `a`, and `EndForward()` marks the end of the
# user's forward pass. Here is revolve reversing 6 steps with 2 slots:

# %%
for action in schedules.Revolve(6, 2):
    print(action)
sim = schedules.simulate(schedules.Revolve(6, 2))
print(sim)
assert sim.forward_steps == 6 + sim.advances and sim.peak_snapshots == 2

# %% [markdown]
# `simulate` checks every rule (a step is reversed only once it is taped, steps are
# reversed `n-1` down to `0`, slots stay within the budget, ...) and counts the cost:
# `forward_steps` is every evaluation of a step, taped or not. Each step is taped
# exactly once, right before it is reversed, so
# `forward_steps = n + (untaped evaluations)`.
#
# ## Diagrams for n = 20
#
# Time (step evaluations and reversals) runs across, the step index up. Blue lines are
# untaped advances, green taped steps, red reversals; squares are snapshots and dots
# restores.
#
# * **Sqrt** stores every 5th state in the forward sweep, then restores each stored
#   state in turn and re-tapes its whole segment: each step is evaluated at most twice,
#   but a segment of 5 step tapes is alive at once, besides the 3 snapshots.
# * **Revolve** with 3 slots holds 3 states and *one* step tape; it re-advances more
#   often, in a recursive pattern.
# * **Online** with 3 slots does not know that the loop will stop at 20: it tapes each
#   step as it goes (and drops the tape before the next), moving its checkpoints as
#   the loop grows, and reverses with revolve once the end is known.

# %%
n = 20
fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
schedule_diagram(schedules.Sqrt(n), ax=axes[0])
schedule_diagram(schedules.Revolve(n, 3), ax=axes[1])
schedule_diagram(schedules.Online(3), steps=n, ax=axes[2])
fig.tight_layout()
show(fig,
     f"Schedule diagrams for n = {n} steps, time across and step index up: sqrt, revolve "
     "with 3 snapshots and online with 3 snapshots; squares store a state, blue lines "
     "advance, green lines tape a step, red lines reverse it, dots restore")

for sched, steps in ((schedules.StoreAll(n), None), (schedules.Sqrt(n), None),
                     (schedules.Revolve(n, 3), None), (schedules.Online(3), n)):
    sim = schedules.simulate(sched, steps=steps)
    print(f"{sched!r:<34} {sim.forward_steps:>3} evaluations, "
          f"{sim.peak_snapshots} snapshots, {sim.peak_tapes:>2} step tapes at most")

# %% [markdown]
# Memory counts *both* snapshots and step tapes, and revolve is optimal within its
# model: `s` stored states and *one* step tape at a time. Sqrt is outside that model:
# it spends memory on a segment of tapes, so the re-tape of a segment is the only
# re-evaluation of its steps. When that memory is available, sqrt can need fewer
# evaluations than revolve given the same memory as states. In the resmlp workload
# of notebook 01 a step's tape is twice the size of a state, so at `n = 1000` sqrt
# holds as much as about 95 states, and revolve with 95 slots needs more
# evaluations. Revolve's ground is the small budget: with 10 states it reverses the
# same loop in 4636 evaluations, with about an eighth of sqrt's memory.

# %%
sq = schedules.simulate(schedules.Sqrt(1000))
units = sq.peak_snapshots + 2 * sq.peak_tapes  # a step tape = 2 states (resmlp)
rv = schedules.simulate(schedules.Revolve(1000, units))
rv10 = schedules.simulate(schedules.Revolve(1000, 10))
print(f"sqrt:             {sq.peak_snapshots} states + {sq.peak_tapes} tapes "
      f"(~{units} states): {sq.forward_steps} evaluations")
print(f"revolve, {units} slots: {units} states + 1 tape: {rv.forward_steps} evaluations")
print(f"revolve, 10 slots: 10 states + 1 tape: {rv10.forward_steps} evaluations")
assert sq.forward_steps < rv.forward_steps and units > 7 * (10 + 2)

# %% [markdown]
# ## The binomial formula
#
# The model: `s` slots for states (one of them holds `x_0`), one step tape alive at
# a time, and the cost is counted in step evaluations. Call a schedule
# `t`-*repetition* if no step is evaluated untaped more than `t` times. The longest
# chain a `t`-repetition schedule can reverse is
#
# $$\beta(s, t) = \binom{s + t}{s}.$$
#
# Why: with `s >= 2` slots, a schedule starts by advancing from `x_0` to some `x_j`
# and storing it. The right part, `x_j .. x_n`, must then be reversed with one slot
# fewer (`x_0`'s slot stays taken) and still `t` repetitions; the left part,
# `x_0 .. x_j`, keeps all `s` slots, but every step in it has already been advanced
# over once, so it has only `t - 1` repetitions left. Hence Pascal's rule,
# `beta(s, t) = beta(s - 1, t) + beta(s, t - 1)`, with `beta(s, 0) = 1` (with no
# repetition only the last step, taped in the forward sweep, can be reversed) and
# `beta(1, t) = t + 1` (with `x_0` alone, every step restarts from `x_0`).
#
# The *repetition number* of `n` steps is the smallest `r` with `beta(s, r) >= n`.

# %%
print("beta(s, t):")
print("s\\t " + "".join(f"{t:>7}" for t in range(8)))
for s in range(1, 7):
    print(f"{s:<4}" + "".join(f"{schedules.beta(s, t):>7}" for t in range(8)))
    for t in range(1, 8):
        assert schedules.beta(s, t) == schedules.beta(s - 1, t) + schedules.beta(s, t - 1)
print("repetition number r(1000, s) for s = 1..10:",
      [schedules.repetition_number(1000, s) for s in range(1, 11)])


# %% [markdown]
# **The cost.** The same induction shows more: in any schedule of this recursive
# form, at most `beta(s, t)` steps get by with `t` or fewer untaped evaluations (at
# most `beta(s - 1, t)` in the right part, `beta(s, t - 1)` in the left). So for every
# `t`, at least `n - beta(s, t)` steps need more than `t`. Adding up over
# `t = 0 .. r - 1` (where `r` is the repetition number) bounds the untaped
# evaluations from below, and the hockey-stick identity
# `sum_{t<r} C(s+t, s) = C(s+r, s+1)` gives the closed form:
#
# $$E(n, s) \ge \sum_{t=0}^{r-1} \bigl(n - \beta(s, t)\bigr) = r n - \binom{s+r}{s+1},
# \qquad T(n, s) = n + E(n, s).$$
#
# Revolve attains the bound: each of its splits gives every step exactly the count
# the bound allows (`remat/schedules/revolve.py` explains the split it takes), so
# `T(n, s) = n + r n - C(s + r, s + 1)` is the optimum. Restricting to the recursive
# form loses nothing (Griewank, 1992). An independent check is a brute-force search
# over that form: choose where the first checkpoint goes, then solve both parts
# optimally,
#
# $$E(n, s) = \min_{1 \le j < n} \; j + E(n - j, s - 1) + E(j, s),
# \qquad E(1, s) = 0, \quad E(n, 1) = \tfrac{n(n-1)}{2}$$
#
# (advance `j` steps and store `x_j`; reverse the right part with a slot less; then
# the left part with all the slots). The cell below solves the recursion for every
# `n <= 120`, `s <= 8` and checks the closed form, `optimal_forward_steps`, and what
# `simulate` counts for `Revolve` against it.

# %%
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

# %% [markdown]
# Two boundary cases fall out: one slot gives `T = n + n(n - 1)/2` (restart from `x_0`
# for every step), and `s >= n - 1` gives `r = 1` and `T = 2n - 1`.
#
# ## O(log n) memory for O(n log n) work
#
# Let the budget grow like the logarithm of the loop: `s = ceil(log2 n)`. Since
# `beta(s, s) = C(2s, s) >= 2^s >= n`, the repetition number is at most `s`, so
# every step is evaluated at most `s + 1` times: `T(n, s) <= (1 + log2 n) n`, memory
# `O(log n)` states for work `O(n log n)`. In practice `r` is well below `s` (about
# `0.4 s` at `n = 2^14`). `simulate` counts the actual schedules for
# `n = 2^4 .. 2^14` in a fraction of a second (revolve's generator does O(1) work per
# action).

# %%
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
show(fig,
     "Left: step evaluations per step against n from 2^4 to 2^14 for revolve with "
     "s = ceil(log2 n), with its repetition number, under the bound 1 + log2 n. Right: "
     "states or step tapes held against n on log axes: store-all n, sqrt about 2 sqrt(n), "
     "revolve log2 n plus one tape")

# %% [markdown]
# ## Online vs offline
#
# Revolve needs `n` before the loop starts: its first checkpoint already depends on
# it. A loop that runs `until` a condition holds (an adaptive ODE solver, a
# fixed-point iteration) learns `n` only at the end. `schedules.Online(s)` (what
# `tape.loop(step, state, until=...)` uses) keeps a placement of at most `s`
# checkpoints that it revises at every step, and, once the loop has ended, reverses
# the segments between them with revolve. Its forward sweep tapes each step as it goes
# and drops the tape before the next, so the last step's tape is at hand whenever the
# loop stops; a taped evaluation replaces an untaped one, so this costs recording
# time but no extra evaluations, and one step tape of memory.
#
# Up to `n = beta(s, 2)` the policy is provably within one evaluation of the offline
# optimum; beyond, it is a greedy rule with the exact cost model (see the docstring of
# `remat/schedules/online.py`). The grid below compares it with `T(n, s)`:

# %%
BUDGETS = [3, 5, 10, 20]
LENGTHS = [10, 30, 100, 300, 1000, 3000]
print("online / offline step evaluations")
print("s \\ n" + "".join(f"{n:>8}" for n in LENGTHS))
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
ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
ax.set_xlabel("n (unknown to the online schedule until the loop ends)")
ax.set_ylabel("online / offline evaluations")
ax.legend(fontsize=8, frameon=False)
show(fig,
     "Online checkpointing's step evaluations over the offline optimum's, against the loop "
     "length n (log scale), for s = 3, 5, 10 and 20 slots: every ratio within a few "
     "percent of 1")

# %% [markdown]
# Not knowing `n` costs a few percent of recomputation on this grid, and no extra
# memory: the budget is the same `s` slots plus one step tape.

# %% [markdown]
# ## Beyond one step function: chains and scans
#
# A schedule only sees a chain of `n` steps, so it serves programs that are not one
# loop just as well. `tape.chain(layers, x)` reverses a network whose layers differ
# (here the widths change from layer to layer), and `tape.scan(cell, h0, xs)` an RNN
# that reads one input and gives one output per step, as `jax.lax.scan`. Under
# `rm.Tape(snapshots=4)` both are revolve: the same `T(n, 4)` step evaluations as a
# loop, and gradients bit for bit those of storing everything.

# %%
r = np.random.default_rng(0)
WIDTHS = [8, 32, 4, 16, 64, 8, 24, 12, 40, 6, 16, 8, 32, 4, 20, 10, 8]
weights = [rm.tensor(r.standard_normal((a, b)) / a**0.5, requires_grad=True)
           for a, b in zip(WIDTHS, WIDTHS[1:])]
layers = [lambda h, w=w: rm.tanh(h @ w) for w in weights]
x = rm.tensor(r.standard_normal((5, WIDTHS[0])))


def chain_gradients(tape):
    for w in weights:
        w.grad = None
    out = tape.chain(layers, x)
    (out * out).sum().backward()
    return [w.grad for w in weights], tape.stats


reference, _ = chain_gradients(rm.Tape())
budgeted, stats = chain_gradients(rm.Tape(snapshots=4))
n = len(layers)
assert all(np.array_equal(a, b) for a, b in zip(reference, budgeted))
assert stats.forward_steps == schedules.optimal_forward_steps(n, 4)
print(f"chain of {n} layers, widths {WIDTHS[:6]}...: {stats}")

# %%
T, B, V, H = 60, 4, 12, 16
xs = rm.tensor(np.eye(V)[r.integers(0, V, size=(T, B))])  # one-hot inputs, (T, B, V)
wx = rm.tensor(r.standard_normal((V, H)) / V**0.5, requires_grad=True)
wh = rm.tensor(r.standard_normal((H, H)) / H**0.5, requires_grad=True)
wy = rm.tensor(r.standard_normal((H, V)) / H**0.5, requires_grad=True)


def cell(h, x_t):
    h = rm.tanh(x_t @ wx + h @ wh)
    return h, rm.log_softmax(h @ wy)  # new carry, and this step's output


def scan_gradients(tape):
    for p in (wx, wh, wy):
        p.grad = None
    h, logp = tape.scan(cell, rm.tensor(np.zeros((B, H))), xs)
    loss = -(logp[:-1] * xs[1:]).sum() / ((T - 1) * B)  # predict the next character
    loss.backward()
    return [p.grad for p in (wx, wh, wy)], tape.stats


reference, _ = scan_gradients(rm.Tape())
budgeted, stats = scan_gradients(rm.Tape(snapshots=4))
assert all(np.array_equal(a, b) for a, b in zip(reference, budgeted))
assert stats.forward_steps == schedules.optimal_forward_steps(T, 4)
print(f"RNN scanned over {T} characters: {stats}")

# %% [markdown]
# ## Memory and disk: the two-level schedule
#
# Long simulations (PDE and climate models, 10^5 steps and more) have room for a few
# states in memory and many on disk, where writing and reading a state costs time.
# `TwoLevel(n, s, d, write_cost, read_cost)` is the optimal schedule for `s` memory
# slots and `d` disk slots (Herrmann and Pallez 2020, H-Revolve), in the papers' cost
# model: a step costs 1, a disk write `write_cost`, a disk read `read_cost`, memory is
# free. Its cost is `advances + write_cost * writes + read_cost * reads`.
#
# The diagram puts the schedule above its *storage lanes*: one lane per memory slot
# (blue) and per disk slot (purple), with a bar for each state a slot holds. Here the
# issue's anchor, 21 steps with 2 memory and 2 disk slots, write = read = 2: `x_0` goes
# to disk at once, a second disk snapshot at `x_6` cuts the chain, and each disk
# segment is reversed with revolve in the two memory slots after one read.

# %%
from remat.plot import two_level_diagram

plan = schedules.TwoLevel(21, 2, 2, 2, 2)
sim = schedules.simulate(plan)
cost = sim.advances + 2 * sim.writes["disk"] + 2 * sim.reads["disk"]
print(f"{plan!r}: cost {plan.cost} = {sim.advances} advances + 2 x {sim.writes['disk']} "
      f"writes + 2 x {sim.reads['disk']} reads")
assert plan.cost == cost == 53
two_level_diagram(plan)
show(plt.gcf(),
     "TwoLevel schedule for 21 steps with 2 memory and 2 disk slots: the schedule diagram "
     "with disk snapshots and restores marked, and under it a bar for each memory and "
     "disk slot showing which state it holds and when")

# %% [markdown]
# ### The cost curve
#
# How much do disk slots buy? For `n = 1000` steps and 4 memory slots, the optimal
# extra cost falls from revolve's (`d = 0`) towards Disk-Revolve's (an unbounded disk,
# Aupy et al. 2016) as disk slots are added, and the cheaper the disk, the further.

# %%
n, s = 1000, 4
disk_slots = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
fig, ax = plt.subplots(figsize=(7, 3.5))
for io in (0.5, 2, 8):
    costs = [schedules.two_level_cost(n, s, d, io, io) for d in disk_slots]
    line, = ax.plot(disk_slots, [c / n for c in costs], "o-", label=f"write = read = {io}")
    unbounded = schedules.disk_revolve_cost(n, s, io, io)
    ax.axhline(unbounded / n, ls=":", color=line.get_color())
    assert costs[0] == schedules.optimal_forward_steps(n, s) - n  # d = 0 is revolve
    assert all(a >= b for a, b in zip(costs, costs[1:])) and costs[-1] >= unbounded
ax.set_xlabel("disk slots d")
ax.set_ylabel("extra cost / n (step evaluations)")
ax.set_title(f"TwoLevel, n = {n}, s = {s} memory slots (dotted: unbounded disk)", fontsize=9)
ax.legend(fontsize=8, frameon=False)
show(fig,
     f"TwoLevel's extra step evaluations per step against the number of disk slots d, "
     f"n = {n}, s = {s} memory slots, for write = read costs of 0.5, 2 and 8: each falls "
     "towards its dotted line, the cost with unbounded disk")

# %% [markdown]
# `rm.Tape(snapshots=s, disk_snapshots=d)` runs this schedule for real: it measures one
# step, one write and one read of the state the first time, plans `TwoLevel` with those
# ratios (cached for the next tape), and keeps disk snapshots as files in a fresh
# temporary folder that is gone after backward. The gradients are store-all's, bit for
# bit.

# %%
import tempfile

w = rm.tensor(r.standard_normal((16, 16)) / 4, requires_grad=True)


def heat_step(u):
    return u + 0.1 * rm.tanh(u @ w)


def loop_gradient(**tape_kwargs):
    w.grad = None
    with rm.Tape(**tape_kwargs) as tape:
        u = tape.loop(heat_step, rm.tensor(np.ones((4, 16))), steps=200)
        (u * u).sum().backward()
    return w.grad, tape


reference, _ = loop_gradient()
folder = tempfile.mkdtemp()
on_disk, tape = loop_gradient(schedule=schedules.TwoLevel(200, 2, 4, 1.0, 1.0), disk_dir=folder)
assert np.array_equal(reference, on_disk)
print(tape.stats)
import os

print("files left in the folder:", os.listdir(folder))

# %% [markdown]
# ## Reversible steps: no snapshots at all
#
# When a step can be undone, `x_i = inverse(x_(i+1))`, the reverse sweep can recompute
# the states backwards instead of storing them: a RevNet's additive coupling (Gomez et
# al. 2017) is the classic case. `tape.loop(step, x, steps=n, inverse=inv)` does that
# on any tape, holding one state and one step's tape whatever `n`. The price is
# floating point: each inversion rounds, and a step that amplifies differences makes
# the reconstructed states drift from the true ones (MacKay et al. 2018 store a few
# bits per step to make reversible RNNs exact). remat keeps `s - 1` exact states under
# `rm.Tape(snapshots=s)`, compares the reconstruction with each, reports the largest
# difference in `tape.stats`, and refuses a drift above the square root of the dtype's
# epsilon.

# %%
w1 = rm.tensor(r.standard_normal((8, 8)) * 0.3, requires_grad=True)
w2 = rm.tensor(r.standard_normal((8, 8)) * 0.3, requires_grad=True)


def coupling(state):
    a, b = state
    a = a + rm.tanh(b @ w1)
    return (a, b + rm.tanh(a @ w2))


def uncoupling(state):
    a, b = state
    b = b - rm.tanh(a @ w2)
    return (a - rm.tanh(b @ w1), b)


def revnet_gradients(inverse=None, **tape_kwargs):
    w1.grad = w2.grad = None
    x = (rm.tensor(np.ones((4, 8))), rm.tensor(np.zeros((4, 8))))
    with rm.Tape(**tape_kwargs) as tape:
        a, b = tape.loop(coupling, x, steps=100, inverse=inverse)
        ((a * a).sum() + (b * b).sum()).backward()
    return [w1.grad, w2.grad], tape.stats


stored, all_stats = revnet_gradients()
recomputed, rev_stats = revnet_gradients(uncoupling, snapshots=3)
for g, e in zip(recomputed, stored):
    np.testing.assert_allclose(g, e, rtol=1e-9)
print("store-all: ", all_stats)
print("reversible:", rev_stats)
schedule_diagram(schedules.Reversible(12, 3))
show(plt.gcf(),
     "Reversible schedule for 12 steps with 3 snapshots: the forward sweep stores states, "
     "and the backward sweep inverts each step (dashed) to recover the state before it "
     "instead of recomputing it from a snapshot")
