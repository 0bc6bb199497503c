"""The array backend: the only module in remat that imports NumPy (or CuPy).

Everything else asks this module for arrays and array functions, so that a new
device is a change here and nowhere else (a lint rule in pyproject.toml keeps it
that way).

``xp`` is the namespace the ops compute with.  It is NumPy; NumPy's dispatch
protocols (``__array_ufunc__`` and ``__array_function__``) hand CuPy arrays on
to CuPy, so one ``xp.sin(x)`` serves both devices.  The few places where the
two libraries differ (scatter-add, random state, device placement, bytes in
use) are the functions below.
"""

from __future__ import annotations

import numpy as np

xp = np
ndarray = np.ndarray


def namespace(array):
    """The array module (numpy or cupy) that owns ``array``."""
    module = type(array).__module__
    if module.startswith("cupy"):
        import cupy

        return cupy
    return np


def asarray(data, dtype=None, copy=True):
    """A fresh backend array from ``data`` (a list, scalar, or array)."""
    module = namespace(data)
    out = module.array(data, dtype=dtype, copy=copy)
    return out


def is_array(value) -> bool:
    return isinstance(value, np.ndarray) or type(value).__module__.startswith("cupy")


def is_floating(dtype) -> bool:
    return np.issubdtype(dtype, np.floating)


def is_complex(dtype) -> bool:
    return np.issubdtype(dtype, np.complexfloating)


def result_dtype(*values):
    return np.result_type(*values)


def to_host(array) -> np.ndarray:
    """A NumPy array with the same values (a copy only for device arrays)."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "get"):
        return array.get()
    return np.asarray(array)


def nbytes(value) -> int:
    """Bytes held by an array (0 for Python scalars and None)."""
    return getattr(value, "nbytes", 0)


def lock(array) -> None:
    """Make an array read-only, so that changing it in place raises at once.

    The tape calls this on every array it saves for backward: a saved array
    changed behind the tape's back would give a silently wrong gradient.
    """
    if type(array) is np.ndarray and array.flags.writeable:
        array.flags.writeable = False


def is_owned(array) -> bool:
    """True for a writeable array that is not a view of another."""
    if type(array) is np.ndarray:
        return array.flags.writeable and array.base is None
    return getattr(array, "base", True) is None


def copy(array):
    return namespace(array).array(array, copy=True)


def zeros(shape, dtype, like=None):
    return (namespace(like) if like is not None else np).zeros(shape, dtype=dtype)


def ones_like(array):
    return namespace(array).ones_like(array)


def scatter_add(shape, index, values, dtype):
    """zeros(shape) with ``values`` added at ``index``; repeated indices add up."""
    module = namespace(values)
    out = module.zeros(shape, dtype=dtype)
    if module is np:
        np.add.at(out, index, values)
    else:  # pragma: no cover - needs a GPU
        import cupyx

        cupyx.scatter_add(out, index, values)
    return out


def _scatter_into(shape, index, values):
    """zeros(shape) with ``values`` added at ``index`` (the VJP of indexing).

    Only integer-array indices can name an element twice; they need the
    slower unbuffered add, everything else is a plain assignment.
    """
    parts = index if isinstance(index, tuple) else (index,)
    if any(is_integer_index(p) for p in parts):
        return scatter_add(shape, index, values, values.dtype)
    out = namespace(values).zeros(shape, dtype=values.dtype)
    out[index] = values
    return out


class ArrayNamespace:
    """The functions VJP rules call, on raw arrays of one array module.

    remat's ops module offers the same names on Tensors, so a VJP rule written
    against ``ns`` runs on arrays in an ordinary backward and records itself
    when the backward is differentiated (see remat.tape).
    """

    NAMES = (
        "sin cos exp log sqrt sign sum reshape broadcast_to where matmul swapaxes transpose einsum"
    ).split()

    def __init__(self, module):
        for name in self.NAMES:
            setattr(self, name, getattr(module, name))
        self.scatter_add = _scatter_into


NUMPY_NAMESPACE = ArrayNamespace(np)


def vjp_namespace(array):
    """The ArrayNamespace matching ``array``'s module."""
    if type(array) is np.ndarray or not type(array).__module__.startswith("cupy"):
        return NUMPY_NAMESPACE
    return ArrayNamespace(namespace(array))  # pragma: no cover - needs a GPU


def is_integer_index(value) -> bool:
    """True for an integer array used as an index (which may repeat entries)."""
    return is_array(value) and np.issubdtype(value.dtype, np.integer)


def as_index(value):
    """An index array from a list or array; bool and int arrays keep their kind."""
    if is_array(value):
        return value.copy()
    return np.asarray(value)


def argsort(values):
    return tuple(int(i) for i in np.argsort(values))


def sign(x):
    return np.sign(x)


def finfo(dtype):
    return np.finfo(dtype)


float64 = np.float64
float32 = np.float32


def default_rng(seed):
    """A NumPy generator for building workloads (not the replayed library generator)."""
    return np.random.default_rng(seed)


def one_hot(indices, depth, dtype=np.float64):
    """One-hot encoding along a new last axis."""
    return np.eye(depth, dtype=dtype)[indices]


# --- random numbers -------------------------------------------------------
# One generator for the whole library, so that its state can be captured in
# every snapshot of a checkpointed loop and replayed when a step is recomputed.

_generator = np.random.Generator(np.random.PCG64(0))


def seed(n: int) -> None:
    global _generator
    _generator = np.random.Generator(np.random.PCG64(n))


def random_state():
    """An opaque, immutable copy of the generator state."""
    return _generator.bit_generator.state


def set_random_state(state) -> None:
    _generator.bit_generator.state = state


def uniform(low, high, size, dtype):
    return np.asarray(_generator.uniform(low, high, size), dtype=dtype)


def normal(loc, scale, size, dtype):
    return np.asarray(_generator.normal(loc, scale, size), dtype=dtype)
