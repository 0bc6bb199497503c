"""How fast is a Revolve schedule generated?  remat against its peers.

Builds and iterates the whole Revolve schedule for n = 10**4, 10**5, 10**6
steps with s = 10 and s = 30 slots, next to checkpoint_schedules'
MultistageCheckpointSchedule (same n, same s, x_0's slot included in both)
and, when it installs, pyrevolve's CRevolve.  A peer that cannot be imported
is skipped with the reason.  Timings are the median of a few repeats of
"build the schedule and consume every action"; the forward-step counts come
from a separate, untimed pass, as does remat's peak memory while iterating
(tracemalloc), which stays O(s).

    python -m benchmarks.bench_schedules            # full run (about 2-3 min)
    python -m benchmarks.bench_schedules --quick    # tiny sizes, a smoke test

A second table times the memory + disk plans (DiskRevolve, TwoLevel) at
n = 10**4 and 10**5: the cost tables (the plan), then iterating the actions,
with the optimal cost next to the one simulate counts, and a third compares
their costs and times with checkpoint_schedules' HRevolve and DiskRevolve
on the same (n, ram, disk) cases at n = 1000 and 3000 (its plans grow as n**2).
A second table times *planning* for byte budgets, n = 100, 1000, 10000:
building Mixed's table of M(n, 10), and Optimal's dynamic programme on a
chain of identical steps (as tape.loop measures it) and on a heterogeneous
chain (seeded random times and sizes), each at a budget 10% of the way from
the minimum to store-all, with 128 levels.  The heterogeneous programme is
cubic in n and the uniform one quadratic: sizes above --optimal-max and
--uniform-max are not run, and their cell gives the time extrapolated from
the largest size run.

Peers: pip install checkpoint-schedules pyrevolve
"""

from benchmarks.common import environment, peer_counts, skip, table  # noqa: I001

import argparse
import random
import statistics
import time
import tracemalloc

from remat.schedules import (
    DISK,
    Advance,
    ChainCosts,
    DiskRevolve,
    Optimal,
    Revolve,
    Tape,
    TwoLevel,
    minimum_bytes,
    optimal_forward_steps,
    simulate,
)
from remat.schedules.mixed import _table, mixed_forward_steps

DISK_CASES = (  # (class, arguments after steps)
    (DiskRevolve, (10, 2, 2)),
    (DiskRevolve, (1, 2, 2)),
    (TwoLevel, (10, 5, 2, 2)),
    (TwoLevel, (2, 2, 2, 2)),
    (TwoLevel, (30, 3, 0.5, 1.5)),
)


def disk_peer_rows(sizes):
    """Costs and seconds (plan + iterate) against checkpoint_schedules, or why not."""
    try:
        import checkpoint_schedules as peer
    except ImportError as error:
        skip("checkpoint_schedules", f"{type(error).__name__}: {error}")
        return []
    rows = []
    for n in sizes:
        for ram, disk in ((1, None), (10, None), (2, 2), (10, 5)):
            wd = rd = 2
            start = time.perf_counter()
            if disk is None:
                ours = DiskRevolve(n, ram, wd, rd)
            else:
                ours = TwoLevel(n, ram, disk, wd, rd)
            for _ in ours:
                pass
            ours_s = time.perf_counter() - start
            start = time.perf_counter()
            # ub = 1 (its default): every step is taped once either way, so the
            # optimal schedule is the same; with ub = 0 its HRevolve degenerates
            try:
                if disk is None:
                    theirs = peer.DiskRevolve(n, ram, uf=1, ub=1, wd=wd, rd=rd)
                else:
                    theirs = peer.HRevolve(n, ram, disk, uf=1, ub=1, wd=wd, rd=rd)
                cost = f"{peer_counts(theirs, n, wd, rd)[3]:.12g}"
            except Exception as error:  # its planner recurses once per disk segment
                cost = f"failed ({type(error).__name__})"
            theirs_s = time.perf_counter() - start
            failed = cost.startswith("failed")
            rows.append(
                (
                    n,
                    ram,
                    "unbounded" if disk is None else disk,
                    f"{ours.cost:.12g} / {cost}",
                    f"{ours_s:.3f}",
                    "-" if failed else f"{theirs_s:.3f}",
                    "-" if failed else f"{theirs_s / ours_s:.0f}x",
                )
            )
    return rows


def disk_rows(sizes):
    """Plan and iteration seconds of the memory + disk schedules (one run each)."""
    rows = []
    for n in sizes:
        for cls, args in DISK_CASES:
            start = time.perf_counter()
            schedule = cls(n, *args)
            plan = time.perf_counter() - start
            start = time.perf_counter()
            for _ in schedule:
                pass
            iterate = time.perf_counter() - start
            sim = simulate(schedule)
            counted = (
                sim.advances
                + schedule.write_cost * sim.writes[DISK]
                + schedule.read_cost * sim.reads[DISK]
            )
            rows.append(
                (
                    n,
                    repr(schedule).replace(f"steps={n}, ", ""),
                    f"{plan:.2f}",
                    f"{iterate:.2f}",
                    f"{schedule.cost:.12g} / {counted:.12g}",
                    sim.forward_steps,
                    f"{sim.writes[DISK]} / {sim.reads[DISK]}",
                    sim.peak_disk_snapshots,
                )
            )
    return rows


def remat_run(n: int, s: int) -> None:
    for _ in Revolve(n, s):
        pass


def remat_count(n: int, s: int) -> tuple[int, int]:
    """Forward steps, and peak bytes allocated while iterating."""
    tracemalloc.start()
    forward = 0
    for action in Revolve(n, s):
        kind = type(action)
        if kind is Advance or kind is Tape:
            forward += action[1] - action[0]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return forward, peak


def load_checkpoint_schedules():
    from checkpoint_schedules import EndReverse, Forward, MultistageCheckpointSchedule

    def run(n: int, s: int) -> None:
        for action in MultistageCheckpointSchedule(n, s, 0):
            if type(action) is EndReverse:
                break

    def count(n: int, s: int) -> int:
        forward = 0
        for action in MultistageCheckpointSchedule(n, s, 0):
            if type(action) is Forward:
                forward += action.n1 - action.n0
            elif type(action) is EndReverse:
                break
        return forward

    return run, count


def load_pyrevolve():
    from pyrevolve.schedulers import CRevolve
    from pyrevolve.schedulers.base import Action

    def run(n: int, s: int) -> None:
        schedule = CRevolve(s, n)  # its constructor already walks the schedule once
        while schedule.next().type != Action.TERMINATE:
            pass

    def count(n: int, s: int) -> int:
        schedule = CRevolve(s, n)
        advances = 0
        while (action := schedule.next()).type != Action.TERMINATE:
            if action.type in (Action.ADVANCE, Action.LASTFW):
                advances += action.capo - action.old_capo
        return advances + n  # its advances exclude the n taped evaluations

    return run, count


def load_peers():
    peers = {}
    for name, loader in (
        ("checkpoint_schedules", load_checkpoint_schedules),
        ("pyrevolve", load_pyrevolve),
    ):
        try:
            peers[name] = loader()
        except Exception as error:  # a peer that does not import is skipped, with the reason
            skip(name, f"{type(error).__name__}: {error}")
    return peers


def median_seconds(run, n: int, s: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(n, s)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def uniform_chain(n: int) -> ChainCosts:
    """A loop of identical steps: a taped step and its reversal cost 3 advances."""
    return ChainCosts.uniform(n, 1.0, 3.0, 4096, 3 * 4096 + 512)


def heterogeneous_chain(n: int, seed: int = 0) -> ChainCosts:
    """Seeded random layers: states of 4, 8 or 16 KiB, tapes 2-4x their input state."""
    rng = random.Random(seed)
    forward = [rng.uniform(0.5, 2.0) for _ in range(n)]
    state = [rng.choice((1, 2, 4)) * 4096 for _ in range(n + 1)]
    tape = [int(state[i] * rng.uniform(2.0, 4.0)) for i in range(n)]
    return ChainCosts(forward, [3 * f for f in forward], state, tape)


def plan_once(costs: ChainCosts):
    """Seconds to plan at 10% of the way from the minimum budget to store-all, and the plan."""
    least = minimum_bytes(costs)
    memory = int(least + 0.1 * (sum(costs.tape_bytes) - least))
    start = time.perf_counter()
    plan = Optimal(costs, memory)
    return time.perf_counter() - start, plan


def planning(sizes, optimal_max, uniform_max):
    """Rows of the planning table: seconds for Mixed's table and Optimal's programme."""
    rows, last = [], {}
    for n in sizes:
        _table.cache_clear()
        start = time.perf_counter()
        m = mixed_forward_steps(n, 10)
        cells = [n, f"{time.perf_counter() - start:.3f} (M = {m})"]
        for kind, make, limit, power in (
            ("uniform", uniform_chain, uniform_max, 2),
            ("heterogeneous", heterogeneous_chain, optimal_max, 3),
        ):
            if n > limit:
                if kind in last:
                    m0, t0 = last[kind]
                    cells.append(f"not run (~{t0 * (n / m0) ** power:.0f} s by n^{power} scaling)")
                else:
                    cells.append("not run")
                continue
            costs = make(n)
            seconds, plan = plan_once(costs)
            last[kind] = (n, seconds)
            ratio = plan.predicted_time / sum(costs.reverse_time)
            cells.append(f"{seconds:.3f} ({ratio:.2f}x store-all time, {plan.snapshots} slots)")
        rows.append(cells)
    return rows


def run(quick=False, repeats=3, pyrevolve_max=10**5, optimal_max=200, uniform_max=1000):
    """The comparison as markdown (pyrevolve needs about a minute a case at 10**6)."""
    sizes = (100, 1000) if quick else (10**4, 10**5, 10**6)
    peers = load_peers()
    rows = []
    for n in sizes:
        reps = 1 if n >= 10**6 else repeats
        for s in (10, 30):
            ours = median_seconds(remat_run, n, s, reps)
            forward, peak = remat_count(n, s)
            cells, counts, seconds = {}, {}, {}
            for name, (peer_run, count) in peers.items():
                if name == "pyrevolve" and n > pyrevolve_max:
                    cells[name] = f"not run (n > {pyrevolve_max})"
                    continue
                seconds[name] = median_seconds(peer_run, n, s, reps)
                cells[name] = f"{seconds[name]:.3f}"
                counts[name] = count(n, s)
            cs = cells.get("checkpoint_schedules")
            ratio = f"{seconds['checkpoint_schedules'] / ours:.1f}x" if cs else "-"
            steps = [
                forward,
                counts.get("checkpoint_schedules", "-"),
                counts.get("pyrevolve", "-"),
                optimal_forward_steps(n, s),
            ]
            rows.append(
                (
                    n,
                    s,
                    f"{ours:.3f}",
                    cs or "skipped",
                    ratio,
                    cells.get("pyrevolve", "skipped"),
                    " / ".join(map(str, steps)),
                    f"{peak / 1024:.1f}",
                )
            )
    headers = [
        "n",
        "s",
        "remat s",
        "checkpoint_schedules s",
        "speed-up",
        "pyrevolve s",
        "forward steps remat / c_s / pyrevolve / T(n,s)",
        "remat peak KiB",
    ]
    disk_headers = [
        "n",
        "schedule",
        "plan s",
        "iterate s",
        "optimal cost / simulated",
        "forward steps",
        "disk writes / reads",
        "disk slots used",
    ]
    plan_sizes = (10, 30) if quick else (100, 200, 1000, 10000)
    plan_rows = planning(plan_sizes, optimal_max, uniform_max)
    plan_headers = [
        "n",
        "Mixed table s (M(n, 10))",
        "Optimal, identical steps: s",
        "Optimal, heterogeneous: s",
    ]
    return "\n".join(
        [
            "## Schedule generation (`python -m benchmarks schedules`)",
            "",
            environment(("remat", "checkpoint-schedules", "pyrevolve")),
            "",
            "Seconds to build and iterate a whole Revolve schedule (median of repeats; one "
            "repeat at n = 10**6).",
            "",
            table(headers, rows),
            "",
            "Memory + disk plans: seconds to build the cost tables (plan) and to iterate "
            "the actions, one run each; cost = advances + write_cost * disk writes + "
            "read_cost * disk reads.",
            "",
            table(disk_headers, disk_rows((100, 1000) if quick else (10**4, 10**5))),
            "",
            "Against checkpoint_schedules (DiskRevolve when the disk is unbounded, HRevolve "
            "otherwise; write = read = 2): the optimal cost from both, and seconds to plan "
            "and iterate the whole schedule, one run each.",
            "",
            table(
                [
                    "n",
                    "ram",
                    "disk",
                    "cost remat / checkpoint_schedules",
                    "remat s",
                    "checkpoint_schedules s",
                    "speed-up",
                ],
                disk_peer_rows((21, 100) if quick else (1000, 3000)),
            ),
            "",
            "Seconds to plan for a byte budget (one run each; budget 10% of the way from "
            "`minimum_bytes` to store-all; 128 levels). Mixed builds its table of M(n, 10) "
            "from scratch.",
            "",
            table(plan_headers, plan_rows),
            "",
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (smoke test)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats below n = 10**6")
    parser.add_argument(
        "--pyrevolve-max",
        type=int,
        default=10**5,
        help="largest n given to pyrevolve (it needs about a minute at 10**6)",
    )
    parser.add_argument(
        "--optimal-max",
        type=int,
        default=200,
        help="largest heterogeneous chain planned with Optimal (cubic: n = 1000 takes ~15 min)",
    )
    parser.add_argument(
        "--uniform-max",
        type=int,
        default=1000,
        help="largest chain of identical steps planned with Optimal (quadratic)",
    )
    args = parser.parse_args()
    print(run(args.quick, args.repeats, args.pyrevolve_max, args.optimal_max, args.uniform_max))
