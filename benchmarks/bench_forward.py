"""Forward mode and second order: a JVP of the op chain, and an HVP through a revolve loop.

1. The 1000-op chain of ``bench_core`` (x*1.0001, sin(x), x+0.1 on 16 float64
   values): ``rm.jvp`` against a hand-written forward-mode NumPy baseline
   (value and tangent carried side by side), beside the reverse sweep's own
   ratio to its hand-written baseline, all timed interleaved in one run.
2. ``rm.hvp`` (forward over reverse) through a checkpointed 1000-step loop
   under revolve: its time against two gradient evaluations of the same loop,
   its step evaluations, and its memory against the first-order run's (the
   bytes the chain holds, from ``tape.stats``, and the tracemalloc peak of the
   whole call, measured apart from the timing); store-all beside it.

One BLAS thread, medians of interleaved repeats, each timed both as wall time
and as the process's CPU time (on a shared machine the wall time also counts
the waits for a core, which hit contenders unevenly; the CPU time does not);
every result is checked before it is timed.
"""

from benchmarks.common import environment, skip, table, traced_peak  # noqa: I001

import gc
import statistics
import time

import numpy as np

import remat as rm
from benchmarks.bench_core import N_OPS, chain_numpy, chain_ops, chain_remat


def interleaved(contenders, repeats, warmup=1):
    """Time several functions round-robin: {name: (median wall s, median CPU s)}."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    wall = {name: [] for name in contenders}
    cpu = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            gc.collect()
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n])) for n in contenders}


# --- 1. a JVP of the chain ----------------------------------------------------------
def chain_jvp_numpy(x0, t0):
    """Forward mode by hand: each op's value and tangent, side by side."""
    x, t = x0, t0
    for i in range(N_OPS):
        k = i % 3
        if k == 0:
            x, t = x * 1.0001, t * 1.0001
        elif k == 1:
            x, t = np.sin(x), t * np.cos(x)
        else:
            x = x + 0.1
    return x.sum(), t.sum()


def chain_jvp_remat(x0, t0):
    out, tangent = rm.jvp(lambda x: chain_ops(x, rm.sin).sum(), (x0,), (t0,))
    return out, tangent


def jvp_contenders():
    contenders = {
        "numpy (hand-written forward mode)": chain_jvp_numpy,
        "remat rm.jvp": chain_jvp_remat,
    }
    try:
        import torch
        from torch.func import jvp as torch_jvp

        torch.set_num_threads(1)

        def chain_jvp_torch(x0, t0):
            f = lambda x: chain_ops(x, torch.sin).sum()  # noqa: E731
            out, tangent = torch_jvp(f, (torch.from_numpy(x0),), (torch.from_numpy(t0),))
            return out.item(), tangent.item()

        contenders[f"torch {torch.__version__} torch.func.jvp"] = chain_jvp_torch
    except ImportError as error:
        skip("torch", error)
    return contenders


def bench_jvp(repeats):
    rng = np.random.default_rng(0)
    x0, t0 = rng.standard_normal(16), rng.standard_normal(16)
    contenders = jvp_contenders()
    want = chain_jvp_numpy(x0, t0)
    for name, fn in contenders.items():
        assert np.allclose(fn(x0, t0), want), f"{name} computed a different JVP"
    assert np.allclose(chain_remat(x0), chain_numpy(x0)), "remat's gradient differs"
    runs = {k: (lambda f=f: f(x0, t0)) for k, f in contenders.items()}
    runs["numpy (hand-written backward)"] = lambda: chain_numpy(x0)
    runs["remat backward (reference)"] = lambda: chain_remat(x0)
    times = interleaved(runs, repeats)

    def ratio(name, base, k):
        return times[name][k] / times[base][k]

    forward_base = "numpy (hand-written forward mode)"
    rows = [
        (
            name,
            f"{times[name][0] / N_OPS * 1e6:.2f}",
            f"{ratio(name, forward_base, 0):.2f}x",
            f"{times[name][1] / N_OPS * 1e6:.2f}",
            f"{ratio(name, forward_base, 1):.2f}x",
        )
        for name in contenders
    ]
    reverse, reverse_base = "remat backward (reference)", "numpy (hand-written backward)"
    rows.append(
        (
            "remat reverse sweep (fwd+bwd), against its hand-written backward",
            f"{times[reverse][0] / N_OPS * 1e6:.2f}",
            f"{ratio(reverse, reverse_base, 0):.2f}x",
            f"{times[reverse][1] / N_OPS * 1e6:.2f}",
            f"{ratio(reverse, reverse_base, 1):.2f}x",
        )
    )
    headers = ["contender", "wall us per op", "vs hand-written", "CPU us per op", "vs (CPU)"]
    return table(headers, rows), times


# --- 2. an HVP through a revolve loop -------------------------------------------------
def loop_problem(steps, batch, width, seed=0):
    rng = np.random.default_rng(seed)
    w0 = rng.standard_normal((width, width)) / np.sqrt(width)
    v = rng.standard_normal((width, width))
    x0 = rng.standard_normal((batch, width))
    return w0, v, x0


def loop_loss(make_tape, steps, x0, tapes):
    def loss(w):
        tapes.append(make_tape())
        h = tapes[-1].loop(lambda h: h + 0.1 * rm.tanh(h @ w), rm.tensor(x0), steps=steps)
        return (h * h).sum()

    return loss


def bench_hvp(repeats, steps, snapshots, batch, width):
    w0, v, x0 = loop_problem(steps, batch, width)
    budgets = {"revolve": lambda: rm.Tape(snapshots=snapshots), "store-all": rm.Tape}
    tapes = []
    runs, counts, held, traced = {}, {}, {}, {}
    for name, make in budgets.items():
        loss = loop_loss(make, steps, x0, tapes)
        grad, hvp = rm.grad(loss), (lambda loss=loss: rm.hvp(loss, (w0,), (v,))[0])
        runs[f"{name}: two gradients"] = lambda grad=grad: (grad(w0), grad(w0))
        runs[f"{name}: rm.hvp"] = hvp
        tapes.clear()
        grad(w0)
        first = tapes[0].loops[0]
        tapes.clear()
        hvp()
        tangent_run = tapes[0].loops[-1]
        counts[name] = (first.forward_steps, tangent_run.forward_steps)
        held[name] = (first.peak_bytes, tangent_run.peak_bytes)
        traced[name] = (traced_peak(lambda grad=grad: grad(w0)), traced_peak(hvp))
    want = rm.hvp(loop_loss(rm.Tape, steps, x0, []), (w0,), (v,))[0]
    got = runs["revolve: rm.hvp"]()
    assert np.array_equal(got, want), "revolve's HVP differs from store-all's"
    times = interleaved(runs, repeats)
    rows = []
    for name in budgets:
        two, hvp_time = times[f"{name}: two gradients"], times[f"{name}: rm.hvp"]
        rows.append(
            (
                name,
                f"{two[0]:.3f}",
                f"{hvp_time[0]:.3f}",
                f"{hvp_time[0] / two[0]:.2f}x",
                f"{hvp_time[1] / two[1]:.2f}x",
                f"{counts[name][0]} / {counts[name][1]}",
                f"{held[name][0] / 2**10:.0f} / {held[name][1] / 2**10:.0f} KiB "
                f"({held[name][1] / held[name][0]:.2f}x)",
                f"{traced[name][0] / 2**20:.2f} / {traced[name][1] / 2**20:.2f} MiB "
                f"({traced[name][1] / traced[name][0]:.2f}x)",
            )
        )
    headers = [
        "schedule",
        "two gradients s",
        "rm.hvp s",
        "hvp / two gradients",
        "same, CPU time",
        "step evaluations: gradient / run with tangents",
        "chain holds: gradient / run with tangents",
        "tracemalloc peak: gradient / hvp",
    ]
    return table(headers, rows), times


def run(quick=False):
    repeats = 3 if quick else 11
    steps, snapshots, batch, width = (50, 4, 4, 8) if quick else (1000, 10, 16, 64)
    out = [
        "## Forward mode and second order (`python -m benchmarks forward`)",
        "",
        environment(("numpy", "remat", "torch")),
        "",
    ]
    text, _ = bench_jvp(repeats)
    out += [f"### 1. JVP of the chain of {N_OPS} small ops (16 float64)", "", text, ""]
    text, _ = bench_hvp(repeats, steps, snapshots, batch, width)
    out += [
        f"### 2. HVP through a {steps}-step loop (state {batch}x{width}, "
        f"h + 0.1 tanh(h @ W)), revolve with {snapshots} snapshots, and store-all",
        "",
        text,
        "",
        "The gradient's run and the run with tangents follow the same schedule; the run "
        "with tangents carries (state, tangent) in every snapshot and a tangent beside "
        "each array a taped step saves. rm.hvp also reruns the loop once more for the "
        "tangent of its output (rm.jvp through the loop) and records each reversed "
        "step's backward.",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
