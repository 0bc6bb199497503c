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


class FirstRun:
    """What the first run of a chain leaves for the check of its recomputations
    (shared with its runs again): the fingerprint of x_n, and one of each y_i."""

    __slots__ = ("final", "ys")

    def __init__(self):
        self.final = None  # fingerprint of the x_n the first run returned
        self.ys = array("I")  # step i -> fingerprint of y_i (a scan's; CRC-32: 4 bytes)


class Junctions:
    """One run's checks where taped evaluations meet, in O(tapes held) memory."""

    __slots__ = ("held", "expect")

    def __init__(self):
        # step i taped and not yet reversed -> (fingerprint of x_i it was taped at, of
        # x_{i+1} it returned, whether that run of step i was a recomputation)
        self.held = {}
        self.expect = None  # while reversing: the fingerprint of x_{i+1} step i must return

    def taped(self, i, at, returned, recomputed):
        self.held[i] = (at, returned, recomputed)

    def drop(self, i):
        """Step i's tape is dropped unreversed (``Discard``)."""
        self.held.pop(i, None)

    def begin(self, final):
        """The reverse sweep begins: the last step must return ``final``."""
        self.expect = final

    def meet(self, i):
        """Step i is about to be reversed: None if its taped run returned the
        state step i+1 was taped at (or the first run's x_n), else whether that
        run was a recomputation (the error names the step that differs)."""
        entry = self.held.pop(i, None)
        if entry is None or self.expect is None:  # no check (a measuring run)
            return None
        at, returned, recomputed = entry
        if returned != self.expect:
            return recomputed
        self.expect = at
        return None


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
