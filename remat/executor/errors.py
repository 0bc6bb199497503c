"""The executor's errors, and how a step's error is named."""

from __future__ import annotations

from ..storage import DiskError
from ..tape import BackwardError, EscapeError


class LoopError(RuntimeError):
    """A checkpointed loop could not run: a bad step, or a step that failed.

    >>> import remat as rm
    >>> with rm.Tape(snapshots=2) as tape:
    ...     try:
    ...         tape.loop(lambda h: (h, h), rm.ones(1, requires_grad=True), steps=3)
    ...     except rm.LoopError as error:
    ...         print(type(error).__name__)
    StepOutputError
    """


class StepOutputError(LoopError, TypeError, ValueError):
    """A step returned a state of another structure, shape or dtype than it was given.

    >>> import remat as rm
    >>> with rm.Tape(snapshots=2) as tape:
    ...     try:
    ...         tape.loop(lambda h: h.sum(), rm.ones(3, requires_grad=True), steps=3)
    ...     except rm.StepOutputError as error:
    ...         print(str(error).split(" of shape")[0])
    tape.loop: step 0 returned a state with leaf 0
    """


class ReplayError(LoopError):
    """A recomputed step (or checkpointed function) did not reproduce its first run.

    >>> import remat as rm
    >>> calls = []
    >>> def step(h):  # depends on how often it ran: a recomputation differs
    ...     calls.append(1)
    ...     return h * float(len(calls))
    >>> with rm.Tape(snapshots=2) as tape:
    ...     h = tape.loop(step, rm.ones(1, requires_grad=True), steps=4)
    >>> try:
    ...     h.sum().backward()
    ... except rm.ReplayError as error:
    ...     print(type(error).__name__)
    ReplayError
    """


REPLAY_CAUSES = (
    "Usual causes: the step reads Python-side state that changes (a counter, a list), "
    "draws from np.random instead of rm.random, or changes something in place. Make it a "
    "pure function of its inputs (pass counters in the state), or turn the check off with "
    "rm.Tape(check_replay=False) if the difference is expected (nondeterministic GPU kernels)."
)


# errors that name their step (or function) already
NAMED_ERRORS = (LoopError, EscapeError, BackwardError, DiskError)


def name_error(name: str, error: BaseException) -> None:
    """Name the step that raised ``error`` (``name``: "tape.chain: step 5 (f)") in it.

    The error keeps its type (code that catches a ShapeError, or its own exception,
    still does): a plain message (one string argument, the default ``__str__``)
    gets the name in front, ``"tape.chain: step 5 (f): matmul: shapes ..."``; any
    other error gets it as a note in its traceback (Python 3.11+).  Nested chains
    each add theirs, outermost first.
    """
    if isinstance(error, NAMED_ERRORS):
        return
    args = error.args
    if len(args) == 1 and isinstance(args[0], str) and type(error).__str__ is Exception.__str__:
        error.args = (f"{name}: {args[0]}",)
    elif hasattr(error, "add_note"):  # Python 3.11+
        getattr(error, "add_note")(f"raised in {name}")
