"""What remat costs beyond the arithmetic: tiny loop steps, and a heat-equation stencil.

1. **Tiny steps** (issue 17).  The residual chain ``h <- h + tanh(h @ W + b)``
   with a 4x16 state and a 16x16 weight (n = 1000 steps), where one step's
   arithmetic costs a few microseconds, so that whatever the executor does per
   step shows; then the same at width 256 (batch 64, n = 200), where it
   should not.  Contenders, all in this one process, interleaved:

   * the loop *unrolled* in plain Python on the ordinary tape (the baseline);
   * ``tape.loop``, ``tape.chain`` and ``tape.scan`` storing everything;
   * every schedule with s = 10 slots, against its *refined prediction*
     ``t_adv * advances + t_taped * taped_steps`` (as in ``bench_loop``:
     ``t_adv`` from the loop run untaped under ``rm.no_grad``, ``t_taped`` from
     ``tape.loop`` storing everything, which tapes and reverses each step once).

   Then the actions each schedule takes per step, beside checkpoint_schedules'
   and pyrevolve's revolve for the same n and s (when they are installed).

   Then why the excess per step grows with the width (it is not located in
   any one function): the tiny chain again, with a term added to the step
   that sweeps ``N`` floats of memory in both directions, ``step(h) +
   0.0 * c.sum()`` for a parameter ``c`` (its forward reads ``c``, its
   backward adds into ``c.grad``), the same arithmetic in both contenders.
   The executor's Python work per step is the same for every ``N``; if what
   it costs grows with ``N``, it is paid in the caches NumPy has just swept.

2. **Heat equation.**  Ten explicit steps of ``u_t = u_xx`` on 200 points,
   written with slicing and ``concatenate`` (fixed ends), and the gradient of
   ``sum(u_10 ** 2)``: remat against NumPy with a hand-written backward, and
   remat's forward alone under ``rm.no_grad`` (which records nothing: the cost
   of wrapping each NumPy call in a Tensor, a floor for any tape built the
   same way).

Times are CPU time (``time.process_time``: the machine is shared), medians
of interleaved repeats on one BLAS thread; gradients are checked before
anything is timed.
"""

from benchmarks.common import environment, side_by_side, skip, table  # noqa: I001

import os
import time
from dataclasses import dataclass

import numpy as np

import remat as rm
from remat import schedules

BUDGET = 10  # snapshot slots for every schedule that takes a budget


def cpu_side_by_side(contenders, repeats, inner=1):
    """{name: median CPU seconds of one call}, contenders interleaved round-robin."""
    return side_by_side(contenders, repeats, clock=time.process_time, inner=inner)


def load():
    """The load average, for the record (the machine is shared)."""
    try:
        return "load average {:.1f}, {:.1f}, {:.1f}".format(*os.getloadavg())
    except OSError:
        return "load average unknown"


# --- 1. tiny steps ------------------------------------------------------------------
@dataclass(frozen=True)
class Chain:
    width: int
    batch: int
    steps: int


def residual_chain(chain):
    """(step, x, parameters): the residual MLP step and its float64 data."""
    rng = np.random.default_rng(0)
    w = rm.tensor(
        0.5 * rng.standard_normal((chain.width,) * 2) / np.sqrt(chain.width), requires_grad=True
    )
    b = rm.tensor(0.1 * rng.standard_normal(chain.width), requires_grad=True)
    x = rng.standard_normal((chain.batch, chain.width))

    def step(h):
        return h + rm.tanh(h @ w + b)

    return step, x, (w, b)


def gradient_of(forward, params):
    """run() -> dL/d params[0] of L = sum(forward()), the parameters' grads cleared first."""

    def run():
        for p in params:
            p.grad = None
        forward().sum().backward()
        return params[0].grad

    return run


def unrolled_loop(step, x, n):
    """The loop written out in plain Python on the ordinary tape: the baseline."""

    def unrolled():
        h = rm.tensor(x)
        for _ in range(n):
            h = step(h)
        return h

    return unrolled


def loop_contenders(chain, schedule_names):
    """name -> run() returning dL/dW (untaped returns None), and name -> schedule."""
    step, x, (w, b) = residual_chain(chain)
    n = chain.steps

    def untaped():
        with rm.no_grad():
            h = rm.tensor(x)
            for _ in range(n):
                h = step(h)

    def on_tape(schedule):
        return lambda: rm.Tape(schedule=schedule).loop(step, rm.tensor(x), steps=n)

    def chain_form():
        return rm.Tape().chain([step] * n, rm.tensor(x))

    def scan_form():
        carry, _ = rm.Tape().scan(lambda h, i: (step(h), None), rm.tensor(x), np.arange(n))
        return carry

    runs = {
        "unrolled (plain Python loop)": gradient_of(unrolled_loop(step, x, n), (w, b)),
        "tape.loop store_all": gradient_of(on_tape("store_all"), (w, b)),
        "tape.chain store_all": gradient_of(chain_form, (w, b)),
        "tape.scan store_all": gradient_of(scan_form, (w, b)),
        "untaped (rm.no_grad)": untaped,
    }
    made = {}
    for name in schedule_names:
        made[name] = (
            schedules.Online(BUDGET)
            if name == "online"
            else schedules.make_schedule(name, steps=n, snapshots=BUDGET)
            if name in ("periodic", "revolve", "mixed")
            else schedules.make_schedule(name, steps=n)
        )
        runs[f"tape.loop {name}"] = gradient_of(on_tape(made[name]), (w, b))
    return runs, made


def actions_of(schedule, steps):
    return schedules.simulate(schedule, steps if schedule.steps is None else None)


def bench_tiny_steps(chain, schedule_names, repeats):
    runs, made = loop_contenders(chain, schedule_names)
    want = runs["unrolled (plain Python loop)"]()
    for name, run in runs.items():
        if not name.startswith("untaped"):
            assert np.array_equal(run(), want), f"{name}: gradient differs from the unrolled loop"
    times = cpu_side_by_side(runs, repeats)
    n, base = chain.steps, times["unrolled (plain Python loop)"]
    t_adv, t_all = times["untaped (rm.no_grad)"] / n, times["tape.loop store_all"]
    rows = []
    for name, t in times.items():
        if name.startswith("untaped") or name.split()[-1] in made:
            continue
        rows.append((name, f"{t * 1e3:.2f}", f"{t / base:.2f}x", f"{(t - base) / n * 1e6:+.1f}"))
    stores = table(["contender", "ms (fwd+bwd)", "vs unrolled", "us per step beyond"], rows)
    rows = []
    for name, schedule in made.items():
        sim = actions_of(schedule, n)
        predicted = t_adv * sim.advances + t_all * sim.taped_steps / n
        t = times[f"tape.loop {name}"]
        rows.append(
            (
                name,
                sim.forward_steps,
                f"{t * 1e3:.2f}",
                f"{predicted * 1e3:.2f}",
                f"{t / predicted:.2f}",
                f"{sim.actions / n:.2f}",
            )
        )
    headers = ["schedule", "forward_steps", "ms", "refined prediction ms", "measured / refined"]
    schedules_table = table([*headers, "actions per step"], rows)
    note = (
        f"Calibration: an untaped step takes {t_adv * 1e6:.1f} us, a taped step with its "
        f"backward (store_all) {t_all / n * 1e6:.1f} us, the unrolled step {base / n * 1e6:.1f} us."
    )
    return stores + "\n\n" + schedules_table + "\n\n" + note


def sweeping_chain(chain, floats):
    """loop_contenders' unrolled and store-all runs of a step that also sweeps ``floats``
    floats of memory: ``step(h) + 0.0 * c.sum()`` with ``c`` a parameter (see the top)."""
    step, x, (w, b) = residual_chain(chain)
    c = rm.tensor(np.zeros(floats), requires_grad=True)
    n = chain.steps

    def sweeping(h):
        return step(h) + c.sum() * 0.0

    def looped():
        return rm.Tape(schedule="store_all").loop(sweeping, rm.tensor(x), steps=n)

    params = (w, b, c)
    return gradient_of(unrolled_loop(sweeping, x, n), params), gradient_of(looped, params)


def bench_cache_sweep(chain, sizes, repeats):
    """tape.loop store_all beyond the unrolled loop, per step, as the step sweeps more memory."""
    runs = {}
    for floats in sizes:
        unrolled, looped = sweeping_chain(chain, floats)
        assert np.array_equal(looped(), unrolled()), f"sweep of {floats}: gradients differ"
        runs[(floats, "unrolled")], runs[(floats, "loop")] = unrolled, looped
    times = cpu_side_by_side(runs, repeats)
    n, rows = chain.steps, []
    for floats in sizes:
        base, t = times[(floats, "unrolled")], times[(floats, "loop")]
        rows.append(
            (
                f"{floats * 8 / 1024:.0f}",
                f"{base / n * 1e6:.1f}",
                f"{t / n * 1e6:.1f}",
                f"{(t - base) / n * 1e6:+.1f}",
                f"{t / base:.2f}x",
            )
        )
    headers = ["KiB swept a step", "unrolled us/step", "tape.loop us/step", "beyond", "ratio"]
    return table(headers, rows)


def peer_actions(steps, snapshots):
    """Actions per step of revolve: remat, checkpoint_schedules and pyrevolve."""
    sim = schedules.simulate(schedules.Revolve(steps, snapshots))
    rows = [("remat Revolve", sim.actions, f"{sim.actions / steps:.2f}")]
    try:
        import checkpoint_schedules

        count = sum(1 for _ in checkpoint_schedules.Revolve(steps, snapshots))
        rows.append(("checkpoint_schedules Revolve", count, f"{count / steps:.2f}"))
    except ImportError as error:
        skip("checkpoint_schedules", error)
    try:
        from pyrevolve.crevolve import Action, CRevolve

        revolver, count = CRevolve(snapshots, steps), 0
        while True:
            action = revolver.revolve()
            count += 1
            if action in (Action.terminate, Action.error):
                break
        rows.append(("pyrevolve CRevolve", count, f"{count / steps:.2f}"))
    except ImportError as error:
        skip("pyrevolve", error)
    return table(["revolve of", "actions", "actions per step"], rows)


# --- 2. the heat equation --------------------------------------------------------------
HEAT_POINTS, HEAT_STEPS, HEAT_R = 200, 10, 0.25


def heat_u0(points=HEAT_POINTS):
    x = np.linspace(0.0, np.pi, points)
    return np.sin(x) + 0.1 * np.random.default_rng(0).standard_normal(points)


def heat_step(u, concatenate):
    """One explicit step, ends fixed: works on arrays and on Tensors alike."""
    return concatenate([u[:1], u[1:-1] + HEAT_R * (u[:-2] - 2 * u[1:-1] + u[2:]), u[-1:]])


def heat_numpy(u0):
    """The gradient of sum(u_K ** 2) by hand: the stencil's adjoint is the stencil."""
    u = u0
    for _ in range(HEAT_STEPS):
        u = heat_step(u, np.concatenate)
    g = 2 * u
    for _ in range(HEAT_STEPS):
        inner = HEAT_R * g[1:-1]  # the cotangent of the interior's Laplacian
        g = g.copy()
        g[:-2] += inner
        g[1:-1] -= 2 * inner
        g[2:] += inner
    return g


def heat_numpy_forward(u0):
    u = u0
    for _ in range(HEAT_STEPS):
        u = heat_step(u, np.concatenate)
    return (u * u).sum()


def heat_remat(u0):
    u = rm.tensor(u0, requires_grad=True)
    x = u
    for _ in range(HEAT_STEPS):
        x = heat_step(x, rm.concatenate)
    (x * x).sum().backward()
    return u.grad


def heat_step_rolled(u, mask):
    """The same step with rm.roll: the Laplacian from two rolls (7 ops, not 12 slices and
    a concatenate); ``mask`` (HEAT_R inside, 0 at the two ends) keeps the ends fixed."""
    return u + (rm.roll(u, 1) + rm.roll(u, -1) - 2 * u) * mask


def heat_remat_rolled(u0):
    mask = np.full(u0.shape, HEAT_R)
    mask[[0, -1]] = 0.0
    u = rm.tensor(u0, requires_grad=True)
    x = u
    for _ in range(HEAT_STEPS):
        x = heat_step_rolled(x, mask)
    (x * x).sum().backward()
    return u.grad


def heat_remat_forward_untaped(u0):
    with rm.no_grad():
        x = rm.tensor(u0)
        for _ in range(HEAT_STEPS):
            x = heat_step(x, rm.concatenate)
        return (x * x).sum()


def bench_heat(repeats):
    u0 = heat_u0()
    want = heat_numpy(u0)
    assert np.allclose(heat_remat(u0), want, rtol=1e-12, atol=1e-12), "heat: remat's gradient"
    assert np.allclose(heat_remat_rolled(u0), want, rtol=1e-12, atol=1e-12), "heat: rolled"
    runs = {
        "numpy, hand-written backward": heat_numpy,
        "numpy, forward only": heat_numpy_forward,
        "remat": heat_remat,
        "remat, the step with rm.roll": heat_remat_rolled,
        "remat forward only, under rm.no_grad": heat_remat_forward_untaped,
    }
    times = cpu_side_by_side({k: (lambda f=f: f(u0)) for k, f in runs.items()}, repeats, 20)
    base = times["numpy, hand-written backward"]
    rows = [(name, f"{t * 1e6:.1f}", f"{t / base:.2f}x") for name, t in times.items()]
    return table(["contender", "us (10 steps)", "vs hand-written fwd+bwd"], rows)


def run(quick=False):
    repeats = 3 if quick else 15
    tiny = Chain(16, 4, 40 if quick else 1000)
    wide = Chain(32 if quick else 256, 8 if quick else 64, 10 if quick else 200)
    names = ("revolve",) if quick else ("revolve", "sqrt", "periodic", "online", "mixed")
    out = [
        "## Overheads: tiny steps and a stencil (`python -m benchmarks overheads`)",
        "",
        environment(("numpy", "remat", "checkpoint_schedules", "pyrevolve"))
        + f" {load().capitalize()} at the start.",
        "",
    ]
    for chain, label in ((tiny, "Tiny steps"), (wide, "Wide steps")):
        out += [
            f"### {label}: residual chain, width {chain.width}, batch {chain.batch}, "
            f"{chain.steps} steps, float64, s = {BUDGET}",
            "",
            f"CPU time, medians of {repeats} interleaved repeats.",
            "",
            bench_tiny_steps(chain, names if chain is tiny else ("revolve",), repeats),
            "",
        ]
    sizes = (512, 32768) if quick else (4096, 32768, 131072, 262144)
    out += [
        f"### Why wide steps cost more beyond the unrolled loop: width {tiny.width}, "
        f"{tiny.steps} steps, each also sweeping memory",
        "",
        f"CPU time, medians of {repeats} interleaved repeats; each step adds "
        "`0.0 * c.sum()` (c a parameter of N floats) in both contenders.",
        "",
        bench_cache_sweep(tiny, sizes, repeats),
        "",
        "### Actions per step: revolve, n = 1000, s = 10",
        "",
        peer_actions(1000, BUDGET),
        "",
        f"### Heat equation: {HEAT_STEPS} steps on {HEAT_POINTS} points, slicing + concatenate",
        "",
        f"CPU time per forward + backward, medians of {repeats} interleaved repeats of 20 calls.",
        "",
        bench_heat(repeats),
        "",
        f"{load().capitalize()} at the end.",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
