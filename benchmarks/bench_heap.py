"""What the C library's heap does to the graph workloads' times: glibc's default against
a held heap (``python -m benchmarks heap``).

Every benchmark holds the heap (:func:`benchmarks.common.hold_heap`): memory freed at
the end of a run stays in the process for the next, as a GPU's caching pool keeps it.
With glibc's default, the heap's top is given back to the system when a run frees it,
and arrays over a threshold that moves are mapped and unmapped one by one, so the next
run faults its pages in afresh (the kernel zeroes each).  This measures what that costs
on the large size of the graph workloads (:data:`benchmarks.bench_graph.WORKLOADS`),
where store-all holds 74-118 MiB: store-all, ``rm.checkpoint`` per block and DTR
(``h_dtr_eq``, the default) at 33% of store-all's saved bytes, each heap in its own
process (the heap's mode is set when a process starts), the two processes alternated,
two of each.

Per method and heap: the median time of forward + backward (median over the processes
of each one's median of interleaved runs), and the pages faulted in afresh per run
(``ru_minflt`` of ``getrusage``, 4 KiB each).  With glibc's default every method
faults pages in afresh each run, how many depending on what it holds and how it
reuses the heap (2026-12-02: store-all 39-128 MiB a run, 1.15-1.69x its time with
the heap held), so a ratio to store-all there is not remat's alone.
"""

from benchmarks.common import environment, table  # noqa: I001  (pins BLAS threads first)

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time

METHODS = ("store_all", "checkpoint", "dtr:h_dtr_eq")
SHARE = 0.33
QUICK_SHARE = 0.5  # the tiny U-Net's least budget is over 33%
HEAPS = ("default", "held")


def child(name, repeats, quick=False):
    """In a child process: {method: [median seconds, median faults]} of ``name``'s large
    size (its tiny one if ``quick``)."""
    import remat as rm
    from benchmarks.bench_graph import WORKLOADS
    from remat.graph import DTR
    from remat.graph_compare import budget_bytes

    builder, sizes, tiny = WORKLOADS[name]
    workload = builder(**(tiny if quick else sizes["large"]))
    budget = budget_bytes(QUICK_SHARE if quick else SHARE, workload.measure().saved_bytes)
    runs = {
        "store_all": lambda: workload.loss_and_gradients(rm.Tape()),
        "checkpoint": lambda: workload.loss_and_gradients(wrap=rm.checkpoint),
        "dtr:h_dtr_eq": lambda: workload.loss_and_gradients(
            rm.Tape(memory=budget, remat=DTR("h_dtr_eq"))
        ),
    }
    figures = {method: ([], []) for method in METHODS}
    for run in runs.values():
        run()  # warm up
    for _ in range(repeats):
        for method, run in runs.items():
            gc.collect()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            run()
            seconds = time.perf_counter() - start
            figures[method][0].append(seconds)
            figures[method][1].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
    return {m: [statistics.median(t), statistics.median(f)] for m, (t, f) in figures.items()}


def measure(name, heap, repeats, quick):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    env["REMAT_BENCH_HEAP"] = heap
    command = [sys.executable, "-m", "benchmarks.bench_heap", "--child", name, str(repeats)]
    command += ["--quick"] if quick else []
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        raise RuntimeError(f"heap benchmark child {name} ({heap}) failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def run(quick=False):
    from benchmarks.bench_graph import WORKLOADS

    names = list(WORKLOADS)[:1] if quick else list(WORKLOADS)
    processes, repeats = (1, 1) if quick else (2, 5)
    rows = []
    for name in names:
        got = {heap: [] for heap in HEAPS}
        for _ in range(processes):
            for heap in HEAPS:
                got[heap].append(measure(name, heap, repeats, quick))
        med = {
            heap: {
                m: [statistics.median(r[m][k] for r in got[heap]) for k in (0, 1)] for m in METHODS
            }
            for heap in HEAPS
        }
        share = QUICK_SHARE if quick else SHARE
        for m in METHODS:
            default, held = med["default"][m], med["held"][m]
            rows.append([
                name, m if m != "dtr:h_dtr_eq" else f"dtr:h_dtr_eq @ {share:.0%}",
                f"{default[0] * 1e3:.1f}", f"{held[0] * 1e3:.1f}",
                f"{default[0] / held[0]:.2f}x",
                f"{default[0] / med['default']['store_all'][0]:.2f}x",
                f"{held[0] / med['held']['store_all'][0]:.2f}x",
                f"{default[1] * 4 / 1024:.0f}", f"{held[1] * 4 / 1024:.0f}",
            ])  # fmt: skip
    how = (
        f"{'Tiny (--quick)' if quick else 'Large'} size of each graph workload; {processes} "
        f"processes per heap, alternated, each the median of {repeats} interleaved runs; "
        "fresh MiB: pages faulted in per run."
    )
    head = [
        "workload", "method", "default ms", "held ms", "default / held",
        "vs store-all (default)", "vs store-all (held)", "fresh MiB (default)", "fresh MiB (held)",
    ]  # fmt: skip
    return "\n".join([
        "## The heap (`python -m benchmarks heap`)\n",
        environment(), "", how, "", table(head, rows), "",
    ])  # fmt: skip


if __name__ == "__main__":
    if "--child" in sys.argv:
        at = sys.argv.index("--child")
        print(json.dumps(child(sys.argv[at + 1], int(sys.argv[at + 2]), "--quick" in sys.argv)))
    else:
        print(run(quick="--quick" in sys.argv))
