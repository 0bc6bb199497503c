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
# # A transformer under a memory budget
#
# Checkpointing is standard for training large transformers: usually applied per block,
# and in selective variants that recompute only what is cheap to redo but costly to keep,
# such as the attention scores. This notebook takes remat's small GPT-style transformer
# (`remat.workloads.transformer`: pre-norm blocks, multi-head causal attention, a GELU
# MLP, all written with remat's own ops) and differentiates it
#
# 1. without checkpointing;
# 2. with `rm.checkpoint` around every block;
# 3. with every block checkpointed selectively: `rm.checkpoint(block,
#    policy=rm.policies.save_ops("matmul"))` keeps the outputs of the block's matrix
#    products, so that backward evaluates only the cheap rest again;
# 4. as `tape.chain` over the blocks under a budget: revolve with a few slots, and the
#    optimal plan for budgets in bytes.
#
# Every way gives the gradients of the first bit for bit; they differ in what they keep
# and what they compute again. The model is tiny so that the notebook runs in seconds;
# `python -m benchmarks transformer` measures a larger one beside PyTorch.

# %%
import gc
import statistics
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
from remat import blockwise, schedules, workloads


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


MiB, KiB = 2**20, 2**10

SIZES = dict(steps=6, width=32, heads=4, context=64, batch=2)
model = workloads.transformer(**SIZES)
print(model.description)
print(f"{sum(p.size for p in model.params)} parameters in {len(model.params)} tensors")
print(repr(workloads.corpus()[:120]))

# %% [markdown]
# ## What one block keeps for backward
#
# Run one block on a recording tape and add up what its records save, op by op (an
# array saved by two records is counted once, for the first). The attention scores
# and their softmax are `(batch, heads, context, context)`: with the context twice the
# width, they are the largest arrays of the block.

# %%
h = model.start()
with rm.Recorder() as tape:
    model.step[0](h)
seen, by_op = set(), {}
for record in tape.records:
    for array in (*record.args, record.ans):
        if hasattr(array, "nbytes") and id(array) not in seen:
            seen.add(id(array))
            by_op[record.op.name] = by_op.get(record.op.name, 0) + array.nbytes
block_bytes = sum(by_op.values())
for name, nbytes in sorted(by_op.items(), key=lambda kv: -kv[1]):
    print(f"{name:<12}{nbytes / KiB:>9.1f} KiB  {nbytes / block_bytes:6.1%}")
print(f"{'one block':<12}{block_bytes / KiB:>9.1f} KiB")
B, H, T = SIZES["batch"], SIZES["heads"], SIZES["context"]
score_bytes = B * H * T * T * 8
assert by_op["softmax"] == score_bytes  # the softmax keeps its output: one score array

fig, ax = plt.subplots(figsize=(7, 3))
names = sorted(by_op, key=by_op.get)
ax.barh(names, [by_op[n] / KiB for n in names],
        color=["tab:red" if n in ("softmax", "einsum") else "tab:gray" for n in names])
ax.set_xlabel("KiB saved for backward, one block")
ax.set_title("red: the attention core (scores, softmax, weighted sum)")
fig.tight_layout()
show(fig,
     "KiB each kind of op in one block saves for backward, largest first; the attention "
     "core (softmax and einsum) in red")

# %% [markdown]
# ## Every way, measured side by side
#
# `remat.blockwise.measure` runs each mode on the same model: memory is the tracemalloc
# peak of a whole forward and backward (gradients included), in a run of its own; time
# is the median of runs without tracemalloc, the modes interleaved; block evaluations
# are counted by wrapping the blocks, and the ops evaluated during backward by
# `rm.count_ops()`. `remat compare --workload transformer` prints the same table.
# Besides `save_ops("matmul")`, the mode `dots` keeps every product,
# `save_ops("matmul", "einsum")` (JAX's `dots_saveable`): here that is about as much as
# no checkpointing holds, since the attention scores are products too.

# %%
SNAPSHOTS = 2
MODES = ("none", "checkpoint", "selective", "dots", "revolve")
rows = blockwise.measure(model, SNAPSHOTS, repeats=5, modes=MODES)
print(f"{'mode':<11}{'block evals':>12}{'matmul':>7}{'einsum':>7}{'softmax':>8}{'all ops':>8}"
      f"{'traced MiB':>11}{'memory':>8}{'time':>7}")
for row in rows:
    ops = row["recomputed_ops"]
    print(f"{row['mode']:<11}{row['block_evaluations']:>12}{ops.get('matmul', 0):>7}"
          f"{ops.get('einsum', 0):>7}{ops.get('softmax', 0):>8}{sum(ops.values()):>8}"
          f"{row['traced_peak_bytes'] / MiB:>11.3f}{row['memory_ratio']:>7.3f}x"
          f"{row['time_ratio']:>6.2f}x  {'bit-identical' if row['bit_identical'] else 'DIFFER'}")
for row in rows:
    print(f"  {row['mode']}: {row['label']}")
modes = {row["mode"]: row for row in rows}
n = SIZES["steps"]
assert all(row["bit_identical"] for row in rows)
assert modes["checkpoint"]["block_evaluations"] == 2 * n
assert modes["revolve"]["block_evaluations"] == schedules.optimal_forward_steps(n, SNAPSHOTS)
assert modes["checkpoint"]["recomputed_ops"]["matmul"] == 4 * n  # 4 projections a block
selective = modes["selective"]["recomputed_ops"]
assert "matmul" not in selective and selective["softmax"] == selective["einsum"] / 2 == n
assert "einsum" not in modes["dots"]["recomputed_ops"]
traced = {mode: row["traced_peak_bytes"] for mode, row in modes.items()}
assert traced["checkpoint"] < traced["selective"] < traced["dots"]
assert traced["selective"] < 0.8 * traced["none"]

# %% [markdown]
# ## The attention memory that selective recomputation gives back
#
# What each mode holds between the forward and the backward is what its records save
# (`tape.saved_bytes()` right after the forward; a checkpoint's record counts the
# values its policy kept). Keeping the `einsum`s too (`dots`) holds, per block, the
# `(batch, heads, context, context)` scores and the `(batch, heads, context, head)`
# weighted sum; `save_ops("matmul")` gives exactly that back and pays with evaluating the
# attention core again.

# %%
held = {}
for mode in ("none", "checkpoint", "selective", "dots"):
    policy = blockwise.POLICIES.get(mode, "no checkpoint")
    wrap = None if mode == "none" else (lambda f, p=policy: rm.checkpoint(f, policy=p))
    with rm.Recorder() as tape:
        model.run_layers(wrap)
    held[mode] = tape.saved_bytes()
head = SIZES["width"] // H
attention = n * (B * H * T * T + B * H * T * head) * 8  # scores and weighted sums, float64
for mode, nbytes in held.items():
    print(f"{modes[mode]['label']:<48}{nbytes / KiB:>9.0f} KiB held after the forward")
print(f"given back by save_ops('matmul') against save_ops('matmul', 'einsum'): "
      f"{(held['dots'] - held['selective']) / KiB:.0f} KiB = {n} blocks x (scores + sums)")
assert held["dots"] - held["selective"] == attention

fig, ax = plt.subplots(figsize=(8, 3))
order = ["none", "dots", "selective", "checkpoint"]
ax.barh([modes[m]["label"] for m in order], [held[m] / MiB for m in order],
        color=["tab:gray", "tab:purple", "tab:red", "tab:orange"])
for y, m in enumerate(order):
    ax.annotate(f"{held[m] / MiB:.2f} MiB", (held[m] / MiB, y), xytext=(4, 0),
                textcoords="offset points", va="center", fontsize=8)
ax.set_xlim(0, 1.2 * held["none"] / MiB)
ax.set_xlabel("MiB held between forward and backward")
ax.set_title(f"{n} blocks: keeping the einsums too (purple) holds the attention\n"
             "scores and weighted sums that save_ops(\"matmul\") (red) gives back", fontsize=10)
fig.tight_layout()
show(fig,
     f"Horizontal bars: MiB held between forward and backward for {n} blocks under no "
     "checkpointing, save_ops(\"matmul\", \"einsum\") per block, save_ops(\"matmul\") per "
     "block and rm.checkpoint per block, each labelled with its value; the gap between "
     "the two policies is the attention scores and weighted sums")

# %% [markdown]
# ## The budget curve
#
# `rm.Tape(memory=b)` measures the blocks and plans the chain with the optimal plan
# for `b` bytes (`remat.schedules.Optimal`). For budgets from the least any plan needs
# up to what storing every block's tape takes, the held bytes (`tape.stats.peak_bytes`,
# never above the budget), the tracemalloc peak and the time, beside the modes above.

# %%
def run_on(tape):
    for p in model.params:
        p.grad = None
    model.run(tape).backward()
    return [p.grad for p in model.params], tape.stats


def traced(make_tape):
    gc.collect()
    tracemalloc.start()
    _, stats = run_on(make_tape())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, stats


def timed(makers, repeats=7):
    """Median wall time of each maker's run, the makers interleaved round-robin."""
    seconds = {key: [] for key in makers}
    for _ in range(repeats):
        for key, make_tape in makers.items():
            gc.collect()
            start = time.perf_counter()
            run_on(make_tape())
            seconds[key].append(time.perf_counter() - start)
    return {key: statistics.median(times) for key, times in seconds.items()}


reference = run_on(rm.Tape())[0]
probe = rm.Tape(memory=64 * MiB)
run_on(probe)
costs = probe.plans[0][1]
least, most = schedules.minimum_bytes(costs), sum(costs.tape_bytes) + costs.state_bytes[0]
budgets = sorted({int(least * (most / least) ** (k / 5)) for k in range(6)})
curve = []
for budget in budgets:  # the first run of each budget measures and plans; it is not timed
    grads, stats = run_on(rm.Tape(memory=budget))
    assert all(np.array_equal(g, r) for g, r in zip(grads, reference))
    assert stats.peak_bytes <= budget
    peak, _ = traced(lambda: rm.Tape(memory=budget))
    curve.append(dict(budget=budget, held=stats.peak_bytes, traced=peak,
                      forward_steps=stats.forward_steps))
makers = {b: (lambda b=b: rm.Tape(memory=b)) for b in budgets}
seconds = timed({"store-all": lambda: rm.Tape(), **makers})
base_seconds = seconds["store-all"]
for point in curve:
    point["seconds"] = seconds[point["budget"]]
print(f"{'budget KiB':>10}{'held KiB':>10}{'traced MiB':>11}{'block evals':>12}{'time':>7}")
for point in curve:
    print(f"{point['budget'] / KiB:>10.0f}{point['held'] / KiB:>10.0f}"
          f"{point['traced'] / MiB:>11.3f}{point['forward_steps']:>12}"
          f"{point['seconds'] / base_seconds:>6.2f}x")
assert curve[0]["forward_steps"] > curve[-1]["forward_steps"]

fig, ax = plt.subplots(figsize=(7, 4))
ax.plot([p["traced"] / MiB for p in curve], [p["seconds"] / base_seconds for p in curve],
        "o-", color="tab:blue", label="rm.Tape(memory=b): optimal plan")
markers = dict(none=("s", "tab:gray"), checkpoint=("^", "tab:orange"),
               selective=("v", "tab:red"), dots=("P", "tab:purple"), revolve=("D", "tab:green"))
for row in rows:
    marker, color = markers[row["mode"]]
    ax.plot(row["traced_peak_bytes"] / MiB, row["time_ratio"], marker, color=color, ms=9,
            label=row["label"])
ax.set_xlabel("tracemalloc peak of forward + backward (MiB)")
ax.set_ylabel("time / no checkpointing")
ax.set_title(f"{SIZES['steps']} blocks: memory against time")
ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
show(fig,
     f"Time relative to no checkpointing against the tracemalloc peak in MiB for {n} "
     "blocks: the optimal plan's curve over byte budgets, and one point for each mode: "
     "no checkpointing, rm.checkpoint per block, the two selective policies, and revolve "
     "over the blocks")

# %% [markdown]
# The curve trades memory for recomputation one block at a time; per-block
# checkpointing sits near it where every block input is kept. Selective recomputation
# works inside the blocks instead: it keeps the products, which are costly to compute,
# and recomputes the large, cheap attention scores and elementwise ops, landing
# between per-block checkpointing and none in memory. In time it does not pay here: on
# a model this small every op is cheap, so skipping four matmuls a block saves less
# than the policy's bookkeeping costs, and it runs slower than recomputing the whole
# block (`python -m benchmarks transformer` measures a larger model). Its memory
# effect, measured exactly above, is what carries over.
