"""Optimizers: SGD (with momentum) and Adam, updating parameter Tensors in place.

An optimizer takes the parameters as a pytree (a Tensor, or lists, tuples
and dicts of them, nested as you like: the same tree a model keeps), and
``step()`` updates every parameter that has a ``.grad``::

    >>> import remat as rm
    >>> w = rm.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = rm.optim.SGD({"w": w}, lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step(); opt.zero_grad()
    >>> w
    tensor([ 0.8, -1.6], requires_grad=True)

The update is the safe in-place form of the README (``with rm.no_grad():
p -= delta``): each parameter gets a new array and the old one is never
written, so a backward still pending on a graph that saved the old value
gets the gradient of that value, and the write guard has nothing to check.
Parameters keep their dtype (float32 stays float32: the optimizer's buffers
are in the parameter's dtype), parameters whose ``.grad`` is None are
skipped (their state does not advance), and ``zero_grad()`` sets every
``.grad`` to None.  ``lr`` (and ``momentum``, ``betas``, ``eps``) are plain
attributes: change ``opt.lr`` between steps for a learning-rate schedule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import backend
from .pytree import flatten
from .tape import no_grad
from .tensor import Tensor, refuse_complex

if TYPE_CHECKING:
    from .typing import PyTree


class Optimizer:
    """What SGD and Adam share: the parameters (flattened, each once), ``zero_grad``, ``step``.

    A new optimizer defines ``_delta(k, p, g)``, the array to subtract from
    parameter ``k`` (``p``, with gradient array ``g``); ``self.state[k]`` keeps
    its buffers between steps.

    >>> import remat as rm
    >>> class SignDescent(rm.optim.Optimizer):
    ...     def _delta(self, k, p, g):
    ...         return self.lr * (g > 0) - self.lr * (g < 0)
    >>> w = rm.tensor([3.0, -3.0], requires_grad=True)
    >>> opt = SignDescent([w], lr=0.5)
    >>> (w * w).sum().backward(); opt.step()
    >>> w
    tensor([ 2.5, -2.5], requires_grad=True)
    """

    def __init__(self, params: PyTree, lr: float) -> None:
        leaves = flatten(params, lambda v: isinstance(v, Tensor))[0]
        name = type(self).__name__
        if not leaves:
            raise ValueError(
                f"rm.optim.{name}: params holds no Tensor; pass a Tensor, or a list, tuple or "
                "dict (nested as you like) of the Tensors to train"
            )
        unique: dict[int, Tensor] = {}
        for k, p in enumerate(leaves):
            if not (p.requires_grad and p.is_leaf):
                what = "is the output of an op" if not p.is_leaf else "does not require grad"
                raise ValueError(
                    f"rm.optim.{name}: parameter {k} (shape {p.shape}) {what}; the parameters "
                    "are leaf tensors made with requires_grad=True"
                )
            unique.setdefault(id(p), p)  # a tensor named twice in the tree is updated once
        self.params = list(unique.values())
        self.lr = _positive(name, "lr", lr)
        # per parameter: the buffers, made at its first step
        self.state: list[Any] = [None] * len(self.params)

    def zero_grad(self) -> None:
        """Set every parameter's ``.grad`` to None (the next backward starts afresh)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        """Update each parameter that has a gradient, out of place (see the module doc)."""
        with no_grad():
            for k, p in enumerate(self.params):
                g = p.grad
                if g is None:
                    continue
                if isinstance(g, Tensor):
                    g = g._data
                name = type(self).__name__
                refuse_complex(g, f"rm.optim.{name}: the .grad of parameter {k}", p.dtype)
                g = g.astype(p.dtype, copy=False)
                delta = self._delta(k, p, g)
                p -= Tensor._wrap(delta)  # a new array for p; the old one stays as it was

    def _delta(self, k, p, g):
        raise NotImplementedError


def _positive(name, what, value, allow_zero=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (value >= 0 if allow_zero else value > 0):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"rm.optim.{name}: {what} must be a number {bound}, got {value!r}")
    return value


class SGD(Optimizer):
    """Stochastic gradient descent: ``p -= lr * g``, or with ``momentum`` m > 0
    (PyTorch's form) ``b = m * b + g`` (``b = g`` at a parameter's first step) and
    ``p -= lr * b``.

    >>> import remat as rm
    >>> p = rm.tensor([1.0], requires_grad=True)
    >>> opt = rm.optim.SGD([p], lr=0.5, momentum=0.9)
    >>> for _ in range(2):
    ...     opt.zero_grad()
    ...     (p * p).sum().backward()  # gradient 2p
    ...     opt.step()
    >>> round(float(p[0]), 6)  # 1 - 0.5*2 = 0, then b = 0.9*2 + 0 = 1.8: 0 - 0.9
    -0.9
    """

    def __init__(self, params: PyTree, lr: float, momentum: float = 0.0) -> None:
        super().__init__(params, lr)
        self.momentum = _positive("SGD", "momentum", momentum, allow_zero=True)

    def _delta(self, k, p, g):
        if not self.momentum:
            return self.lr * g
        buffer = self.state[k]
        buffer = g.copy() if buffer is None else self.momentum * buffer + g
        self.state[k] = buffer
        return self.lr * buffer


class Adam(Optimizer):
    """Adam (Kingma and Ba 2015), in PyTorch's form: with ``t`` the parameter's step count,
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2`` and
    ``p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``.

    >>> import remat as rm
    >>> p = rm.tensor([1.0, -1.0], requires_grad=True)
    >>> opt = rm.optim.Adam([p], lr=0.1)
    >>> (p * p).sum().backward()
    >>> opt.step()  # Adam's first step moves each element by about lr
    >>> p
    tensor([ 0.9, -0.9], requires_grad=True)
    """

    def __init__(
        self,
        params: PyTree,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, lr)
        try:
            b1, b2 = betas
        except (TypeError, ValueError):
            raise ValueError(
                f"rm.optim.Adam: betas must be a pair (b1, b2), got {betas!r}"
            ) from None
        for what, b in (("betas[0]", b1), ("betas[1]", b2)):
            if not (isinstance(b, (int, float)) and 0 <= b < 1):
                raise ValueError(f"rm.optim.Adam: {what} must be in [0, 1), got {b!r}")
        self.betas = (b1, b2)
        self.eps = _positive("Adam", "eps", eps, allow_zero=True)

    def _delta(self, k, p, g):
        b1, b2 = self.betas
        state = self.state[k]
        if state is None:
            zeros = backend.zeros(g.shape, g.dtype, like=g)
            state = self.state[k] = [0, zeros, zeros]
        state[0] += 1
        t = state[0]
        state[1] = m = b1 * state[1] + (1 - b1) * g
        state[2] = v = b2 * state[2] + (1 - b2) * (g * g)
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        return self.lr * m_hat / (backend.xp.sqrt(v_hat) + self.eps)
