"""Two storage levels: memory slots that cost nothing, disk slots that cost time.

A state written to disk costs ``write_cost`` and reading it back costs
``read_cost``, both in units of one step evaluation; memory snapshots and
restores are free.  Two optimal schedules:

* :class:`DiskRevolve` - ``snapshots`` memory slots and an unbounded disk
  (Aupy, Herrmann, Hovland and Robert 2016, "Optimal multistage algorithm for
  adjoint computation", SIAM J. Sci. Comput. 38(3)).
* :class:`TwoLevel` - ``snapshots`` memory slots and ``disk_snapshots`` disk
  slots (Herrmann and Pallez 2020, "H-Revolve: a framework for adjoint
  computation on synchronous hierarchical platforms", ACM TOMS 46(2)).

The cost model (the papers')
----------------------------
A step evaluated without taping costs ``uf = 1``; taping a step and
reversing it costs ``ub = 0`` (every schedule tapes and reverses each step
exactly once, right before its reversal, so ``ub`` would add the same
``n * ub`` to all of them); a disk write costs ``write_cost``, a disk read
``read_cost``; memory snapshots and restores are free.  The cost of a
schedule is therefore its *extra* cost,

    cost = advances + write_cost * writes["disk"] + read_cost * reads["disk"],

with the counts of :func:`~.simulate.simulate`; ``simulate(...).forward_steps
== steps + advances``.  :func:`disk_revolve_cost` and :func:`two_level_cost`
return the optimum, which the schedules reach exactly.

remat's conventions against the papers'
---------------------------------------
* The papers' chain of length ``l`` has ``l + 1`` steps (their ``l`` leaves
  out the last step, which is taped directly: their memory-only cost with
  one slot, ``l (l + 1) / 2``, is remat's ``E(l + 1, 1)``), so remat's
  ``steps = n`` is their ``l = n - 1``.
* ``snapshots`` is the papers' ``c_m`` unchanged: the memory slots, the one
  that holds ``x_0`` included *if* ``x_0`` lives in memory.  ``x_0`` starts
  current and stored nowhere; the optimal schedule stores it either in
  memory slot 0 (then it is plain Revolve on that chain) or in disk slot 0,
  paying one write, and leaves all memory slots to later states.  The
  schedule's ``x0_level`` says which.  With this reading the papers' anchors
  hold: ``DiskRevolve(11, 1, 2, 2)`` costs 30 and ``TwoLevel(21, 2, 2, 2, 2)``
  costs 53.
* ``disk_snapshots`` counts every disk slot, ``x_0``'s included.

The recurrences (written for remat's ``n``)
-------------------------------------------
``M(n) = E(n, s)`` is memory-only Revolve (:mod:`.binomial`), ``x_0`` current.
With ``m`` disk slots free, ``x_0`` current and stored nowhere::

    T(n, 0) = M(n),     T(n, m) = min(M(n), write_cost + P(n, m))

and, once ``x_0`` is on disk (one of the ``m`` slots) and current::

    P(1, m) = 0,
    P(n, m) = min(M(n),  min over 1 <= j < n of
                         j + T(n - j, m - 1) + read_cost + P(j, m)):

advance ``j`` steps, reverse the right part with one disk slot less, read
``x_0`` back, and reverse the left part with ``x_0`` still on disk (Herrmann
and Pallez's H-Revolve for two levels).  With an unbounded disk, Aupy et al.
show that the left part never needs a second disk slot, which gives
Disk-Revolve::

    D1(n)   = P(n, 1)
    Dinf(n) = min(M(n), min over j of write_cost + j + Dinf(n - j) + read_cost + D1(j)).

Plan time: :mod:`.disk_tables` computes each minimum over ``j`` exactly
without trying every ``j`` (it says how, with the plan times measured).

Checks: the tests compare both schedules with an exhaustive search over all
executor moves (n <= 7) and with the plain O(n^2 d) recurrence; the
benchmark finds the same optima as checkpoint_schedules' HRevolve and
DiskRevolve.  The tables hold O(n * disk_snapshots) numbers (a level
equal to the one below ends the table: more disk slots would not be used).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from numbers import Real
from typing import Any, cast

from .actions import (
    DISK,
    MEMORY,
    Action,
    Advance,
    End,
    EndForward,
    Free,
    Restore,
    Snapshot,
)
from .arguments import require_count
from .disk_tables import INF, Tables
from .revolve import reverse_segment

SHORTCUT_FROM = 8  # disk slots from which TwoLevel first asks if Disk-Revolve's plan fits


def require_cost(owner: str, name: str, value: object) -> float:
    """A finite real number >= 0 (a write or read cost), else a ValueError."""
    cost = cast(float, value)  # the stubs give numbers.Real no comparisons; a Real has them
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= cost < INF:
        raise ValueError(f"{owner}: {name} must be a finite number >= 0, got {value!r}")
    return cost


def _check(owner, steps, snapshots, write_cost, read_cost):
    n = require_count(owner, "steps", steps)
    s = require_count(owner, "snapshots", snapshots, minimum=0)
    wc = require_cost(owner, "write_cost", write_cost)
    rc = require_cost(owner, "read_cost", read_cost)
    return n, s, wc, rc


def disk_revolve_cost(steps: int, snapshots: int, write_cost: float, read_cost: float) -> float:
    """Optimal extra cost with ``snapshots`` memory slots and an unbounded disk.

    ``advances + write_cost * disk writes + read_cost * disk reads`` of
    :class:`DiskRevolve` (Aupy et al. 2016's ``Opt_inf(steps - 1, snapshots)``
    with ``uf = 1, ub = 0``).

    >>> from remat.schedules import disk_revolve_cost
    >>> disk_revolve_cost(30, 2, write_cost=2, read_cost=2)
    80
    """
    n, s, wc, rc = _check("disk_revolve_cost", steps, snapshots, write_cost, read_cost)
    return Tables(n, s, wc, rc).unbounded()[2][n]


def two_level_cost(
    steps: int, snapshots: int, disk_snapshots: int, write_cost: float, read_cost: float
) -> float:
    """Optimal extra cost with ``snapshots`` memory and ``disk_snapshots`` disk slots.

    ``advances + write_cost * disk writes + read_cost * disk reads`` of
    :class:`TwoLevel` (Herrmann and Pallez 2020's optimum for two levels);
    with ``disk_snapshots = 0`` it is Revolve's ``E(n, s)``.

    >>> from remat.schedules import two_level_cost
    >>> two_level_cost(30, 2, 0, 2, 2), two_level_cost(30, 2, 3, 2, 2)
    (126, 81)
    """
    n, s, d, wc, rc = _check_two(
        "two_level_cost", steps, snapshots, disk_snapshots, write_cost, read_cost
    )
    tables = Tables(n, s, wc, rc)
    if d == 0:
        return tables.M[n]
    if d >= SHORTCUT_FROM:
        found = tables.fitting_unbounded(d)
        if found is not None:
            return found[2][n]
    P = tables.two_level(d)[0][d]
    return min(tables.M[n], wc + P[n])


def _check_two(owner, steps, snapshots, disk_snapshots, write_cost, read_cost):
    n, s, wc, rc = _check(owner, steps, snapshots, write_cost, read_cost)
    d = require_count(owner, "disk_snapshots", disk_snapshots, minimum=0)
    if n >= 2 and s + d == 0:
        raise ValueError(
            f"{owner}: snapshots + disk_snapshots must be >= 1 for steps >= 2, "
            f"got snapshots={snapshots!r}, disk_snapshots={disk_snapshots!r}"
        )
    return n, s, d, wc, rc


class _Generator:
    """Emits the actions of a memory-and-disk plan, without recursion.

    ``memory(a, n)`` reverses steps ``a .. a+n-1`` with memory only (Revolve,
    ``x_a`` current); the first such segment is the end of the forward sweep
    and keeps its ``EndForward()``, later ones drop theirs.
    """

    def __init__(self, steps: int, s: int) -> None:
        self.steps, self.s = steps, s
        self.forward = True

    def memory(self, a: int, n: int) -> Iterator[Action]:
        slots = range(min(self.s, n))
        if self.forward:
            self.forward = False
            yield from reverse_segment(a, n, slots, in_forward_sweep=True)
            return
        for action in reverse_segment(a, n, slots, in_forward_sweep=True):
            if type(action) is not EndForward:
                yield action

    def run(self, expand: Callable[[Any], Sequence[Any]], root: Any) -> Iterator[Action]:
        """Depth-first: ``expand(task)`` returns the parts of a task, in order."""
        stack = [root]
        while stack:
            task = stack.pop()
            if isinstance(task, Action):
                yield task
            elif task[0] == "memory":
                yield from self.memory(task[1], task[2])
            else:
                stack.extend(reversed(expand(task)))
        yield End()


class DiskRevolve:
    """Optimal schedule for ``snapshots`` memory slots and an unbounded disk.

    Aupy, Herrmann, Hovland and Robert 2016, "Optimal multistage algorithm
    for adjoint computation" (SIAM J. Sci. Comput. 38(3)): a chain either
    runs Revolve in memory, or writes ``x_0`` to disk, advances ``j`` steps,
    solves the rest the same way, reads ``x_0`` back and reverses the first
    ``j`` steps re-reading ``x_0`` from disk as often as it pays (one disk
    slot).  The cost model and remat's conventions are in :mod:`.disk`;
    ``cost`` is the optimum, ``disk_revolve_cost(steps, snapshots, write_cost,
    read_cost)``, and ``x0_level`` says where ``x_0`` is stored.  Disk slots
    are numbered from 0 (``x_0``'s) by depth; ``disk_snapshots`` is ``None``
    (unbounded).

    >>> from remat.schedules import DiskRevolve, simulate
    >>> plan = DiskRevolve(steps=30, snapshots=2, write_cost=2, read_cost=2)
    >>> r = simulate(plan)
    >>> plan.cost, r.writes, r.reads
    (80, {'memory': 12, 'disk': 4}, {'memory': 25, 'disk': 4})
    """

    disk_snapshots = None

    def __init__(self, steps: int, snapshots: int, write_cost: float, read_cost: float) -> None:
        self.steps, self.snapshots, self.write_cost, self.read_cost = _check(
            "DiskRevolve", steps, snapshots, write_cost, read_cost
        )
        tables = Tables(self.steps, self.snapshots, self.write_cost, self.read_cost)
        self._take(tables.unbounded())

    def _take(self, found: tuple[list, list, list, list]) -> None:
        _, self._split1, costs, self._split = found
        self.cost = costs[self.steps]
        self.x0_level = None if self.steps == 1 else DISK if self._split[self.steps] else MEMORY

    @classmethod
    def _from_tables(
        cls,
        steps: int,
        snapshots: int,
        write_cost: float,
        read_cost: float,
        found: tuple[list, list, list, list],
    ) -> DiskRevolve:
        plan = cls.__new__(cls)
        plan.steps, plan.snapshots = steps, snapshots
        plan.write_cost, plan.read_cost = write_cost, read_cost
        plan._take(found)
        return plan

    def __repr__(self) -> str:
        return (
            f"DiskRevolve(steps={self.steps}, snapshots={self.snapshots}, "
            f"write_cost={self.write_cost!r}, read_cost={self.read_cost!r})"
        )

    def __iter__(self) -> Iterator[Action]:
        split, split1 = self._split, self._split1

        def expand(task):
            kind, a, n, slot = task
            if kind == "free":  # x_a is current, not stored, disk slots from `slot` free
                j = split[n]
                if j == 0:
                    return [("memory", a, n)]
                return [
                    Snapshot(a, slot, DISK),
                    Advance(a, a + j),
                    ("free", a + j, n - j, slot + 1),
                    Restore(a, slot, DISK),
                    ("disk", a, j, slot),
                ]
            j = split1[n]  # "disk": x_a is current and in disk slot `slot`
            if j == 0:
                return [Free(slot, DISK), ("memory", a, n)]
            return [
                Advance(a, a + j),
                ("memory", a + j, n - j),
                Restore(a, slot, DISK),
                ("disk", a, j, slot),
            ]

        return _Generator(self.steps, self.snapshots).run(expand, ("free", 0, self.steps, 0))


class TwoLevel:
    """Optimal schedule for ``snapshots`` memory slots and ``disk_snapshots`` disk slots.

    Herrmann and Pallez 2020, "H-Revolve" (ACM TOMS 46(2)), for two levels:
    a chain with ``x_0`` current either runs Revolve in memory or writes
    ``x_0`` to a disk slot; with ``x_0`` on disk it either runs Revolve in
    memory (freeing the disk slot) or advances ``j`` steps, solves the rest
    with one disk slot less, reads ``x_0`` back and solves the first ``j``
    steps with ``x_0`` still on disk.  With ``disk_snapshots=0`` it is
    :class:`~.revolve.Revolve` action for action.  The cost model and remat's
    conventions are in :mod:`.disk`; ``cost`` is the optimum,
    ``two_level_cost(...)``, and ``x0_level`` says where ``x_0`` is stored.
    The disk slot of a segment with ``m`` slots left is ``disk_snapshots - m``.
    With :data:`SHORTCUT_FROM` disk slots or more, it first asks whether
    :class:`DiskRevolve`'s plan (an unbounded disk) needs no more slots than
    it has: then that plan is optimal here too, and it is the schedule (its
    slots numbered by depth), without a table per disk slot.

    >>> from remat.schedules import TwoLevel, simulate
    >>> plan = TwoLevel(30, snapshots=2, disk_snapshots=3, write_cost=2, read_cost=2)
    >>> plan.cost, simulate(plan).peak_disk_snapshots
    (81, 3)
    """

    def __init__(
        self,
        steps: int,
        snapshots: int,
        disk_snapshots: int,
        write_cost: float,
        read_cost: float,
    ) -> None:
        n, s, d, wc, rc = _check_two(
            "TwoLevel", steps, snapshots, disk_snapshots, write_cost, read_cost
        )
        self.steps, self.snapshots, self.disk_snapshots = n, s, d
        self.write_cost, self.read_cost = wc, rc
        tables = Tables(n, s, wc, rc)
        self._M = tables.M
        found = tables.fitting_unbounded(d) if d >= SHORTCUT_FROM else None
        self._unbounded = None if found is None else DiskRevolve._from_tables(n, s, wc, rc, found)
        self._P: list = [None]
        self._split: list = [None]
        if self._unbounded is not None:  # Disk-Revolve's plan fits in the disk slots: optimal
            self.cost, self.x0_level = self._unbounded.cost, self._unbounded.x0_level
            return
        if d:
            self._P, self._split = tables.two_level(d)
        self.cost = self._M[n] if d == 0 else min(self._M[n], wc + self._P[d][n])
        self.x0_level = None if n == 1 else MEMORY if self._on_memory(n, d) else DISK

    def _on_memory(self, n: int, m: int) -> bool:
        return m == 0 or self._M[n] <= self.write_cost + self._P[m][n]

    def __repr__(self) -> str:
        return (
            f"TwoLevel(steps={self.steps}, snapshots={self.snapshots}, "
            f"disk_snapshots={self.disk_snapshots}, write_cost={self.write_cost!r}, "
            f"read_cost={self.read_cost!r})"
        )

    def __iter__(self) -> Iterator[Action]:
        if self._unbounded:
            return iter(self._unbounded)
        d, split = self.disk_snapshots, self._split

        def expand(task):
            kind, a, n, m = task
            slot = d - m
            if kind == "free":  # x_a current, not stored, m disk slots free
                if self._on_memory(n, m):
                    return [("memory", a, n)]
                return [Snapshot(a, slot, DISK), ("disk", a, n, m)]
            j = split[m][n]  # "disk": x_a current and in disk slot d - m
            if j == 0:
                return [Free(slot, DISK), ("memory", a, n)]
            return [
                Advance(a, a + j),
                ("free", a + j, n - j, m - 1),
                Restore(a, slot, DISK),
                ("disk", a, j, m),
            ]

        return _Generator(self.steps, self.snapshots).run(expand, ("free", 0, self.steps, d))
