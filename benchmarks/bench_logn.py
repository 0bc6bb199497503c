"""The O(log n) curve: memory and recomputation with ceil(log2 n) snapshots.

With ``s = ceil(log2 n)`` slots Revolve keeps ``s`` states and one step tape,
so the memory a loop holds grows like ``log n``, while its step evaluations
per step, ``T(n, s) / n``, grow only slowly (the repetition number ``r``).
Store-all holds every step's tape: linear in ``n``.

Real remat loops (a residual tanh layer, width 16, batch 4, float64, so that
2**16 steps stay fast) for n = 2**6 ... 2**16, forward + backward of the sum
of the final state, with the replay check on (the default).  Memory is
measured twice: what the executor says it held at its peak
(``tape.stats.peak_bytes``, snapshots plus live step tapes) and
tracemalloc's peak over the whole forward + backward, which also sees the
cotangents, gradients and what the replay check keeps (fingerprints held with
the step tapes, none per step: :mod:`remat.executor.replay`), so it too stays flat.
``forward_steps`` comes from ``tape.stats`` and is set beside the
Griewank-Walther optimum ``T(n, s)``.  The full run draws
benchmarks/logn.png (matplotlib, if installed).
"""

from benchmarks.common import environment, figure, table, traced_peak  # noqa: I001

import math
from pathlib import Path

import numpy as np

import remat as rm
from remat.schedules import optimal_forward_steps

PLOT = Path(__file__).with_name("logn.png")
KIB = 1024


def measure(n, snapshots, width=16, batch=4):
    """(tape.stats, tracemalloc peak bytes) of one forward + backward of an n-step loop."""
    rng = np.random.default_rng(0)
    w = rm.tensor(0.5 * rng.standard_normal((width, width)) / np.sqrt(width), requires_grad=True)
    x = rng.standard_normal((batch, width))
    tape = rm.Tape(snapshots=snapshots)

    def run():
        h = tape.loop(lambda h: h + rm.tanh(h @ w), rm.tensor(x), steps=n)
        h.sum().backward()

    peak = traced_peak(run)
    return tape.stats, peak


def bench(exponents):
    """One row per n: n, s, revolve's and store-all's counts and bytes."""
    rows = []
    for k in exponents:
        n = 2**k
        s = math.ceil(math.log2(n))
        revolve, revolve_peak = measure(n, s)
        store_all, store_all_peak = measure(n, None)
        rows.append(
            {
                "n": n,
                "s": s,
                "per_step": revolve.forward_steps / n,
                "optimum": optimal_forward_steps(n, s) / n,
                "revolve_bytes": revolve.peak_bytes,
                "revolve_traced": revolve_peak,
                "store_all_bytes": store_all.peak_bytes,
                "store_all_traced": store_all_peak,
            }
        )
    return rows


def markdown(rows):
    headers = [
        "n",
        "s = ceil(log2 n)",
        "forward_steps / n",
        "T(n, s) / n",
        "revolve peak_bytes KiB",
        "revolve tracemalloc KiB",
        "store_all peak_bytes KiB",
        "store_all tracemalloc KiB",
    ]
    cells = [
        (
            r["n"],
            r["s"],
            f"{r['per_step']:.3f}",
            f"{r['optimum']:.3f}",
            f"{r['revolve_bytes'] / KIB:.1f}",
            f"{r['revolve_traced'] / KIB:.1f}",
            f"{r['store_all_bytes'] / KIB:.1f}",
            f"{r['store_all_traced'] / KIB:.1f}",
        )
        for r in rows
    ]
    return table(headers, cells)


def plot(rows, path):
    """Two panels: peak bytes against n, and forward_steps / n against n (log-x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = [r["n"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, label, marker in (
        ("revolve", "revolve, s = ceil(log2 n)", "o"),
        ("store_all", "store_all", "s"),
    ):
        line = left.plot(
            n,
            [r[f"{key}_bytes"] / KIB for r in rows],
            marker + "-",
            label=f"{label}: tape.stats.peak_bytes",
        )[0]
        left.plot(
            n,
            [r[f"{key}_traced"] / KIB for r in rows],
            marker + "--",
            color=line.get_color(),
            label=f"{label}: tracemalloc peak",
        )
    left.set(yscale="log", xlabel="steps n", ylabel="peak KiB")
    left.set_xscale("log", base=2)
    left.legend(fontsize="small")
    right.plot(n, [r["per_step"] for r in rows], "o-", label="measured (tape.stats)")
    right.plot(n, [r["optimum"] for r in rows], "k:", label="T(n, s) / n")
    right.set(xlabel="steps n", ylabel="forward_steps / n")
    right.set_xscale("log", base=2)
    right.legend()
    fig.suptitle("Revolve with ceil(log2 n) snapshots (width 16, batch 4, float64)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(quick=False):
    rows = bench(range(6, 9) if quick else range(6, 17))
    out = [
        "## The O(log n) curve (`python -m benchmarks logn`)",
        "",
        environment(("numpy", "remat")),
        "",
        markdown(rows),
        "",
    ]
    if not quick:
        out += figure(
            lambda: plot(rows, PLOT), f"![peak bytes and forward steps per step]({PLOT.name})"
        )
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
