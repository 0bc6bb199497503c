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
# # Forward and reverse
#
# A program `y = f(x)` with `x` in R^n and `y` in R^m has a Jacobian `J`, an m x n
# matrix. Automatic differentiation never forms it. It gives one of two products:
#
# * **forward mode** carries a *tangent* `v` (a direction in input space) along
#   with the values, op by op in the order they run, and ends with `J v`: a
#   Jacobian-vector product, `rm.jvp`;
# * **reverse mode** runs the program, then carries a *cotangent* `u` (a weight on
#   each output) back through the recorded ops, and ends with `u^T J`: a
#   vector-Jacobian product, what `rm.grad` computes for a scalar output (`u = 1`).
#
# Each costs a small multiple of one evaluation of `f`. This notebook differentiates
# one function both ways, counts what a whole Jacobian costs either way, and then
# combines the two: the Hessian-vector product of a loss through a checkpointed
# loop, forward over reverse, within the loop's memory budget.

# %%
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


rng = np.random.default_rng(0)

# %% [markdown]
# ## One function, both ways
#
# `f` maps R^3 to R^2. `rm.jvp(f, (x,), (v,))` returns `f(x)` and `J v`; the
# vector-Jacobian product `u^T J` is the gradient of the scalar `u . f(x)`. The two
# are tied by `u . (J v) = (u^T J) . v` for every `u` and `v`, and both agree with
# central differences.

# %%
def f(x):
    return rm.stack([rm.sin(x[0]) * x[1], rm.exp(x[1] - x[2]) + x[0] * x[2]])


x = np.array([0.3, -1.2, 0.5])
v = np.array([1.0, 0.5, -2.0])
u = np.array([0.7, -1.1])

y, jv = rm.jvp(f, (x,), (v,))  # forward: one sweep gives J v
ujt = rm.grad(lambda x: (f(x) * u).sum())(x)  # reverse: one sweep gives u^T J


def value(x):
    with rm.no_grad():
        return f(rm.tensor(x)).numpy()


eps = 1e-6
numeric_jv = (value(x + eps * v) - value(x - eps * v)) / (2 * eps)
print("f(x)          ", y)
print("J v  (forward)", jv, "  central differences", numeric_jv)
print("u^T J (reverse)", ujt)
print("u . (J v) =", u @ jv, "   (u^T J) . v =", ujt @ v)
assert np.allclose(jv, numeric_jv, rtol=1e-7)
assert np.isclose(u @ jv, ujt @ v, rtol=1e-12)

# %% [markdown]
# ## A whole Jacobian: by columns or by rows
#
# Column `j` of `J` is `J e_j`, one forward sweep; row `i` is `e_i^T J`, one reverse
# sweep. So the whole Jacobian costs n forward sweeps or m reverse sweeps: forward
# mode wins for few inputs and many outputs, reverse mode for many inputs and few
# outputs, and a gradient (m = 1) is always one reverse sweep, whatever n.
#
# Below, `g` maps R^n to R^m through a small tanh network; for a fixed
# `n + m = 66` inputs and outputs, each Jacobian is built both ways, checked equal,
# and timed.

# %%
def network(n, m, seed=1):
    r = np.random.default_rng(seed)
    w1 = rm.tensor(r.standard_normal((n, 32)) / np.sqrt(n))
    w2 = rm.tensor(r.standard_normal((32, m)) / np.sqrt(32))
    return lambda x: rm.tanh(rm.tanh(x @ w1) @ w2)


def jacobian_by_columns(g, x):  # n JVPs
    return np.stack([rm.jvp(g, (x,), (e,))[1] for e in np.eye(x.size)], axis=1)


def jacobian_by_rows(g, x, m):  # m VJPs
    return np.stack([rm.grad(lambda x, e=e: (g(x) * e).sum())(x) for e in np.eye(m)])


def best_time(fn, repeats=5):
    """The least CPU time of a few runs (on a shared machine, wall time also counts the
    waits for a core)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


rows = []
for n in (2, 8, 16, 33, 50, 58, 64):
    m = 66 - n
    g, x0 = network(n, m), rng.standard_normal(n)
    by_columns, by_rows = jacobian_by_columns(g, x0), jacobian_by_rows(g, x0, m)
    assert np.allclose(by_columns, by_rows, rtol=1e-12, atol=1e-14)
    rows.append((n, m, best_time(lambda: jacobian_by_columns(g, x0)),
                 best_time(lambda: jacobian_by_rows(g, x0, m))))

print(" n   m   by columns (n JVPs)   by rows (m VJPs)   one JVP   one VJP")
for n, m, tc, tr in rows:
    print(f"{n:2d}  {m:2d}   {tc * 1e3:8.2f} ms          {tr * 1e3:8.2f} ms"
          f"        {tc / n * 1e6:5.0f} us  {tr / m * 1e6:5.0f} us")

fig, ax = plt.subplots(figsize=(6, 3.2))
ns = [r[0] for r in rows]
ax.plot(ns, [r[2] * 1e3 for r in rows], "o-", label="by columns: n forward sweeps (rm.jvp)")
ax.plot(ns, [r[3] * 1e3 for r in rows], "s-", label="by rows: m reverse sweeps (rm.grad)")
ax.set_xlabel("inputs n (outputs m = 66 - n)")
ax.set_ylabel("ms (CPU) for the whole Jacobian")
ax.legend()
fig.tight_layout()
show(fig,
     "Milliseconds for the whole Jacobian against the number of inputs n (outputs "
     "m = 66 - n): by columns, n forward sweeps, grows with n; by rows, m reverse "
     "sweeps, falls as n grows; the lines cross")

# %% [markdown]
# The cost follows the number of sweeps: n for columns, m for rows. Here one VJP
# costs about twice one JVP (it records the function, then sweeps back; the JVP
# computes each tangent beside its value as the function runs, recording nothing,
# and `rm.grad` has more to set up), so the lines cross past `n = m`, near
# `n = 2m`, where n JVPs cost what m VJPs do. (The times
# are CPU times on this machine, from the run that wrote the notebook; the count of
# sweeps is the part that does not depend on the machine.) `python -m benchmarks
# forward` measures `rm.jvp` of a 1000-op chain beside the reverse sweep, each
# against hand-written NumPy.

# %% [markdown]
# ## Second order: forward over reverse, through a revolve loop
#
# For a scalar loss `L(w)`, the Hessian-vector product `H v` is the directional
# derivative of the gradient: `rm.hvp(L, (w,), (v,))` is `rm.jvp` of `rm.grad(L)`,
# one forward sweep over the recorded reverse sweep, and it never forms the
# Hessian. Newton-Krylov and Gauss-Newton methods need exactly this product.
#
# When `L` runs a checkpointed loop, its gradient recomputes the steps it did not
# keep. Forward over reverse does the same, carrying tangents: the loop runs again
# under the same schedule, with every snapshot holding (state, tangent) and each
# recomputed step carrying its tangent, so memory stays within the budget, about
# twice the first-order run's. Here a 300-step recurrent loop, revolve with 6
# snapshots against store-all.

# %%
N, WIDTH = 300, 32
w0 = 0.4 * rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)  # a contraction
v0 = rng.standard_normal((WIDTH, WIDTH))
h0 = rng.standard_normal((8, WIDTH))
tapes = []


def loss_with(make_tape):
    def loss(w):
        tapes.append(make_tape())
        drive = rm.tensor(h0)  # an input at every step: the state settles where w leads it
        h = tapes[-1].loop(lambda h: 0.5 * h + rm.tanh(h @ w + drive), rm.tensor(h0), steps=N)
        return (h * h).sum()

    return loss


budgets = {"store-all": rm.Tape, "revolve, 6 snapshots": lambda: rm.Tape(snapshots=6)}
results = {}
for name, make in budgets.items():
    loss = loss_with(make)
    measured = {}
    for what, transform in (("gradient", lambda: rm.grad(loss)(w0)),
                            ("hvp", lambda: rm.hvp(loss, (w0,), (v0,))[0])):
        tapes.clear()
        tracemalloc.start()
        out = transform()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        measured[what] = (out, tapes[0].loops, peak)
    results[name] = measured

hv = {name: r["hvp"][0] for name, r in results.items()}
assert np.array_equal(hv["store-all"], hv["revolve, 6 snapshots"])  # bit for bit
print("H v under revolve equals H v under store-all, bit for bit")

# %% [markdown]
# The product is checked two more ways: against central differences of the
# gradient, `(grad L(w + eps v) - grad L(w - eps v)) / (2 eps)`, and against
# reverse over reverse, the gradient of `grad L(w) . v` (`rm.grad` of `rm.grad`),
# which agrees to rounding: the Hessian is symmetric, and that is also how remat
# computes this second reverse sweep through the loop.

# %%
revolve_loss = loss_with(budgets["revolve, 6 snapshots"])
eps = 1e-5
numeric = (rm.grad(revolve_loss)(w0 + eps * v0) - rm.grad(revolve_loss)(w0 - eps * v0)) / (2 * eps)
reverse_over_reverse = rm.grad(lambda w: (rm.grad(revolve_loss)(w) * rm.tensor(v0)).sum())(w0)
print("largest |H v - central differences| :", np.abs(hv["store-all"] - numeric).max())
print("largest |H v - reverse over reverse|:", np.abs(hv["store-all"] - reverse_over_reverse).max())
print("largest |H v|                        :", np.abs(hv["store-all"]).max())
scale = np.abs(hv["store-all"]).max()
assert np.abs(hv["store-all"] - numeric).max() < 1e-6 * scale
assert np.abs(hv["store-all"] - reverse_over_reverse).max() < 1e-12 * scale

# %% [markdown]
# ## What it holds
#
# `tape.stats` lists each run of the loop: the gradient's own run, and for the HVP
# the run with tangents. Both follow the same schedule (the same step evaluations);
# the run with tangents holds twice the bytes, and revolve's is a fraction of
# store-all's. The tracemalloc peak of the whole call (the rest of the program
# included) tells the same.

# %%
print(f"{'':22s}{'run':24s}{'step evaluations':>18s}{'bytes held':>12s}{'tracemalloc peak':>18s}")
bars = {}
for name, r in results.items():
    grad_run = r["gradient"][1][0]
    tangent_run = r["hvp"][1][-1]
    for label, stats, peak in (("gradient", grad_run, r["gradient"][2]),
                               ("hvp: with tangents", tangent_run, r["hvp"][2])):
        print(f"{name:22s}{label:24s}{stats.forward_steps:18d}{stats.peak_bytes:12d}"
              f"{peak:18d}")
    bars[name] = (grad_run.peak_bytes, tangent_run.peak_bytes, r["gradient"][2], r["hvp"][2])
    assert tangent_run.forward_steps == grad_run.forward_steps
    assert tangent_run.peak_bytes <= 2 * grad_run.peak_bytes
revolve, store_all = bars["revolve, 6 snapshots"], bars["store-all"]
assert revolve[1] < store_all[1] / 10  # the HVP within revolve's budget
assert revolve[3] < store_all[3] / 3

fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
names = list(bars)
for ax, (title, k) in zip(axes, (("bytes the loop holds (tape.stats)", 0),
                                 ("tracemalloc peak of the call", 2))):
    for offset, run, marker in ((-0.08, "gradient", "o"), (0.08, "hvp", "s")):
        values = [bars[name][k + (run == "hvp")] / 2**20 for name in names]
        ax.plot(np.arange(len(names)) + offset, values, marker, ms=8, ls="none", label=run)
        for x, value in zip(np.arange(len(names)) + offset, values):
            ax.annotate(f"{value:.2g}", (x, value), xytext=(6, -3), textcoords="offset points",
                        fontsize=7)
    ax.set_yscale("log")  # revolve's points are a few percent of store-all's: a log axis
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(np.arange(len(names)), names)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylabel("MiB (log scale)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
fig.tight_layout()
show(fig,
     "Dots on a log scale of MiB, for store-all and revolve with 6 snapshots, the "
     "gradient against the HVP: left, the bytes the loop holds (tape.stats), where the "
     "HVP holds twice the gradient's; right, the tracemalloc peak of the call; revolve's "
     "points are a few percent of store-all's")

# %% [markdown]
# ## The limits
#
# * Second order is the end of the line through a checkpointed loop: a third
#   derivative (the gradient of a reverse-over-reverse result) is refused with a
#   clear error.
# * An HVP costs the gradient's run, a run of the loop with tangents for `J v`
#   (`rm.jvp` through the loop), and the run with tangents, whose reversed steps
#   record their backward and sweep it forward: a few gradients' time
#   (`python -m benchmarks forward` measures it against two gradients).
# * Reverse over reverse (`rm.grad(rm.grad(f))`) holds the same as forward over
#   reverse (it is computed by the same run with tangents) and reverses the loop
#   once more for the part that flows through the loop's output.
# * Under `rm.Tape(memory=...)` the byte budget is the first-order run's; the run
#   with tangents holds up to twice it.
# * The loop keeps a copy of its initial state for these second runs when it runs
#   inside `rm.jvp`, `rm.hvp` or an `rm.grad` whose backward is recorded; a loop
#   run outside them can be reversed once only, and says so.
