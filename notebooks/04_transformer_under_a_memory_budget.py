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
# 3. with every block checkpointed selectively (see the marked section below);
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

import matplotlib

if "inline" not in matplotlib.get_backend():
    matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import remat as rm
from remat import blockwise, schedules, workloads

plt.rcParams["figure.dpi"] = 72  # small figures, so that the executed notebook stays small
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
plt.show()

# %% [markdown]
# ## Per block, and revolve over the blocks
#
# `remat.blockwise.measure` runs each mode on the same model: memory is the tracemalloc
# peak of a whole forward and backward (gradients included), in a run of its own; time
# is the median of runs without tracemalloc, the modes interleaved; block evaluations
# are counted by wrapping the blocks. `remat compare --workload transformer` prints the
# same table.

# %%
SNAPSHOTS = 2
rows = blockwise.measure(model, SNAPSHOTS, repeats=5)
print(f"{'mode':<34}{'block evals':>12}{'traced MiB':>11}{'memory':>8}{'time':>7}")
for row in rows:
    print(f"{row['label']:<34}{row['block_evaluations']:>12}"
          f"{row['traced_peak_bytes'] / MiB:>11.3f}{row['memory_ratio']:>7.3f}x"
          f"{row['time_ratio']:>6.2f}x  {'bit-identical' if row['bit_identical'] else 'DIFFER'}")
modes = {row["mode"]: row for row in rows}
assert all(row["bit_identical"] for row in rows)
assert modes["checkpoint"]["block_evaluations"] == 2 * SIZES["steps"]
assert modes["revolve"]["block_evaluations"] == schedules.optimal_forward_steps(
    SIZES["steps"], SNAPSHOTS)
assert modes["checkpoint"]["traced_peak_bytes"] < 0.6 * modes["none"]["traced_peak_bytes"]

# %% [markdown]
# ## Selective recomputation
#
# **Placeholder: this section waits for `rm.policies` (issue 13's policies, built in
# parallel).** Once `rm.checkpoint(f, policy=rm.policies.save_ops("matmul"))` is on main,
# it measures the third mode here: every block checkpointed, but the outputs of its
# `matmul`s (the projections) kept, so that backward evaluates no matmul again and
# recomputes only the attention core, the layer norms and the GELU (counted with
# `rm.count_ops()`); and the score memory this gives back against keeping every
# product (`save_ops("matmul", "einsum")`).

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


def timed(makers, repeats=5):
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
for row, marker, color in zip(rows, "s^D", ("tab:gray", "tab:orange", "tab:red")):
    ax.plot(row["traced_peak_bytes"] / MiB, row["time_ratio"], marker, color=color, ms=9,
            label=row["label"])
ax.set_xlabel("tracemalloc peak of forward + backward (MiB)")
ax.set_ylabel("time / no checkpointing")
ax.set_title(f"{SIZES['steps']} blocks: memory against time")
ax.legend(frameon=False, fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# The curve trades memory for recomputation one block at a time; per-block
# checkpointing sits on it where every block input is kept. Within a block, only
# selective recomputation can go further, keeping the cheap-to-keep products and
# recomputing the large, cheap-to-redo attention core.
