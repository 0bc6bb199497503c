"""How a primitive is declared and applied: the names every op module uses.

This is the one place the op modules (:mod:`remat.ops.elementwise`,
:mod:`remat.ops.reduce`, ...) import from.  The ideas live in the teaching core
(:mod:`remat.core.apply`: :class:`Op`, :func:`defop`, the generic :func:`apply`)
and the fast paths in :mod:`remat.engine.fast` (:func:`make_unary`,
:func:`make_binary`, :func:`unary`); the few helpers below are the op rules' own.

Every op is registered in :data:`OPS`, the one table the tests are generated from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.apply import (
    OPS,
    SELF_ADJOINT,
    STACK,
    Op,
    Variadic,
    apply,
    as_tensor,
    defop,
    output,
    stack,
    xp,
)
from ..core.errors import SHAPE_RULES, ShapeError, check_axis
from ..core.tape import GRAD_ENABLED
from ..core.tensor import Tensor
from ..core.values import holds_tensors
from ..engine.fast import make_binary, make_unary, unary

if TYPE_CHECKING:
    pass

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
