"""Neural-network primitives and helpers: activations, normalisation, the loss.

Most are one primitive with a hand-written VJP, rather than a composition of
smaller ops: fewer records on the tape, numerically stable forms, and less
memory, since a composition keeps what each of its small ops saves (see
:func:`gelu` and :func:`layer_norm`).  :func:`cross_entropy` is a composition
of primitives: as one primitive it would save as much and run no faster.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .. import backend
from .core import (
    SELF_ADJOINT,
    ShapeError,
    Tensor,
    apply,
    as_tensor,
    check_axis,
    constant_of,
    defop,
    make_unary,
    unary,
    xp,
)
from .elementwise import abs as absolute
from .elementwise import clip, exp, where
from .index import getitem
from .reduce import mean
from .reduce import sum as _sum
from .shape import astype

if TYPE_CHECKING:
    from ..typing import TensorLike


def _sigmoid(x):
    """1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below, both from
    e = exp(-|x|) in (0, 1]: no overflow, and no cancellation, so the relative error
    is an ulp or two everywhere (0.5 (1 + tanh(x / 2)) lost every digit below -37)."""
    e = _scratch(xp.abs(x))
    xp.negative(e, out=e)
    xp.exp(e, out=e)
    d = e + 1.0
    xp.copyto(e, 1.0, where=x >= 0)  # the numerator: 1, or exp(x) for x < 0
    e /= d
    return e


def _scratch(a):
    """``a``, a fresh result, as an array that floating-point kernels may overwrite.

    NumPy gives a scalar (which takes no ``out=``) for a 0-d result and keeps an
    integer dtype (which ``exp`` and ``tanh`` cannot write into); the kernels
    worked in place need neither, so those become a floating-point array, of
    the dtype the same formula out of place would give (int64 -> float64).
    """
    if not (backend.is_floating(a.dtype) or backend.is_complex(a.dtype)):
        return xp.asarray(a, dtype=xp.result_type(a.dtype, 1.0))
    return xp.asarray(a)


def _softmax(x, axis=-1):
    if x.shape[axis] == 0:  # over an empty axis: an empty result
        return xp.exp(x)
    e = _scratch(x - xp.max(x, axis=axis, keepdims=True))  # one array of x's size, in place
    xp.exp(e, out=e)
    e /= xp.sum(e, axis=axis, keepdims=True)
    return e


def _softmax_vjp(ns, g, ans, x, axis):
    if ns is not backend.ARRAY_NAMESPACE:  # a backward being differentiated: recorded
        return ans * (g - ns.sum(g * ans, axis=axis, keepdims=True))
    out = g * ans  # on arrays: one new array of x's size, worked in place
    total = xp.sum(out, axis=axis, keepdims=True)
    xp.subtract(g, total, out=out)
    out *= ans
    return out


def _log_softmax(x, axis=-1):
    """(x - top) - log(sum(exp(x - top))), top the largest element: not x - logsumexp(x),
    whose difference rounds to an ulp of the logsumexp (0 for [1e308, 1e308, 0])."""
    if x.shape[axis] == 0:
        return x.copy()
    top = xp.max(x, axis=axis, keepdims=True)
    out = _scratch(x - xp.where(xp.isfinite(top), top, 0))
    out -= xp.log(xp.sum(xp.exp(out), axis=axis, keepdims=True))
    return out


SIGMOID = defop(
    "sigmoid", _sigmoid, lambda ns, g, ans, x: g * ans * (1 - ans), needs=("a",), jvps=SELF_ADJOINT
)
RELU = defop(
    "relu",
    lambda x: xp.maximum(x, 0),
    lambda ns, g, ans, x: g * (ans > 0),
    needs=("a",),
    jvps=SELF_ADJOINT,
)
SOFTMAX = defop(
    "softmax",
    _softmax,
    _softmax_vjp,
    needs=("a",),
    jvps=SELF_ADJOINT,  # its Jacobian, diag(s) - s s^T, is symmetric
)
LOG_SOFTMAX = defop(
    "log_softmax",
    _log_softmax,
    lambda ns, g, ans, x, axis: g - ns.exp(ans) * ns.sum(g, axis=axis, keepdims=True),
    needs=("a",),
    jvps=(lambda ns, t, ans, x, axis: t - ns.sum(t * ns.exp(ans), axis=axis, keepdims=True),),
)


sigmoid = make_unary(
    SIGMOID,
    doc="""1 / (1 + exp(-x)), computed without overflow.

    >>> import remat as rm
    >>> rm.sigmoid(rm.tensor([0.0, -1000.0]))
    tensor([0.5, 0. ])
    """,
)
relu = make_unary(
    RELU,
    doc="""max(x, 0), elementwise; the gradient at 0 is 0.

    >>> import remat as rm
    >>> rm.relu(rm.tensor([-1.0, 0.0, 2.0]))
    tensor([0., 0., 2.])
    """,
)


def softmax(x: TensorLike, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, computed stably.

    >>> import remat as rm
    >>> rm.softmax(rm.tensor([0.0, 0.0, 1000.0]))
    tensor([0., 0., 1.])
    """
    x = as_tensor(x)
    return unary(SOFTMAX, x, axis=check_axis("softmax", axis, x.ndim))


def log_softmax(x: TensorLike, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``.

    >>> import remat as rm
    >>> rm.log_softmax(rm.tensor([[0.0, 0.0]]), axis=1)
    tensor([[-0.69314718, -0.69314718]])
    """
    x = as_tensor(x)
    return unary(LOG_SOFTMAX, x, axis=check_axis("log_softmax", axis, x.ndim))


# --- GELU ---------------------------------------------------------------------------
# 0.5 (1 + tanh(u / 2)) is sigmoid(u), so gelu(x) = x sigmoid(u) with u = 2 c (x + a x^3):
# written so, neither the value nor the slope subtracts nearly equal numbers (1 + tanh
# lost every digit of gelu below x = -10, and 1 - tanh^2 those of the slope's small part).
_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_u(x):
    """(x * x, u) in two new arrays of x's size (x * x for the caller to reuse)."""
    x2 = _scratch(x * x)
    u = _scratch(x2 * _GELU_A)
    u += 1.0
    u *= x
    u *= 2.0 * _GELU_C
    return x2, u


def _gelu(x):
    # overflows are part of the formula: x * x = inf beyond 1e154 (u = inf, sigmoid(u) = 1),
    # exp(-u) = inf below x = -19.6 (gelu = -0.0)
    with xp.errstate(over="ignore"):
        out, u = _gelu_u(x)
        xp.negative(u, out=u)
        xp.exp(u, out=u)
        u += 1.0
        return xp.divide(x, u, out=out)  # x / (1 + exp(-u)) = x sigmoid(u)


def _finite_bound(dtype):
    return float(xp.finfo(dtype).max) / 4


def _gelu_vjp(ns, g, ans, x):
    if ns is backend.ARRAY_NAMESPACE:  # an ordinary backward: on arrays, a block at a time
        return _by_blocks(_gelu_slope, x, g)
    # a backward (or tangent) being differentiated: Tensor ops, recorded, in the order
    # of _gelu_slope's, so that the values are its bits
    x2 = x * x
    e = exp(-absolute(((x2 * _GELU_A + 1.0) * x) * (2.0 * _GELU_C)))
    big = _finite_bound(x.dtype)
    ux = clip(((x2 * (3.0 * _GELU_A) + 1.0) * (2.0 * _GELU_C)) * x, -big, big)
    d = e + 1.0
    return where(x < 0, ((ux + 1.0) + e) * e, ux * e + d) / d / d * g


def _gelu_slope(x):
    """d gelu / dx on an array, in two arrays of x's size worked in place.

    With s = sigmoid(u), e = exp(-|u|) and u' = 2 c (1 + 3 a x^2), the slope
    s (1 + (1 - s) u' x) is (1 + e + u' x e) / (1 + e)^2 for x >= 0 and
    e (u' x + 1 + e) / (1 + e)^2 below.  u' x is clipped to a finite bound: where
    it would overflow, e is 0 and the slope exactly 1 or 0.
    """
    with xp.errstate(over="ignore"):  # x * x and u' x beyond 1e102: clipped below
        ux, e = _gelu_u(x)
        ux *= 3.0 * _GELU_A
        ux += 1.0
        ux *= 2.0 * _GELU_C
        ux *= x
    xp.abs(e, out=e)
    xp.negative(e, out=e)
    xp.exp(e, out=e)  # e = exp(-|u|)
    big = _finite_bound(ux.dtype)
    xp.clip(ux, -big, big, out=ux)  # u' x
    mask = xp.asarray(xp.less(x, 0))  # one mask: x < 0, then x >= 0 (NaN goes with the latter)
    xp.add(ux, 1.0, out=ux, where=mask)
    xp.add(ux, e, out=ux, where=mask)
    ux *= e  # (u' x + 1 + e) e for x < 0, u' x e elsewhere
    xp.logical_not(mask, out=mask)
    e += 1.0
    xp.add(ux, e, out=ux, where=mask)
    ux /= e
    ux /= e
    return ux


BLOCK = 1 << 15
"""Elements a blockwise backward (:func:`_by_blocks`) takes at a time."""


def _by_blocks(slope, x, g):
    """``slope(x) * g`` on arrays, ``BLOCK`` elements at a time, into one new array.

    The same values, element for element, but the arrays ``slope`` works in are
    a block's size, not x's: gelu's backward held two arrays of x's size besides
    its result, where a fused kernel (torch's) holds none.  Arrays that are not
    both contiguous, of one shape, are taken whole.
    """
    if x.size <= BLOCK or x.shape != g.shape or not (x.flags.c_contiguous and g.flags.c_contiguous):
        return _times(slope(x), g)
    xs, gs = x.reshape(-1), g.reshape(-1)
    out = None
    for i in range(0, x.size, BLOCK):
        part = _times(slope(xs[i : i + BLOCK]), gs[i : i + BLOCK])
        if out is None:
            out = xp.empty(x.shape, part.dtype)
            flat = out.reshape(-1)
        flat[i : i + BLOCK] = part
    return out


GELU = defop("gelu", _gelu, _gelu_vjp, needs=("0",), jvps=SELF_ADJOINT)

gelu = make_unary(
    GELU,
    doc="""The GELU activation in its tanh form (GPT-2's; PyTorch's ``approximate="tanh"``):
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``, elementwise.

    One primitive, not a composition: its record saves only ``x`` and the
    backward computes the tanh again, where the formula spelled out in small
    ops saves three arrays of x's size or more besides ``x`` (tanh, ...).

    >>> import remat as rm
    >>> rm.gelu(rm.tensor([-1.0, 0.0, 2.0]))
    tensor([-0.15880801,  0.        ,  1.95459769])
    """,
)


# --- layer normalisation --------------------------------------------------------------
def _count(x, axes):
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _normalized(ns, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes``, and 1 / sqrt(var + eps)."""
    n = _count(x, axes)
    centred = x - ns.sum(x, axis=axes, keepdims=True) / n
    rstd = 1.0 / ns.sqrt(ns.sum(centred * centred, axis=axes, keepdims=True) / n + eps)
    return centred * rstd, rstd


def _times(a, b):
    """a * b, written into ``a`` (a fresh array) when that keeps NumPy's result dtype."""
    if xp.result_type(a, b) != a.dtype:
        return a * b
    a *= b
    return a


def _plus(a, b):
    """a + b, written into ``a`` (a fresh array) when that keeps NumPy's result dtype."""
    if xp.result_type(a, b) != a.dtype:
        return a + b
    a += b
    return a


def _normalized_in_place(x, axes, eps):
    """:func:`_normalized` on an array, in one new array of x's size (and the small rstd)."""
    n = _count(x, axes)
    xhat = x - xp.sum(x, axis=axes, keepdims=True) / n
    rstd = _scratch(xp.sum(xhat * xhat, axis=axes, keepdims=True))
    rstd /= n
    rstd += eps
    xp.sqrt(rstd, out=rstd)
    xp.divide(1.0, rstd, out=rstd)
    xhat *= rstd
    return xhat, rstd


def _layer_norm(x, weight, bias, axes, eps):
    out, _ = _normalized_in_place(x, axes, eps)
    if weight is not None:
        out = _times(out, weight)
    if bias is not None:
        out = _plus(out, bias)
    return out


def _normalized_jacobian(ns, x, v, axes, eps):
    """J v for the Jacobian J of x -> (x - mean) / std (over ``axes``); J is symmetric."""
    xhat, rstd = _normalized(ns, x, axes, eps)
    n = _count(x, axes)
    mean_v = ns.sum(v, axis=axes, keepdims=True) / n
    mean_vx = ns.sum(v * xhat, axis=axes, keepdims=True) / n
    return rstd * (v - mean_v - xhat * mean_vx)


def _layer_norm_vjp_x(ns, g, ans, x, weight, bias, axes, eps):
    if ns is not backend.ARRAY_NAMESPACE:  # a backward being differentiated: recorded
        return _normalized_jacobian(ns, x, g if weight is None else g * weight, axes, eps)
    # on arrays, in place: rstd (v - mean(v) - xhat mean(v xhat)) with v = g * weight
    n = _count(x, axes)
    xhat, rstd = _normalized_in_place(x, axes, eps)
    v = g * weight if weight is not None else g.copy()
    mean_vx = xp.sum(v * xhat, axis=axes, keepdims=True)
    mean_vx /= n
    v -= xp.sum(v, axis=axes, keepdims=True) / n
    v -= _times(xhat, mean_vx)
    v *= rstd
    return v


def _layer_norm_vjp_weight(ns, g, ans, x, weight, bias, axes, eps):
    if ns is not backend.ARRAY_NAMESPACE:  # a backward being differentiated: recorded
        return g * _normalized(ns, x, axes, eps)[0]
    xhat, _ = _normalized_in_place(x, axes, eps)
    return _times(xhat, g)  # the tape sums it to weight's shape


def _layer_norm_jvp_x(ns, t, ans, x, weight, bias, axes, eps):
    out = _normalized_jacobian(ns, x, t, axes, eps)
    return out if weight is None else out * weight


LAYER_NORM = defop(
    "layer_norm",
    _layer_norm,
    _layer_norm_vjp_x,
    _layer_norm_vjp_weight,
    lambda ns, g, ans, x, weight, bias, axes, eps: g,
    needs=("01", "0", ""),
    jvps=(
        _layer_norm_jvp_x,
        _layer_norm_vjp_weight,  # t * xhat: the same product, with t for g
        lambda ns, t, ans, x, weight, bias, axes, eps: t,
    ),
)


def layer_norm(
    x: TensorLike,
    weight: TensorLike | None = None,
    bias: TensorLike | None = None,
    axis: int | tuple[int, ...] = -1,
    eps: float = 1e-5,
) -> Tensor:
    """Layer normalisation: ``(x - mean) / sqrt(var + eps) * weight + bias``, the mean
    and (biased) variance taken over ``axis`` (an int or a tuple of axes).

    ``weight`` and ``bias`` (None: leave out) must broadcast to ``x``'s shape,
    e.g. shape ``(d,)`` for ``axis=-1``.  One primitive, not a composition: its
    record saves ``x`` and ``weight`` only and the backward normalises again,
    where the formula spelled out in small ops saves two more arrays of x's
    size (the centred and the normalised input).

    >>> import remat as rm
    >>> y = rm.layer_norm(rm.tensor([[1.0, 2.0, 3.0]]), bias=rm.tensor([0.0, 0.0, 1.0]))
    >>> y.numpy().round(4)
    array([[-1.2247,  0.    ,  2.2247]])
    """
    x = as_tensor(x)
    if isinstance(axis, tuple):
        axes = tuple(sorted({check_axis("layer_norm", a, x.ndim) for a in axis}))
    else:
        axes = (check_axis("layer_norm", axis, x.ndim),)
    inputs: list[Tensor | None] = [x]
    for name, given in (("weight", weight), ("bias", bias)):
        value = None if given is None else as_tensor(given)
        if value is not None:
            try:
                fits = xp.broadcast_shapes(value.shape, x.shape) == x.shape
            except ValueError:
                fits = False
            if not fits:
                raise ShapeError(
                    f"layer_norm: {name} of shape {value.shape} does not broadcast to the input's "
                    f"shape {x.shape} (for axis={axis}, give it shape "
                    f"{tuple(x.shape[a] for a in range(axes[0], x.ndim))})"
                )
        inputs.append(value)
    wide = xp.result_type(*(t.dtype for t in inputs if t is not None))
    if x.dtype != wide and backend.is_floating(wide):
        # x32 with a float64 weight: normalise in float64, as NumPy computes x32 * w64; the
        # gradient comes back to float32 at the cast
        inputs[0] = astype(x, wide)
    return apply(LAYER_NORM, inputs, {"axes": axes, "eps": eps})


# --- the loss -------------------------------------------------------------------------
REDUCTIONS = ("mean", "sum", "none")


def cross_entropy(
    logits: TensorLike, labels: TensorLike, axis: int = -1, reduction: str = "mean"
) -> Tensor:
    """The cross-entropy of ``softmax(logits)`` against ``labels``, along ``axis``.

    ``labels`` are either integer classes, one per position (``logits.shape``
    without ``axis``), or probabilities with ``logits``' own shape.  The
    losses per position are averaged (``reduction="mean"``), added up
    (``"sum"``) or returned as they are (``"none"``).

    A composition of primitives, ``-log_softmax(logits)`` picked at the labels
    by indexing (or weighted by the probabilities) and reduced: its records
    keep the log-probabilities and the labels' index, the same as one fused
    primitive would (the logits or the probabilities), and its backward does
    the same arithmetic, so a primitive would buy nothing.

    >>> import numpy as np, remat as rm
    >>> logits = rm.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]], requires_grad=True)
    >>> loss = rm.cross_entropy(logits, np.array([0, 2]))
    >>> round(loss.item(), 4)  # (-log(e^2 / (e^2 + 2)) - log(1/3)) / 2
    0.6691
    >>> loss.backward()
    >>> logits.grad.round(3)  # (softmax - one_hot) / 2
    array([[-0.107,  0.053,  0.053],
           [ 0.167,  0.167, -0.333]])
    """
    logits = as_tensor(logits)
    if reduction not in REDUCTIONS:
        raise ValueError(
            f"cross_entropy: reduction={reduction!r}; choose one of {', '.join(REDUCTIONS)}"
        )
    axis = check_axis("cross_entropy", axis, logits.ndim)
    log_p = log_softmax(logits, axis=axis)
    if isinstance(labels, Tensor) and labels.requires_grad:  # probabilities with a gradient
        return _reduced(-_sum(log_p * _probabilities(labels, logits), axis=axis), reduction)
    labels = constant_of("cross_entropy", labels)
    if not backend.is_array(labels):
        labels = backend.asarray(labels)
    if backend.is_integer(labels.dtype):
        want = logits.shape[:axis] + logits.shape[axis + 1 :]
        if labels.shape != want:
            raise ShapeError(
                f"cross_entropy: integer labels of shape {labels.shape} for logits of shape "
                f"{logits.shape} along axis {axis}: the labels need shape {want}"
            )
        classes = logits.shape[axis]
        if labels.size:
            low, high = backend.label_range(labels)
            if low < 0 or high >= classes:
                bad = low if low < 0 else high
                raise ValueError(
                    f"cross_entropy: label {bad} is out of range: the logits have {classes} "
                    f"classes along axis {axis}, so labels must be in [0, {classes - 1}]"
                )
        losses = -getitem(log_p, backend.index_along(labels, axis))
    elif backend.is_floating(labels.dtype):
        losses = -_sum(log_p * _probabilities(labels, logits), axis=axis)
    else:
        raise TypeError(
            f"cross_entropy: labels of dtype {labels.dtype}; give integer classes or "
            "floating-point probabilities"
        )
    return _reduced(losses, reduction)


def _probabilities(labels, logits):
    if labels.shape != logits.shape:
        raise ShapeError(
            f"cross_entropy: probabilities of shape {labels.shape} for logits of shape "
            f"{logits.shape}: they need the logits' shape (or give integer class labels)"
        )
    return labels


def _reduced(losses, reduction):
    if reduction == "none":
        return losses
    return mean(losses) if reduction == "mean" else _sum(losses)
