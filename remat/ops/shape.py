"""Shape primitives: reshape, transpose, swapaxes, broadcast_to, concatenate, stack.

They move values without changing them, so each VJP moves the cotangent back.
"""

from .. import backend
from .core import SELF_ADJOINT, ShapeError, Variadic, apply, as_tensor, check_axis, defop, xp


def _reshape(x, shape, old_shape=None):
    return xp.reshape(x, shape)


RESHAPE = defop(
    "reshape",
    _reshape,
    lambda ns, g, ans, x, shape, old_shape: ns.reshape(g, old_shape),
    needs=("",),
    jvps=(lambda ns, t, ans, x, shape, old_shape: ns.reshape(t, shape),),
)


def reshape(x, *shape):
    """A new shape for the same values; ``reshape(x, 2, 3)`` and ``reshape(x, (2, 3))`` agree."""
    x = as_tensor(x)
    if len(shape) == 1 and not isinstance(shape[0], int):
        shape = shape[0]
    shape = tuple(int(n) for n in shape)  # a copy: an array given as the shape may change
    return apply(RESHAPE, (x,), {"shape": shape}, {"shape": shape, "old_shape": x.shape})


def _transpose(x, axes):
    return xp.transpose(x, axes)


TRANSPOSE = defop(
    "transpose",
    _transpose,
    lambda ns, g, ans, x, axes: ns.transpose(g, backend.argsort(axes)),
    needs=("",),
    jvps=(lambda ns, t, ans, x, axes: ns.transpose(t, axes),),
)


def transpose(x, *axes):
    """Permute axes (reversed by default); ``transpose(x, 1, 0)`` or ``transpose(x, (1, 0))``."""
    x = as_tensor(x)
    if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
        axes = axes[0]
    if not axes:
        axes = tuple(range(x.ndim))[::-1]
    elif sorted(check_axis("transpose", a, x.ndim) for a in axes) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: axes {tuple(axes)} are not a permutation of the {x.ndim} axes of a "
            f"tensor of shape {x.shape}"
        )
    axes = tuple(check_axis("transpose", a, x.ndim) for a in axes)
    return apply(TRANSPOSE, (x,), {"axes": axes})


def _swapaxes(x, axis1, axis2):
    return xp.swapaxes(x, axis1, axis2)


SWAPAXES = defop(
    "swapaxes",
    _swapaxes,
    lambda ns, g, ans, x, axis1, axis2: ns.swapaxes(g, axis1, axis2),
    needs=("",),
    jvps=SELF_ADJOINT,
)


def swapaxes(x, axis1, axis2):
    return apply(SWAPAXES, (as_tensor(x),), {"axis1": axis1, "axis2": axis2})


def _broadcast_to(x, shape):
    return xp.broadcast_to(x, shape)


# The tape sums the cotangent back to the input's shape (tape.unbroadcast).
BROADCAST_TO = defop(
    "broadcast_to",
    _broadcast_to,
    lambda ns, g, ans, x, shape: g,
    needs=("",),
    jvps=(lambda ns, t, ans, x, shape: ns.broadcast_to(t, shape),),
)


def broadcast_to(x, shape):
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


def concatenate(tensors, axis=0):
    """Join tensors along an existing axis."""
    tensors = [as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("concatenate: needs at least one tensor")
    if tensors[0].ndim == 0:
        raise ShapeError("concatenate: 0-d tensors have no axis to join along; use stack")
    axis = check_axis("concatenate", axis, tensors[0].ndim)
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + (t.shape[axis] if t.ndim > axis else 0))
    return apply(CONCATENATE, tensors, {"axis": axis}, {"axis": axis, "offsets": tuple(offsets)})


def _stack(*arrays, axis):
    return xp.stack(arrays, axis=axis)


STACK = defop(
    "stack",
    _stack,
    Variadic(lambda i, ns, g, ans, *xs, axis: g[(slice(None),) * axis + (i,)]),
    needs=lambda n: ("",) * n,
    jvps=Variadic(
        lambda i, ns, t, ans, *xs, axis: ns.scatter_add(
            t.shape[:axis] + (len(xs),) + t.shape[axis:], (slice(None),) * axis + (i,), t
        )
    ),
)


def stack(tensors, axis=0):
    """Join tensors along a new axis."""
    tensors = [as_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("stack: needs at least one tensor")
    axis = check_axis("stack", axis, tensors[0].ndim + 1)
    return apply(STACK, tensors, {"axis": axis})


def _to_device(x, device):
    return backend.to_device(x, device)


TO_DEVICE = defop(
    "to_device",
    _to_device,
    lambda ns, g, ans, x, device, source: ns.to_device(g, source),
    needs=("",),
    jvps=(lambda ns, t, ans, x, device, source: ns.to_device(t, device),),
)


def to_device(x, device):
    """The same values on ``device`` ("cpu" or "cuda"); gradients flow back across."""
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


def astype(x, dtype):
    """The same values in another dtype; the gradient comes back in the input's dtype."""
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
