"""The replay check of a checkpointed chain, in memory that does not grow with n.

A schedule evaluates a step more than once: untaped, to reach a state, and
taped, to linearise the step at its input and reverse it.  The gradient is
made of the taped evaluations alone, and it is store-all's, bit for bit,
when each of them runs at the state the first run gave and does what it did
then.  A step that reads a changing counter or draws from ``np.random`` does
not, and its gradient would be that of another function: the replay check
refuses it (``rm.ReplayError``).

Keeping a fingerprint of every step's first-run output would cost memory
linear in n (4 bytes a step), and checkpointing exists to keep memory at the
schedule's s slots.  So the check keeps, for one run of a chain:

* the fingerprint of the final state x_n that the first run returned (the
  one the user holds);
* for each step tape held, the fingerprints of the state x_i it was taped at
  and of the x_{i+1} it returned (as many as the tapes held, freed with them);
* while reversing, the fingerprint of the state the step reversed last was
  taped at;
* for a scan's per-step outputs ``y_i``, one fingerprint a step (4 bytes,
  no more than the ys the scan returns hold).

When step i is reversed, the x_{i+1} its taped run returned must have the
fingerprint of the state step i+1 was taped at (for the last step, the
first run's x_n), and each ``y_i`` a taped run returns must have its first
run's.  The reverse sweep reverses every step once, from n - 1 down to 0,
so once it has run the check has seen one unbroken chain::

    x_0 -> taped step 0 -> input of taped step 1 -> ... -> taped step n-1 -> x_n

(``rm.jvp`` runs the chain again from x_0 in one taped run and reverses
nothing: where that run ends is compared with the first run's x_n.)  A
fingerprint is taken once a Tape action (its start, unless it goes on from
where the last one ended) and once a taped step, as a per-step record took one
a step in the forward sweep and one a taped recomputation.

What the default check guarantees, to the fingerprint's resolution (a CRC-32
of about 64 elements of each array, :func:`remat.backend.replay_fingerprint`;
of every element with ``check_replay="full"``): the taped evaluations form one
trajectory from the user's x_0 to the user's x_n (the ys included), so the
gradient is the exact derivative of the evaluations taped, along a
trajectory that starts and ends where the first run did.  A step that does
not reproduce itself changes the state after it, and that change is caught at
the next point where the trajectory meets an evaluation made apart from it
(a state restored from a snapshot, the input of the step reversed before, x_n).
It is missed only if later steps erase it exactly before that point (a step
that maps both states to the same one: rounding, ``relu`` of negatives, a
leaf overwritten).  The structure, shapes and dtypes of every recomputed
step's outputs are checked against the first run's always, also with
``check_replay=False``.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from typing import Any

from .. import backend, guard
from ..tape import BackwardError, Leaf, Record, next_sequence
from .errors import REPLAY_CAUSES, ReplayError


class FirstRun:
    """What the first run of a chain leaves for the check of its recomputations
    (shared with its runs again): the fingerprint of x_n, and one of each y_i."""

    __slots__ = ("final", "ys")

    def __init__(self):
        self.final = None  # fingerprint of the x_n the first run returned
        self.ys = array("I")  # step i -> fingerprint of y_i (a scan's; CRC-32: 4 bytes)


def junction_error(owner, name, i, recomputed, last):
    """What a ReplayError says when step i's taped run does not return the state
    the next taped step was taped at (``last``: the first run's x_n).  The
    difference is seen where it meets another run, at step i or after the
    step that does not reproduce itself."""
    same = "different values (the same structure, shapes and dtypes)"
    if recomputed:
        other = (
            "its first run (the x_n the forward returned)"
            if last
            else f"the run of it whose x_{i + 1} step {i + 1} was taped at"
        )
        return (
            f"{name(i)} was recomputed from its stored input and returned {same} than {other}: "
            "it, or a step recomputed before it to reach its input, does not reproduce itself."
        )
    return (  # step i ran once, taped: its x_{i+1} is the first run's
        f"{owner}: step {i + 1} was taped at an x_{i + 1} recomputed from a stored state, and "
        f"steps up to {i} were recomputed and returned {same} than in their first run."
    )


class Forward:
    """When a forward sweep that is recomputed later began: a sequence number, and
    what the watched memory held then (:func:`remat.guard.remember`)."""

    __slots__ = ("seq", "memory")

    def __init__(self):
        self.seq = next_sequence()
        self.memory = guard.remember()

    def what_changed(self) -> str | None:
        """Why a recomputation may differ, if values changed after this forward sweep:
        for a replay error (the steps that read them may have run untaped, unseen)."""
        if guard.REBOUND[0] > self.seq:
            return (
                "A leaf tensor (or one computed before the forward sweep) was given a new value "
                "after the forward sweep (`p -= ...` or `p.data = ...`): if this computation "
                "reads it, its recomputation reads the new one. Update parameters after backward."
            )
        changed = guard.changed_since_remembered(self.seq, self.memory)
        if changed is not None:
            return (
                f"An array of shape {changed.shape} and dtype {changed.dtype} was changed in "
                "place after the forward sweep (through .data, np.asarray(t), .numpy() or a "
                "view of them): if this computation reads it, its recomputation reads the new "
                "values. Change values only after backward."
            )
        return None

    def refuse_changed(self, records, where):
        """Refuse ``records`` (a recomputation) if one read a value that was changed
        after this forward sweep: memory written through a handle (``p.data[...] =``),
        or a leaf given a new value (``with rm.no_grad(): p -= ...``).  Free unless
        something was handed out or rebound: the forward's saves were not checked."""
        leaves_rebound = guard.REBOUND[0] > self.seq
        if not (leaves_rebound or guard.WATCHED):
            return
        cache = {}
        for record in records:
            leaves = [n for n in record.parents if type(n) is Leaf]
            for node in leaves:
                if node.rebound > self.seq:
                    raise BackwardError(
                        f"backward through {where}: `{record.op.name}` (output shape "
                        f"{record.shape}) reads a leaf tensor of shape {node.shape} that was "
                        "given a new value after the forward sweep (`p -= ...` or `p.data = "
                        "...`), so recomputing it would differentiate another function. "
                        "Update parameters after backward."
                    )
            if leaves_rebound:  # a tensor computed before this sweep (w2 = w * 2), rebound
                for node in record.parents:
                    if (
                        isinstance(node, Record)
                        and node.seq < self.seq
                        and getattr(node, "rebound", -1) > self.seq
                    ):
                        raise BackwardError(
                            f"backward through {where}: `{record.op.name}` (output shape "
                            f"{record.shape}) reads a tensor of shape {node.shape}, made by "
                            f"`{node.op.name}` before the forward sweep, that was given a new "
                            "value after it (`t.data = ...` or `with rm.no_grad(): t -= ...`), "
                            "so recomputing it would differentiate another function. Change "
                            "values after backward."
                        )
            arrays = (*record.args, *(t._data for n in leaves if (t := n.tensor()) is not None))
            k = guard.changed_since(arrays, self.seq, self.memory, cache) if guard.WATCHED else None
            if k is not None:
                raise BackwardError(
                    f"backward through {where}: `{record.op.name}` (output shape "
                    f"{record.shape}) reads an array of shape {arrays[k].shape} and dtype "
                    f"{arrays[k].dtype} that was changed in place after the forward sweep "
                    "(through .data, np.asarray(t), .numpy() or a view of them), so recomputing "
                    "it would give wrong gradients. Change values only after backward."
                )


def fingerprint_all(arrays: Iterable[Any], full: bool = False) -> int:
    """One fingerprint of all of ``arrays``, in order (see backend.replay_fingerprint)."""
    value = 0
    for a in arrays:
        value = backend.replay_fingerprint(a, value, full)
    return value


class ReplayCheck:
    """One run's replay check: what it compares recomputations with, and where taped
    evaluations meet, in O(tapes held) memory.

    ``check_values``: whether values are compared (by fingerprints), not only
    structure, shapes and dtypes; ``full``: fingerprints of every element.  A
    run again (:meth:`again`) has junctions of its own and shares the first
    run's :class:`FirstRun` and :class:`Forward`, which its recomputations are
    checked against.  ``taped_end`` is (arrays, fingerprint) of where the last
    Tape action ended while that is still the current state, so that the next
    Tape action, going on from there, takes no fingerprint of it again.
    """

    __slots__ = ("check_values", "full", "first_run", "forward", "junctions", "expect", "taped_end")

    def __init__(self, check_values, full, first_run=None, forward=None):
        self.check_values = check_values
        self.full = full
        self.first_run = FirstRun() if first_run is None else first_run
        # the forward sweep starts now (run_forward, or a measuring run)
        self.forward = Forward() if forward is None else forward
        # step i taped and not yet reversed -> (fingerprint of x_i it was taped at, of
        # x_{i+1} it returned, whether that run of step i was a recomputation)
        self.junctions = {}
        self.expect = None  # while reversing: the fingerprint of x_{i+1} step i must return
        self.taped_end = None

    def again(self):
        """The check of a run again: fresh junctions, the first run's values."""
        return ReplayCheck(self.check_values, self.full, self.first_run, self.forward)

    def fingerprint(self, arrays, width=None):
        """The fingerprint of state ``arrays`` (its first ``width``: a TangentRun's
        state ends with the tangents), None when values are not checked.  Taken once:
        a Tape action that goes on from where the last one ended reuses it."""
        if not self.check_values:
            return None
        ended = self.taped_end
        if ended is not None and ended[0] is arrays:
            return ended[1]
        return fingerprint_all(arrays[:width], self.full)

    def taped(self, i, at, arrays, recomputed):
        """Step i was taped at the state of fingerprint ``at`` and returned ``arrays``
        (``recomputed``: not its first run): the fingerprint of what it returned,
        kept with ``at`` until step i is reversed or its tape dropped."""
        returned, fingerprint, full = 0, backend.replay_fingerprint, self.full
        for a in arrays:  # (fingerprint_all, inlined: once a taped step)
            returned = fingerprint(a, returned, full)
        self.junctions[i] = (at, returned, recomputed)
        return returned

    def drop(self, i):
        """Step i's tape is dropped unreversed (``Discard``)."""
        self.junctions.pop(i, None)

    def begin(self):
        """The reverse sweep begins: the last step must return the first run's x_n."""
        self.expect = self.first_run.final

    def meet(self, i, chain, steps):
        """Before step i of ``chain`` (of ``steps`` steps) is reversed: the state its
        taped run returned must be the one step i+1 was taped at (or, for the last
        step, the first run's x_n)."""
        entry = self.junctions.pop(i, None)
        if entry is None or self.expect is None:  # no check (a measuring run)
            return
        at, returned, recomputed = entry
        if returned != self.expect:  # the error names the step that differs
            last = i == steps - 1
            raise self.error(junction_error(chain.owner, chain.name, i, recomputed, last))
        self.expect = at

    def error(self, what):
        """A ReplayError saying ``what`` differs, and the likely cause."""
        cause = self.forward.what_changed()
        return ReplayError(f"{what} {cause or REPLAY_CAUSES}")

    def release(self, keep_first):
        """Drop the junctions (after backward, or on an error), and the first run's
        values unless ``keep_first`` (runs again are checked against them)."""
        self.junctions, self.expect, self.taped_end = {}, None, None
        if not keep_first:
            self.first_run = FirstRun()
