"""Tensor: an array, whether it needs a gradient, and where it came from.

A Tensor holds its value in ``data`` (a backend array) and one link, ``node``:

* ``None`` for a constant (no gradient wanted);
* a :class:`~remat.tape.Leaf` for a *leaf* created with ``requires_grad=True``;
* the :class:`~remat.tape.Record` of the op that produced it otherwise.

Arithmetic operators and methods such as ``.sum()`` are the ops of
:mod:`remat.ops`, attached at the bottom of this module.
"""

from __future__ import annotations

from . import backend
from .tape import BackwardError, Leaf, Record, backward


class Tensor:
    """A value on the tape.  Create one with :func:`remat.tensor`."""

    __slots__ = ("data", "grad", "node", "__weakref__")
    __array_ufunc__ = None  # NumPy defers to Tensor's operators (a * t -> t.__rmul__)
    __hash__ = object.__hash__  # comparisons return arrays, identity hashes

    def __init__(self, data, requires_grad=False):
        self.data = data
        self.grad = None
        if requires_grad:
            _check_differentiable_dtype(data.dtype)
        self.node = Leaf(self) if requires_grad else None

    @classmethod
    def _from_record(cls, data, node):
        """A tensor on an existing node: an op's output (for the ops; not for users)."""
        t = cls.__new__(cls)
        t.data = data
        t.grad = None
        t.node = node
        return t

    # --- what it is ------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self.node is not None

    @requires_grad.setter
    def requires_grad(self, flag):
        if type(self.node) is Record:
            raise ValueError(
                f"requires_grad can only be changed on a leaf tensor; this one is the output of "
                f"`{self.node.op.name}`. Use .detach() to make a new leaf."
            )
        if flag:
            _check_differentiable_dtype(self.data.dtype)
        self.node = Leaf(self) if flag else None

    @property
    def record(self):
        """The record of the op that made this tensor, or None for a leaf/constant."""
        return self.node if type(self.node) is Record else None

    @property
    def is_leaf(self) -> bool:
        return type(self.node) is not Record

    shape = property(lambda self: self.data.shape)
    device = property(lambda self: backend.device_of(self.data), doc='"cpu" or "cuda"')
    ndim = property(lambda self: self.data.ndim)
    size = property(lambda self: self.data.size)
    dtype = property(lambda self: self.data.dtype)

    # --- gradients -------------------------------------------------------------
    def backward(self, grad=None, retain_graph=False):
        """Backpropagate from this tensor and *add* the gradients into each leaf's ``.grad``.

        Gradients accumulate across backward calls (as in PyTorch): set
        ``leaf.grad = None`` between steps to start afresh.  The graph's saved
        arrays are freed as the sweep passes them, so a second backward through
        the same graph raises unless the first was given ``retain_graph=True``.
        """
        if self.node is None:
            raise BackwardError(
                "backward() on a tensor that does not require grad: nothing on the tape leads to "
                "it. Create the inputs with requires_grad=True (outside rm.no_grad())."
            )
        if grad is None:
            if self.data.size != 1:
                raise BackwardError(
                    f"backward() without a gradient needs a single-element output; this tensor has "
                    f"shape {self.shape}. Pass grad= an array of shape {self.shape}."
                )
            seed = backend.ones_like(self.data)
        else:
            seed = grad.data if isinstance(grad, Tensor) else backend.asarray(grad)
            if seed.shape != self.shape:
                raise BackwardError(
                    f"backward(): grad has shape {seed.shape} but the tensor has shape {self.shape}"
                )
            seed = seed.astype(self.dtype, copy=False)
        leaf_grads = backward([self], [seed], retain_graph=retain_graph)
        pairs = ((leaf, g) for leaf, g, _ in leaf_grads.values())
        for leaf, g in own_gradients(pairs, seed):
            tensor = leaf.tensor()
            if tensor is not None:  # else nobody can read this gradient any more
                tensor.grad = g if tensor.grad is None else tensor.grad + g

    def detach(self) -> "Tensor":
        """The same values, cut from the tape (a constant sharing the array)."""
        return Tensor(self.data)

    def numpy(self):
        """The value as a NumPy array (copied from the device when needed)."""
        return backend.to_host(self.data)

    def item(self):
        return self.data.item()

    def __array__(self, dtype=None, copy=None):
        host = backend.to_host(self.data)
        return host if dtype is None else host.astype(dtype)

    def __len__(self):
        return len(self.data)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    def __bool__(self):
        return bool(self.data)

    def __float__(self):
        return float(self.data)

    def __repr__(self):
        text = repr(backend.to_host(self.data))
        text = text[text.index("(") + 1 : text.rindex(")")] if text.startswith("array") else text
        extra = "" if self.device == "cpu" else ", device='cuda'"
        if type(self.node) is Record:
            extra += f", op={self.node.op.name}"
        elif self.node is not None:
            extra += ", requires_grad=True"
        return f"tensor({text}{extra})"


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


class DTypeError(TypeError, ValueError):
    """An array of the wrong dtype for what was asked (gradients need floats)."""


def _check_differentiable_dtype(dtype):
    if not backend.is_floating(dtype):
        raise DTypeError(
            f"requires_grad=True needs a floating-point array; got dtype {dtype}. "
            "Pass dtype=float64 (or float32) to rm.tensor."
        )


def tensor(data, requires_grad=False, dtype=None, device=None) -> Tensor:
    """A new Tensor holding a copy of ``data`` (list, scalar, NumPy or CuPy array, Tensor).

    ``requires_grad=True`` makes it a leaf whose gradient backward() fills in;
    it needs a floating-point dtype.  ``device`` is "cpu" or "cuda" (default:
    where ``data`` is; the CPU for lists and scalars).
    """
    if isinstance(data, Tensor):
        data = data.data
    array = backend.asarray(data, dtype=dtype, device=device)
    if requires_grad:
        _check_differentiable_dtype(array.dtype)
    return Tensor(array, requires_grad=requires_grad)


from . import ops as _ops  # noqa: E402  (ops need Tensor defined first)

_ops.attach_methods(Tensor)
