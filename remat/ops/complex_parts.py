"""NumPy's complex-number functions on remat's real tensors.

remat differentiates real functions only (a complex operand is refused, as
everywhere: :func:`remat.tensor.refuse_complex`).  On a real input these
functions mean what NumPy makes them mean: ``real``, ``conj`` and
``real_if_close`` give the input back, ``imag`` gives zeros and ``angle`` gives
0 or π, piecewise constant, so a gradient through it is 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensor import refuse_complex
from .core import SELF_ADJOINT, Tensor, as_tensor, defop, unary, xp
from .transcendental import rad2deg

if TYPE_CHECKING:
    from ..typing import TensorLike

ALLOWED = (
    "remat differentiates real functions only; on a real tensor it gives what NumPy "
    "gives. Carry a complex value as two real tensors, its real and imaginary parts"
)


def _real(name: str, x: TensorLike) -> Tensor:
    t = as_tensor(x)
    refuse_complex(t._data, f"rm.{name}: x", allowed=ALLOWED)
    return t


def real(x: TensorLike) -> Tensor:
    """The real part: a real tensor itself, as NumPy gives it (a complex one is refused).

    >>> import remat as rm
    >>> rm.real(rm.tensor([1.5, -2.0]))
    tensor([ 1.5, -2. ])
    """
    return _real("real", x)


def conj(x: TensorLike) -> Tensor:
    """The complex conjugate: a real tensor itself (also ``rm.conjugate``).

    >>> import remat as rm
    >>> rm.conj(rm.tensor([1.5, -2.0]))
    tensor([ 1.5, -2. ])
    """
    return _real("conj", x)


conjugate = conj


def real_if_close(x: TensorLike, tol: float = 100) -> Tensor:
    """A real tensor itself, as ``numpy.real_if_close`` gives a real array back.

    >>> import remat as rm
    >>> rm.real_if_close(rm.tensor([1.0, 2.0]))
    tensor([1., 2.])
    """
    return _real("real_if_close", x)


def imag(x: TensorLike) -> Tensor:
    """The imaginary part of a real tensor: zeros of its shape and dtype, a constant.

    >>> import remat as rm
    >>> rm.imag(rm.tensor([1.5, -2.0]))
    tensor([0., 0.])
    """
    t = _real("imag", x)
    return Tensor._wrap(xp.zeros_like(t._data))


def _angle(x):
    return xp.angle(x)


ANGLE = defop("angle", _angle, lambda ns, g, ans, x: g * 0.0, needs=("",), jvps=SELF_ADJOINT)


def angle(x: TensorLike, deg: bool = False) -> Tensor:
    """The argument of a real number: 0 for x >= 0, π for x < 0 (180 with ``deg=True``).
    It is piecewise constant, so its gradient is 0.

    >>> import remat as rm
    >>> rm.angle(rm.tensor([2.0, -2.0]))
    tensor([0.        , 3.14159265])
    """
    t = _real("angle", x)
    out = unary(ANGLE, t)
    return rad2deg(out) if deg else out
