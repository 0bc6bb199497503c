"""Schedules for a loop of known length that need no search.

``StoreAll(n)`` tapes the whole loop in the forward sweep and reverses it:
``n`` evaluations, no slots, but ``n`` tapes alive at once.

``Periodic(n, k)`` is the classic square-root checkpointing (Chen, Xu, Zhang
and Guestrin 2016, "Training deep nets with sublinear memory cost"): the
forward sweep stores every ``k``-th state, ``x_0, x_k, x_2k, ...``, and tapes
the last segment straight away; the backward sweep restores each stored
state in turn, tapes its segment of at most ``k`` steps and reverses it.  Each
step is evaluated at most twice, so ``forward_steps <= 2n`` (exactly
``2n - len(last segment)``), with ``ceil(n/k) - 1`` slots (the last segment
needs none) and at most ``k`` tapes alive.  Memory is balanced at
``k ~ sqrt(n)``, which is what ``Sqrt(n)`` picks: ``k = ceil(sqrt(n))``.
"""

from __future__ import annotations

from collections.abc import Iterator
from math import isqrt

from .actions import (
    Action,
    Advance,
    End,
    EndForward,
    Free,
    Restore,
    Reverse,
    Snapshot,
    Tape,
)
from .arguments import require_count


class StoreAll:
    """One taped sweep over all steps, then one reversal: ``forward_steps == n``.

    ``StoreAll()`` (no ``steps``) is for a loop of unknown length: like
    :class:`~.online.Online`, its iterator tapes one step at a time until the
    executor calls ``finish(n)``.

    >>> from remat.schedules import StoreAll, simulate
    >>> list(StoreAll(3))
    [Tape(0, 3), EndForward(), Reverse(0, 3), End()]
    >>> simulate(StoreAll(3)).forward_steps
    3
    """

    def __init__(self, steps: int | None = None) -> None:
        self.steps = None if steps is None else require_count("StoreAll", "steps", steps)
        self.snapshots = 0

    def __repr__(self) -> str:
        return f"StoreAll(steps={self.steps})"

    def __iter__(self) -> Iterator[Action]:
        n = self.steps
        if n is None:
            return StoreAllRun()
        return iter((Tape(0, n), EndForward(), Reverse(0, n), End()))


class StoreAllRun:
    """One run of ``StoreAll()``: tapes step after step, learns the length via ``finish``."""

    def __init__(self) -> None:
        self._steps: int | None = None
        self._actions = self._generate()

    def __iter__(self) -> StoreAllRun:
        return self

    def __next__(self) -> Action:
        return next(self._actions)

    def finish(self, steps: int) -> None:
        """Declare that the loop ended after ``steps`` steps (right after Tape(steps-1, steps))."""
        self._steps = require_count("StoreAll.finish", "steps", steps)

    def _generate(self) -> Iterator[Action]:
        position = 0
        while self._steps is None:
            yield Tape(position, position + 1)
            position += 1
        yield EndForward()
        yield Reverse(0, position)
        yield End()


class Periodic:
    """Store every ``interval``-th state, re-tape one segment at a time backwards.

    >>> from remat.schedules import Periodic, simulate
    >>> r = simulate(Periodic(steps=12, interval=4))
    >>> r.forward_steps, r.peak_snapshots
    (20, 2)
    """

    def __init__(self, steps: int, interval: int) -> None:
        self.steps = require_count(type(self).__name__, "steps", steps)
        self.interval = require_count(type(self).__name__, "interval", interval)
        segments = -(-self.steps // self.interval)
        self.snapshots = segments - 1  # the last segment is taped, not stored

    def __repr__(self) -> str:
        return f"Periodic(steps={self.steps}, interval={self.interval})"

    def __iter__(self) -> Iterator[Action]:
        n, k = self.steps, self.interval
        starts = range(0, n, k)
        last = starts[-1]
        for slot, start in enumerate(starts[:-1]):
            yield Snapshot(start, slot)
            yield Advance(start, start + k)
        yield Tape(last, n)
        yield EndForward()
        yield Reverse(last, n)
        for slot in reversed(range(len(starts) - 1)):
            start = starts[slot]
            yield Restore(start, slot)
            yield Free(slot)
            yield Tape(start, start + k)
            yield Reverse(start, start + k)
        yield End()


class Sqrt(Periodic):
    """``Periodic`` with ``interval = ceil(sqrt(steps))``.

    >>> from remat.schedules import Sqrt
    >>> Sqrt(100).interval, Sqrt(100).snapshots
    (10, 9)
    """

    def __init__(self, steps: int) -> None:
        n = require_count("Sqrt", "steps", steps)
        super().__init__(n, isqrt(n - 1) + 1)

    def __repr__(self) -> str:
        return f"Sqrt(steps={self.steps})"
