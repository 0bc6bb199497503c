"""Elementwise functions of two inputs beyond the arithmetic ones: ``arctan2``,
``hypot``, ``logaddexp``, ``logaddexp2``, ``fmax``, ``fmin`` and ``remainder``
(``mod``).  Primitives, with NumPy's forward; either input may be a number.

``hypot`` and the ``logaddexp`` pair exist for accuracy (no overflow in
x² + y² or in exp(x)), and so do their VJPs: hypot's divides by the output,
logaddexp's weighs the operands by the exact difference between them.
"""

from __future__ import annotations

import math

from .core import SELF_ADJOINT, defop, make_binary, xp
from .either import call, raw, recorded


def _binary(name, forward, rule_x, rule_y, needs, doc):
    """A primitive of two inputs and its public function (``rm.<name>``)."""
    op = defop(name, forward, rule_x, rule_y, needs=needs, jvps=SELF_ADJOINT)
    return make_binary(op, doc=doc)


def _arctan2_rule(ns, g, y, x, which):
    # x / (x² + y²) and -y / (x² + y²) as (x / h) / h with h = hypot(x, y): no overflow
    h = call(ns, "hypot", x, y)
    return g * (x / h) / h if which == 0 else -(g * (y / h) / h)


arctan2 = _binary(
    "arctan2",
    xp.arctan2,
    lambda ns, g, ans, y, x: _arctan2_rule(ns, g, y, x, 0),
    lambda ns, g, ans, y, x: _arctan2_rule(ns, g, y, x, 1),
    ("01", "01"),
    """The angle of the point (x, y): ``arctan2(y, x)``, in (-π, π].

    >>> import remat as rm
    >>> rm.arctan2(rm.tensor([1.0, 1.0]), rm.tensor([1.0, -1.0]))
    tensor([0.78539816, 2.35619449])
    """,
)


def _hypot_rule(ns, g, ans, x):
    # x / hypot; at the origin 0, the subgradient abs takes at 0 too
    zero = ans == 0
    return g * ns.where(zero, 0.0, x / ns.where(zero, 1.0, ans))


hypot = _binary(
    "hypot",
    xp.hypot,
    lambda ns, g, ans, x, y: _hypot_rule(ns, g, ans, x),
    lambda ns, g, ans, x, y: _hypot_rule(ns, g, ans, y),
    ("0a", "1a"),
    """sqrt(x² + y²) without overflow or underflow in the squares.

    >>> import remat as rm
    >>> rm.hypot(rm.tensor([3.0, 3e200]), 4.0)
    tensor([5.e+000, 3.e+200])
    """,
)


def _weight(ns, d):
    """1 / (1 + exp(-d)), the slope of logaddexp in the operand that leads by d, from the
    exact difference of the operands (exp(x - out) carried out's rounding, 3e-14 at 1000)."""
    e = ns.exp(ns.where(d >= 0, -d, d))  # <= 1: no overflow
    return ns.where(d >= 0, 1 / (1 + e), e / (1 + e))


logaddexp = _binary(
    "logaddexp",
    xp.logaddexp,
    lambda ns, g, ans, x, y: g * _weight(ns, x - y),
    lambda ns, g, ans, x, y: g * _weight(ns, y - x),
    ("01", "01"),
    """log(exp(x) + exp(y)) without overflow; the slopes are exp(x - out), exp(y - out).

    >>> import remat as rm
    >>> rm.logaddexp(rm.tensor([1000.0, 0.0]), rm.tensor([1000.0, 0.0]))
    tensor([1.00069315e+03, 6.93147181e-01])
    """,
)
logaddexp2 = _binary(
    "logaddexp2",
    xp.logaddexp2,
    lambda ns, g, ans, x, y: g * _weight(ns, (x - y) * math.log(2)),
    lambda ns, g, ans, x, y: g * _weight(ns, (y - x) * math.log(2)),
    ("01", "01"),
    """log2(2 ** x + 2 ** y) without overflow.

    >>> import remat as rm
    >>> rm.logaddexp2(rm.tensor([1.0, 3.0]), 1.0)
    tensor([2.        , 3.32192809])
    """,
)


def _first_wins(x, y, keep):
    """1.0 where fmax/fmin gives x (x wins the comparison, ties included, or y is NaN)."""
    return xp.where((y != y) | keep(raw(x), raw(y)), 1.0, 0.0)


fmax = _binary(
    "fmax",
    xp.fmax,
    lambda ns, g, ans, x, y: g * _first_wins(x, raw(y), xp.greater_equal),
    lambda ns, g, ans, x, y: g * (1 - _first_wins(x, raw(y), xp.greater_equal)),
    ("01", "01"),
    """Elementwise max that ignores NaN (the other value wins); at ties the gradient
    goes to ``x``, as in :func:`remat.maximum`.

    >>> import remat as rm
    >>> rm.fmax(rm.tensor([1.0, float("nan")]), rm.tensor([2.0, 3.0]))
    tensor([2., 3.])
    """,
)
fmin = _binary(
    "fmin",
    xp.fmin,
    lambda ns, g, ans, x, y: g * _first_wins(x, raw(y), xp.less_equal),
    lambda ns, g, ans, x, y: g * (1 - _first_wins(x, raw(y), xp.less_equal)),
    ("01", "01"),
    """Elementwise min that ignores NaN; at ties the gradient goes to ``x``.

    >>> import remat as rm
    >>> rm.fmin(rm.tensor([1.0, float("nan")]), rm.tensor([2.0, 3.0]))
    tensor([1., 3.])
    """,
)
remainder = _binary(
    "remainder",
    xp.remainder,
    lambda ns, g, ans, x, y: g,
    # x - floor(x / y) * y: the quotient is a step function, a constant here
    lambda ns, g, ans, x, y: -(g * xp.floor_divide(raw(x), raw(y))),
    ("", "01"),
    """x modulo y with the sign of y, as ``numpy.remainder`` (and ``rm.mod``); the
    slope is 1 in x and -floor(x / y) in y.

    >>> import remat as rm
    >>> rm.remainder(rm.tensor([5.0, -5.0]), 3.0)
    tensor([2., 1.])
    """,
)
mod = remainder
recorded(hypot)
