"""Creation functions: new tensors filled with zeros, ones, a value, a range, an identity,
and the one-hot encoding of integer labels.

They follow NumPy's arguments (``rm.zeros((2, 3))``, ``rm.arange(0, 1, 0.25)``,
``rm.eye(3, k=1)``) and add two of remat's own: ``device`` ("cpu" or "cuda")
and ``requires_grad`` (a leaf whose gradient backward fills in; it needs a
floating-point dtype).  Each returns a fresh array that nothing else holds.

>>> import remat as rm
>>> w = rm.zeros((2, 3), requires_grad=True)
>>> (w + 1).sum().backward()
>>> w.grad
array([[1., 1., 1.],
       [1., 1., 1.]])
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from . import backend
from .tensor import Tensor, check_differentiable_dtype

if TYPE_CHECKING:
    from .typing import DTypeLike, Shape, TensorLike

float64 = backend.float64


def _made(array, requires_grad):
    if requires_grad:
        check_differentiable_dtype(array)
    return Tensor._wrap(array, requires_grad=requires_grad)


def _shape(name, shape):
    """``shape`` as a tuple of ints: an int, a sequence of ints, or 0-d integer tensors."""
    if isinstance(shape, Tensor):
        shape = shape.numpy().tolist()
    parts = (shape,) if not isinstance(shape, (tuple, list)) else shape
    try:
        return tuple(operator.index(n) for n in parts)
    except TypeError:
        raise TypeError(
            f"rm.{name}: shape must be an int or a tuple of ints, got {shape!r}"
        ) from None


def zeros(
    shape: Shape | Tensor,
    dtype: DTypeLike = float64,
    device: str = "cpu",
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of the given shape filled with zeros (float64 unless ``dtype``).

    >>> import remat as rm
    >>> rm.zeros(3)
    tensor([0., 0., 0.])
    >>> rm.zeros((2, 2), dtype="int32").dtype
    dtype('int32')
    """
    xp = backend.array_module(device)
    return _made(xp.zeros(_shape("zeros", shape), dtype=dtype), requires_grad)


def ones(
    shape: Shape | Tensor,
    dtype: DTypeLike = float64,
    device: str = "cpu",
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of the given shape filled with ones (float64 unless ``dtype``).

    >>> import remat as rm
    >>> rm.ones((2, 1))
    tensor([[1.],
           [1.]])
    """
    xp = backend.array_module(device)
    return _made(xp.ones(_shape("ones", shape), dtype=dtype), requires_grad)


def full(
    shape: Shape | Tensor,
    fill_value: TensorLike,
    dtype: DTypeLike | None = None,
    device: str = "cpu",
    requires_grad: bool = False,
) -> Tensor:
    """A tensor of the given shape filled with ``fill_value``.

    As in NumPy the dtype is ``fill_value``'s unless given: ``full(2, 7)`` holds
    integers, ``full(2, 7.0)`` floats.

    >>> import remat as rm
    >>> rm.full((2,), 0.5)
    tensor([0.5, 0.5])
    >>> rm.full(2, 7).dtype
    dtype('int64')
    """
    if isinstance(fill_value, Tensor):
        if fill_value.requires_grad:
            raise TypeError(
                "rm.full: fill_value is a Tensor that requires grad, and the new tensor would "
                "lose that gradient; use rm.broadcast_to(value, shape) to keep it"
            )
        fill_value = fill_value.numpy()
    xp = backend.array_module(device)
    return _made(xp.full(_shape("full", shape), fill_value, dtype=dtype), requires_grad)


def _like(name, a, dtype, device):
    if isinstance(a, Tensor):
        array = a._data
    elif backend.is_array(a):
        array = a
    else:
        array = backend.asarray(a)
    dtype = array.dtype if dtype is None else dtype
    device = backend.device_of(array) if device is None else device
    return array.shape, dtype, device


def zeros_like(
    a: TensorLike,
    dtype: DTypeLike | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Zeros with the shape of ``a`` (a Tensor, array or list), and its dtype and
    device unless given.  The result is a new constant (or leaf), never linked to ``a``.

    >>> import remat as rm
    >>> x = rm.tensor([[1, 2, 3]])
    >>> rm.zeros_like(x)
    tensor([[0, 0, 0]])
    >>> rm.zeros_like(x, dtype="float32").dtype
    dtype('float32')
    """
    shape, dtype, device = _like("zeros_like", a, dtype, device)
    return zeros(shape, dtype, device, requires_grad)


def ones_like(
    a: TensorLike,
    dtype: DTypeLike | None = None,
    device: str | None = None,
    requires_grad: bool = False,
) -> Tensor:
    """Ones with the shape of ``a``, and its dtype and device unless given.

    >>> import remat as rm
    >>> rm.ones_like(rm.tensor([1.5, 2.5]))
    tensor([1., 1.])
    """
    shape, dtype, device = _like("ones_like", a, dtype, device)
    return ones(shape, dtype, device, requires_grad)


def arange(
    start: float | Tensor,
    stop: float | Tensor | None = None,
    step: float | Tensor = 1,
    dtype: DTypeLike | None = None,
    device: str = "cpu",
    requires_grad: bool = False,
) -> Tensor:
    """Evenly spaced values in [start, stop), as ``numpy.arange``.

    ``arange(n)`` counts 0 .. n-1 as integers; a float argument (or
    ``dtype=``) gives floats.

    >>> import remat as rm
    >>> rm.arange(4)
    tensor([0, 1, 2, 3])
    >>> rm.arange(0, 1, 0.25)
    tensor([0.  , 0.25, 0.5 , 0.75])
    """
    xp = backend.array_module(device)
    numbers = [v.item() if isinstance(v, Tensor) else v for v in (start, stop, step)]
    if numbers[1] is None:
        numbers = [0, numbers[0], numbers[2]]
    return _made(xp.arange(*numbers, dtype=dtype), requires_grad)


def eye(  # noqa: N803 - NumPy's argument names
    N: int,
    M: int | None = None,
    k: int = 0,
    dtype: DTypeLike = float64,
    device: str = "cpu",
    requires_grad: bool = False,
) -> Tensor:
    """An ``N`` x ``M`` matrix (``M`` defaults to ``N``) with ones on diagonal ``k``
    (0 the main diagonal, positive above it, negative below), as ``numpy.eye``.

    >>> import remat as rm
    >>> rm.eye(2)
    tensor([[1., 0.],
           [0., 1.]])
    >>> rm.eye(2, 3, k=1)
    tensor([[0., 1., 0.],
           [0., 0., 1.]])
    """
    xp = backend.array_module(device)
    return _made(xp.eye(N, M, k, dtype=dtype), requires_grad)


def one_hot(indices: TensorLike, depth: int, dtype: DTypeLike = float64) -> Tensor:
    """``indices`` (integers in [0, depth)) encoded along a new last axis: a constant
    of shape ``indices.shape + (depth,)`` with a 1 at each index and 0 elsewhere.

    Not an op on the tape: an integer index has no gradient, so the result is
    a new constant (on the device of ``indices``).  A negative or too large
    index is refused rather than wrapped around.

    >>> import remat as rm
    >>> rm.one_hot([2, 0], 3)
    tensor([[0., 0., 1.],
           [1., 0., 0.]])
    """
    if isinstance(indices, Tensor):
        indices = indices._data
    elif not backend.is_array(indices):
        indices = backend.asarray(indices)
    depth = operator.index(depth)
    if not backend.is_integer(indices.dtype):
        raise TypeError(f"rm.one_hot: indices must be integers, got dtype {indices.dtype}")
    if depth < 1:
        raise ValueError(f"rm.one_hot: depth must be at least 1, got {depth}")
    if indices.size:
        low, high = backend.label_range(indices)
        if low < 0 or high >= depth:
            raise ValueError(
                f"rm.one_hot: index {low if low < 0 else high} is out of range for depth "
                f"{depth}: indices must be in [0, {depth - 1}]"
            )
    return Tensor._wrap(backend.one_hot(indices, depth, dtype))
