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
  each with the first ``n`` at which it wins (found by galloping, then
  bisection), gives the best one in O(log n) amortized;
* against the other tables, which are piecewise linear, the minimum of a sum
  of two such functions lies at an end or at a kink where the slope grows,
  and that kink is one of either term; only those ``j`` are tried (a few
  tens to a few thousand, depending on the budget).  From :data:`PRUNE_FROM`
  kinks on, they are tried outwards from the minimum of a convex minorant
  of the sum (the lower convex hulls of both terms, see ``_HullBounds``),
  each way only while the minorant is below the best cost found: the same
  split, ties included, for a few tens of tries instead of thousands;
* Disk-Revolve's segments (``write_cost + j + read_cost + D1(j)``, whatever
  their position) are tried only up to the longest one that two shorter
  ones do not beat: a dozen steps to a few hundred.

Plan times (``python -m benchmarks disk``, one core of a shared machine,
10 memory slots, write = read = 2): at ``n = 10**4`` 0.03 s for DiskRevolve
and 0.06 / 0.2 / 0.6 / 6.7 s for TwoLevel with 2 / 5 / 10 / 50 disk slots;
at ``n = 10**5`` 0.2 s and 0.5 / 2.5 / 9 s with 2 / 5 / 10.  TwoLevel's
work grows with the disk slots, one table each, until a level equals the
one below; with :data:`SHORTCUT_FROM` slots or more it first checks whether
DiskRevolve's plan fits (903 slots at ``n = 10**4``), and then takes it:
1000 disk slots plan in 0.03 s, where 200 still take some 20 s.  Iterating the actions adds
about 0.15 s per 10**5 steps; the generator keeps an explicit stack, so no
depth of disk segments can overflow Python's recursion limit.

Checks: the tests compare both schedules with an exhaustive search over all
executor moves (n <= 7) and with the plain O(n^2 d) recurrence; the
benchmark finds the same optima as checkpoint_schedules' HRevolve and
DiskRevolve.  The tables hold O(n * disk_snapshots) numbers (a level
equal to the one below ends the table: more disk slots would not be used).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
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
SHORTCUT_FROM = 8  # disk slots from which TwoLevel first asks if Disk-Revolve's plan fits
PRUNE_FROM = 96  # kinks from which pruning them beats trying them all (measured, n = 2000..10**5)


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


def _lower_hull(points):
    """The vertices (xs, ys) of the lower convex hull of ``points``, sorted by x."""
    xs, ys = [], []
    for x, y in points:
        while len(xs) >= 2 and (ys[-1] - ys[-2]) * (x - xs[-2]) >= (y - ys[-2]) * (xs[-1] - xs[-2]):
            xs.pop()
            ys.pop()
        xs.append(x)
        ys.append(y)
    return xs, ys


class _HullBounds:
    """Convex minorants that bound ``A(j) + right(n - j)`` from below, to prune splits.

    ``right``'s lower convex hull ``Rh`` (tabulated) and the lower convex hull
    ``Ah`` of ``A`` on ``1 .. n - 1`` (grown as ``A`` is) bound the two terms
    from below, and ``h(j) = Ah(j) + Rh(n - j)`` is convex in ``j``: going
    away from its minimum, ``h`` only grows, so once it reaches the best cost
    found, no split further that way can do better.  The minimum moves right
    as ``n`` grows (``Rh`` is convex, and ``Ah`` only drops at its right end
    as points are added), so it is tracked by walking.
    """

    def __init__(self, right, a1):
        n_max = len(right) - 1
        xs, ys = _lower_hull((k, right[k]) for k in range(1, n_max + 1))
        rh = [INF] * (n_max + 1)
        for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
            slope = (y1 - y0) / (x1 - x0)
            for k in range(x0, x1):
                rh[k] = y0 + slope * (k - x0)
        rh[xs[-1]] = ys[-1]
        self.rh = rh
        self.xs, self.ys = [1], [a1]  # Ah's vertices
        self.low = 1  # where h was least for the last n

    def add(self, x, y):
        """A(x) = y is known (x = n, after P(n)): Ah now covers 1 .. x."""
        xs, ys = self.xs, self.ys
        while len(xs) >= 2 and (ys[-1] - ys[-2]) * (x - xs[-2]) >= (y - ys[-2]) * (xs[-1] - xs[-2]):
            xs.pop()
            ys.pop()
        xs.append(x)
        ys.append(y)

    def ah(self, j):
        xs = self.xs
        i = bisect_right(xs, j) - 1
        x0 = xs[i]
        if x0 == j:
            return self.ys[i]
        y0 = self.ys[i]
        return y0 + (self.ys[i + 1] - y0) * (j - x0) / (xs[i + 1] - x0)

    def minimum(self, n):
        """The ``j`` in ``1 .. n - 1`` where ``h(j) = Ah(j) + Rh(n - j)`` is least."""
        rh, ah, last = self.rh, self.ah, n - 1
        j = min(self.low, last)
        here = ah(j) + rh[n - j]
        while j < last:
            there = ah(j + 1) + rh[n - j - 1]
            if there > here:
                break
            j, here = j + 1, there
        while j > 1:
            there = ah(j - 1) + rh[n - j + 1]
            if there >= here:
                break
            j, here = j - 1, there
        self.low = j
        return j


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
        bounds = None
        if right is not None and all(v < INF for v in right[1:]):
            bounds = _HullBounds(right, A[1])
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
                    # the first n where j catches up with k: galloping from `first`
                    # (it is usually close), then bisecting
                    lo = hi = first + 1
                    width = 1
                    while hi <= n_max and not a + M[hi - j] <= A[k] + M[hi - k]:
                        lo = hi + 1
                        hi = min(lo + width, n_max + 1)
                        width *= 2
                    if hi > n_max:
                        hi = n_max + 1
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
                if bounds is None or len(kinks) + len(right_kinks) < PRUNE_FROM:
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
                else:
                    best, arg = self._pruned(n, A, right, kinks, right_kinks, bounds, best, arg)
            P.append(best)
            A.append(n + rc + best)
            split.append(arg)
            if bounds is not None:
                bounds.add(n, A[n])
            b = n - 1  # A[n] is known: is n - 1 a convex kink of A?
            if b >= 2 and A[b + 1] - A[b] > A[b] - A[b - 1]:
                kinks.append(b)
        return P, split

    def _pruned(self, n, A, right, kinks, right_kinks, bounds, best, arg):
        """The disk splits of ``_level`` at ``n``, tried outwards from the minimum of the
        convex minorant ``h`` and each way only while ``h`` is below the best cost:
        the same result (ties included: the first split in the order ``_level``
        tries them, A's kinks then right's) as trying them all."""
        wc, rh, xs, ys = self.wc, bounds.rh, bounds.xs, bounds.ys
        centre = bounds.minimum(n)
        margin = 1e-9 * (abs(best) + 1)  # rounding in h: prune only what is surely above
        found = None  # (group, index) of the best split here, for ties
        # A's kinks j, ascending (group 0); then right's kinks b (group 1), split n - b
        for group, points in ((0, kinks), (1, right_kinks)):
            limit = len(points) if group == 0 else bisect_right(points, n - 2)
            middle = bisect_left(points, centre if group == 0 else n - centre, 0, limit)
            for indices in (range(middle, limit), range(middle - 1, -1, -1)):
                for index in indices:
                    j = points[index] if group == 0 else n - points[index]
                    value = A[j] + wc + right[n - j]
                    if value < best:
                        best, arg, found = value, j, (group, index)
                        continue
                    if value == best and found is not None and (group, index) < found:
                        arg, found = j, (group, index)
                    i = bisect_right(xs, j) - 1  # h(j) = Ah(j) + Rh(n - j), inline
                    x0, y0 = xs[i], ys[i]
                    if x0 != j:
                        y0 += (ys[i + 1] - y0) * (j - x0) / (xs[i + 1] - x0)
                    if y0 + wc + rh[n - j] >= best + margin:
                        break  # h only grows from here on: no split further this way can win
        return best, arg

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

    def fitting_unbounded(self, d: int) -> tuple[list, list, list, list] | None:
        """Disk-Revolve's tables ``(D1, split1, Dinf, split)`` if its plan for ``n_max``
        steps needs at most ``d`` disk slots, else None.

        Then it is optimal with ``d`` slots too: it is a plan within them, and no
        plan within them beats the best with an unbounded disk.  Its disk slots
        are its nested segments: one for each cut along ``n, n - j_1, ...``.
        """
        found = self.unbounded()
        split, n, used = found[3], self.n_max, 0
        while split[n]:
            used += 1
            n -= split[n]
        return found if used <= d else None

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
        tables = _Tables(self.steps, self.snapshots, self.write_cost, self.read_cost)
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
        tables = _Tables(n, s, wc, rc)
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
