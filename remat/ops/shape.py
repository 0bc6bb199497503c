"""Shape primitives: reshape, transpose, swapaxes, broadcast_to, concatenate (and stack,
defined in :mod:`remat.ops.core`, whose ``as_tensor`` stacks lists of Tensors).

They move values without changing them, so each VJP moves the cotangent back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import backend
from .core import (
    SELF_ADJOINT,
    ShapeError,
    Tensor,
    Variadic,
    apply,
    as_tensor,
    check_axis,
    defop,
    xp,
)

if TYPE_CHECKING:
    from ..typing import DTypeLike, TensorLike


def _reshape(x, shape, old_shape=None):
    return xp.reshape(x, shape)


RESHAPE = defop(
    "reshape",
    _reshape,
    lambda ns, g, ans, x, shape, old_shape: ns.reshape(g, old_shape),
    needs=("",),
    jvps=(lambda ns, t, ans, x, shape, old_shape: ns.reshape(t, shape),),
)


def reshape(x: TensorLike, *shape: int | Sequence[int]) -> Tensor:
    """A new shape for the same values; ``reshape(x, 2, 3)`` and ``reshape(x, (2, 3))`` agree.

    >>> import remat as rm
    >>> rm.reshape(rm.arange(6.0), 2, 3)
    tensor([[0., 1., 2.],
           [3., 4., 5.]])
    """
    x = as_tensor(x)
    given: Any = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
    sizes = tuple(int(n) for n in given)  # a copy: an array given as the shape may change
    return apply(RESHAPE, (x,), {"shape": sizes}, {"shape": sizes, "old_shape": x.shape})


def _transpose(x, axes):
    return xp.transpose(x, axes)


TRANSPOSE = defop(
    "transpose",
    _transpose,
    lambda ns, g, ans, x, axes: ns.transpose(g, backend.argsort(axes)),
    needs=("",),
    jvps=(lambda ns, t, ans, x, axes: ns.transpose(t, axes),),
)


def transpose(x: TensorLike, *axes: int | Sequence[int] | None) -> Tensor:
    """Permute axes (reversed by default); ``transpose(x, 1, 0)`` or ``transpose(x, (1, 0))``.

    >>> import remat as rm
    >>> rm.transpose(rm.zeros((2, 3, 4)), (2, 0, 1)).shape
    (4, 2, 3)
    """
    x = as_tensor(x)
    given: Any = axes
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
        given = axes[0]
    if not given:
        given = tuple(range(x.ndim))[::-1]
    elif sorted(check_axis("transpose", a, x.ndim) for a in given) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: axes {tuple(given)} are not a permutation of the {x.ndim} axes of a "
            f"tensor of shape {x.shape}"
        )
    order = tuple(check_axis("transpose", a, x.ndim) for a in given)
    return apply(TRANSPOSE, (x,), {"axes": order})


def _swapaxes(x, axis1, axis2):
    return xp.swapaxes(x, axis1, axis2)


SWAPAXES = defop(
    "swapaxes",
    _swapaxes,
    lambda ns, g, ans, x, axis1, axis2: ns.swapaxes(g, axis1, axis2),
    needs=("",),
    jvps=SELF_ADJOINT,
)


def swapaxes(x: TensorLike, axis1: int, axis2: int) -> Tensor:
    """Exchange two axes, as ``numpy.swapaxes``.

    >>> import remat as rm
    >>> rm.swapaxes(rm.zeros((2, 3, 4)), 0, 2).shape
    (4, 3, 2)
    """
    return apply(SWAPAXES, (as_tensor(x),), {"axis1": axis1, "axis2": axis2})


def _broadcast_to(x, shape):
    return xp.broadcast_to(x, shape)


# The tape sums the cotangent back to the input's shape (remat.core.tape.unbroadcast).
BROADCAST_TO = defop(
    "broadcast_to",
    _broadcast_to,
    lambda ns, g, ans, x, shape: g,
    needs=("",),
    jvps=(lambda ns, t, ans, x, shape: ns.broadcast_to(t, shape),),
)


def broadcast_to(x: TensorLike, shape: Sequence[int]) -> Tensor:
    """``x`` repeated along new or size-1 axes to ``shape``, as ``numpy.broadcast_to``;
    the gradient sums back over the repeats.

    >>> import remat as rm
    >>> rm.broadcast_to(rm.tensor([1.0, 2.0]), (2, 2))
    tensor([[1., 2.],
           [1., 2.]])
    """
    return apply(BROADCAST_TO, (as_tensor(x),), {"shape": tuple(shape)})


def _slice_along(axis, start, stop):
    return (slice(None),) * axis + (slice(start, stop),)


def _concatenate_jvp(i, ns, t, ans, *xs, axis, offsets):
    # input i's tangent in its place, zeros elsewhere
    shape = t.shape[:axis] + (offsets[-1],) + t.shape[axis + 1 :]
    return ns.scatter_add(shape, _slice_along(axis, offsets[i], offsets[i + 1]), t)


def _concatenate(*arrays, axis):
    return xp.concatenate(arrays, axis=axis)


CONCATENATE = defop(
    "concatenate",
    _concatenate,
    Variadic(
        lambda i, ns, g, ans, *xs, axis, offsets: g[_slice_along(axis, offsets[i], offsets[i + 1])]
    ),
    needs=lambda n: ("",) * n,
    jvps=Variadic(_concatenate_jvp),
)


def concatenate(tensors: Sequence[TensorLike], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis.

    >>> import remat as rm
    >>> rm.concatenate([rm.zeros(2), rm.ones(1)])
    tensor([0., 0., 1.])
    """
    parts = [as_tensor(t) for t in tensors]
    if not parts:
        raise ValueError("concatenate: needs at least one tensor")
    if parts[0].ndim == 0:
        raise ShapeError("concatenate: 0-d tensors have no axis to join along; use stack")
    axis = check_axis("concatenate", axis, parts[0].ndim)
    offsets = [0]
    for t in parts:
        offsets.append(offsets[-1] + (t.shape[axis] if t.ndim > axis else 0))
    return apply(CONCATENATE, parts, {"axis": axis}, {"axis": axis, "offsets": tuple(offsets)})


def _to_device(x, device):
    return backend.to_device(x, device)


TO_DEVICE = defop(
    "to_device",
    _to_device,
    lambda ns, g, ans, x, device, source: ns.to_device(g, source),
    needs=("",),
    jvps=(lambda ns, t, ans, x, device, source: ns.to_device(t, device),),
)


def to_device(x: TensorLike, device: str) -> Tensor:
    """The same values on ``device`` ("cpu" or "cuda"); gradients flow back across.

    >>> import remat as rm
    >>> rm.to_device(rm.ones(2), "cpu").device
    'cpu'
    """
    x = as_tensor(x)
    backend.check_device(device)
    return apply(TO_DEVICE, (x,), {"device": device}, {"device": device, "source": x.device})


def _astype(x, dtype, source=None):
    return x.astype(dtype)


ASTYPE = defop(
    "astype",
    _astype,
    lambda ns, g, ans, x, dtype, source: ns.astype(g, source),
    needs=("",),
    jvps=(lambda ns, t, ans, x, dtype, source: ns.astype(t, dtype),),
)


def astype(x: TensorLike, dtype: DTypeLike) -> Tensor:
    """The same values in another dtype; the gradient comes back in the input's dtype.

    >>> import remat as rm
    >>> x = rm.tensor([1.5, 2.5], requires_grad=True)
    >>> y = rm.astype(x, "float32")
    >>> y.dtype
    dtype('float32')
    >>> y.sum().backward(); x.grad.dtype
    dtype('float64')
    """
    x = as_tensor(x)
    dtype = backend.xp.dtype(dtype)
    if x.requires_grad and not backend.is_floating(dtype):
        raise TypeError(
            f"astype: a tensor that requires grad can only become another float dtype, "
            f"not {dtype} (cast x.detach() to drop the gradient)"
        )
    return apply(ASTYPE, (x,), {"dtype": dtype}, {"dtype": dtype, "source": x.dtype})


# A new record standing for its input: rm.grad differentiates with respect to
# an argument that is already on a tape through one of these.
IDENTITY = defop("identity", lambda x: x, lambda ns, g, ans, x: g, needs=("",), jvps=SELF_ADJOINT)


def identity(x):
    return apply(IDENTITY, (as_tensor(x),))
