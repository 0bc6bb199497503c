"""Mixed checkpointing: a slot holds either a state or one step's tape (Maddison).

J. R. Maddison, "Step-based checkpointing with high-level algorithmic
differentiation" (J. Comput. Sci. 2024, arXiv 2305.09568) observes that a
step's tape contains its input state: a step whose tape is kept need never be
recomputed, and its state need not be kept.  With ``s`` slots (``x_0``'s
included), each holding a state or a tape, plus room for the one step being
reversed, and all slots the same size, the fewest step evaluations (taped ones
included) that reverse ``n`` steps are

    M(n, s) = n                                       if n <= s + 1 (tape them all),
    M(n, 1) = n (n + 1) / 2 - 1,
    M(n, s) = min(1 + M(n - 1, s - 1),                tape step 0, keep its tape,
                  min over 2 <= i <= n - 1 of         or store x_0, advance to x_i,
                      i + M(n - i, s - 1) + M(i, s))  reverse the right part, then the left.

The first option turns ``x_0``'s slot into step 0's tape; in the second,
``i = 1`` is never better than the first option.  It beats revolve, which
keeps only states: ``M(1000, 10) = 3921`` against ``T(1000, 10) = 4636``.

:class:`Mixed` follows the minimising choice at every segment, through the
recursion of :mod:`.splits`, so that ``simulate(Mixed(n, s)).forward_steps ==
M(n, s)`` and at every moment the states in slots plus the tapes held number
at most ``s + 1``.  A "tape in a slot" is just a ``Tape(i, i + 1)`` whose
``Reverse`` comes later: the executor keeps any number of step tapes, and
``Mixed.snapshots`` (``s``) bounds the slots for states alone.

Cost of planning: the table of ``M`` and of the minimising choices for all
lengths up to ``n`` and budgets up to ``s`` is built once per ``(n, s)``, in
``O(s n^2)`` additions done by C loops (``map``/``min``); for ``s >= n - 1`` it
is not needed.  Measured on this 2-core machine with ``s = 10``: 0.2 s for
``n = 1000``, 21 s for ``n = 10**4`` (the split minimising each entry does not
move monotonically with ``n``, so no split is skipped).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from operator import add

from .actions import Action
from .arguments import require_count
from .splits import split_actions

_NEVER = 1 << 62  # "cannot be done": larger than any count that can be reached


@lru_cache(maxsize=8)
def _tables(steps: int, snapshots: int) -> tuple[tuple[list[int], ...], tuple[list[int], ...]]:
    """``values[s][k] = M(k, s)`` and ``choices[s][k]`` for ``k <= steps``, ``s <= snapshots``.

    ``choices[s][k]`` is 0 for "tape the first step" and ``i >= 2`` for "store,
    advance ``i`` steps"; it is only filled for ``k > s + 1`` (below, tape all).
    ``values[0]`` is the budget with no slot at all: one step can still be
    taped (it is the step being reversed), two cannot.
    """
    zero = [0, 1] + [_NEVER] * (steps - 1)
    values, choices = [zero[: steps + 1]], [[0] * (steps + 1)]
    for s in range(1, snapshots + 1):
        below = values[s - 1]
        value = list(range(min(s + 1, steps) + 1)) + [0] * max(steps - s - 1, 0)
        choice = [0] * (steps + 1)
        shifted = [i + m for i, m in enumerate(value)]  # i + M(i, s), filled as we go
        for k in range(s + 2, steps + 1):
            tape = 1 + below[k - 1]
            splits = list(map(add, shifted[2:k], below[k - 2 : 0 : -1]))  # i = 2 .. k-1
            best = min(splits)
            if best < tape:
                value[k], choice[k] = best, splits.index(best) + 2
            else:
                value[k] = tape
            shifted[k] = k + value[k]
        values.append(value)
        choices.append(choice)
    return tuple(values), tuple(choices)


def mixed_forward_steps(steps: int, snapshots: int) -> int:
    """``M(n, s)``: the fewest step evaluations of mixed checkpointing (Maddison).

    >>> from remat.schedules import mixed_forward_steps, optimal_forward_steps
    >>> mixed_forward_steps(1000, 10), optimal_forward_steps(1000, 10)
    (3921, 4636)
    """
    n = require_count("mixed_forward_steps", "steps", steps)
    s = require_count("mixed_forward_steps", "snapshots", snapshots)
    if n <= s + 1:
        return n
    return _tables(n, s)[0][s][n]


class Mixed:
    """Maddison's offline mixed schedule: ``forward_steps == mixed_forward_steps(n, s)``.

    >>> from remat.schedules import Mixed, simulate
    >>> simulate(Mixed(steps=1000, snapshots=10)).forward_steps
    3921
    """

    def __init__(self, steps: int, snapshots: int) -> None:
        self.steps = require_count("Mixed", "steps", steps)
        self.snapshots = require_count("Mixed", "snapshots", snapshots)

    def __repr__(self) -> str:
        return f"Mixed(steps={self.steps}, snapshots={self.snapshots})"

    def __iter__(self) -> Iterator[Action]:
        n, s = self.steps, self.snapshots
        choices = _tables(n, s)[1] if n > s + 1 else None

        def choose(a: int, b: int, budget: int) -> int:
            length = b - a
            if length <= budget + 1:
                return a  # everything left fits: tape it
            assert choices is not None  # n > s + 1 here, or the segment fits
            i = choices[budget][length]
            return a if i == 0 else a + i

        def after(a: int, budget: int) -> int:
            return budget - 1  # a tape or a state now takes one slot

        return split_actions(n, s, choose, after, after)
