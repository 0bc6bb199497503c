"""Memory and disk: ``rm.Tape(snapshots=s, disk_snapshots=d)`` measures, plans and runs TwoLevel.

:class:`~remat.schedules.TwoLevel` is optimal when a disk write costs
``write_cost`` and a read ``read_cost`` step evaluations.  Those two numbers
are measured here, the first time a chain of that kind runs on such a tape:
its first steps are evaluated untaped (up to :data:`SPAN` of them, timed
:data:`REPEATS` times: the least per step), and its initial state is written
to a disk slot and read back as many times (the least of each), in the
folder the run will use (the tape's ``disk_dir``).  The ratios are the costs;
the plan is cached with the byte-budget plans of :mod:`remat.memory`, keyed by
the step functions (the objects), the state's shapes and dtypes, the length
and the budgets, so a training loop that takes a new Tape each iteration
measures once (``tape.stats.plan`` says "measured" or "reused";
:func:`remat.memory.clear_plans` forgets them).  The random-number stream is
put back as it was.

The costs are those of the machine at that moment: the operating system's
page cache makes a write that fits in memory cheap, and a busy disk makes it
dear.  A chain of changing shapes (``tape.chain``) is taken to cost what its
first step and state do.  With ``disk_snapshots=0`` nothing is measured: the
plan is Revolve with ``s`` slots.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import backend, schedules
from . import memory as _memory
from .alive import Holdings
from .executor import ChainRun, leaves_of
from .selective import Unobserved
from .storage import DiskStore

SPAN = 4  # steps timed in one run
REPEATS = 3


@dataclass(frozen=True)
class DiskCosts:
    """What one step, one disk write and one disk read of the state cost, in seconds."""

    step_seconds: float
    write_seconds: float
    read_seconds: float
    state_bytes: int

    @property
    def write_cost(self) -> float:
        """A write in step evaluations (TwoLevel's ``write_cost``)."""
        return self.write_seconds / max(self.step_seconds, 1e-9)

    @property
    def read_cost(self) -> float:
        """A read in step evaluations (TwoLevel's ``read_cost``)."""
        return self.read_seconds / max(self.step_seconds, 1e-9)


def measure_disk_costs(tape, chain, state, steps):
    """The :class:`DiskCosts` of ``chain`` from ``state``, measured with the executor's
    own Advance and the disk store a run uses (in ``tape.disk_dir``)."""
    rng = backend.random_state()
    run = ChainRun.measuring(tape, chain, state, steps, Holdings())
    store = DiskStore(tape.disk_dir)
    start = run.state
    x0 = start[0]
    span = min(steps, SPAN)
    step_times, write_times, read_times = [], [], []
    try:
        for _ in range(REPEATS):
            run.move_to(0, start)
            begin = time.perf_counter()
            run.carry_out(schedules.Advance(0, span))
            step_times.append((time.perf_counter() - begin) / span)
        for _ in range(REPEATS):
            begin = time.perf_counter()
            store.write(0, 0, x0)
            write_times.append(time.perf_counter() - begin)
            begin = time.perf_counter()
            store.read(0, 0, run.devices)
            read_times.append(time.perf_counter() - begin)
    finally:
        store.close()
        run.release()
        backend.set_random_state(rng)
    size = sum(backend.nbytes(a) for a in x0)
    return DiskCosts(min(step_times), min(write_times), min(read_times), size)


def plan_chain(tape, chain, state, steps, functions):
    """``(TwoLevel schedule, DiskCosts or None, how)`` for ``chain`` under ``tape``'s
    budgets: from the cache ("reused"), or measured and planned now ("measured")."""
    s, d = tape.policy.snapshots, tape.disk_snapshots
    if d == 0:
        return schedules.TwoLevel(steps, s, 0, 0, 0), None, "no disk"
    x0, _, tree = leaves_of(state, "the initial state")
    key = (
        "disk",
        chain.owner,
        tuple(functions),
        _memory._spec_key((tree, x0)),
        _memory._spec_key((chain.xs_tree, chain.xs)),
        steps,
        s,
        d,
        tape.disk_dir,
    )
    try:
        entry = _memory._PLANS.get(key)
    except TypeError:  # an unhashable function (or tree): plan every time
        key, entry = None, None
    if entry is not None:
        _memory._PLANS.move_to_end(key)
        return (*entry, "reused")
    with Unobserved():  # a policy around this chain sees the chain's run, not this one
        costs = measure_disk_costs(tape, chain, state, steps)
    schedule = schedules.TwoLevel(steps, s, d, costs.write_cost, costs.read_cost)
    if key is not None:
        _memory._PLANS[key] = (schedule, costs)
        while len(_memory._PLANS) > _memory.CACHE_SIZE:
            _memory._PLANS.popitem(last=False)
    return schedule, costs, "measured"
