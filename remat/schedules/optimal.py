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
(tests/schedules/test_schedules_optimal.py searches both classes exhaustively on small
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
at most 2**14, and for a heterogeneous chain no more than keep its two tables
within 2**25 floats).

Long chains: alike segments share rows.  ``D(a, b, .)`` depends only on the
segment's steps, so segments alike step for step (same times, same sizes
in units, in the same order) have the same row, and the table keeps one per
distinct segment (:mod:`remat.schedules.planning`; the values and the choices are the
same, bit for bit, as with a row a segment).  A chain that cycles through
``p`` kinds of layers (a transformer's blocks, say) has about ``p n``
distinct segments and a split search of ``p n^2 levels / 2``: 1000 steps
plan exactly in 0.2-0.4 s for ``p = 2``, 0.7-1.1 s for ``p = 8``, 1.1-2 s
for ``p = 16`` (``python -m benchmarks planning``).  It is chosen on its own
where it saves work.  Measured costs always differ a little from step to
step, so ``Tape(memory=)`` pools the times of steps that are one layer
repeated (:func:`remat.memory.pool_times`) to gain from it.  A chain of a
few stages of identical layers has almost as many distinct segments as
segments (most span a stage boundary, at every offset), and gains nothing.

Long chains: ``blocks=``.  No exact programme of this kind plans 1000
heterogeneous steps whose costs all differ in seconds (``n^3 levels / 6``
is 2e10 at 128 levels; pruning splits by the bound "a split that advances
over ``F`` costs at least ``F`` plus every reverse time" removes under 1% of
them at twice the least memory, 30% at twenty times, measured on a 150-step
chain; and the best split does not move monotonically with the segment's
end, which rules out Knuth's speed-up: 105 counterexamples among 25717
cells of 60 random small chains).  So ``Optimal(costs, memory, blocks=B)``
groups the steps into ``B`` blocks of consecutive steps, gives each block
its own exact table, and runs the programme over the blocks, a one-block
segment costing what the block's table says.  The plan is optimal among
schedules that store states only at block starts or inside the block being
reversed, so the blocks start at small states: each boundary moves from its
even place to the smallest state within half a block (:func:`block_starts`;
or ``blocks=`` is the list of starts).  Near the least memory that matters
most: at 1.5 times it, on 150- and 250-step chains, blocks of 5 steps gave
plans 12% slower than exact with even blocks and 2.5-2.8% with blocks at
small states (3 times: 7-8% and 2.5%; ``python -m benchmarks planning``).
On a chain cycling through 5 widths, blocks of 5 steps start at the same
phase either way, and at 1.2 times the least memory they are 12-19% slower
than exact; blocks of 2 steps, at small states, 1-1.4%.
Its least peak (:func:`block_minimum_bytes`) can be above
:func:`minimum_bytes`, and a budget under it raises a ValueError that gives
both.  Work: ``B^3 levels / 6`` plus ``n (n / B)^2 levels / 6``.

Cost of planning.  ``O(n^3 levels / 6)`` additions and minima and
``2 (n+1)^2 (levels+1)`` floats of memory for a heterogeneous chain whose
steps all differ (with shared rows, the distinct segments' splits and rows
instead); the arithmetic is NumPy's (:mod:`remat.schedules.planning`: one expression
over every start, split and level of a segment length, so Python loops
``n`` times; :mod:`.levels`: the rounding, and the three plans over the
tables), while this module keeps the recursion and the actions.  On this
2-core machine, at 128 levels, one core's CPU time: about
0.06 s for ``n = 100``, 0.3-0.4 s for ``n = 200``, 0.6-0.9 s for ``n = 250``
(about 40 ns times ``n^3``; ``n = 1000`` would need 2 GB of tables and, by
the cube, about 40 s; beyond 2**27 floats, 1 GiB, the tables are refused
with a ValueError that suggests ``blocks=``: the cubic term is the search
over every split of every segment, which no vectorising removes;
:mod:`remat.memory` plans long chains over blocks).  Levels from a
segment's store-all threshold on are filled in without a search, and
levels below where any split can be finite are skipped.  When all steps
are alike (``tape.loop``), segments differ only by their length and the
programme is ``O(n^2 levels / 2)``: 0.03-0.1 s for ``n = 1000``, 4-20 s
for ``n = 10000`` (``blocks=200``: 1-2 s, blocks of the same costs sharing
one table).  A budget that fits every tape at once needs no search (store
all).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from math import ceil
from numbers import Integral, Real
from typing import TypeVar

from .actions import Action, Free, Snapshot
from .costs import ChainCosts
from .levels import BlockPlan, ExactPlan, UniformPlan, sums
from .planning import least_peaks, table_rows
from .simulate import simulate
from .splits import split_actions

_INF = float("inf")
T = TypeVar("T")
_MAX_LEVELS = 1 << 14  # a budget lost to rounding is planned again with up to this many
_TABLE_FLOATS = 1 << 25  # ... but a heterogeneous table grows no larger than this (256 MB)
_EXACT_FLOATS = 1 << 27  # the largest tables planned at all (1 GiB): beyond, blocks= is needed


def _table_levels(rows: int) -> int:
    """The most levels whose two tables of ``rows`` rows stay within _TABLE_FLOATS."""
    return max(1, min(_MAX_LEVELS, _TABLE_FLOATS // (2 * rows) - 1))


def _given_starts(blocks: object, steps: int) -> list[int] | None:
    """``blocks`` as a list of block starts if it is one (checked), else None (an integer
    number of blocks, checked, or None)."""
    if blocks is None:
        return None
    if isinstance(blocks, Integral) and not isinstance(blocks, bool):
        if blocks < 1:
            raise ValueError(f"Optimal: blocks must be None or an integer >= 1, got {blocks!r}")
        return None
    if not isinstance(blocks, Sequence) or isinstance(blocks, str):
        raise ValueError(
            "Optimal: blocks must be None, an integer >= 1 or the list of block starts, "
            f"got {blocks!r}"
        )
    starts = list(blocks)
    valid = all(isinstance(a, Integral) and not isinstance(a, bool) for a in starts)
    if (
        not valid
        or len(starts) < 2
        or starts[0] != 0
        or starts[-1] != steps
        or any(a >= b for a, b in zip(starts, starts[1:]))
    ):
        raise ValueError(
            f"Optimal: blocks as block starts must rise from 0 to the {steps} steps, one "
            f"integer a block and the end (block_starts makes them), got {blocks!r}"
        )
    return [int(a) for a in starts]


class Optimal:
    """The least-time schedule for ``costs`` whose peak bytes held stay within ``memory``.

    ``levels`` bounds the memory levels of the dynamic programme (see the
    module docstring for the discretisation and its cost); ``blocks``, if an
    integer below the number of steps, plans over that many blocks of steps
    (optimal in a smaller class, much faster: the module docstring says
    which), placed by :func:`block_starts` from the states' sizes; or
    ``blocks`` is the list of the blocks' starts, from 0 to the number of
    steps.  After construction, ``predicted_time`` and ``predicted_peak_bytes`` are the
    plan's time and peak under the model of :mod:`.costs` (what
    :func:`.simulate` reports for it), ``snapshots`` the most slots it uses at
    once, ``exact`` whether no size had to be rounded, and ``block_starts``
    where the blocks start (:func:`block_starts` with the states' sizes), or
    None without blocks.

    >>> from remat.schedules import ChainCosts, Optimal, simulate
    >>> costs = ChainCosts.uniform(20, 1.0, 2.0, 100, 300)
    >>> plan = Optimal(costs, memory=1500)
    >>> plan.predicted_peak_bytes <= 1500, plan.predicted_time, simulate(plan, costs=costs).time
    (True, 57.0, 57.0)
    """

    def __init__(
        self,
        costs: ChainCosts,
        memory: float,
        levels: int = 128,
        blocks: int | Sequence[int] | None = None,
    ) -> None:
        if not isinstance(costs, ChainCosts):
            raise ValueError(f"Optimal: costs must be a ChainCosts, got {costs!r}")
        if isinstance(memory, bool) or not isinstance(memory, Real) or not memory >= 0:
            raise ValueError(f"Optimal: memory must be a number of bytes >= 0, got {memory!r}")
        if isinstance(levels, bool) or not isinstance(levels, Integral) or levels < 1:
            raise ValueError(f"Optimal: levels must be an integer >= 1, got {levels!r}")
        starts = _given_starts(blocks, costs.steps)
        if starts is None and blocks is not None:
            blocks = int(blocks)  # (checked: an integer >= 1; a NumPy one too)
            if blocks < costs.steps:  # (one step a block: the exact programme)
                starts = block_starts(costs.steps, blocks, costs.state_bytes)
        if starts is not None and len(starts) - 1 >= costs.steps:
            starts = None
        self.blocks: int | None = None if starts is None else len(starts) - 1
        self.block_starts: list[int] | None = starts
        blocks = self.blocks
        self.costs = costs
        self.memory: float = memory
        self.steps: int = costs.steps
        self._plan: ExactPlan | UniformPlan | BlockPlan | None = None  # None: store all
        if sum(costs.tape_bytes) > memory:
            levels = int(levels)
            if starts is not None:
                need = block_minimum_bytes(costs, starts)  # never below minimum_bytes
            else:
                need = minimum_bytes(costs)
            if memory < need:
                least = need if blocks is None else minimum_bytes(costs)
                if memory < least:
                    raise ValueError(
                        f"Optimal: memory={memory!r} bytes is too small for this chain: a "
                        f"valid schedule needs at least {least!r} bytes"
                    )
                raise ValueError(
                    f"Optimal: memory={memory!r} bytes is too small for a plan over {blocks} "
                    f"blocks, which needs at least {need!r} bytes (the exact programme, "
                    f"blocks=None, needs {least!r}): give more blocks or more memory"
                )
            if starts is not None:
                given = starts

                def kind(costs: ChainCosts, memory: float, levels: int) -> BlockPlan:
                    return BlockPlan(costs, memory, levels, given)

                limit = max(levels, _table_levels((blocks + 1) ** 2))
            elif _uniform(costs):
                kind, limit = UniformPlan, max(levels, _MAX_LEVELS)
            else:
                rows = table_rows(
                    costs.state_bytes, costs.tape_bytes, costs.forward_time, costs.reverse_time
                )
                kind, limit = ExactPlan, max(levels, _table_levels(rows))
                # the two tables, and the segments' row numbers if shared (int32s)
                floats = 2 * rows * (levels + 1) + (costs.steps + 1) ** 2 // 2
                if floats > _EXACT_FLOATS:
                    raise ValueError(
                        f"Optimal: the exact tables for {costs.steps} heterogeneous steps at "
                        f"{levels} levels would take {floats * 8 / 2**30:.1f} GiB (more than "
                        f"{_EXACT_FLOATS * 8 / 2**30:.0f} GiB) and time cubic in the length; "
                        "plan over blocks (blocks=200, say) or give fewer levels"
                    )
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
        blocks = "" if self.blocks is None else f", blocks={self.blocks}"
        return f"Optimal(steps={self.steps}, memory={self.memory!r}{blocks})"

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
    min over a < j < b of max(state_bytes[a] + P(j, b), P(a, j)))``.

    When step 0's tape holds at least ``x_0`` (``t[0] >= s[0]``, as when the
    tape keeps its input), the answer is ``max(t[0], s[0] + max of t[1:])``:
    in this class ``x_0`` or step 0's tape is held while every later step is
    taped, so no plan does better, and keeping ``x_0`` and advancing from it to
    tape each step in turn, last first, does that well.  Otherwise, when all
    steps are alike, ``P`` depends on the length only and grows with it (drop
    a plan's last step: what is left reverses one step less and holds no
    more), so in ``max(s + P[L - i], P[i])`` the first term falls and the
    second grows with ``i`` and the best split is found by bisection:
    ``O(n log n)``.  Otherwise every split is tried (NumPy,
    :func:`remat.schedules.planning.least_peaks`): ``O(n^3 / 6)``, 0.7 s for
    ``n = 1000``.

    >>> from remat.schedules import ChainCosts, minimum_bytes
    >>> minimum_bytes(ChainCosts.uniform(20, 1.0, 2.0, 100, 300))
    400
    """
    n = costs.steps
    s, t = costs.state_bytes, costs.tape_bytes
    if t[0] >= s[0]:
        return max(t[0], s[0] + max(t[1:], default=0))
    if _uniform(costs):  # P depends on the length only: P[L]
        P: list[float] = [0, t[0]]
        for length in range(2, n + 1):
            j = _crossing(1, length - 1, lambda j: s[0] + P[length - j] > P[j])
            candidates = (max(s[0] + P[length - i], P[i]) for i in (j - 1, j) if 0 < i < length)
            P.append(min(t[0] + P[length - 1], *candidates))
        return P[n]
    peak = least_peaks(s, t)  # every split tried
    exact = all(isinstance(x, Integral) for x in (*s, *t))
    return int(peak) if exact else peak


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


def block_starts(steps: int, blocks: int, state_bytes: Sequence[float] | None = None) -> list[int]:
    """Where each of ``blocks`` blocks of ``steps`` steps starts, and ``steps`` at the end.

    Without ``state_bytes``, the lengths differ by one at most.  With them (the
    ``steps + 1`` sizes of ``x_0 .. x_n``), each boundary after the first moves
    to the smallest state within half a block of its even place (the nearest
    to it of equal ones, the earlier of two as near): a plan over blocks stores
    states at block starts only (and inside the block being reversed), and near
    the least memory the best plans store small states.  Blocks are then at
    most about twice as long as even ones; where all states are alike, the
    boundaries stay put.

    >>> from remat.schedules import block_starts
    >>> block_starts(10, 4)
    [0, 2, 5, 7, 10]
    >>> block_starts(10, 4, [9, 9, 9, 1, 9, 9, 9, 9, 1, 9, 9])
    [0, 3, 5, 8, 10]
    """
    even = [k * steps // blocks for k in range(blocks)] + [steps]
    if state_bytes is None:
        return even
    reach = steps // blocks // 2
    starts = [0]
    for k in range(1, blocks):
        low = max(starts[-1] + 1, even[k] - reach)
        high = max(low, min(even[k] + reach, steps - (blocks - k)))
        starts.append(
            min(range(low, high + 1), key=lambda j: (state_bytes[j], abs(j - even[k]), j))
        )
    return starts + [steps]


def block_minimum_bytes(costs: ChainCosts, starts: Sequence[int]) -> float:
    """The least peak of any plan in the class of ``Optimal(..., blocks=)`` (blocks
    starting at ``starts``): the peak programme over blocks, each block's own least
    peak (its input state counted) as its one-block segments.

    >>> from remat.schedules import ChainCosts, block_minimum_bytes, block_starts, minimum_bytes
    >>> costs = ChainCosts([1] * 6, [3] * 6, [10, 40] * 3 + [10], [30, 90] * 3)
    >>> minimum_bytes(costs), block_minimum_bytes(costs, block_starts(6, 3))
    (100, 110)
    """
    s, t = costs.state_bytes, costs.tape_bytes
    inner = [
        minimum_bytes(ChainCosts((0,) * (b - a), (0,) * (b - a), s[a : b + 1], t[a:b]))
        for a, b in zip(starts, starts[1:])
    ]
    peak = least_peaks([s[a] for a in starts], sums(t, starts), leaves=inner)
    exact = all(isinstance(x, Integral) for x in (*s, *t))
    return int(peak) if exact else peak


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
