"""``rm.tensor`` and the Tensor as the engine completes it.

The Tensor itself is the teaching core's (:mod:`remat.core.tensor`, its array
face in :mod:`remat.core.values`); this module adds :func:`tensor`, the public
way to make one, and ``Tensor._stand_in``, the leaf of an input remat
differentiates with respect to (a :class:`remat.tape.StandIn`, a kind of node
the core does not know).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import backend
from .core.errors import (
    REAL_ONLY,
    DTypeError,
    as_leaf_dtype,
    check_differentiable_dtype,
    own_gradients,
    refuse_complex,
    refuse_complex_gradient,
)
from .core.tensor import Tensor
from .core.values import holds_tensors, refuse_tensors_inside
from .tape import StandIn

if TYPE_CHECKING:
    from .typing import DTypeLike, TensorLike

__all__ = [
    "REAL_ONLY",
    "DTypeError",
    "Tensor",
    "check_differentiable_dtype",
    "as_leaf_dtype",
    "holds_tensors",
    "own_gradients",
    "refuse_complex",
    "refuse_complex_gradient",
    "tensor",
]


def _stand_in(cls, array):
    """A leaf standing for an input remat differentiates with respect to (internal)."""
    t = cls.__new__(cls)
    t._data = array
    t.grad = None
    t.node = StandIn(t)
    return t


Tensor._stand_in = classmethod(_stand_in)  # type: ignore[method-assign,assignment]


def tensor(
    data: TensorLike,
    requires_grad: bool = False,
    dtype: DTypeLike | None = None,
    device: str | None = None,
    name: str | None = None,
) -> Tensor:
    """A new Tensor holding a copy of ``data`` (list, scalar, NumPy or CuPy array, Tensor).

    ``requires_grad=True`` makes it a leaf whose gradient backward() fills in;
    it needs a floating-point dtype.  ``device`` is "cpu" or "cuda" (default:
    where ``data`` is; the CPU for lists and scalars).  ``name`` labels a leaf
    in ``print(tape)`` and ``tape.to_dot()`` (``t.name``).

    >>> import remat as rm
    >>> rm.tensor([1, 2, 3])
    tensor([1, 2, 3])
    >>> x = rm.tensor([1, 2], dtype="float32", requires_grad=True)
    >>> x
    tensor([1., 2.], dtype=float32, requires_grad=True)
    """
    if isinstance(data, Tensor):
        data = data._data
    refuse_tensors_inside(data)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"rm.tensor: name must be a string, got {name!r}")
    array = backend.asarray(data, dtype=dtype, device=device)
    if requires_grad:
        check_differentiable_dtype(array)
    t = Tensor._wrap(array, requires_grad=requires_grad)
    if name is not None:
        t._name = name
    return t
