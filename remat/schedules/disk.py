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

Plan time
---------
Each minimum over ``j`` is a min-plus convolution, computed exactly but
without trying every ``j``:

* against ``M``, which is convex (its increments are repetition numbers), the
  split cost matrix is Monge: of two split points, the later one, once at
  least as good, stays so as ``n`` grows.  A queue of the useful split points,
  each with the first ``n`` at which it wins (found by bisection), gives the
  best one in O(log n) amortized;
* against the other tables, which are piecewise linear, the minimum of a sum
  of two such functions lies at an end or at a kink where the slope grows,
  and that kink is one of either term; only those ``j`` are tried (a few
  tens to a few thousand, depending on the budget);
* Disk-Revolve's segments (``write_cost + j + read_cost + D1(j)``, whatever
  their position) are tried only up to the longest one that two shorter
  ones do not beat: a dozen steps to a few hundred.

Plan times (``python -m benchmarks schedules``, one core): at ``n = 10**4``
0.03 s for DiskRevolve and 0.05 to 0.2 s for TwoLevel with 2 to 5 disk
slots; at ``n = 10**5`` 0.3 s and 0.7 to 4 s.  TwoLevel's work grows with
the disk slots, one table each, until a level equals the one below: with
10 memory slots at ``n = 10**4``, 50 disk slots take 15 s and 200 take 50 s
(DiskRevolve, which needs no bound, would use 903 there).  Iterating the actions adds
about 0.15 s per 10**5 steps; the generator keeps an explicit stack, so no
depth of disk segments can overflow Python's recursion limit.

Checks: the tests compare both schedules with an exhaustive search over all
executor moves (n <= 7) and with the plain O(n^2 d) recurrence; the
benchmark finds the same optima as checkpoint_schedules' HRevolve and
DiskRevolve.  The tables hold O(n * disk_snapshots) numbers (a level
equal to the one below ends the table: more disk slots would not be used).
"""

from __future__ import annotations

from bisect import bisect_left
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
from .revolve import reverse_segment

INF = float("inf")


def require_cost(owner: str, name: str, value: object) -> float:
    """A finite real number >= 0 (a write or read cost), else a ValueError."""
    cost = cast(float, value)  # the stubs give numbers.Real no comparisons; a Real has them
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= cost < INF:
        raise ValueError(f"{owner}: {name} must be a finite number >= 0, got {value!r}")
    return cost


def _memory_table(n_max: int, s: int) -> list:
    """``M[n] = E(n, s)`` for ``0 <= n <= n_max`` (``M[0]`` unused), ``INF`` if impossible."""
    table = [0, 0]
    if s == 0:  # only a single step can be reversed without a slot
        return table + [INF] * (n_max - 1)
    r, reach = 0, 1  # repetition number of n and beta(s, r)
    for n in range(2, n_max + 1):
        while reach < n:
            r += 1
            reach = reach * (s + r) // r
        table.append(table[-1] + r)  # the n-th step costs its repetition number
    return table[: n_max + 1]


def _convex_kinks(table: list, stop: int) -> list:
    """The ``b`` in ``2 .. stop-2`` where the increments of ``table`` grow.

    A sum of two piecewise linear functions takes its minimum over an
    interval at an end or at a kink where its slope grows, and such a kink is
    one of either term: kinks where a slope drops are never needed.
    """
    return [b for b in range(2, stop - 1) if table[b + 1] - table[b] > table[b] - table[b - 1]]


class _Tables:
    """The optimal costs (and splits) of every chain up to ``n_max`` steps."""

    def __init__(self, n_max: int, s: int, write_cost: float, read_cost: float) -> None:
        self.n_max, self.s, self.wc, self.rc = n_max, s, write_cost, read_cost
        self.M = _memory_table(n_max, s)

    def _level(self, right: list | None) -> tuple[list, list]:
        """``P(., m)`` given ``right = P(., m - 1)`` (None for ``m = 1``), with its splits.

        ``P(n) = min(M(n), min_j A(j) + M(n - j), min_j A(j) + wc + right(n - j))``
        where ``A(j) = j + rc + P(j)``: the right part ``T(n - j, m - 1)`` is
        ``min(M, wc + right)``, so it splits into a convex part and the rest.
        """
        n_max, M, s, rc = self.n_max, self.M, self.s, self.rc
        wc = self.wc
        P, A, split = [0, 0], [INF, 1 + rc], [0, 0]
        kinks = [1]  # where A's slope grows (and j = 1)
        # Right part in memory: M is convex, so of two split points the later
        # one, once at least as good, stays so as n grows (the cost matrix is
        # Monge).  `queue` keeps each useful split with the first n it wins.
        queue: list[tuple[int, int]] = []
        head = 0
        right_kinks = [] if right is None else _convex_kinks(right, n_max + 1)
        for n in range(2, n_max + 1):
            best, arg = M[n], 0
            last = n - 1
            if s == 0:
                value = A[last]  # only a one-step right part needs no slot
                if value < best:
                    best, arg = value, last
            else:
                j, a = last, A[last]  # the newest split point, usable from n on
                while len(queue) > head:
                    k, first = queue[-1]
                    if first < n:
                        first = n
                    if a + M[first - j] <= A[k] + M[first - k]:
                        queue.pop()  # j is at least as good wherever k is still kept
                        continue
                    lo, hi = first + 1, n_max + 1  # first n where j catches up with k
                    while lo < hi:
                        mid = (lo + hi) // 2
                        if a + M[mid - j] <= A[k] + M[mid - k]:
                            hi = mid
                        else:
                            lo = mid + 1
                    if lo <= n_max:
                        queue.append((j, lo))
                    break
                else:
                    queue.append((j, n))
                while head + 1 < len(queue) and queue[head + 1][1] <= n:
                    head += 1
                j = queue[head][0]
                value = A[j] + M[n - j]
                if value < best:
                    best, arg = value, j
            # right part on disk: both terms piecewise linear, try their convex kinks
            if right is not None:
                for j in (1, last):
                    value = A[j] + wc + right[n - j]
                    if value < best:
                        best, arg = value, j
                for j in kinks:
                    value = A[j] + wc + right[n - j]
                    if value < best:
                        best, arg = value, j
                for b in right_kinks:
                    if b > n - 2:
                        break
                    value = A[n - b] + wc + right[b]
                    if value < best:
                        best, arg = value, n - b
            P.append(best)
            A.append(n + rc + best)
            split.append(arg)
            b = n - 1  # A[n] is known: is n - 1 a convex kink of A?
            if b >= 2 and A[b + 1] - A[b] > A[b] - A[b - 1]:
                kinks.append(b)
        return P, split

    def two_level(self, d: int) -> tuple[list, list]:
        """``P(., m)`` and its splits for ``m = 1 .. d`` (index 0 unused).

        Stops early when a level equals the one below: then every higher one
        does too (the recurrence is the same).
        """
        Ps: list[list | None] = [None]
        splits: list[list | None] = [None]
        for m in range(1, d + 1):
            P, split = self._level(Ps[-1])
            if m >= 2 and P == Ps[-1]:
                break
            Ps.append(P)
            splits.append(split)
        while len(Ps) <= d:  # saturated: the same table serves every higher level
            Ps.append(Ps[-1])
            splits.append(splits[-1])
        return Ps, splits

    def unbounded(self) -> tuple[list, list, list, list]:
        """Disk-Revolve: ``D1``, its splits, ``Dinf`` and its splits.

        ``Dinf(n)`` is the cheapest way to cut the chain into disk segments of
        lengths ``j_1, j_2, ...`` (each costs ``C(j) = wc + j + rc + D1(j)``,
        whatever its position) followed by one memory-only part.  A segment
        that costs at least as much as two shorter ones is never needed, so
        only lengths up to the longest one that is not so dominated are
        tried (checked against the split at the best cost per step and at
        the middle; a length not proven dominated stays a candidate).
        """
        n_max, M, wc, rc = self.n_max, self.M, self.wc, self.rc
        D1, split1 = self._level(None)
        C = [INF] + [wc + j + rc + D1[j] for j in range(1, n_max + 1)]
        cheapest = min(range(1, n_max + 1), key=lambda j: C[j] / j)
        longest = 1
        for j in range(2, n_max + 1):
            if not any(
                0 < a < j and C[a] + C[j - a] <= C[j] for a in (cheapest, j - cheapest, j // 2)
            ):
                longest = j
        c_kinks = [b for b in _convex_kinks(C, n_max + 1) if b < longest]
        D, split = [0, 0], [0, 0]
        d_kinks: list[int] = []
        for n in range(2, n_max + 1):
            best, arg = M[n], 0
            top = min(longest, n - 1)  # segments of 1 .. top steps
            for j in (1, top):
                value = C[j] + D[n - j]
                if value < best:
                    best, arg = value, j
            for j in c_kinks:
                if j >= top:
                    break
                value = C[j] + D[n - j]
                if value < best:
                    best, arg = value, j
            for index in range(bisect_left(d_kinks, n - top + 1), len(d_kinks)):
                b = d_kinks[index]
                value = C[n - b] + D[b]
                if value < best:
                    best, arg = value, n - b
            D.append(best)
            split.append(arg)
            b = n - 1
            if b >= 2 and D[b + 1] - D[b] > D[b] - D[b - 1]:
                d_kinks.append(b)
        return D1, split1, D, split


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
    return _Tables(n, s, wc, rc).unbounded()[2][n]


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
    tables = _Tables(n, s, wc, rc)
    if d == 0:
        return tables.M[n]
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
        tables = _Tables(self.steps, self.snapshots, self.write_cost, self.read_cost)
        _, self._split1, costs, self._split = tables.unbounded()
        self.cost = costs[self.steps]
        self.x0_level = None if self.steps == 1 else DISK if self._split[self.steps] else MEMORY

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
        tables = _Tables(n, s, wc, rc)
        self._M = tables.M
        self._P: list = [None]
        self._split: list = [None]
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
