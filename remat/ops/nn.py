"""Neural-network primitives: activations and normalised exponentials.

Each is one primitive with a hand-written VJP, rather than a composition of
smaller ops: fewer records on the tape, and numerically stable forms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core import SELF_ADJOINT, as_tensor, check_axis, defop, make_unary, unary, xp

if TYPE_CHECKING:
    from ..tensor import Tensor
    from ..typing import TensorLike
from .reduce import _logsumexp


def _sigmoid(x):
    return 0.5 * (1.0 + xp.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


def _softmax(x, axis=-1):
    if x.shape[axis] == 0:  # over an empty axis: an empty result
        return xp.exp(x)
    e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis=-1):
    if x.shape[axis] == 0:
        return x.copy()
    return x - _logsumexp(x, axis=axis, keepdims=True)


SIGMOID = defop(
    "sigmoid", _sigmoid, lambda ns, g, ans, x: g * ans * (1 - ans), needs=("a",), jvps=SELF_ADJOINT
)
RELU = defop(
    "relu",
    lambda x: xp.maximum(x, 0),
    lambda ns, g, ans, x: g * (ans > 0),
    needs=("a",),
    jvps=SELF_ADJOINT,
)
SOFTMAX = defop(
    "softmax",
    _softmax,
    lambda ns, g, ans, x, axis: ans * (g - ns.sum(g * ans, axis=axis, keepdims=True)),
    needs=("a",),
    jvps=SELF_ADJOINT,  # its Jacobian, diag(s) - s s^T, is symmetric
)
LOG_SOFTMAX = defop(
    "log_softmax",
    _log_softmax,
    lambda ns, g, ans, x, axis: g - ns.exp(ans) * ns.sum(g, axis=axis, keepdims=True),
    needs=("a",),
    jvps=(lambda ns, t, ans, x, axis: t - ns.sum(t * ns.exp(ans), axis=axis, keepdims=True),),
)


sigmoid = make_unary(
    SIGMOID,
    doc="""1 / (1 + exp(-x)), computed without overflow.

    >>> import remat as rm
    >>> rm.sigmoid(rm.tensor([0.0, -1000.0]))
    tensor([0.5, 0. ])
    """,
)
relu = make_unary(
    RELU,
    doc="""max(x, 0), elementwise; the gradient at 0 is 0.

    >>> import remat as rm
    >>> rm.relu(rm.tensor([-1.0, 0.0, 2.0]))
    tensor([0., 0., 2.])
    """,
)


def softmax(x: TensorLike, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, computed stably.

    >>> import remat as rm
    >>> rm.softmax(rm.tensor([0.0, 0.0, 1000.0]))
    tensor([0., 0., 1.])
    """
    x = as_tensor(x)
    return unary(SOFTMAX, x, axis=check_axis("softmax", axis, x.ndim))


def log_softmax(x: TensorLike, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``.

    >>> import remat as rm
    >>> rm.log_softmax(rm.tensor([[0.0, 0.0]]), axis=1)
    tensor([[-0.69314718, -0.69314718]])
    """
    x = as_tensor(x)
    return unary(LOG_SOFTMAX, x, axis=check_axis("log_softmax", axis, x.ndim))
