"""Shared measuring tools: one BLAS thread, a held heap, medians of repeats, and a record
of the machine.

Import this module before NumPy so that the thread limits take effect.

The heap is held (:func:`hold_heap`, on glibc): freed memory stays in the process
for the next run, as a GPU's caching pool keeps it, instead of going back to the
system at the end of each run to be faulted in afresh (and zeroed) by the next.
With glibc's default, a forward and backward that holds 100 MiB paid that every run:
store-all's runs at the graph workloads' large size took 15-70% longer than with the
heap held, and budgeted runs, which paid less, looked faster than store-all
(``python -m benchmarks heap`` measures it).  Set
``REMAT_BENCH_HEAP=default`` to measure with glibc's default instead.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import ctypes  # noqa: E402
import ctypes.util  # noqa: E402
import gc  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from importlib import metadata  # noqa: E402

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
HELD_MMAP = 32 * 2**20  # glibc's largest: arrays up to 32 MiB come from the heap
HELD_TRIM = 2**30  # the heap's top is given back only past 1 GiB free


def hold_heap():
    """Keep freed memory in the process (glibc's ``mallopt``), unless
    ``REMAT_BENCH_HEAP=default`` or glibc's own variables set the heap (the peak-RSS
    children of ``loop`` and ``transformer`` map each array on its own, so that RSS
    follows what is alive): a phrase for :func:`environment` saying which heap."""
    if os.environ.get("REMAT_BENCH_HEAP") == "default":
        return "glibc's default (REMAT_BENCH_HEAP=default)"
    tuned = sorted(v for v in os.environ if v.startswith("MALLOC_") or v == "GLIBC_TUNABLES")
    if tuned:
        return f"glibc's, as {', '.join(tuned)} set it"
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    if mallopt is None or not (
        mallopt(M_MMAP_THRESHOLD, HELD_MMAP) and mallopt(M_TRIM_THRESHOLD, HELD_TRIM)
    ):
        return "the C library's default (no glibc mallopt)"
    return "held (glibc mallopt: mmap threshold 32 MiB, trim threshold 1 GiB)"


HEAP = hold_heap()


def median_time(fn, repeats=7, warmup=1):
    """Median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def side_by_side(contenders, repeats=7, warmup=1, clock=None, inner=1):
    """Time several functions interleaved (round-robin), so drift hits all alike.

    Returns {name: median seconds of one call}.  ``clock`` is wall time
    (``time.perf_counter``, read when called) unless given, e.g.
    ``time.process_time``; ``inner`` calls are timed together, for short ones.
    """
    clock = clock or time.perf_counter
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            gc.collect()
            start = clock()
            for _ in range(inner):
                fn()
            times[name].append((clock() - start) / inner)
    return {name: statistics.median(ts) for name, ts in times.items()}


def block_ratio(costs, memory, blocks, exact):
    """``Optimal(costs, memory, blocks=blocks)``'s predicted time over ``exact`` (the exact
    plan's), as a table cell: "too tight" where the blocks' least peak is over ``memory``."""
    from remat import schedules

    try:
        plan = schedules.Optimal(costs, memory, blocks=blocks)
    except ValueError:
        return "too tight"
    return f"{plan.predicted_time / exact:.3f}"


def traced_peak(fn):
    """Peak bytes newly allocated (as tracemalloc sees them) while ``fn()`` runs."""
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    result = fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del result
    return peak


def version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def blas_info():
    try:
        from threadpoolctl import threadpool_info

        return "; ".join(
            f"{i.get('internal_api')} {i.get('version')} threads={i.get('num_threads')}"
            for i in threadpool_info()
            if i.get("user_api") == "blas"
        )
    except ImportError:
        return f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                cpu = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def environment(packages=("numpy", "remat")):
    """A markdown paragraph recording what the figures were measured on."""
    versions = ", ".join(f"{p} {version(p)}" for p in packages if version(p))
    return (
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {machine()}; "
        f"Python {sys.version.split()[0]}; {versions}; BLAS: {blas_info()}; heap: {HEAP}."
    )


def table(headers, rows):
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def skip(name, reason):
    print(f"  (skipped {name}: {reason})")


def figure(draw, link):
    """The markdown lines of a figure: ``link`` once ``draw()`` has written it, or why
    it was skipped (matplotlib missing)."""
    try:
        draw()
    except ImportError as error:
        skip("the plot", error)
        return [f"(plot skipped: {error})", ""]
    return [link, ""]


def peer_counts(schedule, n, wd, rd):
    """(advances, disk writes, disk reads, cost) of a checkpoint_schedules schedule."""
    from checkpoint_schedules import StorageType

    advances = writes = reads = 0
    for action in schedule:
        kind = type(action).__name__
        if kind == "Forward":
            advances += action.n1 - action.n0
            writes += action.write_ics and action.storage == StorageType.DISK
        elif kind in ("Copy", "Move"):
            reads += action.from_storage == StorageType.DISK
            writes += action.to_storage == StorageType.DISK
        elif kind == "EndReverse":
            break
    advances -= n  # its n taped steps are not extra
    return advances, writes, reads, advances + wd * writes + rd * reads
