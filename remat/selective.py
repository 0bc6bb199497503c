"""Selective recomputation, op by op: what a first run keeps, how a recomputation reuses
it, and :func:`count_ops`.

Every evaluation of a primitive (an op of :data:`remat.ops.OPS` applied to
its operands) passes one cheap test: is a *frame* open anywhere
(:data:`OPEN`, a list, empty almost always)?  With none open, the op runs as
it always does.  Otherwise :func:`evaluate` shows the evaluation to the
frames of the running thread and context (:data:`FRAMES`):

* :class:`Counting` (``rm.count_ops()``) counts the forward kernels that run;
* :class:`Saving` watches the first run of a checkpointed function (or of a
  loop step, under ``rm.Tape(policy=)``): it numbers the evaluations in order
  (their *positions*), notes each one's op, operands' shapes and dtypes and
  output's shape and dtype, and keeps the outputs its policy asks for
  (:mod:`remat.policies`);
* :class:`Reusing` watches a recomputation: at a kept position the op's
  forward kernel does not run, and the kept array is its output.

A reused output still passes through its op's usual path, so the op builds
its record exactly as it would have (its operands are the recomputed ones,
its output the kept array, bit for bit what the kernel gave the first time):
its VJP runs unchanged and gradients are those without checkpointing, bit for
bit.  The recomputation must therefore evaluate the same ops in the same
order; every position is checked against the first run (op, shapes, dtypes),
and the operands of a kept op against their fingerprints, so that a
recomputation that drifted is refused (a ``ReplayError`` naming the function
or step, the position, and what was expected and found) rather than mixed
with the kept values.  A kept array whose memory was handed to the user
(``y.data``) and written into since (:mod:`remat.guard`) is not reused: its op
runs again, as it would without a policy.

A recomputation still evaluates every op that is not kept, even one whose
result only feeds kept ones: remat runs the function eagerly and does not
prune it.  Frames nest (a checkpoint inside a checkpoint or a loop step):
each sees every evaluation made inside it.
"""

from __future__ import annotations

import weakref
from collections import Counter
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from . import backend, guard
from .core import apply as _core_apply
from .core.apply import WATCHING
from .core.tape import next_sequence

if TYPE_CHECKING:
    from .tensor import Tensor


class PolicyError(RuntimeError):
    """A policy raised, or answered something other than a bool, for an op.

    >>> import remat as rm
    >>> f = rm.checkpoint(lambda x: rm.exp(x), policy=lambda op, name: "yes")
    >>> try:
    ...     f(rm.ones(2, requires_grad=True))
    ... except rm.policies.PolicyError as error:
    ...     print(type(error).__name__)
    PolicyError
    """


OPEN: list[Frame] = WATCHING
"""Every frame open now, in any thread: the ops' one test (empty: nothing to do).
It is the core's hook list :data:`remat.core.apply.WATCHING`, with which the ops
call :func:`evaluate` (given to the core below) instead of the forward."""

FRAMES: ContextVar[tuple[Any, ...]] = ContextVar("remat_frames", default=())
"""The frames open in this thread and context, outermost first."""


class Frame:
    """A context in which every op evaluation is shown to this frame."""

    reuses = False  # whether it may give an op's output instead of running it
    names = False  # whether checkpoint_name concerns it

    def __enter__(self):
        tokens = self.__dict__.setdefault("_tokens", [])
        tokens.append(FRAMES.set((*FRAMES.get(), self)))
        OPEN.append(self)
        return self

    def __exit__(self, *exc):
        OPEN.remove(self)
        FRAMES.reset(self._tokens.pop())
        return False

    def seen(self, op, args, out, ran):
        """After an evaluation: ``out`` is its output; ``ran``: its kernel ran."""


class Unobserved:
    """``with Unobserved():`` the frames of policies open around it (:class:`Saving`,
    :class:`Reusing`) see none of the evaluations inside; counters still count them.

    For the runs remat makes for itself, which a first run and its recomputation
    do not make alike: a byte or disk budget measures a chain's steps the first
    time and reuses the plan after, so a policy around it would find other ops at
    its positions.
    """

    def __enter__(self):
        frames = FRAMES.get()
        self._token = FRAMES.set(tuple(f for f in frames if not (f.reuses or f.names)))
        return self

    def __exit__(self, *exc):
        FRAMES.reset(self._token)
        return False


def within(frame, function):
    """``function()`` inside ``frame`` (or as it is, when ``frame`` is None)."""
    if frame is None:
        return function()
    with frame:
        return function()


def evaluate(op, args, kw):
    """``op.forward(*args, **kw)`` as the open frames have it: reused, counted, kept.

    The ops call this instead of the forward only while :data:`OPEN` is not empty.
    """
    frames = FRAMES.get()
    out = None
    for frame in frames:
        if frame.reuses:
            kept = frame.reuse(op, args)
            if out is None:
                out = kept
    ran = out is None
    if ran:
        out = op.forward(*args, **kw) if kw else op.forward(*args)
        if not backend.is_array(out):  # NumPy returns scalars from full reductions
            out = backend.xp.asarray(out)
    for frame in frames:
        frame.seen(op, args, out, ran)
    return out


# --- counting ---------------------------------------------------------------------


class Counting(Frame):
    """``rm.count_ops()``: how many times each op's forward kernel ran inside."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __enter__(self) -> Counter[str]:  # the counts, not the frame
        super().__enter__()
        return self.counts

    def seen(self, op, args, out, ran):
        if ran:
            self.counts[op.name] += 1


def count_ops() -> Counting:
    """A context manager counting op evaluations: ``with rm.count_ops() as counts:``.

    ``counts`` is a :class:`collections.Counter`, op name -> how many times
    that op's forward kernel ran inside the block, in this thread (0 for an
    op that never ran), counted as it happens.  Everything counts: the
    forward, and what a backward recomputes (a checkpointed function, a loop's
    steps).  The VJP arithmetic of an ordinary backward runs on raw arrays
    and counts nothing; an op whose output a policy kept
    (:mod:`remat.policies`) is not evaluated again, and counts nothing.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> with rm.count_ops() as counts:
    ...     (rm.sin(x) * x).sum().backward()
    >>> dict(counts)
    {'sin': 1, 'multiply': 1, 'sum': 1}
    """
    return Counting()


# --- what a first run keeps ----------------------------------------------------------


def _operands(args):
    """What is checked of an evaluation's operands: shape and dtype of each array,
    the value of each Python constant."""
    return tuple(
        (tuple(a.shape), a.dtype) if backend.is_array(a) else (type(a).__name__, repr(a))
        for a in args
    )


def _fingerprint(args, full):
    value = 0
    for a in args:
        if backend.is_array(a):
            value = backend.replay_fingerprint(a, value, full)
    return value


class Kept:
    """What a first run kept: per position (op name, operands, output shape, output
    dtype), the kept outputs by position, and their operands' fingerprints."""

    __slots__ = ("ops", "values", "fingerprints", "guards")

    def __init__(self, ops, values, fingerprints, guards):
        self.ops = ops
        self.values = values
        self.fingerprints = fingerprints
        self.guards = guards  # position -> (remat.guard checks, sequence number when kept)

    def arrays(self):
        """The kept outputs (for byte accounting)."""
        return list(self.values.values())


class Saving(Frame):
    """The first run of a checkpointed function or step under ``policy``.

    ``check`` (the replay check is on): fingerprint the operands of kept
    evaluations, so that a recomputation feeding them other values is
    refused.  A policy that may keep by name (through :func:`checkpoint_name`,
    after the op ran) has every evaluation's operands fingerprinted, since any
    of them may be named later.
    """

    names = True

    def __init__(self, policy, check=True, full=False, notes=None):
        self.policy = policy
        self.check, self.full = check, full
        # what it notes of each evaluation, one object for each distinct note: a chain's
        # steps (a loop's all alike) share theirs, held from each step's first run until
        # it is reversed (0.4-0.6 KiB an op each, otherwise)
        self.notes = {} if notes is None else notes
        self.eager = check and policy.by_name  # fingerprint every evaluation's operands
        self.ops = []
        self.values = {}
        self.fingerprints = {}
        self.guards = {}
        self.made = {}  # id(output) -> (a weak reference to it, position), outputs not kept

    def seen(self, op, args, out, ran):
        position = len(self.ops)
        note = (op.name, _operands(args), tuple(out.shape), out.dtype)
        self.ops.append(self.notes.setdefault(note, note))
        keep = self.ask(op.name, None)
        if self.check and (keep or self.eager):
            self.fingerprints[position] = _fingerprint(args, self.full)
        if keep:
            self.keep(position, out)
            return
        if not self.policy.by_name:  # it never keeps a value for its name: none to find
            return
        try:
            ref = weakref.ref(out)
        except TypeError:  # an array type without weak references: held until the run ends
            ref = (lambda a: lambda: a)(out)
        self.made[id(out)] = (ref, position)

    def name(self, array, name):
        """``checkpoint_name(x, name)`` where ``array`` is x's value."""
        entry = self.made.get(id(array))
        if entry is None or entry[0]() is not array:  # not made by an op inside this run
            return
        position = entry[1]
        if self.ask(self.ops[position][0], name):
            self.keep(position, array)
            del self.made[id(array)]

    def ask(self, op_name, value_name):
        """The policy's answer, a bool; anything else it gives or raises is a PolicyError
        (never mistaken for the op's own errors about its operands)."""
        try:
            answer = self.policy(op_name, value_name)
        except Exception as error:
            raise PolicyError(
                f"policy {self.policy!r} raised {type(error).__name__} for op {op_name!r} "
                f"(value name {value_name!r}): {error}"
            ) from error
        if answer is not True and answer is not False:
            raise PolicyError(
                f"policy {self.policy!r} returned {answer!r} for op {op_name!r} (value name "
                f"{value_name!r}); a policy returns True (keep the value) or False"
            )
        return answer

    def keep(self, position, array):
        """Keep ``array``, the output at ``position``; should the user be handed its memory
        (``y.data``) and write into it, the recomputation refuses it (remat.guard)."""
        self.values[position] = array
        self.guards[position] = (guard.checks((array,)) if guard.WATCHED else None, next_sequence())

    def kept(self):
        """What this run kept (once it is over)."""
        fingerprints = {p: self.fingerprints[p] for p in self.values} if self.check else None
        self.made = {}
        return Kept(self.ops, self.values, fingerprints, self.guards)


class Reusing(Frame):
    """A recomputation of what ``kept`` came from: its kept outputs are reused.

    ``where`` names the function or step in errors; ``error`` is the exception
    class raised for a recomputation that does not match its first run;
    ``cause()`` says why it may differ, if it knows (a value changed since the
    forward), or None.
    """

    reuses = True

    def __init__(self, kept, where, error, full=False, cause=None):
        self.kept = kept
        self.where, self.error, self.full = where, error, full
        self.cause = cause
        self.position = 0

    def reuse(self, op, args):
        """The kept output for this evaluation, or None (then its kernel runs)."""
        position = self.position
        self.position += 1
        ops = self.kept.ops
        if position >= len(ops):
            raise self.mismatch(position, op, args, f"its first run evaluated only {len(ops)} ops")
        name, operands, _, _ = ops[position]
        if name != op.name:
            raise self.mismatch(position, op, args, f"its first run evaluated `{name}` there")
        value = self.kept.values.get(position)
        if value is None:
            return None
        if _operands(args) != operands:
            raise self.mismatch(
                position, op, args, f"its first run gave `{name}` operands {_text(operands)}"
            )
        fingerprints = self.kept.fingerprints
        if fingerprints is not None and _fingerprint(args, self.full) != fingerprints[position]:
            raise self.mismatch(
                position,
                op,
                args,
                "its first run gave it operands of the same shapes and dtypes but other values",
            )
        found, seq = self.kept.guards[position]
        if guard.changed((value,), found, seq) is not None:
            return None  # written into since (y.data[...] = ...): its kernel runs again instead
        return value

    def seen(self, op, args, out, ran):
        name, _, shape, dtype = self.kept.ops[self.position - 1]
        if tuple(out.shape) != shape or out.dtype != dtype:
            raise self.mismatch(
                self.position - 1,
                op,
                args,
                f"its first run's `{name}` gave shape {shape} dtype {dtype}, this one shape "
                f"{tuple(out.shape)} dtype {out.dtype}",
            )

    def finish(self):
        """After the recomputation: it evaluated as many ops as the first run."""
        if self.position != len(self.kept.ops):
            raise self.error(
                f"{self.where} was recomputed in backward and evaluated {self.position} ops, "
                f"where its first run evaluated {len(self.kept.ops)}. {self.why()}"
            )

    def mismatch(self, position, op, args, first):
        return self.error(
            f"{self.where} was recomputed in backward and evaluated `{op.name}` on operands "
            f"{_text(_operands(args))} at op position {position}, where {first}. {self.why()}"
        )

    def why(self):
        return (self.cause() if self.cause is not None else None) or _BY_POSITION


_BY_POSITION = (
    "A recomputation reuses the values its policy kept by position, so it must evaluate "
    "the same ops, in the same order, on the same values as the first run: make the "
    "function a pure function of its inputs (no Python-side state that changes, "
    "rm.random rather than np.random), or use policy=None, which checks only its results."
)


def _text(operands):
    return (
        "("
        + ", ".join(
            f"shape {spec[0]} {spec[1]}" if isinstance(spec[0], tuple) else f"{spec[0]} {spec[1]}"
            for spec in operands
        )
        + ")"
    )


def checkpoint_name(x: Tensor, name: str) -> Tensor:
    """``x`` itself, named ``name`` for the policies (:func:`remat.policies.save_names`).

    Inside the first run of a checkpointed function (or step) whose policy
    keeps this name, the op that made ``x`` is not evaluated again when the
    function is recomputed: its output is reused.  Anywhere else (or for a
    value the function did not make itself: its input, a parameter) it does
    nothing.  The value and its gradient are never changed.

    >>> import remat as rm
    >>> w = rm.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> def block(x):
    ...     h = rm.checkpoint_name(x @ w, "h")
    ...     return rm.tanh(h)
    >>> x = rm.tensor([[0.5, -0.5]])
    >>> f = rm.checkpoint(block, policy=rm.policies.save_names("h"))
    >>> with rm.count_ops() as counts:
    ...     f(x).sum().backward()
    >>> counts["matmul"]  # once in the forward; kept, so not again in backward
    1
    """
    if not isinstance(name, str):
        raise TypeError(f"rm.checkpoint_name: name must be a str, got {name!r}")
    if OPEN:
        array = getattr(x, "_data", None)
        if array is not None:
            for frame in FRAMES.get():
                if frame.names:
                    frame.name(array, name)
    return x


_core_apply.evaluate = evaluate  # the core's hook (remat.core.apply.WATCHING)
