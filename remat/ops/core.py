"""How a primitive is declared and applied.

A primitive is a forward function on raw arrays plus one VJP rule per input::

    sin = defop("sin", xp.sin, lambda ns, g, ans, x: g * ns.cos(x), needs=("0",),
                jvps=SELF_ADJOINT)

``jvps`` gives the tangent rules of forward mode the same way, one per input
(``SELF_ADJOINT`` where the Jacobian is diagonal or symmetric, so that the
VJP rule serves).  A VJP rule receives the namespace ``ns`` (see :mod:`remat.tape`), the output
cotangent ``g``, the output ``ans`` and the op's arguments, and returns the
cotangent of its input.  ``needs`` says, per input, which saved values its
rule reads: ``"0"``, ``"1"``... for arguments, ``"a"`` for the output (an op
with any number of inputs gives a function of the count instead).  The
record keeps exactly those (for the inputs that need a gradient), so an op
never holds on to an array its backward will not read.

Saving an array costs nothing more: remat never writes into an array it made,
so only memory handed out to the user can change, and those saves are
fingerprinted (:mod:`remat.guard`).  An output that needs no gradient gets
the running loop step's marker as its node (None outside loops), so that a
value escaping a step is recognised (:class:`remat.tape.StepValue`).

Every op is registered in :data:`OPS`, the one table the tests are generated
from.

Each application of an op tests one thing more, whether a frame of
:mod:`remat.selective` is open anywhere (``rm.count_ops()``, or a policy's
first run or recomputation); only then does the forward go through
:func:`remat.selective.evaluate`, which may count it, keep its output, or
give the kept output instead of running it.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from typing import TYPE_CHECKING, Any

from .. import backend
from ..dual import EAGER, Dual, dual, no_tangent_rule
from ..guard import WATCHED, checks
from ..selective import OPEN, evaluate
from ..tape import GRAD_ENABLED, STEP, Record, check_step_value
from ..tensor import Tensor, holds_tensors

if TYPE_CHECKING:
    from ..typing import TensorLike

xp = backend.xp

OPS: dict[str, Op] = {}
"""name -> Op: every differentiable primitive, in one table."""

# HOOK (issue 26, remat.graph.dtr): called as ON_RECORD(record, inputs, forward_kw, out)
# right after an op made a Record, with the arrays (or numbers) its forward read and
# the keywords it ran with, so that the op can be evaluated again.  None (the
# default) costs one test per recorded op; set only while a Tape(remat="dtr") is open.
ON_RECORD: Callable[[Record, Any, Any, Any], None] | None = None


class ShapeError(ValueError):
    """An op was given arrays whose shapes do not fit together.

    >>> import remat as rm
    >>> try:
    ...     rm.ones(2) + rm.ones(3)
    ... except rm.ShapeError as error:
    ...     print(str(error).split(":")[0:2])
    ['add', ' cannot combine operands of shapes (2,) and (3,)']
    """


class Op:
    """A primitive: its name, forward, VJP rules and what the rules read."""

    __slots__ = (
        "name",
        "forward",
        "vjps",
        "jvps",
        "needs",
        "keep",
        "custom_backward",
        "custom_tangent",
    )

    def __init__(
        self, name, forward, vjps, needs, custom_backward=None, jvps=None, custom_tangent=None
    ):
        self.name = name
        self.custom_tangent = custom_tangent  # forward mode for a multi-output record
        self.forward = forward
        self.vjps = vjps
        self.jvps = vjps if jvps is SELF_ADJOINT else jvps
        self.needs = needs
        self.custom_backward = custom_backward
        # keep[mask] = (which args to save, whether to save the output), for
        # each mask of inputs needing a gradient (precomputed for fixed arity).
        self.keep = {}
        if isinstance(needs, tuple):
            for mask in product((False, True), repeat=len(needs)):
                self.keep[mask] = _keep_for(needs, mask, len(needs))

    def __repr__(self):
        return f"<op {self.name}>"


def _keep_for(needs, mask, nargs):
    wanted = set()
    for need, wanted_grad in zip(needs, mask):
        if wanted_grad:
            wanted.update(str(token) for token in need)
    return tuple(str(i) in wanted for i in range(nargs)), "a" in wanted


SELF_ADJOINT = "self-adjoint"
"""``jvps=SELF_ADJOINT``: the op's Jacobian is diagonal (elementwise ops) or
symmetric (softmax), so each VJP rule, applied to a tangent instead of a
cotangent, is also its tangent rule."""


def defop(name, forward, *vjps, needs, jvps):
    """Declare a primitive and add it to :data:`OPS`.

    ``jvps`` are its tangent rules, one per input, beside the VJP rules:
    ``jvp(ns, t, ans, *args, **kw)`` maps the tangent ``t`` of that input to
    its part of the output's tangent, reading the same saved values as the
    input's VJP rule (they apply the same Jacobian, the other way round).
    """
    vjps = vjps[0] if isinstance(vjps[0], Variadic) else vjps
    op = Op(name, forward, vjps, needs, jvps=jvps)
    OPS[name] = op
    return op


class Variadic:
    """VJP rules for an op with any number of inputs: rule(i, ns, g, ans, *args)."""

    __slots__ = ("rule",)

    def __init__(self, rule):
        self.rule = rule

    def __getitem__(self, i):
        rule = self.rule
        return lambda ns, g, ans, *args, **kw: rule(i, ns, g, ans, *args, **kw)


def promoted(ns: Any, *arrays: Any) -> tuple[Any, ...]:
    """``arrays`` (arrays, or Tensors in a differentiated backward) in their common dtype.

    NumPy computes ``x32 ** y64`` in float64; a rule that reads its operands
    promotes them first, so that it differentiates in that dtype too (the
    cotangent is rounded to an input's own dtype only where it reaches it).
    float32 -> float64 is exact, so this changes nothing for one dtype.
    """
    dtype = xp.result_type(*(a.dtype for a in arrays))
    return tuple(a if a.dtype == dtype else ns.astype(a, dtype) for a in arrays)


def as_tensor(value: TensorLike) -> Tensor:
    """A Tensor for any operand: Tensors pass through, arrays and lists are copied,
    and a (nested) list holding Tensors is stacked, so that their gradients flow."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (list, tuple)) and holds_tensors(value):
        from .shape import stack

        return stack([as_tensor(v) for v in value])
    return Tensor._wrap(backend.asarray(value))


def constant_of(where: str, value: Any) -> Any:
    """The array of a Tensor given where a constant goes (a clip bound, a random
    parameter); a value escaping a loop step is refused there as anywhere."""
    if isinstance(value, (list, tuple)) and holds_tensors(value):
        value = as_tensor(value)
    if not isinstance(value, Tensor):
        return value
    node = value.node
    if node is not None and not node and GRAD_ENABLED.get():
        check_step_value(where, node)
    return value._data


def _guard(record):
    """Fingerprint what ``record`` saved of memory the user holds (remat.guard).

    Only the inputs can be watched: an op's output is a fresh array (no op
    that keeps its output returns a view of an input).
    """
    record.checks = checks(record.args)


SHAPE_RULES: dict[str, Callable[..., str]] = {}
"""op name -> f(*operands) explaining, for a human, why their shapes do not fit."""


def check_axis(op_name: str, axis: int, ndim: int) -> int:
    """``axis`` as an index in [0, ndim), or a ShapeError naming the op (as NumPy would)."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op_name}: axis {axis} is out of bounds for {ndim} axes")
    return axis % ndim


def _shape_error(op, datas, error):
    rule = SHAPE_RULES.get(op.name)
    if rule is not None:
        return ShapeError(rule(*datas))
    if len(datas) == 1:
        return ShapeError(f"{op.name}: {error} (operand of shape {getattr(datas[0], 'shape', ())})")
    shapes = " and ".join(str(getattr(d, "shape", ())) for d in datas)
    return ShapeError(f"{op.name}: cannot combine operands of shapes {shapes}: {error}")


def _operand_error(op, datas, error):
    """Why an op refused its operands: two devices, shapes, or another NumPy error,
    always naming the op."""
    devices = backend.mixed_devices(datas)
    if devices is not None:
        return backend.DeviceError(
            f"{op.name}: operands are on different devices: {devices}; move one with .to()"
        )
    if isinstance(error, ValueError):
        return _shape_error(op, datas, error)
    described = ", ".join(
        f"{getattr(d, 'dtype', type(d).__name__)} {getattr(d, 'shape', '')}".strip() for d in datas
    )
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(f"{op.name}: {error} (operands: {described})")


def _output(out):
    # NumPy returns scalars from full reductions and 0-d ufuncs: keep arrays.
    return out if backend.is_array(out) else xp.asarray(out)


def unary(op, x, **kw):
    """Apply a one-input primitive with keyword arguments (softmax's axis)."""
    if type(x) is not Tensor:
        if type(x) is Dual:
            out = dual_apply(op, (x,), kw)
            if out is not None:
                return out
        x = as_tensor(x)
    data = x._data
    try:
        out = _output(evaluate(op, (data,), kw) if OPEN else op.forward(data, **kw))
    except (ValueError, TypeError) as error:
        raise _operand_error(op, (data,), error) from None
    node = x.node
    if node and GRAD_ENABLED.get():
        (keep_x,), keep_ans = op.keep[(True,)]
        record = Record(
            op, (node,), (data if keep_x else None,), out if keep_ans else None, kw, out.shape
        )
        if WATCHED:
            _guard(record)
        t = Tensor._from_record(out, record)
        if ON_RECORD is not None:
            ON_RECORD(record, (data,), kw, out)
        return t
    if node is not None and not node and GRAD_ENABLED.get():
        check_step_value(op.name, node)
    return Tensor._from_record(out, STEP.get())


# The two functions below build the hot path of every elementwise op: one
# closure per op, with the op's forward and what it keeps bound as locals, so
# that an op on small arrays costs little more than the NumPy call itself.
# A node is truthy when the value needs a gradient (a Record or a Leaf), and
# falsy otherwise (None, or a loop step's StepValue marker).


def make_unary(op: Op, doc: str | None = None) -> Callable[[TensorLike], Tensor]:
    """The public function for a one-input primitive: ``f(x) -> Tensor``."""
    forward, ndarray, new, new_dual = op.forward, backend.ndarray, Tensor.__new__, Dual.__new__
    grad_enabled, step = GRAD_ENABLED.get, STEP.get
    (keep_x,), keep_ans = op.keep[(True,)]
    rule = op.jvps[0] if op.jvps is not None else None

    def eager(x: Dual) -> Dual | Tensor | None:
        # dual_apply for one operand, inlined: bench_forward's rm.jvp row (2.5x -> 1.9x)
        trace, recording = x.trace, grad_enabled()
        if not trace.eager or (not recording and recording is not False):
            return None  # recording, or a step run untaped: the taped path reads the node
        data = x._data
        try:
            out = evaluate(op, (data,), None) if OPEN else forward(data)
        except (ValueError, TypeError) as error:
            raise _operand_error(op, (data,), error) from None
        if type(out) is not ndarray:
            out = _output(out)
        if not recording:  # rm.no_grad: a constant
            return Tensor._from_record(out, step())
        if rule is None:
            raise no_tangent_rule(op)
        ns: Any = backend.ARRAY_NAMESPACE
        tangent = rule(ns, x.tangent, out, data)
        if tangent.shape != out.shape:
            tangent = ns.broadcast_to(tangent, out.shape)
        d = new_dual(Dual)
        d._data, d.grad, d.tangent, d.trace = out, None, tangent, trace
        return d

    def f(x: TensorLike) -> Tensor:
        if type(x) is not Tensor:
            if type(x) is Dual:
                out = eager(x)
                if out is not None:
                    return out
            x = as_tensor(x)
        data = x._data
        try:
            out = evaluate(op, (data,), None) if OPEN else forward(data)
        except (ValueError, TypeError) as error:
            raise _operand_error(op, (data,), error) from None
        if type(out) is not ndarray:
            out = _output(out)
        t = new(Tensor)
        t._data = out
        t.grad = None
        node = x.node
        if node and grad_enabled():
            t.node = record = Record(
                op, (node,), (data if keep_x else None,), out if keep_ans else None, None, out.shape
            )
            if keep_x and WATCHED:
                _guard(record)
            if ON_RECORD is not None:
                ON_RECORD(record, (data,), None, out)
            return t
        if node is not None and not node and grad_enabled():
            check_step_value(op.name, node)
        t.node = step()
        return t

    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f


def make_binary(op: Op, doc: str | None = None) -> Callable[[TensorLike, TensorLike], Tensor]:
    """The public function for a two-input primitive; either input may be a Python scalar."""
    forward, ndarray, new, new_dual = op.forward, backend.ndarray, Tensor.__new__, Dual.__new__
    grad_enabled, step = GRAD_ENABLED.get, STEP.get
    scalars = (int, float)
    keep_both, keep_first, keep_second = (op.keep[m] for m in ((1, 1), (1, 0), (0, 1)))
    rule_a: Any
    rule_b: Any
    rule_a, rule_b = op.jvps if op.jvps is not None else (None, None)

    def operand(v: Any) -> Any:  # as the taped path below takes it: a number or a Tensor
        return v if isinstance(v, (Tensor, *scalars)) else as_tensor(v)

    def eager(a: Any, b: Any) -> Dual | Tensor | None:
        # dual_apply for two operands, a Dual and a Dual, a scalar or a constant,
        # inlined: bench_forward's rm.jvp row (2.5x -> 1.9x)
        dual_a, dual_b = type(a) is Dual, type(b) is Dual
        trace, recording = a.trace if dual_a else b.trace, grad_enabled()
        if not trace.eager or (dual_a and dual_b and b.trace is not trace):
            return None
        if not recording and recording is not False:
            return None  # a step run untaped: the taped path reads the node
        if dual_a or (type(a) is Tensor and a.node is None):
            da = a._data
        elif isinstance(a, scalars):
            da = a
        else:
            return dual_apply(op, (operand(a), operand(b)))
        if dual_b or (type(b) is Tensor and b.node is None):
            db = b._data
        elif isinstance(b, scalars):
            db = b
        else:
            return dual_apply(op, (operand(a), operand(b)))
        try:
            out = evaluate(op, (da, db), None) if OPEN else forward(da, db)
        except (ValueError, TypeError) as error:
            raise _operand_error(op, (da, db), error) from None
        if type(out) is not ndarray:
            out = _output(out)
        if not recording:  # rm.no_grad: a constant
            return Tensor._from_record(out, step())
        if rule_a is None:
            raise no_tangent_rule(op)
        ns: Any = backend.ARRAY_NAMESPACE
        if dual_a:
            tangent = rule_a(ns, a.tangent, out, da, db)
            if dual_b:
                tangent = tangent + rule_b(ns, b.tangent, out, da, db)
        else:
            tangent = rule_b(ns, b.tangent, out, da, db)
        if tangent.shape != out.shape:
            tangent = ns.broadcast_to(tangent, out.shape)
        d = new_dual(Dual)
        d._data, d.grad, d.tangent, d.trace = out, None, tangent, trace
        return d

    def f(a: TensorLike, b: TensorLike) -> Tensor:
        if type(a) is Tensor:
            da, na = a._data, a.node
        elif isinstance(a, scalars):
            da = a
            na = None
        else:
            if type(a) is Dual:
                out = eager(a, b)
                if out is not None:
                    return out
            a = as_tensor(a)
            da, na = a._data, a.node
        if type(b) is Tensor:
            db, nb = b._data, b.node
        elif isinstance(b, scalars):
            db = b
            nb = None
        else:
            if type(b) is Dual:
                out = eager(a, b)
                if out is not None:
                    return out
            b = as_tensor(b)
            db, nb = b._data, b.node
        try:
            out = evaluate(op, (da, db), None) if OPEN else forward(da, db)
        except (ValueError, TypeError) as error:
            raise _operand_error(op, (da, db), error) from None
        if type(out) is not ndarray:
            out = _output(out)
        t = new(Tensor)
        t._data = out
        t.grad = None
        recording = grad_enabled()
        if recording:
            if na is not None and not na:  # a loop step's value: only inside its step
                check_step_value(op.name, na)
            if nb is not None and not nb:
                check_step_value(op.name, nb)
            if na or nb:
                if not na:
                    na = None
                    (keep_a, keep_b), keep_ans = keep_second
                elif not nb:
                    nb = None
                    (keep_a, keep_b), keep_ans = keep_first
                else:
                    (keep_a, keep_b), keep_ans = keep_both
                t.node = record = Record(
                    op,
                    (na, nb),
                    (da if keep_a else None, db if keep_b else None),
                    out if keep_ans else None,
                    None,
                    out.shape,
                )
                if WATCHED and (
                    (keep_a and type(da) not in scalars) or (keep_b and type(db) not in scalars)
                ):  # an array is saved while something is watched: the benchmark line's cost
                    _guard(record)
                if ON_RECORD is not None:
                    ON_RECORD(record, (da, db), None, out)
                return t
        t.node = step()
        return t

    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f


def apply(op, inputs, forward_kw=None, vjp_kw=None):
    """Apply any primitive: ``inputs`` are Tensors or constants.

    ``forward_kw`` goes to the forward function; ``vjp_kw`` (default: the
    same) is stored for the VJP rules, which may need more (an input shape).
    """
    tensors = [
        as_tensor(v) if backend.is_array(v) or isinstance(v, (list, tuple)) else v for v in inputs
    ]
    if EAGER:  # an rm.jvp runs eagerly somewhere: a Dual among the operands?
        for t in tensors:
            if type(t) is Dual:
                out = dual_apply(op, tensors, forward_kw, vjp_kw)
                if out is not None:
                    return out
                break
    datas = [t._data if isinstance(t, Tensor) else t for t in tensors]
    try:
        if OPEN:  # a frame watches op evaluations (remat.selective)
            out = evaluate(op, datas, forward_kw)
        else:
            out = op.forward(*datas, **forward_kw) if forward_kw else op.forward(*datas)
    except (ValueError, TypeError) as error:
        raise _operand_error(op, [d for d in datas if hasattr(d, "shape")], error) from None
    out = _output(out)
    nodes = tuple(t.node if isinstance(t, Tensor) else None for t in tensors)
    if not GRAD_ENABLED.get():
        return Tensor._from_record(out, STEP.get())
    for node in nodes:
        if node is not None and not node:
            check_step_value(op.name, node)
    if not any(nodes):
        return Tensor._from_record(out, STEP.get())
    nodes = tuple(node or None for node in nodes)
    mask = tuple(n is not None for n in nodes)
    keep = op.keep.get(mask)
    if keep is None:  # a variadic op: needs(n) gives the tokens for n inputs
        keep = _keep_for(op.needs(len(nodes)), mask, len(nodes))
        if len(mask) <= 8:  # kept for few inputs (a heat step's concatenate: bench_overheads)
            op.keep[mask] = keep
    keep_args, keep_ans = keep
    saved = tuple(d if k else None for d, k in zip(datas, keep_args))
    kw = vjp_kw if vjp_kw is not None else forward_kw
    record = Record(op, nodes, saved, out if keep_ans else None, kw, out.shape)
    if WATCHED:
        _guard(record)
    t = Tensor._from_record(out, record)
    if ON_RECORD is not None:
        ON_RECORD(record, datas, forward_kw, out)
    return t


def dual_apply(op, inputs, forward_kw=None, rule_kw=None):
    """Apply ``op`` to operands among which a Dual (:mod:`remat.dual`): its value and,
    at once, its tangent, the sum over the Duals of each one's tangent rule.

    The rules read what the op's VJP rules read (its output and operands), and
    the terms are summed in the order of the operands, as the forward sweep
    over a recording sums them.  Returns None where the recorded path must
    take over: a Dual of a jvp that is no longer eager, Duals of two jvps, or
    an operand that is recorded itself (reading the Duals' nodes there
    switches their jvp to recording), and so does a step or checkpointed
    function that the executor runs untaped (it reads what the function closes
    over then, to carry its tangent later).  Under ``rm.no_grad`` the result is
    a constant, as a recording would make it.
    """
    trace = None
    datas = []
    recording = GRAD_ENABLED.get()
    if not recording and recording is not False:
        return None  # a step run untaped (UNTAPED): the taped path reads the nodes
    for v in inputs:
        if type(v) is Dual:
            if trace is None:
                trace = v.trace
            elif v.trace is not trace:
                return None
            datas.append(v._data)
        elif isinstance(v, Tensor):
            if recording and v.node is not None:
                return None
            datas.append(v._data)
        else:  # a constant the op takes as it is: a number, an array, None (layer_norm's)
            datas.append(v)
    if trace is None or not trace.eager:
        return None
    try:
        if OPEN:  # a frame watches op evaluations (remat.selective)
            out = evaluate(op, datas, forward_kw)
        else:
            out = op.forward(*datas, **forward_kw) if forward_kw else op.forward(*datas)
    except (ValueError, TypeError) as error:
        raise _operand_error(op, [d for d in datas if hasattr(d, "shape")], error) from None
    if type(out) is not backend.ndarray:
        out = _output(out)
    if not recording:
        return Tensor._from_record(out, STEP.get())
    rules, kw = op.jvps, rule_kw if rule_kw is not None else forward_kw
    ns, total = backend.ARRAY_NAMESPACE, None
    for i, v in enumerate(inputs):
        if type(v) is Dual:
            if rules is None:
                raise no_tangent_rule(op)
            rule = rules[i]
            part = (
                rule(ns, v.tangent, out, *datas, **kw) if kw else rule(ns, v.tangent, out, *datas)
            )
            total = part if total is None else total + part
    if total.shape != out.shape:
        total = ns.broadcast_to(total, out.shape)
    return dual(out, total, trace)
