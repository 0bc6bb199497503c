"""Every op of the table over extreme inputs: value, gradient and tangent against a
reference computed without remat (the math module, closed forms, scipy.special).

Each one-input op has a list of points (huge and tiny magnitudes, around zero,
near overflow, large negative), its value and derivative there, and a
tolerance with the reason for it; ops over an axis (softmax and friends) have
extreme rows instead, with their Jacobian applied to a vector in closed form.
The other ops either move values without arithmetic (reshape, indexing...) or
are single IEEE operations (add, multiply...), which are exact up to the one
rounding NumPy gives: they are listed, so that a new op cannot be forgotten.
All in float64.
"""

import math

import numpy as np
import pytest
from scipy import special

import remat as rm

from .test_numpy_functions import AUDITED_ELSEWHERE, EXTREMES

C, A = math.sqrt(2 / math.pi), 0.044715
TINY = np.finfo(float).tiny  # the smallest normal float64
ULP = np.finfo(float).eps  # 2.2e-16, the spacing of floats at 1


def _gelu_u(x):
    with np.errstate(over="ignore"):  # x ** 3 = inf beyond 5e102: sigmoid(u) is 1 or 0
        return 2 * C * (x + A * np.float64(x) ** 3)


def _gelu(x):
    return x * special.expit(_gelu_u(x))  # 0.5 (1 + tanh(u / 2)) = sigmoid(u)


def _gelu_slope(x):
    u = _gelu_u(x)
    s, r = special.expit(u), special.expit(-u)
    if s * r == 0:  # |u| > 745: the second term is below the smallest float
        return s
    return s + x * 2 * C * (1 + 3 * A * x**2) * s * r


def _none(x):
    return 0.0


# name -> (function, points, value, derivative, rtol, the derivative's absolute tolerance
# at x, why this tolerance); a value or derivative that is 0 or inf must be exactly that
ELEMENTWISE = {
    "exp": (
        rm.exp,
        [-708.0, -50.0, -1e-300, 0.0, 1e-300, 1.0, 50.0, 709.7],
        math.exp,
        math.exp,
        1e-15,
        _none,
        "one libm call: an ulp or two",
    ),
    "log": (
        rm.log,
        [TINY, 1e-300, 1e-8, 0.5, 1.0, 1 + 2**-52, 2.0, 1e300, 1.7e308],
        math.log,
        lambda x: 1 / x,
        1e-15,
        _none,
        "one libm call; log near 1 is well conditioned in x",
    ),
    "sin": (
        rm.sin,
        [1e-300, 1e-8, 0.5, 1.0, 3.0, 100.0, 1e5],
        math.sin,
        math.cos,
        1e-15,
        _none,
        "one libm call, the points away from the zeros",
    ),
    "cos": (
        rm.cos,
        [0.0, 1e-300, 1e-8, 0.5, 1.0, 3.0, 100.0, 1e5],
        math.cos,
        lambda x: -math.sin(x),
        1e-15,
        _none,
        "one libm call, the points away from the zeros",
    ),
    "tanh": (
        rm.tanh,
        [-800.0, -40.0, -20.0, -3.0, -1e-300, 0.0, 1e-8, 1.0, 5.0, 20.0, 40.0, 800.0],
        math.tanh,
        lambda x: 1 / math.cosh(x) ** 2 if abs(x) < 700 else 0.0,
        1e-15,
        lambda x: 2 * ULP,
        "the derivative is 1 - tanh^2 from the saved output (as torch's and JAX's): its "
        "error is an ulp of 1, so below 1e-16 (|x| > 19) it is absolute, not relative",
    ),
    "sqrt": (
        rm.sqrt,
        [TINY, 1e-300, 1e-8, 1.0, 2.0, 1e300, 1.7e308],
        math.sqrt,
        lambda x: 0.5 / math.sqrt(x),
        1e-15,
        _none,
        "correctly rounded, and the derivative 0.5 / sqrt(x) two roundings more",
    ),
    "sigmoid": (
        rm.sigmoid,
        [-708.0, -700.0, -100.0, -38.0, -37.0, -20.0, -1.0, -1e-300, 0.0, 1e-300, 1.0]
        + [20.0, 37.0, 38.0, 100.0, 800.0],
        lambda x: float(special.expit(x)),
        lambda x: float(special.expit(x) * special.expit(-x)),
        4 * ULP,
        lambda x: ULP * special.expit(x),
        "exp(-|x|) and one division: a few ulps; the derivative s (1 - s) is taken from "
        "the saved output s (as torch's), whose 1 - s has an absolute error of an ulp of 1 "
        "for x > 0",
    ),
    "gelu": (
        rm.gelu,
        [-19.0, -15.0, -10.0, -5.0, -3.0, -1.0, -0.5, -1e-8, -1e-300, 0.0, 1e-300, 1e-8]
        + [0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 1e10, 1e100, 1e300],
        lambda x: float(_gelu(x)),
        lambda x: float(_gelu_slope(x)),
        1e-12,
        _none,
        "x sigmoid(u), u = 2c (x + a x^3): u rounds to a few ulps in both the op and the "
        "reference, which sigmoid(u) multiplies by |u| (up to 750 here): 1e-12",
    ),
    "power": (
        lambda y: 2.0**y,
        [-1022.0, -200.5, -1e-300, 0.0, 1e-300, 0.5, 200.5, 1023.5],
        lambda y: 2.0**y,
        lambda y: 2.0**y * math.log(2.0),
        4 * ULP,
        _none,
        "pow and one product with log 2 (the base's rule is x ** (y - 1) y: one more)",
    ),
    "negative": (rm.negative, [-1.7e308, -1e-300, 0.0, 1e300], lambda x: -x, lambda x: -1.0)
    + (0.0, _none, "exact"),
    "abs": (rm.abs, [-1.7e308, -1e-300, 1e-300, 1e300], abs, lambda x: math.copysign(1.0, x))
    + (0.0, _none, "exact"),
    "relu": (
        rm.relu,
        [-1.7e308, -1e-300, 1e-300, 1.7e308],
        lambda x: max(x, 0.0),
        lambda x: float(x > 0),
        0.0,
        _none,
        "exact",
    ),
    "clip": (
        lambda x: rm.clip(x, -1e300, 1e-300),
        [-1.7e308, -1e300, -1e-300, 0.0, 1e-300, 1.7e308],
        lambda x: min(max(x, -1e300), 1e-300),
        lambda x: float(-1e300 <= x <= 1e-300),
        0.0,
        _none,
        "exact",
    ),
}


ELEMENTWISE.update(EXTREMES)  # NumPy's functions (issue 27)


def _softmax_jvp(x, v):
    s = special.softmax(x, axis=-1)
    return s * (v - (s * v).sum(-1, keepdims=True))


# name -> (function, rows, value, J^T w (= J w: these Jacobians are symmetric or rows), ...)
ROWS = [
    [-1000.0, 0.0, 1000.0],
    [1e308, 1e308, 0.0],
    [-1e308, -1e308, -1e308],
    [1e-300, -1e-300, 0.0],
    [50.0, 50.0 + 1e-13, 49.0],
    [-800.0, -745.0, -700.0],
]
AXIS_OPS = {
    "softmax": (
        rm.softmax,
        lambda x: special.softmax(x, axis=-1),
        lambda x, w: _softmax_jvp(x, w),
        lambda x, v: _softmax_jvp(x, v),
    ),
    "log_softmax": (
        rm.log_softmax,
        lambda x: special.log_softmax(x, axis=-1),
        lambda x, w: w - special.softmax(x, axis=-1) * w.sum(-1, keepdims=True),
        lambda x, v: v - (special.softmax(x, axis=-1) * v).sum(-1, keepdims=True),
    ),
    "logsumexp": (
        lambda x: rm.logsumexp(x, axis=-1),
        lambda x: special.logsumexp(x, axis=-1),
        lambda x, w: special.softmax(x, axis=-1) * w[..., None],
        lambda x, v: (special.softmax(x, axis=-1) * v).sum(-1),
    ),
}
AXIS_RTOL = 4 * ULP  # one exp and one log per element after the largest is factored out


# Ops audited elsewhere or needing no audit here: they move values without arithmetic,
# are one IEEE operation per element (exact up to NumPy's one rounding), or are the ops
# above applied along an axis.
NO_ARITHMETIC = {
    "astype", "broadcast_to", "concatenate", "getitem", "identity", "reshape", "scatter_add",
    "stack", "swapaxes", "to_device", "transpose", "where", "max", "min", "maximum", "minimum",
}  # fmt: skip
ONE_ROUNDING = {"add", "subtract", "multiply", "divide", "sum", "matmul", "einsum"}
KNOWN_LIMITS = {
    # the variance squares the centred values: it overflows beyond |x - mean| ~ 1e154 (the
    # output is then 0, as torch's); a large offset (1e8 + [0, 1, 2]) is exact, the mean
    # being taken first
    "layer_norm",
    # the sum overflows before the division for values near 1.8e308 (as NumPy's and torch's)
    "mean",
}


def test_every_op_of_the_table_is_audited_at_the_extremes():
    audited = set(ELEMENTWISE) | set(AXIS_OPS) | NO_ARITHMETIC | ONE_ROUNDING | KNOWN_LIMITS
    audited |= set(AUDITED_ELSEWHERE)  # NumPy's functions (issue 27)
    assert audited == set(rm.OPS), (sorted(set(rm.OPS) - audited), sorted(audited - set(rm.OPS)))


def _close(got, want, rtol, atol):
    if math.isinf(want) or want == 0 and atol == 0:
        return got == want
    return abs(got - want) <= rtol * abs(want) + atol


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise_ops_are_accurate_at_extreme_inputs(name):
    # rm.sigmoid was 0.5 (1 + tanh(x / 2)): 0.35 off at x = -37 and 0 below -38, so
    # log(sigmoid(x)) was -inf and its gradient NaN; gelu lost every digit below x = -10
    # and its slope was NaN at x = 1e200
    fn, points, value, slope, rtol, slope_atol, _why = ELEMENTWISE[name]
    x = np.array(points)
    got = fn(rm.tensor(x)).numpy()
    grad = rm.grad(lambda t: fn(t).sum())(x)
    _, tangent = rm.jvp(fn, (x,), (np.ones_like(x),))
    for i, p in enumerate(points):
        want, want_slope = value(p), slope(p)
        assert _close(got[i], want, rtol, 0.0), (name, p, "value", got[i], want)
        atol = slope_atol(p)
        assert _close(grad[i], want_slope, rtol, atol), (name, p, "gradient", grad[i], want_slope)
        assert tangent[i] == grad[i], (name, p, "tangent")


def test_log_sigmoid_is_finite_with_its_gradient_down_to_the_smallest_normal():
    # the case: log(sigmoid(x)) was -inf (gradient NaN) for x <= -38; torch: 1.0
    x = np.array([-708.0, -200.0, -38.0, -20.0, 0.0, 1.0])
    got = rm.log(rm.sigmoid(rm.tensor(x))).numpy()
    np.testing.assert_allclose(got, special.log_expit(x), rtol=4 * ULP)
    grad = rm.grad(lambda t: rm.log(rm.sigmoid(t)).sum())(x)
    np.testing.assert_allclose(grad, special.expit(-x), rtol=4 * ULP)


@pytest.mark.parametrize("name", sorted(AXIS_OPS))
def test_ops_along_an_axis_are_accurate_at_extreme_rows(name):
    fn, value, vjp, jvp = AXIS_OPS[name]
    x = np.array(ROWS)
    got = fn(rm.tensor(x)).numpy()
    np.testing.assert_allclose(got, value(x), rtol=AXIS_RTOL, atol=0)
    w = np.random.default_rng(0).standard_normal(got.shape)
    grad = rm.grad(lambda t: (fn(t) * w).sum())(x)
    np.testing.assert_allclose(grad, vjp(x, w), rtol=AXIS_RTOL, atol=4 * ULP)
    v = np.random.default_rng(1).standard_normal(x.shape)
    _, tangent = rm.jvp(fn, (x,), (v,))
    np.testing.assert_allclose(tangent, jvp(x, v), rtol=AXIS_RTOL, atol=4 * ULP)
