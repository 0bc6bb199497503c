"""What a Tensor is besides a node on the tape: its face as an array.

:class:`ArrayFace` is the base of :class:`remat.core.tensor.Tensor`: conversions
to NumPy and Python numbers, in-place updates (``t += ...``), copies, and the
signatures of the op methods that :mod:`remat.ops` attaches.  Below it, the
refusals every path shares: dtypes that cannot carry a gradient, complex
values, Tensors hidden in a list.  None of it is needed to follow reverse
mode; it is what makes the Tensor behave as an array would.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .. import backend, guard
from .errors import BackwardError, DTypeError, check_differentiable_dtype, refuse_complex
from .tape import GRAD_ENABLED, Leaf, Record, next_sequence

if TYPE_CHECKING:
    from ..typing import Array, Axis, DTypeLike, TensorLike
    from .tensor import Tensor


class ArrayFace:
    """The array behaviour of a Tensor (its base class; it holds no state of its own)."""

    __slots__ = ()
    if TYPE_CHECKING:
        _data: Array
        _name: str
        grad: Array | None
        node: Any

        @classmethod
        def _wrap(cls, array: Any, requires_grad: bool = False) -> Tensor: ...
        @classmethod
        def _stand_in(cls, array: Any) -> Tensor:
            """A leaf standing for an input remat differentiates with respect to
            (attached by :mod:`remat.tensor`, where the engine's StandIn is known)."""
            ...

    # --- what it is -------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return bool(self.node)

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if type(self.node) is Record:
            raise ValueError(
                f"requires_grad can only be changed on a leaf tensor; this one is the output of "
                f"`{self.node.op.name}`. Use .detach() to make a new leaf."
            )
        if flag and self.node:  # requires grad already (rm.grad's argument stays its own)
            return
        if flag:
            check_differentiable_dtype(self._data)
        self.node = Leaf(self) if flag else None

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, as NumPy gives it: ``rm.ones((2, 3)).shape == (2, 3)``."""
        return self._data.shape

    @property
    def dtype(self) -> Any:
        """The element type, a NumPy dtype (``float64`` unless asked otherwise)."""
        return self._data.dtype

    def detach(self) -> Tensor:
        """The same values, cut from the tape (a constant sharing the array)."""
        return self._wrap(self._data)

    # --- its value ------------------------------------------------------------
    @property
    def data(self) -> Array:
        """The value, a backend array (NumPy or CuPy), shared with the tensor."""
        array = self._data
        guard.expose(array, next_sequence)
        return array

    @data.setter
    def data(self, value: TensorLike) -> None:
        if isinstance(value, ArrayFace):
            value = value._data
        if not backend.is_array(value):
            value = backend.asarray(value)
        old = self._data
        if self.node and (value.shape != old.shape or value.dtype != old.dtype):
            raise ValueError(
                f"tensor.data = ...: this tensor requires grad and holds shape {old.shape} dtype "
                f"{old.dtype}; the new value has shape {value.shape} dtype {value.dtype}. Give "
                "an array of the same shape and dtype, or make a new tensor with rm.tensor"
            )
        if value is not old:
            guard.expose(value, next_sequence)  # the caller still holds it
            self._data = value  # type: ignore[misc]  # (the slot is the Tensor's)
            if type(self.node) is Leaf or isinstance(self.node, Record):  # a recomputation
                self.node.rebound = guard.rebound(next_sequence)  # must not read it unawares

    @property
    def name(self) -> str | None:
        """The name given by ``rm.tensor(..., name=)``, which ``print(tape)`` and
        ``tape.to_dot()`` show for a leaf; None if none was given."""
        return getattr(self, "_name", None)  # (unset on most tensors: no cost to make them)

    @property
    def device(self) -> str:
        """Where the value lives: ``"cpu"`` or ``"cuda"``."""
        return backend.device_of(self._data)

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return self._data.ndim

    @property
    def size(self) -> int:
        """The number of elements."""
        return self._data.size

    def _update(self, op, other, symbol):
        """``self op= other``: a new value for this tensor; the old array is untouched,
        so a backward that saved it still finds it (remat's in-place ops rebind)."""
        recording = GRAD_ENABLED.get()
        if recording and type(self.node) is Leaf:  # the user's leaf (a StandIn is remat's)
            raise RuntimeError(
                f"`t {symbol} ...` on a leaf tensor that requires grad, outside rm.no_grad(): "
                "the change would be recorded and the leaf would stop being a leaf. Update "
                f"parameters inside `with rm.no_grad(): p {symbol} ...`"
            )
        result = op(self, other)
        if result.shape != self.shape:
            raise ValueError(
                f"`t {symbol} ...`: the result has shape {result.shape} but t has shape "
                f"{self.shape}; an in-place update cannot change the shape"
            )
        value = result._data
        if value.dtype != self.dtype:
            if result.node or not backend.casts_safely(value.dtype, self.dtype):
                kind = (
                    "the recorded result"
                    if result.node  # a cast here would be a second, unrecorded op
                    else "the result, which t cannot hold without dropping a part of each value "
                    "(as NumPy refuses),"
                )
                raise DTypeError(
                    f"`t {symbol} ...`: t has dtype {self.dtype} and shape {self.shape} but "
                    f"{kind} has dtype {value.dtype}; write `t = t {symbol[0]} ...` to keep "
                    "the new dtype"
                )
            value = value.astype(self.dtype)
        self._data = value
        if recording:  # the tensor now stands for the recorded result
            self.node = result.node
        elif type(self.node) is Leaf or isinstance(self.node, Record):  # a recomputation must
            self.node.rebound = guard.rebound(next_sequence)  # not read it unawares
        return self

    def __iadd__(self, other: TensorLike) -> Any:
        return self._update(type(self).__add__, other, "+=")

    def __isub__(self, other: TensorLike) -> Any:
        return self._update(type(self).__sub__, other, "-=")

    def __imul__(self, other: TensorLike) -> Any:
        return self._update(type(self).__mul__, other, "*=")

    def __itruediv__(self, other: TensorLike) -> Any:
        return self._update(type(self).__truediv__, other, "/=")

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        """``copy.deepcopy``: a tensor with an array of its own.  A constant stays a
        constant and a user's leaf a leaf (requiring grad, its ``.grad`` copied), as in
        PyTorch; a value inside a computation (an op's output, or an input that
        ``rm.grad``, ``rm.jvp`` or a loop step differentiates) is refused, since its
        copy would be cut from the gradient.  ``copy.copy`` shares the array and node."""
        node = self.node
        if node and type(node) is not Leaf:
            what = f"the output of `{node.op.name}`" if isinstance(node, Record) else "an input"
            raise RuntimeError(
                f"copy.deepcopy of a Tensor of shape {self.shape} inside a computation being "
                f"differentiated ({what}): the copy would be cut from the gradient. Use "
                "`x * 1.0` for a copy that keeps it, or x.detach() (rm.tensor(x)) for a "
                "constant one"
            )
        copied = self._wrap(backend.copy(self._data), requires_grad=bool(node))
        if node is not None and not node:
            copied.node = node  # a loop step's value stays the step's
        if self.grad is not None:
            copied.grad = backend.copy(self.grad)
        if self.name is not None:
            copied._name = self.name
        memo[id(self)] = copied
        return copied

    def numpy(self) -> Array:
        """The value as a NumPy array: a read-only view on the CPU, a copy from a GPU.

        Reading costs nothing; to change the value write into ``t.data``, or
        copy first (``t.numpy().copy()``).  ``np.asarray(t)`` gives the same.
        """
        if backend.device_of(self._data) == "cpu":
            return backend.read_only(self._data)
        return backend.to_host(self._data)

    def item(self) -> Any:
        """The value of a one-element tensor as a Python number."""
        return self._data.item()

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> Array:
        host = self.numpy()
        if dtype is not None and host.dtype != dtype:
            return host.astype(dtype)
        return host.copy() if copy else host

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[Tensor]:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    def __bool__(self) -> bool:
        return bool(self._data)

    def __float__(self) -> float:
        return float(self._data)

    def __int__(self) -> int:
        return int(self._data)

    def __index__(self) -> int:
        """A 0-d integer tensor used where Python wants an int (``range(t)``, ``lst[t]``).

        >>> import remat as rm
        >>> ["a", "b", "c"][rm.tensor(1)]
        'b'
        """
        if self.ndim != 0 or not backend.is_integer(self.dtype):
            raise TypeError(
                f"only a 0-d integer tensor can be used as an index or a count; this one has "
                f"shape {self.shape} and dtype {self.dtype} (int(t) converts a one-element "
                "tensor, truncating a float)"
            )
        return int(self._data)

    def __repr__(self) -> str:
        text = repr(backend.to_host(self._data))
        text = text[text.index("(") + 1 : text.rindex(")")] if text.startswith("array") else text
        extra = "" if self.device == "cpu" else ", device='cuda'"
        if type(self.node) is Record:
            extra += f", op={self.node.op.name}"
        elif self.node:
            extra += ", requires_grad=True"
        return f"tensor({text}{extra})"

    if TYPE_CHECKING:
        # The operators and methods below are the ops of remat.ops, attached when
        # remat.ops is imported (remat.ops.attach_methods); their signatures, for
        # type checkers.
        def __add__(self, other: TensorLike) -> Tensor: ...
        def __radd__(self, other: TensorLike) -> Tensor: ...
        def __sub__(self, other: TensorLike) -> Tensor: ...
        def __rsub__(self, other: TensorLike) -> Tensor: ...
        def __mul__(self, other: TensorLike) -> Tensor: ...
        def __rmul__(self, other: TensorLike) -> Tensor: ...
        def __truediv__(self, other: TensorLike) -> Tensor: ...
        def __rtruediv__(self, other: TensorLike) -> Tensor: ...
        def __pow__(self, other: TensorLike) -> Tensor: ...
        def __rpow__(self, other: TensorLike) -> Tensor: ...
        def __matmul__(self, other: TensorLike) -> Tensor: ...
        def __rmatmul__(self, other: TensorLike) -> Tensor: ...
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __getitem__(self, index: Any) -> Tensor: ...
        def __lt__(self, other: TensorLike) -> Tensor: ...
        def __le__(self, other: TensorLike) -> Tensor: ...
        def __gt__(self, other: TensorLike) -> Tensor: ...
        def __ge__(self, other: TensorLike) -> Tensor: ...
        def __eq__(self, other: object) -> Tensor: ...  # type: ignore[override]  # elementwise, as NumPy
        def __ne__(self, other: object) -> Tensor: ...  # type: ignore[override]  # elementwise, as NumPy
        def sum(self, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
        def mean(self, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
        def max(self, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
        def min(self, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
        def reshape(self, *shape: int | tuple[int, ...]) -> Tensor: ...
        def transpose(self, *axes: int | tuple[int, ...]) -> Tensor: ...
        @property
        def T(self) -> Tensor: ...
        def exp(self) -> Tensor: ...
        def log(self) -> Tensor: ...
        def tanh(self) -> Tensor: ...
        def to(self, device: str) -> Tensor: ...
        def astype(self, dtype: DTypeLike) -> Tensor: ...
        def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor: ...
        def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor: ...


def output(out):
    """An op's output as an array: NumPy returns scalars from full reductions."""
    return out if backend.is_array(out) else backend.xp.asarray(out)


def seed_of(tensor: Any, grad: Any) -> Any:
    """The cotangent ``tensor.backward(grad)`` starts from: ``grad`` as an array of the
    tensor's shape and dtype, or ones for a one-element tensor; refuses the rest."""
    if not tensor.node:
        if tensor.node is not None:
            raise tensor.node.escaped("backward()")  # a loop step's value, outside its step
        raise BackwardError(
            "backward() on a tensor that does not require grad: nothing on the tape leads to "
            "it. Create the inputs with requires_grad=True (outside rm.no_grad())."
        )
    if grad is None:
        if tensor._data.size != 1:
            raise BackwardError(
                f"backward() without a gradient needs a single-element output; this tensor has "
                f"shape {tensor.shape}. Pass grad= an array of shape {tensor.shape}."
            )
        return backend.ones_like(tensor._data)
    seed = grad._data if isinstance(grad, ArrayFace) else backend.asarray(grad)
    if seed.shape != tensor.shape:
        raise BackwardError(
            f"backward(): grad has shape {seed.shape} but the tensor has shape {tensor.shape}"
        )
    refuse_complex(seed, "backward(): grad", tensor.dtype)
    return seed.astype(tensor.dtype, copy=False)


def refuse_tensors_inside(data):
    """rm.tensor([a, b]) makes a new leaf: Tensors inside would silently lose their gradient."""
    if isinstance(data, (list, tuple)) and holds_tensors(data, needing_grad=True):
        raise TypeError(
            "rm.tensor(...) got a list holding Tensors that require grad: the new tensor would "
            "be a leaf cut from their gradients. Use rm.stack([...]) to keep the gradients, or "
            "pass [t.detach() for t in ...] to cut them on purpose."
        )


def holds_tensors(items, needing_grad=False):
    """Whether a (nested) list or tuple holds a Tensor (that requires grad) anywhere."""
    return any(
        (isinstance(v, ArrayFace) and (v.requires_grad or not needing_grad))
        or (isinstance(v, (list, tuple)) and holds_tensors(v, needing_grad))
        for v in items
    )
