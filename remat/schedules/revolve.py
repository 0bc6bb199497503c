"""Revolve: optimal binomial checkpointing (Griewank and Walther 2000).

To reverse a segment of ``n`` steps whose first state sits in a slot, with
``s`` slots in all (the segment's own included), advance ``j`` steps, store
the state reached in a new slot, reverse the right part (``n - j`` steps, one
slot less), then the left part (``j`` steps, all ``s`` slots).  The untaped
cost obeys ``E(n, s) = min_j j + E(n - j, s - 1) + E(j, s)`` and the total
``n + E(n, s)`` is the minimum ``T(n, s)`` of :mod:`.binomial`.

Which ``j`` is optimal?  Count every step of the right part at its repetition
number there, and every step of the left part at one more (the advance that
crossed it) than its repetition number there.  The ``t``-cheap steps (cost
``<= t``) number ``beta(s-1, t)`` on the right and ``beta(s, t-1)`` on the left,
so an optimal split takes all steps of cost ``<= r - 2`` and fills up with cost
``r - 1`` (``r`` = repetition number of the segment).  This generator takes the
largest right part allowed,

    right = min(beta(s - 1, r), n - max(beta(s, r - 2), 1)),

and then knows the children's repetition numbers without searching: the
right part has exactly ``r``, the left part ``r - 1`` (or ``r - 2`` when it is
exactly ``beta(s, r - 2)`` long).  Every binomial it needs follows from the
segment's ``beta(s, r)`` by one multiplication and one division, so each
action costs O(1) work, and the pending left parts form a stack of at most
``s`` entries: the state is O(s), whatever ``n``.

Slots are used as a stack: the segment at depth ``d`` keeps its first state in
``slots[d]``.  A slot is freed right after its last restore.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain

from .actions import (
    MEMORY,
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


class Revolve:
    """Optimal offline schedule: ``forward_steps == optimal_forward_steps(n, s)``.

    >>> from remat.schedules import Revolve, optimal_forward_steps, simulate
    >>> simulate(Revolve(steps=1000, snapshots=8)).forward_steps
    5285
    >>> optimal_forward_steps(1000, 8)
    5285
    """

    def __init__(self, steps: int, snapshots: int) -> None:
        self.steps = require_count("Revolve", "steps", steps)
        self.snapshots = require_count("Revolve", "snapshots", snapshots)

    def __repr__(self) -> str:
        return f"Revolve(steps={self.steps}, snapshots={self.snapshots})"

    def __iter__(self) -> Iterator[Action]:
        slots = range(min(self.snapshots, self.steps))
        forward = reverse_segment(0, self.steps, slots, in_forward_sweep=True)
        return chain(forward, (End(),))


def reverse_segment(
    start: int, length: int, slots: Sequence[int], *, in_forward_sweep: bool
) -> Iterator[Action]:
    """Actions that reverse steps ``start + length - 1`` down to ``start``.

    ``slots[0]`` holds (or, in the forward sweep, is about to receive)
    ``x_start``; ``len(slots)`` is the budget ``s``.  With
    ``in_forward_sweep`` the state ``x_start`` is current and ``EndForward()``
    follows the first ``Tape``; otherwise the current state is undefined and
    the segment starts with a restore.
    """
    new = tuple.__new__  # builds actions without the Python-level __new__
    memory = MEMORY
    a, n, s = start, length, len(slots)
    r, b = 0, 1  # repetition number of the segment and beta(s, r)
    while b < n:
        r += 1
        b = b * (s + r) // r
    depth = 0
    pending = []  # left parts still to reverse: (start, length, s, r, beta(s, r), depth)
    end_forward = in_forward_sweep
    if in_forward_sweep:
        if n > 1:
            yield new(Snapshot, (a, slots[0], memory))
    else:
        yield new(Restore, (a, slots[0], memory))
        if n == 1:
            yield new(Free, (slots[0], memory))
    while True:
        while n > 1:  # the segment's first state is current: split and go right
            right_beta = b * s // (s + r)  # beta(s - 1, r)
            beta_1 = b * r // (s + r)  # beta(s, r - 1)
            beta_2 = beta_1 * (r - 1) // (s + r - 1)  # beta(s, r - 2); 0 when r == 1
            right = n - (beta_2 or 1)
            if right_beta < right:
                right = right_beta
            left = n - right
            if left == 1:
                pending.append((a, 1, s, 0, 1, depth))
            elif left > beta_2:
                pending.append((a, left, s, r - 1, beta_1, depth))
            else:
                pending.append((a, left, s, r - 2, beta_2, depth))
            yield new(Advance, (a, a + left))
            a += left
            n, s, b = right, s - 1, right_beta
            if n > 1:
                depth += 1
                yield new(Snapshot, (a, slots[depth], memory))
        yield new(Tape, (a, a + 1))
        if end_forward:
            yield new(EndForward, ())
            end_forward = False
        yield new(Reverse, (a, a + 1))
        if not pending:
            return
        a, n, s, r, b, depth = pending.pop()
        yield new(Restore, (a, slots[depth], memory))
        if n == 1:
            yield new(Free, (slots[depth], memory))
