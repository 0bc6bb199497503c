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

Cost of planning: ``M`` is the programme of :class:`.Optimal` for a loop of
identical steps with unit times and unit sizes at ``s + 1`` memory levels
(``M(n, s) = D_n[s + 1]``; ``tests/schedules/test_schedules_optimal.py`` checks this
against the recursion above), so its table is
:class:`remat.schedules.planning.LengthTable`'s: NumPy, ``O(s n^2 / 2)`` additions, once
per ``(n, s)``; for ``s >= n - 1`` it is not needed.  Measured on this 2-core
machine (shared): under 0.05 s for ``n = 1000, s = 10``, about 1 s for
``n = 10**4`` (21 s with the pure-Python table it replaces), 0.5 s for
``n = 1000, s = 500``.  Choices are found in the table as segments are
reached, and remembered.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

from .actions import Action
from .arguments import require_count
from .planning import LengthTable
from .splits import split_actions


@lru_cache(maxsize=8)
def _table(steps: int, snapshots: int) -> LengthTable:
    """``M(L, s') = D_L[s' + 1]`` for ``L <= steps`` and ``s' <= snapshots``: unit steps,
    unit slots (a state or a tape), ``snapshots + 1`` levels (the slots and the step
    being reversed)."""
    return LengthTable(steps, 1, 1, snapshots + 1, 1.0, 1.0)


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
    return int(_table(n, s).values[n, s + 1])


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
        table = _table(n, s) if n > s + 1 else None
        chosen: dict[tuple[int, int], int] = {}  # (length, slots left) -> first move

        def choose(a: int, b: int, budget: int) -> int:
            length = b - a
            if length <= budget + 1:
                return a  # everything left fits: tape it
            assert table is not None  # n > s + 1 here, or the segment fits
            i = chosen.get((length, budget))
            if i is None:
                i = chosen[length, budget] = table.choose(length, budget + 1)
            return a + i

        def after(a: int, budget: int) -> int:
            return budget - 1  # a tape or a state now takes one slot

        return split_actions(n, s, choose, after, after)
