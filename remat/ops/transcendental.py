"""Elementwise functions of one input beyond the basic ones: trigonometric and
hyperbolic functions and their inverses, the exact-near-zero forms ``log1p`` and
``expm1``, other bases, ``square``, ``reciprocal``, ``sinc`` and ``nan_to_num``.

Each is a primitive (NumPy's own ufunc forward, so the value is NumPy's to the
bit) with its VJP beside it; the Jacobian is diagonal, so each VJP rule is its
tangent rule too (``SELF_ADJOINT``).  A rule that needs a function the VJP
namespace lacks (``cosh`` for ``sinh``...) asks :func:`remat.ops.either.call`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .core import SELF_ADJOINT, Tensor, as_tensor, defop, make_unary, unary, xp
from .either import call, recorded
from .elementwise import abs, multiply
from .shape import astype

if TYPE_CHECKING:
    from ..typing import TensorLike


def _unary(name, forward, rule, needs, doc):
    """A primitive of one input and its public function (``rm.<name>``)."""
    return make_unary(defop(name, forward, rule, needs=(needs,), jvps=SELF_ADJOINT), doc=doc)


def _hypot1(ns, x):
    """sqrt(x² + 1) without overflow in x² (the slopes of arctan and arcsinh at |x| ~ 1e200)."""
    return call(ns, "hypot", x, 1.0)


tan = _unary(
    "tan",
    xp.tan,
    lambda ns, g, ans, x: g * (1 + ans * ans),
    "a",
    """tan(x), elementwise; its VJP reuses the output (1 + tan² x).

    >>> import remat as rm
    >>> rm.tan(rm.tensor([0.0, 0.5]))
    tensor([0.        , 0.54630249])
    """,
)
arcsin = _unary(
    "arcsin",
    xp.arcsin,
    lambda ns, g, ans, x: g / ns.sqrt((1 - x) * (1 + x)),
    "0",
    """The inverse sine, elementwise (infinite slope at ±1).

    >>> import remat as rm
    >>> rm.arcsin(rm.tensor([0.0, 1.0]))
    tensor([0.        , 1.57079633])
    """,
)
arccos = _unary(
    "arccos",
    xp.arccos,
    lambda ns, g, ans, x: -g / ns.sqrt((1 - x) * (1 + x)),
    "0",
    """The inverse cosine, elementwise.

    >>> import remat as rm
    >>> rm.arccos(rm.tensor([1.0, 0.0]))
    tensor([0.        , 1.57079633])
    """,
)
arctan = _unary(
    "arctan",
    xp.arctan,
    lambda ns, g, ans, x: g / _hypot1(ns, x) / _hypot1(ns, x),  # 1 / (1 + x²), no overflow
    "0",
    """The inverse tangent, elementwise.

    >>> import remat as rm
    >>> rm.arctan(rm.tensor([0.0, 1.0]))
    tensor([0.        , 0.78539816])
    """,
)
sinh = _unary(
    "sinh",
    xp.sinh,
    lambda ns, g, ans, x: g * call(ns, "cosh", x),
    "0",
    """The hyperbolic sine, elementwise.

    >>> import remat as rm
    >>> rm.sinh(rm.tensor([0.0, 1.0]))
    tensor([0.        , 1.17520119])
    """,
)
cosh = _unary(
    "cosh",
    xp.cosh,
    lambda ns, g, ans, x: g * call(ns, "sinh", x),
    "0",
    """The hyperbolic cosine, elementwise.

    >>> import remat as rm
    >>> rm.cosh(rm.tensor([0.0, 1.0]))
    tensor([1.        , 1.54308063])
    """,
)
arcsinh = _unary(
    "arcsinh",
    xp.arcsinh,
    lambda ns, g, ans, x: g / _hypot1(ns, x),
    "0",
    """The inverse hyperbolic sine, elementwise.

    >>> import remat as rm
    >>> rm.arcsinh(rm.tensor([0.0, 1.0]))
    tensor([0.        , 0.88137359])
    """,
)
arccosh = _unary(
    "arccosh",
    xp.arccosh,
    lambda ns, g, ans, x: g / (ns.sqrt(x - 1) * ns.sqrt(x + 1)),
    "0",
    """The inverse hyperbolic cosine, elementwise (for x >= 1).

    >>> import remat as rm
    >>> rm.arccosh(rm.tensor([1.0, 2.0]))
    tensor([0.       , 1.3169579])
    """,
)
arctanh = _unary(
    "arctanh",
    xp.arctanh,
    lambda ns, g, ans, x: g / ((1 - x) * (1 + x)),
    "0",
    """The inverse hyperbolic tangent, elementwise (for -1 < x < 1).

    >>> import remat as rm
    >>> rm.arctanh(rm.tensor([0.0, 0.5]))
    tensor([0.        , 0.54930614])
    """,
)
log1p = _unary(
    "log1p",
    xp.log1p,
    lambda ns, g, ans, x: g / (1 + x),
    "0",
    """log(1 + x), exact for tiny x (where ``rm.log(1 + x)`` loses x's digits).

    >>> import remat as rm
    >>> float(rm.log1p(rm.tensor(1e-20)))
    1e-20
    """,
)
expm1 = _unary(
    "expm1",
    xp.expm1,
    lambda ns, g, ans, x: g * ns.exp(x),  # not ans + 1: 0 where exp(x) < ulp(1)
    "0",
    """exp(x) - 1, exact for tiny x (where ``rm.exp(x) - 1`` loses x's digits).

    >>> import remat as rm
    >>> float(rm.expm1(rm.tensor(1e-20)))
    1e-20
    """,
)
log2 = _unary(
    "log2",
    xp.log2,
    lambda ns, g, ans, x: g / (x * math.log(2)),
    "0",
    """The base-2 logarithm, elementwise.

    >>> import remat as rm
    >>> rm.log2(rm.tensor([1.0, 8.0]))
    tensor([0., 3.])
    """,
)
log10 = _unary(
    "log10",
    xp.log10,
    lambda ns, g, ans, x: g / (x * math.log(10)),
    "0",
    """The base-10 logarithm, elementwise.

    >>> import remat as rm
    >>> rm.log10(rm.tensor([1.0, 1000.0]))
    tensor([0., 3.])
    """,
)
exp2 = _unary(
    "exp2",
    xp.exp2,
    lambda ns, g, ans, x: g * ans * math.log(2),
    "a",
    """2 ** x, elementwise; its VJP reuses the output.

    >>> import remat as rm
    >>> rm.exp2(rm.tensor([0.0, 3.0]))
    tensor([1., 8.])
    """,
)
square = _unary(
    "square",
    xp.square,
    lambda ns, g, ans, x: g * (2 * x),
    "0",
    """x * x, elementwise.

    >>> import remat as rm
    >>> rm.square(rm.tensor([-2.0, 3.0]))
    tensor([4., 9.])
    """,
)
reciprocal = _unary(
    "reciprocal",
    xp.reciprocal,
    lambda ns, g, ans, x: -(g * ans * ans),
    "a",
    """1 / x, elementwise; its VJP reuses the output (-1 / x²).

    >>> import remat as rm
    >>> rm.reciprocal(rm.tensor([2.0, -4.0]))
    tensor([ 0.5 , -0.25])
    """,
)

SINC_SERIES = 1e-2
"""Below this |x|, sinc's slope is its Taylor series -(π²/3) x + (π⁴/30) x³ - (π⁶/840) x⁵
(the next term is below 1e-13 of it there, and it is right at 0 for second derivatives
too); above, the quotient (cos(πx) - sinc(x)) / x, whose cancellation costs < 1e-12."""


def _sinc_vjp(ns, g, ans, x):
    # d/dx sin(πx)/(πx) = (cos(πx) - sinc(x)) / x
    small = ns.where(x * x < SINC_SERIES**2, 1.0, 0.0)
    safe = x + small * (1 - x)  # 1 where the series applies: no 0 / 0 there
    quotient = (ns.cos(math.pi * safe) - ns.where(small > 0, 1.0, ans)) / safe
    x2 = x * x
    series = x * (-(math.pi**2) / 3 + x2 * (math.pi**4 / 30 - x2 * (math.pi**6 / 840)))
    return g * ns.where(small > 0, series, quotient)


sinc = _unary(
    "sinc",
    xp.sinc,
    _sinc_vjp,
    "0a",
    """sin(πx) / (πx), elementwise, 1 at 0 (NumPy's normalised sinc).

    >>> import remat as rm
    >>> rm.sinc(rm.tensor([0.0, 0.5]))
    tensor([1.        , 0.63661977])
    """,
)


def _nan_to_num(x, nan=0.0, posinf=None, neginf=None):
    return xp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)


def _finite_vjp(ns, g, ans, x, **kw):
    return ns.where(x - x == 0, g, 0.0)  # x - x is NaN for NaN and ±inf: replaced, slope 0


NAN_TO_NUM = defop("nan_to_num", _nan_to_num, _finite_vjp, needs=("0",), jvps=SELF_ADJOINT)


def nan_to_num(
    x: TensorLike,
    copy: bool = True,
    nan: float = 0.0,
    posinf: float | None = None,
    neginf: float | None = None,
) -> Tensor:
    """NaN and ±inf replaced by numbers, as ``numpy.nan_to_num``; the gradient passes
    where x was finite and is 0 where a value was replaced.  ``copy`` is accepted
    for NumPy's signature: remat never writes into an array in place.

    >>> import remat as rm
    >>> rm.nan_to_num(rm.tensor([1.0, float("nan"), float("inf")]), posinf=9.0)
    tensor([1., 0., 9.])
    """
    return unary(NAN_TO_NUM, x, nan=nan, posinf=posinf, neginf=neginf)


recorded(sinh, cosh)


# --- compositions: exact with the primitives above ---------------------------------


def deg2rad(x: TensorLike) -> Tensor:
    """Degrees to radians, x * (π / 180), as NumPy computes it (also ``rm.radians``).

    >>> import remat as rm
    >>> rm.deg2rad(rm.tensor([180.0, 90.0]))
    tensor([3.14159265, 1.57079633])
    """
    return multiply(x, math.pi / 180)


def rad2deg(x: TensorLike) -> Tensor:
    """Radians to degrees, x * (180 / π), as NumPy computes it (also ``rm.degrees``).

    >>> import remat as rm
    >>> rm.rad2deg(rm.tensor([3.141592653589793, 1.0]))
    tensor([180.        ,  57.29577951])
    """
    return multiply(x, 180 / math.pi)


radians = deg2rad
degrees = rad2deg


def fabs(x: TensorLike) -> Tensor:
    """|x| of a real tensor, as ``numpy.fabs`` (integers become float64); the gradient
    at 0 is 0, as :func:`remat.abs` gives.

    >>> import remat as rm
    >>> rm.fabs(rm.tensor([-2, 3]))
    tensor([2., 3.])
    """
    t = as_tensor(x)
    if t.dtype.kind in "biu":
        t = astype(t, "float64")
    return abs(t)
