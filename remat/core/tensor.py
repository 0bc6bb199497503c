"""Tensor: an array, whether it needs a gradient, and where it came from.

A Tensor holds its value in ``data`` (a backend array) and one link, ``node``:

* ``None`` for a constant (no gradient wanted), or a falsy marker of the
  engine's (:class:`remat.tape.StepValue`) for a constant made inside a loop step;
* a :class:`~remat.core.tape.Leaf` for a *leaf* created with ``requires_grad=True``;
* the :class:`~remat.core.tape.Record` of the op that produced it otherwise.

``backward()`` seeds the output's cotangent and runs the sweep of
:mod:`remat.core.tape`, then adds each leaf's gradient into its ``.grad``.
Arithmetic operators and methods such as ``.sum()`` are the ops of
:mod:`remat.ops`, which attaches them when it is imported (the ops sit above
the Tensor); conversions and in-place updates come from its base class,
:class:`remat.core.values.ArrayFace`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import backend
from .errors import (
    BackwardError,
    as_leaf_dtype,
    check_differentiable_dtype,
    own_gradients,
    refuse_complex,
)
from .tape import Leaf, Record, backward
from .values import ArrayFace, refuse_tensors_inside

if TYPE_CHECKING:
    from ..typing import Array, TensorLike


class Tensor(ArrayFace):
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
        refuse_tensors_inside(data)
        self._data = backend.asarray(data)
        self.grad = None
        if requires_grad:
            check_differentiable_dtype(self._data)
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
    def _from_record(cls, data, node):
        """A tensor on an existing node: an op's output (for the ops; not for users)."""
        t = cls.__new__(cls)
        t._data = data
        t.grad = None
        t.node = node
        return t

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
            check_differentiable_dtype(self._data)
        self.node = Leaf(self) if flag else None

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
                raise self.node.escaped("backward()")  # a loop step's value, outside its step
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

    def detach(self) -> Tensor:
        """The same values, cut from the tape (a constant sharing the array)."""
        return Tensor._wrap(self._data)

    if TYPE_CHECKING:

        @classmethod
        def _stand_in(cls, array: Any) -> Tensor:
            """A leaf standing for an input remat differentiates with respect to
            (attached by :mod:`remat.tensor`, where the engine's StandIn is known)."""
            ...
