"""NumPy's functions in remat (issue 27): every new primitive and every composed function
checked in float64, against NumPy's values and against finite differences.

``CASES`` holds the new primitives of ``rm.OPS``; tests/test_ops.py adds them to its
own table, so each one goes through every check there (gradient, second derivative,
tangent, eager tangent, Hessian-vector products).  ``FUNCTIONS`` holds the functions
composed from primitives: each is compared with NumPy's and gradchecked here, forward
and reverse.  The edges the issue names follow: ties, zeros, empty axes, negative and
out-of-range indices.
"""

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
        "partition": lambda x: np.sort(x, axis=1),  # (distinct values, kth=2 of 4: sorted here)
        "linspace": lambda a, b: np.linspace(a, b, 5, axis=-1),
    }.get(name, getattr(np, name))
    got = fn(*inputs).numpy()
    if name == "partition":
        got = np.sort(got, axis=1)
    assert np.array_equal(got, numpy_fn(*inputs))  # NumPy's own forward: the same bits
