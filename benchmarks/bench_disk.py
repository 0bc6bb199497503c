"""Memory + disk: plan times, a long PDE-like loop, and checkpoint_schedules side by side.

1. **Plan time** of TwoLevel (and DiskRevolve) at n = 10**4 and 10**5: the
   seconds to build the cost tables, one run each (the least of two).
2. **A reaction-diffusion loop** (Fisher-KPP, ``u += dt (D u'' + u (1 - u))``
   on a periodic 1-D grid, the diffusion coefficient ``D`` and ``u_0``
   requiring gradients) reversed under ``rm.Tape(snapshots=s,
   disk_snapshots=d)``, against memory-only revolve with the same ``s``
   memory slots: wall time of forward + backward, the two interleaved (median
   of the repeats), with the disk I/O that ``tape.stats`` measured.  The
   gradients are compared bit for bit.  The plan (and its measured write and
   read costs) is made once before the timed runs, as a training loop would
   reuse it.
3. **Counts against checkpoint_schedules** (``pip install checkpoint_schedules``;
   skipped with the reason when it is missing): advances, disk writes and
   reads and the cost ``advances + wd writes + rd reads`` of TwoLevel, of
   checkpoint_schedules' HRevolve (the same optimum) and of its
   MultistageCheckpointSchedule (Stumm and Walther's multistage binomial
   schedule, which does not look at the costs), on the same (n, ram, disk).
"""

from benchmarks import common  # noqa: F401, I001  (pins BLAS threads before NumPy loads)

import os
import statistics
import time

import numpy as np

import remat as rm
from benchmarks.common import environment, peer_counts, skip, table
from remat import memory
from remat.schedules import DISK, DiskRevolve, TwoLevel, simulate

PLAN_CASES = {  # n -> (s, d) of TwoLevel (d None: DiskRevolve)
    10**4: ((10, None), (10, 2), (10, 5), (10, 10), (10, 50), (10, 1000)),
    10**5: ((10, None), (10, 2), (10, 5), (10, 10)),
}
GRID, STEPS, SLOTS, DISK_SLOTS, REPEATS = 10**5, 2000, 10, (20, 60), 5
PEER_CASES = ((100, 2, 3), (1000, 2, 2), (1000, 5, 5), (1000, 10, 10), (3000, 10, 5))


def plan_rows(cases):
    rows = []
    for n, pairs in cases.items():
        for s, d in pairs:
            seconds = []
            for _ in range(2):
                start = time.perf_counter()
                plan = DiskRevolve(n, s, 2, 2) if d is None else TwoLevel(n, s, d, 2, 2)
                seconds.append(time.perf_counter() - start)
            rows.append(
                (
                    n,
                    repr(plan).replace(f"steps={n}, ", ""),
                    f"{min(seconds):.2f}",
                    f"{plan.cost:.12g}",
                )
            )
    return rows


def reaction_diffusion(grid):
    """(step, loss, leaves): Fisher-KPP on a periodic grid of ``grid`` points."""
    x = np.linspace(0.0, 1.0, grid, endpoint=False)
    u0 = rm.tensor(0.5 + 0.4 * np.sin(2 * np.pi * x) * np.cos(14 * np.pi * x), requires_grad=True)
    coefficient = rm.tensor(0.2, requires_grad=True)

    def step(u):
        laplacian = rm.concatenate([u[-1:], u[:-1]]) + rm.concatenate([u[1:], u[:1]]) - 2.0 * u
        return u + 0.1 * (coefficient * laplacian + u * (1.0 - u))

    return step, u0, coefficient


def pde_run(step, u0, coefficient, steps, **tape_kwargs):
    u0.grad = coefficient.grad = None
    start, cpu = time.perf_counter(), time.process_time()
    with rm.Tape(**tape_kwargs) as tape:
        loss = (tape.loop(step, u0, steps=steps) ** 2).sum()
    loss.backward()
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return (seconds, cpu), tape.stats, (u0.grad.copy(), coefficient.grad.copy())


def pde_rows(grid, steps, slots, disk_slots, repeats, folder):
    step, u0, coefficient = reaction_diffusion(grid)
    contenders = {f"revolve s={slots}": dict(snapshots=slots)}
    for d in disk_slots:
        contenders[f"TwoLevel s={slots} d={d}"] = dict(
            snapshots=slots, disk_snapshots=d, disk_dir=folder
        )
    memory.clear_plans()
    plans = {}
    for name, kwargs in contenders.items():  # measure and plan once (cached)
        if "disk_snapshots" in kwargs:
            start = time.perf_counter()
            with rm.Tape(**kwargs) as tape:
                tape.loop(step, u0, steps=steps)
            plans[name] = (tape.plans[0], time.perf_counter() - start)
    times = {name: [] for name in contenders}
    cpu = {name: [] for name in contenders}
    stats, grads = {}, {}
    for _ in range(repeats):
        for name, kwargs in contenders.items():
            (wall, used), stats[name], grads[name] = pde_run(step, u0, coefficient, steps, **kwargs)
            times[name].append(wall)
            cpu[name].append(used)
    reference = grads[f"revolve s={slots}"]
    base = statistics.median(times[f"revolve s={slots}"])
    cpu_base = statistics.median(cpu[f"revolve s={slots}"])
    rows = []
    for name in contenders:
        st = stats[name]
        same = all(np.array_equal(a, b) for a, b in zip(grads[name], reference))
        (plan, costs), plan_seconds = plans.get(name, ((None, None), None))
        median = statistics.median(times[name])
        cpu_median = statistics.median(cpu[name])
        rows.append(
            (
                name,
                st.forward_steps,
                f"{median:.2f}",
                f"{median / base:.2f}",
                f"{cpu_median:.2f}",
                f"{cpu_median / cpu_base:.2f}",
                "-" if costs is None else f"{costs.write_cost:.2f} / {costs.read_cost:.2f}",
                "-" if plan_seconds is None else f"{plan_seconds:.2f}",
                f"{st.disk_writes} / {st.disk_reads}",
                f"{st.disk_bytes_written / 2**20:.0f} / {st.disk_bytes_read / 2**20:.0f}",
                f"{st.peak_disk_bytes / 2**20:.1f}",
                f"{st.disk_seconds:.2f}",
                f"{st.peak_bytes / 2**20:.1f}",
                "yes" if same else "**NO**",
            )
        )
    return rows, times


def peer_rows(cases, wd=2, rd=2):
    try:
        import checkpoint_schedules as peer
    except ImportError as error:
        skip("checkpoint_schedules", f"{type(error).__name__}: {error}")
        return None
    rows = []
    for n, ram, disk in cases:
        ours = TwoLevel(n, ram, disk, wd, rd)
        sim = simulate(ours)
        mine = (sim.advances, sim.writes[DISK], sim.reads[DISK], ours.cost)
        found = []
        for make in (
            lambda: peer.HRevolve(n, ram, disk, uf=1, ub=1, wd=wd, rd=rd),
            lambda: peer.MultistageCheckpointSchedule(n, ram, disk),
        ):
            try:
                found.append(peer_counts(make(), n, wd, rd))
            except Exception as error:  # noqa: BLE001 - its planners recurse deeply
                found.append(f"failed ({type(error).__name__})")
        rows.append(
            (n, ram, disk)
            + tuple(
                c if isinstance(c, str) else f"{c[0]} / {c[1]} / {c[2]} / {c[3]:.12g}"
                for c in (mine, *found)
            )
        )
    return rows


def run(quick=False):
    load = os.getloadavg()[0]
    cases = {100: ((2, None), (2, 3)), 1000: ((10, 5),)} if quick else PLAN_CASES
    grid, steps, disk_slots, repeats = (
        (1000, 60, (4,), 1) if quick else (GRID, STEPS, DISK_SLOTS, REPEATS)
    )
    plans = table(["n", "schedule", "plan seconds", "cost"], plan_rows(cases))
    import tempfile

    with tempfile.TemporaryDirectory(prefix="remat-bench-disk-") as folder:
        rows, times = pde_rows(grid, steps, SLOTS, disk_slots, repeats, folder)
        left = os.listdir(folder)
    pde = table(
        [
            "tape",
            "step evaluations",
            "seconds (median)",
            "/ revolve",
            "CPU seconds (median)",
            "/ revolve (CPU)",
            "write / read cost (steps)",
            "plan seconds",
            "disk writes / reads",
            "MiB written / read",
            "peak MiB on disk",
            "disk seconds",
            "peak MiB in memory",
            "gradients = revolve's",
        ],
        rows,
    )
    spread = "; ".join(f"{name}: {', '.join(f'{t:.2f}' for t in ts)}" for name, ts in times.items())
    peers = peer_rows(PEER_CASES[:2] if quick else PEER_CASES)
    version = common.version("checkpoint_schedules")
    peer_text = (
        "checkpoint_schedules is not installed (`pip install checkpoint_schedules`): skipped."
        if peers is None
        else table(
            [
                "n",
                "ram",
                "disk",
                "remat TwoLevel: advances / writes / reads / cost",
                f"HRevolve ({version})",
                f"MultistageCheckpointSchedule ({version})",
            ],
            peers,
        )
    )
    return (
        "\n\n".join(
            [
                "## disk (`python -m benchmarks disk`)",
                environment(("numpy", "remat", "checkpoint_schedules")),
                f"Load average {load:.1f} on the machine when it started (shared: other work "
                "ran beside it).",
                "**Plan time** (seconds to build TwoLevel's or DiskRevolve's tables, write = read "
                "= 2 step costs, the least of two runs):",
                plans,
                f"**A reaction-diffusion loop**: {steps} steps of Fisher-KPP on a periodic grid of "
                f"{grid} points (a state of {grid * 8 / 2**20:.2f} MiB), gradient of "
                "sum(u_n**2) with respect to u_0 and D; forward + backward wall time, contenders "
                f"interleaved, median of {repeats} (wall time, and this process's CPU time, "
                "which other work on the machine disturbs less).  Disk snapshots in a "
                "temporary folder on the "
                f"machine's disk ({'empty' if not left else 'NOT empty'} afterwards).  The "
                "write and read costs are the ones measured by the tape (in step evaluations).",
                pde,
                f"Every run's seconds: {spread}.",
                "**Counts against checkpoint_schedules** (write = read = 2; advances beyond the "
                "n taped steps; HRevolve run with ub = 1, its default, which gives the same "
                "schedule since every step is taped once either way):",
                peer_text,
            ]
        )
        + "\n"
    )
