"""The fast paths: the generic :func:`remat.core.apply.apply`, hand-inlined for the
shapes of call that dominate small-op programs.

Each function here does exactly what ``apply`` does for its case, without the
general path's work on operand lists, masks and keyword arguments; each says
which benchmark line shows that it pays, and ``tests/core/test_generic_path.py``
checks that every op gives the generic path's values, records and gradients
bit for bit.  While anything watches op evaluations (``remat.selective``'s
frames, or :func:`remat.engine.generic_only`), each hands its op to ``apply``,
so what is counted, kept or replayed is only ever seen through the generic path.

Every path leaves its record through the core's one record-building function,
:func:`remat.core.apply.recorded` (the Record, the guard's fingerprints, the
output Tensor), as the generic ``apply`` does; what each inlines is the rest:
the forward, the operand checks and the keep mask, which the closures of
:func:`make_unary` and :func:`make_binary` bind as locals, so that an op on
small arrays costs little more than the NumPy call itself.  A node is truthy
when the value needs a gradient (a Record or a Leaf), and falsy otherwise (None,
or a loop step's marker, whose ``used_in`` refuses a use outside its step).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend
from ..core.apply import WATCHING, Op, apply, as_tensor, output, recorded
from ..core.errors import operand_error
from ..core.tape import GRAD_ENABLED, STEP
from ..core.tensor import Tensor
from ..dual import Dual, dual_apply, no_tangent_rule
from ..typing import TensorLike


def unary(op: Op, x: Any, **kw: Any) -> Tensor:
    """Apply a one-input primitive with keyword arguments (softmax's axis, clip's
    bounds): ``apply`` without its operand lists.  It pays on small arrays, as in
    bench_transformer's attention: a 4x8 softmax took 9-10 us here against 11-12 us
    through ``apply`` (timeit, CPU time, best of 7, on a shared machine)."""
    if type(x) is not Tensor:
        if type(x) is Dual:
            out = dual_apply(op, (x,), kw)
            if out is not None:
                return out
        x = as_tensor(x)
    if WATCHING:
        return apply(op, (x,), kw)
    data = x._data
    try:
        out = output(op.forward(data, **kw))
    except (ValueError, TypeError) as error:
        raise operand_error(op, (data,), error) from None
    node = x.node
    if node and GRAD_ENABLED.get():
        (keep_x,), keep_ans = op.keep[(True,)]
        saved = (data if keep_x else None,)
        return recorded(op, (node,), saved, out if keep_ans else None, kw, out, (data,), kw)
    if node is not None and not node and GRAD_ENABLED.get():
        node.used_in(op.name)
    return Tensor._from_record(out, STEP.get())


def make_unary(op: Op, doc: str | None = None) -> Callable[[TensorLike], Tensor]:
    """The public function for a one-input primitive: ``f(x) -> Tensor`` (bench_core's
    chain of small elementwise ops)."""
    forward, ndarray, new, new_dual = op.forward, backend.ndarray, Tensor.__new__, Dual.__new__
    grad_enabled, step = GRAD_ENABLED.get, STEP.get
    (keep_x,), keep_ans = op.keep[(True,)]
    rule = op.jvps[0] if op.jvps is not None else None

    def eager(x: Dual) -> Dual | Tensor | None:
        # dual_apply for one operand, inlined: bench_forward's rm.jvp row (2.5x -> 1.9x)
        trace, recording = x.trace, grad_enabled()
        if not trace.eager or (not recording and recording is not False):
            return None  # recording, or a step run untaped: the taped path reads the node
        if WATCHING:
            return dual_apply(op, (x,))
        data = x._data
        try:
            out = forward(data)
        except (ValueError, TypeError) as error:
            raise operand_error(op, (data,), error) from None
        if type(out) is not ndarray:
            out = output(out)
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
        if WATCHING:
            return apply(op, (x,))
        data = x._data
        try:
            out = forward(data)
        except (ValueError, TypeError) as error:
            raise operand_error(op, (data,), error) from None
        if type(out) is not ndarray:
            out = output(out)
        node = x.node
        if node and grad_enabled():
            saved = (data if keep_x else None,)
            return recorded(op, (node,), saved, out if keep_ans else None, None, out, (data,), None)
        if node is not None and not node and grad_enabled():
            node.used_in(op.name)
        t = new(Tensor)
        t._data, t.grad, t.node = out, None, step()
        return t

    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f


def make_binary(op: Op, doc: str | None = None) -> Callable[[TensorLike, TensorLike], Tensor]:
    """The public function for a two-input primitive; either input may be a Python
    scalar (bench_core's chain of small elementwise ops, and its MLP's matmuls)."""
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
        if WATCHING:
            return dual_apply(op, (operand(a), operand(b)))
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
            out = forward(da, db)
        except (ValueError, TypeError) as error:
            raise operand_error(op, (da, db), error) from None
        if type(out) is not ndarray:
            out = output(out)
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
        if WATCHING:
            return apply(op, (a, b))
        try:
            out = forward(da, db)
        except (ValueError, TypeError) as error:
            raise operand_error(op, (da, db), error) from None
        if type(out) is not ndarray:
            out = output(out)
        if grad_enabled():
            if na is not None and not na:  # a loop step's value: only inside its step
                na.used_in(op.name)
            if nb is not None and not nb:
                nb.used_in(op.name)
            if na or nb:
                if not na:
                    na = None
                    (keep_a, keep_b), keep_ans = keep_second
                elif not nb:
                    nb = None
                    (keep_a, keep_b), keep_ans = keep_first
                else:
                    (keep_a, keep_b), keep_ans = keep_both
                saved = (da if keep_a else None, db if keep_b else None)
                ans = out if keep_ans else None
                return recorded(op, (na, nb), saved, ans, None, out, (da, db), None)
        t = new(Tensor)
        t._data, t.grad, t.node = out, None, step()
        return t

    f.__name__ = f.__qualname__ = op.name
    f.__doc__ = doc
    return f


def basic_getitem(op: Op, x: Tensor, index: Any) -> Tensor:
    """``x[index]`` for a basic index (integers, slices, None, ...): what ``apply``
    does for it, without the general path's work on operands and indices
    (bench_overheads' heat-equation row).  It saves nothing: the VJP reads only
    the index and the input's shape."""
    data = x._data
    try:
        if WATCHING:
            return apply(op, (x,), {"index": index}, {"index": index, "shape": data.shape})
        out = data[index]
    except IndexError as error:
        raise IndexError(f"getitem: {error} (tensor of shape {x.shape})") from None
    if type(out) is not backend.ndarray:
        out = output(out)  # a NumPy scalar, from integers only
    node = x.node
    if node and GRAD_ENABLED.get():
        kw = {"index": index, "shape": data.shape}
        return recorded(op, (node,), (None,), None, kw, out, (data,), {"index": index})
    if node is not None and not node and GRAD_ENABLED.get():
        node.used_in(op.name)
    return Tensor._from_record(out, STEP.get())
