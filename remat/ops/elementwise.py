"""Elementwise primitives, each with its VJP beside it.

Broadcasting needs no care here: the tape sums a cotangent back to its
input's shape (remat.core.tape.unbroadcast).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

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
    promoted,
    unary,
    xp,
)

if TYPE_CHECKING:
    from ..typing import TensorLike

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


negative = make_unary(
    NEGATIVE,
    doc="""-x, elementwise (also the ``-x`` operator).

    >>> import remat as rm
    >>> rm.negative(rm.tensor([1.0, -2.0]))
    tensor([-1.,  2.])
    """,
)


exp = make_unary(
    EXP,
    doc="""e ** x, elementwise; its VJP reuses the output.

    >>> import remat as rm
    >>> rm.exp(rm.tensor([0.0, 1.0]))
    tensor([1.        , 2.71828183])
    """,
)


log = make_unary(
    LOG,
    doc="""The natural logarithm, elementwise.

    >>> import remat as rm
    >>> rm.log(rm.tensor([1.0, 100.0]))
    tensor([0.        , 4.60517019])
    """,
)


sin = make_unary(
    SIN,
    doc="""sin(x), elementwise; its VJP reads x.

    >>> import remat as rm
    >>> rm.sin(rm.tensor([0.0, 1.0]))
    tensor([0.        , 0.84147098])
    """,
)


cos = make_unary(
    COS,
    doc="""cos(x), elementwise; its VJP reads x.

    >>> import remat as rm
    >>> rm.cos(rm.tensor([0.0, 1.0]))
    tensor([1.        , 0.54030231])
    """,
)


tanh = make_unary(
    TANH,
    doc="""tanh(x), elementwise; its VJP reuses the output.

    >>> import remat as rm
    >>> rm.tanh(rm.tensor([0.0, 1.0]))
    tensor([0.        , 0.76159416])
    """,
)


sqrt = make_unary(
    SQRT,
    doc="""The square root, elementwise; its VJP reuses the output.

    >>> import remat as rm
    >>> rm.sqrt(rm.tensor([4.0, 2.0]))
    tensor([2.        , 1.41421356])
    """,
)


abs = make_unary(  # noqa: A001
    ABS,
    doc="""|x|, elementwise; the gradient at 0 is 0.

    >>> import remat as rm
    >>> rm.abs(rm.tensor([-1.5, 2.0]))
    tensor([1.5, 2. ])
    """,
)


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
    x, y = promoted(ns, x, y)  # x64 ** y32: y - 1 in float64, as the forward computes
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
    if x.dtype != ans.dtype:  # x32 ** y64: log(x) in float64, the forward's dtype
        x = ns.astype(x, ans.dtype)
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


add = make_binary(
    ADD,
    doc="""x + y with NumPy broadcasting (also the ``+`` operator); either may be a number.

    >>> import remat as rm
    >>> rm.add(rm.tensor([1.0, 2.0]), 10)
    tensor([11., 12.])
    """,
)


subtract = make_binary(
    SUBTRACT,
    doc="""x - y with NumPy broadcasting (also the ``-`` operator).

    >>> import remat as rm
    >>> rm.subtract(rm.tensor([[1.0], [2.0]]), rm.tensor([1.0, 0.0]))
    tensor([[0., 1.],
           [1., 2.]])
    """,
)


multiply = make_binary(
    MULTIPLY,
    doc="""x * y with NumPy broadcasting (also the ``*`` operator).

    >>> import remat as rm
    >>> rm.multiply(rm.tensor([1.0, 2.0]), rm.tensor([3.0, 4.0]))
    tensor([3., 8.])
    """,
)


divide = make_binary(
    DIVIDE,
    doc="""x / y with NumPy broadcasting (also the ``/`` operator).

    >>> import remat as rm
    >>> rm.divide(1, rm.tensor([2.0, 4.0]))
    tensor([0.5 , 0.25])
    """,
)


power = make_binary(
    POWER,
    doc="""x ** y (also the ``**`` operator); at x = 0 the gradients follow PyTorch
    (finite, 0 where it gives 0).

    >>> import remat as rm
    >>> rm.power(rm.tensor([2.0, 3.0]), 2)
    tensor([4., 9.])
    """,
)


maximum = make_binary(
    MAXIMUM,
    doc="""Elementwise max; at ties the gradient goes to ``x``.

    >>> import remat as rm
    >>> rm.maximum(rm.tensor([1.0, 5.0]), 3.0)
    tensor([3., 5.])
    """,
)


minimum = make_binary(
    MINIMUM,
    doc="""Elementwise min; at ties the gradient goes to ``x``.

    >>> import remat as rm
    >>> rm.minimum(rm.tensor([1.0, 5.0]), 3.0)
    tensor([1., 3.])
    """,
)


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


def where(condition: TensorLike, x: TensorLike, y: TensorLike) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (the condition gets no gradient).

    >>> import remat as rm
    >>> x = rm.tensor([-1.0, 2.0])
    >>> rm.where(x > 0, x, 0.0)
    tensor([0., 2.])
    """
    return apply(WHERE, (condition, x, y))


def _clip_vjp(ns, g, ans, x, a_min=None, a_max=None):
    if a_min is not None:
        g = g * (x >= a_min)
    if a_max is not None:
        g = g * (x <= a_max)
    return g


CLIP = defop("clip", xp.clip, _clip_vjp, needs=("0",), jvps=SELF_ADJOINT)


def clip(x: TensorLike, a_min: TensorLike | None = None, a_max: TensorLike | None = None) -> Tensor:
    """Limit values to [a_min, a_max]; gradient 0 outside.

    >>> import remat as rm
    >>> rm.clip(rm.tensor([-2.0, 0.5, 3.0]), -1, 1)
    tensor([-1. ,  0.5,  1. ])

    Constant bounds (numbers, arrays, Tensors that need no gradient) are
    copied.  A bound that requires a gradient makes clip
    ``minimum(maximum(x, a_min), a_max)``, so that the bound gets its gradient.
    """
    a_min, a_max = (as_tensor(b) if isinstance(b, (list, tuple)) else b for b in (a_min, a_max))
    if any(isinstance(b, Tensor) and b.requires_grad for b in (a_min, a_max)):
        out = as_tensor(x) if a_min is None else maximum(x, a_min)
        return out if a_max is None else minimum(out, a_max)
    bounds = {}
    for name, bound in (("a_min", a_min), ("a_max", a_max)):
        bound = constant_of("clip", bound)
        if bound is not None and not isinstance(bound, (int, float)):
            bound = backend.asarray(bound)  # a copy: later changes cannot reach the tape
        bounds[name] = bound
    return unary(CLIP, x, **bounds)
