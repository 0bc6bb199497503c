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
# # Revolve vs store-all
#
# Differentiating a loop `state = step(state)` of `n` steps the ordinary way keeps
# every step's intermediate values (its *tape*) until the backward sweep: memory
# grows like `n`. `rm.Tape(snapshots=s)` keeps at most `s` *states* instead and
# recomputes the missing steps during the backward sweep, following the binomial
# *revolve* schedule (Griewank and Walther, 2000).
#
# This notebook runs one real workload both ways (and two more schedules for
# context) and measures:
#
# * the gradients: **bit-for-bit identical**;
# * the memory held by the loop: `n` step tapes against `s` states and one step tape;
# * the work: step evaluations rise from `n` to the binomial optimum `T(n, s)`, and
#   wall time with them.
#
# Each claim is checked with an `assert`, so running the notebook is a test
# (`tests/tools/test_notebooks.py` runs it).

# %%
import gc
import time
import tracemalloc
from io import BytesIO

import matplotlib

if "inline" not in matplotlib.get_backend():
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
from IPython.display import Image, display

import remat as rm
from remat import schedules
from remat.plot import budget_curve, memory_timeline
from remat.workloads import make_workload


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


PLAIN = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")  # 0.1, not 10⁻¹


# %% [markdown]
# ## The workload
#
# `remat.workloads.resmlp`: one residual block with shared weights,
# `h <- h + tanh(h W + b) V`, applied 1000 times to a batch of 32 vectors of width 64
# (a deep weight-tied network, or an explicit ODE solver). The loss is the mean square
# of the final state; the parameters are `W`, `b` and `V`.

# %%
N, S = 1000, 10  # loop length, snapshot budget
work = make_workload("resmlp", steps=N)
w, b, v = work.params
print(f"{work.description}, {N} steps; one state = {work.state_bytes / 1024:.0f} KiB")


# %% [markdown]
# ## Setting a budget
#
# The budget belongs to the tape. `rm.Tape()` stores everything; on
# `rm.Tape(snapshots=S)` every `tape.loop` is reversed with revolve and at most `S`
# stored states. The step function, the loss and the call to `backward` do not change.

# %%
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

# %% [markdown]
# Why *identical*, not merely close: a recomputed step starts from the same array
# (a stored state, or one recomputed from it by the same operations) and runs the
# same floating-point operations in the same order, and each step is reversed
# through its own tape. Nothing is reassociated, so nothing is rounded differently.
# (A step that draws random numbers is replayed exactly too: a snapshot includes
# the state of `rm.random`'s generator.)
#
# ## Four schedules, measured
#
# * `store_all`: `rm.Tape()`, one taped sweep, `n` evaluations;
# * `sqrt`: `rm.Tape(schedule="sqrt")` (Chen et al., 2016) stores every
#   `ceil(sqrt(n))`-th state and re-tapes one segment at a time: fewer than `2n`
#   evaluations, but a whole segment of about `sqrt(n)` step tapes alive at once;
# * `revolve`: `rm.Tape(snapshots=S)`, the fewest evaluations possible with `S` states;
# * `online`: the same budget for a loop whose length is not known in advance,
#   `tape.loop(step, state, until=predicate)`.
#
# For each, `tape.stats` counts what the executor did (`forward_steps`: step
# evaluations, taped or not; `peak_bytes`: the most bytes the loop held in snapshots
# and step tapes, each array counted once). `tracemalloc` measures everything Python
# allocated during forward and backward, temporaries included. Wall time is the best
# of five runs made without `tracemalloc` (which slows allocation down).

# %%
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

# %% [markdown]
# What the table shows, checked below:
#
# * every schedule gives store-all's loss and gradients exactly;
# * revolve makes exactly `T(n, s)` evaluations; online, which learns `n` only when
#   the loop ends, stays within a few percent of it;
# * store-all holds one tape per step; revolve holds `S` states plus the tape of the
#   one step being reversed, and nothing else.

# %%
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

# %%
names = [r["name"] for r in rows]
COLORS = {"store_all": "tab:gray", "sqrt": "tab:orange", "revolve": "tab:red", "online": "tab:purple"}
colors = [COLORS[name] for name in names]  # one colour per schedule, in every figure
fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 3.6))
held = [r["stats"].peak_bytes / MiB for r in rows]
left.scatter(range(len(names)), held, c=colors, s=80, zorder=3)  # dots: a log axis spans decades
for i, mib in enumerate(held):
    left.annotate(f"{mib:.2g}", (i, mib), xytext=(8, -3), textcoords="offset points", fontsize=8)
left.set_xticks(range(len(names)), names)
left.set_xlim(-0.5, len(names) - 0.5)
left.set_yscale("log")
left.set_ylim(min(held) / 2, max(held) * 2)
left.yaxis.set_major_formatter(PLAIN)
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
show(fig,
     f"Three panels for resmlp, n = {N} steps, budget S = {S}, one mark per schedule "
     "(store_all, sqrt, revolve, online): dots for the MiB held by the loop on a log scale, "
     "bars for the step evaluations with the optimum marked, and bars for the wall time "
     "of forward plus backward")

# %% [markdown]
# ## Memory over time
#
# With `trace=True` the executor records the bytes it holds after every step it
# evaluates and every action of the schedule; `remat.plot.memory_timeline` draws
# them against the number of step evaluations so far. Store-all climbs one step tape
# at a time to its peak and drops at once when its single `Reverse(0, 1000)` has run
# (reversals are not step evaluations, so they take no width here). Revolve never
# holds more than its `S` states and one step tape, while it spends about `4.6 n`
# evaluations.

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4))
for r in rows:
    memory_timeline(r["tape"], ax=left, label=r["name"], color=COLORS[r["name"]])
left.set_yscale("log")
left.yaxis.set_major_formatter(PLAIN)
left.set_title("every schedule (log scale)")
memory_timeline(by["revolve"]["tape"], ax=right, label="revolve", color=COLORS["revolve"])
right.axhline((S * work.state_bytes + step_tape) / MiB, ls="--", color="black",
              label=f"{S} states + 1 step tape")
right.set_ylim(0, None)
right.legend(fontsize=8, frameon=False, loc="lower right")
right.set_title(f"revolve, S = {S} (linear scale)")
fig.suptitle("bytes held by the loop, after each step evaluation and schedule action")
fig.tight_layout()
show(fig,
     "Bytes held by the loop after each step evaluation and schedule action, against time "
     "in step evaluations: left, every schedule on a log scale (store_all rises highest, "
     "revolve and online stay lowest); right, revolve alone on a linear scale, never above "
     f"the dashed line of {S} states plus one step tape")

# %% [markdown]
# ## Choosing the budget
#
# The budget trades memory for work. `T(n, s) / n` falls fast as `s` grows: 9.0 at
# `s = 4`, 4.6 at `s = 10`, 2.9 at `s = 50`. It reaches `2 - 1/n` at `s = n - 1` and
# no lower, however large `s`: slots hold states, not tapes, so every step but the
# last is evaluated once in the forward sweep and once more, taped, just before it is
# reversed. Only store-all, which keeps tapes, reaches `n`.
# Below, each budget runs for real; the evaluations counted by the executor land
# on the binomial optimum (left, the line from `remat.plot.budget_curve`), and the
# right panel shows the trade-off actually measured. Sqrt sits below revolve's curve
# where it fits: it spends memory on a segment of step tapes, which is outside
# revolve's model of states plus one tape (see notebook 02). Revolve is what reaches
# the small budgets.

# %%
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
left.xaxis.set_major_formatter(PLAIN)
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
right.xaxis.set_major_formatter(PLAIN)
right.set_xlabel("MiB held by the loop (log)")
right.set_ylabel("wall time (s)")
right.legend(fontsize=8, frameon=False)
right.set_title("measured: memory against time")
fig.tight_layout()
show(fig,
     f"Left: step evaluations per step against the snapshot budget s for n = {N}: revolve, "
     "simulated and measured by tape.stats, on the binomial optimum's line. Right: measured "
     "wall time against MiB held for revolve at budgets from s = 4 to 999, falling as it "
     "holds more, with store_all and sqrt as single points")

# %% [markdown]
# ## A budget in bytes
#
# Slots are one way to say how much memory a loop may hold; bytes are another.
# `rm.Tape(memory="1 MiB")` measures the loop (the bytes of a state and of a step's
# tape, the time of an untaped and of a taped step), plans the fastest schedule that
# holds at most that many bytes (`remat.schedules.Optimal`: a slot may hold a state or
# a whole step tape) and runs it. Beside it, at the same byte budgets: revolve and
# mixed checkpointing with as many slots as fit. Each point is measured (median of
# three runs) and predicted by the plan; every run stays within its budget and gives
# store-all's gradients bit for bit.

# %%
from remat import memory as budget_planner  # noqa: E402  (the plan cache, to start afresh)

wl = make_workload("resmlp", steps=200)
reference = wl.loss_and_gradients(rm.Tape())[1]
BUDGETS = [0.2, 0.35, 0.6, 1.0, 1.8]  # MiB
curve = {name: [] for name in ("revolve", "mixed", "optimal")}
budget_planner.clear_plans()
for mib in BUDGETS:
    for name in curve:
        runs = []
        for _ in range(4):  # the first run measures and plans; the next three are timed
            tape = rm.Tape(memory=int(mib * MiB), schedule=None if name == "optimal" else name)
            grads = make_workload("resmlp", steps=200).loss_and_gradients(tape)[1]
            assert all(np.array_equal(g, r) for g, r in zip(grads, reference))
            assert tape.stats.peak_bytes <= int(mib * MiB)
            runs.append(tape.stats)
        timed = sorted(st.seconds for st in runs[1:])[1]
        curve[name].append((mib, timed, runs[-1].predicted_seconds, runs[-1].forward_steps))
print("MiB    " + "".join(f"{name:>24}" for name in curve))
for k, mib in enumerate(BUDGETS):
    cells = "".join(f"{curve[n][k][1] * 1e3:>9.1f} ms ({curve[n][k][3]:>4} ev)" for n in curve)
    print(f"{mib:<6} {cells}")

fig, ax = plt.subplots(figsize=(7, 3.5))
for name, color in (("revolve", "tab:red"), ("mixed", "tab:green"), ("optimal", "tab:blue")):
    pts = curve[name]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=f"{name}, measured")
    ax.plot([p[0] for p in pts], [p[2] for p in pts], "x--", color=color, alpha=0.6,
            label=f"{name}, predicted")
ax.set_xscale("log")
ax.xaxis.set_major_formatter(PLAIN)
ax.xaxis.set_minor_formatter(PLAIN)
ax.set_xlabel("memory budget (MiB, log)")
ax.set_ylabel("forward + backward (s)")
ax.legend(fontsize=7, frameon=False, ncol=2)
fig.tight_layout()
show(fig,
     "Forward plus backward time against the memory budget in MiB (log scale) for revolve, "
     "mixed and the optimal plan, each measured (solid) and predicted (dashed): time falls "
     "as the budget grows")

# %% [markdown]
# ## Summary
#
# One argument, `rm.Tape(snapshots=S)`, turns a loop whose tape grows with `n` into
# one whose memory is fixed by `S`, with the same gradients to the last bit. The
# price is recomputation, exactly the binomial optimum `T(n, S)` step evaluations;
# wall time grows by less than that factor because the backward sweep, which every
# schedule runs once per step, costs the same. `02_schedules_explained.ipynb` shows
# where `T(n, S)` comes from.
