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
from .index import getitem
from .reduce import _logsumexp, mean
from .reduce import sum as _sum

if TYPE_CHECKING:
    from ..typing import TensorLike


def _sigmoid(x):
    return 0.5 * (1.0 + xp.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


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
    if x.shape[axis] == 0:
        return x.copy()
    return x - _logsumexp(x, axis=axis, keepdims=True)


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
_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu(x):
    out = _scratch(x * x)  # 0.5 x (1 + tanh(c (x + a x^3))), in one array worked in place
    out *= _GELU_A
    out += 1.0
    out *= x
    out *= _GELU_C
    xp.tanh(out, out=out)
    out += 1.0
    out *= x
    out *= 0.5
    return out


def _gelu_vjp(ns, g, ans, x):
    if ns is backend.ARRAY_NAMESPACE:  # an ordinary backward: on arrays, a block at a time
        return _by_blocks(_gelu_slope, x, g)
    # a backward (or tangent) being differentiated: Tensor ops, recorded, in the order
    # of _gelu_slope's, so that the values are its bits
    s = ((x * x) * (3.0 * _GELU_A) + 1.0) * (0.5 * _GELU_C) * x
    one_minus_t = 1.0 - ns.tanh(((x * x) * _GELU_A + 1.0) * x * _GELU_C)
    return (2.0 - one_minus_t) * (s * one_minus_t + 0.5) * g


def _gelu_slope(x):
    """d gelu / dx on an array, in two arrays of x's size worked in place.

    With t = tanh(c (x + a x^3)) and s = 0.5 x c (1 + 3 a x^2) the slope
    0.5 (1 + t) + s (1 - t^2) is (1 + t) (0.5 + s (1 - t)).
    """
    s = _scratch(x * x)
    s *= 3.0 * _GELU_A
    s += 1.0
    s *= 0.5 * _GELU_C
    s *= x  # s = 0.5 x c (1 + 3 a x^2)
    t = _scratch(x * x)
    t *= _GELU_A
    t += 1.0
    t *= x
    t *= _GELU_C
    xp.tanh(t, out=t)
    xp.subtract(1.0, t, out=t)  # 1 - t
    s *= t
    s += 0.5  # 0.5 + s (1 - t)
    xp.subtract(2.0, t, out=t)  # 1 + t
    t *= s
    return t


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
