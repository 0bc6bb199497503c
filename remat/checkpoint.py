"""``rm.checkpoint(f)``: compute ``f`` now, keep only its inputs, recompute it in backward.

As ``torch.utils.checkpoint`` or ``jax.checkpoint``: the wrapped function
has f's signature and gives f's results, but nothing inside f is recorded.
One record stands for the whole call, holding f's inputs (and the state of
``rm.random``).  Its backward evaluates f again, this time recording it,
replaying the same random numbers, and backpropagates through that
recording; parameters f closes over get their gradients then.  Gradients
are bit for bit those without checkpointing.

Arguments and results may be pytrees of Tensors (and arrays).  Checkpoints
nest, and mix with checkpointed loops in either direction.  The replay check
of :mod:`remat.executor` applies: a recomputation that gives other values
than the first run is refused (unless the open ``rm.Tape`` has
``check_replay=False``).

``rm.checkpoint(f, policy=p)`` is selective recomputation
(:mod:`remat.policies`, :mod:`remat.selective`): the first run keeps the
outputs of the ops ``p`` chooses, held by the call's record (and counted in
its bytes), and the recomputation reuses them instead of evaluating those ops
again, checking op by op that it evaluates what the first run did.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import alive, backend, guard
from .dual import tangent_in
from .executor import (
    CARRY_REAL,
    REPLAY_CAUSES,
    Forward,
    ReplayError,
    Spec,
    StepTape,
    fingerprint_all,
    is_value,
    leaves_of,
    outputs_of,
    refuse_complex_leaves,
    reverse_step,
    saved_by,
    tape_call,
)
from .functional import forward_sweep
from .ops.core import Op
from .policies import Policy, resolve
from .pytree import flatten, unflatten
from .selective import Reusing, Saving, within
from .tape import (
    FORWARD_MODE,
    GRAD_DEPTH,
    GRAD_ENABLED,
    OPEN_TAPE,
    STEP,
    BackwardError,
    EscapeError,
    Record,
    Recorder,
    StepValue,
    enable_grad,
    next_sequence,
    untaped,
)
from .tensor import Tensor, refuse_complex


def checkpoint(
    f: Callable[..., Any] | None = None,
    policy: Policy | Callable[[str, str | None], bool] | None = None,
) -> Callable[..., Any]:
    """``f`` checkpointed: the same function, keeping only its inputs for backward.

    Use it as ``rm.checkpoint(f)(x)`` or as a decorator (``@rm.checkpoint``, or
    ``@rm.checkpoint(policy=...)``).  ``policy`` (:mod:`remat.policies`)
    chooses op outputs of f's first run to keep as well, which the
    recomputation reuses instead of evaluating those ops again; None (or
    ``save_nothing``) keeps nothing.  A policy is any callable
    ``policy(op_name, value_name) -> bool``, called positionally.

    >>> import remat as rm
    >>> @rm.checkpoint
    ... def block(h):
    ...     return rm.tanh(h) * 2.0
    >>> x = rm.tensor([0.0, 1.0], requires_grad=True)
    >>> with rm.Tape() as tape:
    ...     y = block(block(x)).sum()
    >>> [r.op.name for r in tape.records]  # tanh and * are recomputed at backward
    ['checkpoint', 'loop_output', 'checkpoint', 'loop_output', 'sum']
    >>> y.backward(); x.grad.round(6)
    array([4.      , 0.291061])
    """
    chosen = resolve(policy, "rm.checkpoint")
    if f is None:
        return lambda g: checkpoint(g, policy)
    if not callable(f):
        raise TypeError(f"rm.checkpoint: f must be callable, got {f!r}")
    name = f"rm.checkpoint({getattr(f, '__name__', 'f')})"

    @functools.wraps(f)
    def checkpointed(*args, **kwargs):
        if not GRAD_ENABLED.get():
            return f(*args, **kwargs)
        arrays, nodes, tree = leaves_of((args, kwargs), f"{name}: its arguments", copy_arrays=True)
        for k, (a, node) in enumerate(zip(arrays, nodes)):
            # a complex constant is f's business; one that requires grad would be cut
            if node and a.dtype.kind == "c":
                refuse_complex(a, f"{name}: argument leaf {k}", allowed=CARRY_REAL)
        rng = backend.random_state()
        context = STEP.get()
        forward = Forward()
        check = getattr(OPEN_TAPE.get(), "check_replay", True)
        saving = None if chosen is None else Saving(chosen, bool(check), check == "full")
        token = STEP.set(StepValue(name, None, context))  # what f makes is f's own
        try:
            with untaped():  # unlike no_grad, what f makes keeps f's marker
                out = within(saving, lambda: f(*args, **kwargs))
            out_arrays, _, out_tree = leaves_of(out, f"{name}: its result", True)
        finally:
            STEP.reset(token)
        if not out_arrays:
            raise TypeError(f"{name}: f must return Tensors (or a pytree of them), got {out!r}")
        refuse_complex_leaves(out_arrays, f"{name}: leaf {{}} of its result")
        call = Call(f, name, tree, arrays, rng, Spec.of(out_tree, out_arrays), context, forward)
        call.kept = None if saving is None else saving.kept()
        call.full = check == "full"
        call.fingerprints = fingerprint_all(out_arrays, call.full) if check else None
        results = outputs_of(CHECKPOINT, (call,), nodes, out_arrays, call.spec.shapes)
        return unflatten(out_tree, results)

    return checkpointed


class Call:
    """What a checkpointed call keeps: f, its inputs, the random state before it, and
    what its policy kept of the first run (a :class:`remat.selective.Kept`, or None)."""

    __slots__ = (
        "f",
        "name",
        "tree",
        "arrays",
        "rng",
        "spec",
        "context",
        "full",
        "fingerprints",
        "checks",
        "seq",
        "forward",
        "kept",
        "spliced",
        "grad_depth",
    )

    def __init__(self, f, name, tree, arrays, rng, spec, context, forward):
        self.spliced = None  # the nodes of f's outputs once spliced into a recorded backward
        self.f, self.name, self.tree, self.arrays, self.rng = f, name, tree, arrays, rng
        self.spec = spec  # what f returned: checked when it is recomputed
        self.context = context  # the loop step the call ran inside, if any
        self.checks = guard.checks(arrays) if guard.WATCHED else None
        self.seq = next_sequence()
        self.forward = forward  # what the values it read held then: checked at recompute
        self.kept = None  # what a policy kept of the first run (remat.selective.Kept)
        # how deep inside rm.grad the call ran: a recomputation in backward (after that
        # rm.grad's f returned) runs as deep, so that rm.jvp and rm.grad inside f take
        # the path they took then (Tensors on the tape), whatever recomputes f
        self.grad_depth = GRAD_DEPTH.get()

    def held_arrays(self):
        """The arrays this call holds for its backward: its inputs and what its policy kept."""
        arrays = list(self.arrays)
        if self.kept is not None:
            arrays += self.kept.arrays()
        return arrays

    @property
    def nbytes(self):
        """Bytes held for its backward (each buffer once): its inputs and the kept values."""
        return alive.nbytes(self.held_arrays())

    def reusing(self):
        """The frame under which a recomputation reuses what was kept, or None."""
        if self.kept is None:
            return None
        return Reusing(self.kept, self.name, ReplayError, self.full, self.forward.what_changed)

    def splice(self, nodes, seq):
        """f evaluated again on its inputs themselves, recorded as ordinary records
        that hang off the inputs' own nodes: for a backward that is itself
        differentiated (rm.grad of rm.grad, rm.hvp), which then reverses them
        like any other part of the graph.  The records are numbered just below
        ``seq`` (the checkpoint's own record), where the computation they
        recompute stood, so that a later sweep meets them after the checkpoint's
        record, which hands them its cotangents (see _checkpoint_backward): f's
        outputs then gather their cotangents in one place, as without
        checkpointing, and second derivatives agree bit for bit.  Returns f's
        output leaf Tensors."""
        inputs = [Tensor._from_record(a, node) for a, node in zip(self.arrays, nodes)]
        args, kwargs = unflatten(self.tree, inputs)
        rng = backend.random_state()
        backend.set_random_state(self.rng)
        reusing = self.reusing()
        recorder = Recorder()  # lists them (and hands them on to an open tape: rm.jvp's)
        try:
            with recorder, enable_grad():
                out = within(reusing, lambda: self.f(*args, **kwargs))
        finally:
            backend.set_random_state(rng)
        if reusing is not None:
            reusing.finish()
        out_arrays, _, out_tree = leaves_of(out, f"{self.name}: its result", True)
        self.forward.refuse_changed(recorder.records, self.name)
        self.check_replay(out_tree, out_arrays)
        outputs = flatten(out, is_value)[0]
        if number_below(recorder.records, seq):
            self.spliced = [t.node if isinstance(t, Tensor) else None for t in outputs]
        return outputs

    def check_replay(self, out_tree, out_arrays):
        """Refuse a recomputation that does not give what the first run gave."""
        wrong = self.spec.differs(Spec.of(out_tree, out_arrays))
        if wrong is None and self.fingerprints is not None:
            if fingerprint_all(out_arrays, self.full) != self.fingerprints:
                wrong = "different values (the same structure, shapes and dtypes)"
        if wrong is not None:
            raise ReplayError(
                f"{self.name} was recomputed in backward and returned {wrong} than its first "
                f"run. {self.forward.what_changed() or REPLAY_CAUSES}"
            )

    def recompute(self, nodes, keep_records=False):
        """f evaluated again on the stored inputs, recorded: a StepTape (and its
        records, with ``keep_records``)."""
        k = guard.changed(self.arrays, self.checks, self.seq)
        if k is not None:
            raise BackwardError(
                f"backward through {self.name}: its argument leaf {k} (shape "
                f"{self.arrays[k].shape}) was changed in place after the call (through .data, "
                "np.asarray(t) or a view of them), so recomputing f would give wrong gradients"
            )
        marker = StepValue(self.name, None, self.context)
        inputs = [
            Tensor._stand_in(a)
            if node and backend.is_floating(a.dtype)
            else Tensor._from_record(a, marker)
            for a, node in zip(self.arrays, nodes)
        ]
        input_nodes = [t.node for t in inputs]  # now: f may rebind its inputs (x *= 2)
        args, kwargs = unflatten(self.tree, inputs)
        rng = backend.random_state()
        backend.set_random_state(self.rng)
        token, depth = STEP.set(marker), GRAD_DEPTH.set(self.grad_depth)
        reusing = self.reusing()
        try:
            out, floor, stop, records = tape_call(
                lambda: within(reusing, lambda: self.f(*args, **kwargs))
            )
            out_arrays, _, out_tree = leaves_of(out, f"{self.name}: its result", True)
        finally:
            GRAD_DEPTH.reset(depth)
            STEP.reset(token)
            backend.set_random_state(rng)
        self.forward.refuse_changed(records, self.name)
        if reusing is not None:
            reusing.finish()
        self.check_replay(out_tree, out_arrays)
        outputs = [
            t if isinstance(t, Tensor) else Tensor._wrap(t) for t in flatten(out, is_value)[0]
        ]
        step_tape = StepTape(
            input_nodes, outputs, floor, stop, saved_by(records, floor, input_nodes)
        )
        return (step_tape, records) if keep_records else step_tape


def number_below(records, seq):
    """Give ``records`` (made just now, in order) sequence numbers between ``seq`` and
    the latest record they read, in the same order; False (and nothing changed)
    when no such room exists."""
    own = {id(r) for r in records}
    read = [
        p.seq
        for r in records
        for p in r.parents or ()
        if isinstance(p, Record) and id(p) not in own
    ]
    low = max([seq - 1, *read])
    numbers = [low + (seq - low) * (k + 1) / (len(records) + 1) for k in range(len(records))]
    if not all(low < a < b for a, b in zip(numbers, [*numbers[1:], seq])):
        return False
    for record, number in zip(records, numbers):
        record.seq = number
    return True


def _checkpoint_backward(record, g, sweep):
    call, nodes = record.args[0], record.parents
    if call.spliced is not None:  # recomputed into a recorded backward: cotangents go there
        if not sweep.retain_graph:
            record.release()
        for node, gk in zip(call.spliced, g.parts):
            if node and gk is not None:
                sweep.add(node, gk)
        return
    if sweep.create_graph:  # differentiated again: splice the recomputation into the graph
        outputs = call.splice(nodes, record.seq)
        for t, gk in zip(outputs, g.parts):
            if t.node and gk is not None:
                sweep.add(t.node, gk)
        return
    if not sweep.retain_graph:
        record.release()  # the inputs go once they are used (unless retained)
    try:
        step_tape = call.recompute(nodes)
    except (BackwardError, EscapeError, ReplayError):
        raise
    except Exception as error:
        raise BackwardError(
            f"{call.name} raised {type(error).__name__} while being recomputed in backward: {error}"
        ) from error
    # The call's inputs and what its policy kept have served the recomputation: let them
    # go (unless the record, retained, holds them), so that what no record saved is freed
    # now and what one did goes as the sweep passes that record.
    call = None
    reverse_step(sweep, step_tape, g.parts, hand_on=nodes)


def _checkpoint_tangent(record, tangents):
    """Forward mode: f recomputed on the stored inputs, carrying their tangents (and
    those of the values f closes over, already in ``tangents``)."""
    call, nodes = record.args[0], record.parents
    token = FORWARD_MODE.set(True)  # chains inside f keep x_0 to run again with tangents
    try:
        step_tape, records = call.recompute(nodes, keep_records=True)
    finally:
        FORWARD_MODE.reset(token)
    seeds = dict(tangents)
    for node, stand_in in zip(nodes, step_tape.inputs):
        t = tangent_in(tangents, node)
        if t is not None:
            seeds[id(stand_in)] = t
    inner = forward_sweep(records, seeds)
    out = []
    for t in step_tape.outputs:
        tangent = inner.get(id(t.node)) if t.node else None
        out.append(
            tangent if tangent is not None else backend.zeros(t.shape, t.dtype, like=t._data)
        )
    return out


CHECKPOINT = Op(
    "checkpoint",
    None,
    (),
    None,
    custom_backward=_checkpoint_backward,
    custom_tangent=_checkpoint_tangent,
)
