"""NumPy's functions that rearrange values: new and dropped axes, axis moves,
stacking and splitting, flips, rotations, repeats and tiles.

Each is composed from the shape primitives and indexing (reshape, transpose,
concatenate, ``x[index]``, broadcast_to), which move values without changing
them: the result is NumPy's to the bit and the gradient is exact, with no rule
of its own.  Axes and counts are checked first, and an error names the
function, the shape and the value that does not fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import backend
from .core import ShapeError, Tensor, as_tensor, check_axis
from .either import ints
from .shape import broadcast_to, concatenate, reshape, transpose

if TYPE_CHECKING:
    from ..typing import Axis, TensorLike

xp = backend.xp


def _axes(name: str, axis: int | Sequence[int], ndim: int) -> tuple[int, ...]:
    """``axis`` (an int or a tuple) as distinct axes in [0, ndim), or a ShapeError."""
    given = ints(name, "axis", axis)
    given = (given,) if isinstance(given, int) else given
    axes = tuple(check_axis(name, a, ndim) for a in given)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{name}: axis {axis} repeats an axis")
    return axes


def expand_dims(x: TensorLike, axis: int | Sequence[int]) -> Tensor:
    """New size-1 axes at the positions ``axis`` of the result, as ``numpy.expand_dims``.

    >>> import remat as rm
    >>> rm.expand_dims(rm.ones((2, 3)), (0, -1)).shape
    (1, 2, 3, 1)
    """
    x = as_tensor(x)
    axis = ints("expand_dims", "axis", axis)
    count = 1 if isinstance(axis, int) else len(axis)
    axes = _axes("expand_dims", axis, x.ndim + count)
    sizes = iter(x.shape)
    return reshape(x, tuple(1 if i in axes else next(sizes) for i in range(x.ndim + count)))


def squeeze(x: TensorLike, axis: Axis = None) -> Tensor:
    """Size-1 axes removed (all of them, or those named), as ``numpy.squeeze``.

    >>> import remat as rm
    >>> rm.squeeze(rm.ones((1, 3, 1))).shape
    (3,)
    """
    x = as_tensor(x)
    if axis is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = _axes("squeeze", axis, x.ndim)
        wide = [a for a in axes if x.shape[a] != 1]
        if wide:
            raise ShapeError(
                f"squeeze: axis {wide[0]} of a tensor of shape {x.shape} has size "
                f"{x.shape[wide[0]]}; only size-1 axes can be removed"
            )
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def ravel(x: TensorLike) -> Tensor:
    """The values in one axis, in C order, as ``numpy.ravel`` (``t.ravel()``, ``t.flatten()``).

    >>> import remat as rm
    >>> rm.ravel(rm.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([1., 2., 3., 4.])
    """
    x = as_tensor(x)
    return reshape(x, (x.size,))


def _at_least(x: TensorLike, ndim: int) -> Tensor:
    x = as_tensor(x)
    if x.ndim >= ndim:
        return x
    if ndim == 3 and x.ndim == 2:  # NumPy puts a 2-D array in the middle: (1, m, n, 1)?
        return reshape(x, (*x.shape, 1))
    if ndim == 3:  # () -> (1, 1, 1), (n,) -> (1, n, 1)
        return reshape(x, (1, x.size, 1))
    return reshape(x, (1,) * (ndim - x.ndim) + x.shape)


def atleast_1d(*tensors: TensorLike) -> Tensor | list[Tensor]:
    """Each tensor with at least one axis, as ``numpy.atleast_1d`` (a list for several).

    >>> import remat as rm
    >>> rm.atleast_1d(rm.tensor(2.0))
    tensor([2.])
    """
    out = [_at_least(t, 1) for t in tensors]
    return out[0] if len(out) == 1 else out


def atleast_2d(*tensors: TensorLike) -> Tensor | list[Tensor]:
    """Each tensor with at least two axes ((n,) becomes (1, n)), as ``numpy.atleast_2d``.

    >>> import remat as rm
    >>> rm.atleast_2d(rm.ones(3)).shape
    (1, 3)
    """
    out = [_at_least(t, 2) for t in tensors]
    return out[0] if len(out) == 1 else out


def atleast_3d(*tensors: TensorLike) -> Tensor | list[Tensor]:
    """Each tensor with at least three axes ((n,) becomes (1, n, 1), (m, n) becomes
    (m, n, 1)), as ``numpy.atleast_3d``.

    >>> import remat as rm
    >>> rm.atleast_3d(rm.ones(3)).shape, rm.atleast_3d(rm.ones((2, 3))).shape
    ((1, 3, 1), (2, 3, 1))
    """
    out = [_at_least(t, 3) for t in tensors]
    return out[0] if len(out) == 1 else out


def moveaxis(
    x: TensorLike, source: int | Sequence[int], destination: int | Sequence[int]
) -> Tensor:
    """Axes moved to new positions, the others keeping their order, as ``numpy.moveaxis``.

    >>> import remat as rm
    >>> rm.moveaxis(rm.zeros((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    x = as_tensor(x)
    src = _axes("moveaxis", source, x.ndim)
    dst = _axes("moveaxis", destination, x.ndim)
    if len(src) != len(dst):
        raise ShapeError(
            f"moveaxis: source {source} and destination {destination} name different "
            "numbers of axes"
        )
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def rollaxis(x: TensorLike, axis: int, start: int = 0) -> Tensor:
    """Axis ``axis`` moved to sit before ``start``, as ``numpy.rollaxis``.

    >>> import remat as rm
    >>> rm.rollaxis(rm.zeros((2, 3, 4)), 2).shape
    (4, 2, 3)
    """
    x = as_tensor(x)
    axis = check_axis("rollaxis", axis, x.ndim)
    start = check_axis("rollaxis", start, x.ndim + 1)
    if axis < start:
        start -= 1
    return moveaxis(x, axis, start)


def hstack(tensors: Sequence[TensorLike]) -> Tensor:
    """Join along the second axis (the first for 1-D tensors), as ``numpy.hstack``.

    >>> import remat as rm
    >>> rm.hstack([rm.zeros(2), rm.ones(1)])
    tensor([0., 0., 1.])
    """
    parts = [_at_least(t, 1) for t in tensors]
    return concatenate(parts, axis=0 if parts and parts[0].ndim == 1 else 1)


def vstack(tensors: Sequence[TensorLike]) -> Tensor:
    """Join along the first axis, 1-D tensors as rows, as ``numpy.vstack`` (``row_stack``).

    >>> import remat as rm
    >>> rm.vstack([rm.zeros(2), rm.ones(2)])
    tensor([[0., 0.],
           [1., 1.]])
    """
    return concatenate([_at_least(t, 2) for t in tensors], axis=0)


row_stack = vstack


def column_stack(tensors: Sequence[TensorLike]) -> Tensor:
    """1-D tensors as columns of a 2-D one (others joined on axis 1), as
    ``numpy.column_stack``.

    >>> import remat as rm
    >>> rm.column_stack([rm.zeros(2), rm.ones(2)])
    tensor([[0., 1.],
           [0., 1.]])
    """
    parts = [as_tensor(t) for t in tensors]
    return concatenate([reshape(t, (t.size, 1)) if t.ndim < 2 else t for t in parts], axis=1)


def dstack(tensors: Sequence[TensorLike]) -> Tensor:
    """Join along the third axis, as ``numpy.dstack``.

    >>> import remat as rm
    >>> rm.dstack([rm.zeros((2, 2)), rm.ones((2, 2))]).shape
    (2, 2, 2)
    """
    return concatenate([_at_least(t, 3) for t in tensors], axis=2)


def array_split(
    x: TensorLike, indices_or_sections: int | Sequence[int], axis: int = 0
) -> list[Tensor]:
    """Pieces of ``x`` along ``axis``: ``n`` nearly equal ones (the first ones one longer),
    or cut before the given indices, as ``numpy.array_split``.

    >>> import remat as rm
    >>> [t.shape for t in rm.array_split(rm.zeros(5), 2)]
    [(3,), (2,)]
    """
    x = as_tensor(x)
    axis = check_axis("array_split", axis, x.ndim)
    size = x.shape[axis]
    indices_or_sections = ints("array_split", "indices_or_sections", indices_or_sections)
    if isinstance(indices_or_sections, int):
        n = indices_or_sections
        if n <= 0:
            raise ValueError(f"array_split: the number of sections must be > 0, not {n}")
        each, extra = divmod(size, n)
        cuts = [0]
        for i in range(n):
            cuts.append(cuts[-1] + each + (1 if i < extra else 0))
    else:
        cuts = [0, *indices_or_sections, size]
    before = (slice(None),) * axis
    return [x[before + (slice(a, b),)] for a, b in zip(cuts, cuts[1:])]


def split(x: TensorLike, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Pieces of ``x`` along ``axis``, as ``numpy.split``: ``n`` equal ones (an error if
    the axis does not divide), or cut before the given indices.

    >>> import remat as rm
    >>> rm.split(rm.arange(4.0), 2)
    [tensor([0., 1.]), tensor([2., 3.])]
    """
    x = as_tensor(x)
    indices_or_sections = ints("split", "indices_or_sections", indices_or_sections)
    if isinstance(indices_or_sections, int):
        axis = check_axis("split", axis, x.ndim)
        n = indices_or_sections
        if n <= 0 or x.shape[axis] % n:
            raise ShapeError(
                f"split: axis {axis} of a tensor of shape {x.shape} does not divide into {n} "
                "equal sections (rm.array_split allows unequal ones)"
            )
    return array_split(x, indices_or_sections, axis)


def hsplit(x: TensorLike, indices_or_sections: int | Sequence[int]) -> list[Tensor]:
    """:func:`split` along the second axis (the first for 1-D), as ``numpy.hsplit``.

    >>> import remat as rm
    >>> [t.shape for t in rm.hsplit(rm.zeros((2, 4)), 2)]
    [(2, 2), (2, 2)]
    """
    x = as_tensor(x)
    return split(x, indices_or_sections, axis=0 if x.ndim == 1 else 1)


def vsplit(x: TensorLike, indices_or_sections: int | Sequence[int]) -> list[Tensor]:
    """:func:`split` along the first axis of a tensor of 2 or more axes.

    >>> import remat as rm
    >>> [t.shape for t in rm.vsplit(rm.zeros((4, 2)), [1])]
    [(1, 2), (3, 2)]
    """
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"vsplit: needs 2 or more axes; the tensor has shape {x.shape}")
    return split(x, indices_or_sections, axis=0)


def dsplit(x: TensorLike, indices_or_sections: int | Sequence[int]) -> list[Tensor]:
    """:func:`split` along the third axis of a tensor of 3 or more axes.

    >>> import remat as rm
    >>> [t.shape for t in rm.dsplit(rm.zeros((1, 1, 4)), 2)]
    [(1, 1, 2), (1, 1, 2)]
    """
    x = as_tensor(x)
    if x.ndim < 3:
        raise ShapeError(f"dsplit: needs 3 or more axes; the tensor has shape {x.shape}")
    return split(x, indices_or_sections, axis=2)


def flip(x: TensorLike, axis: Axis = None) -> Tensor:
    """The order of the elements reversed along ``axis`` (every axis by default).

    >>> import remat as rm
    >>> rm.flip(rm.tensor([1.0, 2.0, 3.0]))
    tensor([3., 2., 1.])
    """
    x = as_tensor(x)
    axes = range(x.ndim) if axis is None else _axes("flip", axis, x.ndim)
    return x[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(x.ndim))]


def fliplr(x: TensorLike) -> Tensor:
    """Columns in reverse order (axis 1), as ``numpy.fliplr``.

    >>> import remat as rm
    >>> rm.fliplr(rm.tensor([[1.0, 2.0]]))
    tensor([[2., 1.]])
    """
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"fliplr: needs 2 or more axes; the tensor has shape {x.shape}")
    return flip(x, 1)


def flipud(x: TensorLike) -> Tensor:
    """Rows in reverse order (axis 0), as ``numpy.flipud``.

    >>> import remat as rm
    >>> rm.flipud(rm.tensor([[1.0], [2.0]]))
    tensor([[2.],
           [1.]])
    """
    x = as_tensor(x)
    if x.ndim < 1:
        raise ShapeError("flipud: needs 1 or more axes; the tensor is 0-d")
    return flip(x, 0)


def rot90(x: TensorLike, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Tensor:
    """Rotated by 90° ``k`` times in the plane of ``axes`` (from the first axis towards
    the second), as ``numpy.rot90``.

    >>> import remat as rm
    >>> rm.rot90(rm.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([[2., 4.],
           [1., 3.]])
    """
    x = as_tensor(x)
    if len(axes) != 2:
        raise ShapeError(f"rot90: axes must name two axes, not {axes}")
    a, b = _axes("rot90", tuple(axes), x.ndim)
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return flip(x, (a, b))
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    if k == 1:
        return transpose(flip(x, b), tuple(order))
    return flip(transpose(x, tuple(order)), b)


def repeat(x: TensorLike, repeats: int | Sequence[int], axis: int | None = None) -> Tensor:
    """Each element repeated (along ``axis``, or of the flattened tensor), as
    ``numpy.repeat``; the gradient adds up over the copies.

    >>> import remat as rm
    >>> rm.repeat(rm.tensor([1.0, 2.0]), [2, 1])
    tensor([1., 1., 2.])
    """
    x = as_tensor(x)
    if axis is None:
        x, axis = ravel(x), 0
    axis = check_axis("repeat", axis, x.ndim)
    counts = xp.asarray(repeats)
    if counts.dtype.kind not in "iub" or counts.ndim > 1:
        raise TypeError(
            f"repeat: repeats must be an int or a 1-D sequence of ints, not {repeats!r}"
        )
    if (counts < 0).any():
        raise ValueError(f"repeat: repeats must be >= 0; got {repeats!r}")
    n = x.shape[axis]
    if counts.ndim == 1 and counts.size not in (1, n):
        raise ShapeError(
            f"repeat: {counts.size} repeats for axis {axis} of length {n} (tensor of shape "
            f"{x.shape}); give one count, or one per element"
        )
    index = xp.repeat(xp.arange(n), counts)
    return x[(slice(None),) * axis + (index,)]


def tile(x: TensorLike, reps: int | Sequence[int]) -> Tensor:
    """``x`` repeated ``reps`` times along each axis, as ``numpy.tile``.

    >>> import remat as rm
    >>> rm.tile(rm.tensor([1.0, 2.0]), 2)
    tensor([1., 2., 1., 2.])
    """
    x = as_tensor(x)
    given = ints("tile", "reps", reps)
    counts = (given,) if isinstance(given, int) else given
    if any(r < 0 for r in counts):
        raise ValueError(f"tile: reps must be ints >= 0; got {reps!r}")
    ndim = max(x.ndim, len(counts))
    counts = (1,) * (ndim - len(counts)) + counts
    shape = (1,) * (ndim - x.ndim) + x.shape
    spread = reshape(x, tuple(s for n in shape for s in (1, n)))
    big = broadcast_to(spread, tuple(s for r, n in zip(counts, shape) for s in (r, n)))
    return reshape(big, tuple(r * n for r, n in zip(counts, shape)))
