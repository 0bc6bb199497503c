"""The replay check's cost on `remat compare`'s workload.

The residual MLP of `remat compare` (200 steps, width 64, batch 32) runs under
its four schedules (store_all, sqrt, revolve with 8 slots, online with 8),
forward + backward, once with ``check_replay=True`` (the default) and once
with ``False``, alternating the order each round; CPU time (process time),
median of the rounds.  The target is at most 3% for the whole workload.
"""

from benchmarks.common import environment, table  # noqa: I001

import statistics
import time

import remat as rm
from remat import workloads

SCHEDULES = {
    "store_all": lambda check: rm.Tape(check_replay=check),
    "sqrt": lambda check: rm.Tape(schedule="sqrt", check_replay=check),
    "revolve": lambda check: rm.Tape(snapshots=8, check_replay=check),
    "online": lambda check: rm.Tape(snapshots=8, schedule="online", check_replay=check),
}


def seconds(name, check, steps):
    workload = workloads.resmlp(steps=steps)
    tape = SCHEDULES[name](check)
    start = time.process_time()
    workload.loss_and_gradients(tape, online=name == "online")
    return time.process_time() - start


def run(quick=False):
    steps, rounds = (20, 3) if quick else (200, 21)
    times = {(name, check): [] for name in SCHEDULES for check in (True, False)}
    for r in range(rounds):
        for check in (True, False) if r % 2 else (False, True):
            for name in SCHEDULES:
                times[name, check].append(seconds(name, check, steps))
    rows, total = [], {True: 0.0, False: 0.0}
    for name in SCHEDULES:
        on, off = (statistics.median(times[name, c]) for c in (True, False))
        total[True] += on
        total[False] += off
        rows.append((name, f"{on * 1e3:.2f}", f"{off * 1e3:.2f}", f"{on / off:.3f}"))
    rows.append(
        (
            "all four",
            f"{total[True] * 1e3:.2f}",
            f"{total[False] * 1e3:.2f}",
            f"{total[True] / total[False]:.3f}",
        )
    )
    return "\n".join(
        [
            "## The replay check's cost (`python -m benchmarks replay`)",
            "",
            environment(("numpy", "remat")),
            "",
            f"resmlp, {steps} steps; CPU ms, median of {rounds} alternating rounds.",
            "",
            table(["schedule", "check_replay=True ms", "False ms", "ratio"], rows),
            "",
        ]
    )


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
