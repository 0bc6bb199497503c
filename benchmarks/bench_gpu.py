"""On an NVIDIA GPU with CuPy: remat's CuPy backend against hand-written CuPy.

1. A 4-layer tanh MLP (batch 1024, width 4096, float32), forward + backward:
   remat on CuPy arrays against the same computation written by hand in CuPy.
   Target: within 1.2x.
2. Revolve over store_all on the GPU: a residual chain (width 4096, batch
   1024, float32, 100 steps, s = 10): the time ratio against the forward-step
   ratio (target: within 10%), and the memory pool's growth against what the
   tape reports.

Run through benchmarks/gpu_check.sh; prints markdown.  Times are medians of
repeats with the device synchronised around each.
"""

import statistics
import sys
import time

import numpy as np

import remat as rm
from benchmarks.bench_core import mlp_numpy, mlp_params, mlp_remat


def timed(fn, cupy, repeats):
    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mlp(cupy, repeats, batch=1024, width=4096, layers=4):
    ws, bs = mlp_params(width, layers)
    ws, bs = [cupy.asarray(w) for w in ws], [cupy.asarray(b) for b in bs]
    x = cupy.asarray(np.random.default_rng(1).standard_normal((batch, width)).astype(np.float32))

    by_hand = mlp_numpy(x, ws, bs, xp=cupy)  # the same code as on the CPU
    with_remat = mlp_remat(x, ws, bs)

    for (gw, gb), (rw, rb) in zip(by_hand(), with_remat()):
        assert cupy.allclose(gw, rw, rtol=1e-3, atol=1e-3)
    hand, remat = timed(by_hand, cupy, repeats), timed(with_remat, cupy, repeats)
    return (
        "| contender | ms (fwd+bwd) | ratio |\n|---|---|---|\n"
        f"| hand-written CuPy | {hand * 1e3:.2f} | 1.00x |\n"
        f"| remat (CuPy backend) | {remat * 1e3:.2f} | {remat / hand:.2f}x |"
    )


def revolve_vs_store_all(cupy, repeats, steps=100, snapshots=10, width=4096, batch=1024):
    rng = np.random.default_rng(1)
    w = rm.tensor(
        (rng.standard_normal((width, width)) / width**0.5).astype(np.float32),
        requires_grad=True,
        device="cuda",
    )
    h0 = rm.tensor(rng.standard_normal((batch, width)).astype(np.float32), device="cuda")
    pool = cupy.get_default_memory_pool()
    rows = []
    for name, make in (("store_all", rm.Tape), ("revolve", lambda: rm.Tape(snapshots=snapshots))):
        tape_box = {}

        def run():
            w.grad = None
            tape = tape_box["tape"] = make()
            h = tape.loop(lambda h: h + rm.tanh(h @ w), h0, steps=steps)
            (h * h).mean().backward()

        seconds = timed(run, cupy, repeats)
        pool.free_all_blocks()
        before = pool.total_bytes()
        run()
        cupy.cuda.Device().synchronize()
        grown = pool.total_bytes() - before
        stats = tape_box["tape"].stats
        rows.append((name, stats, seconds, grown, w.grad.copy()))
    (_, s_all, t_all, m_all, g_all), (_, s_rev, t_rev, m_rev, g_rev) = rows
    assert bool(cupy.array_equal(g_all, g_rev)), "revolve's gradient differs from store_all's"
    assert s_rev.forward_steps == rm.schedules.optimal_forward_steps(steps, snapshots)
    predicted = s_rev.forward_steps / s_all.forward_steps
    lines = [
        "| schedule | forward steps | time ms | tape peak MiB | pool growth MiB |",
        "|---|---|---|---|---|",
    ]
    for name, stats, seconds, grown, _ in rows:
        lines.append(
            f"| {name} | {stats.forward_steps} | {seconds * 1e3:.1f} | "
            f"{stats.peak_bytes / 2**20:.1f} | {grown / 2**20:.1f} |"
        )
    lines.append(
        f"\nrevolve/store_all time {t_rev / t_all:.2f}x against forward-step ratio "
        f"{predicted:.2f}x ({(t_rev / t_all) / predicted:.2f} of the prediction); "
        "gradients bit-for-bit equal."
    )
    return "\n".join(lines)


def run(quick=False):
    if not rm.cuda_available():
        return "## GPU\n\n(skipped: CuPy with an NVIDIA GPU is not available here)"
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    repeats = 3 if quick else 10
    return "\n".join(
        [
            "## GPU (`benchmarks/gpu_check.sh`)",
            "",
            f"{props['name'].decode()}, CuPy {cupy.__version__}, remat {rm.__version__}",
            "",
            "### 4-layer tanh MLP, batch 1024, width 4096, float32",
            "",
            mlp(cupy, repeats),
            "",
            "### Revolve vs store_all on the GPU (width 4096, batch 1024, 100 steps, s=10)",
            "",
            revolve_vs_store_all(cupy, repeats),
            "",
        ]
    )


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
