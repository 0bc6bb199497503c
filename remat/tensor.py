"""Tensor: an array, whether it needs a gradient, and where it came from.

A Tensor holds its value in ``data`` (a backend array) and one link, ``node``:

* ``None`` for a constant (no gradient wanted), or a falsy
  :class:`~remat.tape.StepValue` for a constant made inside a loop step;
* a :class:`~remat.tape.Leaf` for a *leaf* created with ``requires_grad=True``;
* the :class:`~remat.tape.Record` of the op that produced it otherwise.

Arithmetic operators and methods such as ``.sum()`` are the ops of
:mod:`remat.ops`, which attaches them when it is imported (the ops sit above
the Tensor: this module imports none of them).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import backend, guard
from .tape import (
    GRAD_ENABLED,
    BackwardError,
    Leaf,
    Record,
    StandIn,
    backward,
    escape_error,
    next_sequence,
)

if TYPE_CHECKING:
    from .typing import Array, Axis, DTypeLike, TensorLike


class Tensor:
    """A value on the tape.  ``Tensor(data, requires_grad)`` is :func:`remat.tensor`.

    ``t.data`` is the value as a backend array, shared, not copied: writing
    into it (or a view of it) is allowed, and a backward that still needs the
    old value refuses to run (see :mod:`remat.guard`).  ``np.asarray(t)`` and
    ``t.numpy()`` are read-only views, free to take.  The operators ``+=``, ``-=``, ``*=``, ``/=``
    give the tensor a new value without touching the old one.

    >>> import remat as rm
    >>> w = rm.Tensor([[1.0, 2.0]], requires_grad=True)
    >>> y = (w @ w.T).sum()
    >>> y
    tensor(5., op=sum)
    >>> y.backward(); w.grad
    array([[2., 4.]])
    >>> w.shape, w.dtype, w.device, w.is_leaf, y.is_leaf
    ((1, 2), dtype('float64'), 'cpu', True, False)
    """

    __slots__ = ("_data", "grad", "node", "_name", "__weakref__")  # _name: set by rm.tensor
    _data: Array
    grad: Array | None
    """The gradient backward() accumulated into this leaf (a backend array), or None."""
    node: Any  # a Record, a Leaf, a StandIn, a StepValue marker or None (module docstring)
    __array_ufunc__ = None  # NumPy defers to Tensor's operators (a * t -> t.__rmul__)
    __hash__ = object.__hash__  # comparisons return arrays, identity hashes

    def __init__(self, data: TensorLike, requires_grad: bool = False) -> None:
        if isinstance(data, Tensor):
            data = data._data
        _refuse_tensors_inside(data)
        self._data = backend.asarray(data)
        self.grad = None
        if requires_grad:
            _check_differentiable_dtype(self._data)
        self.node = Leaf(self) if requires_grad else None

    @classmethod
    def _wrap(cls, array, requires_grad=False):
        """A tensor holding ``array`` itself, which remat made (internal: no copy)."""
        t = cls.__new__(cls)
        t._data = array
        t.grad = None
        t.node = Leaf(t) if requires_grad else None
        return t

    @classmethod
    def _stand_in(cls, array):
        """A leaf standing for an input remat differentiates with respect to (internal)."""
        t = cls.__new__(cls)
        t._data = array
        t.grad = None
        t.node = StandIn(t)
        return t

    @classmethod
    def _from_record(cls, data, node):
        """A tensor on an existing node: an op's output (for the ops; not for users)."""
        t = cls.__new__(cls)
        t._data = data
        t.grad = None
        t.node = node
        return t

    # --- its value ------------------------------------------------------------
    @property
    def data(self) -> Array:
        """The value, a backend array (NumPy or CuPy), shared with the tensor."""
        array = self._data
        guard.expose(array, next_sequence)
        return array

    @data.setter
    def data(self, value: TensorLike) -> None:
        if isinstance(value, Tensor):
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
            self._data = value
            if type(self.node) is Leaf or isinstance(self.node, Record):  # a recomputation
                self.node.rebound = guard.rebound(next_sequence)  # must not read it unawares

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

    def __iadd__(self, other: TensorLike) -> Tensor:
        return self._update(Tensor.__add__, other, "+=")

    def __isub__(self, other: TensorLike) -> Tensor:
        return self._update(Tensor.__sub__, other, "-=")

    def __imul__(self, other: TensorLike) -> Tensor:
        return self._update(Tensor.__mul__, other, "*=")

    def __itruediv__(self, other: TensorLike) -> Tensor:
        return self._update(Tensor.__truediv__, other, "/=")

    # --- what it is ------------------------------------------------------------
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
            _check_differentiable_dtype(self._data)
        self.node = Leaf(self) if flag else None

    @property
    def name(self) -> str | None:
        """The name given by ``rm.tensor(..., name=)``, which ``print(tape)`` and
        ``tape.to_dot()`` show for a leaf; None if none was given."""
        return getattr(self, "_name", None)  # (unset on most tensors: no cost to make them)

    @property
    def record(self) -> Record | None:
        """The record of the op that made this tensor, or None for a leaf/constant."""
        return self.node if type(self.node) is Record else None

    @property
    def is_leaf(self) -> bool:
        return type(self.node) is not Record

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, as NumPy gives it: ``rm.ones((2, 3)).shape == (2, 3)``."""
        return self._data.shape

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

    @property
    def dtype(self) -> Any:
        """The element type, a NumPy dtype (``float64`` unless asked otherwise)."""
        return self._data.dtype

    # --- gradients -------------------------------------------------------------
    def backward(self, grad: TensorLike | None = None, retain_graph: bool = False) -> None:
        """Backpropagate from this tensor and *add* the gradients into each leaf's ``.grad``.

        Gradients accumulate across backward calls (as in PyTorch): set
        ``leaf.grad = None`` between steps to start afresh.  The graph's saved
        arrays are freed as the sweep passes them, so a second backward through
        the same graph raises unless the first was given ``retain_graph=True``.
        """
        if not self.node:
            if self.node is not None:
                raise escape_error("backward()", self.node)
            raise BackwardError(
                "backward() on a tensor that does not require grad: nothing on the tape leads to "
                "it. Create the inputs with requires_grad=True (outside rm.no_grad())."
            )
        if grad is None:
            if self._data.size != 1:
                raise BackwardError(
                    f"backward() without a gradient needs a single-element output; this tensor has "
                    f"shape {self.shape}. Pass grad= an array of shape {self.shape}."
                )
            seed = backend.ones_like(self._data)
        else:
            seed = grad._data if isinstance(grad, Tensor) else backend.asarray(grad)
            if seed.shape != self.shape:
                raise BackwardError(
                    f"backward(): grad has shape {seed.shape} but the tensor has shape {self.shape}"
                )
            refuse_complex(seed, "backward(): grad", self.dtype)
            seed = seed.astype(self.dtype, copy=False)
        leaf_grads = backward([self], [seed], retain_graph=retain_graph)
        pairs = ((leaf, g) for leaf, g, _ in leaf_grads.values())
        for leaf, g in own_gradients(pairs, seed):
            g = as_leaf_dtype(g, leaf)
            tensor = leaf.tensor()
            if tensor is not None:  # else nobody can read this gradient any more
                tensor.grad = g if tensor.grad is None else tensor.grad + g

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
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
        copied = Tensor._wrap(backend.copy(self._data), requires_grad=bool(node))
        if node is not None and not node:
            copied.node = node  # a loop step's value stays the step's
        if self.grad is not None:
            copied.grad = backend.copy(self.grad)
        if self.name is not None:
            copied._name = self.name
        memo[id(self)] = copied
        return copied

    def detach(self) -> Tensor:
        """The same values, cut from the tape (a constant sharing the array)."""
        return Tensor._wrap(self._data)

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


def _check_differentiable_dtype(array):
    if not backend.is_floating(array.dtype):
        raise DTypeError(
            f"requires_grad=True needs a floating-point array; got dtype {array.dtype} "
            f"(shape {tuple(array.shape)}). Pass dtype=float64 (or float32) to rm.tensor."
        )


def tensor(
    data: TensorLike,
    requires_grad: bool = False,
    dtype: DTypeLike | None = None,
    device: str | None = None,
    name: str | None = None,
) -> Tensor:
    """A new Tensor holding a copy of ``data`` (list, scalar, NumPy or CuPy array, Tensor).

    ``requires_grad=True`` makes it a leaf whose gradient backward() fills in;
    it needs a floating-point dtype.  ``device`` is "cpu" or "cuda" (default:
    where ``data`` is; the CPU for lists and scalars).  ``name`` labels a leaf
    in ``print(tape)`` and ``tape.to_dot()`` (``t.name``).

    >>> import remat as rm
    >>> rm.tensor([1, 2, 3])
    tensor([1, 2, 3])
    >>> x = rm.tensor([1, 2], dtype="float32", requires_grad=True)
    >>> x
    tensor([1., 2.], dtype=float32, requires_grad=True)
    """
    if isinstance(data, Tensor):
        data = data._data
    _refuse_tensors_inside(data)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"rm.tensor: name must be a string, got {name!r}")
    array = backend.asarray(data, dtype=dtype, device=device)
    if requires_grad:
        _check_differentiable_dtype(array)
    t = Tensor._wrap(array, requires_grad=requires_grad)
    if name is not None:
        t._name = name
    return t


def _refuse_tensors_inside(data):
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
        (isinstance(v, Tensor) and (v.requires_grad or not needing_grad))
        or (isinstance(v, (list, tuple)) and holds_tensors(v, needing_grad))
        for v in items
    )
