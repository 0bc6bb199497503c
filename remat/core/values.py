"""What a Tensor is besides a node on the tape: its face as an array.

:class:`ArrayFace` is the base of :class:`remat.core.tensor.Tensor`: conversions
to NumPy and Python numbers, in-place updates (``t += ...``), copies, and the
signatures of the op methods that :mod:`remat.ops` attaches.  Below it, the
refusals every path shares: dtypes that cannot carry a gradient, complex
values, Tensors hidden in a list.  None of it is needed to follow reverse
mode; it is what makes the Tensor behave as an array would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .. import backend, guard
from .tape import GRAD_ENABLED, BackwardError, Leaf, Record, next_sequence

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

        @property
        def shape(self) -> tuple[int, ...]: ...
        @property
        def dtype(self) -> Any: ...
        @classmethod
        def _wrap(cls, array: Any, requires_grad: bool = False) -> Tensor: ...

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

        >>> ["a", "b", "c"][tensor(1)]
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


def own_gradients(pairs, seed):
    """Yield (key, gradient) from ``pairs`` with each gradient an array of its own.

    A VJP may pass its cotangent on unchanged (add does), so two leaves could
    otherwise share one array, or share the caller's seed.
    """
    seen = set()
    for leaf, g in pairs:
        if g is seed or id(g) in seen or not backend.is_owned(g):
            g = backend.copy(g)
        seen.add(id(g))
        yield leaf, g


def as_leaf_dtype(g, leaf):
    """A leaf's gradient in the leaf's own dtype (float32 stays float32), as in PyTorch."""
    if g.dtype == leaf.dtype:
        return g
    refuse_complex_gradient(g, leaf)
    return g.astype(leaf.dtype)


def refuse_complex_gradient(g, leaf):
    """Refuse gradient ``g`` of a real ``leaf`` (anything with a shape and a dtype) that
    came out complex: cast to the leaf's dtype, it would lose its imaginary part."""
    if backend.is_complex(g.dtype) and not backend.is_complex(leaf.dtype):
        raise BackwardError(
            f"backward(): the gradient of a real leaf of shape {leaf.shape} and dtype "
            f"{leaf.dtype} came out complex ({g.dtype}): a complex value was combined with it. "
            "remat differentiates real functions only; take the real part where it belongs."
        )


REAL_ONLY = (
    "remat differentiates real functions only. Allowed: a real (floating-point) array; "
    "carry a complex value as two real ones, its real and imaginary parts"
)


def refuse_complex(array, what, dtype=None, allowed=REAL_ONLY):
    """Refuse a complex ``array`` where remat wants a real value (of ``dtype``, if given,
    when that is real).  Cast, the array would lose its imaginary part with at most
    NumPy's ComplexWarning; carried as a constant, it would cut a gradient or a
    tangent.  Either way the answer would be wrong without a word, so this raises,
    naming ``what`` (the argument), the array's dtype and shape and what is ``allowed``."""
    if array.dtype.kind != "c" or (dtype is not None and backend.is_complex(dtype)):
        return  # (the kind, not backend.is_complex: this runs on every checkpointed call)
    real = "" if dtype is None else f", where a real value of dtype {dtype} belongs"
    raise DTypeError(
        f"{what} is complex (dtype {array.dtype}, shape {tuple(array.shape)}){real}; {allowed}"
    )


class DTypeError(TypeError, ValueError):
    """An array of the wrong dtype for what was asked (gradients need floats).

    >>> import remat as rm
    >>> try:
    ...     rm.tensor([1, 2], requires_grad=True)
    ... except rm.DTypeError as error:
    ...     print(str(error).split(";")[0])
    requires_grad=True needs a floating-point array
    """


def check_differentiable_dtype(array):
    if not backend.is_floating(array.dtype):
        raise DTypeError(
            f"requires_grad=True needs a floating-point array; got dtype {array.dtype} "
            f"(shape {tuple(array.shape)}). Pass dtype=float64 (or float32) to rm.tensor."
        )


# --- operands that do not fit ----------------------------------------------------


class ShapeError(ValueError):
    """An op was given arrays whose shapes do not fit together.

    >>> import remat as rm
    >>> try:
    ...     rm.ones(2) + rm.ones(3)
    ... except rm.ShapeError as error:
    ...     print(str(error).split(":")[0:2])
    ['add', ' cannot combine operands of shapes (2,) and (3,)']
    """


SHAPE_RULES: dict[str, Callable[..., str]] = {}
"""op name -> f(*operands) explaining, for a human, why their shapes do not fit."""


def check_axis(op_name: str, axis: int, ndim: int) -> int:
    """``axis`` as an index in [0, ndim), or a ShapeError naming the op (as NumPy would)."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op_name}: axis {axis} is out of bounds for {ndim} axes")
    return axis % ndim


def shape_error(op, datas, error):
    rule = SHAPE_RULES.get(op.name)
    if rule is not None:
        return ShapeError(rule(*datas))
    if len(datas) == 1:
        return ShapeError(f"{op.name}: {error} (operand of shape {getattr(datas[0], 'shape', ())})")
    shapes = " and ".join(str(getattr(d, "shape", ())) for d in datas)
    return ShapeError(f"{op.name}: cannot combine operands of shapes {shapes}: {error}")


def operand_error(op, datas, error):
    """Why an op refused its operands: two devices, shapes, or another NumPy error,
    always naming the op."""
    devices = backend.mixed_devices(datas)
    if devices is not None:
        return backend.DeviceError(
            f"{op.name}: operands are on different devices: {devices}; move one with .to()"
        )
    if isinstance(error, ValueError):
        return shape_error(op, datas, error)
    described = ", ".join(
        f"{getattr(d, 'dtype', type(d).__name__)} {getattr(d, 'shape', '')}".strip() for d in datas
    )
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(f"{op.name}: {error} (operands: {described})")
