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
# # Any program under a memory budget: DTR and the optimal plan
#
# The notebooks before this one put loops and chains under a budget: `tape.loop`,
# `tape.chain` and `tape.scan` say where the steps are, and a schedule (revolve, the
# optimal chain plan) decides which steps' states to keep. Most networks are not
# chains. A U-Net keeps each level's features for the decoder; a ResNet adds
# shortcuts; a transformer written op by op reads its residual stream again and
# again. Their recorded graphs have *skips*, and code written without a loop API has
# no steps to name at all.
#
# remat rematerializes such programs in two ways, both on the graph the tape records:
#
# * **DTR** (dynamic tensor rematerialization, Kirisame et al. 2021):
#   `rm.Tape(memory=m, remat="dtr")` treats the values the tape saves as a cache;
#   when they would pass `m` bytes it *evicts* one, chosen by a heuristic, and
#   recomputes it from its inputs when backward needs it. No plan, no graph known in
#   advance.
# * **An optimal plan** (Checkmate, Jain et al. 2020):
#   `rm.Tape(memory=m, remat="optimal")` records the first run's joint forward +
#   backward graph with its measured costs, and a mixed-integer program
#   (`rm.schedules.plan_graph`) chooses which values each stage computes and which
#   it keeps, at the least total compute within `m`; the later runs follow that plan.
#
# This notebook takes a small U-Net, shows why a chain schedule does not fit it,
# measures store-all, `rm.checkpoint` placed by hand per block, DTR with each of its
# heuristics and the optimal plan across budgets, draws what DTR evicts and what the
# plan keeps and recomputes on the graph itself, and checks that every way gives the
# gradients of store-all bit for bit. Sizes are tiny, so that it runs in seconds.

# %%
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small graphs: one BLAS thread, less noise
import math
from collections import Counter
from io import BytesIO

import matplotlib

if "inline" not in matplotlib.get_backend():
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import PIL.Image
from IPython.display import Image, display

import remat as rm
from remat.graph import DTR, HEURISTICS
from remat.graph_compare import compare_graph, failures_of
from remat.graph_workloads import unet
from remat.plot_graph import graph_diagram
from remat.schedules import GraphCosts, simulate_graph
from remat.tape import Record


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


KiB = 2**10
model = unet(levels=2, width=8, length=128, batch=4)
params = model.params
print(model.description)
print(f"{sum(p.size for p in params)} parameters in {len(params)} tensors")
size = model.measure()
print(f"one forward records {size.ops} ops, which save {size.saved_bytes / KiB:.0f} KiB "
      "for backward")

# %% [markdown]
# ## The recorded graph
#
# The U-Net is ordinary remat code (`remat.graph_workloads.unet`): at each level a
# convolution (zero padding, three shifted slices side by side, a `matmul`) and a
# GELU, whose output is kept for the *skip*, then pooling; at the bottom one more
# convolution; back up, each level repeats positions, concatenates the skip and
# convolves. A recording tape lists each op and, for each input, the record that
# made it: that is the forward graph. The backward pass is part of the graph too:
# `GraphCosts.joint` adds one gradient node per op, the VJP of op `k`, which reads
# the gradients flowing back from `k`'s readers and `k`'s inputs (what a VJP may
# need); the planner works on that joint graph.
#
# Here each op costs one unit and holds its output's bytes (a slice counted as a
# copy): a simple model, enough to see the structure.

# %%
def recorded_graph(records, loss):
    """The joint forward + backward graph of ``records`` (node ``k`` is record ``k``;
    leaves and constants are the user's, always resident: not nodes), unit costs, the
    bytes of each op's output, and the op names (the gradient nodes named ``d`` + op)."""
    node = {id(record): k for k, record in enumerate(records)}
    parents = [tuple(sorted({node[id(p)] for p in r.parents if isinstance(p, Record)}))
               for r in records]
    nbytes = [8 * math.prod(r.shape) for r in records]  # float64
    graph = GraphCosts.joint(parents, [1] * len(records), nbytes, inputs=(),
                             loss=node[id(loss.record)])
    names = [r.op.name for r in records]
    names += ["d " + names[k] for k in sorted(node.values(), reverse=True)]
    assert len(names) == graph.nodes  # every op is on the way to the loss
    return graph, names


def run(tape):
    """One forward and backward of the U-Net on ``tape``: the gradients."""
    return [g.copy() for g in model.loss_and_gradients(tape)[1]]


reference = run(rm.Tape())  # store-all's gradients
with rm.Recorder() as recording:
    loss = model.forward()
graph, names = recorded_graph(recording.records, loss)
forward_ops = len(recording.records)
print(f"{forward_ops} forward ops, {graph.nodes - forward_ops} gradient nodes, "
      f"{sum(len(p) for p in graph.parents)} edges")
print(Counter(names[:forward_ops]).most_common())

fig, ax = plt.subplots(figsize=(14, 5))
graph_diagram(graph, names=names, ax=ax, title="the U-Net's joint graph, stored whole")
show(fig,
     "Arc diagram of the U-Net's recorded graph: its forward ops in a row left to right, "
     "the gradient nodes mirrored below; the skip connections are the long arcs from each "
     "encoder level's GELU over the levels below to the decoder's concatenate")

# %% [markdown]
# ## Why a chain schedule does not apply
#
# A chain schedule keeps *states*: cut the forward pass between two ops, and the state
# at that cut is everything computed before it and read after it. On a chain that is
# one value, the same kind at every cut, and a schedule chooses which cuts to keep.
# On the U-Net the state at a cut holds the running features *and* every skip not yet
# consumed: it grows through the encoder and shrinks through the decoder, and its
# values are of different shapes. Packing them into one state for `tape.chain` would
# keep all the skips at every kept cut; the choice that matters is per value, not
# per cut.

# %%
readers = graph.children
live = []  # for each cut after forward op i: the values made before it and read after it
for i in range(forward_ops - 1):
    live.append([j for j in range(i + 1) if any(i < c < forward_ops for c in readers[j])])
counts = [len(values) for values in live]
print(f"values live across a cut of the forward pass: from {min(counts)} to {max(counts)}")
widest = counts.index(max(counts))
print(f"after op {widest} ({names[widest]}):",
      ", ".join(f"{names[j]} {j}" for j in live[widest]))
assert max(counts) >= 3  # a chain would carry one

fig, ax = plt.subplots(figsize=(9, 2.8))
ax.step(range(1, forward_ops), counts, where="mid", color="tab:blue")
ax.set_xlabel("cut after forward op")
ax.set_ylabel("values live across it")
ax.set_title("the state a chain schedule would have to carry at each cut")
fig.tight_layout()
show(fig,
     "Step plot of the number of values computed before and read after each cut of the "
     "U-Net's forward pass: rising through the encoder as skips accumulate, falling through "
     "the decoder")

# %% [markdown]
# ## Every way, measured side by side
#
# `remat.graph_compare.compare_graph` (what `remat compare --graph unet` prints) runs
# the workload under
#
# * store-all, `rm.Tape()`: the reference;
# * `rm.checkpoint` around each block, placed by hand (the workload's
#   `wrap=rm.checkpoint`): only the blocks' inputs are kept, each block runs again in
#   backward;
# * DTR with each heuristic, `rm.Tape(memory=b, remat=DTR(name))`:
#   * `h_dtr`: evict the lowest `cost / (bytes x staleness)` (cheap to recompute,
#     large, long unused);
#   * `h_dtr_eq`: the same, with the cost of the evicted neighbourhood added (the
#     default of `remat="dtr"`: the DTR paper's own);
#   * `lru`: the least recently used;
#   * `largest_first`: the largest;
# * the optimal plan, `rm.Tape(memory=b, remat="optimal")`,
#
# at budgets `b` that are shares of store-all's saved bytes. Time is the median of
# interleaved runs over store-all's; memory is the tape's own count of saved bytes
# (`tape.stats.peak_bytes`, never above `b`) and the tracemalloc peak of the whole
# forward and backward (gradients, inputs and Python's objects included). The
# optimal mode's first run at each budget records and solves (the solve time is in
# the last column) and is not timed.
#
# The ops here take microseconds, so the times are mostly the tapes' own bookkeeping
# per op, and they are those of the (shared, two-core) machine that wrote this
# notebook: read them as rough. The ops recomputed are exact counts, the same on
# every run for `lru` and `largest_first`. `h_dtr` and `h_dtr_eq` weigh measured
# times, and the optimal plan minimises the compute time its first run measured op
# by op: ops of a few microseconds each are near ties, so their choices (and the
# number of ops they recompute) can change from run to run, and a plan that is
# optimal in predicted time need not recompute the fewest ops.

# %%
BUDGETS = (0.75, 0.6)
rows = compare_graph(model, BUDGETS, repeats=7)
print(f"{'method':<26}{'time':>6}{'held KiB':>10}{'traced KiB':>11}{'recomputed':>11}"
      "  plan (solve time)")
for row in rows:
    if not row.available:
        print(f"{row.label:<26}  did not run: {row.reason[:70]}")
        continue
    held = "" if row.tape_peak_bytes is None else f"{row.tape_peak_bytes / KiB:.0f}"
    plan = "" if row.plan_method is None else f"  {row.plan_method} ({row.solve_seconds:.1f} s)"
    print(f"{row.label:<26}{row.time_ratio:>5.2f}x{held:>10}"
          f"{row.traced_peak_bytes / KiB:>11.0f}{row.recomputed_ops:>11}{plan}")
assert not failures_of(rows)  # every run's gradients are store-all's, every tape within b
ran = [row for row in rows if row.available]
assert all(row.bit_identical for row in ran)

# %% [markdown]
# Two pictures of the trade. On the left, exact counts: the bytes the tape holds for
# backward, the quantity a budget bounds (for per-block checkpointing, what it holds
# between the forward and the backward: `model.measure(wrap=rm.checkpoint)`), against
# the forward ops evaluated, recomputations included, over store-all's. On the
# right, measured: the tracemalloc peak of the whole run against the time. At these
# tiny sizes the gradients, the inputs, the values in flight and the tapes' own
# bookkeeping (a kilobyte or two a record) are a large part of the traced peak, so
# the saving is smaller there than on the left.

# %%
checkpoint_held = model.measure(wrap=rm.checkpoint).saved_bytes
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
styles = {"store_all": ("s", "black"), "checkpoint": ("^", "tab:orange"),
          "optimal": ("*", "tab:red")}
colours = dict(zip(HEURISTICS, ("tab:blue", "tab:cyan", "tab:green", "tab:purple")))


def counted(row):
    held = checkpoint_held if row.method == "checkpoint" else row.tape_peak_bytes
    return held, (size.ops + row.recomputed_ops) / size.ops


def measured(row):
    return row.traced_peak_bytes, row.time_ratio


for ax, figures in zip(axes, (counted, measured)):
    for method in dict.fromkeys(row.method for row in ran):
        points = sorted(figures(row) for row in ran if row.method == method)
        if method.startswith("dtr:"):
            marker, colour = "o", colours[method.removeprefix("dtr:")]
        else:
            marker, colour = styles[method]
        ax.plot([b / KiB for b, _ in points], [y for _, y in points], marker=marker,
                color=colour, ms=13 if marker == "*" else 8, ls="-" if len(points) > 1 else "none",
                label=method.replace("dtr:", "DTR "))
axes[0].set_xlabel("KiB held for backward (the tape's count)")
axes[0].set_ylabel("forward ops evaluated / store-all's")
axes[1].set_xlabel("tracemalloc peak of forward + backward (KiB)")
axes[1].set_ylabel("time / store-all")
axes[0].legend(frameon=False, fontsize=8)
fig.suptitle(f"U-Net, budgets {' and '.join(f'{b:.0%}' for b in BUDGETS)} of store-all's "
             "saved bytes")
fig.tight_layout()
show(fig,
     "Two panels for store-all, per-block rm.checkpoint, each DTR heuristic and the "
     "optimal plan at each budget: forward ops evaluated relative to store-all against the "
     "KiB held for backward, and time relative to store-all against the tracemalloc peak")

# %% [markdown]
# ## What DTR evicts and recomputes
#
# `tape.stats` counts DTR's choices per op as it runs: `evicted_by_op[k]` is how
# many times op `k`'s value was evicted, `recomputed_by_op[k]` how many times op `k`
# was evaluated again (only the ops that had any), op `k` being `tape.records[k]`
# on a tape run once. The tape records the same ops in the same order as the run
# that made the graph above, so op `k` is node `k`. `lru` is used here because its
# choices do not depend on measured times: the picture is the same on every run.

# %%
budget = int(0.6 * size.saved_bytes)
tape = rm.Tape(memory=budget, remat=DTR("lru"))
for p in params:
    p.grad = None
with tape:
    loss = model.forward()
assert [r.op.name for r in tape.records] == [n.split()[0] for n in names[:forward_ops]]
loss.backward()
assert all(np.array_equal(p.grad, r) for p, r in zip(params, reference))
stats = tape.stats
dtr_recomputed = stats.recomputed_ops
print(f"DTR('lru') at {budget / KiB:.0f} KiB: {stats.evictions} evictions, "
      f"{stats.recomputed_ops} ops recomputed, peak {stats.peak_bytes / KiB:.0f} KiB")
assert sum(stats.evicted_by_op.values()) == stats.evictions
assert sum(stats.recomputed_by_op.values()) == stats.recomputed_ops
assert stats.peak_bytes <= budget
assert stats.recomputed_ops >= 2 * stats.evictions  # (see below)
for what, counted in (("evicted", stats.evicted_by_op), ("recomputed", stats.recomputed_by_op)):
    by_op = Counter()
    for k, n in counted.items():
        by_op[names[k].split()[0]] += n
    print(f"{what}, by op:", ", ".join(f"{op} {n}" for op, n in by_op.most_common()))

fig, ax = plt.subplots(figsize=(14, 5))
graph_diagram(graph, names=names, ax=ax,
              recomputed=stats.recomputed_by_op,
              title=f"DTR('lru') at 60% of store-all's saved bytes: "
                    f"{stats.recomputed_ops} recomputations")
show(fig,
     "The U-Net's graph with the values DTR with the LRU heuristic recomputed at 60% of "
     "store-all's saved bytes in orange, each with its count, and the values it kept in "
     "dark blue")

# %% [markdown]
# DTR evicted only a few values, yet recomputed several times as many ops. To bring
# back an evicted value it evaluates its op again, which needs the op's inputs: those
# still in memory are read, the others are recomputed first, recursively. Many of
# the U-Net's intermediates (the padded signal, its three slices, their
# concatenation) are saved by no record, since no VJP reads them, so they are not in
# memory when backward asks for a convolution's output: each recomputation walks back
# to the nearest value that is. The heuristic sees only the value it evicts; the plan
# below sees the whole graph.

# %% [markdown]
# ## The optimal plan, drawn
#
# Now the same budget under `rm.Tape(memory=b, remat="optimal")`. Its first run
# records the graph (under DTR, so within `b` already) and, when its backward ends,
# hands it with the measured costs to `rm.schedules.plan_graph`, which solves
# Checkmate's mixed-integer program with HiGHS (`scipy.optimize.milp`): which values
# each stage computes and which it keeps, at the least total compute within `b`
# (`docs/guide/graph_plan.md`). The plan is cached by the graph's signature; the
# second run finds it and follows it. `tape.stats` says how the plan was found
# (`method`: `optimal` when HiGHS proved it, `time limit` when time ran out with a
# plan within a gap of the optimum, or a heuristic's plan), how long solving took,
# and what the run did.
#
# The planner's graph (`tape.stats.graph`, with a label per node in
# `tape.stats.names`) is not the one drawn above. A budget counts the values that
# records *save*, so the planner has a node per op whose output some record saves
# (an *op value*); the ops in between (the padding, the slices, ...) are the
# *recipe* of the op values made from them, recomputed with them. Then the VJPs, in
# the order the backward runs them, those whose reads nest sharing one node (`vjp
# matmul 40 (+7)` stands for the VJP of op 40 and the seven after it in the sweep).
# `tape.stats.columns` gives each node's op index (a VJP node's: its first VJP's);
# placing each node there puts every VJP node under its op again. The plan is data: `simulate_graph` checks and prices it without the
# solver, and `graph_diagram` draws it.

# %%
tape = rm.Tape(memory=budget, remat="optimal")
assert all(np.array_equal(g, r) for g, r in zip(run(tape), reference))  # recorded, planned
print("first run:", tape.stats.method, "-", tape.stats.fallback)
assert all(np.array_equal(g, r) for g, r in zip(run(tape), reference))  # follows the plan
stats = tape.stats
assert stats.planned, stats.fallback
plan, planned = stats.plan, stats.graph
result = simulate_graph(plan, planned)
values = sum(not name.startswith("vjp ") for name in stats.names)
print(f"the planner's graph: {values} op values of {forward_ops} ops, "
      f"{planned.nodes - values} VJP nodes:", ", ".join(stats.names))
print(f"second run: {stats.method} plan, solved in {stats.solve_seconds:.1f} s; it "
      f"recomputes {plan.recomputed} op values, {stats.recomputed_ops} ops with their "
      f"recipes (DTR('lru'): {dtr_recomputed}); peak {stats.peak_bytes / KiB:.0f} KiB "
      f"of {budget / KiB:.0f}")
print(f"predicted compute {stats.predicted_seconds * 1e3:.2f} ms, "
      f"store-all's {sum(planned.compute) * 1e3:.2f} ms (measured op by op)")
assert stats.peak_bytes <= budget and result.peak_bytes <= plan.memory

fig, ax = plt.subplots(figsize=(14, 5))
graph_diagram(planned, plan, names=stats.names, forward=values, columns=stats.columns, ax=ax)
show(fig,
     "The planner's graph of the U-Net (a node per saved op value above, a node per VJP "
     "below, each at its op's index) coloured by the plan at 60% of store-all's saved "
     "bytes: values kept to their last use in dark blue, values recomputed in orange with "
     "their counts")

# %% [markdown]
# ## Exactness
#
# Recomputing a value evaluates the same op on the same inputs, so it gives the same
# bits, and the gradients are store-all's exactly, under every heuristic and budget
# and under the plan (`compare_graph` compared every run above with store-all's,
# array by array). DTR checks each recomputed value against a fingerprint taken when it
# was evicted, so an op that is not deterministic raises `rm.ReplayError` rather than
# give other gradients.

# %%
checked = [row for row in rows if row.available]
assert all(row.bit_identical for row in checked) and not failures_of(rows)
runs = sum(len(row.seconds_runs) + 1 for row in checked)
print(f"{len(checked)} methods and budgets, {runs} runs: every gradient bit for bit "
      "store-all's, every tape within its budget")
