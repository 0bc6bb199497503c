"""Reversible steps: reverse a chain by recomputing its states backwards.

When each step has an inverse, ``x_i = inverse(x_{i+1})`` (a RevNet's
additive coupling, Gomez et al. 2017; a reversible RNN, MacKay et al. 2018;
a leapfrog integrator run backwards), no state needs to be stored: the
reverse sweep recomputes ``x_{n-2}, x_{n-3}, ..., x_0`` from the end with
the inverse, taping and reversing each step as soon as its input is back.
The memory is one state and one step's tape, whatever ``n``; the price is
``n - 1`` extra step evaluations (each step is taped once more in the
reverse sweep) and ``n - 1`` inverse evaluations.

Floating-point inverses are not exact: each inversion adds a rounding error
and a step that amplifies differences (an expanding map, a chaotic system)
makes them grow as the reverse sweep goes down the chain.  With ``snapshots
= s >= 2``, ``s - 1`` exact states are stored in the forward sweep, ``x_0``
and others evenly spaced (``x_{n-1}``, held exactly at the end of the
forward sweep, is the s-th): the reverse sweep restarts from each, so the
drift is that of ``(n - 1) / (s - 1)`` inversions at most.  Arriving at a
stored state, the reconstructed one is compared with it first (the executor
reports and checks the difference); so is ``x_0`` against
``inverse(step(x_0))`` at the start of the forward sweep, which catches a
wrong inverse before any gradient is made, for one extra step evaluation.
With ``snapshots=1`` nothing but that first check compares: the drift is
not seen.

The actions (one slot is the *working* one, slot 0, which holds the state
being reversed; slots 1 .. s-1 hold the exact states)::

    Snapshot(0, k) Advance(0, 1) Invert(0, 1) Restore(0, k)     the check at x_0
    Advance(0, a_2) Snapshot(a_2, 2) ... Advance(., n-1)
    Snapshot(n-1, 0) Tape(n-1, n) EndForward() Reverse(n-1, n)
    then for i = n-2 .. 0:
      Restore(i+1, slot of x_{i+1}) [Free it, if it was exact] Invert(i, i+1)
      Restore(i, k) if x_i is exact in slot k, else Snapshot(i, 0)
      Tape(i, i+1) Reverse(i, i+1)
    Free(0) End()
"""

from __future__ import annotations

from collections.abc import Iterator

from .actions import (
    Action,
    Advance,
    End,
    EndForward,
    Free,
    Invert,
    Restore,
    Reverse,
    Snapshot,
    Tape,
)
from .arguments import require_count


class Reversible:
    """Reverse ``steps`` invertible steps with ``snapshots`` memory slots (at least one).

    Slot 0 holds the state being reversed; the others hold exact states at
    :attr:`anchors`, evenly spaced from ``x_0`` on (none with one slot).
    ``forward_steps = 2n`` (``n`` in the forward sweep, one extra for the
    check of the inverse at ``x_0``, and ``n - 1`` taped again in the reverse
    sweep); ``inversions = n`` (the check's included).  The executor needs the loop's ``inverse``.

    >>> from remat.schedules import Reversible, simulate
    >>> plan = Reversible(100, snapshots=5)
    >>> sim = simulate(plan)
    >>> plan.anchors, sim.forward_steps, sim.inversions, sim.peak_snapshots, sim.peak_tapes
    ((0, 24, 49, 74), 200, 100, 5, 1)
    """

    reconstructs = True  # the states it tapes from are recomputed by the inverse

    def __init__(self, steps: int, snapshots: int = 1) -> None:
        self.steps = require_count("Reversible", "steps", steps)
        self.snapshots = require_count("Reversible", "snapshots", snapshots)
        n, s = self.steps, self.snapshots
        self.anchors = tuple(sorted({k * (n - 1) // (s - 1) for k in range(s - 1)} - {n - 1}))

    def __repr__(self) -> str:
        return f"Reversible(steps={self.steps}, snapshots={self.snapshots})"

    def __iter__(self) -> Iterator[Action]:
        n = self.steps
        if n == 1:
            yield from (Tape(0, 1), EndForward(), Reverse(0, 1), End())
            return
        slot_of = {a: k for k, a in enumerate(self.anchors, 1)}
        first = slot_of.get(0, 0)
        yield from (Snapshot(0, first), Advance(0, 1), Invert(0, 1), Restore(0, first))
        position = 0
        for a, k in slot_of.items():
            if a == 0:
                continue
            yield Advance(position, a)
            yield Snapshot(a, k)
            position = a
        if position < n - 1:
            yield Advance(position, n - 1)
        yield from (Snapshot(n - 1, 0), Tape(n - 1, n), EndForward(), Reverse(n - 1, n))
        above = 0  # the slot holding x_{i+1}
        for i in range(n - 2, -1, -1):
            yield Restore(i + 1, above)
            if above:
                yield Free(above)
            yield Invert(i, i + 1)
            above = slot_of.get(i, 0)
            yield Restore(i, above) if above else Snapshot(i, 0)
            yield Tape(i, i + 1)
            yield Reverse(i, i + 1)
        if above:
            yield Free(above)
        yield Free(0)
        yield End()
