"""How a primitive is declared and applied: the names every op module uses.

This is the one place the op modules (:mod:`remat.ops.elementwise`,
:mod:`remat.ops.reduce`, ...) import from.  The ideas live in the teaching core
(:mod:`remat.core.apply`: :class:`Op`, :func:`defop`, the generic :func:`apply`)
and the fast paths in :mod:`remat.engine.fast` (:func:`make_unary`,
:func:`make_binary`, :func:`unary`); the few helpers below are the op rules' own.

Every op is registered in :data:`OPS`, the one table the tests are generated from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.apply import OPS, SELF_ADJOINT, Op, Variadic, apply, as_tensor, defop, output, xp
from ..core.errors import SHAPE_RULES, ShapeError, check_axis
from ..core.tape import GRAD_ENABLED
from ..core.tensor import Tensor
from ..core.values import holds_tensors
from ..engine.fast import make_binary, make_unary, unary
from ..typing import TensorLike

__all__ = [
    "OPS",
    "SELF_ADJOINT",
    "SHAPE_RULES",
    "STACK",
    "Op",
    "ShapeError",
    "Tensor",
    "Variadic",
    "apply",
    "as_tensor",
    "check_axis",
    "constant_of",
    "defop",
    "make_binary",
    "make_unary",
    "output",
    "promoted",
    "stack",
    "unary",
    "xp",
]


def promoted(ns: Any, *arrays: Any) -> tuple[Any, ...]:
    """``arrays`` (arrays, or Tensors in a differentiated backward) in their common dtype.

    NumPy computes ``x32 ** y64`` in float64; a rule that reads its operands
    promotes them first, so that it differentiates in that dtype too (the
    cotangent is rounded to an input's own dtype only where it reaches it).
    float32 -> float64 is exact, so this changes nothing for one dtype.
    """
    dtype = xp.result_type(*(a.dtype for a in arrays))
    return tuple(a if a.dtype == dtype else ns.astype(a, dtype) for a in arrays)


def constant_of(where: str, value: Any) -> Any:
    """The array of a Tensor given where a constant goes (a clip bound, a random
    parameter); a value escaping a loop step is refused there as anywhere."""
    if isinstance(value, (list, tuple)) and holds_tensors(value):
        value = as_tensor(value)
    if not isinstance(value, Tensor):
        return value
    node = value.node
    if node is not None and not node and GRAD_ENABLED.get():
        node.used_in(where)
    return value._data


# stack is here, among the names every op module shares, not among the shape ops
# of remat.ops.shape: the core's as_tensor stacks a list holding Tensors with it.
def _stack(*arrays, axis):
    return xp.stack(arrays, axis=axis)


STACK = defop(
    "stack",
    _stack,
    Variadic(lambda i, ns, g, ans, *xs, axis: g[(slice(None),) * axis + (i,)]),
    needs=lambda n: ("",) * n,
    jvps=Variadic(
        lambda i, ns, t, ans, *xs, axis: ns.scatter_add(
            t.shape[:axis] + (len(xs),) + t.shape[axis:], (slice(None),) * axis + (i,), t
        )
    ),
)


def stack(tensors: Sequence[TensorLike], axis: int = 0) -> Tensor:
    """Join tensors along a new axis.

    >>> import remat as rm
    >>> rm.stack([rm.zeros(2), rm.ones(2)], axis=1)
    tensor([[0., 1.],
           [0., 1.]])
    """
    parts = [as_tensor(t) for t in tensors]
    if not parts:
        raise ValueError("stack: needs at least one tensor")
    axis = check_axis("stack", axis, parts[0].ndim + 1)
    return apply(STACK, parts, {"axis": axis})
