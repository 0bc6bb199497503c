"""The types in remat's signatures, by name (as ``numpy.typing`` names NumPy's).

Annotate your own code with them::

    import remat as rm
    from remat.typing import TensorLike

    def loss(w: rm.Tensor, x: TensorLike) -> rm.Tensor:
        return ((w * x) ** 2).sum()

* :data:`Array`: a backend array, ``numpy.ndarray`` (a ``cupy.ndarray`` on a
  GPU has the same interface and is typed as NumPy's).
* :data:`ArrayLike`, :data:`DTypeLike`: NumPy's, what ``numpy.asarray`` takes
  (numbers, nested lists, arrays) and what names a dtype.
* :data:`TensorLike`: what an op takes, a :class:`~remat.Tensor` or anything
  array-like.
* :data:`Axis`: an axis, several, or ``None`` for all of them.
* :data:`Shape`: a shape, or one length for a 1-D shape.
* :data:`PyTree`: nested tuples, lists and dicts of Tensors, arrays and other
  leaves (:mod:`remat.pytree`); typed ``Any``, since a recursive alias would
  tell a reader no more than that.

>>> import remat as rm
>>> from remat.typing import Shape
>>> def square(shape: Shape) -> rm.Tensor:
...     return rm.ones(shape) ** 2
>>> square((2, 2)).shape
(2, 2)

Only :mod:`remat.backend` imports NumPy; this module takes NumPy's aliases
from there and imports :class:`~remat.Tensor` for type checkers only, so any
module may import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias, Union

from .backend import Array, ArrayLike, DTypeLike

if TYPE_CHECKING:
    from .tensor import Tensor

TensorLike: TypeAlias = Union["Tensor", ArrayLike]
"""A Tensor, or anything ``numpy.asarray`` takes."""

Axis: TypeAlias = Union[int, "tuple[int, ...]", None]
"""One axis, several, or None for every axis."""

Shape: TypeAlias = Union[int, "tuple[int, ...]"]
"""A shape; an int ``n`` means ``(n,)``."""

PyTree: TypeAlias = Any
"""Nested tuples, lists and dicts whose leaves are Tensors, arrays or anything else."""

__all__ = ["Array", "ArrayLike", "Axis", "DTypeLike", "PyTree", "Shape", "TensorLike"]
