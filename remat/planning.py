"""The number-crunching of :class:`remat.schedules.Optimal`: its tables, built with NumPy.

Why a module of its own.  Schedules are pure data: they hold no arrays and
never touch the backend (a plan is made on the host, whatever device the
steps run on).  The dynamic programme behind ``Optimal`` is, however, a few
hundred million additions and minima over small integers and floats, which
plain Python does at tens of nanoseconds each and NumPy at about one.  So the
arithmetic lives here: numbers in (Python lists of sizes and times), tables
out (NumPy float64 arrays on the CPU, never the backend's device arrays), and
nothing of remat imported.  ``schedules.optimal`` imports this module and
nothing else outside ``schedules``; the plans it yields stay plain actions.

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
``2 (n+1)^2 (K+1)`` floats (``K`` the budget in units).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

_INF = np.inf


def _prefix(values: Sequence[float]) -> np.ndarray:
    return np.concatenate(([0.0], np.cumsum(np.asarray(values, dtype=np.float64))))


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


class SplitTable:
    """``D(a, b, k)`` for every segment of a chain and every level ``0 .. budget``.

    ``state_units`` (``n + 1`` ints), ``tape_units`` (``n`` ints) and
    ``budget`` are sizes in memory units; ``forward`` and ``reverse`` the
    steps' times.  ``value(a, b, k)`` reads the table; ``choose(a, b, k)`` is
    the first move of a best plan (``a``: tape step ``a``; ``j``: store
    ``x_a`` and advance to ``x_j``), found by redoing that cell's sums in the
    same order, so that it matches the table exactly.

    ``leaves`` (an ``(n, budget + 1)`` array), if given, is ``D(a, a+1, .)``
    for every step: a "step" is then a block of steps with a plan of its own
    (:class:`remat.schedules.Optimal` with ``blocks=``), and one-step segments
    are never chosen in (their plan is the block's).
    """

    def __init__(
        self,
        state_units: Sequence[int],
        tape_units: Sequence[int],
        budget: int,
        forward: Sequence[float],
        reverse: Sequence[float],
        leaves: Sequence[np.ndarray] | None = None,
    ) -> None:
        n = len(tape_units)
        K1 = int(budget) + 1
        self.n, self.budget = n, int(budget)
        self.su = su = np.asarray(state_units, dtype=np.int64)
        self.tu = tu = np.asarray(tape_units, dtype=np.int64)
        self.r = r = np.asarray(reverse, dtype=np.float64)
        self.fp = fp = _prefix(forward)
        rp, tp = _prefix(reverse), np.concatenate(([0], np.cumsum(tu)))
        self.tp = tp
        # only cells of segments already done are read (a < b, shorter first): no fill
        ends = np.empty((n + 1, n + 1, K1))
        shifted = np.empty((n + 1, n + 1, K1))
        levels = np.arange(K1)
        for length in range(1, n + 1):
            count = n - length + 1
            starts = np.arange(count)
            store_all = (rp[starts + length] - rp[starts])[:, None]
            fits_all = levels[None, :] >= (tp[starts + length] - tp[starts])[:, None]
            if length == 1:
                best = np.where(fits_all, store_all, _INF) if leaves is None else np.array(leaves)
            else:
                after_tape = ends[starts + length, starts + 1]  # D(a+1, b, .), (count, K1)
                best = r[:count, None] + _shift_up(after_tape, tu[:count])
                # levels k' + s_a >= T(a, b) store all: splits are tried below them only
                top = int(min(K1, max(0, (tp[starts + length] - tp[starts] - su[:count]).max())))
                left = _diagonal(shifted, (1, 0), count, length - 1, 0)  # F + D(a, a+i, k'+s_a)
                right = _diagonal(ends, (length, 1), count, length - 1, 1)  # D(a+i, b, k')
                split = np.add(left[:, :, :top], right[:, :, :top])
                lowest = np.full((count, K1), _INF)
                lowest[:, :top] = split.min(axis=1)
                best = np.minimum(best, _shift_up(lowest, su[:count]))
                best = np.where(fits_all, store_all, best)
            ends[starts + length, starts] = best
            # what a longer segment that stores x_a and advances to x_{a+L} pays on the left
            advance = (fp[starts + length] - fp[:count])[:, None]
            shifted[starts + length, starts] = _shift_down(best, su[:count]) + advance
        self.ends, self.shifted = ends, shifted
        self.feasible = bool(ends[n, 0, self.budget] < _INF)

    def value(self, a: int, b: int, k: int) -> float:
        return float(self.ends[b, a, k])

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move of a best plan for ``[a, b)`` at level ``k`` (``b - a >= 2``)."""
        if k >= self.tp[b] - self.tp[a]:
            return a  # every tape fits: store all
        target = self.ends[b, a, k]
        ta, sa = int(self.tu[a]), int(self.su[a])
        if k >= ta and self.r[a] + self.ends[b, a + 1, k - ta] == target:
            return a
        kk = k - sa
        split = np.add(self.shifted[a + 1 : b, a, kk], self.ends[b, a + 1 : b, kk])
        return a + 1 + int(np.flatnonzero(split == target)[0])


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
