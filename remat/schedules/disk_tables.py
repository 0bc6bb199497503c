"""The tables behind :mod:`.disk`'s schedules: optimal costs and splits, computed fast.

:class:`Tables` evaluates the recurrences of :mod:`.disk` (``M``, ``P(., m)``
for each disk slot ``m``, Disk-Revolve's ``D1`` and ``Dinf``) for every chain
length up to the one planned, keeping each length's best split, from which
:class:`.disk.DiskRevolve` and :class:`.disk.TwoLevel` emit their actions.

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
one below; with :data:`.disk.SHORTCUT_FROM` slots or more it first checks whether
DiskRevolve's plan fits (903 slots at ``n = 10**4``), and then takes it:
1000 disk slots plan in 0.03 s, where 200 still take some 20 s.  Iterating the actions adds
about 0.15 s per 10**5 steps; :mod:`.disk`'s generator keeps an explicit
stack, so no depth of disk segments can overflow Python's recursion limit.

"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

INF = float("inf")
PRUNE_FROM = 96  # kinks from which pruning them beats trying them all (measured, n = 2000..10**5)


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


class Tables:
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
