"""The engine's side of the tape: loop steps, stand-ins, recording contexts and recorders.

The tape itself -- :class:`Record`, :class:`Leaf` and the reverse sweep -- is
the teaching core's (:mod:`remat.core.tape`); this module adds what the engine
needs around it, each through a hook the core names:

* :class:`StepValue`, the falsy marker a value made inside a loop step (or a
  checkpointed function) gets instead of None, and :class:`EscapeError`, raised
  when such a value is used outside its step (``marker.used_in(op_name)``);
* :class:`StandIn` and :class:`ConstantInput`, the leaves of inputs remat makes
  itself, and :class:`StepRecord`, a record of one taped loop step: what a
  sweep that reaches them does (``node.reached(sweep, g)``);
* ``no_grad``, ``enable_grad`` and the executor's ``untaped``;
* :class:`Recorder` (``with rm.Tape() as tape``), which lists every record made
  inside it (the core's ``OPEN_TAPE``), and prints or draws them
  (:mod:`remat.engine.views`);
* :class:`TargetSweep`, the sweep of one ``rm.grad`` call.

Outside any ``with``, records go to no list: a record lives exactly as long as
a tensor that can still reach it, so computations never differentiated do not
pile up.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import Any, TypeVar

from . import backend
from .core import tape as core_tape
from .core.errors import BackwardError
from .core.tape import (
    GRAD_ENABLED,
    OPEN_TAPE,
    STEP,
    Leaf,
    Record,
    Sweep,
    _as_tensors,
    next_sequence,
)
from .engine.views import RecorderViews, shape_text

# The core's names the engine's modules (executor, functional, checkpoint) take from here.
__all__ = [
    "GRAD_ENABLED",
    "OPEN_TAPE",
    "STEP",
    "BackwardError",
    "Leaf",
    "Record",
    "Sweep",
    "_as_tensors",
    "next_sequence",
]

# Recording state besides the core's, per thread and per context: how deep inside
# rm.grad the code runs, and whether it runs inside rm.jvp's recording, or inside
# an rm.grad whose backward is itself recorded (to be differentiated again).
GRAD_DEPTH = ContextVar("remat_grad_depth", default=0)
FORWARD_MODE = ContextVar("remat_forward_mode", default=False)  # inside rm.jvp's recording
RECORDED_BACKWARD = ContextVar("remat_recorded_backward", default=False)
_TAPE_START = ContextVar("remat_tape_start", default=0)  # records an open tape had before


class _Untaped:
    """GRAD_ENABLED's value while the executor evaluates a step (or a checkpointed
    function) without taping it: falsy, so ops record nothing, yet
    :func:`grad_enabled` says True, as it does when the same code is taped, so that
    code branching on it computes the same thing in both runs."""

    __slots__ = ()

    def __bool__(self):
        return False

    def __repr__(self):
        return "UNTAPED"


UNTAPED = _Untaped()


def grad_enabled() -> bool:
    """Whether gradients are on here and now (False inside ``rm.no_grad()``).

    Inside ``rm.checkpoint(f)``'s first run, and a checkpointed loop's steps,
    it is True, as outside: those runs record nothing only because their steps
    are recomputed (and recorded) in backward.

    >>> import remat as rm
    >>> with rm.no_grad():
    ...     inside = rm.grad_enabled()
    >>> rm.grad_enabled(), inside
    (True, False)
    """
    return GRAD_ENABLED.get() is not False


class StepValue:
    """The ``node`` of a value computed inside one evaluation of a loop step (or a
    checkpointed function) without a gradient of its own (untaped steps,
    constants): it behaves as ``None`` (it is falsy) but remembers where the
    value was made, so that using it outside is refused (see :class:`EscapeError`).
    ``parent`` is the step (or function) that was running around this one: its
    values may be used here too."""

    __slots__ = ("owner", "step", "parent")

    def __init__(self, owner, step=None, parent=None):
        self.owner = owner  # what runs the code: "tape.loop", "rm.checkpoint(block)", ...
        self.step = step
        self.parent = parent  # the marker of the step around the chain or call, or None

    def __bool__(self):
        return False

    def used_in(self, where):
        """Refuse this value in ``where`` unless its step is running (the core's hook)."""
        check_step_value(where, self)

    def escaped(self, where):
        """The error for this value used in ``where``, outside its step."""
        return escape_error(where, self)

    def __str__(self):
        return self.owner if self.step is None else f"step {self.step} of {self.owner}"

    __repr__ = __str__


class EscapeError(RuntimeError):
    """A value computed inside a loop step (or checkpointed function) was used outside it.

    >>> import remat as rm
    >>> seen = []
    >>> def step(h):
    ...     seen.append(h * 2.0)  # kept past the step: it would be recomputed, then lost
    ...     return h + 1.0
    >>> with rm.Tape(snapshots=2) as tape:
    ...     h = tape.loop(step, rm.ones(1, requires_grad=True), steps=3)
    >>> try:
    ...     (h + seen[0]).sum()
    ... except rm.EscapeError as error:
    ...     print(str(error)[:42])
    add: a value computed inside step 0 of tap
    """


def escape_error(where, node):
    return EscapeError(
        f"{where}: a value computed inside {node} is used outside it. Steps and checkpointed "
        "functions are recomputed and their values dropped, so such a value would give a "
        "wrong gradient. Return it (as part of the state, or as a scan's y) instead, or "
        ".detach() it (or compute under rm.no_grad()) if you only need its value."
    )


def check_step_value(where, node):
    """Refuse ``node`` (a falsy, non-None node) unless it belongs to the running step,
    or to a step running around it."""
    running = STEP.get()
    while running is not None:
        if running is node:
            return
        running = running.parent
    raise escape_error(where, node)


# Context managers keep what they replaced on a per-context stack (a ContextVar
# too), so that one manager object entered by several threads or interleaved
# asyncio tasks restores each its own value.
_SAVED = ContextVar("remat_saved_values", default=())


def push_value(var, value):
    """Set ``var`` to ``value`` here, remembering what it was (see pop_value)."""
    _SAVED.set((*_SAVED.get(), (var, var.get())))
    var.set(value)


def pop_value(var):
    """Give ``var`` back the value the matching push_value replaced."""
    saved = _SAVED.get()
    if not saved or saved[-1][0] is not var:
        raise RuntimeError(
            "remat: recording contexts (no_grad, enable_grad, Tape) were exited in another "
            "order than they were entered"
        )
    _SAVED.set(saved[:-1])
    var.set(saved[-1][1])


class StepRecord(Record):
    """A record made inside one taped step of a checkpointed loop.

    The loop's executor retags the records of each step it tapes, so that a
    sweep other than that step's own can tell when a value escaped the step.
    """

    __slots__ = ()

    def reached(self, sweep, g):
        """A sweep other than its step's reached it: a value escaped the step."""
        raise EscapeError(
            f"backward reached `{self.op.name}` (output shape {self.shape}), which was "
            "recorded inside a step of a checkpointed loop (or a checkpointed function), from "
            "outside it: a value computed inside was kept and used elsewhere. Return it (as "
            "part of the state, or as a scan's y) instead, or .detach() it if you only need "
            "its value."
        )


class StandIn(Leaf):
    """The leaf of an input remat itself makes to differentiate with respect to: a
    loop step's state, ``rm.grad``'s argument, a checkpointed function's input.

    Unlike a user's leaf it may be updated in place (``x *= 2`` is recorded, as
    on any value), and reaching it from outside the computation it stands in
    for means a value escaped (see :class:`EscapeError`).
    """

    __slots__ = ()

    def reached(self, sweep, g):
        """A sweep outside the computation it stands in for reached it: an escape."""
        raise EscapeError(
            f"backward reached an input (shape {self.shape}) that remat made for a loop "
            "step, a checkpointed function or rm.grad, from outside it: a step's (or "
            "function's) input was kept and used elsewhere. Return it as part of the state "
            "instead, or .detach() it if you only need its value."
        )


class ConstantInput(StandIn):
    """The leaf of an input that is not itself recorded (an array, a Tensor that needs
    no gradient) of an rm.grad whose backward is recorded or of an rm.jvp that gives
    Tensors on the tape (inside rm.grad or another rm.jvp, or beside values that
    require grad).  The call itself collects its gradient, or seeds its tangent
    there; outside the call it is a constant, so every other backward that reaches
    it stops there: a StandIn would be an escaped input, and a leaf would collect a
    gradient, which a loop step's rerun (making a new one) would not.
    """

    __slots__ = ()

    def reached(self, sweep, g):
        """A constant's leaf (rm.jvp's): no gradient asked outside its call."""


class no_grad:
    """Context manager inside which no op is recorded (and nothing is kept for backward).

    It affects only the thread (and context) that enters it.  Values computed
    inside are plain constants, also inside a loop step: reading them later,
    outside the step, is fine.

    >>> import remat as rm
    >>> p = rm.tensor([1.0], requires_grad=True)
    >>> with rm.no_grad():
    ...     q = p * 2.0
    >>> q.requires_grad
    False
    """

    enabled = False

    def __enter__(self):
        push_value(GRAD_ENABLED, self.enabled)
        push_value(STEP, None)
        return self

    def __exit__(self, *exc):
        pop_value(STEP)
        pop_value(GRAD_ENABLED)
        return False


class enable_grad(no_grad):
    """Context manager that turns recording back on (used inside no_grad).

    >>> import remat as rm
    >>> p = rm.tensor([1.0], requires_grad=True)
    >>> with rm.no_grad():
    ...     with rm.enable_grad():
    ...         q = p * 2.0
    >>> q.requires_grad
    True
    """

    enabled = True

    def __enter__(self):
        push_value(GRAD_ENABLED, True)
        return self

    def __exit__(self, *exc):
        pop_value(GRAD_ENABLED)
        return False


class untaped(enable_grad):
    """Recording off for a step the executor evaluates without taping it; unlike
    no_grad, the step's values keep their marker (internal)."""

    def __enter__(self):
        push_value(GRAD_ENABLED, UNTAPED)
        return self


_R = TypeVar("_R", bound="Recorder")


class Recorder(RecorderViews):
    """A recording context: ``with Recorder() as r:`` lists every record made inside,
    in order, so that ``print(r)`` shows the computation.

    :class:`remat.Tape` is a Recorder that also carries a budget for
    checkpointed loops, chains and scans (see :mod:`remat.budget`); the
    executor takes a plain Recorder for each step it tapes.  A recorder is
    open only in the thread (and context) that entered it.  Entered again (a
    tape reused for each step of a training loop), it first drops the records
    no backward can reach any more (:meth:`_forget`): it lists those a tensor
    alive can still be differentiated through, and the new run's.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> with rm.Recorder() as recorder:
    ...     y = rm.exp(x).sum()
    >>> [record.op.name for record in recorder.records]
    ['exp', 'sum']
    """

    # a Tape(remat=...)'s DTR cache, which the core's on_record hook finds through the
    # recorder open (remat.graph.lazy.on_record); None on any other recorder
    dtr_cache: Any = None

    def __init__(self, forwards: bool = True) -> None:
        self.records: list[Record] = []
        # A tape opened inside another lists its records there too (so that rm.jvp
        # sees what a `with rm.Tape()` inside f records); the executor's own
        # per-step recorders do not (the records of steps stay the steps').
        self.forwards = forwards
        self.open = 0  # how many times it is entered now (threads, tasks, nested)

    def __enter__(self: _R) -> _R:
        if self.records and not self.open:  # entered again (not open anywhere): a new run
            self._forget()
        self.open += 1
        push_value(_TAPE_START, len(self.records))
        push_value(OPEN_TAPE, self)
        return self

    def admit(self, op: Any) -> None:
        """Called before a record of ``op`` that reverses itself (a checkpointed loop's,
        chain's, scan's or function's) is listed here (:func:`remat.executor.outputs_of`):
        a DTR tape's list refuses it (:class:`remat.graph.dtr.Records`).  Checked there,
        not as each record is listed, an op pays nothing for it."""
        admit = getattr(self.records, "admit", None)
        if admit is not None:
            admit(op)

    def _forget(self) -> None:
        """Drop the records no backward can reach: those a backward released, and those
        nothing but this list holds (no tensor made by them is alive, no record kept
        reads them: a forward not differentiated, an evaluation, a run an exception cut
        short), whose saved arrays would otherwise live as long as the tape.  Newest
        first: a record let go lets go of its parents, judged next."""
        records, kept = self.records, []
        while records:
            record = records.pop()  # (rebinding `record` lets the one before go)
            if not record.freed and sys.getrefcount(record) > 2:  # `record`, the call's
                kept.append(record)
        kept.reverse()
        records[:] = kept

    def __exit__(self, *exc):
        outer = _SAVED.get()[-1][1]  # the tape that was open around this one
        self.open -= 1
        pop_value(OPEN_TAPE)
        start = _TAPE_START.get()
        pop_value(_TAPE_START)
        if self.forwards and outer is not None and outer is not self:
            outer.records.extend(self.records[start:])
        return False

    def saved_bytes(self) -> int:
        """Bytes that the records on this tape hold for backward right now."""
        return sum(record.saved_bytes() for record in self.records)

    def __len__(self):
        return len(self.records)

    def __repr__(self):
        return f"<{type(self).__name__} {len(self.records)} records>"

    def _input_name(self, node, number):
        """How a record's input is named in describe() and to_dot()."""
        if node is None:
            return "constant"
        if type(node).__name__ == "StandIn":
            return f"input {shape_text(node.shape)}"
        if isinstance(node, Leaf):
            name = getattr(node.tensor(), "_name", None)  # rm.tensor(..., name=)
            return (
                f"{name}: leaf {shape_text(node.shape)}"
                if name
                else f"leaf {shape_text(node.shape)}"
            )
        k = number.get(id(node))
        return f"#{k}" if k is not None else f"outside: {node.op.name} {shape_text(node.shape)}"


class TargetSweep(Sweep):
    """The sweep of one ``rm.grad`` call: it collects the cotangents of its
    ``targets`` (the arguments being differentiated) and stops there.

    Records older than ``floor`` (values the function closed over) are not
    reversed: what reaches them was not asked for, and their saved arrays stay
    for whoever backpropagates through them later.  Targets are leaves or
    records older than ``floor``, so the inlined path of ``run`` never takes
    them and they always come through ``add``.
    """

    def __init__(self, ns, targets, floor, create_graph=False):
        super().__init__(ns, create_graph=create_graph)
        self.floor = floor
        self.targets = {id(node): k for k, node in enumerate(targets)}
        self.results = [None] * len(targets)

    def add(self, node, g):
        k = self.targets.get(id(node))
        if k is not None:
            self.results[k] = g if self.results[k] is None else self.results[k] + g
        elif isinstance(node, Record) and node.seq >= self.floor:
            super().add(node, g)


def backward_to(root, seed, targets, floor, create_graph=False):
    """The cotangents of ``targets`` (nodes) from ``root`` seeded with ``seed``.

    Only records made at or after ``floor`` are reversed (see TargetSweep).
    """
    ns = core_tape.tensor_ops if create_graph else backend.ARRAY_NAMESPACE
    sweep = TargetSweep(ns, targets, floor, create_graph=create_graph)
    if root.node:
        sweep.add(root.node, seed)
    elif root.node is not None:
        check_step_value("rm.grad", root.node)
    sweep.run()
    return sweep.results
