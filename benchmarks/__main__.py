"""Run the benchmarks and print markdown: ``python -m benchmarks [--quick] [--write] [names...]``.

Names: core, schedules, loop, online, logn, depth, replay, memory, traced, forward,
overheads, disk, transformer, planning, dtr, graph, heap (all by default).  ``--quick`` runs tiny
sizes (a smoke test; the figures mean nothing).  ``--write`` also records the output in
benchmarks/RESULTS.md: the sections of the benchmarks just run are replaced, the others
kept, and so is the hand-written "Where remat is behind" section, which whoever reruns
should revise against the new figures.  Each section says when and on what it was measured.

A benchmark whose module cannot be imported is skipped with the reason, in
the output and on stderr; a peer library a benchmark compares against is
skipped the same way by the benchmark itself.
"""

from benchmarks import common  # noqa: F401, I001  (pins BLAS threads before NumPy loads)

import argparse
import importlib
import sys
import time
from pathlib import Path

MODULES = {
    "core": "benchmarks.bench_core",
    "schedules": "benchmarks.bench_schedules",
    "loop": "benchmarks.bench_loop",
    "online": "benchmarks.bench_online",
    "logn": "benchmarks.bench_logn",
    "depth": "benchmarks.bench_depth",
    "replay": "benchmarks.bench_replay",
    "memory": "benchmarks.bench_memory",
    "traced": "benchmarks.bench_traced",
    "forward": "benchmarks.bench_forward",
    "overheads": "benchmarks.bench_overheads",
    "disk": "benchmarks.bench_disk",
    "transformer": "benchmarks.bench_transformer",
    "planning": "benchmarks.bench_planning",
    "dtr": "benchmarks.bench_dtr",
    "graph": "benchmarks.bench_graph",
    "heap": "benchmarks.bench_heap",
}
RESULTS = Path(__file__).with_name("RESULTS.md")
BEHIND = "## Where remat is behind"
SUMMARY = "## Summary"  # the one-screen table above it, hand-written like BEHIND


def run_benchmark(name, quick=False):
    """The markdown of one benchmark (or a section saying why it was skipped)."""
    try:
        module = importlib.import_module(MODULES[name])
    except ImportError as error:
        print(f"  (skipped {name}: {error})", file=sys.stderr)
        return f"## {name} (`python -m benchmarks {name}`)\n\nSkipped: {error}.\n"
    return module.run(quick=quick)


def sections_of(text):
    """RESULTS.md's '## ' sections, keyed by benchmark name (or by heading if none)."""
    out = {}
    for part in ("\n" + text).split("\n## ")[1:]:
        heading = part.splitlines()[0]
        key = next((n for n in MODULES if f"`python -m benchmarks {n}`" in heading), heading)
        out[key] = ("## " + part).rstrip() + "\n"
    return out


def write_results(command, new):
    """Record ``new`` ({name: markdown}) in RESULTS.md, keeping what was not rerun."""
    old = sections_of(RESULTS.read_text()) if RESULTS.exists() else {}
    behind = old.get(BEHIND[3:], f"{BEHIND}\n\n(to be written from the figures below)\n")
    summary = old.get(SUMMARY[3:], f"{SUMMARY}\n\n(to be written from the figures below)\n")
    body = [new.get(name) or old.get(name) for name in MODULES]
    header = (
        f"# Benchmark results\n\nLast written by `{command}` on {time.strftime('%Y-%m-%d')}. "
        "README.md says what each benchmark measures and how.\n"
    )
    sections = [section.rstrip() + "\n" for section in body if section]
    RESULTS.write_text("\n".join([header, summary, behind, *sections]))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "names",
        nargs="*",
        metavar="name",
        help=f"which benchmarks ({', '.join(MODULES)}; default: all)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--write", action="store_true", help="also record them in RESULTS.md")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in MODULES]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    if args.write and args.quick:
        parser.error("--write records real figures: drop --quick")
    sections = {}
    for name in args.names or MODULES:
        print(f"running {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        sections[name] = run_benchmark(name, quick=args.quick)
        print(sections[name], flush=True)
        print(f"  ({name} took {time.perf_counter() - start:.0f} s)", file=sys.stderr)
    if args.write:
        words = argv if argv is not None else sys.argv[1:]
        write_results(" ".join(["python -m benchmarks", *words]), sections)
        print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
