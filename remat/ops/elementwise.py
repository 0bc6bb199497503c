"""Elementwise primitives, each with its VJP beside it.

Broadcasting needs no care here: the tape sums a cotangent back to its
input's shape (remat.tape.unbroadcast).
"""

import math

from .. import backend
from .core import (
    SELF_ADJOINT,
    Tensor,
    apply,
    as_tensor,
    constant_of,
    defop,
    make_binary,
    make_unary,
    unary,
    xp,
)

# --- one input ------------------------------------------------------------------
NEGATIVE = defop("negative", xp.negative, lambda ns, g, ans, x: -g, needs=("",), jvps=SELF_ADJOINT)
EXP = defop("exp", xp.exp, lambda ns, g, ans, x: g * ans, needs=("a",), jvps=SELF_ADJOINT)
LOG = defop("log", xp.log, lambda ns, g, ans, x: g / x, needs=("0",), jvps=SELF_ADJOINT)
SIN = defop("sin", xp.sin, lambda ns, g, ans, x: g * ns.cos(x), needs=("0",), jvps=SELF_ADJOINT)
COS = defop("cos", xp.cos, lambda ns, g, ans, x: -(g * ns.sin(x)), needs=("0",), jvps=SELF_ADJOINT)
TANH = defop(
    "tanh", xp.tanh, lambda ns, g, ans, x: g * (1 - ans * ans), needs=("a",), jvps=SELF_ADJOINT
)
SQRT = defop("sqrt", xp.sqrt, lambda ns, g, ans, x: g * 0.5 / ans, needs=("a",), jvps=SELF_ADJOINT)
ABS = defop("abs", xp.abs, lambda ns, g, ans, x: g * ns.sign(x), needs=("0",), jvps=SELF_ADJOINT)


negative = make_unary(NEGATIVE, doc="-x, elementwise (also the ``-x`` operator).")


exp = make_unary(EXP, doc="e ** x, elementwise; its VJP reuses the output.")


log = make_unary(LOG, doc="The natural logarithm, elementwise.")


sin = make_unary(SIN, doc="sin(x), elementwise: ``rm.sin(rm.tensor([0.0])).item() == 0.0``.")


cos = make_unary(COS, doc="cos(x), elementwise.")


tanh = make_unary(TANH, doc="tanh(x), elementwise; its VJP reuses the output.")


sqrt = make_unary(SQRT, doc="The square root, elementwise; its VJP reuses the output.")


abs = make_unary(ABS, doc="|x|, elementwise; the gradient at 0 is 0.")  # noqa: A001


# --- two inputs -------------------------------------------------------------------
ADD = defop(
    "add",
    xp.add,
    lambda ns, g, ans, x, y: g,
    lambda ns, g, ans, x, y: g,
    needs=("", ""),
    jvps=SELF_ADJOINT,
)
SUBTRACT = defop(
    "subtract",
    xp.subtract,
    lambda ns, g, ans, x, y: g,
    lambda ns, g, ans, x, y: -g,
    needs=("", ""),
    jvps=SELF_ADJOINT,
)
MULTIPLY = defop(
    "multiply",
    xp.multiply,
    lambda ns, g, ans, x, y: g * y,
    lambda ns, g, ans, x, y: g * x,
    needs=("1", "0"),
    jvps=SELF_ADJOINT,
)
DIVIDE = defop(
    "divide",
    xp.divide,
    lambda ns, g, ans, x, y: g / y,
    lambda ns, g, ans, x, y: -(g * ans) / y,
    needs=("1", "1a"),
    jvps=SELF_ADJOINT,
)


def _power_vjp_base(ns, g, ans, x, y):
    if isinstance(y, (int, float)):
        if y == 0:
            return g * 0.0  # x ** 0 is constant, also at x = 0 (where x ** -1 is inf)
        return g * y * x ** (y - 1)
    # where y == 0 the derivative is 0: x ** 1 keeps 0 * inf out of the product
    return g * y * x ** ns.where(y == 0, 1.0, y - 1)


def _power_vjp_exponent(ns, g, ans, x, y):
    # d/dy x ** y = x ** y * log(x).  At x = 0 it is 0 for y >= 0 (PyTorch's
    # convention; 0 * log 0 would be NaN) and -inf for y < 0, which is where
    # 0 ** y = inf: the output tells the two apart, so y need not be saved.
    if isinstance(x, (int, float)):  # a Python base keeps NumPy's weak scalar: float32 stays
        if x == 0:
            return g * ns.where(ans > 1, -math.inf, 0.0)
        return g * ans * math.log(x)
    zero = x == 0
    at_zero = ns.where(ans > 1, -math.inf, 0.0)
    elsewhere = ns.where(zero, 1.0, ans) * ns.log(ns.where(zero, 1.0, x))  # no 0 * inf here
    return g * ns.where(zero, at_zero, elsewhere)


POWER = defop(
    "power", xp.power, _power_vjp_base, _power_vjp_exponent, needs=("01", "0a"), jvps=SELF_ADJOINT
)
MAXIMUM = defop(
    "maximum",
    xp.maximum,
    lambda ns, g, ans, x, y: g * (x >= y),
    lambda ns, g, ans, x, y: g * (x < y),
    needs=("01", "01"),
    jvps=SELF_ADJOINT,
)
MINIMUM = defop(
    "minimum",
    xp.minimum,
    lambda ns, g, ans, x, y: g * (x <= y),
    lambda ns, g, ans, x, y: g * (x > y),
    needs=("01", "01"),
    jvps=SELF_ADJOINT,
)


add = make_binary(ADD, doc="x + y with NumPy broadcasting (also the ``+`` operator).")


subtract = make_binary(SUBTRACT, doc="x - y with NumPy broadcasting.")


multiply = make_binary(MULTIPLY, doc="x * y with NumPy broadcasting.")


divide = make_binary(DIVIDE, doc="x / y with NumPy broadcasting.")


power = make_binary(
    POWER, doc="x ** y; at x = 0 the gradients follow PyTorch (finite, 0 where it gives 0)."
)


maximum = make_binary(MAXIMUM, doc="Elementwise max; at ties the gradient goes to ``x``.")


minimum = make_binary(MINIMUM, doc="Elementwise min; at ties the gradient goes to ``x``.")


# --- selections -------------------------------------------------------------------
WHERE = defop(
    "where",
    xp.where,
    lambda ns, g, ans, c, x, y: g * 0,
    lambda ns, g, ans, c, x, y: ns.where(c, g, 0),
    lambda ns, g, ans, c, x, y: ns.where(c, 0, g),
    needs=("", "0", "0"),
    jvps=SELF_ADJOINT,
)


def where(condition, x, y):
    """``x`` where ``condition`` holds, else ``y`` (the condition gets no gradient)."""
    return apply(WHERE, (condition, x, y))


def _clip_vjp(ns, g, ans, x, a_min=None, a_max=None):
    if a_min is not None:
        g = g * (x >= a_min)
    if a_max is not None:
        g = g * (x <= a_max)
    return g


CLIP = defop("clip", xp.clip, _clip_vjp, needs=("0",), jvps=SELF_ADJOINT)


def clip(x, a_min=None, a_max=None):
    """Limit values to [a_min, a_max]; gradient 0 outside.

    Constant bounds (numbers, arrays, Tensors that need no gradient) are
    copied.  A bound that requires a gradient makes clip
    ``minimum(maximum(x, a_min), a_max)``, so that the bound gets its gradient.
    """
    a_min, a_max = (as_tensor(b) if isinstance(b, (list, tuple)) else b for b in (a_min, a_max))
    if any(isinstance(b, Tensor) and b.requires_grad for b in (a_min, a_max)):
        out = x if a_min is None else maximum(x, a_min)
        return out if a_max is None else minimum(out, a_max)
    bounds = {}
    for name, bound in (("a_min", a_min), ("a_max", a_max)):
        bound = constant_of("clip", bound)
        if bound is not None and not isinstance(bound, (int, float)):
            bound = backend.asarray(bound)  # a copy: later changes cannot reach the tape
        bounds[name] = bound
    return unary(CLIP, x, **bounds)
