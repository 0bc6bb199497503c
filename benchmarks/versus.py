"""Two checkouts of remat timed side by side: ``python -m benchmarks.versus OLD NEW``.

A change that must not slow remat down (a restructuring, a safety check) is
measured here: the workloads of ``benchmarks/versus_cases.py`` (the per-op,
per-step and per-action rows of ``core``, ``overheads`` and ``loop``) run in
fresh processes, one per checkout and round, with the order alternating
(old, new, new, old, ...) so that the machine's drift falls on both alike.
Each process times every case ``--repeats`` times in CPU seconds.  The table
gives, per case, the median over rounds of each process's median; the median
over rounds of the ratio new / old (a round's two processes run moments apart,
so a change in the machine's load cancels); the ratio of the fastest repeats
(the least disturbed figure on a shared machine); and whether both checkouts
computed the same gradient, bit for bit.

    python -m benchmarks.versus ../old . --rounds 10 --repeats 5 [--cases chain "loop revolve"]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import environment, table

CASES_SCRIPT = Path(__file__).with_name("versus_cases.py")
TEXT = {"capture_output": True, "text": True}


def revision(checkout):
    """The checkout's commit (with '+' when its tree has uncommitted changes), or '?'."""
    git = ["git", "-C", str(checkout)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], **TEXT)
        dirty = subprocess.run([*git, "status", "--porcelain", "remat"], **TEXT)
    except OSError:
        return "?"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def run_once(checkout, cases, repeats):
    """{case: {"times": [...], "grad": digest}} measured in a fresh process on ``checkout``."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    command = [sys.executable, str(CASES_SCRIPT), str(repeats), *cases]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"versus: the cases failed in {checkout}:\n{done.stderr}")
    return json.loads(done.stdout)


def compare(old, new, cases, rounds, repeats):
    measured = {"old": [], "new": []}
    for r in range(rounds):
        order = ("old", "new") if r % 2 == 0 else ("new", "old")
        for side in order:
            measured[side].append(run_once(old if side == "old" else new, cases, repeats))
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr)
    rows = []
    for case in cases:
        medians = {
            side: [statistics.median(m[case]["times"]) for m in runs]
            for side, runs in measured.items()
        }
        # a round's old and new ran moments apart: their ratio cancels a change of load
        paired = [n / o for o, n in zip(medians["old"], medians["new"])]
        low = {s: min(min(m[case]["times"]) for m in measured[s]) for s in measured}
        same = measured["old"][0][case]["grad"] == measured["new"][0][case]["grad"]
        rows.append(
            (
                case,
                f"{statistics.median(medians['old']) * 1e3:.2f}",
                f"{statistics.median(medians['new']) * 1e3:.2f}",
                f"{statistics.median(paired):.3f}",
                f"{low['new'] / low['old']:.3f}",
                "yes" if same else "NO",
            )
        )
    headers = ["case", "old ms", "new ms", "new/old (median of rounds)", "new/old (fastest)"]
    headers.append("same gradient")
    return table(headers, rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cases", nargs="*", default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(CASES_SCRIPT.parent))
    from versus_cases import CASES

    cases = args.cases or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; the cases are {list(CASES)}")
    start = time.strftime("%Y-%m-%d %H:%M")
    result = compare(args.old.resolve(), args.new.resolve(), cases, args.rounds, args.repeats)
    load = os.getloadavg()
    print(
        f"Old: {args.old} at {revision(args.old)}; new: {args.new} at {revision(args.new)}. "
        f"{args.rounds} rounds of one process per checkout (alternating order), "
        f"{args.repeats} repeats each, CPU time, from {start}; load average at the end "
        f"{load[0]:.1f}. {environment()}\n"
    )
    print(result)


if __name__ == "__main__":
    main()
