"""The stencil toolkit: ``roll``, ``pad``, ``cumsum``, ``diff`` and ``gradient``.

``roll``, ``pad`` and ``cumsum`` are primitives, for speed: one NumPy call
forward and one back (a roll rolls back, a pad is sliced off, a running sum
is summed from the other end), where a composition would record a slicing
op per piece.  ``diff`` and ``gradient`` are compositions of slices and
subtractions that compute what NumPy computes, to the bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import backend
from .core import ShapeError, Tensor, apply, as_tensor, check_axis, defop
from .either import call, ints, recorded
from .shape import broadcast_to, concatenate, reshape

if TYPE_CHECKING:
    from ..typing import TensorLike

xp = backend.xp


def _roll(x, shift, axis):
    """numpy.roll's values, by one concatenate per axis (numpy.roll costs 6x more at 200
    elements: bench_overheads' heat step)."""
    if axis is None:
        return _roll(x.reshape(-1), shift, 0).reshape(x.shape)
    shifts, axes = (shift, axis) if isinstance(axis, tuple) else ((shift,), (axis,))
    for s, a in zip(shifts, axes):
        n = x.shape[a]
        s = s % n if n else 0
        before = (slice(None),) * a
        x = xp.concatenate((x[before + (slice(n - s, None),)], x[before + (slice(0, n - s),)]), a)
    return x


def _negated(shift):
    return tuple(-s for s in shift) if isinstance(shift, tuple) else -shift


ROLL = defop(
    "roll",
    _roll,
    lambda ns, g, ans, x, shift, axis: call(ns, "roll", g, _negated(shift), axis),
    needs=("",),
    jvps=(lambda ns, t, ans, x, shift, axis: call(ns, "roll", t, shift, axis),),
)


def roll(
    x: TensorLike, shift: int | Sequence[int], axis: int | Sequence[int] | None = None
) -> Tensor:
    """Elements shifted along ``axis`` (of the flattened tensor by default), those
    leaving one end coming back at the other, as ``numpy.roll``; any integer shift,
    negative or beyond the length, wraps around.

    >>> import remat as rm
    >>> rm.roll(rm.tensor([1.0, 2.0, 3.0]), 1)
    tensor([3., 1., 2.])
    """
    x = as_tensor(x)
    shifts = ints("roll", "shift", shift)
    axis = None if axis is None else ints("roll", "axis", axis)
    if axis is None:
        if not isinstance(shifts, int):
            raise ShapeError(
                f"roll: {len(shifts)} shifts but no axis (one shift rolls the flattened tensor)"
            )
        axes: Any = None
    elif isinstance(axis, int):
        axes = check_axis("roll", axis, x.ndim)
    else:
        axes = tuple(check_axis("roll", a, x.ndim) for a in axis)
        if isinstance(shifts, int):
            shifts = (shifts,) * len(axes)
        if len(shifts) != len(axes):
            raise ShapeError(f"roll: {len(shifts)} shifts for {len(axes)} axes {tuple(axis)}")
    if isinstance(axes, int) and not isinstance(shifts, int):
        raise ShapeError(f"roll: {len(shifts)} shifts for the one axis {axis}")
    return apply(ROLL, (x,), {"shift": shifts, "axis": axes})


def _pad(x, pad_width, constant_values):
    """numpy.pad's values in constant mode, by one fill and one copy (numpy.pad costs 20x
    more at 200 elements)."""
    shape = tuple(n + a + b for n, (a, b) in zip(x.shape, pad_width))
    out = xp.full_like(x, constant_values, shape=shape)
    out[tuple(slice(a, a + n) for n, (a, _) in zip(x.shape, pad_width))] = x
    return out


def _unpad(t, pad_width):
    return t[
        tuple(slice(before, t.shape[i] - after) for i, (before, after) in enumerate(pad_width))
    ]


PAD = defop(
    "pad",
    _pad,
    lambda ns, g, ans, x, pad_width, constant_values: _unpad(g, pad_width),
    needs=("",),
    jvps=(lambda ns, t, ans, x, pad_width, constant_values: call(ns, "pad", t, pad_width),),
)


def pad(
    x: TensorLike,
    pad_width: int | Sequence[Any],
    mode: str = "constant",
    constant_values: float = 0,
) -> Tensor:
    """``x`` with a border of ``constant_values`` (``pad_width`` as ``numpy.pad`` takes it:
    ``n``, ``(before, after)``, or one pair per axis).  Only ``mode="constant"``
    (``"wrap"`` is :func:`roll`'s business; a stencil pads with zeros or constants).

    >>> import remat as rm
    >>> rm.pad(rm.tensor([1.0, 2.0]), (1, 2))
    tensor([0., 1., 2., 0., 0.])
    """
    x = as_tensor(x)
    if mode != "constant":
        raise NotImplementedError(
            f"pad: mode {mode!r} is not supported; only mode='constant' (with constant_values)"
        )
    if not isinstance(constant_values, (int, float)):
        raise TypeError(f"pad: constant_values must be one number, not {constant_values!r}")
    try:
        widths = xp.broadcast_to(xp.asarray(pad_width), (x.ndim, 2))
    except ValueError:
        raise ShapeError(
            f"pad: pad_width {pad_width!r} does not fit a tensor of shape {x.shape}: give n, "
            "(before, after), or one (before, after) pair per axis"
        ) from None
    if widths.dtype.kind not in "iu" or (widths < 0).any():
        raise ValueError(f"pad: pad_width must hold integers >= 0; got {pad_width!r}")
    pairs = tuple((int(a), int(b)) for a, b in widths)
    return apply(PAD, (x,), {"pad_width": pairs, "constant_values": constant_values})


def _reverse(t, axis):
    return t[(slice(None),) * axis + (slice(None, None, -1),)]


CUMSUM = defop(
    "cumsum",
    lambda x, axis: xp.cumsum(x, axis=axis),
    # the cotangent of element i collects g[i:]: a running sum from the far end
    lambda ns, g, ans, x, axis: _reverse(call(ns, "cumsum", _reverse(g, axis), axis=axis), axis),
    needs=("",),
    jvps=(lambda ns, t, ans, x, axis: call(ns, "cumsum", t, axis=axis),),
)


def cumsum(x: TensorLike, axis: int | None = None) -> Tensor:
    """Running sums along ``axis`` (of the flattened tensor by default), as ``numpy.cumsum``.

    >>> import remat as rm
    >>> rm.cumsum(rm.tensor([1.0, 2.0, 3.0]))
    tensor([1., 3., 6.])
    """
    x = as_tensor(x)
    if axis is None:
        x, axis = reshape(x, (x.size,)), 0
    return apply(CUMSUM, (x,), {"axis": check_axis("cumsum", axis, x.ndim)})


def _along(axis, part):
    return (slice(None),) * axis + (part,)


def diff(
    x: TensorLike,
    n: int = 1,
    axis: int = -1,
    prepend: TensorLike | None = None,
    append: TensorLike | None = None,
) -> Tensor:
    """The ``n``-th forward difference along ``axis``, as ``numpy.diff`` (``prepend`` and
    ``append`` join values to either end first).

    >>> import remat as rm
    >>> rm.diff(rm.tensor([1.0, 4.0, 9.0, 16.0]))
    tensor([3., 5., 7.])
    """
    x = as_tensor(x)
    if x.ndim == 0:
        raise ShapeError("diff: needs 1 or more axes; the tensor is 0-d")
    n = ints("diff", "order n", n)
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"diff: order n must be an int >= 0, not {n!r}")
    axis = check_axis("diff", axis, x.ndim)
    parts = []
    for end in (prepend, x, append):
        if end is None:
            continue
        t = as_tensor(end)
        if t.ndim == 0:  # a number: broadcast to a slice of length 1, as NumPy does
            t = broadcast_to(t, x.shape[:axis] + (1,) + x.shape[axis + 1 :])
        parts.append(t)
    if len(parts) > 1:
        x = concatenate(parts, axis=axis)
    for _ in range(n):
        x = x[_along(axis, slice(1, None))] - x[_along(axis, slice(None, -1))]
    return x


def gradient(
    f: TensorLike, *varargs: float, axis: int | Sequence[int] | None = None, edge_order: int = 1
) -> Tensor | list[Tensor]:
    """The derivative estimated by central differences inside and one-sided ones at the
    ends, as ``numpy.gradient`` with scalar spacings (one, or one per axis) and
    ``edge_order=1``.  A list of tensors for several axes.

    >>> import remat as rm
    >>> rm.gradient(rm.tensor([1.0, 2.0, 4.0, 7.0]))
    tensor([1. , 1.5, 2.5, 3. ])
    """
    f = as_tensor(f)
    if edge_order != 1:
        raise NotImplementedError(f"gradient: edge_order={edge_order} is not supported; only 1")
    axes = (
        tuple(range(f.ndim))
        if axis is None
        else tuple(
            check_axis("gradient", a, f.ndim) for a in ((axis,) if isinstance(axis, int) else axis)
        )
    )
    if len(varargs) not in (0, 1, len(axes)) or not all(
        isinstance(h, (int, float)) for h in varargs
    ):
        raise TypeError(
            f"gradient: spacings must be one number or one number per axis ({len(axes)}); "
            f"got {varargs!r} (arrays of coordinates are not supported)"
        )
    steps = varargs * len(axes) if len(varargs) == 1 else varargs or (1.0,) * len(axes)
    out = []
    for a, h in zip(axes, steps):
        if f.shape[a] < 2:
            raise ShapeError(
                f"gradient: axis {a} of a tensor of shape {f.shape} has length {f.shape[a]}; "
                "at least 2 values are needed"
            )
        first = (f[_along(a, slice(1, 2))] - f[_along(a, slice(0, 1))]) / h
        inner = (f[_along(a, slice(2, None))] - f[_along(a, slice(None, -2))]) / (2.0 * h)
        last = (f[_along(a, slice(-1, None))] - f[_along(a, slice(-2, -1))]) / h
        out.append(concatenate([first, inner, last], axis=a))
    return out[0] if len(out) == 1 else out


recorded(roll, pad, cumsum)
