"""Random numbers that replay exactly when a step is recomputed.

remat draws from one generator.  Its state is part of every snapshot a
checkpointed loop takes, and the executor puts it back before recomputing from
a snapshot, so a step that draws (dropout, noise injection) sees the same
numbers every time it is evaluated: gradients stay bit-for-bit those of
store-all.  Samples are drawn on the host and copied to the GPU for
``device="cuda"``, so a seed gives the same numbers on either device.

Shapes are given as ``shape=`` (NumPy's ``size=`` works too)::

    >>> import remat as rm
    >>> rm.random.seed(0)
    >>> w = rm.random.normal(scale=0.1, shape=(3, 2), requires_grad=True)
    >>> w.shape, w.requires_grad
    ((3, 2), True)
    >>> rm.random.randint(0, 10, shape=4).dtype
    dtype('int64')
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from . import backend
from .tensor import Tensor, check_differentiable_dtype, holds_tensors

if TYPE_CHECKING:
    from .typing import DTypeLike, Shape, TensorLike


def seed(n: int) -> None:
    """Restart the calling thread's generator from seed ``n`` (each thread has its own).

    >>> import remat as rm
    >>> rm.random.seed(3); a = rm.random.uniform(shape=2)
    >>> rm.random.seed(3); b = rm.random.uniform(shape=2)
    >>> bool((a == b).numpy().all())
    True
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"rm.random.seed: n must be an integer >= 0, got {n!r}")
    backend.seed(n)


def _constants(name, **params):
    """Distribution parameters as plain values; a Tensor that requires grad is refused
    (its gradient would be lost: reparametrize instead)."""
    from .ops import stack  # the ops sit above the random stream's module
    from .ops.core import constant_of

    for key, value in params.items():
        if isinstance(value, (list, tuple)) and holds_tensors(value, needing_grad=True):
            value = stack(value)  # refused just below, as any Tensor that requires grad
        if isinstance(value, Tensor) and value.requires_grad:
            raise TypeError(
                f"rm.random.{name}: {key} is a Tensor that requires grad, and samples carry no "
                f"gradient; draw standard samples and transform them instead (for example "
                "loc + scale * rm.random.normal(size=...))"
            )
    return [constant_of(f"rm.random.{name}", v) for v in params.values()]


def _size(name, size, shape):
    """The sample shape from NumPy's ``size=`` or remat's ``shape=`` (either, not both)."""
    if shape is None:
        return size
    as_tuple = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)  # noqa: E731
    if size is not None and as_tuple(size) != as_tuple(shape):
        raise ValueError(f"rm.random.{name}: give shape= or size= (the same thing), not both")
    return shape


def _sample(array, requires_grad):
    if requires_grad:
        check_differentiable_dtype(array)
    return Tensor._wrap(array, requires_grad=requires_grad)


def uniform(
    low: TensorLike = 0.0,
    high: TensorLike = 1.0,
    size: Shape | None = None,
    dtype: DTypeLike = backend.float64,
    device: str = "cpu",
    *,
    shape: Shape | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Samples from U[low, high): a constant Tensor, or a leaf with ``requires_grad=True``
    (for initialising parameters; the samples themselves carry no gradient).

    >>> import remat as rm
    >>> rm.random.uniform(-1, 1, shape=(2, 3)).shape
    (2, 3)
    """
    low, high = _constants("uniform", low=low, high=high)
    size = _size("uniform", size, shape)
    return _sample(backend.uniform(low, high, size, dtype, device), requires_grad)


def normal(
    loc: TensorLike = 0.0,
    scale: TensorLike = 1.0,
    size: Shape | None = None,
    dtype: DTypeLike = backend.float64,
    device: str = "cpu",
    *,
    shape: Shape | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Samples from N(loc, scale^2): a constant Tensor, or a leaf with ``requires_grad=True``.

    >>> import remat as rm
    >>> rm.random.normal(shape=5, dtype="float32").dtype
    dtype('float32')
    """
    loc, scale = _constants("normal", loc=loc, scale=scale)
    size = _size("normal", size, shape)
    return _sample(backend.normal(loc, scale, size, dtype, device), requires_grad)


def randint(
    low: TensorLike,
    high: TensorLike | None = None,
    size: Shape | None = None,
    dtype: DTypeLike = backend.int64,
    device: str = "cpu",
    *,
    shape: Shape | None = None,
) -> Tensor:
    """Random integers in [low, high), or in [0, low) when ``high`` is None (NumPy's
    convention), as an integer constant Tensor (int64 unless ``dtype``).

    >>> import remat as rm
    >>> rm.random.seed(1)
    >>> x = rm.random.randint(5, shape=(2, 2))
    >>> x.shape, bool(0 <= x.numpy().min() and x.numpy().max() < 5)
    ((2, 2), True)
    """
    if not backend.is_integer(backend.xp.dtype(dtype)):
        raise TypeError(f"rm.random.randint: dtype must be an integer dtype, got {dtype!r}")
    low, high = _constants("randint", low=low, high=high)
    if high is None:
        low, high = 0, low
    size = _size("randint", size, shape)
    return Tensor._wrap(backend.randint(low, high, size, dtype, device))


def permutation(x: int | TensorLike, axis: int = 0, device: str | None = None) -> Tensor:
    """A random ordering: of ``0 .. x-1`` for an integer ``x`` (an int64 Tensor), or of
    the slices of the Tensor (or array) ``x`` along ``axis``, as NumPy's ``permutation``.

    Permuting a Tensor is indexing it, so gradients flow back through the shuffle:
    ``rm.random.permutation(batch)`` shuffles examples and their gradients alike.

    >>> import remat as rm
    >>> rm.random.seed(0)
    >>> sorted(rm.random.permutation(4).numpy().tolist())
    [0, 1, 2, 3]
    """
    array_like = isinstance(x, (Tensor, list, tuple)) or backend.is_array(x)
    if not array_like or (isinstance(x, Tensor) and x.ndim == 0):
        try:
            # an int, or a 0-d integer Tensor; anything else is the TypeError below
            n = operator.index(x)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"rm.random.permutation: x must be an int or a Tensor (or array) of at least one "
                f"axis, got {x!r}"
            ) from None
        if n < 0:
            raise ValueError(f"rm.random.permutation: x must be >= 0, got {n}")
        return Tensor._wrap(backend.permutation(n, device or "cpu"))
    from .ops import as_tensor, getitem
    from .ops.core import check_axis

    x = as_tensor(x)
    if x.ndim == 0:
        raise ValueError("rm.random.permutation: x is a 0-d array; give an int or an array")
    axis = check_axis("rm.random.permutation", axis, x.ndim)
    if device is not None and device != x.device:
        raise ValueError(
            f"rm.random.permutation: x is on {x.device}, device={device!r}; move x with .to()"
        )
    order = backend.permutation(x.shape[axis], x.device)
    return getitem(x, (slice(None),) * axis + (order,))
