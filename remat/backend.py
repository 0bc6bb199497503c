"""The array backend: the only module in remat that imports NumPy (or CuPy).

Everything else asks this module for arrays and array functions, so that a new
device is a change here and nowhere else (a lint rule in pyproject.toml keeps it
that way).

``xp`` is the namespace the ops compute with.  It is NumPy; NumPy's dispatch
protocols (``__array_ufunc__`` and ``__array_function__``) hand CuPy arrays on
to CuPy, so one ``xp.sin(x)`` serves both devices.  The places where the two
libraries differ are the functions below: device placement, scatter-add,
checksums of arrays, random numbers and bytes in use.

Devices are named ``"cpu"`` (NumPy) and ``"cuda"`` (CuPy, imported only when
first asked for, so remat never needs CuPy unless a GPU is used).
"""

from __future__ import annotations

import io
import threading
import zlib
from collections.abc import Iterable
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

xp = np
ndarray = np.ndarray
Array = np.ndarray
"""The static type of a backend array (CuPy's arrays mirror NumPy's interface)."""
ArrayLike = npt.ArrayLike
DTypeLike = npt.DTypeLike
float64 = np.float64
int64 = np.int64

DEVICES = ("cpu", "cuda")


class DeviceError(RuntimeError):
    """A device that is not available, or arrays on two devices in one op.

    >>> import remat as rm
    >>> try:
    ...     rm.ones(2, device="tpu")
    ... except rm.DeviceError as error:
    ...     print(error)
    unknown device 'tpu'; choose 'cpu' or 'cuda'
    """


# --- devices ---------------------------------------------------------------------


def _is_cupy(array: object) -> bool:
    return type(array).__module__.startswith("cupy")


_cupy_module = None


def _cupy():
    """The cupy module, or a DeviceError saying why there is none."""
    global _cupy_module
    if _cupy_module is None:
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
        except Exception as error:  # ImportError, or CUDA's own errors without a GPU
            raise DeviceError(
                "device 'cuda' needs CuPy and an NVIDIA GPU (pip install 'remat[cuda]'); "
                f"it is not available here: {type(error).__name__}: {error}"
            ) from None
        _cupy_module = cupy
    return _cupy_module


def cuda_problem() -> str | None:
    """Why device 'cuda' cannot be used here, or None when it can."""
    try:
        _cupy()
    except DeviceError as error:
        return str(error)
    return None


def cuda_available() -> bool:
    """Whether device ``"cuda"`` can be used here (CuPy imports and sees a GPU).

    >>> import remat as rm
    >>> device = "cuda" if rm.cuda_available() else "cpu"
    >>> rm.ones(2, device=device).device == device
    True
    """
    return cuda_problem() is None


def namespace(array):
    """The array module (numpy or cupy) that owns ``array``."""
    return _cupy() if _is_cupy(array) else np


def device_of(array: object) -> str:
    return "cuda" if _is_cupy(array) else "cpu"


def check_device(device: object) -> str:
    if device not in DEVICES:
        raise DeviceError(f"unknown device {device!r}; choose 'cpu' or 'cuda'")
    return device


def array_module(device):
    """The array module (numpy or cupy) that makes arrays on ``device``."""
    return np if check_device(device) == "cpu" else _cupy()


def to_device(array, device):
    """``array`` on ``device`` (the same object if it is there already)."""
    if device_of(array) == check_device(device):
        return array
    if device == "cpu":
        return array.get()
    return _cupy().asarray(array)


def asarray(data: Any, dtype: DTypeLike | None = None, device: str | None = None) -> Array:
    """A fresh array holding a copy of ``data`` (a list, scalar or array)."""
    if device is None:
        device = device_of(data)
    module = np if check_device(device) == "cpu" else _cupy()
    if device == "cuda" or not _is_cupy(data):
        array = module.array(data, dtype=dtype, copy=True)
    else:
        array = np.array(data.get(), dtype=dtype, copy=True)
    if array.dtype == object:
        raise TypeError(
            "remat takes arrays of numbers; this one has dtype object (it may hold Tensors, "
            "whose gradients would be lost): use rm.stack([...]) for Tensors"
        )
    return array


def read_only(array):
    """A read-only view of a NumPy array (writing through it raises at once)."""
    view = array.view()
    view.flags.writeable = False
    return view


def is_array(value: object) -> TypeGuard[Array]:
    return isinstance(value, np.ndarray) or _is_cupy(value)


def is_number(value: object) -> bool:
    """A Python or NumPy number (a bool too), not an array."""
    return isinstance(value, (int, float, complex, np.number, np.bool_))


def is_float_scalar(value: object) -> bool:
    """A Python float or a NumPy floating-point scalar."""
    return isinstance(value, (float, np.floating))


def is_floating(dtype: DTypeLike) -> bool:
    return np.issubdtype(dtype, np.floating)


def is_integer(dtype: DTypeLike) -> bool:
    return np.issubdtype(dtype, np.integer)


def is_complex(dtype: DTypeLike) -> bool:
    return np.issubdtype(dtype, np.complexfloating)


def casts_safely(source: DTypeLike, target: DTypeLike) -> bool:
    """Whether NumPy's in-place operators write a ``source`` value into a ``target``
    array (its "same_kind" rule: float64 into float32 yes, complex into real or a
    float into an integer no, since that drops a part of each value)."""
    return bool(np.can_cast(source, target, "same_kind"))


def to_host(array: Any) -> np.ndarray:
    """A NumPy array with the same values (a copy only for device arrays)."""
    if isinstance(array, np.ndarray):
        return array
    if _is_cupy(array):
        return array.get()
    return np.asarray(array)


def mixed_devices(arrays: Iterable[object]) -> str | None:
    """A description of the devices if ``arrays`` are on more than one, else None."""
    places = [(device_of(a), getattr(a, "shape", ())) for a in arrays if is_array(a)]
    if len({d for d, _ in places}) > 1:
        return " and ".join(f"{d} (shape {s})" for d, s in places)
    return None


# --- arrays the tape keeps -----------------------------------------------------------


def nbytes(value: object) -> int:
    """Bytes held by an array (0 for Python scalars and None)."""
    return getattr(value, "nbytes", 0)


def memory_owner(array):
    """The array that owns ``array``'s memory (itself unless it is a view)."""
    while True:
        base = array.base
        if base is None or not is_array(base):
            return array
        array = base


REPLAY_SAMPLE = 64
"""About how many elements of a large array the default replay check reads."""

_STRIDES: dict[tuple[int, ...], int] = {}  # array shape -> the sampling stride for it


def _sample_stride(shape: tuple[int, ...]) -> int:
    """The largest prime at most ``size // REPLAY_SAMPLE`` that does not divide the
    row length (the last axis).  Such a stride shares no factor with it, so the
    samples of a 2-D state fall in as many different columns as there are samples
    (a stride of 32 on rows of 64 would read two columns, 0 and 32, in every row)."""
    size = 1
    for n in shape:
        size *= n
    stride = size // REPLAY_SAMPLE
    while stride > 1 and (
        shape[-1] % stride == 0 or any(stride % d == 0 for d in range(2, int(stride**0.5) + 1))
    ):
        stride -= 1
    _STRIDES[shape] = stride
    return stride


def replay_fingerprint(array: Any, start: int = 0, full: bool = False) -> int:
    """A cheap fingerprint for the replay check of recomputed steps: a CRC-32 of
    the array's bytes, compared bit for bit.

    Unless ``full``, an array of more than 2 * :data:`REPLAY_SAMPLE` elements is
    read at about that many elements, evenly spaced with a prime stride, so
    that the check costs the same for any state size (about 1.7-2.3 us a call
    inside a running loop, measured; 0.5 us in a tight loop of its own).  A
    recomputation gone wrong (Python-side state, another random stream) usually
    changes many elements; a change confined to one column of a state with rows
    of up to 64 elements, or to one row of at least the stride, is still seen.
    ``check_replay="full"`` reads everything.  ``start`` chains the
    fingerprints of several arrays.
    """
    size = array.size
    if size > 2 * REPLAY_SAMPLE and not full:
        stride = _STRIDES.get(array.shape) or _sample_stride(array.shape)
        array = array.reshape(-1)[::stride]  # reshape copies only a non-contiguous array
    if type(array) is not np.ndarray:  # CuPy: the sample comes to the host
        array = array.get()
    return zlib.crc32(array.tobytes(), start)  # tobytes: C order, for any strides


def fingerprint(array: Any, start: int = 0) -> int:
    """A checksum of an array's values (CRC-32 of its bytes).

    It tells whether an array changed between two moments: the write guard
    (:mod:`remat.guard`) takes one when a value it must keep could be written
    by someone else, and compares at backward.  A GPU array is copied to the
    host first (slow, but only arrays handed out to the user are checked).
    ``start`` chains CRCs: fingerprint(b, fingerprint(a)) covers a then b.
    """
    host = array.get() if _is_cupy(array) else array
    return zlib.crc32(np.ascontiguousarray(host).view(np.uint8).reshape(-1).data, start)


def is_owned(array: Any) -> bool:
    """True for a writeable array that is not a view of another."""
    if type(array) is np.ndarray:
        return array.flags.writeable and array.base is None
    return _is_cupy(array) and array.base is None


def copy(array):
    return namespace(array).array(array, copy=True)


def save_arrays(file: Any, arrays: Iterable[Any]) -> int:
    """Write ``arrays`` one after the other to the open binary ``file`` (NumPy's .npy
    format, no pickles); returns the bytes of their data.  Device arrays go through
    host memory.  Raises what the file system raises (OSError: a full disk...)."""
    written = 0
    for array in arrays:
        host = to_host(array)
        np.save(file, host, allow_pickle=False)
        written += host.nbytes
    return written


def saved_bytes(arrays: Iterable[Any]) -> int:
    """The bytes :func:`save_arrays` writes for ``arrays``: each one's .npy header (the
    format version ``np.save`` picks: 1.0, or 2.0 for a header too long for it) and data."""
    total = 0
    for array in arrays:
        header = io.BytesIO()
        fields = np.lib.format.header_data_from_array_1_0(array)
        try:
            np.lib.format.write_array_header_1_0(header, fields)
        except ValueError:
            np.lib.format.write_array_header_2_0(header, fields)
        total += header.tell() + array.nbytes
    return total


def load_arrays(file: Any, devices: Iterable[str]) -> tuple[Any, ...]:
    """Read back what :func:`save_arrays` wrote, one array per entry of ``devices``
    (where each goes: "cpu" or "cuda"), bit for bit."""
    return tuple(to_device(np.load(file, allow_pickle=False), d) for d in devices)


def reconstruction_tolerance(dtype: Any) -> float:
    """How far a state recomputed by an inverse may be from the exact one, relative to
    its magnitude: the square root of the dtype's machine epsilon (1.5e-8 in float64,
    3.5e-4 in float32), and 0 for integers, which an inverse must give back exactly."""
    if not is_floating(dtype):
        return 0.0
    return float(np.finfo(dtype).eps) ** 0.5


def count_nonfinite(array: Any) -> int:
    """How many of ``array``'s values are NaN or +-inf (0 for an integer or bool array)."""
    if not is_floating(array.dtype):
        return 0
    xp_ = namespace(array)
    return int(array.size - xp_.count_nonzero(xp_.isfinite(array)))


def relative_difference(a: Any, b: Any) -> float:
    """The largest ``|a - b|`` relative to the largest finite ``|b|`` (1 if that is 0).

    NaN never reads as small: positions where ``a`` and ``b`` are equal (inf and
    inf, NaN and NaN) differ by 0, and any other position holding a NaN or an
    inf makes the difference inf (``max(0.0, nan)`` is 0.0 in Python, and NumPy's
    ``nan > tol`` is False, so a plain comparison would let a NaN through).
    """
    if a.size == 0:
        return 0.0
    xp_ = namespace(a)
    if not is_floating(a.dtype):
        a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (a == b) | (xp_.isnan(a) & xp_.isnan(b))
        worst = float(xp_.where(same, 0, xp_.abs(a - b)).max())
        scale = float(xp_.where(xp_.isfinite(b), xp_.abs(b), 0).max()) or 1.0
    return worst / scale if worst == worst else float("inf")


def zeros(shape, dtype, like=None):
    return (namespace(like) if like is not None else np).zeros(shape, dtype=dtype)


def ones_like(array):
    return namespace(array).ones_like(array)


def sign(x):
    return np.sign(x)


def argsort(values):
    return tuple(int(i) for i in np.argsort(values))


# --- indexing ---------------------------------------------------------------------


def is_integer_index(value: object) -> bool:
    """True for an integer array used as an index (which may repeat entries)."""
    return is_array(value) and np.issubdtype(value.dtype, np.integer)


def as_index(value):
    """An index array from a list or array (copied, so later changes cannot reach it)."""
    if is_array(value):
        return value.copy()
    return np.asarray(value)


def scatter_into(shape, index, values):
    """zeros(shape) with ``values`` added at ``index`` (the VJP of indexing).

    Only integer-array indices can name an element twice; they need the
    slower unbuffered add, everything else is a plain assignment.
    """
    parts = index if type(index) is tuple else (index,)
    module = np if type(values) is np.ndarray else namespace(values)
    out = module.zeros(shape, dtype=values.dtype)
    if all(type(p) in _BASIC_INDEX or not is_integer_index(p) for p in parts):
        out[index] = values
    elif _is_cupy(values):  # pragma: no cover - needs a GPU
        import cupyx

        cupyx.scatter_add(out, index, values)
    else:
        np.add.at(out, index, values)
    return out


EINSUM_BLAS_SIZE = 2**14
"""Operands of at least this many elements in all go through ``optimize=True``."""


def einsum(subscripts, *operands):
    """``numpy.einsum``, contracting through BLAS (``optimize=True``) when the operands
    are large enough to repay its path search (some 20 us a call).

    NumPy's own loop is several times slower than BLAS on a batched product
    such as attention scores (``"bhqd,bhkd->bhqk"``).  The choice depends on the
    shapes alone, so a recomputation takes the same path as the first run.
    """
    large = sum(getattr(o, "size", 1) for o in operands) >= EINSUM_BLAS_SIZE
    return namespace(operands[0]).einsum(subscripts, *operands, optimize=large)


_BASIC_INDEX = (int, slice, type(None), type(Ellipsis))


class ArrayNamespace:
    """The functions VJP rules call, on raw arrays.

    remat's ops module offers the same names on Tensors, so a VJP rule written
    against ``ns`` runs on arrays in an ordinary backward and records itself
    when the backward is differentiated (see remat.tape).  NumPy's functions
    dispatch CuPy arrays to CuPy, so one namespace serves both devices.
    """

    NAMES = (
        "sin cos exp log sqrt tanh sign sum reshape broadcast_to where matmul swapaxes transpose"
    ).split()

    def __init__(self, module):
        for name in self.NAMES:
            setattr(self, name, getattr(module, name))
        self.scatter_add = scatter_into
        self.to_device = to_device
        self.einsum = einsum

    @staticmethod
    def astype(array, dtype):
        return array.astype(dtype, copy=False)


ARRAY_NAMESPACE = ArrayNamespace(np)


# --- random numbers -------------------------------------------------------------
# One generator per thread, so that its state can be captured in every snapshot
# of a checkpointed loop and replayed when a step is recomputed, and so that
# loops running in several threads at once never move each other's stream.  A
# thread's generator starts from seed 0.  It draws on the host; samples for
# the GPU are copied there, so both devices see the same numbers for a seed.


class _RandomState(threading.local):
    def __init__(self):
        self.generator = np.random.Generator(np.random.PCG64(0))
        self.draws = 0  # counts draws (and reseeds): an unchanged state is recognised cheaply
        self.known = None  # (draws, state): the last state read or set, valid while draws agree


_random = _RandomState()


def seed(n: int) -> None:
    """Restart the calling thread's generator from seed ``n``."""
    _random.generator = np.random.Generator(np.random.PCG64(n))
    _random.draws += 1


def random_state():
    """The generator's state (a dict as NumPy gives it; treat it as read-only).

    Reading NumPy's state costs microseconds, and a checkpointed loop asks for
    it around every action, so an unchanged state is handed out again.
    """
    r = _random
    if r.known is None or r.known[0] != r.draws:
        r.known = (r.draws, r.generator.bit_generator.state)
    return r.known[1]


def set_random_state(state: Any) -> None:
    r = _random
    if r.known is not None and r.known[1] is state and r.known[0] == r.draws:
        return  # the generator is in this state already
    r.generator.bit_generator.state = state
    r.draws += 1
    r.known = (r.draws, state)


def uniform(low, high, size, dtype, device="cpu"):
    _random.draws += 1
    return to_device(np.asarray(_random.generator.uniform(low, high, size), dtype=dtype), device)


def normal(loc, scale, size, dtype, device="cpu"):
    _random.draws += 1
    return to_device(np.asarray(_random.generator.normal(loc, scale, size), dtype=dtype), device)


def randint(low, high, size, dtype, device="cpu"):
    """Integers in [low, high) (NumPy's ``Generator.integers``)."""
    _random.draws += 1
    return to_device(np.asarray(_random.generator.integers(low, high, size, dtype=dtype)), device)


def permutation(n, device="cpu"):
    """A random ordering of ``0 .. n-1`` (int64)."""
    _random.draws += 1
    return to_device(_random.generator.permutation(n), device)


# --- building workloads ---------------------------------------------------------------


def default_rng(seed):
    """A NumPy generator for building workloads (not the replayed library generator)."""
    return np.random.default_rng(seed)


def one_hot(indices, depth, dtype=np.float64):
    """One-hot encoding along a new last axis (on the device of ``indices``)."""
    return namespace(indices).eye(depth, dtype=dtype)[indices]


def causal_mask(n, dtype):
    """(n, n): 0 where a query may look (keys at or before it), -inf above the diagonal."""
    return np.triu(np.full((n, n), -np.inf, dtype=dtype), k=1)


def label_range(labels):
    """(smallest, largest) label of a non-empty integer array, as Python ints."""
    return int(labels.min()), int(labels.max())


def index_along(labels, axis):
    """The index that picks ``x[..., labels[...], ...]`` with the labels at ``axis``.

    For ``x`` of shape ``labels.shape[:axis] + (C,) + labels.shape[axis:]``,
    ``x[index_along(labels, axis)]`` has the shape of ``labels``: an open grid
    (``numpy.ogrid``) over the other axes, with ``labels`` put in at ``axis``.
    """
    module = namespace(labels)
    ndim = labels.ndim
    grid = [
        module.arange(n).reshape((1,) * k + (n,) + (1,) * (ndim - k - 1))
        for k, n in enumerate(labels.shape)
    ]
    return tuple(grid[:axis]) + (labels.copy(),) + tuple(grid[axis:])
