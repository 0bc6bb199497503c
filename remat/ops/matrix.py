"""Matrix functions: diagonals, traces, triangles, and NumPy's products beside
``matmul`` and ``einsum`` (``dot``, ``inner``, ``outer``, ``tensordot``,
``kron``, ``cross``).

All are compositions: a diagonal is indexing (its gradient a scatter-add), a
triangle is a ``where`` with a constant mask, and the products are ``matmul``,
``einsum`` or broadcast multiplication arranged as NumPy arranges them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import backend
from .arrange import moveaxis
from .core import ShapeError, Tensor, as_tensor, check_axis, stack
from .elementwise import multiply, where
from .index import scatter_add
from .linalg import matmul
from .reduce import sum as _sum
from .shape import reshape, transpose

if TYPE_CHECKING:
    from ..typing import TensorLike

xp = backend.xp


def _diagonal_index(rows: int, cols: int, offset: int) -> tuple[object, object]:
    """The (row, column) indices of diagonal ``offset`` of a rows x cols matrix."""
    start_r, start_c = max(-offset, 0), max(offset, 0)
    n = max(min(rows - start_r, cols - start_c), 0)
    i = xp.arange(n)
    return i + start_r, i + start_c


def diagonal(x: TensorLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The diagonal ``offset`` of the planes of axes (axis1, axis2), as the last axis of
    the result, as ``numpy.diagonal``.

    >>> import remat as rm
    >>> rm.diagonal(rm.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([1., 4.])
    """
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"diagonal: needs 2 or more axes; the tensor has shape {x.shape}")
    a, b = check_axis("diagonal", axis1, x.ndim), check_axis("diagonal", axis2, x.ndim)
    if a == b:
        raise ShapeError(f"diagonal: axis1 and axis2 are the same axis ({a})")
    moved = moveaxis(x, (a, b), (-2, -1))
    rows, cols = _diagonal_index(x.shape[a], x.shape[b], offset)
    return moved[..., rows, cols]


def trace(x: TensorLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """The sum of a diagonal (see :func:`diagonal`), as ``numpy.trace``.

    >>> import remat as rm
    >>> rm.trace(rm.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor(5.)
    """
    return _sum(diagonal(x, offset, axis1, axis2), axis=-1)


def make_diagonal(d: TensorLike, offset: int = 0, axis1: int = -2, axis2: int = -1) -> Tensor:
    """Matrices with ``d``'s last axis on their diagonal ``offset``, zeros elsewhere, the
    inverse of :func:`diagonal` (autograd's ``make_diagonal``): shape
    ``d.shape[:-1] + (m, m)`` with m = n + |offset|, the plane on (axis1, axis2).

    >>> import remat as rm
    >>> rm.make_diagonal(rm.tensor([1.0, 2.0]))
    tensor([[1., 0.],
           [0., 2.]])
    """
    d = as_tensor(d)
    if d.ndim < 1:
        raise ShapeError("make_diagonal: needs 1 or more axes; the tensor is 0-d")
    m = d.shape[-1] + abs(offset)
    rows, cols = _diagonal_index(m, m, offset)
    out = scatter_add(d.shape[:-1] + (m, m), (Ellipsis, rows, cols), d)
    ndim = d.ndim + 1
    a, b = check_axis("make_diagonal", axis1, ndim), check_axis("make_diagonal", axis2, ndim)
    if a == b:
        raise ShapeError(f"make_diagonal: axis1 and axis2 are the same axis ({a})")
    return moveaxis(out, (-2, -1), (a, b))


def diag(v: TensorLike, k: int = 0) -> Tensor:
    """A 1-D tensor's values on diagonal ``k`` of a square matrix, or a 2-D tensor's
    diagonal ``k``, as ``numpy.diag``.

    >>> import remat as rm
    >>> rm.diag(rm.tensor([1.0, 2.0]), 1)
    tensor([[0., 1., 0.],
           [0., 0., 2.],
           [0., 0., 0.]])
    """
    v = as_tensor(v)
    if v.ndim == 1:
        return make_diagonal(v, k)
    if v.ndim == 2:
        return diagonal(v, k)
    raise ShapeError(f"diag: needs a 1-D or 2-D tensor; got shape {v.shape}")


def _triangle(name: str, x: TensorLike, k: int, lower: bool) -> Tensor:
    x = as_tensor(x)
    if x.ndim < 1:
        raise ShapeError(f"{name}: needs 1 or more axes; the tensor is 0-d")
    rows, cols = x.shape[-2:] if x.ndim >= 2 else (x.shape[-1], x.shape[-1])
    keep = xp.tri(rows, cols, k=k if lower else k - 1, dtype=bool)
    return where(keep if lower else ~keep, x, 0.0)


def tril(x: TensorLike, k: int = 0) -> Tensor:
    """The lower triangle (on and below diagonal ``k``), zeros above, as ``numpy.tril``.

    >>> import remat as rm
    >>> rm.tril(rm.ones((2, 2)))
    tensor([[1., 0.],
           [1., 1.]])
    """
    return _triangle("tril", x, k, lower=True)


def triu(x: TensorLike, k: int = 0) -> Tensor:
    """The upper triangle (on and above diagonal ``k``), zeros below, as ``numpy.triu``.

    >>> import remat as rm
    >>> rm.triu(rm.ones((2, 2)))
    tensor([[1., 1.],
           [0., 1.]])
    """
    return _triangle("triu", x, k, lower=False)


def tensordot(a: TensorLike, b: TensorLike, axes: int | Sequence[Sequence[int]] = 2) -> Tensor:
    """Sums of products over the last ``axes`` axes of ``a`` and the first of ``b`` (or
    over the axes named in a pair of lists), as ``numpy.tensordot``.

    >>> import remat as rm
    >>> rm.tensordot(rm.ones((2, 3)), rm.ones((3, 4)), axes=1).shape
    (2, 4)
    """
    a, b = as_tensor(a), as_tensor(b)
    if isinstance(axes, int):
        if axes < 0 or axes > min(a.ndim, b.ndim):
            raise ShapeError(f"tensordot: axes={axes} does not fit shapes {a.shape} and {b.shape}")
        in_a, in_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        first, second = axes
        in_a = [first] if isinstance(first, int) else list(first)
        in_b = [second] if isinstance(second, int) else list(second)
    in_a = [check_axis("tensordot", i, a.ndim) for i in in_a]
    in_b = [check_axis("tensordot", i, b.ndim) for i in in_b]
    if len(in_a) != len(in_b) or any(a.shape[i] != b.shape[j] for i, j in zip(in_a, in_b)):
        raise ShapeError(
            f"tensordot: axes {in_a} of shape {a.shape} and {in_b} of shape {b.shape} "
            "do not match in length"
        )
    free_a = [i for i in range(a.ndim) if i not in in_a]
    free_b = [j for j in range(b.ndim) if j not in in_b]
    k = 1
    for i in in_a:
        k *= a.shape[i]
    left = reshape(transpose(a, (*free_a, *in_a)), (-1, k))
    right = reshape(transpose(b, (*in_b, *free_b)), (k, -1))
    shape = tuple(a.shape[i] for i in free_a) + tuple(b.shape[j] for j in free_b)
    return reshape(matmul(left, right), shape)


def dot(a: TensorLike, b: TensorLike) -> Tensor:
    """``numpy.dot``: a product for scalars, ``matmul`` for 1-D and 2-D operands, and a
    sum over a's last axis and b's second-to-last one otherwise (also ``t.dot(u)``).

    >>> import remat as rm
    >>> rm.dot(rm.tensor([1.0, 2.0]), rm.tensor([3.0, 4.0]))
    tensor(11.)
    """
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    if a.ndim <= 2 and b.ndim <= 2:
        return matmul(a, b)
    return tensordot(a, b, axes=([-1], [-2 if b.ndim > 1 else -1]))


def inner(a: TensorLike, b: TensorLike) -> Tensor:
    """Sums of products over the last axes of both, as ``numpy.inner``.

    >>> import remat as rm
    >>> rm.inner(rm.ones((2, 3)), rm.ones(3))
    tensor([3., 3.])
    """
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a: TensorLike, b: TensorLike) -> Tensor:
    """Every product a[i] * b[j] of the flattened tensors, as ``numpy.outer``.

    >>> import remat as rm
    >>> rm.outer(rm.tensor([1.0, 2.0]), rm.tensor([1.0, 10.0]))
    tensor([[ 1., 10.],
           [ 2., 20.]])
    """
    a, b = as_tensor(a), as_tensor(b)
    return multiply(reshape(a, (a.size, 1)), reshape(b, (1, b.size)))


def kron(a: TensorLike, b: TensorLike) -> Tensor:
    """The Kronecker product: blocks a[i, j] * b, as ``numpy.kron``.

    >>> import remat as rm
    >>> rm.kron(rm.tensor([1.0, 2.0]), rm.tensor([1.0, 10.0]))
    tensor([ 1., 10.,  2., 20.])
    """
    a, b = as_tensor(a), as_tensor(b)
    ndim = max(a.ndim, b.ndim)
    sa = (1,) * (ndim - a.ndim) + a.shape
    sb = (1,) * (ndim - b.ndim) + b.shape
    spread_a = reshape(a, tuple(s for n in sa for s in (n, 1)))
    spread_b = reshape(b, tuple(s for n in sb for s in (1, n)))
    return reshape(multiply(spread_a, spread_b), tuple(m * n for m, n in zip(sa, sb)))


def cross(a: TensorLike, b: TensorLike, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along ``axis`` (broadcast), as ``numpy.cross``.

    >>> import remat as rm
    >>> rm.cross(rm.tensor([1.0, 0.0, 0.0]), rm.tensor([0.0, 1.0, 0.0]))
    tensor([0., 0., 1.])
    """
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("cross: needs vectors; got a 0-d tensor")
    a = moveaxis(a, check_axis("cross", axis, a.ndim), -1)
    b = moveaxis(b, check_axis("cross", axis, b.ndim), -1)
    if a.shape[-1] != 3 or b.shape[-1] != 3:
        raise ShapeError(
            f"cross: vectors must have 3 components along axis {axis}; got shapes {a.shape} "
            f"and {b.shape} (axis moved last); 2-component vectors are not supported"
        )
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    out = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return moveaxis(out, -1, check_axis("cross", axis, out.ndim))
