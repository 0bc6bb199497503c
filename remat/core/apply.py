"""How a primitive is declared, and the one generic way every op is applied.

A primitive is a forward function on raw arrays plus one VJP rule per input::

    sin = defop("sin", xp.sin, lambda ns, g, ans, x: g * ns.cos(x), needs=("0",),
                jvps=SELF_ADJOINT)

A VJP rule receives the namespace ``ns`` (see :mod:`remat.core.tape`), the
output cotangent ``g``, the output ``ans`` and the op's arguments, and returns
the cotangent of its input.  ``needs`` says, per input, which saved values its
rule reads: ``"0"``, ``"1"``... for arguments, ``"a"`` for the output (an op
with any number of inputs gives a function of the count instead).  The record
keeps exactly those, for the inputs that need a gradient, so an op never holds
on to an array its backward will not read.  ``jvps`` are the tangent rules (:func:`defop`).

:func:`apply` runs the forward and, if an input needs a gradient, leaves a
Record.  Saving an array costs nothing more: remat never writes into an array
it made, so only memory handed out to the user can change, and those saves are
fingerprinted (:mod:`remat.guard`).

Hooks (where the engine enters; each costs one test per op while unused)
--------------------------------------------------------------------------
* :data:`WATCHING` -- while not empty, forwards run through :data:`evaluate`
  (``remat.selective``'s frames), and the fast paths hand every op to :func:`apply`.
* :data:`EAGER` -- while not empty, an operand may be a Dual of an eager ``rm.jvp``,
  and :data:`dual_apply` computes value and tangent at once (``remat.dual``).
* a falsy node that is not None marks a loop step's value: ``node.used_in(op_name)``
  refuses it outside its step; an output that needs no gradient gets ``STEP.get()``.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from typing import TYPE_CHECKING, Any

from .. import backend
from ..guard import WATCHED, checks
from . import tape as core_tape
from .errors import operand_error
from .tape import GRAD_ENABLED, STEP, Record
from .tensor import Tensor
from .values import holds_tensors, output

if TYPE_CHECKING:
    from ..typing import TensorLike

xp, ndarray = backend.xp, backend.ndarray
new_tensor = Tensor.__new__

OPS: dict[str, Op] = {}
"""name -> Op: every differentiable primitive, in one table (the tests are made from it)."""

WATCHING: list[Any] = []  # hook: what watches op evaluations now, in any thread
EAGER: list[Any] = []  # hook: the traces of the rm.jvp calls running eagerly now
evaluate: Callable[..., Any] = None  # type: ignore[assignment]  # remat.selective's
dual_apply: Callable[..., Any] = None  # type: ignore[assignment]  # remat.dual's


class Op:
    """A primitive: its name, forward, VJP rules and what the rules read."""

    __slots__ = tuple("name forward vjps jvps needs keep custom_backward custom_tangent".split())

    def __init__(
        self, name, forward, vjps, needs, custom_backward=None, jvps=None, custom_tangent=None
    ):
        self.name, self.forward, self.vjps, self.needs = name, forward, vjps, needs
        self.jvps = vjps if jvps is SELF_ADJOINT else jvps
        self.custom_backward = custom_backward  # a checkpointed loop's record reverses itself
        self.custom_tangent = custom_tangent  # forward mode for a multi-output record
        # keep[mask] = (which args to save, whether to save the output), for
        # each mask of inputs needing a gradient (precomputed for fixed arity).
        self.keep = {}
        if isinstance(needs, tuple):
            for mask in product((False, True), repeat=len(needs)):
                self.keep[mask] = keep_for(needs, mask, len(needs))

    def __repr__(self):
        return f"<op {self.name}>"


def keep_for(needs, mask, nargs):
    """(which args to save, whether to save the output) for the inputs in ``mask``."""
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


def apply(op, inputs, forward_kw=None, vjp_kw=None):
    """Apply any primitive: ``inputs`` are Tensors or constants.

    ``forward_kw`` goes to the forward function; ``vjp_kw`` (default: the
    same) is stored for the VJP rules, which may need more (an input shape).
    """
    tensors = [
        as_tensor(v) if backend.is_array(v) or isinstance(v, (list, tuple)) else v for v in inputs
    ]
    if EAGER:  # an rm.jvp runs eagerly somewhere: a Dual (a Tensor's subclass) among them?
        if any(type(t) is not Tensor and isinstance(t, Tensor) for t in tensors):
            out = dual_apply(op, tensors, forward_kw, vjp_kw)
            if out is not None:
                return out
    datas = [t._data if isinstance(t, Tensor) else t for t in tensors]
    out = evaluated(op, datas, forward_kw)
    nodes = tuple(t.node if isinstance(t, Tensor) else None for t in tensors)
    if not GRAD_ENABLED.get():
        return Tensor._from_record(out, STEP.get())
    for node in nodes:
        if node is not None and not node:  # a loop step's value: only inside its step
            node.used_in(op.name)
    if not any(nodes):
        return Tensor._from_record(out, STEP.get())
    nodes = tuple(node or None for node in nodes)
    mask = tuple(n is not None for n in nodes)
    keep = op.keep.get(mask)
    if keep is None:  # a variadic op: needs(n) gives the tokens for n inputs
        keep = keep_for(op.needs(len(nodes)), mask, len(nodes))
        if len(mask) <= 8:  # kept for few inputs (a heat step's concatenate: bench_overheads)
            op.keep[mask] = keep
    keep_args, keep_ans = keep
    saved = tuple(d if k else None for d, k in zip(datas, keep_args))
    kw = vjp_kw if vjp_kw is not None else forward_kw
    return recorded(op, nodes, saved, out if keep_ans else None, kw, out, datas, forward_kw)


def evaluated(op, datas, kw):
    """The output array of ``op``'s forward on ``datas``; an error NumPy raises on
    the operands becomes one that names the op and their shapes."""
    try:
        if WATCHING:
            out = evaluate(op, datas, kw)
        else:
            out = op.forward(*datas, **kw) if kw else op.forward(*datas)
    except (ValueError, TypeError) as error:
        raise operand_error(op, [d for d in datas if hasattr(d, "shape")], error) from None
    return out if type(out) is ndarray else output(out)


def recorded(op, nodes, saved, ans, kw, out, inputs, forward_kw):
    """``out`` as a Tensor on a new Record of ``op``: the one place an applied op
    leaves its record, for :func:`apply` and the engine's fast paths alike.

    ``nodes`` has each input's node (None where no gradient is wanted), ``saved``
    the operands the VJP rules read (None elsewhere), ``ans`` the output if they
    read it.  A saved array the user could write in place is fingerprinted.
    ``inputs`` (the arrays or numbers the forward read) and ``forward_kw`` go to the
    :data:`~remat.core.tape.on_record` hook, with ``out``: what runs the op again.
    """
    record = Record(op, nodes, saved, ans, kw, out.shape)
    if WATCHED:  # something was handed out: fingerprint what of it this record saved
        record.checks = checks(saved)
    t = new_tensor(Tensor)
    t._data, t.grad, t.node = out, None, record
    if core_tape.on_record is not None:  # the hook: what to run the op again with
        core_tape.on_record(record, inputs, forward_kw, out)
    return t


def as_tensor(value: TensorLike) -> Tensor:
    """A Tensor for any operand: Tensors pass through, arrays and lists are copied,
    and a (nested) list holding Tensors is stacked, so that their gradients flow."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (list, tuple)) and holds_tensors(value):  # the op stack of remat.ops
        return apply(OPS["stack"], [as_tensor(v) for v in value], {"axis": 0})
    return Tensor._wrap(backend.asarray(value))
