"""Tensor: an array, whether it needs a gradient, and where it came from.

A Tensor holds its value in ``data`` (a backend array) and one link, ``node``:

* ``None`` for a constant (no gradient wanted), or a falsy marker of the
  engine's (:class:`remat.tape.StepValue`) for a constant made inside a loop step;
* a :class:`~remat.core.tape.Leaf` for a *leaf* created with ``requires_grad=True``;
* the :class:`~remat.core.tape.Record` of the op that produced it otherwise.

``backward()`` seeds the output's cotangent, runs the sweep of :mod:`remat.core.tape`
and adds each leaf's gradient into its ``.grad``.  Operators and methods such as
``.sum()`` are the ops of :mod:`remat.ops`, attached as it is imported; conversions,
in-place updates and ``shape`` come from the base class :class:`remat.core.values.ArrayFace`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import backend
from .errors import as_leaf_dtype, check_differentiable_dtype, own_gradients
from .tape import Leaf, Record, Sweep
from .values import ArrayFace, refuse_tensors_inside, seed_of

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
        t._data, t.grad = array, None
        t.node = Leaf(t) if requires_grad else None
        return t

    @classmethod
    def _from_record(cls, data, node):
        """A tensor on an existing node: an op's output (for the ops; not for users)."""
        t = cls.__new__(cls)
        t._data, t.grad, t.node = data, None, node
        return t

    @property
    def record(self) -> Record | None:
        """The record of the op that made this tensor, or None for a leaf/constant."""
        return self.node if type(self.node) is Record else None

    @property
    def is_leaf(self) -> bool:
        return type(self.node) is not Record

    def backward(self, grad: TensorLike | None = None, retain_graph: bool = False) -> None:
        """Backpropagate from this tensor and *add* the gradients into each leaf's ``.grad``.

        Gradients accumulate across backward calls (as in PyTorch): set
        ``leaf.grad = None`` between steps to start afresh.  The graph's saved
        arrays are freed as the sweep passes them, so a second backward through
        the same graph raises unless the first was given ``retain_graph=True``.
        """
        seed = seed_of(self, grad)  # refuses what cannot start a backward from here
        sweep = Sweep(backend.ARRAY_NAMESPACE, retain_graph=retain_graph)
        sweep.add(self.node, seed)
        sweep.run()
        pairs = ((leaf, g) for leaf, g, _ in sweep.leaf_grads.values())
        for leaf, g in own_gradients(pairs, seed):
            g = as_leaf_dtype(g, leaf)
            tensor = leaf.tensor()
            if tensor is not None:  # else nobody can read this gradient any more
                tensor.grad = g if tensor.grad is None else tensor.grad + g
