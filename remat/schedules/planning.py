"""The number-crunching of :class:`remat.schedules.Optimal`: its tables, built with NumPy.

Why a module of its own.  Schedules are pure data: they hold no arrays and
never touch the backend (a plan is made on the host, whatever device the
steps run on).  The dynamic programme behind ``Optimal`` is, however, a few
hundred million additions and minima over small integers and floats, which
plain Python does at tens of nanoseconds each and NumPy at about one.  So the
arithmetic lives here: numbers in (Python lists of sizes and times), tables
out (NumPy float64 arrays on the CPU, never the backend's device arrays), and
nothing of remat imported (as everywhere in ``schedules``, which stands
alone); the plans ``schedules.optimal`` yields from it stay plain actions.

The programme (see :mod:`remat.schedules.optimal` for what it means): for a
segment ``[a, b)`` of the chain, ``x_a`` current or in a slot, and ``k``
memory units (``x_a``'s slot counted in them),

    D(a, b, k) = min( r[a] + D(a+1, b, k - t[a]),
                      min over a < j < b of F(a, j) + D(a, j, k) + D(j, b, k - s[a]) )

with ``D(a, b, k) = R(a, b)`` (every step taped once: store all) from
``k = T(a, b)`` on, where ``R`` and ``T`` sum ``r`` and ``t`` over the
segment, and ``+inf`` where nothing fits.  Segments are done by length; for
one length every start ``a``, every split ``j`` and every level ``k`` is one
NumPy expression over a three-dimensional view (no copy) of the tables of
shorter segments, so the Python loop runs ``n`` times, not ``n^3 / 6``.

Layout.  ``ends[b, a, k] = D(a, b, k)`` and ``shifted[b, a, k] = F(a, b) +
D(a, b, k + s[a])``.  For one length ``L``, the left parts with their
advance, ``F(a, a+i) + D(a, a+i, k' + s[a])``, are ``shifted[a+i, a, k']``,
and the right parts ``D(a+i, a+L, k')`` are ``ends[a+L, a+i, k']``: both are
linear in ``(a, i, k')``, hence strided views.  The best split at ``k'`` is
then moved up to level ``k' + s[a]``.  The two tables take
``2 (n+1)^2 (K+1)`` floats (``K`` the budget in units).  ``R`` and ``F``
are summed left to right, segment by segment (``R(a, b) = R(a, b-1) +
r[b-1]``), not as differences of prefix sums, so that two segments with the
same steps get the same sums to the last bit wherever they lie.

Sharing rows: exact, and what it costs.  ``D(a, b, .)`` depends on nothing
but the segment's steps, in order: each step's ``(f, r, s, t)`` (``s`` the
size of its input state; ``x_b``'s is never read).  Real chains repeat a few
kinds of layers, so many segments are alike step for step and must have
equal rows.  :class:`SegmentClasses` numbers the distinct segments (classes
of length ``L`` from those of length ``L - 1`` and the next step's kind, one
``np.unique`` a length), and the table then holds one row per class, each
computed once, from its first occurrence.  A class's left parts are its
prefixes and its right parts its suffixes: :class:`_Stacks` keeps, for each
class of the current length, its prefixes' rows (and its suffixes') one
after the other, so that its splits are two views added, as in the table of
a row a segment; a class extended by two longer ones has its stack copied
for the second.  Every sum and minimum is the same floating-point operation,
in the same order, as in the table of a row a segment, so the values and the
choices are identical bit for bit (``tests/schedules/test_planning_shared.py`` checks
it against that table and against a plain recursion).  Work: ``sum over
classes of (length - 1)`` splits, times the levels searched, instead of
``n^3 / 6``: about ``p n^2 / 2`` for a chain of period ``p``, a third of
``n^3 / 6`` for ``p = n / 3``.  Memory: two rows of ``K + 1`` floats per
class, and two stacks of up to ``n`` rows for each class of the most
numerous length (``p n`` rows for a period ``p``).  The table shares rows
where that cuts the split search :data:`SHARE_GAIN` times or more, holds no
more than half the rows, and the chain has :data:`_SHARE_FROM` steps or more;
a chain whose steps all differ gains nothing (measured times always differ a
little: :mod:`remat.memory` pools those of one layer repeated).  Measured
(``python -m benchmarks planning``, 1000 steps, 128 levels, one core's CPU
time): period 2 in 0.2-0.4 s, 4 in 0.3-0.7 s, 8 in 0.7-1.1 s, 16 in 1.2-2.1 s,
from 1.5 to 10 times the least memory.

Levels searched.  Below the first finite level of a split's left part or of
its right part (both kept for every row), the split's cell is ``+inf``, so
each length (each class, when shared) searches from the lowest level where
some split can be finite, and a class only the splits that can be finite
below the store-all levels: at 1.5 times the least memory most cells are
``+inf``, and this halves the work there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

_INF = np.inf


def _shift_up(rows: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """``out[a, k] = rows[a, k - shifts[a]]`` (``+inf`` below ``shifts[a]``)."""
    width = rows.shape[1]
    index = np.arange(width)[None, :] - shifts[:, None]
    out = np.take_along_axis(rows, np.clip(index, 0, width - 1), axis=1)
    out[index < 0] = _INF
    return out


def _shift_down(rows: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """``out[a, k] = rows[a, k + shifts[a]]`` (``+inf`` past the last level)."""
    width = rows.shape[1]
    index = np.arange(width)[None, :] + shifts[:, None]
    out = np.take_along_axis(rows, np.clip(index, 0, width - 1), axis=1)
    out[index >= width] = _INF
    return out


def _diagonal(
    table: np.ndarray, first: tuple[int, int], count: int, span: int, step_axis: int
) -> np.ndarray:
    """The view ``v[a, i, :] = table[first[0] + a + (i if step_axis == 0 else 0),
    first[1] + a + (i if step_axis == 1 else 0), :]`` of shape ``(count, span, K+1)``."""
    s0, s1, s2 = table.strides
    base = table[first[0], first[1]]
    return as_strided(
        base, shape=(count, span, table.shape[2]), strides=(s0 + s1, (s0, s1)[step_axis], s2)
    )


def _bits(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Float64 values as their bit patterns: equal patterns, equal arithmetic."""
    return np.asarray(values, dtype=np.float64).view(np.int64)


def _kinds(columns: Sequence[np.ndarray]) -> np.ndarray:
    """For each step, the number of its kind: steps alike in every column share it."""
    rows = np.column_stack([np.asarray(c).reshape(len(columns[0]), -1) for c in columns])
    return np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)


class SegmentClasses:
    """Segments ``[a, b)`` grouped by the sequence of their steps' kinds.

    ``kinds[i]`` numbers step ``i``'s kind.  Two segments are in one class when
    their kinds agree step for step.  The classes of length ``L`` come from
    those of length ``L - 1`` and the kind of the next step: the pairs
    ``(class of [a, a+L-1), kind of step a+L-1)`` are numbered with one
    ``np.unique`` over every start, so building them is ``n`` sorts of at
    most ``n`` integers.  Classes are numbered by length, then by first start:
    ``first[L]`` is the number of the first class of length ``L``,
    ``starts[L]`` the first start of each (its representative), and
    ``of[b, a]`` the class of ``[a, b)`` (for ``a < b``).
    """

    def __init__(self, kinds: np.ndarray) -> None:
        n = len(kinds)
        self.n = n
        self.of = of = np.zeros((n + 1, n + 1), dtype=np.int32)  # (n + 1)^2 / 2 floats
        self.first, self.starts = [0, 0], [np.zeros(0, dtype=np.int64)]
        kinds = np.asarray(kinds, dtype=np.int64)
        spread = int(kinds.max()) + 1 if n else 1
        local = np.zeros(n + 1, dtype=np.int64)  # local[a]: class of [a, a+L-1) in its length
        for length in range(1, n + 1):
            count = n - length + 1
            keys = local[:count] * spread + kinds[length - 1 :]
            _, starts, local = np.unique(keys, return_index=True, return_inverse=True)
            local = local.reshape(-1)
            of[np.arange(length, n + 1), np.arange(count)] = self.first[length] + local
            self.starts.append(starts)
            self.first.append(self.first[length] + len(starts))
        self.count = self.first[-1]

    def rows_held(self) -> int:
        """Rows a table sharing by these classes holds: one per class, and the stacks of
        the longest classes (:class:`_Stacks`), ``n`` rows each at most."""
        return self.count + max(len(s) for s in self.starts) * self.n

    def split_work(self) -> int:
        """Cells of the split search per level: every class times its splits."""
        return sum(len(s) * (length - 1) for length, s in enumerate(self.starts))


class _Stacks:
    """For each class of the current length, the rows of its prefixes (or of its
    suffixes), shortest first, in a slot of its own: ``rows[slot[c], j - 1]`` is the
    row of class ``c``'s prefix of length ``j`` (``finite`` its first finite level).

    A class of length ``L + 1`` extends one of length ``L`` (its prefix, or its suffix):
    the first class to extend it takes its slot over, adding a row, and any other
    gets a copy.  In a chain of period ``p`` each class has one extension, so the
    stacks grow in place; a stack is read as a view, where gathering the same rows
    from the table by their classes' numbers would copy them.
    """

    def __init__(self, slots: int, n: int, width: int) -> None:
        self.rows = np.empty((slots, n, width))
        self.finite = np.empty((slots, n), dtype=np.int64)
        self.slot = np.zeros(0, dtype=np.int64)
        self.free = list(range(slots - 1, -1, -1))

    def extend(self, parents: np.ndarray, length: int) -> None:
        """Slots for the classes of ``length``, given each one's parent (its prefix or
        suffix, numbered within length ``length - 1``)."""
        if length == 1:
            self.slot = np.array([self.free.pop() for _ in parents], dtype=np.int64)
            return
        old = self.slot
        kept, first = np.unique(parents, return_index=True)
        unused = np.ones(len(old), dtype=bool)
        unused[kept] = False
        self.free.extend(old[unused].tolist())  # parents no class extends
        slot = np.empty(len(parents), dtype=np.int64)
        slot[first] = old[parents[first]]
        copies = np.ones(len(parents), dtype=bool)
        copies[first] = False
        for c in np.flatnonzero(copies):
            slot[c] = fresh = self.free.pop()
            source = old[parents[c]]
            self.rows[fresh, : length - 1] = self.rows[source, : length - 1]
            self.finite[fresh, : length - 1] = self.finite[source, : length - 1]
        self.slot = slot

    def push(self, length: int, rows: np.ndarray, finite: np.ndarray) -> None:
        """Add the rows of the classes of ``length`` themselves, now computed."""
        self.rows[self.slot, length - 1] = rows
        self.finite[self.slot, length - 1] = finite


class SplitTable:
    """``D(a, b, k)`` for every segment of a chain and every level ``0 .. budget``.

    ``state_units`` (``n + 1`` ints), ``tape_units`` (``n`` ints) and
    ``budget`` are sizes in memory units; ``forward`` and ``reverse`` the
    steps' times.  ``value(a, b, k)`` reads the table and ``row(a, b)`` gives
    every level of one segment; ``choose(a, b, k)`` is the first move of a
    best plan (``a``: tape step ``a``; ``j``: store ``x_a`` and advance to
    ``x_j``), found by redoing that cell's sums in the same order, so that it
    matches the table exactly.

    ``leaves`` (an ``(n, budget + 1)`` array), if given, is ``D(a, a+1, .)``
    for every step: a "step" is then a block of steps with a plan of its own
    (:class:`remat.schedules.Optimal` with ``blocks=``), and one-step segments
    are never chosen in (their plan is the block's).

    ``share``: whether segments alike step for step share one row (see the
    module docstring); ``None`` decides by the work it saves, :data:`SHARE_GAIN`.
    ``shared`` says which was done.
    """

    def __init__(
        self,
        state_units: Sequence[int],
        tape_units: Sequence[int],
        budget: int,
        forward: Sequence[float],
        reverse: Sequence[float],
        leaves: Sequence[np.ndarray] | None = None,
        share: bool | None = None,
    ) -> None:
        n = len(tape_units)
        K1 = int(budget) + 1
        self.n, self.budget = n, int(budget)
        self.su = su = np.asarray(state_units, dtype=np.int64)
        self.tu = tu = np.asarray(tape_units, dtype=np.int64)
        self.r = r = np.asarray(reverse, dtype=np.float64)
        f = np.asarray(forward, dtype=np.float64)
        self.tp = tp = np.concatenate(([0], np.cumsum(tu)))
        self.classes = classes = _classes(su, tu, f, r, leaves, share)
        self.shared = classes is not None
        rows = classes.count if classes is not None else (n + 1) ** 2
        # row ids(b, a) holds [a, b); only rows of segments already done are read: no fill
        self._ends = ends = np.empty((rows, K1))  # D(a, b, .)
        self._shifted = shifted = np.empty((rows, K1))  # F(a, b) + D(a, b, . + s[a])
        ids = self._ids
        if classes is not None:
            slots = max(len(s) for s in classes.starts)
            self._prefixes, self._suffixes = _Stacks(slots, n, K1), _Stacks(slots, n, K1)
            self._scratch = np.empty((n, K1))
        # R(a, b) and F(a, b), summed left to right, so that alike segments get equal sums
        reverse_sum, forward_sum = np.empty(rows), np.empty(rows)
        # the first finite level of each row (K + 1 if none): below, a split's cell is +inf
        self._finite_e = finite_e = np.empty((rows, 1), dtype=np.int64)
        self._finite_s = finite_s = np.empty((rows, 1), dtype=np.int64)
        levels = np.arange(K1)
        for length in range(1, n + 1):
            count = n - length + 1
            starts = np.arange(count) if classes is None else classes.starts[length]
            count, last = len(starts), starts + length - 1
            rows_now = ids(starts + length, starts)
            if classes is not None:  # each class's stacks: its prefixes', its suffixes' rows
                below = classes.first[length - 1]
                self._prefixes.extend(classes.of[starts + length - 1, starts] - below, length)
                self._suffixes.extend(classes.of[starts + length, starts + 1] - below, length)
            if length == 1:
                reverse_sum[rows_now], forward_sum[rows_now] = r[starts], f[starts]
            else:
                before = ids(last, starts)
                reverse_sum[rows_now] = reverse_sum[before] + r[last]
                forward_sum[rows_now] = forward_sum[before] + f[last]
            store_all = reverse_sum[rows_now][:, None]
            fits_all = levels[None, :] >= (tp[starts + length] - tp[starts])[:, None]
            if length == 1:
                if leaves is None:
                    best = np.where(fits_all, store_all, _INF)
                else:
                    best = np.asarray(leaves, dtype=np.float64)[starts]
            else:
                after_tape = ends[ids(starts + length, starts + 1)]  # D(a+1, b, .), (count, K1)
                best = r[starts, None] + _shift_up(after_tape, tu[starts])
                # levels k' + s_a >= T(a, b) store all: splits are tried below them only
                reach = tp[starts + length] - tp[starts] - su[starts]
                top = int(min(K1, max(0, reach.max())))
                lowest = np.full((count, K1), _INF)
                if classes is None:  # row ids(b, a) is [b, a] of a square: strided views
                    square = (n + 1, n + 1, K1)
                    # F + D(a, a+i, k' + s_a), and D(a+i, b, k')
                    left = _diagonal(shifted.reshape(square), (1, 0), count, length - 1, 0)
                    right = _diagonal(ends.reshape(square), (length, 1), count, length - 1, 1)
                    bound = np.maximum(
                        _diagonal(finite_s.reshape(n + 1, n + 1, 1), (1, 0), count, length - 1, 0),
                        _diagonal(
                            finite_e.reshape(n + 1, n + 1, 1), (length, 1), count, length - 1, 1
                        ),
                    )
                    lo = int(bound.min())
                    if lo < top:
                        split = np.add(left[:, :, lo:top], right[:, :, lo:top])
                        lowest[:, lo:top] = split.min(axis=1)
                elif top:
                    self._shared_splits(starts, length, top, lowest)
                best = np.minimum(best, _shift_up(lowest, su[starts]))
                best = np.where(fits_all, store_all, best)
            ends[rows_now] = best
            # what a longer segment that stores x_a and advances to x_{a+L} pays on the left
            shifted[rows_now] = left_part = (
                _shift_down(best, su[starts]) + forward_sum[rows_now][:, None]
            )
            finite_e[rows_now, 0] = _first_finite(best)
            finite_s[rows_now, 0] = _first_finite(left_part)
            if classes is not None:
                self._prefixes.push(length, left_part, finite_s[rows_now, 0])
                self._suffixes.push(length, best, finite_e[rows_now, 0])
        self.feasible = bool(ends[ids(n, 0), self.budget] < _INF) if n else True

    def _ids(self, b: np.ndarray | int, a: np.ndarray | int) -> np.ndarray:
        """The rows of the segments ``[a, b)``."""
        if self.classes is None:
            return np.asarray(b) * (self.n + 1) + a
        return self.classes.of[b, a]

    def _shared_splits(self, starts: np.ndarray, length: int, top: int, lowest: np.ndarray) -> None:
        """``lowest[c, k'] = min over i of F + D(a, a+i, k' + s_a) + D(a+i, a+L, k')`` for
        each class's representative ``a``, levels below ``top``, from the class's two
        stacks (views, no gathering): for each class, levels from where a cell can be
        finite and the splits that can be finite below ``top`` only."""
        prefixes, suffixes = self._prefixes, self._suffixes
        left, right = prefixes.slot, suffixes.slot
        # bound[c, i]: below this level the split's left or right part is +inf
        bound = np.maximum(
            prefixes.finite[left, : length - 1], suffixes.finite[right, length - 2 :: -1]
        )
        reach = bound < top
        for c in np.flatnonzero(reach.any(axis=1)):
            lo = int(bound[c].min())
            usable = np.flatnonzero(reach[c])
            i0, i1 = int(usable[0]), int(usable[-1]) + 1
            lefts = prefixes.rows[left[c], i0:i1, lo:top]  # F + D(a, a+i, k' + s_a)
            rights = suffixes.rows[right[c], : length - 1][::-1][i0:i1, lo:top]
            part = np.add(lefts, rights, out=self._scratch[: i1 - i0, : top - lo])
            np.min(part, axis=0, out=lowest[c, lo:top])

    def value(self, a: int, b: int, k: int) -> float:
        return float(self._ends[self._ids(b, a), k])

    def row(self, a: int, b: int) -> np.ndarray:
        """``D(a, b, k)`` for every level ``k`` (a view into the table)."""
        return self._ends[self._ids(b, a)]

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move of a best plan for ``[a, b)`` at level ``k`` (``b - a >= 2``)."""
        if k >= self.tp[b] - self.tp[a]:
            return a  # every tape fits: store all
        ends, ids = self._ends, self._ids
        target = ends[ids(b, a), k]
        ta, sa = int(self.tu[a]), int(self.su[a])
        if k >= ta and self.r[a] + ends[ids(b, a + 1), k - ta] == target:
            return a
        kk = k - sa
        middle = np.arange(a + 1, b)
        split = np.add(self._shifted[ids(middle, a), kk], ends[ids(b, middle), kk])
        return a + 1 + int(np.flatnonzero(split == target)[0])


SHARE_GAIN = 2  # share rows when that cuts the split search at least this many times
_SHARE_FROM = 32  # ... and the chain has at least this many steps (below, it is quick anyway)


def _first_finite(rows: np.ndarray) -> np.ndarray:
    """Each row's first finite level (its width if none)."""
    finite = np.isfinite(rows)
    return np.where(finite.any(axis=1), finite.argmax(axis=1), rows.shape[1])


def table_rows(
    state_sizes: Sequence[float] | np.ndarray,
    tape_sizes: Sequence[float] | np.ndarray,
    forward: Sequence[float] | np.ndarray,
    reverse: Sequence[float] | np.ndarray,
) -> int:
    """The rows of each of a SplitTable's two tables for this chain, sharing decided as
    the table decides it; sizes in bytes bound what any rounding to units gives (steps
    alike in bytes are alike in units)."""
    classes = _classes(state_sizes, tape_sizes, forward, reverse, None, None)
    return (len(tape_sizes) + 1) ** 2 if classes is None else classes.rows_held()


def split_cells(
    state_sizes: Sequence[float] | np.ndarray,
    tape_sizes: Sequence[float] | np.ndarray,
    forward: Sequence[float] | np.ndarray,
    reverse: Sequence[float] | np.ndarray,
) -> tuple[bool, int]:
    """Whether a SplitTable for this chain shares rows, and the cells its split search
    visits at each level (every split of every segment, or of every distinct
    segment where rows are shared): its time is about that times the levels
    times 1-2 ns."""
    classes = _classes(state_sizes, tape_sizes, forward, reverse, None, None)
    n = len(tape_sizes)
    if classes is None:
        return False, (n - 1) * n * (n + 1) // 6
    return True, classes.split_work()


def _classes(
    su: Sequence[float] | np.ndarray,
    tu: Sequence[float] | np.ndarray,
    f: Sequence[float] | np.ndarray,
    r: Sequence[float] | np.ndarray,
    leaves: Sequence[np.ndarray] | None,
    share: bool | None,
) -> SegmentClasses | None:
    """The segment classes a SplitTable shares rows by, or None for a row a segment."""
    n = len(tu)
    if share is False or not n or (share is None and n < _SHARE_FROM):
        return None
    columns = [_bits(f), _bits(r), _bits(su[:n]), _bits(tu)]
    if leaves is not None:
        columns.append(_bits(np.asarray(leaves, dtype=np.float64)))
    classes = SegmentClasses(_kinds(columns))
    unshared = (n - 1) * n * (n + 1) // 6  # sum over lengths of starts times splits
    if share is None and (
        classes.split_work() * SHARE_GAIN > unshared or 2 * classes.rows_held() > (n + 1) ** 2
    ):
        return None
    return classes


class LengthTable:
    """The programme for a chain of identical steps: ``D_L[k]``, whatever the start.

    Steps of time ``forward`` / ``reverse`` and sizes ``state_units`` /
    ``tape_units``:  ``D_L[k] = min(r + D_{L-1}[k - t], min over 0 < i < L of
    (i f + D_i[k]) + D_{L-i}[k - s])``, with ``D_L[k] = L r`` from ``k = L t``
    on.  One NumPy expression per length over every split and level:
    ``O(n^2 K / 2)`` additions.
    """

    def __init__(
        self,
        steps: int,
        state_units: int,
        tape_units: int,
        budget: int,
        forward: float,
        reverse: float,
    ) -> None:
        n, K1 = int(steps), int(budget) + 1
        self.n, self.budget = n, int(budget)
        self.s, self.t = s, t = int(state_units), int(tape_units)
        self.r, self.f = r, f = float(reverse), float(forward)
        self.values = values = np.full((n + 1, K1), _INF)  # values[L, k] = D_L[k]
        self.advanced = advanced = np.full((n + 1, K1), _INF)  # L f + D_L[k]
        values[0] = advanced[0] = 0.0
        levels = np.arange(K1)
        for length in range(1, n + 1):
            best = np.full(K1, _INF)
            if t < K1:
                best[t:] = r + values[length - 1, : K1 - t]
            if length > 1 and s < K1:
                split = advanced[1:length, s:] + values[length - 1 : 0 : -1, : K1 - s]
                best[s:] = np.minimum(best[s:], split.min(axis=0))
            best[levels >= length * t] = length * r
            values[length] = best
            advanced[length] = length * f + best
        self.feasible = bool(values[n, self.budget] < _INF)

    def value(self, length: int, k: int) -> float:
        return float(self.values[length, k])

    def choose(self, length: int, k: int) -> int:
        """The first move for ``length`` steps at level ``k``: 0 (tape) or the advance ``i``."""
        if k >= length * self.t:
            return 0
        target = self.values[length, k]
        if k >= self.t and self.r + self.values[length - 1, k - self.t] == target:
            return 0
        kk = k - self.s
        split = self.advanced[1:length, k] + self.values[length - 1 : 0 : -1, kk]
        return 1 + int(np.flatnonzero(split == target)[0])


def least_peaks(
    state_bytes: Sequence[float],
    tape_bytes: Sequence[float],
    leaves: Sequence[float] | None = None,
) -> float:
    """The least peak bytes of any split schedule (the same programme for the peak).

    ``P(a, a+1) = t[a]`` and ``P(a, b) = min(t[a] + P(a+1, b), min over a < j < b
    of max(s[a] + P(j, b), P(a, j)))``, by length, every split of every segment
    of one length in one NumPy expression.  Sizes are exact in float64 up to
    2**53 bytes.  ``leaves``, if given, are the ``P(a, a+1)`` of steps that are
    blocks with plans of their own.
    """
    n = len(tape_bytes)
    s = np.asarray(state_bytes, dtype=np.float64)
    t = np.asarray(tape_bytes, dtype=np.float64)
    ends = np.zeros((n + 1, n + 1, 1))  # ends[b, a, 0] = P(a, b)
    for length in range(1, n + 1):
        count = n - length + 1
        starts = np.arange(count)
        best = t[:count] + ends[starts + length, starts + 1, 0]
        if length == 1 and leaves is not None:
            best = np.asarray(leaves, dtype=np.float64)
        if length > 1:
            left = _diagonal(ends, (1, 0), count, length - 1, 0)[:, :, 0]  # P(a, a+i)
            right = _diagonal(ends, (length, 1), count, length - 1, 1)[:, :, 0]  # P(a+i, b)
            best = np.minimum(best, np.maximum(s[:count, None] + right, left).min(axis=1))
        ends[starts + length, starts, 0] = best
    return ends[n, 0, 0]
