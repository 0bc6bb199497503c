"""The actions of a *split schedule*: the recursion shared by Mixed and Optimal.

Both schedules reverse a segment ``[a, b)`` of the chain (steps ``a .. b-1``,
everything after ``b`` already reversed, ``x_a`` current or in a slot) by one
of two first moves, chosen by a plan from a budget:

* **tape** ``a``: tape step ``a`` (freeing ``x_a``'s slot first if it has one:
  the tape holds ``x_a`` itself, so the state is never needed again), reverse
  ``[a + 1, b)`` with the budget left once that tape is held, then reverse
  step ``a`` from its tape.  A segment of one step is always reversed this way.
* **store** and advance to ``j`` (``a < j < b``): keep ``x_a`` in a slot,
  advance untaped to ``x_j``, reverse ``[j, b)`` with the budget left once
  ``x_a`` is held, then restore ``x_a`` and reverse ``[a, j)`` with the whole
  budget.

This is the recursion of revolve (store moves only), of mixed checkpointing
(a slot holds a state or a tape) and of the heterogeneous-chain dynamic
programme of Beaumont et al. ("tape" is their storing the whole tape of a
stage, "store" their storing only its input).  Every segment is finished,
its tapes reversed and its slots freed, before the segment to its left starts
(the "weak memory persistence" of that paper), so slots are used as a stack
and the generator's state is one stack entry per pending move.

Consecutive tape moves are merged into one ``Tape(start, stop)`` and their
reversals into one ``Reverse``; a store-all plan reads
``Tape(0, n), EndForward(), Reverse(0, n), End()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

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

Budget = TypeVar("Budget")
"""What a plan counts its budget in: Mixed counts slots (an int), Optimal a pair."""


def split_actions(
    steps: int,
    budget: Budget,
    choose: Callable[[int, int, Budget], int],
    after_tape: Callable[[int, Budget], Budget],
    after_store: Callable[[int, Budget], Budget],
) -> Iterator[Action]:
    """Actions of the split schedule that ``choose`` describes, for ``steps`` steps.

    ``choose(a, b, budget)`` is called for segments of two steps or more and
    returns ``a`` for a tape move or the ``j`` of a store move;
    ``after_tape(a, budget)`` and ``after_store(a, budget)`` give the budget of
    the right-hand segment after each move.  ``x_0`` starts current and is
    stored only if the plan's first move is a store.
    """
    new = tuple.__new__  # builds actions without the Python-level __new__
    memory = MEMORY
    pending: list = []  # an int: a taped step awaiting reversal; a tuple: a left part
    a, b = 0, steps
    slot = None  # the slot holding x_a, or None when x_a is current and not stored
    depth = 0  # slots in use (a stack: slot d is the d-th state stored)
    tape_from = None  # start of the run of tape moves not yet yielded
    end_forward = True
    while True:
        while True:  # reverse [a, b): first moves, down to its last step
            j = a if b - a == 1 else choose(a, b, budget)
            if j == a:
                if slot is not None:
                    yield new(Restore, (a, slot, memory))
                    yield new(Free, (slot, memory))
                    depth -= 1
                    slot = None
                if tape_from is None:
                    tape_from = a
                pending.append(a)
                if b - a == 1:
                    break
                budget = after_tape(a, budget)
                a += 1
                continue
            if tape_from is not None:
                yield new(Tape, (tape_from, a))
                tape_from = None
            if slot is None:
                slot = depth
                depth += 1
                yield new(Snapshot, (a, slot, memory))
            else:
                yield new(Restore, (a, slot, memory))
            yield new(Advance, (a, j))
            pending.append((a, j, budget, slot))
            budget = after_store(a, budget)
            a, slot = j, None
        yield new(Tape, (tape_from, b))
        tape_from = None
        if end_forward:
            yield new(EndForward, ())
            end_forward = False
        stop = b
        while pending and type(pending[-1]) is int:
            a = pending.pop()
        yield new(Reverse, (a, stop))
        if not pending:
            yield new(End, ())
            return
        a, b, budget, slot = pending.pop()
