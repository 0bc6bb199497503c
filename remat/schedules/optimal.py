"""The fastest schedule for a given chain under a byte budget (heterogeneous chains).

Problem.  Given a :class:`~.costs.ChainCosts` and a budget of ``memory`` bytes,
find the schedule of least total time (``forward_time`` for every untaped
evaluation, ``reverse_time`` for every taped one) whose bytes held (states in
slots plus tapes kept, :mod:`.costs`) never exceed ``memory``.

Result implemented.  The dynamic programme of Beaumont, Eyraud-Dubois,
Herrmann, Joly and Shilova, "Optimal checkpointing for heterogeneous chains:
how to train deep neural networks with limited memory" (rotor), adapted to
this vocabulary: a checkpoint is either a stored state or a stored tape, as in
mixed checkpointing.  To reverse the segment ``[a, b)`` with ``m`` bytes,
``x_a`` being current or in a slot (its bytes counted in ``m``):

    D(a, a+1, m) = reverse_time[a]                              if tape_bytes[a] <= m
    D(a, b, m)   = min( reverse_time[a] + D(a+1, b, m - tape_bytes[a]),
                        min over a < j < b of
                            F(a, j) + D(j, b, m - state_bytes[a]) + D(a, j, m) )

where ``F(a, j)`` is the forward time of steps ``a .. j-1`` (infeasible terms
are infinite).  The first option tapes step ``a`` and keeps its tape (``x_a``'s
slot, if any, is freed first: the tape holds ``x_a``); the second keeps
``x_a``, advances to ``x_j``, reverses the right part, then the left part
(see :mod:`.splits`, which turns the choices into actions).

Optimality, and its assumptions.  ``D(0, n, memory)`` is the least time over
every schedule of the vocabulary (without ``Discard``) that obeys *weak
memory persistence*: a stored state ``x_p`` is released only when step ``p``
is taped from it, so a segment's checkpoints serve that segment alone.  This
is the class in which rotor's programme is optimal; without the restriction
the problem is NP-hard for rotor's model, and schedules that store a small
state, use it for the steps to its right and drop it early can be faster
(tests/test_schedules_optimal.py searches both classes exhaustively on small
chains).  Times are additive and sizes are as in :mod:`.costs` (an array
shared by a slot and a tape counts twice, so the executor holds at most what
is planned).  With ``reverse_time >= forward_time``, dropping tapes unused
(``Discard``) never helps, so the vocabulary's only other action is not
needed.

Discretisation.  The programme runs over integer memory levels.  When all
sizes are integers whose greatest common divisor ``g`` gives at most
``levels`` levels (``memory // g``), the unit is ``g`` and the plan is exactly
optimal.  Otherwise the unit is ``u = memory / levels`` and every size is
rounded *up* to a whole number of units, so a plan that fits the rounded sizes
fits the true ones: the true peak never exceeds the budget.  The price is
optimality: each item held is overestimated by less than ``u``, so a plan that
holds at most ``h`` items (slots plus tapes) at once and peaks at no more than
``memory - h * u`` true bytes is within the rounded budget, and the result is
at least as fast as it.  With the default 128 levels and ``h = 10``: as fast
as the best plan for a budget 8% smaller, at worst.  A budget
between the true minimum and the rounded one is planned again with more
levels (enough for a unit of a third of the slack, at least twice as many,
at most 2**14).

Cost of planning.  ``O(n^3 levels / 6)`` additions and ``O(n^2 levels)``
memory for a heterogeneous chain: on this 2-core machine, about 0.9 s for
``n = 100`` at 128 levels, 8 s for ``n = 200``; the cubic term is the search
over every split of every segment, which vectorising over levels does not
remove (``n = 1000`` would take of the order of 15 minutes).  When all steps
are alike (``tape.loop``), segments differ only by their length and the
programme is ``O(n^2 levels / 2)``: about 2.7 s for ``n = 1000`` at 128
levels.  Splits that cannot beat the best time found so far (a split that
advances over ``F`` seconds of steps costs at least ``F`` plus every step's
``reverse_time``) are skipped.  A budget that fits every tape at once needs no
search (store all).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from itertools import repeat
from math import ceil, gcd
from numbers import Integral, Real
from operator import add
from typing import Any, TypeVar

from .actions import Action, Free, Snapshot
from .costs import ChainCosts
from .simulate import simulate
from .splits import split_actions

_INF = float("inf")
T = TypeVar("T")
_MAX_LEVELS = 1 << 14  # a budget lost to rounding is planned again with up to this many


class Optimal:
    """The least-time schedule for ``costs`` whose peak bytes held stay within ``memory``.

    ``levels`` bounds the memory levels of the dynamic programme (see the
    module docstring for the discretisation and its cost).  After
    construction, ``predicted_time`` and ``predicted_peak_bytes`` are the
    plan's time and peak under the model of :mod:`.costs` (what
    :func:`.simulate` reports for it), ``snapshots`` the most slots it uses at
    once, and ``exact`` whether no size had to be rounded.

    >>> from remat.schedules import ChainCosts, Optimal, simulate
    >>> costs = ChainCosts.uniform(20, 1.0, 2.0, 100, 300)
    >>> plan = Optimal(costs, memory=1500)
    >>> plan.predicted_peak_bytes <= 1500, plan.predicted_time, simulate(plan, costs=costs).time
    (True, 57.0, 57.0)
    """

    def __init__(self, costs: ChainCosts, memory: float, levels: int = 128) -> None:
        if not isinstance(costs, ChainCosts):
            raise ValueError(f"Optimal: costs must be a ChainCosts, got {costs!r}")
        if isinstance(memory, bool) or not isinstance(memory, Real) or not memory >= 0:
            raise ValueError(f"Optimal: memory must be a number of bytes >= 0, got {memory!r}")
        if isinstance(levels, bool) or not isinstance(levels, Integral) or levels < 1:
            raise ValueError(f"Optimal: levels must be an integer >= 1, got {levels!r}")
        self.costs = costs
        self.memory: float = memory
        self.steps: int = costs.steps
        self._plan: _Plan | _UniformPlan | None = None  # None: store all
        if sum(costs.tape_bytes) > memory:
            need = minimum_bytes(costs)
            if memory < need:
                raise ValueError(
                    f"Optimal: memory={memory!r} bytes is too small for this chain: a valid "
                    f"schedule needs at least {need!r} bytes"
                )
            levels = int(levels)
            limit = max(levels, _MAX_LEVELS)
            kind: type[_Plan] | type[_UniformPlan] = _UniformPlan if _uniform(costs) else _Plan
            while True:
                plan = kind(costs, memory, levels)
                if plan.feasible or plan.exact or levels >= limit:
                    break
                # the rounding ate the slack above the minimum: a unit of a third of the
                # slack lets a plan of three items (a state, a tape, the step reversed) fit;
                # with no slack, only exact sizes can (integers, at their gcd as the unit)
                slack = memory - need
                finer = ceil(3 * memory / slack) if slack else limit
                levels = min(limit, max(2 * levels, finer))
            if not plan.feasible:
                raise ValueError(
                    f"Optimal: memory={memory!r} bytes is within rounding of the minimum, "
                    f"{need!r} bytes, and {levels} levels do not resolve it; give a few more "
                    "bytes or more levels"
                )
            self._plan = plan
        self.levels = levels
        self.exact = self._plan is None or self._plan.exact
        # (a, b, level) -> first move, for the segments the plan visits
        self._choices: dict[tuple[int, int, int], int] = {}
        self.snapshots = _peak_slots(self._actions(self._record))
        if self._plan is not None:
            self._plan.release()  # the table is O(n^2 levels); the choices are all it needs
        result = simulate(self, costs)
        self.predicted_time = result.time
        self.predicted_peak_bytes = result.peak_bytes

    def __repr__(self) -> str:
        return f"Optimal(steps={self.steps}, memory={self.memory!r})"

    def __iter__(self) -> Iterator[Action]:
        return self._actions(self._replay)

    def _actions(self, choose: Callable[[int, int, int], int]) -> Iterator[Action]:
        plan = self._plan
        if plan is None:
            return split_actions(self.steps, 0, _tape, _same, _same)
        return split_actions(self.steps, plan.budget, choose, plan.after_tape, plan.after_store)

    def _record(self, a: int, b: int, level: int) -> int:
        assert self._plan is not None  # _actions calls it only for a plan
        move = self._choices[a, b, level] = self._plan.choose(a, b, level)
        return move

    def _replay(self, a: int, b: int, level: int) -> int:
        return self._choices[a, b, level]


def _tape(a: int, b: int, budget: object) -> int:
    return a


def _same(a: int, budget: T) -> T:
    return budget


def _peak_slots(actions: Iterable[Action]) -> int:
    used = peak = 0
    for action in actions:
        kind = type(action)
        if kind is Snapshot:
            used += 1
            peak = max(peak, used)
        elif kind is Free:
            used -= 1
    return peak


def minimum_bytes(costs: ChainCosts) -> float:
    """The least peak, in bytes, of any schedule in Optimal's class for ``costs``.

    The same recursion as the time, minimising the peak instead:
    ``P(a, a+1) = tape_bytes[a]`` and ``P(a, b) = min(tape_bytes[a] + P(a+1, b),
    min over a < j < b of max(state_bytes[a] + P(j, b), P(a, j)))``: every
    split is tried, in C loops, ``O(n^3 / 6)`` (under a second for ``n = 200``).
    When all steps are alike, ``P`` depends on the length only and grows with
    it (drop a plan's last step: what is left reverses one step less and
    holds no more), so in ``max(s + P[L - i], P[i])`` the first term falls and
    the second grows with ``i`` and the best split is found by bisection:
    ``O(n log n)``.

    >>> from remat.schedules import ChainCosts, minimum_bytes
    >>> minimum_bytes(ChainCosts.uniform(20, 1.0, 2.0, 100, 300))
    400
    """
    n = costs.steps
    s, t = costs.state_bytes, costs.tape_bytes
    if _uniform(costs):  # P depends on the length only: P[L]
        P: list[float] = [0, t[0]]
        for length in range(2, n + 1):
            j = _crossing(1, length - 1, lambda j: s[0] + P[length - j] > P[j])
            candidates = (max(s[0] + P[length - i], P[i]) for i in (j - 1, j) if 0 < i < length)
            P.append(min(t[0] + P[length - 1], *candidates))
        return P[n]
    table: list[list[float]] = [[0] * (n + 1) for _ in range(n + 1)]  # P(a, b); P(b, b) = 0
    ends: list[list[float]] = [[0] * (n + 1) for _ in range(n + 1)]  # ends[b][j] = P(j, b)
    for length in range(1, n + 1):
        for a in range(0, n - length + 1):
            b = a + length
            best = t[a] + table[a + 1][b]
            if length > 1:
                splits = map(max, map(add, repeat(s[a]), ends[b][a + 1 : b]), table[a][a + 1 : b])
                best = min(best, min(splits))
            table[a][b] = ends[b][a] = best
    return table[0][n]


def _crossing(lo: int, hi: int, before: Callable[[int], bool]) -> int:
    """The first ``j`` in ``[lo, hi]`` where ``before(j)`` is false (``hi`` if none), by bisection.

    ``before`` must hold on a prefix of the range: "the falling term is still
    above the growing one".
    """
    while lo < hi:
        mid = (lo + hi) // 2
        if before(mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


class _Plan:
    """The dynamic programme's table over integer memory levels, and the choices it implies."""

    def __init__(self, costs: ChainCosts, memory: float, levels: int) -> None:
        n = costs.steps
        self.exact, budget, su, tu = _units(costs, memory, levels)
        self.budget, self.su, self.tu = budget, su, tu
        self.r = r = costs.reverse_time
        self.fp = fp = _prefix(costs.forward_time)
        rp = _prefix(costs.reverse_time)
        self.tp = tp = _prefix(tu)
        K = budget
        # D[a][b]: times for levels 0..K; lo[a][b]: the first feasible level (K + 1: none)
        D: list[list[Any]] = [[None] * (n + 1) for _ in range(n)]
        lo = [[K + 1] * (n + 1) for _ in range(n + 1)]
        for b in range(n + 1):
            lo[b][b] = 0
        for length in range(1, n + 1):
            for a in range(n - length + 1):
                b = a + length
                hi = min(K + 1, tp[b] - tp[a])  # from level tp[b] - tp[a] on, store all
                row = [_INF] * hi + [rp[b] - rp[a]] * (K + 1 - hi)
                first = hi if hi <= K else K + 1
                if length > 1:
                    ta, sa, ra = tu[a], su[a], r[a]
                    right = D[a + 1][b]
                    k0 = ta + lo[a + 1][b]
                    if k0 < hi:
                        row[k0:hi] = [ra + y for y in right[k0 - ta : hi - ta]]
                        first = min(first, k0)
                    left_lo, base, floor = lo[a], fp[a], rp[b] - rp[a]
                    top = hi  # levels >= top cannot be improved by any j left to try
                    for j in range(a + 1, b):
                        fa = fp[j] - base
                        # every time here is >= fa + floor (each step is taped once): find
                        # the first level the row already reaches that bound, by bisection
                        # (rows never grow with the level); fa only grows with j.
                        bound, k1, k2 = fa + floor, min(first, top), top
                        while k1 < k2:
                            mid = (k1 + k2) // 2
                            if row[mid] <= bound:
                                k2 = mid
                            else:
                                k1 = mid + 1
                        top = k1
                        if top <= sa:
                            break  # no level left that a store move could improve
                        k0 = max(sa + lo[j][b], left_lo[j])
                        if k0 >= top:
                            continue
                        left, right = D[a][j], D[j][b]
                        row[k0:top] = [
                            v if v <= (w := fa + x + y) else w
                            for v, x, y in zip(row[k0:top], left[k0:top], right[k0 - sa : top - sa])
                        ]
                        if k0 < first:
                            first = k0
                D[a][b] = array("d", row)
                lo[a][b] = first
        self.D, self.lo = D, lo
        self.feasible = lo[0][n] <= K

    def release(self) -> None:
        """Drop the table once the plan's choices are recorded."""
        self.D, self.lo = [], []  # a choose() after this fails loudly (IndexError)

    def after_tape(self, a: int, budget: int) -> int:
        return budget - self.tu[a]

    def after_store(self, a: int, budget: int) -> int:
        return budget - self.su[a]

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move the table says is best for ``[a, b)`` at level ``k``."""
        if k >= self.tp[b] - self.tp[a]:
            return a  # every tape fits: store all
        D, fp, ta, sa = self.D, self.fp, self.tu[a], self.su[a]
        target = D[a][b][k]
        best, choice = _INF, None
        if k >= ta:
            best, choice = self.r[a] + D[a + 1][b][k - ta], a
            if best == target:
                return a
        if k >= sa:
            base = fp[a]
            for j in range(a + 1, b):
                value = (fp[j] - base) + D[a][j][k] + D[j][b][k - sa]
                if value == target:
                    return j
                if value < best:
                    best, choice = value, j
        assert choice is not None  # the level is feasible, so some move reaches it
        return choice


class _UniformPlan:
    """The same programme for a chain of identical steps, where segments differ only by length.

    ``D_L[k]`` stands for ``D(a, a + L, k)`` whatever ``a``, the splits are
    ``D_L = min(r + D_{L-1}[k - t], min over i of (i f + D_i[k]) + D_{L-i}[k - s])``,
    and the work is ``O(n^2 levels / 2)`` additions instead of ``O(n^3 levels / 6)``.
    A split that advances ``i`` steps costs at least ``i f + L r`` (every step is
    taped once), so splits are only tried while that bound beats the best so far.
    """

    def __init__(self, costs: ChainCosts, memory: float, levels: int) -> None:
        n = costs.steps
        self.exact, budget, su, tu = _units(costs, memory, levels)
        self.budget = K = budget
        self.s, self.t = s, t = su[0], tu[0]
        self.r = r = costs.reverse_time[0]
        f = costs.forward_time[0]
        # cols[k][L] = D_L[k]; adv[k][i] = i f + D_i[k] (a left part and the advance over it)
        self.cols = cols = [[0.0] for _ in range(K + 1)]
        self.adv = adv = [[0.0] for _ in range(K + 1)]
        first = [0]  # first[L]: the lowest feasible level for L steps (K + 1: none)
        for length in range(1, n + 1):
            hi = min(K + 1, length * t)  # from level length * t on, store all
            floor = length * r
            lowest = hi if hi <= K else K + 1
            if length > 1:
                lowest = min(
                    lowest,
                    t + first[length - 1],
                    *(max(s + first[length - i], first[i]) for i in range(1, length)),
                )
            for k in range(K + 1):
                if k < lowest:
                    value = _INF
                elif k >= hi:
                    value = floor
                else:
                    value = r + cols[k - t][length - 1] if k >= t else _INF
                    if k >= s:
                        most = length - 1  # the longest advance worth trying
                        if f > 0 and value < _INF:
                            most = min(most, int((value - floor) / f))
                        if most >= 1:
                            split = min(
                                map(
                                    add,
                                    adv[k][1 : most + 1],
                                    cols[k - s][length - 1 : length - 1 - most : -1],
                                )
                            )
                            if split < value:
                                value = split
                cols[k].append(value)
                adv[k].append(length * f + value)
            first.append(lowest)
        self.feasible = first[n] <= K

    def release(self) -> None:
        """Drop the table once the plan's choices are recorded."""
        self.cols, self.adv = [], []  # a choose() after this fails loudly (IndexError)

    def after_tape(self, a: int, budget: int) -> int:
        return budget - self.t

    def after_store(self, a: int, budget: int) -> int:
        return budget - self.s

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move the table says is best for ``b - a`` steps at level ``k``."""
        length, s, t = b - a, self.s, self.t
        if k >= length * t:
            return a
        cols, target = self.cols, self.cols[k][length]
        best, choice = _INF, None
        if k >= t:
            best, choice = self.r + cols[k - t][length - 1], a
            if best == target:
                return a
        if k >= s:
            adv, right = self.adv[k], cols[k - s]
            for i in range(1, length):
                value = adv[i] + right[length - i]
                if value == target:
                    return a + i
                if value < best:
                    best, choice = value, a + i
        assert choice is not None  # the level is feasible, so some move reaches it
        return choice


def _uniform(costs: ChainCosts) -> bool:
    """Whether every step costs the same (the state after the last one is never stored)."""
    n = costs.steps
    return all(
        len(set(values)) == 1
        for values in (
            costs.forward_time,
            costs.reverse_time,
            costs.state_bytes[:n],
            costs.tape_bytes,
        )
    )


def _units(costs: ChainCosts, memory: float, levels: int) -> tuple[bool, int, list[int], list[int]]:
    """``(exact, budget, state units, tape units)``: the sizes on the programme's levels.

    Exact when every size is an integer and their gcd ``g`` gives at most
    ``levels`` levels; otherwise the unit is ``memory / levels`` and sizes are
    rounded up (exact rational arithmetic, so the rounding never goes down).
    """
    sizes = (*costs.state_bytes, *costs.tape_bytes)
    unit = 0
    if all(isinstance(x, Integral) for x in (*sizes, memory)):
        for x in sizes:
            unit = gcd(unit, int(x))
        if unit and memory // unit <= levels:
            su = [int(x) // unit for x in costs.state_bytes]
            tu = [int(x) // unit for x in costs.tape_bytes]
            return True, int(memory) // unit, su, tu
    scale = Fraction(levels) / Fraction(memory) if memory else Fraction(0)
    su = [ceil(Fraction(x) * scale) for x in costs.state_bytes]
    tu = [ceil(Fraction(x) * scale) for x in costs.tape_bytes]
    return not any(sizes), levels, su, tu  # all sizes zero: nothing was rounded


def _prefix(values: Iterable[Any]) -> list[Any]:  # of ints (sizes) or floats (times)
    total: Any = 0
    out = [total]
    for v in values:
        total = total + v
        out.append(total)
    return out
