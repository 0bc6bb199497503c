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
# # A real model under a memory budget
#
# A character-level recurrent network is a loop over the characters of a sequence: to
# differentiate the loss over `T` characters, store-all keeps `T` step tapes, and a
# long sequence quickly costs more memory than the model. Here a small RNN is
# trained twice with plain SGD, once on `rm.Tape()` and once on `rm.Tape(snapshots=8)`.
# Because revolve's gradients are bit-for-bit those of store-all, the two training
# runs are the same run: every loss and every parameter agrees exactly, while the
# budgeted run holds a fraction of the memory and spends more time recomputing.
#
# The last section differentiates a second model, the heat equation written as a
# NumPy-style stencil with `rm.roll`, under revolve and under byte budgets
# (`rm.Tape(memory=...)`).

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
import remat.functional
import remat.executor
import remat.schedules.binomial
import remat.schedules.online
import remat.schedules.revolve
import remat.tape
from remat import schedules


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
# ## Data
#
# The text is remat's own documentation (the docstrings of a few modules),
# lower-cased, with characters outside a 32-symbol alphabet replaced by spaces. Each
# SGD step sees a batch of 16 windows of `T + 1 = 301` characters at random offsets;
# the model reads characters `0..T-1` and predicts characters `1..T`.

# %%
MODULES = [rm.tape, rm.executor, rm.functional, rm.schedules, rm.schedules.binomial,
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


# %% [markdown]
# ## Model
#
# `h_(t+1) = tanh(x_t W_x + h_t W_h + b)`, next-character logits `h_(t+1) W_y + c`.
# The loop's state carries the hidden vector, the position `t` and the running sum of
# the cross-entropy, so the whole sequence is one `tape.loop` of `T` steps. The
# position must live in the state, not in a Python counter: under revolve a step is
# evaluated several times, in an order the schedule decides, and it must compute the
# same thing each time.
#
# Parameters are updated by `rm.optim.SGD`, which gives each parameter a new array
# (`p -= lr * p.grad` under `rm.no_grad()`) and leaves the old one to any backward
# that still needs it.

# %%
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
    optimizer = rm.optim.SGD(params, lr=LR)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
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


# %% [markdown]
# ## Training twice
#
# Same initial parameters, same batches, same learning rate; only the tape differs.

# %%
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
show(fig,
     f"Cross-entropy loss against SGD step for {name_a} and {name_b}: the two curves "
     "lie exactly on top of each other")


# %% [markdown]
# ## Memory and time
#
# `tape.stats.peak_bytes` counts what the loop held (step tapes and snapshots);
# `tracemalloc` measures everything one SGD step allocated, forward and backward,
# temporaries included (the batch is built before measuring). Revolve keeps 8 states
# (hidden vector, position, running loss) plus one step's tape, where store-all keeps
# 300 step tapes.

# %%
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
show(fig,
     f"Left: MiB of one SGD step, held by the loop (filled) and the tracemalloc peak "
     f"(outlined), for {name_a} and {name_b}; revolve's is a small fraction. Right: "
     f"seconds for {ITERATIONS} SGD steps of each; revolve takes longer")

# %% [markdown]
# ## Longer sequences
#
# Store-all's memory grows linearly with the sequence length; with a fixed budget,
# revolve's does not grow at all, and its work grows like `r T` with the repetition
# number `r` creeping up slowly. One gradient per length:

# %%
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

# %% [markdown]
# Revolve makes the memory of backpropagation through time a constant you choose,
# paid for in recomputation and not in accuracy: the training run above is the
# store-all run, to the last bit.

# %% [markdown]
# ## A stencil under a byte budget: the heat equation
#
# The explicit finite-difference step of the heat equation `u_t = u_xx` on 64 points
# adds `r (u[i-1] - 2 u[i] + u[i+1])` to each interior point (`r = 0.25`; the scheme is
# stable for `r <= 1/2`), and holds the two ends fixed. Written as NumPy code would
# write it, the Laplacian is two `rm.roll`s and a few elementwise ops; the roll wraps
# around at the ends, where the mask makes the update zero. The loss compares the
# temperature after 400 steps with a target profile, and its gradient with respect to
# the *initial* temperature is what an inverse problem (which start gives this end?)
# descends along.
#
# The loop runs under store-all, under revolve with 6 snapshots, and under byte
# budgets: `rm.Tape(memory=b)` measures one step and plans the least recomputation
# that holds at most `b` bytes. Each run must give the same loss and the same
# gradient, to the bit.

# %%
R, POINTS, STEPS, HEAT_SNAPSHOTS = 0.25, 64, 400, 6
grid = np.linspace(0.0, 1.0, POINTS)
mask = np.full(POINTS, R)
mask[[0, -1]] = 0.0  # the two ends stay fixed
target = np.exp(-(((grid - 0.3) / 0.1) ** 2))


def heat_step(u):  # one explicit step: the Laplacian by two rolls
    return u + (rm.roll(u, 1) + rm.roll(u, -1) - 2 * u) * mask


def heat_gradient(tape):
    u0 = rm.tensor(np.sin(np.pi * grid), requires_grad=True)
    with tape:
        u = tape.loop(heat_step, u0, steps=STEPS)
        loss = ((u - target) ** 2).sum()
    loss.backward()
    return dict(loss=loss.item(), u=u.data, grad=u0.grad, stats=tape.stats)


KiB = 2**10
BUDGETS = [2 * KiB, 4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB]
heat = {"store-all": heat_gradient(rm.Tape(schedule="store_all")),
        f"revolve, {HEAT_SNAPSHOTS} snapshots": heat_gradient(rm.Tape(snapshots=HEAT_SNAPSHOTS))}
for budget in BUDGETS:
    heat[f"budget {budget // KiB} KiB"] = heat_gradient(rm.Tape(memory=budget))

reference = heat["store-all"]
print(f"{'':<22}{'bytes held':>11}{'evaluations':>13}{'per step':>9}")
for name, run in heat.items():
    stats = run["stats"]
    print(f"{name:<22}{stats.peak_bytes:>11}{stats.forward_steps:>13}"
          f"{stats.forward_steps / STEPS:>9.2f}")
    assert run["loss"] == reference["loss"]
    assert np.array_equal(run["grad"], reference["grad"])  # bit for bit
print(f"loss {reference['loss']:.6f} and its gradient: identical under all {len(heat)} tapes")

assert reference["stats"].forward_steps == STEPS
revolve_stats = heat[f"revolve, {HEAT_SNAPSHOTS} snapshots"]["stats"]
assert revolve_stats.forward_steps == schedules.optimal_forward_steps(STEPS, HEAT_SNAPSHOTS)
assert all(heat[f"budget {b // KiB} KiB"]["stats"].peak_bytes <= b for b in BUDGETS)

fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 3.6))
left.plot(grid, np.sin(np.pi * grid), color="tab:blue", label="start, u(0)")
left.plot(grid, reference["u"], color="tab:red", label=f"after {STEPS} steps")
left.plot(grid, target, ":", color="black", label="target")
left.set_xlabel("x")
left.set_ylabel("temperature")
left.legend(frameon=False, fontsize=8)
for k, (name, run) in enumerate(heat.items()):  # the interior: the fixed ends feed every step
    style = dict(lw=4, alpha=0.5, color="tab:gray") if k == 0 else dict(ls="--", lw=1)
    label = name if k < 2 else (f"{len(BUDGETS)} byte budgets" if k == 2 else None)
    middle.plot(grid[1:-1], run["grad"][1:-1], label=label, **style)
middle.set_xlabel("x (interior points)")
middle.set_ylabel("d loss / d u(0)")
middle.set_title(f"the {len(heat)} gradients coincide exactly", fontsize=10)
middle.legend(frameon=False, fontsize=8)
budget_runs = [heat[f"budget {b // KiB} KiB"]["stats"] for b in BUDGETS]
right.plot([s.peak_bytes / KiB for s in budget_runs], [s.forward_steps for s in budget_runs],
           "o-", color="tab:green", label="rm.Tape(memory=b)")
right.plot([revolve_stats.peak_bytes / KiB], [revolve_stats.forward_steps], "s",
           color="tab:red", label=f"revolve, {HEAT_SNAPSHOTS} snapshots")
right.plot([reference["stats"].peak_bytes / KiB], [STEPS], "D", color="tab:gray",
           label="store-all")
right.set_xscale("log", base=2)
ticks = [b // KiB for b in BUDGETS] + [reference["stats"].peak_bytes // KiB]
right.set_xticks(ticks, [str(t) for t in ticks])
right.minorticks_off()
right.set_xlabel("KiB held by the loop (log scale)")
right.set_ylabel("step evaluations")
right.legend(frameon=False, fontsize=8)
fig.tight_layout()
show(fig,
     f"Left: the temperature along x at the start, after {STEPS} heat steps, and the "
     f"target. Middle: the gradient of the loss with respect to the start at the interior "
     f"points, drawn once per tape ({len(heat)} tapes); the curves lie exactly on top of "
     f"each other. Right: "
     f"step evaluations against KiB held, on a log axis: store-all holds "
     f"{reference['stats'].peak_bytes // KiB} KiB for {STEPS} evaluations; the byte budgets "
     f"from 2 to 32 KiB make {budget_runs[0].forward_steps} down to "
     f"{budget_runs[-1].forward_steps} evaluations; revolve with {HEAT_SNAPSHOTS} snapshots "
     f"holds {revolve_stats.peak_bytes / KiB:g} KiB for {revolve_stats.forward_steps}")

# %% [markdown]
# The stencil is ordinary NumPy code on Tensors, and the schedule is a property of the
# tape, not of the step: the same `heat_step` runs under every tape above, and each
# budget's gradient is store-all's, to the last bit.
