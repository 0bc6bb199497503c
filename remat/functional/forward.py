"""Forward mode: ``rm.jvp`` (tangents pushed forward with the ops' tangent rules) and
``rm.hvp`` (forward over reverse).

``jvp`` runs ``f`` once on dual numbers (:mod:`remat.dual`): each op computes
its output's tangent at once.  What needs the tape switches the call to
recording, and :func:`forward_sweep` then walks the records in the order they
were made, applying the same rules to arrays; inside another transform the
rules are applied to Tensors instead (:func:`_sweep_tensors`), so that the
outer call differentiates the tangents too.  ``hvp`` is ``jvp`` of ``rm.grad``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import backend, guard, selective
from ..dual import (
    SWEEPING,
    Dual,
    Seeded,
    Trace,
    dual,
    no_tangent_rule,
    node_of,
    seeded_tangent,
)
from ..ops import astype
from ..pytree import flatten, unflatten
from ..tape import (
    FORWARD_MODE,
    GRAD_DEPTH,
    GRAD_ENABLED,
    STEP,
    BackwardError,
    Record,
    Recorder,
    _as_tensors,
    enable_grad,
    next_sequence,
)
from ..tensor import Tensor, refuse_complex
from .reverse import grad, is_value, target

if TYPE_CHECKING:
    from ..typing import PyTree


def jvp(
    f: Callable[..., PyTree], primals: tuple[PyTree, ...], tangents: tuple[PyTree, ...]
) -> tuple[PyTree, PyTree]:
    """``(f(*primals), J v)``: the value of ``f`` and its directional derivative along
    ``tangents``, by forward mode (as ``jax.jvp``).

    ``primals`` and ``tangents`` are tuples of the same structure (arrays,
    Tensors, pytrees of them).  ``f`` runs once.  Its inputs carry their
    tangents (:class:`remat.dual.Dual`) and each op computes its output's
    tangent at once with its tangent rule (``jvps`` in the op table): nothing
    is recorded.  What needs the tape (a checkpointed loop, ``rm.grad`` inside
    ``f``, a tensor that requires grad) switches the call to recording: remat
    then records the rest of ``f`` and walks those records in the order they
    were made, applying the same rules (:func:`forward_sweep`); the tangents
    are the same bit for bit either way.  Results are arrays, in ``f``'s output
    structure, except inside ``rm.grad`` or another ``rm.jvp``, or on primals
    or tangents that require grad: there ``f`` is recorded, its tangents are
    computed with the rules applied to Tensors, and the results are Tensors on
    the tape, so that the outer call differentiates them (reverse over forward,
    forward over forward).  Inside a loop step or a checkpointed function the results
    are that step's Tensors in every run, as ``rm.grad``'s are, so that the step
    computes the same ops untaped and taped.  ``rm.checkpoint`` recomputes its
    function with tangents, and
    a checkpointed loop, chain or scan runs its steps again from x_0 with
    theirs (one state of memory more, not the whole chain).  A backward
    recorded inside ``f`` (``rm.grad`` of a chain: :func:`hvp`) is swept
    forward too: the chain runs again under its schedule carrying tangents
    (see :class:`remat.executor.TangentRun`).

    A float primal is a 0-d array; a number ``f`` returns is a constant (zero
    tangent).

    >>> import numpy as np, remat as rm
    >>> value, slope = rm.jvp(lambda x: x * x, (np.array([3.0]),), (np.array([1.0]),))
    >>> value, slope
    (array([9.]), array([6.]))
    """
    if not isinstance(primals, tuple) or not isinstance(tangents, tuple):
        raise TypeError("rm.jvp: primals and tangents must be tuples (one entry per argument)")
    leaves, tree = flatten(primals, _is_primal)
    tangent_leaves, tangent_tree = flatten(tangents, _is_primal)
    if tangent_tree != tree:
        static = [v for v in flatten(primals, backend.is_number)[0] if not _is_primal(v)]
        hint = (
            f"; {static[0]!r} in primals is an int (or bool), which is static, not "
            f"differentiated: pass {float(static[0])!r} to differentiate it"
            if static
            else ""
        )
        raise ValueError(f"rm.jvp: tangents have structure {tangent_tree}, primals {tree}{hint}")
    if _inside_a_transform(leaves, tangent_leaves):
        return _differentiable_jvp(f, tree, leaves, tangent_leaves)
    trace = Trace()  # eager: each op computes its tangent at once (remat.dual) ...
    inputs = []
    try:
        for k, (p, t) in enumerate(zip(leaves, tangent_leaves)):
            data = target(k, p.detach() if isinstance(p, Tensor) else p, False, "rm.jvp")._data
            t = backend.asarray(t._data if isinstance(t, Tensor) else t)
            if t.shape != data.shape:
                raise ValueError(
                    f"rm.jvp: tangent {k} has shape {t.shape} but its primal has shape {data.shape}"
                )
            refuse_complex(t, f"rm.jvp: tangent {k} (in flattened order)", data.dtype)
            inputs.append(dual(data, t.astype(data.dtype, copy=False), trace))
            trace.inputs.add(id(inputs[-1]))
        recorder = Recorder()  # ... until something needs the tape (then Duals become leaves)
        floor = next_sequence()  # records made from here on are this call's (any thread's)
        token = FORWARD_MODE.set(True)  # checkpointed chains keep x_0 to run again with tangents
        try:
            with recorder, enable_grad():
                out = f(*unflatten(tree, inputs))
        finally:
            FORWARD_MODE.reset(token)
        outs, out_tree = flatten(out, _is_output)
        sweeping = SWEEPING.set(trace)
        try:
            values, out_tangents = _results(outs, trace, recorder, floor)
        finally:
            SWEEPING.reset(sweeping)
    finally:
        trace.close()
    marker = STEP.get()
    if marker is not None:  # inside a loop step (or checkpointed function) run untaped: the
        # step's values, as rm.grad's there, so it computes alike when taped (Tensors then)
        values = [Tensor._from_record(v, marker) for v in values]
        out_tangents = [Tensor._from_record(t, marker) for t in out_tangents]
    return unflatten(out_tree, values), unflatten(out_tree, out_tangents)


def _inside_a_transform(leaves, tangent_leaves):
    """Whether rm.jvp runs where its results must stay differentiable: inside rm.grad
    or another rm.jvp, or on primals or tangents that are themselves recorded."""
    if not GRAD_ENABLED.get():
        return False
    if GRAD_DEPTH.get() > 0 or FORWARD_MODE.get():
        return True
    return any(isinstance(v, Tensor) and v.node for v in (*leaves, *tangent_leaves))


def _differentiable_jvp(f, tree, leaves, tangent_leaves):
    """rm.jvp whose results are Tensors on the tape: f is recorded, and its tangents are
    swept forward with the rules applied to Tensors (as a differentiated backward
    applies its VJP rules), so that an outer rm.grad or rm.jvp differentiates both
    the value and the tangent, with respect to the primals, the tangents and what
    f closes over."""
    from ..ops import as_tensor

    with selective.Unobserved():  # what a first run on Duals does not evaluate
        seeds, inputs = _seeded_inputs(leaves, tangent_leaves)
    recorder = Recorder()
    floor = next_sequence()  # records made from here on are this call's (any thread's)
    token = FORWARD_MODE.set(True)
    try:
        with recorder, enable_grad():
            out = f(*unflatten(tree, inputs))
    finally:
        FORWARD_MODE.reset(token)
    with selective.Unobserved():
        tangents = dict(seeds)
        listed = {id(r) for r in recorder.records}
        _sweep_tensors(recorder.records, tangents, floor, listed)
        outs, out_tree = flatten(out, _is_output)
        values, out_tangents = [], []
        for o in outs:
            o = as_tensor(o)
            node = o.node
            t = tangents.get(id(node)) if node else None
            if t is None and isinstance(node, Record) and node.seq >= floor:
                if node.parents is None:
                    raise _freed_in_f(node)
                # an output made in another thread: sweep what it reaches
                _sweep_tensors(_missed(node, tangents, listed, floor), tangents, floor, listed)
                t = tangents.get(id(node))
            if t is None:
                t = Tensor._wrap(backend.zeros(o.shape, o.dtype, like=o._data))
            refuse_complex(t._data, _OUTPUT_TANGENT.format(len(values)), o.dtype, _COMBINED)
            values.append(o)
            out_tangents.append(t)
    return unflatten(out_tree, values), unflatten(out_tree, out_tangents)


def _seeded_inputs(leaves, tangent_leaves):
    """The Tensors f gets (each stays connected to its primal's graph, if any) and the
    sweep's seeds, id(node) -> tangent (a Tensor, in its primal's dtype)."""
    from ..ops import as_tensor

    seeds, inputs = {}, []
    for k, (p, t) in enumerate(zip(leaves, tangent_leaves)):
        leaf = target(k, p, True, "rm.jvp")  # p's graph's, or a ConstantInput
        t = as_tensor(t)
        if t.shape != leaf.shape:
            raise ValueError(
                f"rm.jvp: tangent {k} has shape {t.shape} but its primal has shape {leaf.shape}"
            )
        refuse_complex(t._data, f"rm.jvp: tangent {k} (in flattened order)", leaf.dtype)
        seeds[id(leaf.node)] = t if t.dtype == leaf.dtype else astype(t, leaf.dtype)
        inputs.append(leaf)
    return seeds, inputs


def _sweep_tensors(records, tangents, floor, listed):
    """:func:`_sweep` for :func:`_differentiable_jvp`: the tangent rules applied to
    Tensors (each term recorded), filling ``tangents`` in place.  As there, a
    record's saved arrays are checked before they are read (an array changed in
    place since raises), and a record made since ``floor`` in another thread
    (``listed`` holds the ids of those swept or to be swept) is swept when it is
    first met.  A Dual's leaf (of an outer eager rm.jvp) carries no tangent of
    this call's: it is what f closes over."""
    from ..ops import TENSOR_NAMESPACE as ns

    oldest, verified = guard.OLDEST, {}
    for record in records:
        if record.parents is None:
            continue
        if record.checks is not None or record.seq < oldest[0]:
            record.check_saved(verified, "rm.jvp's forward sweep")
        op = record.op
        if op.custom_tangent is not None:
            raise NotImplementedError(
                f"rm.jvp inside rm.grad or another rm.jvp (or on values that require grad) "
                f"cannot go through `{op.name}`, a checkpointed loop, chain, scan or "
                "rm.checkpoint: its tangent is computed on arrays, which would cut the "
                "outer derivative. Differentiate the checkpointed part at the top level "
                "(rm.hvp and rm.grad(rm.grad(f)) go through it)"
            )
        args = ans = None
        total = None
        for i, node in enumerate(record.parents):
            if node is None:
                continue
            t = tangents.get(id(node))
            if t is None and isinstance(node, Record) and node.seq >= floor:
                if node.parents is None:
                    raise _freed_in_f(node)
                if id(node) in listed:
                    continue  # swept already: no tangent flows into it
                _sweep_tensors(_missed(node, tangents, listed, floor), tangents, floor, listed)
                t = tangents.get(id(node))
            if t is None:
                continue
            if op.jvps is None:
                raise no_tangent_rule(op)
            if args is None:
                args, ans = _as_tensors(record)
            part = op.jvps[i](ns, t, ans, *args, **(record.kwargs or {}))
            total = part if total is None else total + part
        if total is not None:
            if total.shape != record.shape:
                total = ns.broadcast_to(total, record.shape)
            tangents[id(record)] = total


def _is_primal(v):
    """A leaf of rm.jvp's primals and tangents: an array, a Tensor or a float (0-d)."""
    return is_value(v) or backend.is_float_scalar(v)


def _is_output(v):
    """A leaf of f's result with a tangent: a value, or a number (a constant: zeros)."""
    return is_value(v) or backend.is_number(v)


def _results(outs, trace, recorder, floor):
    """The values of ``outs`` (copies) and their tangents, each an array of its own: a
    Dual's own, or the forward sweep's over what was recorded after the switch (zeros
    where none flows; a number f returned is a constant)."""
    tangent_of = listed = None
    values, out_tangents, seen = [], [], set()
    for o in outs:
        data = o._data if isinstance(o, Tensor) else backend.asarray(o)
        node = node_of(o) if isinstance(o, Tensor) else None
        if type(o) is Dual and node is None:
            t = o.tangent if o.trace is trace else None
        elif node:
            if tangent_of is None:
                tangent_of = forward_sweep(recorder.records, trace.seeds(), floor)
            t = tangent_of.get(id(node))
            if t is None and isinstance(node, Record) and node.seq >= floor:
                if node.parents is None:
                    raise _freed_in_f(node)
                if listed is None:  # an output made in another thread: sweep what it reaches
                    listed = {id(r) for r in recorder.records}
                _sweep(_missed(node, tangent_of, listed, floor), tangent_of, floor, listed)
                t = tangent_of.get(id(node))
        else:
            t = None
        values.append(backend.copy(data))
        if t is not None:
            refuse_complex(t, _OUTPUT_TANGENT.format(len(out_tangents)), data.dtype, _COMBINED)
        if t is None:
            t = backend.zeros(data.shape, data.dtype, like=data)
        elif not backend.is_array(t):  # a NumPy scalar, from a full reduction
            t = backend.asarray(t, dtype=data.dtype)
        elif t.dtype != data.dtype:  # float32 + float64: the value's dtype, as a gradient
            t = t.astype(data.dtype)
        elif id(t) in seen or not backend.is_owned(t):  # shared, or a view (broadcast_to)
            t = backend.copy(t)
        seen.add(id(t))
        out_tangents.append(t)
    return values, out_tangents


_OUTPUT_TANGENT = "rm.jvp: the tangent of output {} of f (in flattened order)"
_COMBINED = (
    "a complex value was combined with the output, and its tangent cast to the output's "
    "dtype would lose its imaginary part (reverse mode refuses the same gradient). remat "
    "differentiates real functions only; take the real part where it belongs"
)


def forward_sweep(records, seeds, floor=None):
    """Tangents of ``records``' outputs (id(record) -> array), in the order they were
    made, from ``seeds`` (id(leaf node) -> tangent).

    Each record is first checked as backward checks it: an array it saved that was
    changed in place since raises (remat.guard).  With ``floor`` (the sequence
    number a jvp call began at), a record made since that an input reaches but
    ``records`` lack, made in another thread (whose Recorder is its own), is swept
    when it is first met, with what it reaches in turn.
    """
    tangents = dict(seeds)
    _sweep(records, tangents, floor, None)
    return tangents


def _sweep(records, tangents, floor, listed):
    """forward_sweep's loop, filling ``tangents`` in place; ``listed`` holds the ids of
    the records swept or to be swept (made when first needed)."""
    ns = backend.ARRAY_NAMESPACE
    get = tangents.get
    oldest, verified = guard.OLDEST, {}
    for record in records:
        parents = record.parents
        if parents is None:
            continue
        if record.checks is not None or record.seq < oldest[0]:
            record.check_saved(verified, "rm.jvp's forward sweep")
        op = record.op
        if op.custom_tangent is not None:  # a chain or checkpoint: its outputs' tangents,
            tangents[id(record)] = op.custom_tangent(record, tangents)  # closed-over ones too
            continue
        rules, kw, total = op.jvps, record.kwargs, None
        i = -1
        for node in parents:  # each input's tangent through its rule, summed
            i += 1
            if node is None:
                continue
            t = get(id(node))
            if t is None:
                if type(node) is Seeded:
                    t = seeded_tangent(node)  # a Dual of the jvp being swept (remat.dual)
                    if t is None:
                        continue
                elif floor is not None and isinstance(node, Record) and node.seq >= floor:
                    if node.parents is None:
                        raise _freed_in_f(node)
                    if listed is None:
                        listed = {id(r) for r in records}
                    if id(node) in listed:
                        continue  # swept already: no tangent flows into it
                    _sweep(_missed(node, tangents, listed, floor), tangents, floor, listed)
                    t = get(id(node))
                    if t is None:
                        continue
                else:
                    continue
            if rules is None:
                raise no_tangent_rule(op)
            if kw:
                part = rules[i](ns, t, record.ans, *record.args, **kw)
            else:
                part = rules[i](ns, t, record.ans, *record.args)
            total = part if total is None else total + part
        if total is None:
            continue
        if total.shape != record.shape:
            total = ns.broadcast_to(total, record.shape)
        tangents[id(record)] = total


def _freed_in_f(record):
    """The refusal of a jvp whose f ran a backward through what it computed: that
    backward freed the record, so its tangent cannot be swept any more."""
    return BackwardError(
        f"rm.jvp: `{record.op.name}` (output shape {record.shape}), computed inside f, was "
        "freed by a backward run inside f before rm.jvp swept its tangent (its inputs and "
        "saved arrays are gone). Pass retain_graph=True to that backward, or run it after "
        "rm.jvp returns"
    )


def _missed(node, tangents, listed, floor):
    """Record ``node`` and the records made since ``floor`` that it reaches and that
    are not ``listed`` (now added there), in the order they were made."""
    missed, stack = [], [node]
    while stack:
        record = stack.pop()
        if id(record) in listed or id(record) in tangents:
            continue
        listed.add(id(record))
        missed.append(record)
        for parent in record.parents or ():
            if isinstance(parent, Record) and parent.seq >= floor:
                stack.append(parent)
    missed.sort(key=lambda record: record.seq)
    return missed


def hvp(f: Callable[..., Tensor], primals: tuple[PyTree, ...], tangents: tuple[PyTree, ...]) -> Any:
    """The Hessian of scalar ``f`` times ``tangents``, forward over reverse: the
    JVP of ``rm.grad(f)`` (so the Hessian is never formed).

    Through a checkpointed loop, chain or scan the gradient is computed as
    always, and its tangent by running the chain again under the same
    schedule with (state, tangent) in every snapshot: the same step
    evaluations as the gradient's run, twice its bytes (``tape.stats`` lists
    that run as "<Schedule> with tangents").  Under ``rm.Tape(memory=)`` that
    run has a plan of its own, for its doubled sizes, within the same budget.
    The results are those of store-all bit for bit under every schedule.

    >>> import numpy as np, remat as rm
    >>> x, v = np.array([1.0, 2.0]), np.array([1.0, 0.0])
    >>> rm.hvp(lambda x: (x ** 3).sum(), (x,), (v,))  # diag(6x) v, one per primal
    (array([6., 0.]),)
    """
    if isinstance(primals, tuple) and isinstance(tangents, tuple):  # else jvp says why
        for k, (p, t) in enumerate(
            zip(flatten(primals, _is_primal)[0], flatten(tangents, _is_primal)[0])
        ):
            t = t._data if isinstance(t, Tensor) else backend.asarray(t)
            dtype = p.dtype if isinstance(p, Tensor) else backend.asarray(p).dtype
            refuse_complex(t, f"rm.hvp: tangent {k} (in flattened order)", dtype)
    argnums = tuple(range(len(primals)))
    return jvp(grad(f, argnums=argnums), primals, tangents)[1]
