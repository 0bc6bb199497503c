"""One row of ``python -m benchmarks overheads`` timed in several checkouts, side by side.

``python -m benchmarks.checkouts [--row revolve] [--repeats 20] [--inner 5] REF DIR...``

Each repeat runs every checkout once, in its own process (``PYTHONPATH`` and the
working directory set to the checkout, one BLAS thread), in an order that
rotates from repeat to repeat; a process warms up once, then times ``--inner``
runs of the row and reports the least CPU time (``time.process_time``).  The
table gives each checkout's median and least time, the median of its per-repeat
ratios to ``REF`` (the first checkout; paired repeats ran moments apart, so a
change in the machine's load cancels), and the ratio of the least times.  The
rows are the tiny-step chain of ``overheads`` (``h + tanh(h @ W + b)``, width
16, batch 4, 1000 steps, float64): ``revolve`` (s = 10), ``store_all``, and
``chain`` (``tape.chain``, store-all), each to the gradient of ``sum(h_n)``.
Use it to hold a change to a budget such as "no more than 5% slower than
before": on a shared machine, give more repeats and read the medians of the
ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

ROW = r"""
import time, numpy as np, remat as rm
from remat import schedules
rng = np.random.default_rng(0)
W, N = 16, 1000
w = rm.tensor(0.5 * rng.standard_normal((W, W)) / np.sqrt(W), requires_grad=True)
b = rm.tensor(0.1 * rng.standard_normal(W), requires_grad=True)
x = rng.standard_normal((4, W))
def step(h):
    return h + rm.tanh(h @ w + b)
def run():
    w.grad = b.grad = None
    if ROW == "chain":
        h = rm.Tape().chain([step] * N, rm.tensor(x))
    else:
        s = schedules.make_schedule(ROW, steps=N, snapshots=10) if ROW == "revolve" else ROW
        h = rm.Tape(schedule=s).loop(step, rm.tensor(x), steps=N)
    h.sum().backward()
run()
best = float("inf")
for _ in range(INNER):
    start = time.process_time()
    run()
    best = min(best, time.process_time() - start)
print(best)
"""

ROWS = ("revolve", "store_all", "chain")


def time_once(folder: str, row: str, inner: int) -> float:
    """The least CPU seconds of ``inner`` runs of ``row``, in a process of its own."""
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    env = dict(os.environ, PYTHONPATH=folder, **threads)
    code = ROW.replace("ROW", repr(row)).replace("INNER", str(inner))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(f"{folder}: {done.stderr.strip()}")
    return float(done.stdout)


def commit_of(folder: str) -> str:
    done = subprocess.run(
        ["git", "-C", folder, "log", "-1", "--format=%h"], capture_output=True, text=True
    )
    return done.stdout.strip() or "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="checkouts; the first is the reference")
    parser.add_argument("--row", choices=ROWS, default="revolve")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--inner", type=int, default=5)
    args = parser.parse_args(argv)
    folders = [os.path.abspath(f) for f in args.folders]
    times: dict[str, list[float]] = {f: [] for f in folders}
    for r in range(args.repeats):
        k = r % len(folders)
        for folder in folders[k:] + folders[:k]:
            times[folder].append(time_once(folder, args.row, args.inner))
    ref = times[folders[0]]
    print(f"`{args.row}` row, {args.repeats} repeats of {args.inner} runs (least of each)\n")
    print("| checkout | commit | median ms | least ms | median ratio | ratio of least |")
    print("|---|---|---|---|---|---|")
    for folder in folders:
        mine = times[folder]
        ratio = statistics.median(a / b for a, b in zip(mine, ref))
        print(
            f"| {folder} | {commit_of(folder)} | {statistics.median(mine) * 1e3:.1f} | "
            f"{min(mine) * 1e3:.1f} | {ratio:.3f} | {min(mine) / min(ref):.3f} |"
        )
    print("\nload average {:.1f}, {:.1f}, {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
