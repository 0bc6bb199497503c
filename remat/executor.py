"""The executor: one chain of steps, reversed under a budget by following a schedule.

A *chain* is ``x_0 -> x_1 -> ... -> x_n``: step ``i`` maps state ``x_i`` to
``x_{i+1}``, and may also read a per-step input ``xs[i]`` and give a per-step
output ``y_i`` (a scan).  ``tape.loop`` (one step function), ``tape.chain``
(a function per step, shapes may change) and ``tape.scan`` (JAX's
``lax.scan``) are all chains (see :mod:`remat.budget`).  What the executor
keeps is decided by a schedule from :mod:`remat.schedules`, an iterator of
actions that this module carries out one by one and never second-guesses:

* ``Advance(a, b)``: run steps a..b-1 without recording (``no_grad``);
* ``Tape(a, b)``: run steps a..b-1 recording each on a small tape of its own;
* ``Snapshot / Restore / Free``: keep, reload or drop the state in a slot;
* ``Reverse(a, b)``: backpropagate through the taped steps b-1..a;
* ``Discard(a, b)``: drop step tapes unreversed (online checkpointing);
* ``EndForward``: the forward sweep is over; the rest runs in ``backward``.

The chain appears on the outer tape as one record.  Its backward runs the
rest of the schedule: each step's cotangent flows through that step's own
records; cotangents for tensors the step closed over (parameters) go straight
into the outer sweep, so their gradients accumulate exactly as without
checkpointing, and those of ``xs`` gather in one buffer per input.

A state is a pytree of arrays (:mod:`remat.pytree`) plus the random-number
generator's state, so a step that draws random numbers replays them exactly
when it is recomputed.  The *replay check* verifies that recomputed steps
reproduce their first run: the structure, shapes and dtypes of every
recomputed step's outputs; their values (unless ``check_replay=False``) by
fingerprints compared where taped runs meet, in memory that does not grow
with n (:mod:`remat.replay` says what it guarantees).  Everything is counted
as it happens: ``stats`` reports step evaluations, snapshots and bytes held.

Second order (``rm.hvp``, ``rm.grad`` of ``rm.grad``): a backward that is
itself differentiated gives the chain's gradient as one ``loop_adjoint``
record, whose tangent and VJP run the chain again from x_0 under the same
schedule with every state paired with its tangent (:class:`TangentRun`, at
the end of this module).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

from . import backend, guard, schedules
from .alive import Holdings
from .dual import tangent_in
from .functional import forward_sweep
from .ops import TENSOR_NAMESPACE
from .ops.core import Op
from .pytree import flatten, unflatten
from .replay import FirstRun, Junctions, junction_error
from .selective import Reusing, Saving
from .storage import DiskError, DiskStore
from .tape import (
    FORWARD_MODE,
    GRAD_DEPTH,
    GRAD_ENABLED,
    OPEN_TAPE,
    RECORDED_BACKWARD,
    STEP,
    UNTAPED,
    BackwardError,
    ConstantInput,
    EscapeError,
    Leaf,
    Record,
    Recorder,
    StepRecord,
    StepValue,
    Sweep,
    check_step_value,
    enable_grad,
    next_sequence,
    no_grad,
)
from .tensor import Tensor, refuse_complex
from .units import format_bytes


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


# --- counting -------------------------------------------------------------------


@dataclass(slots=True)
class LoopStats:
    """What one chain (or all chains of a tape, added up) did, counted as it ran.

    ``snapshots`` is the schedule's slot budget; ``timeline`` lists
    (step evaluations so far, bytes held) after every step and action when the
    tape was made with ``trace=True`` (else it is None; ``tape.stats`` has it
    for a tape of one chain, ``tape.loops[i]`` for each of several).  ``seconds`` is the
    wall time of the chain's forward and backward sweeps (the schedule's
    actions).  Under ``rm.Tape(memory=...)`` (:mod:`remat.memory`):
    ``memory`` is the byte budget, ``plan`` says whether the plan was
    "measured" for this chain or "reused" from an earlier one, and
    ``predicted_seconds`` is the plan's time under the measured costs (with a
    measured overhead per action that runs steps).

    Disk snapshots (:mod:`remat.storage`): ``disk_writes`` and ``disk_reads``
    count the files written and read back, ``disk_bytes_written`` and
    ``disk_bytes_read`` their data bytes, ``peak_disk_bytes`` the most bytes
    on disk at once and ``disk_seconds`` the time spent writing and reading.
    Reversible loops (``tape.loop(..., inverse=)``): ``reconstruction_error``
    is the largest difference seen between a state recomputed by the inverse
    and the exact one stored (relative to the largest magnitude of that
    state; None when no state was compared).

    >>> import remat as rm
    >>> with rm.Tape(snapshots=4) as tape:
    ...     h = tape.loop(lambda h: h * 0.9, rm.ones(8, requires_grad=True), steps=100)
    >>> h.sum().backward()
    >>> s = tape.stats
    >>> s.steps, s.forward_steps, s.recomputed_steps, s.peak_snapshots, s.schedule
    (100, 474, 374, 4, 'Revolve')
    """

    steps: int = 0
    forward_steps: int = 0
    peak_snapshots: int = 0
    peak_bytes: int = 0
    schedule: str = ""
    snapshots: int = 0
    timeline: list | None = None
    seconds: float = 0.0
    memory: int | None = None
    plan: str = ""
    predicted_seconds: float | None = None
    disk_writes: int = 0
    disk_reads: int = 0
    disk_bytes_written: int = 0
    disk_bytes_read: int = 0
    peak_disk_bytes: int = 0
    disk_seconds: float = 0.0
    reconstruction_error: float | None = None

    @property
    def recomputed_steps(self) -> int:
        """Step evaluations beyond the first of each step: ``forward_steps - steps``."""
        return self.forward_steps - self.steps

    @classmethod
    def combine(cls, stats: Iterable[LoopStats]) -> LoopStats:
        """The counts of several chains added up (peaks: the largest), as ``tape.stats``.
        A timeline is kept only when there is one chain; several chains keep theirs
        in ``tape.loops``."""
        stats = list(stats)
        return cls(
            steps=sum(s.steps for s in stats),
            forward_steps=sum(s.forward_steps for s in stats),
            peak_snapshots=max((s.peak_snapshots for s in stats), default=0),
            peak_bytes=max((s.peak_bytes for s in stats), default=0),
            schedule=", ".join(s.schedule for s in stats),
            snapshots=max((s.snapshots for s in stats), default=0),
            timeline=stats[0].timeline if len(stats) == 1 else None,
            seconds=sum(s.seconds for s in stats),
            memory=max((s.memory for s in stats if s.memory is not None), default=None),
            plan=", ".join(s.plan for s in stats if s.plan),
            predicted_seconds=(
                sum(s.predicted_seconds or 0.0 for s in stats)
                if stats and all(s.predicted_seconds is not None for s in stats)
                else None
            ),
            disk_writes=sum(s.disk_writes for s in stats),
            disk_reads=sum(s.disk_reads for s in stats),
            disk_bytes_written=sum(s.disk_bytes_written for s in stats),
            disk_bytes_read=sum(s.disk_bytes_read for s in stats),
            peak_disk_bytes=max((s.peak_disk_bytes for s in stats), default=0),
            disk_seconds=sum(s.disk_seconds for s in stats),
            reconstruction_error=max(
                (s.reconstruction_error for s in stats if s.reconstruction_error is not None),
                default=None,
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The counts as a plain dict (``recomputed_steps`` included), ready for
        ``json.dump``: what ``remat compare --format json`` prints of each tape.

        >>> import remat as rm
        >>> with rm.Tape(snapshots=4) as tape:
        ...     h = tape.loop(lambda h: h * 0.9, rm.ones(8, requires_grad=True), steps=10)
        >>> h.sum().backward()
        >>> d = tape.stats.to_dict()
        >>> d["steps"], d["recomputed_steps"], d["schedule"]
        (10, 14, 'Revolve')
        """
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if fields["timeline"] is not None:
            fields["timeline"] = [list(point) for point in fields["timeline"]]
        return dict(fields, recomputed_steps=self.recomputed_steps)

    def __str__(self):
        factor = self.forward_steps / self.steps if self.steps else 0.0
        text = (
            f"{self.schedule or 'no loop'}: {self.steps} steps, {self.forward_steps} step "
            f"evaluations ({self.recomputed_steps} recomputed, {factor:.2f}x), "
            f"peak {self.peak_snapshots} snapshots, peak {format_bytes(self.peak_bytes)} held"
        )
        if self.memory is not None:
            text += f" of a {format_bytes(self.memory)} budget (plan {self.plan})"
        if self.predicted_seconds is not None:
            text += f"; {self.seconds:.4f} s measured, {self.predicted_seconds:.4f} s predicted"
        if self.disk_writes:
            text += (
                f"; disk: {self.disk_writes} writes ({format_bytes(self.disk_bytes_written)}), "
                f"{self.disk_reads} reads ({format_bytes(self.disk_bytes_read)}), peak "
                f"{format_bytes(self.peak_disk_bytes)} on disk, {self.disk_seconds:.4f} s"
            )
        if self.reconstruction_error is not None:
            text += f"; reconstruction error {self.reconstruction_error:.3g}"
        return text


# --- states as pytrees ---------------------------------------------------------


def is_value(v: object) -> bool:
    """A pytree leaf the executor carries: a Tensor or an array (the rest is static)."""
    return isinstance(v, Tensor) or backend.is_array(v)


@dataclass(frozen=True)
class Spec:
    """What a state looks like: its tree, and each leaf's shape and dtype."""

    tree: object
    shapes: tuple
    dtypes: tuple

    @classmethod
    def of(cls, tree, leaves):
        return cls(tree, tuple(a.shape for a in leaves), tuple(a.dtype for a in leaves))

    def fits(self, tree: object, leaves: tuple | list) -> bool:
        """Whether ``tree`` and ``leaves`` have this spec (no Spec made: once a step)."""
        shapes = self.shapes
        if len(leaves) != len(shapes) or tree != self.tree:
            return False
        for a, shape, dtype in zip(leaves, shapes, self.dtypes):
            if a.shape != shape or a.dtype != dtype:
                return False
        return True

    def differs(self, other: Spec) -> str | None:
        """How ``other`` differs from this spec, in words, or None."""
        if other.tree != self.tree:
            return f"structure {other.tree} instead of {self.tree}"
        for k, (s, d, s2, d2) in enumerate(
            zip(self.shapes, self.dtypes, other.shapes, other.dtypes)
        ):
            if s != s2 or d != d2:
                return f"leaf {k} of shape {s2} dtype {d2} instead of shape {s} dtype {d}"
        return None


def leaves_of(tree, where, tensors_only=False, copy_arrays=False):
    """(leaf arrays, their nodes or None, TreeDef) of a state; refuses escaped values,
    and with ``tensors_only`` arrays (what a step returns must be Tensors: an array
    there would silently cut the gradient)."""
    values, treedef = flatten(tree, is_value)
    arrays, nodes = arrays_of(values, where, tensors_only, copy_arrays)
    return arrays, nodes, treedef


def arrays_of(values, where, tensors_only=False, copy_arrays=False):
    """leaves_of for the flattened ``values``: (their arrays, their nodes or None)."""
    arrays, nodes = [], []
    for k, v in enumerate(values):
        if tensors_only and not isinstance(v, Tensor):
            raise StepOutputError(
                f"{where}: leaf {k} is a {type(v).__name__}, not a Tensor; what a step (or a "
                "checkpointed function) returns must be Tensors, since an array would cut the "
                "gradient. Wrap a constant with rm.tensor(...)"
            )
        if isinstance(v, Tensor):
            node = v.node
            if node is not None and not node:
                if GRAD_ENABLED.get():
                    check_step_value(where, node)
                node = None
            arrays.append(v._data)
            nodes.append(node)
        else:  # the caller's array: copied when kept, so later changes cannot reach it
            arrays.append(backend.copy(v) if copy_arrays else v)
            nodes.append(None)
    return tuple(arrays), tuple(nodes)


# --- one step, taped or not -------------------------------------------------------


class StepTape:
    """The recording of one step: its inputs' nodes, its outputs, and what it saved.

    The step's records are those numbered from ``floor`` to ``stop``: whichever
    tape or thread made them while the step ran.
    """

    __slots__ = ("inputs", "outputs", "floor", "stop", "saved")

    def __init__(self, inputs, outputs, floor, stop, saved):
        self.inputs = inputs  # the nodes standing for x_i (and xs[i]): StandIns, or markers
        self.outputs = outputs  # Tensors of x_{i+1} (and y_i), leading back to inputs
        self.floor = floor  # first sequence number recorded by this step
        self.stop = stop  # and one past the last
        self.saved = saved  # the arrays its records hold (for byte accounting)


class StepSweep(Sweep):
    """Backpropagate through one step tape inside an outer sweep.

    Records the step made are reversed here; cotangents for the step's input
    leaves are collected (they are the cotangent of the previous state); any
    other tensor (a parameter, or a value made before the chain) is handed to
    the outer sweep, which finishes its gradient.
    """

    RECORD = StepRecord

    def __init__(self, outer, step_tape, create_graph=False, hand_on=None):
        super().__init__(outer.ns, create_graph=create_graph)
        self.outer = outer
        self.hand_on = hand_on  # per input, the outer node its cotangents go to as they come
        self.floor, self.stop = step_tape.floor, step_tape.stop
        if create_graph:  # what the recorded backward splices in (rm.checkpoint's) is the step's
            self.stop = float("inf")
        self.input_ids = {id(node): k for k, node in enumerate(step_tape.inputs)}
        self.input_grads = [None] * len(step_tape.inputs)

    def owns(self, node):
        return isinstance(node, Record) and self.floor <= node.seq < self.stop

    def add(self, node, g):
        if self.owns(node):
            self.push(node, g)
            return
        k = self.input_ids.get(id(node))
        if k is None:
            if type(node) is not ConstantInput:  # a constant outside its call: none asked
                self.outer.add(node, g)
        elif self.hand_on is not None:  # each term to the outer sum, in the unchecked order
            if self.hand_on[k]:
                self.outer.add(self.hand_on[k], g)
        elif self.input_grads[k] is None:
            self.input_grads[k] = g
        else:
            self.input_grads[k] = self.input_grads[k] + g


class Recording:
    """``with Recording(recorder, mode):`` records onto ``recorder`` with gradients
    ``mode`` (True, or UNTAPED), for the recorders the executor opens around a
    Tape or Advance action.  It does what ``with recorder, enable_grad():``
    does, by ContextVar tokens in one step (such a recorder forwards nothing,
    so it needs no record of where it started): about half the cost (3.2
    against 7.0 us by timeit on the loaded machine), paid per action."""

    __slots__ = ("recorder", "mode", "tokens")

    def __init__(self, recorder, mode):
        self.recorder = recorder
        self.mode = mode

    def __enter__(self):
        self.tokens = (OPEN_TAPE.set(self.recorder), GRAD_ENABLED.set(self.mode))
        return self.recorder

    def __exit__(self, *exc):
        GRAD_ENABLED.reset(self.tokens[1])
        OPEN_TAPE.reset(self.tokens[0])
        return False


def step_recorder(check_replay):
    """A recorder for one step's (or action's) records, which it keeps to itself."""
    recorder = Recorder(forwards=False)
    recorder.check_replay = check_replay  # what a checkpoint inside the step reads
    return recorder


def tape_call(call, check_replay=True):
    """Run ``call()`` recording on a tape of its own, and mark its records StepRecords
    (a sweep other than this step's refuses them); returns (what it returned, the
    first and one past the last sequence numbers it took, its records)."""
    recorder = step_recorder(check_replay)
    floor = next_sequence()
    with Recording(recorder, True):
        result = call()
    stop = next_sequence()
    retag(recorder.records)
    return result, floor, stop, recorder.records


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


def retag(records):
    """Mark records made inside a step (or checkpointed function) as its own."""
    for record in records:
        record.__class__ = StepRecord


def saved_by(records, floor, inputs, also=(), outside=frozenset()):
    """The arrays a step tape keeps alive of the step's own values (what it made,
    or its inputs, whose nodes are ``inputs``): what its records hold for their
    VJPs, the arrays an op keeps beside its operands (an index table: ``u[nbr]``),
    and ``also``: the step's input state x_i, which the tape keeps alive whether
    or not a VJP reads it (through the previous tape's outputs, or the slot it
    came from).  Its output state x_{i+1} is a record's output, counted with the
    records (Holdings counts a buffer the next tape or a snapshot also holds
    once); a scan's y_i are in the ys the run holds anyway (a transient of
    :mod:`remat.alive`).  Parameters are not the
    chain's to count, nor is a view of one (``W.T``), nor of a buffer ``outside``
    holds (ids: a scan's ``xs``, whose rows its steps read).  A chain run inside the
    step holds its snapshots, tapes and x_0 until it is reversed: they count too.
    Holdings counts each by the buffer it keeps alive (:mod:`remat.alive`).
    (Tests the cheap conditions first: 3.4 against 5.3 us for the four records of
    bench_overheads' tiny step, by timeit.)"""
    saved = []
    views = False
    for record in records:
        held = record.args
        if record.op.custom_backward is not None:  # a checkpoint's record holds its Call
            held = getattr(record.args[0], "arrays", held)
        for a, node in zip(held, record.parents):
            if a is None:
                continue
            if node is None or (node.seq >= floor if isinstance(node, Record) else node in inputs):
                if backend.is_array(a):
                    saved.append(a)
                    views = views or a.base is not None
        ans = record.ans
        if ans is not None:
            saved.append(ans)
            views = views or ans.base is not None
        kw = record.kwargs
        if kw:  # arrays an op keeps besides its operands (an integer index table)
            for v in kw.values():
                if type(v) is tuple:
                    saved.extend(p for p in v if backend.is_array(p))
                elif backend.is_array(v):
                    saved.append(v)
        kept = getattr(record.args[0], "kept", None) if held is not record.args else None
        if kept is not None:  # what a checkpoint's policy kept
            saved.extend(kept.arrays())
        if record.op is CHAIN:  # a chain run inside the step: what it holds for its backward
            run = record.args[0]
            saved.extend(run.held.arrays())
            if run.start is not None:  # its x_0, kept for its runs again
                saved.extend(run.start[0])
    for a in also:
        saved.append(a)
        views = views or a.base is not None
    if views:  # a view of a parameter (W.T) keeps only the parameter alive: the user's
        users = _leaf_buffers(records) | outside
        if users:
            saved = [a for a in saved if id(backend.memory_owner(a)) not in users]
    return saved


def _leaf_buffers(records):
    """The ids of the buffers of the leaf tensors (parameters) ``records`` read."""
    found = set()
    for record in records:
        for node in record.parents or ():
            if type(node) is Leaf:
                t = node.tensor()
                if t is not None:
                    found.add(id(backend.memory_owner(t._data)))
    return found


def reverse_step(outer, step_tape, cotangents, hand_on=None):
    """Backpropagate ``cotangents`` of a step tape's outputs; the inputs' cotangents
    (None where none arrived).  With ``hand_on`` (the outer nodes of the inputs, for
    rm.checkpoint), each term of an input's cotangent goes to its outer node as it
    comes instead, so that the outer sum adds them in the order it would without
    checkpointing (a sum made first would round differently).

    The step tape's list of what its records saved goes first (a caller releases
    its holdings of them before): only the records hold those arrays then, and
    the sweep frees each record's as it passes it, as on an ordinary tape, instead
    of all of them at the end of the step."""
    step_tape.saved = ()
    sweep = StepSweep(outer, step_tape, hand_on=hand_on)
    for t, g in zip(step_tape.outputs, cotangents):
        if t.node and g is not None:
            sweep.add(t.node, g)
    sweep.run()
    return sweep.input_grads


class StateCotangent:
    """Cotangents of a chain's outputs, one slot per output leaf (None = zero)."""

    __slots__ = ("parts", "shape")

    def __init__(self, parts, shape):
        self.parts = parts
        self.shape = shape

    def __add__(self, other):
        parts = [
            b if a is None else a if b is None else a + b for a, b in zip(self.parts, other.parts)
        ]
        return StateCotangent(parts, self.shape)


def _select_vjp(ns, g, ans, _, index, width, shape):
    parts = [None] * width
    parts[index] = g
    return StateCotangent(parts, shape)


# Outputs: one `loop_output` record per output leaf, each pointing at the
# chain's record, so a pytree of outputs fits a tape of single-output records.
SELECT = Op(
    "loop_output",
    None,
    (_select_vjp,),
    ("",),
    jvps=(lambda ns, t, ans, _, index, width, shape: t[index],),  # t: every output's tangent
)


def refuse_complex_leaves(arrays, what):
    """Refuse a complex leaf in what a checkpointed chain or function carries (``what``
    names leaf k with ``{}``): it would be carried as a constant, cutting the gradient
    and tangent through it, where a recorded computation refuses the complex gradient."""
    for k, a in enumerate(arrays):
        if a.dtype.kind == "c":  # (named only then: this runs on every checkpointed call)
            refuse_complex(a, what.format(k), allowed=CARRY_REAL)


CARRY_REAL = (
    "checkpointed loops, chains, scans and functions carry real values only (remat "
    "differentiates real functions): carry the real and imaginary parts as two real leaves"
)


def outputs_of(op, payload, parents, arrays, shape):
    """Tensors for ``arrays``, the outputs of one multi-output record of ``op``
    (a chain, a checkpoint) whose args are ``payload`` and inputs ``parents``."""
    record = Record(op, parents, payload, None, None, shape)
    width = len(arrays)
    return [
        Tensor._from_record(
            a, Record(SELECT, (record,), (None,), None, _select(k, width, shape), a.shape)
        )
        if backend.is_floating(a.dtype)
        else Tensor._wrap(a)  # integer parts (counters) carry no gradient
        for k, a in enumerate(arrays)
    ]


def _select(k, width, shape):
    return {"index": k, "width": width, "shape": shape}


def refuse_twice(what):
    return BackwardError(
        f"{what} was run outside rm.grad, rm.jvp and rm.hvp, so it kept no copy of its "
        "initial state, and it can be reversed only once: its backward releases its "
        "snapshots, and reversing it again (retain_graph=True, or a backward that is itself "
        "differentiated) runs the schedule again from x_0. Run the chain inside the "
        "function you differentiate (rm.hvp(f, ...), rm.grad(rm.grad(f)), or rm.grad(f)(p) "
        "with p requiring grad), where it keeps x_0"
    )


def _chain_backward(record, g, sweep):
    run = record.args[0]
    again = sweep.create_graph or sweep.retain_graph or run.reversed
    if again and run.start is None:  # refuse before anything is released
        raise refuse_twice("this checkpointed tape.loop / chain / scan")
    if sweep.create_graph:  # the backward is itself to be differentiated
        recorded_backward(run, g, sweep)
        return
    if not sweep.retain_graph:
        record.release()
    if run.reversed:  # reversed before: the schedule runs again from x_0
        run = run.again()
        run.run_forward(again=True)
    run.reversed = True
    run.backward(g, sweep)


def _chain_tangent(record, tangents):
    """Forward mode through a chain: its steps run again from x_0, in order, each
    recorded and swept forward with its inputs' tangents (and those of the
    values the steps close over), so memory stays one step's tape."""
    run = record.args[0]
    if run.start is None:
        raise NotImplementedError(
            "rm.jvp: this checkpointed chain was run outside rm.jvp, so it did not keep "
            "its initial state (a thread started inside rm.jvp runs outside it: run the "
            "chain in the thread that called rm.jvp)"
        )
    return run.tangents(record.parents, tangents)


CHAIN = Op("loop", None, (), None, custom_backward=_chain_backward, custom_tangent=_chain_tangent)


# --- the executor ---------------------------------------------------------------


class Chain:
    """What the executor runs: ``n`` steps, each ``call(i, state, x)`` -> (state, y).

    ``name(i)`` names step i in messages; ``same_spec`` says every state has
    x_0's spec (loops and scans); ``step`` is a loop's function itself;
    ``xs`` are the per-step inputs' leaf arrays
    (leading axis n) and their nodes; ``has_ys`` says steps give outputs;
    ``inverse`` is a loop's inverse step (``x_i = inverse(x_{i+1})``), for a
    schedule that recomputes states backwards (``Invert``).
    """

    def __init__(
        self,
        owner,
        call,
        name,
        same_spec,
        xs=(),
        xs_nodes=(),
        xs_tree=None,
        has_ys=False,
        step=None,
        inverse=None,
    ):
        self.owner = owner  # "tape.loop", "tape.chain" or "tape.scan"
        self.call = call
        self.step = step  # a loop's step function itself (state -> state), or None
        self.name = name
        self.same_spec = same_spec
        self.xs = xs
        self.xs_nodes = xs_nodes
        self.xs_tree = xs_tree
        self.has_ys = has_ys
        self.inverse = inverse


class ChainRun:
    """One execution of a chain: the schedule's actions, carried out."""

    HANDLERS: ClassVar[dict[Any, Callable[..., Any]]]  # action type -> its method (below)

    def __init__(self, tape, chain, schedule, x0, x0_nodes, spec0, until, max_steps):
        self.snapshot_device = tape.snapshot_device  # not the tape: it lists this run's record
        self.like = (*x0, *chain.xs, None)[0]  # zeros go where the inputs are (a state may be ())
        self.context = STEP.get()  # the step this chain runs inside, if any: its values may be used
        # how deep inside rm.grad the chain runs: its steps taped again in backward (after
        # that rm.grad's f returned) run as deep, so that rm.jvp and rm.grad inside a step
        # take the path they take when store-all tapes it in the first run (untaped, both
        # take theirs whatever the depth)
        self.grad_depth = GRAD_DEPTH.get()
        # store-all never evaluates a step twice: nothing to compare
        self.check_replay = tape.check_replay
        # x_0, kept when the chain may run again: for rm.jvp, or for a backward that is
        # recorded (rm.hvp, rm.grad of rm.grad), which runs it with tangents (TangentRun);
        # a reversible schedule tapes its steps again from reconstructed states, whose
        # values differ by rounding: its replay check is structural
        keep = FORWARD_MODE.get() or RECORDED_BACKWARD.get()
        self.check_values = (
            tape.check_replay
            and (keep or not isinstance(schedule, schedules.StoreAll))
            and not getattr(schedule, "reconstructs", False)
        )
        self.full = tape.check_replay == "full"
        self.chain = chain
        self.schedule = schedule
        self.actions = iter(schedule)
        self.specs = [spec0]  # position -> Spec of x_position, learned going forward
        # a loop over one Tensor: call_step takes a short path (bench_loop's tiny steps)
        self.short = chain.step is not None and spec0.tree.kind == "leaf"
        self.floating = self.short and backend.is_floating(spec0.dtypes[0])
        self.devices = tuple(backend.device_of(a) for a in x0)
        self.until = until
        self.max_steps = max_steps
        self.online_forward = hasattr(self.actions, "finish")  # until the end is known
        self.x0_nodes = x0_nodes  # where the initial state's gradient goes
        self.position = 0
        self.evaluating = None  # the step being evaluated, for error messages
        self.current = (x0, backend.random_state())  # (arrays, rng state) of x_position
        self.start = self.current if keep else None
        self.reversed = False  # whether a backward ran (a second one starts from x_0)
        self.loops = tape.loops  # the tape's LoopStats: runs again add theirs
        self.byte_limit = getattr(tape, "byte_limit", None)
        # Tape(memory=): a callable giving the schedule of the run with tangents, planned
        # for what that run holds (run_chain's plan_with_tangents); None: this schedule
        self.plan_with_tangents = None
        self.slots = {}  # (level, slot) -> (step, arrays, rng state, guard checks, seq)
        self.disk_dir = getattr(tape, "disk_dir", None)
        self.disk = None  # the DiskStore of level="disk" slots, made on the first write
        self.inverted = None  # the position reached by the last Invert, until it moves
        self.tapes = {}  # step index -> StepTape
        self.reached = 0  # how many steps have been evaluated at least once
        self.forward = Forward()  # the forward sweep starts now (run_forward, or a measuring run)
        self.first_run = FirstRun()  # what the replay check compares with (remat.replay)
        self.junctions = Junctions()  # and where taped runs meet
        self.taped_end = None  # (arrays, fingerprint) of where the last Tape ended, if current
        self.ys = []  # the stacked ys, a buffer per leaf: row i is y_i, from the forward sweep
        self.ys_spec = None
        self.held = Holdings(self.byte_limit, error=LoopError)  # Tape(memory=): its budget
        # the buffers of a scan's xs: the caller's, not counted in a step's tape
        self.xs_buffers = frozenset(id(backend.memory_owner(a)) for a in chain.xs)
        self.keeping = None  # a KeepingRun's: step index -> what its first run kept
        self.cotangent = None  # of x_position during the reverse sweep
        self.ys_cotangent = None
        self.xs_grads = None
        self.outer_sweep = None
        self.stats = LoopStats(
            schedule=type(schedule).__name__,
            snapshots=schedule.snapshots,
            timeline=[(0, 0)] if tape.trace else None,
        )

    @property
    def nbytes(self):
        """Bytes the chain holds now (snapshots and step tapes): what its record saves."""
        return self.held.bytes

    # -- evaluating steps --
    def as_deep(self):
        """Inside rm.grad as deep as the chain was run (a token to reset), or None where
        the step runs so deep already (the first run)."""
        if GRAD_DEPTH.get() == self.grad_depth:
            return None
        return GRAD_DEPTH.set(self.grad_depth)

    def call_step(self, i, arrays, taped):
        """Evaluate step i on x_i's ``arrays``; returns (x_{i+1}'s arrays, inputs, outputs).

        Taped, the inputs are leaves (for the float components) so that the
        step's ops are recorded; untaped, they are constants.  The outputs are
        x_{i+1}'s leaf Tensors, then y_i's; ``inputs`` are the inputs' nodes.
        """
        self.evaluating = i
        self.stats.forward_steps += 1
        chain = self.chain
        marker = StepValue(chain.owner, i, self.context)  # what it makes without a gradient
        if self.short:  # one Tensor in, one Tensor out: tape.loop's common case, kept short
            a = arrays[0]
            t = Tensor._stand_in(a) if taped and self.floating else Tensor._from_record(a, marker)
            token = STEP.set(marker)
            depth = self.as_deep() if taped and self.grad_depth else None
            try:
                out = chain.step(t)
            except Exception as error:
                name_error(chain.name(i), error)
                raise
            finally:
                if depth is not None:
                    GRAD_DEPTH.reset(depth)
                STEP.reset(token)
            if type(out) is Tensor and (out.node or out.node is None or out.node is marker):
                data = out._data
                spec = self.specs[0]
                if data.shape == spec.shapes[0] and data.dtype == spec.dtypes[0]:
                    if i == self.reached:  # the values: where taped runs meet (tape_steps)
                        self.reached += 1
                    return (data,), [t.node], [out]
            return self.finish_step(i, marker, out, None, [t.node], taped)  # explains what is off

        def stand_in(a, wanted):  # a leaf to differentiate with respect to, or a constant
            return Tensor._stand_in(a) if wanted else Tensor._from_record(a, marker)

        state_in = [stand_in(a, taped and backend.is_floating(a.dtype)) for a in arrays]
        x_in = [  # a[i, ...]: a 0-d array, not a NumPy scalar, for 1-D xs
            stand_in(a[i, ...], taped and node is not None)
            for a, node in zip(chain.xs, chain.xs_nodes)
        ]
        nodes = [t.node for t in state_in + x_in]  # now: the step may rebind its inputs (x += 1)
        token = STEP.set(marker)
        depth = self.as_deep() if taped and self.grad_depth else None
        try:
            state = unflatten(self.spec_at(i).tree, state_in)
            x = unflatten(chain.xs_tree, x_in) if chain.xs_tree is not None else None
            new_state, y = chain.call(i, state, x)
        except Exception as error:
            name_error(chain.name(i), error)
            raise
        finally:
            if depth is not None:
                GRAD_DEPTH.reset(depth)
            STEP.reset(token)
        return self.finish_step(i, marker, new_state, y, nodes, taped)

    def finish_step(self, i, marker, new_state, y, nodes, taped):
        """The general case of call_step: flatten what step i returned, and check it."""
        chain = self.chain
        token = STEP.set(marker)  # its own values may be among what it returns
        try:
            outputs, tree = flatten(new_state, is_value)
            out_arrays = arrays_of(outputs, f"{chain.name(i)}: its new state", True)[0]
            if chain.has_ys:
                y_values, y_tree = flatten(y, is_value)
                y_arrays = arrays_of(y_values, f"{chain.name(i)}: its output y", True)[0]
                outputs = outputs + y_values
            else:
                y_arrays, y_tree = (), None
        finally:
            STEP.reset(token)
        self.check_step(i, tree, out_arrays, y_tree, y_arrays, taped)
        return out_arrays, nodes, outputs

    def spec_at(self, i):
        """The Spec of x_i (a loop's and a scan's states all have x_0's)."""
        return self.specs[0] if self.chain.same_spec else self.specs[i]

    def check_step(self, i, tree, arrays, y_tree, y_arrays, taped):
        """Spec of x_{i+1} (and y_i) as expected; when step i is taped again, y_i's values.

        The forward sweep evaluates the steps in order, so step i runs for the
        first time when ``i == self.reached``: what it gives then is learned.
        The values of x_{i+1} are checked where taped runs meet (:mod:`remat.replay`);
        those of y_i here, when step i is taped again (a CRC-32 a step, kept from its
        first run), since the gradient is made of the taped steps alone.
        """
        if i == self.reached:
            self.reached += 1
            if not self.chain.same_spec:
                refuse_complex_leaves(arrays, f"{self.chain.name(i)}: leaf {{}} of its state")
                last = self.specs[i]  # shared when equal: a chain's layers mostly keep it
                self.specs.append(last if last.fits(tree, arrays) else Spec.of(tree, arrays))
            elif not self.specs[0].fits(tree, arrays):
                raise StepOutputError(
                    f"{self.chain.name(i)} returned a state with "
                    f"{self.specs[0].differs(Spec.of(tree, arrays))}; a loop's (or scan's) "
                    "state must keep its structure, shapes and dtypes from step to step (use "
                    "tape.chain for layers that change them)"
                )
            if y_tree is not None:
                if self.ys_spec is None:
                    refuse_complex_leaves(y_arrays, f"{self.chain.name(i)}: leaf {{}} of its y")
                    self.ys_spec = Spec.of(y_tree, y_arrays)
                elif not self.ys_spec.fits(y_tree, y_arrays):
                    raise StepOutputError(
                        f"{self.chain.name(i)} returned y with "
                        f"{self.ys_spec.differs(Spec.of(y_tree, y_arrays))}; every step's y "
                        "must agree, so that they stack"
                    )
                if i == 0:  # a scan: as long as its xs
                    n = self.chain.xs[0].shape[0]
                    self.ys = [backend.zeros((n, *a.shape), a.dtype, like=a) for a in y_arrays]
                for buffer, a in zip(self.ys, y_arrays):
                    buffer[i] = a
            if self.check_values and y_tree is not None:
                self.first_run.ys.append(fingerprint_all(y_arrays, self.full))
            return
        wrong = None
        if not self.spec_at(i + 1).fits(tree, arrays):
            wrong = f"a state with {self.spec_at(i + 1).differs(Spec.of(tree, arrays))}"
        elif y_tree is not None and not self.ys_spec.fits(y_tree, y_arrays):
            wrong = f"y with {self.ys_spec.differs(Spec.of(y_tree, y_arrays))}"
        elif (
            taped
            and self.check_values
            and y_tree is not None
            and fingerprint_all(y_arrays, self.full) != self.first_run.ys[i]
        ):
            wrong = "y with different values (the same structure, shapes and dtypes)"
        if wrong is not None:
            raise self.replay_error(
                f"{self.chain.name(i)} was recomputed from its stored input and returned "
                f"{wrong} than its first run."
            )

    def replay_error(self, what):
        cause = self.forward.what_changed()
        return ReplayError(f"{what} {cause or REPLAY_CAUSES}")

    def fingerprint(self, arrays, width=None):
        """The replay check's fingerprint of state ``arrays`` (its first ``width``:
        a TangentRun's state ends with the tangents), None when off.  Taken once: a
        Tape action that goes on from where the last one ended reuses it."""
        if not self.check_values:
            return None
        ended = self.taped_end
        if ended is not None and ended[0] is arrays:
            return ended[1]
        return fingerprint_all(arrays[:width], self.full)

    def meet(self, i):
        """Before step i is reversed: the state its taped run returned must be the one
        step i+1 was taped at (:mod:`remat.replay`)."""
        recomputed = self.junctions.meet(i)
        if recomputed is not None:
            last = i == self.stats.steps - 1
            chain = self.chain
            raise self.replay_error(junction_error(chain.owner, chain.name, i, recomputed, last))

    def expect_position(self, action, index):
        if self.position != index:
            raise LoopError(
                f"schedule {self.schedule!r} asked for {action} while the current state is "
                f"x_{self.position}: this schedule is invalid (remat.schedules.simulate "
                "names the broken rule)"
            )

    # -- the actions --
    def advance(self, action):
        self.expect_position(action, action.start)
        self.taped_end = None
        arrays, rng = self.current
        backend.set_random_state(rng)
        spill = step_recorder(self.check_replay)  # what a step records under enable_grad
        with Recording(spill, UNTAPED):
            for i in range(action.start, action.stop):
                arrays = self.call_step(i, arrays, taped=False)[0]
                self.mark()
        retag(spill.records)
        self.current = (arrays, backend.random_state())
        self.position = action.stop

    def tape_steps(self, action):
        self.expect_position(action, action.start)
        arrays, rng = self.current
        backend.set_random_state(rng)
        # One recorder for the action, emptied after each step (tape_call, inlined: bench_overheads'
        # tiny-step rows pay its cost once an action instead of once a step).
        recorder = step_recorder(self.check_replay)
        at = self.fingerprint(arrays)  # of x_i, the state step i is taped at
        with Recording(recorder, True):
            for i in range(action.start, action.stop):
                recomputed = i < self.reached
                floor = next_sequence()
                x_i = arrays
                arrays, inputs, outputs = self.call_step(i, x_i, taped=True)
                stop = next_sequence()
                records = recorder.records[:]
                recorder.records.clear()
                retag(records)
                if recomputed and (guard.WATCHED or guard.REBOUND[0] > self.forward.seq):
                    self.forward.refuse_changed(records, self.chain.name(i))  # (its own test,
                    # inlined here so that a step pays no name and no call while nothing changed)
                saved = saved_by(records, floor, inputs, x_i, self.xs_buffers)
                self.tapes[i] = StepTape(inputs, outputs, floor, stop, saved)
                self.held.hold(saved)
                if at is not None:
                    returned = fingerprint_all(arrays, self.full)
                    self.junctions.taped(i, at, returned, recomputed)
                    at = returned
                self.mark()
                if self.online_forward and self.stop_online(i + 1, arrays):
                    break
        self.current = (arrays, backend.random_state())
        self.position = i + 1
        self.taped_end = None if at is None else (arrays, at)

    def stop_online(self, n, arrays):
        """After an online step: tell the schedule if the loop has ended at x_n."""
        done = self.max_steps is not None and n >= self.max_steps
        if not done and self.until is not None:
            done = self.ask_until(n, arrays)
        if done:
            self.actions.finish(n)
            self.stats.steps = n
            self.online_forward = False
            return True
        return False

    def ask_until(self, n, arrays):
        """The predicate on x_n.  Random numbers it draws do not move the steps' stream
        (they would not be drawn again when steps are recomputed)."""
        rng = backend.random_state()
        state = unflatten(self.spec_at(n).tree, [Tensor._wrap(a) for a in arrays])
        with no_grad():
            answer = self.until(state)
        backend.set_random_state(rng)
        try:
            return bool(answer)
        except (TypeError, ValueError):
            raise LoopError(
                f"tape.loop: until returned {answer!r} after step {n - 1}; it must return a "
                "bool (or a one-element Tensor)"
            ) from None

    def discard(self, action):
        for i in range(action.start, action.stop):
            self.held.release(self.tapes.pop(i).saved)
            self.junctions.drop(i)

    def snapshot(self, action):
        self.expect_position(action, action.step)
        key = (action.level, action.slot)
        arrays, rng = self.current
        if action.level == schedules.DISK:  # a file; the slot keeps the rng state
            if self.disk is None:
                self.disk = DiskStore(self.disk_dir)
            self.slots.pop(key, None)
            self.disk.write(action.slot, action.step, arrays)
            self.slots[key] = (action.step, None, rng, None, None)
            return
        if key in self.slots:
            self.held.release(self.slots[key][1])
        if self.snapshot_device is not None:  # offload, e.g. GPU -> host memory
            arrays = tuple(backend.to_device(a, self.snapshot_device) for a in arrays)
        # A snapshot changed in place would give wrong gradients: fingerprint
        # what the user could write (remat.guard), and check at Restore.
        found = guard.checks(arrays) if guard.WATCHED else None
        self.slots[key] = (action.step, arrays, rng, found, next_sequence())
        self.held.hold(arrays)
        in_memory = len(self.slots) - (len(self.disk.files) if self.disk is not None else 0)
        self.stats.peak_snapshots = max(self.stats.peak_snapshots, in_memory)

    def restore(self, action):
        self.taped_end = None
        step, arrays, rng, found, seq = self.slots[(action.level, action.slot)]
        if step != action.step:
            raise LoopError(f"schedule asked for {action} but that slot holds x_{step}")
        if arrays is None:  # on disk
            self.current = (self.disk.read(action.slot, step, self.devices), rng)
            self.position = step
            return
        if self.inverted == step and self.position == step:
            self.compare_reconstruction(step, arrays, rng)
        k = guard.changed(arrays, found, seq)
        if k is not None:
            raise LoopError(
                f"tape.loop: the snapshot of x_{step} (state leaf {k}, shape "
                f"{arrays[k].shape}) was changed in place after it was taken (through .data, "
                "np.asarray(t) or a view of them inside a step), so recomputing from it would "
                "give wrong gradients. A step must not write into its input state: compute a "
                "new state out of place."
            )
        if self.snapshot_device is not None:
            arrays = tuple(backend.to_device(a, d) for a, d in zip(arrays, self.devices))
        self.current = (arrays, rng)
        self.position = step

    def free(self, action):
        arrays = self.slots.pop((action.level, action.slot))[1]
        if arrays is None:
            self.disk.drop(action.slot)
        else:
            self.held.release(arrays)

    def count_disk(self):
        """Copy the disk store's counts into the stats."""
        disk, stats = self.disk, self.stats
        stats.disk_writes, stats.disk_reads = disk.writes, disk.reads
        stats.disk_bytes_written, stats.disk_bytes_read = disk.bytes_written, disk.bytes_read
        stats.peak_disk_bytes, stats.disk_seconds = disk.peak_bytes, disk.seconds

    def invert(self, action):
        """Recompute x_{stop-1} .. x_start from the current x_stop with the loop's inverse."""
        self.expect_position(action, action.stop)
        inverse = self.chain.inverse
        if inverse is None:
            raise LoopError(
                f"schedule {self.schedule!r} asked for {action}, which needs the loop's "
                "inverse: tape.loop(step, state, steps=n, inverse=...)"
            )
        self.taped_end = None
        arrays, rng = self.current
        spec = self.spec_at(action.stop)
        for i in range(action.stop - 1, action.start - 1, -1):
            self.evaluating = i
            state = unflatten(spec.tree, [Tensor._wrap(a) for a in arrays])
            try:
                with no_grad():
                    result = inverse(state)
            except Exception as error:
                name_error(f"{self.chain.name(i)}: inverse(x_{i + 1})", error)
                raise
            rebuilt = self.inverse_leaves(i, result, spec)
            self.refuse_nonfinite(i, rebuilt, arrays)
            arrays = rebuilt
        self.current = (arrays, rng)
        self.position = self.inverted = action.start

    def inverse_leaves(self, i, result, spec):
        """The arrays of what ``inverse(x_{i+1})`` returned, checked against x_i's spec."""
        values, tree = flatten(result, is_value)
        arrays = tuple(v._data if isinstance(v, Tensor) else v for v in values)
        wrong = spec.differs(Spec.of(tree, arrays))
        if wrong is not None:
            raise StepOutputError(
                f"tape.loop: inverse(x_{i + 1}) returned a state with {wrong}; the inverse "
                f"must return what step {i} was given, x_{i} (the same structure, shapes and "
                "dtypes as the loop's state)"
            )
        return arrays

    def refuse_nonfinite(self, i, rebuilt, given):
        """Refuse x_i as ``inverse(x_{i+1})`` rebuilt it (``given``: x_{i+1}'s arrays) if a
        value is NaN or inf: no comparison may let it through (``max(0.0, nan)`` is 0.0)."""
        for k, a in enumerate(rebuilt):
            bad = backend.count_nonfinite(a)
            if bad:
                raise LoopError(
                    f"tape.loop(inverse=...): inverse(x_{i + 1}) returned x_{i} (the input of "
                    f"step {i}) with {bad} of its {a.size} values NaN or inf in state leaf {k} "
                    f"(shape {a.shape}, {a.dtype}); x_{i + 1} held "
                    f"{backend.count_nonfinite(given[k])} there. A reversible loop's states "
                    "must be finite: gradients from such a state would be NaN or wrong. Check "
                    "the inverse over its domain (a root or a log of a negative number?), or "
                    "run the loop without inverse="
                )

    def refuse_nonfinite_output(self, i, step_tape):
        """Refuse step i's outputs, taped from x_i as the inverse rebuilt it, if one holds
        a NaN or an inf: the rebuilt x_i is finite but off by rounding (a root of -1e-300
        where the exact value was 0), and the gradient would come from those values."""
        for k, t in enumerate(step_tape.outputs):
            bad = backend.count_nonfinite(t._data)
            if bad:
                raise LoopError(
                    f"tape.loop(inverse=...): step {i}, taped again in backward from x_{i} as "
                    f"the inverse rebuilt it, returned {bad} of {t._data.size} values NaN or "
                    f"inf in output leaf {k} (shape {t._data.shape}, {t._data.dtype}). A "
                    "reversible loop's states must be finite; a rebuilt state differs from the "
                    "exact one by rounding, which the step must tolerate (a root or a log at 0?). "
                    "Store exact states with rm.Tape(snapshots=s), or run the loop without "
                    "inverse="
                )

    def compare_reconstruction(self, step, exact, rng):
        """The state the inverse recomputed (current) against the exact x_step restored."""
        rebuilt, rebuilt_rng = self.current
        if rebuilt_rng is not rng and rebuilt_rng != rng:
            raise LoopError(
                f"tape.loop(inverse=...): step {step} drew random numbers (rm.random), which "
                "the inverse cannot give back; a reversible loop's steps must not draw them"
            )
        error = relative_difference(rebuilt, exact)
        stats = self.stats
        if stats.reconstruction_error is None or error > stats.reconstruction_error:
            stats.reconstruction_error = error
        limit = max((backend.reconstruction_tolerance(a.dtype) for a in exact), default=0.0)
        if error > limit:
            where = (
                "inverse(step(x_0)) is not x_0: the inverse does not undo the step"
                if step == 0 and self.stats.steps == 0  # the forward sweep's check
                else f"the states recomputed backwards have drifted from the exact x_{step}"
            )
            raise LoopError(
                f"tape.loop(inverse=...): {where} (largest difference {error:.3g} relative to "
                f"the state's magnitude, above the tolerance {limit:.3g} of its dtype); "
                "gradients from such states would be wrong. Check the inverse, or store "
                "more exact states along the chain with rm.Tape(snapshots=s)"
            )
        self.inverted = None

    def reverse(self, action):
        for i in range(action.stop - 1, action.start - 1, -1):
            self.evaluating = i  # for the error of a VJP that fails
            self.meet(i)
            step_tape = self.tapes.pop(i)
            if self.inverted == i:  # taped from x_i as the inverse rebuilt it
                self.refuse_nonfinite_output(i, step_tape)
            self.held.release(step_tape.saved)  # before: reverse_step lets them go as it goes
            grads = reverse_step(self.outer_sweep, step_tape, self.seeds(i, self.cotangent))
            self.cotangent = self.gather(i, grads, self.xs_grads, step_tape)
            if self.keeping is not None and i in self.keeping:
                self.held.release(self.keeping.pop(i).arrays())
        self.position = None

    def seeds(self, i, state, ys=None):
        """What step i's outputs are seeded with in reverse: the cotangent of x_{i+1}
        (``state``), then row i of the ys' cotangents (of ``self.ys_cotangent``)."""
        if not self.chain.has_ys:
            return list(state)
        ys = self.ys_cotangent if ys is None else ys
        return list(state) + [None if g is None else g[i] for g in ys]

    def gather(self, i, grads, xs_grads, step_tape):
        """From the cotangents of step i's inputs (``grads``): add xs[i]'s into row i of
        ``xs_grads`` (a buffer per xs leaf, made when a first one arrives), and
        return x_i's (zeros where none arrived)."""
        spec = self.spec_at(i)
        width = len(spec.shapes)
        for k, g in enumerate(grads[width:]):
            if g is not None:
                buffer = xs_grads[k]
                if buffer is None:  # in the cotangents' dtype: the leaf casts once, at the end
                    xs = self.chain.xs[k]
                    buffer = xs_grads[k] = backend.zeros(xs.shape, g.dtype, like=xs)
                buffer[i] += g if g.shape == buffer.shape[1:] else g.reshape(buffer.shape[1:])
        like = step_tape.outputs[0]._data if step_tape.outputs else self.like
        return [
            g if g is not None else backend.zeros(s, d, like=like)
            for g, s, d in zip(grads[:width], spec.shapes, spec.dtypes)
        ]

    # -- the two sweeps --
    def mark(self):
        """Note the bytes held now in the timeline (with Tape(trace=True))."""
        if self.stats.timeline is not None:
            self.stats.timeline.append((self.stats.forward_steps, self.held.bytes))

    def carry_out(self, action):
        self.HANDLERS[type(action)](self, action)
        self.mark()

    def run_forward(self, again=False):
        """Carry out the schedule up to EndForward; return x_n's arrays and the ys.

        A run ``again`` (see :meth:`again`) gathers no ys, and its recomputed
        steps are checked against the values of the first run's forward sweep
        (its ``forward``, copied from the first run's)."""
        start = time.perf_counter()
        for action in self.actions:
            if type(action) is schedules.EndForward:
                break
            self.carry_out(action)
        else:
            raise LoopError(f"schedule {self.schedule!r} ended before EndForward")
        if not hasattr(self.actions, "finish"):  # online runs counted it at their end
            self.stats.steps = self.position
        if not again:  # the x_n the user holds: the last taped step must return it
            self.first_run.final = self.fingerprint(self.current[0])
        self.stats.peak_bytes = self.held.peak
        if self.disk is not None:
            self.count_disk()
        ys = ()
        if self.chain.has_ys and not again:
            ys, self.ys = tuple(self.ys), []
        self.stats.seconds += time.perf_counter() - start
        return self.current[0], ys

    def backward(self, cotangent, sweep):
        """Carry out the rest of the schedule, from the outputs' cotangents back to x_0."""
        self.outer_sweep = sweep
        final = self.spec_at(self.stats.steps)
        width = len(final.shapes)
        self.cotangent = [
            g if g is not None else backend.zeros(s, d, like=self.current[0][k])
            for k, (g, s, d) in enumerate(zip(cotangent.parts[:width], final.shapes, final.dtypes))
        ]
        self.ys_cotangent = cotangent.parts[width:]
        self.xs_grads = [None] * len(self.chain.xs)  # made when a cotangent arrives
        self.junctions.begin(self.first_run.final)
        rng_after_forward = backend.random_state()
        start = time.perf_counter()
        try:
            for action in self.actions:
                if type(action) is schedules.End:
                    break
                try:
                    self.carry_out(action)
                except NAMED_ERRORS:  # named already
                    raise
                except Exception as error:
                    name = self.chain.name(self.evaluating)
                    doing = BACKWARD_DOING.get(type(action), "being recomputed")
                    raise LoopError(
                        f"{name} raised {type(error).__name__} while {doing} in backward "
                        f"({action}): {str(error).removeprefix(name + ': ')}"
                    ) from error
            self.deliver(sweep, self.cotangent, self.xs_grads)
        finally:
            self.stats.seconds += time.perf_counter() - start
            backend.set_random_state(rng_after_forward)
            self.release()

    def deliver(self, sweep, state, xs_grads):
        """Hand the cotangents of x_0's leaves (``state``) and of xs to ``sweep``."""
        for k, node in enumerate(self.x0_nodes):
            if node is not None:
                sweep.add(node, state[k])
        for node, g, xs in zip(self.chain.xs_nodes, xs_grads, self.chain.xs):
            if node is not None:
                sweep.add(node, g if g is not None else backend.zeros(xs.shape, xs.dtype, like=xs))

    def tangents(self, nodes, tangents):
        """The tangents of the chain's outputs (x_n's leaves, then the stacked ys),
        from those of its inputs (``nodes``: x_0's, then xs'), by running the steps
        again from x_0 (for rm.jvp; see _chain_tangent)."""
        arrays, rng = self.start
        width0, n = len(self.x0_nodes), self.stats.steps
        t_state = [tangent_in(tangents, node) for node in nodes[:width0]]
        t_xs = [tangent_in(tangents, node) for node in nodes[width0:]]
        counted, outer_rng = self.stats.forward_steps, backend.random_state()
        backend.set_random_state(rng)
        y_tangents = []
        try:
            for i in range(n):
                arrays, out, *_ = self.step_with_tangents(i, arrays, t_state, t_xs, tangents)
                t_state = out[: len(arrays)]
                y_tangents.append(out[len(arrays) :])
        finally:
            backend.set_random_state(outer_rng)
            self.stats.forward_steps = counted  # these evaluations are jvp's, not the loop's
        if n and self.check_values and self.fingerprint(arrays) != self.first_run.final:
            raise self.replay_error(  # one taped run from x_0: where it ends is checked
                f"{self.chain.name(n - 1)} was recomputed from its stored input (the chain "
                "run again from x_0 for its tangents) and returned different values (the same "
                "structure, shapes and dtypes) than its first run (the x_n the forward returned)."
            )
        stacked = [backend.xp.stack(column) for column in zip(*y_tangents)] if y_tangents else []
        return t_state + (stacked if self.chain.has_ys else [])

    def step_with_tangents(self, i, arrays, t_state, t_xs, tangents):
        """Tape step i on x_i's ``arrays`` and sweep its records forward from the
        tangents of x_i (``t_state``), of xs (``t_xs``, whole) and of the values
        it closes over (``tangents``: id(node) -> tangent).  Returns x_{i+1}'s
        arrays, the tangents of x_{i+1}'s and y_i's leaves (zeros where none
        flows), the step's StepTape, and the tangents of its records."""
        # chains inside the step keep x_0: they are swept forward (and maybe reversed
        # with a recorded backward) in turn
        forward, recorded = FORWARD_MODE.set(True), RECORDED_BACKWARD.set(True)
        try:
            (arrays_next, inputs, outputs), floor, stop, records = tape_call(
                lambda: self.call_step(i, arrays, taped=True), self.check_replay
            )
        finally:
            RECORDED_BACKWARD.reset(recorded)
            FORWARD_MODE.reset(forward)
        self.forward.refuse_changed(records, self.chain.name(i))  # every step here is a rerun
        seeds = dict(tangents)
        step_tangents = list(t_state) + [None if t is None else t[i] for t in t_xs]
        for node, t in zip(inputs, step_tangents):
            if node and t is not None:
                seeds[id(node)] = t
        inner = forward_sweep(records, seeds)
        out = [tangent_of(o, inner) for o in outputs]
        saved = saved_by(records, floor, inputs, arrays, self.xs_buffers)
        step_tape = StepTape(inputs, outputs, floor, stop, saved)
        return arrays_next, out, step_tape, records, inner

    def again(self, kind=None):
        """A fresh run of the same schedule from x_0 (kept in ``start``), to reverse
        the chain once more, or (``kind=TangentRun``) to run it with tangents.
        Its counts are listed on the tape after the first run's."""
        run = copy.copy(self)
        run.__class__ = kind or ChainRun
        # under a byte budget the run with tangents has a plan of its own, for its states
        # with their tangents and its tapes with theirs: it stays within the budget too
        budgeted = kind is not None and self.plan_with_tangents is not None
        if budgeted:
            run.schedule = self.plan_with_tangents()
        run.actions = iter(run.schedule)
        run.online_forward = hasattr(run.actions, "finish")
        run.until, run.max_steps = None, self.stats.steps  # the length is known now
        run.current, run.position = self.start, 0
        run.slots, run.tapes, run.ys = {}, {}, []
        run.junctions, run.taped_end = Junctions(), None  # its own; its first_run is this one's
        run.disk = None  # its disk slots are files of its own (the first run's are gone)
        run.inverted = None
        run.keeping = None  # a policy's kept values went with the first backward: recompute
        run.held = Holdings(None if kind and not budgeted else self.byte_limit, error=LoopError)
        if budgeted:
            run.held.why = (
                f"{self.chain.owner}'s run with tangents (rm.hvp, rm.grad of rm.grad) was "
                "planned with each step's tape doubled, and a step that runs an rm.checkpoint "
                "or a chain of its own holds more (the tangents of all they output), as may a "
                "step whose records depend on the values; give more memory"
            )
        run.cotangent = run.ys_cotangent = run.xs_grads = run.outer_sweep = None
        what = "with tangents" if kind else "again"
        run.stats = LoopStats(
            schedule=f"{type(run.schedule).__name__} {what}",
            snapshots=run.schedule.snapshots,
            timeline=[(0, 0)] if self.stats.timeline is not None else None,
        )
        self.loops.append(run.stats)
        return run

    def release(self):
        """Drop every snapshot and step tape (after backward, or on an error)."""
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.held.peak)
        if self.disk is not None:
            self.count_disk()
            self.disk.close()
        self.slots.clear()
        self.tapes.clear()
        if self.keeping:
            self.keeping.clear()
        self.junctions, self.taped_end = Junctions(), None
        if self.start is None:  # else kept: runs again are checked against them
            self.first_run = FirstRun()
        self.held = Holdings()
        self.current = (None, None)
        self.cotangent = self.outer_sweep = self.ys_cotangent = self.xs_grads = None


class KeepingRun(ChainRun):
    """A ChainRun under ``rm.Tape(policy=)`` (:mod:`remat.selective`): the first run of
    each step keeps what the policy chooses, held (and counted) until the step is
    reversed, and every later run of the step reuses it."""

    def __init__(self, tape, *args):
        super().__init__(tape, *args)
        self.policy = tape.recompute
        self.keeping = {}
        self.notes = {}  # what the steps' first runs note, each distinct note once

    def call_step(self, i, arrays, taped):
        first = i == self.reached
        kept = self.keeping.get(i)
        if first:
            frame = Saving(self.policy, self.check_values, self.full, self.notes)
        elif kept is not None:
            why = self.forward.what_changed
            frame = Reusing(kept, self.chain.name(i), ReplayError, self.full, why)
        else:  # reversed already (a jvp after backward): nothing kept to reuse
            return super().call_step(i, arrays, taped)
        with frame:
            result = super().call_step(i, arrays, taped)
        if first:
            kept = self.keeping[i] = frame.kept()  # released when step i is reversed
            self.held.hold(kept.arrays())
        else:
            frame.finish()
        return result

    def release(self):
        super().release()
        self.notes = {}


# What carries out each action (a table of plain functions: bound methods kept on
# the run would make a reference cycle, and hold the run until the cyclic GC).
HANDLERS: dict[Any, Callable[..., Any]] = {
    schedules.Advance: ChainRun.advance,
    schedules.Tape: ChainRun.tape_steps,
    schedules.Reverse: ChainRun.reverse,
    schedules.Discard: ChainRun.discard,
    schedules.Snapshot: ChainRun.snapshot,
    schedules.Restore: ChainRun.restore,
    schedules.Free: ChainRun.free,
    schedules.Invert: ChainRun.invert,
}
ChainRun.HANDLERS = HANDLERS


# what a step was doing when an error stopped it in backward, by kind of action
BACKWARD_DOING = {schedules.Reverse: "being reversed", schedules.Invert: "being inverted"}

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


def relative_difference(arrays: Sequence[Any], exact: Sequence[Any]) -> float:
    """The largest ``|a - b|`` over the leaves, each relative to ``max |b|`` of its leaf
    (inf where a NaN or an inf differs: see backend.relative_difference)."""
    return max(map(backend.relative_difference, arrays, exact), default=0.0)


# --- second order: a recorded backward, and the chain run with tangents -------------
#
# When the backward through a chain is itself to be differentiated (rm.hvp is rm.jvp of
# rm.grad; rm.grad of rm.grad), the gradient is computed as always (the same schedule on
# the same arrays) and handed on as the outputs of one `loop_adjoint` record.  For a
# tangent of that record (forward over reverse) the chain runs again from x_0 under the
# same schedule carrying tangents: the state is (x_i, its tangent) wherever it goes,
# snapshots included, and each reversed step's backward is recorded and swept forward
# (the tangent of its VJP).  The record's own VJP (reverse over reverse) is that same
# run, by the symmetry of second derivatives: for A(z, g) = J(z)^T g (z the chain's
# inputs and the values its steps close over), the VJP of A at w is J w for g, and
# d/dz (g . J(z) w) = the tangent of A along z' = w for z.  Either way memory stays
# that of the schedule, with states and step tapes twice as large.


class Totals:
    """Where a chain's backward hands its cotangents (instead of an outer sweep): their
    sums by node, in the order the nodes were first reached."""

    def __init__(self, ns):
        self.ns = ns
        self.sums = {}  # id(node) -> [node, sum]

    def add(self, node, g):
        entry = self.sums.get(id(node))
        if entry is None:
            self.sums[id(node)] = [node, g]
        else:
            entry[1] = entry[1] + g

    def get(self, node):
        entry = self.sums.get(id(node))
        return None if entry is None else entry[1]


class Arrivals:
    """What a recorded step backward hands outside the step, (node, Tensor) in order."""

    def __init__(self):
        self.ns = TENSOR_NAMESPACE
        self.items = []

    def add(self, node, g):
        self.items.append((node, g))


def tangent_of(t, tangents):
    """The tangent of Tensor ``t`` in ``tangents`` (id(node) -> tangent), or zeros."""
    found = tangent_in(tangents, t.node)
    return found if found is not None else backend.zeros(t.shape, t.dtype, like=t._data)


def zeros_for(parts, spec, like):
    """``parts`` with zeros (of ``spec``'s shapes and dtypes) where one is None."""
    return [
        p if p is not None else backend.zeros(s, d, like=like)
        for p, s, d in zip(parts, spec.shapes, spec.dtypes)
    ]


def tangents_read(records, tangents, step_tape):
    """The tangents a recorded backward of a step's ``records`` reads: those of the
    values their VJPs read (the inputs and outputs they saved), so a taped step
    holds one tangent per array it saves; all of ``tangents`` when a record is a
    chain or a checkpoint, whose rules read what their functions close over.
    Returns (id(node) -> tangent, the tangents of the step's own values)."""
    inputs = {id(node) for node in step_tape.inputs}

    def own(node):
        return node.seq >= step_tape.floor if isinstance(node, Record) else id(node) in inputs

    if any(record.op.custom_tangent is not None for record in records):
        kept = tangents
        nodes = [*records, *step_tape.inputs]
    else:
        kept = {}
        nodes = []
        for record in records:
            for node, a in zip(record.parents, record.args):
                if node and a is not None:
                    nodes.append(node)
            if record.ans is not None:
                nodes.append(record)
        for node in nodes:
            t = tangents.get(id(node))
            if t is not None:
                kept[id(node)] = t
    held = []
    for node in nodes:
        t = kept.get(id(node)) if node and own(node) else None
        if isinstance(t, list):  # a chain's or checkpoint's: its outputs' tangents
            held.extend(t)
        elif t is not None:
            held.append(t)
    return kept, held


class TangentStepTape(StepTape):
    """A step tape that also holds the tangents of the step's records."""

    __slots__ = ("tangents",)


class TangentRun(ChainRun):
    """The chain run again from x_0 under its schedule, every state with its tangent.

    ``current`` and every snapshot hold x_i's leaves then their tangents' (so
    Snapshot, Restore and Free are the first-order actions).  Advance and Tape
    run each step taped and swept forward; a taped step keeps the tangents of
    its records; Reverse records each step's backward and sweeps it forward
    from those tangents and the tangent of the cotangent.  ``outer`` holds the
    tangents of the values the steps close over; ``y_tangents`` collects the
    tangents of the ys when ``collect_ys``.
    """

    def begin(self, tangents, collect_ys):
        """Start from x_0 with the tangents of its leaves (and xs') in ``tangents``."""
        self.outer = tangents
        self.collect_ys = collect_ys and self.chain.has_ys
        self.y_tangents = {}
        x0, rng = self.start
        t0 = [tangent_in(tangents, node) for node in self.x0_nodes]
        self.t_xs = [tangent_in(tangents, node) for node in self.chain.xs_nodes]
        self.current = (tuple(x0) + tuple(zeros_for(t0, self.specs[0], self.like)), rng)
        self.devices = self.devices + self.devices  # a tangent lives where its leaf does

    def step_forward(self, i, state):
        """Step i on (x_i, its tangent): (x_{i+1}, its tangent), the step tape, its records."""
        width = len(self.spec_at(i).shapes)
        t_in = state[width:]
        arrays, out, step_tape, records, inner = self.step_with_tangents(
            i, state[:width], t_in, self.t_xs, self.outer
        )
        width = len(arrays)
        if self.collect_ys and i not in self.y_tangents:
            self.y_tangents[i] = out[width:]
        kept, own = tangents_read(records, inner, step_tape)
        step_tape = TangentStepTape(
            step_tape.inputs,
            step_tape.outputs,
            step_tape.floor,
            step_tape.stop,
            step_tape.saved + own,
        )
        step_tape.tangents = kept
        return tuple(arrays) + tuple(out[:width]), step_tape

    def advance(self, action):
        self.expect_position(action, action.start)
        self.taped_end = None
        state, rng = self.current
        backend.set_random_state(rng)
        for i in range(action.start, action.stop):
            state = self.step_forward(i, state)[0]
            self.mark()
        self.current = (state, backend.random_state())
        self.position = action.stop

    def tape_steps(self, action):
        self.expect_position(action, action.start)
        state, rng = self.current
        backend.set_random_state(rng)
        at = self.fingerprint(state, len(state) // 2)  # x_i's leaves, then their tangents
        for i in range(action.start, action.stop):
            state, step_tape = self.step_forward(i, state)
            self.tapes[i] = step_tape
            self.held.hold(step_tape.saved)
            if at is not None:  # every step of a run again is a recomputation
                returned = fingerprint_all(state[: len(state) // 2], self.full)
                self.junctions.taped(i, at, returned, True)
                at = returned
            self.mark()
            if self.online_forward and self.stop_online(i + 1, state):
                break
        self.current = (state, backend.random_state())
        self.position = i + 1
        self.taped_end = None if at is None else (state, at)

    def reverse(self, action):
        for i in range(action.stop - 1, action.start - 1, -1):
            self.meet(i)
            step_tape = self.tapes.pop(i)
            grads, grad_tangents = self.reverse_with_tangents(
                step_tape,
                self.seeds(i, self.cotangent),
                self.seeds(i, self.cotangent_tangent, self.ys_cotangent_tangent),
            )
            self.cotangent = self.gather(i, grads, self.xs_grads, step_tape)
            self.cotangent_tangent = self.gather(i, grad_tangents, self.xs_tangents, step_tape)
            self.held.release(step_tape.saved)
        self.position = None

    def reverse_with_tangents(self, step_tape, seeds, seed_tangents):
        """Backpropagate ``seeds`` through the step, recording the backward (as a
        nested rm.grad does), then sweep that recording forward from the tangents
        of the step's records and of the seeds.  Returns the cotangents of the
        step's inputs and their tangents; the tangents of the cotangents it
        hands outside (to closed-over values) go to the outer sweep, in order."""
        arrivals = Arrivals()
        recorder = Recorder(forwards=False)
        tangents = dict(self.outer)
        tangents.update(step_tape.tangents)
        with recorder, enable_grad():
            sweep = StepSweep(arrivals, step_tape, create_graph=True)
            for t, g, dg in zip(step_tape.outputs, seeds, seed_tangents):
                if t.node and g is not None:
                    seed = Tensor._stand_in(g)
                    tangents[id(seed.node)] = (
                        dg if dg is not None else backend.zeros(g.shape, g.dtype, like=g)
                    )
                    sweep.add(t.node, seed)
            sweep.run()
        tangents = forward_sweep(recorder.records, tangents)
        for node, g in arrivals.items:
            self.outer_sweep.add(node, tangent_of(g, tangents))
        grads = [None if g is None else g._data for g in sweep.input_grads]
        return grads, [None if g is None else tangent_of(g, tangents) for g in sweep.input_grads]

    def reverse_from(self, cotangent, tangent, sink):
        """The reverse sweep from the cotangent of the outputs and its tangent."""
        final = self.spec_at(self.stats.steps)
        width = len(final.shapes)
        self.cotangent_tangent = zeros_for(tangent[:width], final, self.like)
        self.ys_cotangent_tangent = [
            t if t is not None or g is None else backend.zeros(g.shape, g.dtype, like=g)
            for t, g in zip(tangent[width:], cotangent.parts[width:])
        ]
        self.xs_tangents = [None] * len(self.chain.xs)
        self.backward(cotangent, sink)

    def deliver(self, sweep, state, xs_grads):
        super().deliver(sweep, self.cotangent_tangent, self.xs_tangents)

    def release(self):
        super().release()
        self.outer = self.y_tangents = self.cotangent_tangent = None
        self.ys_cotangent_tangent = self.xs_tangents = None


def _invert_with_tangents(run, action):
    raise NotImplementedError(
        "second order (rm.hvp, rm.grad of rm.grad) through a reversible loop "
        "(tape.loop(..., inverse=)) is not supported: the inverse recomputes the states, "
        "not their tangents. Run the loop without inverse= (under any schedule) for second "
        "order"
    )


TangentRun.HANDLERS = {
    **HANDLERS,
    schedules.Advance: TangentRun.advance,
    schedules.Tape: TangentRun.tape_steps,
    schedules.Reverse: TangentRun.reverse,
    schedules.Invert: _invert_with_tangents,
}


class Adjoint:
    """What a `loop_adjoint` record keeps: the chain's run, the cotangent of its
    outputs it was reversed with, and the nodes whose cotangents it gave."""

    __slots__ = ("run", "cotangent", "nodes")

    def __init__(self, run, cotangent, nodes):
        self.run, self.cotangent, self.nodes = run, cotangent, nodes

    def with_tangents(self, tangents, cotangent_tangents, collect_outputs=False):
        """Run the chain again with tangents: ``tangents`` (id(node) -> tangent) for
        x_0, xs and what the steps close over, ``cotangent_tangents`` for the
        cotangent.  Returns (the tangents of the chain's outputs when
        ``collect_outputs``, else None; those of the gradient, per node)."""
        run = self.run.again(TangentRun)
        outer_rng = backend.random_state()
        try:
            run.begin(tangents, collect_outputs)
            final, _ = run.run_forward(again=True)
            outputs = None
            if collect_outputs:
                width = len(run.spec_at(run.stats.steps).shapes)
                outputs = list(final[width:])
                if run.chain.has_ys:
                    n = run.stats.steps
                    outputs += [
                        backend.xp.stack([run.y_tangents[i][k] for i in range(n)])
                        for k in range(len(run.ys_spec.shapes))
                    ]
            sums = Totals(backend.ARRAY_NAMESPACE)
            run.reverse_from(StateCotangent(list(self.cotangent), None), cotangent_tangents, sums)
        finally:
            backend.set_random_state(outer_rng)
            run.release()
        gradient = []
        for node in self.nodes:
            t = sums.get(node)
            if t is None:
                raise LoopError(
                    f"{run.chain.owner}: run again with tangents, its backward reached no "
                    f"cotangent for a {node!r} that the first backward reached"
                )
            gradient.append(t)
        return outputs, gradient


def recorded_backward(run, g, sweep):
    """The chain's backward for a sweep that records its own: the gradient as in a
    first-order backward, given to ``sweep`` as outputs of one `loop_adjoint` record."""
    parts = [None if p is None else p._data for p in g.parts]
    first = run
    if run.reversed:
        first = run.again()
        first.run_forward(again=True)
    run.reversed = True
    sums = Totals(backend.ARRAY_NAMESPACE)
    first.backward(StateCotangent(parts, g.shape), sums)
    nodes = [node for node, _ in sums.sums.values()]
    values = [total for _, total in sums.sums.values()]
    cotangent_nodes = tuple(None if p is None else p.node or None for p in g.parts)
    adjoint = Adjoint(run, parts, nodes)
    outputs = outputs_of(
        ADJOINT, (adjoint,), cotangent_nodes + tuple(nodes), values, tuple(v.shape for v in values)
    )
    for node, t in zip(nodes, outputs):
        sweep.add(node, t)


def _adjoint_tangent(record, tangents):
    """Forward over reverse (rm.hvp): the tangent of the chain's gradient."""
    adjoint = record.args[0]
    width = len(adjoint.cotangent)
    cotangent_tangents = [tangent_in(tangents, node) for node in record.parents[:width]]
    return adjoint.with_tangents(tangents, cotangent_tangents)[1]


def _adjoint_backward(record, g, sweep):
    """Reverse over reverse (rm.grad of rm.grad): the VJP of the gradient at ``g``."""
    if sweep.create_graph:
        raise BackwardError(
            "a third derivative through a checkpointed tape.loop / chain / scan is not "
            "supported: the backward of its gradient (reverse over reverse) is computed, "
            "not recorded. Second order (rm.hvp, rm.grad of rm.grad) works"
        )
    adjoint = record.args[0]
    width = len(adjoint.cotangent)
    direction = {id(node): w for node, w in zip(adjoint.nodes, g.parts) if w is not None}
    outputs, gradient = adjoint.with_tangents(direction, [None] * width, collect_outputs=True)
    cotangent_nodes = record.parents[:width]
    if not sweep.retain_graph:
        record.release()
    for node, t in zip(cotangent_nodes, outputs):
        if node is not None:
            sweep.add(node, t)
    for node, t in zip(adjoint.nodes, gradient):
        sweep.add(node, t)


ADJOINT = Op(
    "loop_adjoint",
    None,
    (),
    None,
    custom_backward=_adjoint_backward,
    custom_tangent=_adjoint_tangent,
)


def fingerprint_all(arrays: Iterable[Any], full: bool = False) -> int:
    """One fingerprint of all of ``arrays``, in order (see backend.replay_fingerprint)."""
    value = 0
    for a in arrays:
        value = backend.replay_fingerprint(a, value, full)
    return value


def run_chain(tape, chain, state, schedule, until=None, max_steps=None, plan_with_tangents=None):
    """Run ``chain`` from ``state`` following ``schedule``; return (final state, ys).

    The chain is one record on the open tape (when gradients are on); its
    backward runs the rest of the schedule.  ``plan_with_tangents`` (under
    ``rm.Tape(memory=)``): a callable that gives the schedule of the chain's
    run with tangents (``rm.hvp``, ``rm.grad`` of ``rm.grad``), which then
    holds no more than the budget either; without it that run follows
    ``schedule`` again.
    """
    x0, x0_nodes, tree0 = leaves_of(state, "the initial state", copy_arrays=True)
    refuse_complex_leaves(x0, f"{chain.owner}: leaf {{}} of the initial state")
    spec0 = Spec.of(tree0, x0)
    # rm.Tape(policy=): the steps keep values for their recomputations (store-all has none;
    # a reversible loop's recomputations start from reconstructed states, which kept values
    # of the exact ones would not match)
    keeps = getattr(tape, "recompute", None) is not None
    if isinstance(schedule, schedules.StoreAll) or getattr(schedule, "reconstructs", False):
        keeps = False
    kind = KeepingRun if keeps else ChainRun
    run = kind(tape, chain, schedule, x0, x0_nodes, spec0, until, max_steps)
    run.plan_with_tangents = plan_with_tangents
    try:
        final, ys = run.run_forward()
    except BaseException:
        run.release()
        raise
    tape.loops.append(run.stats)
    final_spec = run.spec_at(run.stats.steps)
    arrays = tuple(final) + tuple(ys)
    y_tree = run.ys_spec.tree if chain.has_ys else None
    parents = tuple(x0_nodes) + tuple(chain.xs_nodes)
    if not GRAD_ENABLED.get():
        run.release()
        outputs = [Tensor._wrap(a) for a in arrays]
    else:
        # Recorded even when nothing in x_0 needs a gradient: a step may use a
        # parameter in steps that were not taped in the forward sweep.
        # (A recorder open around the tape, a step's say, lists these records too.)
        with tape:
            outputs = outputs_of(CHAIN, (run,), parents, arrays, tuple(a.shape for a in arrays))
    width = len(final)
    new_state = unflatten(final_spec.tree, outputs[:width])
    ys_out = unflatten(y_tree, outputs[width:]) if y_tree is not None else None
    return new_state, ys_out
