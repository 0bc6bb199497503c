"""Reductions over axes (NumPy's ``axis`` and ``keepdims``), with their VJPs.

A reduction's cotangent has the reduced shape; its VJP first puts the reduced
axes back as size-1 axes (:func:`kept_axes`) so that it broadcasts against the
input again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import backend
from .core import ShapeError, Tensor, apply, as_tensor, check_axis, constant_of, defop, xp

if TYPE_CHECKING:
    from ..typing import Axis, TensorLike


def normalize_axes(axis, ndim):
    """``axis`` (None, int or tuple, possibly negative) as a tuple of axes >= 0."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(a % ndim if ndim else a for a in axes)


def kept_axes(ns, g, axis, keepdims, shape):
    """Reshape a reduced cotangent so the reduced axes are there with size 1."""
    if keepdims:
        return g
    axes = normalize_axes(axis, len(shape))
    return ns.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(shape)))


def _count(axis, shape):
    count = 1
    for a in normalize_axes(axis, len(shape)):
        count *= shape[a]
    return count


def _sum_vjp(ns, g, ans, x, axis, keepdims, shape):
    return ns.broadcast_to(kept_axes(ns, g, axis, keepdims, shape), shape)


def _mean_vjp(ns, g, ans, x, axis, keepdims, shape):
    return _sum_vjp(ns, g, ans, x, axis, keepdims, shape) / _count(axis, shape)


def _extreme_vjp(ns, g, ans, x, axis, keepdims, shape):
    # The gradient goes to the extreme elements, shared equally between ties
    # (the tie count is cast to the gradient's dtype, so float32 stays float32).
    mask = x == kept_axes(ns, ans, axis, keepdims, shape)
    g = kept_axes(ns, g, axis, keepdims, shape)
    ties = ns.astype(ns.sum(mask, axis=axis, keepdims=True), g.dtype)
    return g * mask / ties


def _logsumexp(x, axis=None, keepdims=False):
    if any(x.shape[a] == 0 for a in normalize_axes(axis, x.ndim)):  # log(0): -inf, as PyTorch
        return xp.full_like(xp.sum(x, axis=axis, keepdims=keepdims), -xp.inf)
    top = xp.max(x, axis=axis, keepdims=True)
    top = xp.where(xp.isfinite(top), top, 0)
    out = xp.log(xp.sum(xp.exp(x - top), axis=axis, keepdims=True)) + top
    return out if keepdims else xp.squeeze(out, axis=axis)


def _softmax_weights(ns, x, axis):
    """softmax(x) over ``axis``, the derivative of logsumexp: exp(x - top) / sum, with
    top the largest element, a constant (any constant gives the same function).

    Not exp(x - logsumexp(x)): that difference rounds to an ulp of the logsumexp, so
    [1e308, 1e308, 0] weighed 1 each (not 1/2), and rows of large values lost digits.
    """
    data = x if backend.is_array(x) else x._data  # Tensors in a differentiated backward
    top = xp.max(data, axis=axis, keepdims=True) if data.size else xp.zeros(())
    e = ns.exp(x - xp.where(xp.isfinite(top), top, 0))
    return e / ns.sum(e, axis=axis, keepdims=True)


def _logsumexp_vjp(ns, g, ans, x, axis, keepdims, shape):
    return kept_axes(ns, g, axis, keepdims, shape) * _softmax_weights(ns, x, axis)


def _sum_jvp(ns, t, ans, x, axis, keepdims, shape):
    return ns.sum(t, axis=axis, keepdims=keepdims)


def _mean_jvp(ns, t, ans, x, axis, keepdims, shape):
    return ns.sum(t, axis=axis, keepdims=keepdims) / _count(axis, shape)


def _extreme_jvp(ns, t, ans, x, axis, keepdims, shape):
    # the mean of the tangent over the tied extreme elements
    mask = x == kept_axes(ns, ans, axis, keepdims, shape)
    ties = ns.astype(ns.sum(mask, axis=axis, keepdims=keepdims), t.dtype)
    return ns.sum(t * mask, axis=axis, keepdims=keepdims) / ties


def _logsumexp_jvp(ns, t, ans, x, axis, keepdims, shape):
    return ns.sum(t * _softmax_weights(ns, x, axis), axis=axis, keepdims=keepdims)


SUM = defop("sum", xp.sum, _sum_vjp, needs=("",), jvps=(_sum_jvp,))
MEAN = defop("mean", xp.mean, _mean_vjp, needs=("",), jvps=(_mean_jvp,))
MAX = defop("max", xp.max, _extreme_vjp, needs=("0a",), jvps=(_extreme_jvp,))
MIN = defop("min", xp.min, _extreme_vjp, needs=("0a",), jvps=(_extreme_jvp,))
LOGSUMEXP = defop("logsumexp", _logsumexp, _logsumexp_vjp, needs=("0",), jvps=(_logsumexp_jvp,))


def _reduce(op, x, axis, keepdims):
    x = as_tensor(x)
    forward_kw = {"axis": axis, "keepdims": keepdims}
    return apply(op, (x,), forward_kw, {**forward_kw, "shape": x.shape})


def sum(x: TensorLike, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """The sum over ``axis`` (every axis by default), as ``numpy.sum`` (NumPy's name).

    >>> import remat as rm
    >>> rm.sum(rm.ones((2, 3)), axis=0)
    tensor([2., 2., 2.])
    """
    return _reduce(SUM, x, axis, keepdims)


def mean(x: TensorLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """The mean over ``axis`` (every axis by default), as ``numpy.mean``.

    >>> import remat as rm
    >>> rm.mean(rm.tensor([[1.0, 2.0], [3.0, 4.0]]), axis=1, keepdims=True)
    tensor([[1.5],
           [3.5]])
    """
    return _reduce(MEAN, x, axis, keepdims)


def max(x: TensorLike, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Largest element(s); ties share the gradient equally.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 3.0, 3.0], requires_grad=True)
    >>> rm.max(x).backward(); x.grad
    array([0. , 0.5, 0.5])
    """
    return _reduce(MAX, x, axis, keepdims)


def min(x: TensorLike, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Smallest element(s); ties share the gradient equally.

    >>> import remat as rm
    >>> rm.min(rm.tensor([[1.0, -2.0], [0.5, 4.0]]), axis=0)
    tensor([ 0.5, -2. ])
    """
    return _reduce(MIN, x, axis, keepdims)


def logsumexp(x: TensorLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) computed stably (the largest element is factored out).

    >>> import remat as rm
    >>> rm.logsumexp(rm.tensor([1000.0, 1000.0]))
    tensor(1000.69314718)
    """
    return _reduce(LOGSUMEXP, x, axis, keepdims)


def _arg_extreme(name, x, axis, keepdims):
    """Where the extreme elements are: an integer constant (not an op on the tape,
    since an index has no gradient).  A value of a loop step is refused outside it."""
    x = as_tensor(x)
    constant_of(f"rm.{name}", x)  # a loop step's value stays inside its step
    if axis is not None:
        axis = check_axis(name, axis, x.ndim)
    try:
        out = getattr(xp, name)(x._data, axis=axis, keepdims=keepdims)
    except ValueError as error:  # an empty tensor (or axis) has no extreme element
        raise ShapeError(f"{name}: {error} (tensor of shape {x.shape})") from None
    return Tensor._wrap(out if backend.is_array(out) else xp.asarray(out))  # 0-d: an array


def argmax(x: TensorLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Indices of the largest elements (of the flattened tensor, or along ``axis``), as
    ``numpy.argmax``: an int64 tensor without gradient.  Ties give the first index.

    >>> import remat as rm
    >>> rm.argmax(rm.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0]]), axis=1)
    tensor([1, 0])
    """
    return _arg_extreme("argmax", x, axis, keepdims)


def argmin(x: TensorLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Indices of the smallest elements, as ``numpy.argmin`` (see :func:`argmax`).

    >>> import remat as rm
    >>> int(rm.argmin(rm.tensor([3.0, -1.0, 4.0])))
    1
    """
    return _arg_extreme("argmin", x, axis, keepdims)
