"""Products, spreads and orderings: ``prod``, ``var``, ``std``, ``sort``,
``partition``, plus ``select`` and ``linspace``.

``prod`` is a primitive whose VJP is right at zeros: each element's slope is
the product of the *others*, made from running products from both ends (never
ans / x, which is 0 / 0 at a zero).  ``sort`` and ``partition`` are primitives
that move each value to its place; where values tie, the order among them is
arbitrary, so their gradient is shared equally among the tied elements, as
:func:`remat.max` shares it (that is the average of the one-sided derivatives,
what a central difference sees).  ``var`` and ``std`` compose from ``mean`` and
``sum`` as NumPy computes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import backend
from .arrange import ravel
from .core import ShapeError, Tensor, apply, as_tensor, check_axis, defop
from .either import ints, raw
from .elementwise import sqrt, where
from .reduce import kept_axes, mean, normalize_axes
from .reduce import sum as _sum

if TYPE_CHECKING:
    from ..typing import Axis, TensorLike

xp = backend.xp


def _checked_axes(name: str, axis: int | tuple[int, ...], ndim: int) -> tuple[int, ...]:
    """``axis`` as axes in [0, ndim), each checked before it wraps around."""
    given = ints(name, "axis", axis)
    return tuple(check_axis(name, a, ndim) for a in ((given,) if isinstance(given, int) else given))


# --- prod ---------------------------------------------------------------------------
def _prod_others(rows):
    """For each element along the last axis, the product of the others: running products
    from either end, so exact at zeros (never prod / x)."""
    if rows.shape[-1] == 0:
        return xp.empty_like(rows)
    ones = xp.ones_like(rows[..., :1])
    left = xp.concatenate([ones, xp.cumprod(rows[..., :-1], axis=-1)], axis=-1)
    right = xp.concatenate([xp.cumprod(rows[..., :0:-1], axis=-1)[..., ::-1], ones], axis=-1)
    return left * right


def _others_of(ns, rows):
    """:func:`_prod_others` on arrays, and recorded (PROD_OTHERS) on Tensors: the same bits."""
    return _prod_others(rows) if ns is backend.ARRAY_NAMESPACE else apply(PROD_OTHERS, (rows,))


def _pairs(ns, rows):
    """M[..., i, j]: the product of the elements other than i and j (0 where i = j), the
    derivative of the others' products; (n, n) per row, made only to differentiate twice."""
    alone = xp.eye(rows.shape[-1], dtype=bool)
    return ns.where(alone, 0.0, _others_of(ns, ns.where(alone, 1.0, rows[..., None, :])))


PROD_OTHERS = defop(
    "prod_others",
    _prod_others,
    lambda ns, g, ans, rows: ns.sum(g[..., :, None] * _pairs(ns, rows), axis=-2),
    needs=("0",),
    jvps=(lambda ns, t, ans, rows: ns.sum(_pairs(ns, rows) * t[..., None, :], axis=-1),),
)


def _others(ns, x, axis):
    """For each element of x, the product of the other elements of its reduction."""
    axes = normalize_axes(axis, x.ndim)
    kept = [a for a in range(x.ndim) if a not in axes]
    order = (*kept, *axes)
    moved = x if order == tuple(range(x.ndim)) else ns.transpose(x, order)
    n = 1
    for a in axes:
        n *= x.shape[a]
    rows = ns.reshape(moved, tuple(x.shape[a] for a in kept) + (n,))
    back = ns.reshape(_others_of(ns, rows), moved.shape)
    if order == tuple(range(x.ndim)):
        return back
    return ns.transpose(back, tuple(int(a) for a in xp.argsort(order)))


def _prod_vjp(ns, g, ans, x, axis, keepdims, shape):
    return kept_axes(ns, g, axis, keepdims, shape) * _others(ns, x, axis)


def _prod_jvp(ns, t, ans, x, axis, keepdims, shape):
    return ns.sum(t * _others(ns, x, axis), axis=axis, keepdims=keepdims)


PROD = defop("prod", xp.prod, _prod_vjp, needs=("0",), jvps=(_prod_jvp,))


def prod(x: TensorLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """The product over ``axis`` (every axis by default), as ``numpy.prod``; exact
    gradients at zeros (the product of the other elements), 1 over an empty axis.

    >>> import remat as rm
    >>> x = rm.tensor([2.0, 0.0, 3.0], requires_grad=True)
    >>> rm.prod(x).backward(); x.grad
    array([0., 6., 0.])
    """
    x = as_tensor(x)
    axes = None if axis is None else _checked_axes("prod", axis, x.ndim)
    kw = {"axis": axes, "keepdims": keepdims}
    return apply(PROD, (x,), kw, {**kw, "shape": x.shape})


# --- var, std -----------------------------------------------------------------------
def var(x: TensorLike, axis: Axis = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """The variance over ``axis``, sum((x - mean)²) / (n - ddof), as ``numpy.var``.

    >>> import remat as rm
    >>> rm.var(rm.tensor([1.0, 2.0, 3.0, 4.0]))
    tensor(1.25)
    """
    x = as_tensor(x)
    axes = tuple(range(x.ndim)) if axis is None else _checked_axes("var", axis, x.ndim)
    n = 1
    for a in axes:
        n *= x.shape[a]
    d = x - mean(x, axis=axis, keepdims=True)
    return _sum(d * d, axis=axis, keepdims=keepdims) / max(n - ddof, 0)


def std(x: TensorLike, axis: Axis = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """The standard deviation, sqrt(var), as ``numpy.std`` (its gradient is infinite
    where the values are all equal).

    >>> import remat as rm
    >>> rm.std(rm.tensor([1.0, 3.0]))
    tensor(1.)
    """
    return sqrt(var(x, axis=axis, ddof=ddof, keepdims=keepdims))


# --- sort, partition ----------------------------------------------------------------
def _along(index, axis):
    """The advanced index of ``take_along_axis(., index, axis)``."""
    parts: list[Any] = []
    for d, n in enumerate(index.shape):
        if d == axis:
            parts.append(index)
        else:
            parts.append(xp.arange(n).reshape((1,) * d + (n,) + (1,) * (index.ndim - d - 1)))
    return tuple(parts)


def _share_ties(ns, g, values, axis):
    """``g`` with each run of equal ``values`` along ``axis`` given its mean (g if none tie)."""
    v = xp.moveaxis(values, axis, -1)
    order = xp.argsort(v, axis=-1, kind="stable")
    s = xp.take_along_axis(v, order, axis=-1)
    same = s[..., 1:] == s[..., :-1]
    if v.size == 0 or not same.any():
        return g
    first = xp.ones(s.shape[:-1] + (1,), dtype=bool)
    runs = xp.cumsum(xp.concatenate([first, ~same], axis=-1).reshape(-1)) - 1
    ids = xp.empty_like(runs)
    ids[(order + xp.arange(0, v.size, v.shape[-1]).reshape(v.shape[:-1] + (1,))).reshape(-1)] = runs
    ids = xp.moveaxis(ids.reshape(v.shape), -1, axis).reshape(-1)
    counts = xp.bincount(ids).astype(g.dtype)
    totals = ns.scatter_add((counts.size,), ids, ns.reshape(g, (-1,)))
    return ns.reshape(totals[ids] / counts[ids], g.shape)


def _ordering(x, axis, kth):
    if kth is None:
        return xp.argsort(x, axis=axis, kind="stable")
    return xp.argpartition(x, kth, axis=axis)


def _ordered(x, axis, kth=None):
    return x[_along(_ordering(x, axis, kth), axis)]


def _ordered_vjp(ns, g, ans, x, axis, kth=None):
    perm = _ordering(raw(x), axis, kth)
    g = _share_ties(ns, g, raw(x)[_along(perm, axis)], axis)
    return g[_along(xp.argsort(perm, axis=axis), axis)]


def _ordered_jvp(ns, t, ans, x, axis, kth=None):
    perm = _ordering(raw(x), axis, kth)
    data = raw(x)[_along(perm, axis)]
    return _share_ties(ns, t[_along(perm, axis)], data, axis)


SORT = defop("sort", _ordered, _ordered_vjp, needs=("0",), jvps=(_ordered_jvp,))
PARTITION = defop("partition", _ordered, _ordered_vjp, needs=("0",), jvps=(_ordered_jvp,))


def sort(x: TensorLike, axis: int | None = -1) -> Tensor:
    """The values in ascending order along ``axis`` (of the flattened tensor for None),
    as ``numpy.sort``; tied values share their gradient equally.

    >>> import remat as rm
    >>> x = rm.tensor([3.0, 1.0, 3.0], requires_grad=True)
    >>> y = rm.sort(x); y
    tensor([1., 3., 3.], op=sort)
    >>> (y * rm.tensor([1.0, 2.0, 4.0])).sum().backward(); x.grad
    array([3., 1., 3.])
    """
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    if x.ndim == 0:
        raise ShapeError("sort: needs 1 or more axes; the tensor is 0-d (axis=None flattens)")
    return apply(SORT, (x,), {"axis": check_axis("sort", axis, x.ndim)})


def partition(x: TensorLike, kth: int | Sequence[int], axis: int | None = -1) -> Tensor:
    """The values rearranged so that the ``kth`` one is in its sorted place, smaller ones
    before and larger ones after (in no set order), as ``numpy.partition``.

    >>> import remat as rm
    >>> float(rm.partition(rm.tensor([5.0, 1.0, 4.0, 2.0]), 1)[1])
    2.0
    """
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    if x.ndim == 0:
        raise ShapeError("partition: needs 1 or more axes; the tensor is 0-d")
    axis = check_axis("partition", axis, x.ndim)
    n = x.shape[axis]
    kth = ints("partition", "kth", kth)
    kths = (kth,) if isinstance(kth, int) else kth
    if any(not -n <= k < n for k in kths):
        raise ShapeError(f"partition: kth {kth} is out of bounds for axis {axis} of length {n}")
    kw = {"axis": axis, "kth": kths if len(kths) > 1 else kths[0]}
    return apply(PARTITION, (x,), kw)


# --- select, linspace ---------------------------------------------------------------
def select(
    condlist: Sequence[TensorLike], choicelist: Sequence[TensorLike], default: TensorLike = 0
) -> Tensor:
    """From each element of the choices, the one whose condition holds first (``default``
    where none holds), as ``numpy.select``.

    >>> import remat as rm
    >>> x = rm.tensor([-2.0, 0.5, 3.0])
    >>> rm.select([x < 0, x > 1], [-x, x * 10], default=0.0)
    tensor([ 2.,  0., 30.])
    """
    if len(condlist) != len(choicelist):
        raise ValueError(
            f"select: {len(condlist)} conditions but {len(choicelist)} choices; give one each"
        )
    out: Any = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):
        out = where(cond, choice, out)
    return as_tensor(out)


def _linspace(start, stop, num, endpoint, axis):
    return xp.linspace(start, stop, num, endpoint=endpoint, axis=axis)


def _share(num, endpoint, axis, shape, dtype):
    """Each output's weight on ``stop`` (its weight on ``start`` is one minus it), in the
    output's dtype (a float32 end's tangent joins a float64 output in float64)."""
    w = xp.linspace(0.0, 1.0, num, endpoint=endpoint).astype(dtype, copy=False)
    return w.reshape((1,) * axis + (num,) + (1,) * (len(shape) - axis))


def _spread(ns, t, weight, axis, shape):
    t = ns.broadcast_to(t, shape)
    return ns.reshape(t, shape[:axis] + (1,) + shape[axis:]) * weight


LINSPACE = defop(
    "linspace",
    _linspace,
    lambda ns, g, ans, a, b, num, endpoint, axis, shape, dtype: ns.sum(
        g * (1 - _share(num, endpoint, axis, shape, dtype)), axis=axis
    ),
    lambda ns, g, ans, a, b, num, endpoint, axis, shape, dtype: ns.sum(
        g * _share(num, endpoint, axis, shape, dtype), axis=axis
    ),
    needs=("", ""),
    jvps=(
        lambda ns, t, ans, a, b, num, endpoint, axis, shape, dtype: _spread(
            ns, t, 1 - _share(num, endpoint, axis, shape, dtype), axis, shape
        ),
        lambda ns, t, ans, a, b, num, endpoint, axis, shape, dtype: _spread(
            ns, t, _share(num, endpoint, axis, shape, dtype), axis, shape
        ),
    ),
)


def linspace(
    start: TensorLike, stop: TensorLike, num: int = 50, endpoint: bool = True, axis: int = 0
) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop``, as ``numpy.linspace``;
    differentiable in both ends (a value's slopes are its weights on them).

    >>> import remat as rm
    >>> rm.linspace(0.0, rm.tensor(1.0), 5)
    tensor([0.  , 0.25, 0.5 , 0.75, 1.  ])
    """
    num = ints("linspace", "num", num)
    if not isinstance(num, int) or num < 0:
        raise ValueError(f"linspace: num must be an int >= 0, not {num!r}")
    shape = xp.broadcast_shapes(xp.shape(raw(start)), xp.shape(raw(stop)))
    axis = check_axis("linspace", axis, len(shape) + 1)
    kw = {"num": num, "endpoint": endpoint, "axis": axis}
    dtype = xp.result_type(raw(start), raw(stop), float(num))  # as numpy.linspace's
    return apply(LINSPACE, (start, stop), kw, {**kw, "shape": shape, "dtype": dtype})
