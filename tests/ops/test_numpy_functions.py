"""NumPy's functions in remat (issue 27): every new primitive and every composed function
checked in float64, against NumPy's values and against finite differences.

``CASES`` holds the new primitives of ``rm.OPS``; tests/ops/cases.py adds them to its
own table, so each one goes through every check there (gradient, second derivative,
tangent, eager tangent, Hessian-vector products).  ``FUNCTIONS`` holds the functions
composed from primitives: each is compared with NumPy's and gradchecked here, forward
and reverse.  The edges the issue names follow: ties, zeros, empty axes, negative and
out-of-range indices.
"""

import math

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(27)


def r(*shape):
    return rng.standard_normal(shape)


def pos(*shape):
    return rng.uniform(0.5, 2.0, shape)


def unit(*shape):
    return rng.uniform(-0.8, 0.8, shape)


def distinct(*shape):
    n = int(np.prod(shape))
    return rng.permutation(np.linspace(-2, 2, n)).reshape(shape)


CASES = {
    "tan": (rm.tan, [unit(3, 4)]),
    "arcsin": (rm.arcsin, [unit(3, 4)]),
    "arccos": (rm.arccos, [unit(3, 4)]),
    "arctan": (rm.arctan, [r(3, 4)]),
    "sinh": (rm.sinh, [r(3, 4)]),
    "cosh": (rm.cosh, [r(3, 4)]),
    "arcsinh": (rm.arcsinh, [r(3, 4)]),
    "arccosh": (rm.arccosh, [1 + pos(3, 4)]),
    "arctanh": (rm.arctanh, [unit(3, 4)]),
    "log1p": (rm.log1p, [pos(3, 4) - 0.4]),
    "expm1": (rm.expm1, [r(3, 4)]),
    "log2": (rm.log2, [pos(3, 4)]),
    "log10": (rm.log10, [pos(3, 4)]),
    "exp2": (rm.exp2, [r(3, 4)]),
    "square": (rm.square, [r(3, 4)]),
    "reciprocal": (rm.reciprocal, [pos(3, 4)]),
    "sinc": (rm.sinc, [np.array([0.0, 1e-4, -3e-4, 0.3, -1.7, 2.5])]),
    "nan_to_num": (rm.nan_to_num, [r(3, 4)]),
    "arctan2": (rm.arctan2, [r(3, 4), r(4)]),
    "hypot": (rm.hypot, [r(3, 4), r(3, 1)]),
    "logaddexp": (rm.logaddexp, [r(3, 4) * 30, r(4) * 30]),
    "logaddexp2": (rm.logaddexp2, [r(3, 4), r(3, 4)]),
    "fmax": (rm.fmax, [distinct(3, 4), distinct(4) + 0.01]),
    "fmin": (rm.fmin, [distinct(3, 4), distinct(3, 1) + 0.01]),
    "remainder": (rm.remainder, [distinct(3, 4) * 3 + 0.05, pos(4)]),
    "angle": (rm.angle, [distinct(3, 4) + 0.01]),
    "roll": (lambda x: rm.roll(x, (-7, 2), axis=(1, 0)), [r(3, 4)]),
    "pad": (lambda x: rm.pad(x, ((1, 0), (2, 3)), constant_values=1.5), [r(3, 4)]),
    "cumsum": (lambda x: rm.cumsum(x, axis=-2), [r(3, 4)]),
    "prod": (
        lambda x: rm.prod(x, axis=(0, 2)),
        [np.where(rng.random((3, 4, 2)) < 0.2, 0.0, r(3, 4, 2))],
    ),
    "prod_others": (  # prod's VJP as an op of its own, differentiable to any order
        lambda x: rm.ops.core.apply(rm.ops.statistics.PROD_OTHERS, (x,)),
        [np.where(rng.random((2, 4)) < 0.2, 0.0, r(2, 4))],
    ),
    "sort": (lambda x: rm.sort(x, axis=0), [distinct(3, 4)]),
    "partition": (lambda x: rm.partition(x, 2, axis=1), [distinct(3, 4)]),
    "linspace": (lambda a, b: rm.linspace(a, b, 5, axis=-1), [r(3), r(2, 1)]),
}


# name -> (remat function, inputs, NumPy's function on arrays)
FUNCTIONS = {
    "deg2rad": (rm.deg2rad, [r(3, 4)], np.deg2rad),
    "radians": (rm.radians, [r(3)], np.radians),
    "rad2deg": (rm.rad2deg, [r(3, 4)], np.rad2deg),
    "degrees": (rm.degrees, [r(3)], np.degrees),
    "fabs": (rm.fabs, [distinct(3, 4)], np.fabs),
    "mod": (rm.mod, [distinct(2, 3) * 3, pos(3)], np.mod),
    "real": (rm.real, [r(3)], np.real),
    "conj": (rm.conj, [r(3)], np.conj),
    "conjugate": (rm.conjugate, [r(3)], np.conjugate),
    "real_if_close": (rm.real_if_close, [r(3)], np.real_if_close),
    "expand_dims": (
        lambda x: rm.expand_dims(x, (0, -1)),
        [r(2, 3)],
        lambda x: np.expand_dims(x, (0, -1)),
    ),
    "squeeze": (lambda x: rm.squeeze(x, -1), [r(1, 3, 1)], lambda x: np.squeeze(x, -1)),
    "ravel": (rm.ravel, [r(2, 3)], np.ravel),
    "atleast_1d": (rm.atleast_1d, [r()], np.atleast_1d),
    "atleast_2d": (rm.atleast_2d, [r(3)], np.atleast_2d),
    "atleast_3d": (rm.atleast_3d, [r(2, 3)], np.atleast_3d),
    "moveaxis": (
        lambda x: rm.moveaxis(x, (0, 1), (2, 0)),
        [r(2, 3, 4)],
        lambda x: np.moveaxis(x, (0, 1), (2, 0)),
    ),
    "rollaxis": (lambda x: rm.rollaxis(x, 2, 1), [r(2, 3, 4)], lambda x: np.rollaxis(x, 2, 1)),
    "hstack": (lambda a, b: rm.hstack([a, b]), [r(2, 3), r(2, 1)], lambda a, b: np.hstack([a, b])),
    "vstack": (lambda a, b: rm.vstack([a, b]), [r(3), r(2, 3)], lambda a, b: np.vstack([a, b])),
    "row_stack": (lambda a, b: rm.row_stack([a, b]), [r(3), r(3)], lambda a, b: np.vstack([a, b])),
    "column_stack": (
        lambda a, b: rm.column_stack([a, b]),
        [r(3), r(3, 2)],
        lambda a, b: np.column_stack([a, b]),
    ),
    "dstack": (lambda a, b: rm.dstack([a, b]), [r(3), r(3)], lambda a, b: np.dstack([a, b])),
    "split": (
        lambda x: rm.split(x, [1, 3], axis=1)[1],
        [r(2, 5)],
        lambda x: np.split(x, [1, 3], axis=1)[1],
    ),
    "array_split": (
        lambda x: rm.array_split(x, 3)[0],
        [r(5, 2)],
        lambda x: np.array_split(x, 3)[0],
    ),
    "hsplit": (lambda x: rm.hsplit(x, 2)[1], [r(2, 4)], lambda x: np.hsplit(x, 2)[1]),
    "vsplit": (lambda x: rm.vsplit(x, [3])[0], [r(4, 2)], lambda x: np.vsplit(x, [3])[0]),
    "dsplit": (lambda x: rm.dsplit(x, 2)[0], [r(1, 2, 4)], lambda x: np.dsplit(x, 2)[0]),
    "flip": (lambda x: rm.flip(x, 1), [r(2, 3)], lambda x: np.flip(x, 1)),
    "fliplr": (rm.fliplr, [r(2, 3)], np.fliplr),
    "flipud": (rm.flipud, [r(2, 3)], np.flipud),
    "rot90": (lambda x: rm.rot90(x, 3, (2, 0)), [r(2, 3, 4)], lambda x: np.rot90(x, 3, (2, 0))),
    "repeat": (
        lambda x: rm.repeat(x, [2, 0, 3], axis=-1),
        [r(2, 3)],
        lambda x: np.repeat(x, [2, 0, 3], axis=-1),
    ),
    "tile": (lambda x: rm.tile(x, (2, 1, 3)), [r(2, 3)], lambda x: np.tile(x, (2, 1, 3))),
    "diff": (
        lambda x: rm.diff(x, 2, axis=0, prepend=1.0),
        [r(4, 3)],
        lambda x: np.diff(x, 2, axis=0, prepend=1.0),
    ),
    "gradient": (
        lambda x: rm.gradient(x, 0.5, axis=1),
        [r(3, 4)],
        lambda x: np.gradient(x, 0.5, axis=1),
    ),
    "diagonal": (
        lambda x: rm.diagonal(x, 1, 2, 0),
        [r(3, 2, 4)],
        lambda x: np.diagonal(x, 1, 2, 0),
    ),
    "diag": (lambda x: rm.diag(x, -1), [r(3)], lambda x: np.diag(x, -1)),
    "make_diagonal": (rm.make_diagonal, [r(2, 3)], lambda d: d[..., None] * np.eye(3)),
    "trace": (lambda x: rm.trace(x, -1), [r(3, 4)], lambda x: np.trace(x, -1)),
    "tril": (lambda x: rm.tril(x, 1), [r(2, 3, 4)], lambda x: np.tril(x, 1)),
    "triu": (lambda x: rm.triu(x, -1), [r(3, 4)], lambda x: np.triu(x, -1)),
    "dot": (rm.dot, [r(2, 3, 4), r(5, 4, 2)], np.dot),
    "inner": (rm.inner, [r(2, 4), r(3, 4)], np.inner),
    "outer": (rm.outer, [r(2, 2), r(3)], np.outer),
    "tensordot": (
        lambda a, b: rm.tensordot(a, b, ([0, 2], [2, 1])),
        [r(2, 3, 4), r(5, 4, 2)],
        lambda a, b: np.tensordot(a, b, ([0, 2], [2, 1])),
    ),
    "kron": (rm.kron, [r(2, 3), r(3)], np.kron),
    "cross": (
        lambda a, b: rm.cross(a, b, axis=0),
        [r(3, 2), r(3, 1)],
        lambda a, b: np.cross(a, b, axis=0),
    ),
    "var": (lambda x: rm.var(x, axis=1, ddof=1), [r(3, 4)], lambda x: np.var(x, axis=1, ddof=1)),
    "std": (
        lambda x: rm.std(x, axis=(0, 1), keepdims=True),
        [r(3, 4)],
        lambda x: np.std(x, axis=(0, 1), keepdims=True),
    ),
    "select": (
        lambda x, y: rm.select([x < 0, y > 0.5], [x * 2, y], default=-1.0),
        [r(3, 4), r(4)],
        lambda x, y: np.select([x < 0, y > 0.5], [x * 2, y], default=-1.0),
    ),
}


def weighted(fn):
    """sum(fn(*xs) * w) with a fixed random w of the output's shape."""

    def f(*xs):
        out = fn(*xs)
        w = np.random.default_rng(1).standard_normal(out.shape)
        return (out * w).sum()

    return f


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_gives_numpys_value(name):
    fn, inputs, numpy_fn = FUNCTIONS[name]
    got, want = fn(*inputs).numpy(), numpy_fn(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_gradient_and_tangent_match_finite_differences(name):
    fn, inputs, _ = FUNCTIONS[name]
    assert rm.gradcheck(weighted(fn), *inputs)
    vs = [np.random.default_rng(7).standard_normal(x.shape) for x in inputs]
    _, tangent = rm.jvp(fn, tuple(inputs), tuple(vs))
    eps = 1e-6

    def at(sign):
        with rm.no_grad():
            return fn(*[rm.tensor(x + sign * eps * v) for x, v in zip(inputs, vs)]).numpy()

    np.testing.assert_allclose(tangent, (at(1) - at(-1)) / (2 * eps), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(CASES))
def test_primitive_gives_numpys_value(name):
    fn, inputs = CASES[name]
    numpy_fn = {
        "roll": lambda x: np.roll(x, (-7, 2), axis=(1, 0)),
        "pad": lambda x: np.pad(x, ((1, 0), (2, 3)), constant_values=1.5),
        "cumsum": lambda x: np.cumsum(x, axis=-2),
        "prod": lambda x: np.prod(x, axis=(0, 2)),
        "sort": lambda x: np.sort(x, axis=0),
        "partition": lambda x: np.sort(x, axis=1),
        "prod_others": lambda x: np.array(
            [[np.prod(np.delete(row, i)) for i in range(4)] for row in x]
        ),  # (distinct values, kth=2 of 4: sorted here)
        "linspace": lambda a, b: np.linspace(a, b, 5, axis=-1),
    }.get(name) or getattr(np, name)
    got = fn(*inputs).numpy()
    if name == "partition":
        got = np.sort(got, axis=1)
    if name == "prod_others":  # no NumPy function: products in another order
        np.testing.assert_allclose(got, numpy_fn(*inputs), rtol=1e-15)
        return
    assert np.array_equal(got, numpy_fn(*inputs))  # NumPy's own forward: the same bits


# --- extreme inputs: merged into tests/ops/test_extreme_inputs.py's audit --------------------
ULP = np.finfo(float).eps


def _none(x):
    return 0.0


def _sinc_slope(x):
    if abs(x) < 1e-2:  # the series to x^7: (cos - sinc) / x cancels there
        terms = [(-1) ** k * math.pi ** (2 * k) * 2 * k * x ** (2 * k - 1) for k in range(1, 5)]
        return sum(t / math.factorial(2 * k + 1) for k, t in enumerate(terms, 1))
    return (math.cos(math.pi * x) - math.sin(math.pi * x) / (math.pi * x)) / x


# name -> (function, points, value, derivative, rtol, the derivative's absolute tolerance
# at x, why), as ELEMENTWISE there
EXTREMES = {
    "tan": (rm.tan, [-1.5, -1e-300, 1e-8, 0.5, 1.0, 1.57], math.tan, lambda x: 1 + math.tan(x) ** 2)
    + (1e-15, _none, "one libm call; the slope from the rounded output: two ulps more"),
    "arcsin": (
        rm.arcsin,
        [-0.999999, -1e-300, 0.5, 0.999999],
        math.asin,
        lambda x: 1 / math.sqrt((1 - x) * (1 + x)),
    )
    + (1e-15, _none, "one libm call; 1 - x² as (1 - x)(1 + x), exact near ±1"),
    "arccos": (
        rm.arccos,
        [-0.999999, 1e-300, 0.5, 0.999999],
        math.acos,
        lambda x: -1 / math.sqrt((1 - x) * (1 + x)),
    )
    + (1e-15, _none, "as arcsin"),
    "arctan": (
        rm.arctan,
        [-1e300, -1.0, 1e-300, 1e160, 1e300],
        math.atan,
        lambda x: 1 / (1 + x * x) if abs(x) < 1e150 else 1 / x / x,
    )
    + (1e-15, _none, "one libm call; the slope divides by hypot(x, 1) twice: no overflow in x²"),
    "sinh": (rm.sinh, [-700.0, -1.0, 1e-300, 1e-8, 700.0], math.sinh, math.cosh)
    + (1e-15, _none, "one libm call"),
    "cosh": (rm.cosh, [-700.0, -1.0, 1e-300, 1e-8, 700.0], math.cosh, math.sinh)
    + (1e-15, _none, "one libm call; the slope sinh, exact near 0"),
    "arcsinh": (
        rm.arcsinh,
        [-1e300, -1.0, 1e-300, 1e160],
        math.asinh,
        lambda x: 1 / math.hypot(x, 1),
    )
    + (1e-15, _none, "one libm call; hypot(x, 1): no overflow"),
    "arccosh": (
        rm.arccosh,
        [1.0 + 1e-12, 2.0, 1e160, 1e300],
        math.acosh,
        lambda x: 1 / math.sqrt(x - 1) / math.sqrt(x + 1),
    )
    + (1e-15, _none, "one libm call; sqrt(x - 1) sqrt(x + 1): no overflow"),
    "arctanh": (
        rm.arctanh,
        [-0.999999, 1e-300, 0.5, 0.999999],
        math.atanh,
        lambda x: 1 / ((1 - x) * (1 + x)),
    )
    + (1e-15, _none, "one libm call"),
    "log1p": (rm.log1p, [-0.999999, -1e-300, 1e-20, 1.0, 1e300], math.log1p, lambda x: 1 / (1 + x))
    + (1e-15, _none, "one libm call, exact for tiny x where log(1 + x) loses every digit"),
    "expm1": (rm.expm1, [-700.0, -1e-300, 1e-20, 1.0, 700.0], math.expm1, math.exp)
    + (
        1e-15,
        _none,
        "one libm call, exact for tiny x; the slope exp(x) (output + 1 was 0 at -700)",
    ),
    "log2": (rm.log2, [1e-300, 0.5, 1.0, 1e300], math.log2, lambda x: 1 / (x * math.log(2)))
    + (1e-15, _none, "one libm call"),
    "log10": (rm.log10, [1e-300, 0.5, 1.0, 1e300], math.log10, lambda x: 1 / (x * math.log(10)))
    + (1e-15, _none, "one libm call"),
    "exp2": (
        rm.exp2,
        [-1022.0, -1e-300, 0.5, 1023.5],
        lambda x: 2.0**x,
        lambda x: 2.0**x * math.log(2),
    )
    + (1e-15, _none, "one libm call"),
    "square": (rm.square, [-1e153, -1e-300, 0.5, 1e153], lambda x: x * x, lambda x: 2 * x)
    + (0.0, _none, "exact: one rounding"),
    "reciprocal": (
        rm.reciprocal,
        [-1e-150, 1e-150, 0.5, 1e300],
        lambda x: 1 / x,
        lambda x: -1 / x / x,
    )
    + (1e-15, _none, "one rounding; the slope from the output squared"),
    "sinc": (rm.sinc, [-2.5, -1e-3, 0.0, 1e-300, 2e-4, 0.3, 1e6], np.sinc, _sinc_slope)
    + (
        1e-12,
        _none,
        "the slope: a Taylor series below |x| = 1e-3, a quotient of cancelling terms above",
    ),
}

# the other new primitives, with the reason each needs no point list there
AUDITED_ELSEWHERE = {
    "nan_to_num": "no arithmetic: values pass or are replaced",
    "angle": "no arithmetic: 0 or pi, slope 0",
    "fmax": "no arithmetic: a selection, as maximum",
    "fmin": "no arithmetic: a selection, as minimum",
    "roll": "no arithmetic: moves values",
    "pad": "no arithmetic: moves values",
    "sort": "no arithmetic: moves values (ties: test_ties_share_the_gradient)",
    "partition": "no arithmetic: moves values",
    "cumsum": "one rounding per addition, as sum",
    "prod": "one rounding per product; zeros: test_prod_is_exact_at_zeros",
    "prod_others": "prod's VJP, products only: test_prod_is_exact_at_zeros",
    "remainder": "NumPy's one operation; the slopes 1 and -floor(x / y)",
    "linspace": "one rounding per element; the slopes are the weights on the ends",
    "arctan2": "test_accuracy_functions_stay_finite_where_naive_forms_overflow",
    "hypot": "test_accuracy_functions_stay_finite_where_naive_forms_overflow",
    "logaddexp": "test_accuracy_functions_stay_finite_where_naive_forms_overflow",
    "logaddexp2": "test_accuracy_functions_stay_finite_where_naive_forms_overflow",
}


# --- edges: ties, zeros, empty axes, indices -------------------------------------------
TIES = np.array([[2.0, -1.0, 2.0, 0.5], [0.5, 0.5, -3.0, 1.0], [1.0, 1.0, 1.0, 4.0]])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: rm.sort(x, axis=1),
        lambda x: rm.sort(x, axis=0),
        lambda x: rm.partition(x, 1, axis=1),
        lambda x: rm.max(x, axis=1),
    ],
    ids=["sort", "sort-axis0", "partition", "max"],
)
def test_ties_share_the_gradient(fn):
    # tied pairs: the shared gradient is the central difference's average of both sides
    x = TIES[:2]
    assert rm.gradcheck(weighted(fn), x)
    _, tangent = rm.jvp(fn, (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(tangent, fn(rm.tensor(x)).numpy() * 0 + 1.0)


def test_three_way_tie_in_sort_gets_the_mean_cotangent():
    x = rm.tensor(TIES[2], requires_grad=True)  # 1, 1, 1 tie; 4 alone
    (rm.sort(x) * rm.tensor([1.0, 2.0, 6.0, 10.0])).sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0, 10.0])


def test_prod_is_exact_at_zeros():
    for x, want in [
        ([2.0, 0.0, 3.0], [0.0, 6.0, 0.0]),
        ([0.0, 0.0, 3.0], [0.0, 0.0, 0.0]),
        ([0.0], [1.0]),
        ([-1.5, 2.0, 4.0], [8.0, -6.0, -3.0]),
    ]:
        np.testing.assert_array_equal(rm.grad(lambda t: rm.prod(t))(np.array(x)), want)
    # the second derivative, where a zero meets another: d²(x0 x1 x2) = [[0, x2, x1], ...]
    got = rm.hvp(lambda t: rm.prod(t), (np.array([0.0, 0.0, 3.0]),), (np.ones(3),))[0]
    np.testing.assert_array_equal(got, [3.0, 3.0, 0.0])


def test_zero_to_the_zero():
    x, y = rm.tensor(0.0, requires_grad=True), rm.tensor(0.0, requires_grad=True)
    out = x**y
    out.backward()
    assert out.item() == 1.0 and x.grad == 0.0 and y.grad == 0.0  # PyTorch's convention


@pytest.mark.parametrize(
    "fn, numpy_fn",
    [
        (lambda x: rm.prod(x, axis=1), lambda x: np.prod(x, axis=1)),
        (lambda x: rm.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1)),
        (lambda x: rm.sort(x, axis=1), lambda x: np.sort(x, axis=1)),
        (lambda x: rm.roll(x, 3, axis=1), lambda x: np.roll(x, 3, axis=1)),
        (lambda x: rm.pad(x, 1), lambda x: np.pad(x, 1)),
        (lambda x: rm.diff(x, axis=1), lambda x: np.diff(x, axis=1)),
        (lambda x: rm.repeat(x, 2, axis=1), lambda x: np.repeat(x, 2, axis=1)),
        (lambda x: rm.tile(x, (2, 0)), lambda x: np.tile(x, (2, 0))),
        (lambda x: rm.trace(x), lambda x: np.trace(x)),
    ],
)
def test_empty_axes(fn, numpy_fn):
    x = np.zeros((3, 0))
    got = fn(rm.tensor(x)).numpy()
    assert got.shape == numpy_fn(x).shape and np.array_equal(got, numpy_fn(x))
    t = rm.tensor(x, requires_grad=True)
    (fn(t) * 1.0).sum().backward()
    assert t.grad.shape == (3, 0)
    assert rm.jvp(fn, (x,), (x,))[1].shape == got.shape


def test_roll_wraps_any_shift_and_names_a_bad_axis():
    x = r(3, 4)
    for shift, axis in [(-7, -1), (13, 0), ((5, -9), (0, 1)), (-1, None)]:
        np.testing.assert_array_equal(rm.roll(x, shift, axis).numpy(), np.roll(x, shift, axis))
    assert rm.gradcheck(weighted(lambda t: rm.roll(t, -7, -1)), x)
    with pytest.raises(rm.ShapeError, match=r"roll: axis 2 is out of bounds for 2 axes"):
        rm.roll(x, 1, axis=2)
    with pytest.raises(rm.ShapeError, match=r"roll: 2 shifts for 1 axes"):
        rm.roll(x, (1, 2), axis=(0,))


def test_repeat_and_tile_check_their_counts_and_axes():
    x = r(2, 3)
    np.testing.assert_array_equal(rm.repeat(x, 3, axis=-2).numpy(), np.repeat(x, 3, axis=-2))
    np.testing.assert_array_equal(
        rm.repeat(x, [0, 2, 1], axis=-1).numpy(), np.repeat(x, [0, 2, 1], -1)
    )
    assert rm.gradcheck(weighted(lambda t: rm.repeat(t, [0, 2, 1], axis=-1)), x)
    with pytest.raises(ValueError, match=r"repeat: repeats must be >= 0; got -1"):
        rm.repeat(x, -1)
    with pytest.raises(rm.ShapeError, match=r"repeat: axis -3 is out of bounds for 2 axes"):
        rm.repeat(x, 2, axis=-3)
    with pytest.raises(rm.ShapeError, match=r"repeat: 2 repeats for axis 1 of length 3"):
        rm.repeat(x, [1, 2], axis=1)
    np.testing.assert_array_equal(rm.tile(x, (2, 1, 2)).numpy(), np.tile(x, (2, 1, 2)))
    with pytest.raises(ValueError, match=r"tile: reps must be ints >= 0; got \(2, -1\)"):
        rm.tile(x, (2, -1))


def test_errors_name_the_function_and_what_is_allowed():
    x = r(2, 3)
    with pytest.raises(NotImplementedError, match=r"pad: mode 'reflect' .* only mode='constant'"):
        rm.pad(x, 1, mode="reflect")
    with pytest.raises(rm.ShapeError, match=r"split: axis 1 of a tensor of shape \(2, 3\)"):
        rm.split(x, 2, axis=1)
    with pytest.raises(rm.ShapeError, match=r"squeeze: axis 1 .* has size 3"):
        rm.squeeze(x, 1)
    with pytest.raises(rm.ShapeError, match=r"partition: kth 3 is out of bounds"):
        rm.partition(x, 3)
    with pytest.raises(rm.ShapeError, match=r"cross: vectors must have 3 components"):
        rm.cross(x.T, x.T)
    # an axis out of range wrapped around (axis 5 of 2 axes reduced axis 1) before it was checked
    for fn in (rm.prod, rm.var, rm.std):
        with pytest.raises(rm.ShapeError, match=r"(prod|var): axis 5 is out of bounds for 2 axes"):
            fn(x, axis=5)


@pytest.mark.parametrize("name", ["angle", "real", "imag", "conj", "real_if_close"])
def test_complex_values_are_refused_by_name(name):
    with pytest.raises(rm.DTypeError, match=rf"rm.{name}: x is complex .* real functions only"):
        getattr(rm, name)(np.array([1 + 2j]))


def test_accuracy_functions_stay_finite_where_naive_forms_overflow():
    big = np.array([3e200, 1e300])
    np.testing.assert_allclose(rm.hypot(big, big * 4 / 3).numpy(), big * 5 / 3, rtol=1e-15)
    g = rm.grad(lambda a, b: rm.hypot(a, b).sum(), (0, 1))(big, big * 4 / 3)
    np.testing.assert_allclose(g, [[0.6, 0.6], [0.8, 0.8]], rtol=1e-15)
    g = rm.grad(lambda a, b: rm.logaddexp(a, b).sum(), (0, 1))(
        np.array([1000.0]), np.array([1000.0])
    )
    np.testing.assert_array_equal(g, [[0.5], [0.5]])
    g = rm.grad(lambda a, b: rm.logaddexp2(a, b).sum(), (0, 1))(
        np.array([2000.0]), np.array([1999.0])
    )
    np.testing.assert_allclose(g, [[2 / 3], [1 / 3]], rtol=1e-15)
    g = rm.grad(lambda y, x: rm.arctan2(y, x).sum(), (0, 1))(np.array([1e200]), np.array([1e200]))
    np.testing.assert_allclose(g, [[5e-201], [-5e-201]], rtol=1e-15)
    assert rm.log1p(rm.tensor(1e-20)).item() == 1e-20 and rm.expm1(rm.tensor(1e-20)).item() == 1e-20


def test_sinc_has_its_curvature_at_zero():
    second = rm.grad(lambda t: rm.grad(lambda u: rm.sinc(u).sum())(t).sum())
    np.testing.assert_allclose(second(np.array([0.0])), [-(math.pi**2) / 3], rtol=1e-15)


# --- an optional peer: autograd's gradients of the same functions ----------------------
PEER = "tan arcsinh log1p expm1 hypot logaddexp cumsum prod var std roll outer kron trace tril diff"
PEER += " sort cross tile repeat"


@pytest.mark.parametrize("name", PEER.split())
def test_gradients_agree_with_autograd(name):
    autograd = pytest.importorskip("autograd")
    anp = pytest.importorskip("autograd.numpy")
    args = {"repeat": (2,), "roll": (-3,), "tile": ((2, 1),)}.get(name, ())
    shape = (4,) if name in ("outer", "sort") else (3, 3)  # autograd's rules take 1-D there
    inputs = [pos(*shape)] * (2 if name in ("hypot", "logaddexp", "outer", "kron", "cross") else 1)

    def f(module):
        fn = getattr(module, name)
        return lambda *xs: (
            fn(*xs, *args)
            * np.arange(1.0, 1 + fn(*inputs, *args).size).reshape(np.shape(fn(*inputs, *args)))
        ).sum()

    argnums = tuple(range(len(inputs)))
    want = [autograd.grad(f(anp), i)(*inputs) for i in argnums]
    got = rm.grad(f(rm), argnums)(*inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)


# --- Tensor methods as NumPy's ndarray has them ----------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.squeeze(),
        lambda a: a.ravel(),
        lambda a: a.flatten(),
        lambda a: a.dot(a.T),
        lambda a: a.var(axis=1),
        lambda a: a.std(ddof=1),
        lambda a: a.prod(axis=0, keepdims=True),
        lambda a: a.cumsum(axis=1),
        lambda a: a.repeat(2, axis=1),
        lambda a: a.diagonal(1),
        lambda a: a.trace(),
        lambda a: a.swapaxes(0, 1),
        lambda a: a.clip(-0.5, 0.5),
        lambda a: a.conj(),
        lambda a: a.real,
        lambda a: a.imag,
    ],
)
def test_tensor_methods_match_ndarray_methods(call):
    x = r(3, 4)
    np.testing.assert_allclose(call(rm.tensor(x)).numpy(), call(x), rtol=1e-14, atol=1e-15)


def test_sign_is_public():
    np.testing.assert_array_equal(rm.sign(rm.tensor([-2.0, 0.0, 3.0])).numpy(), [-1.0, 0.0, 1.0])


@pytest.mark.parametrize(
    "spec, shapes",
    [
        ("...ij,...jk->...ik", ((2, 3, 4), (4, 5))),
        ("...i,...i", ((2, 1, 3), (4, 3))),
        ("i...->...", ((3, 2, 2),)),
        ("...", ((2, 3),)),
    ],
)
def test_einsum_with_ellipsis(spec, shapes):
    arrays = [r(*s) for s in shapes]
    np.testing.assert_allclose(
        rm.einsum(spec, *arrays).numpy(), np.einsum(spec, *arrays), rtol=1e-13
    )
    assert rm.gradcheck(weighted(lambda *xs: rm.einsum(spec, *xs)), *arrays)


# Random programs drawn from the new functions: they joined the one generator's tables
# (tests/strategies.py), so every property test of programs draws them too.


def test_counts_and_axes_may_be_numpy_integers():
    # np.int64 counts were refused (tile, roll, split: "not iterable"; diff, linspace:
    # "must be an int")
    x, i = r(3, 4), np.int64
    np.testing.assert_array_equal(rm.tile(x, i(2)).numpy(), np.tile(x, 2))
    np.testing.assert_array_equal(rm.roll(x, i(1), i(1)).numpy(), np.roll(x, 1, 1))
    np.testing.assert_array_equal(rm.split(x, i(2), axis=1)[1].numpy(), np.split(x, 2, axis=1)[1])
    np.testing.assert_array_equal(rm.diff(x, n=i(2)).numpy(), np.diff(x, n=2))
    np.testing.assert_array_equal(rm.linspace(0.0, 1.0, i(3)).numpy(), np.linspace(0, 1, 3))
    with pytest.raises(
        TypeError, match=r"tile: reps must be an int or a sequence of ints, not 2.0"
    ):
        rm.tile(x, 2.0)
