"""Every primitive in rm.OPS: gradient against central finite differences (float64).

The cases below are keyed by op name, and a test fails if an op in the table
has no case, so no op can be forgotten.  Each case gives the function under
test and its inputs; the checked scalar is sum(out * w) for a random w, so
every output element's cotangent differs.
"""

import tracemalloc

import numpy as np
import pytest

import remat as rm

from .test_numpy_functions import CASES as NUMPY_CASES

rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape)


def pos(*shape):
    return rng.uniform(0.5, 2.0, shape)


def distinct(*shape):
    """Values far apart, so max/min/maximum have no near-ties for differences."""
    n = int(np.prod(shape))
    return rng.permutation(np.linspace(-2, 2, n)).reshape(shape)


MASK = np.array([[True, False, True, True], [False, True, False, True], [True, True, False, False]])

CASES = {
    "negative": (rm.negative, [r(3, 4)]),
    "exp": (rm.exp, [r(3, 4)]),
    "log": (rm.log, [pos(3, 4)]),
    "sin": (rm.sin, [r(3, 4)]),
    "cos": (rm.cos, [r(3, 4)]),
    "tanh": (rm.tanh, [r(3, 4)]),
    "sqrt": (rm.sqrt, [pos(3, 4)]),
    "abs": (rm.abs, [distinct(3, 4)]),
    "add": (rm.add, [r(3, 4), r(4)]),
    "subtract": (rm.subtract, [r(2, 1, 4), r(3, 4)]),
    "multiply": (rm.multiply, [r(3, 1), r(1, 4)]),
    "divide": (rm.divide, [r(3, 4), pos(3, 1)]),
    "power": (rm.power, [pos(3, 4), r(4)]),
    "maximum": (rm.maximum, [distinct(3, 4), distinct(4) + 0.01]),
    "minimum": (rm.minimum, [distinct(3, 4), distinct(3, 1) + 0.01]),
    "where": (lambda x, y: rm.where(MASK, x, y), [r(3, 4), r(4)]),
    "clip": (lambda x: rm.clip(x, -0.5, 0.7), [distinct(3, 4)]),
    "sum": (lambda x: rm.sum(x, axis=1, keepdims=True), [r(3, 4, 2)]),
    "mean": (lambda x: rm.mean(x, axis=(0, 2)), [r(3, 4, 2)]),
    "max": (lambda x: rm.max(x, axis=-1), [distinct(3, 4)]),
    "min": (lambda x: rm.min(x), [distinct(3, 4)]),
    "logsumexp": (lambda x: rm.logsumexp(x, axis=0), [r(3, 4) * 10]),
    "sigmoid": (rm.sigmoid, [r(3, 4) * 3]),
    "relu": (rm.relu, [distinct(3, 4)]),
    "softmax": (lambda x: rm.softmax(x, axis=0), [r(3, 4)]),
    "log_softmax": (rm.log_softmax, [r(3, 4) * 5]),
    "gelu": (rm.gelu, [r(3, 4) * 2]),
    "layer_norm": (lambda x, w, b: rm.layer_norm(x, w, b), [r(3, 4), r(4), r(4)]),
    "matmul": (rm.matmul, [r(2, 3, 4), r(4, 5)]),
    "einsum": (lambda a, b: rm.einsum("ij,jk->ki", a, b), [r(3, 4), r(4, 2)]),
    "reshape": (lambda x: rm.reshape(x, (2, 6)), [r(3, 4)]),
    "transpose": (lambda x: rm.transpose(x, (2, 0, 1)), [r(2, 3, 4)]),
    "swapaxes": (lambda x: rm.swapaxes(x, 0, 2), [r(2, 3, 4)]),
    "broadcast_to": (lambda x: rm.broadcast_to(x, (2, 3, 4)), [r(3, 1)]),
    "concatenate": (lambda a, b: rm.concatenate([a, b], axis=1), [r(2, 3), r(2, 4)]),
    "stack": (lambda a, b: rm.stack([a, b], axis=1), [r(2, 3), r(2, 3)]),
    "getitem": (lambda x: x[np.array([0, 2, 0, 0]), 1:3], [r(3, 4)]),
    "identity": (rm.ops.identity, [r(3, 4)]),
    "to_device": (lambda x: rm.to_device(x, "cpu"), [r(3, 4)]),
    "astype": (lambda x: rm.astype(x, np.float64), [r(3, 4)]),
    "scatter_add": (lambda v: rm.ops.scatter_add((5, 2), np.array([1, 3, 1]), v), [r(3, 2)]),
    **NUMPY_CASES,  # NumPy's functions (issue 27)
}


def weighted(fn, out_shape_seed=1):
    """sum(fn(*xs) * w) with a fixed random w of the output's shape."""
    weights = {}

    def f(*xs):
        out = fn(*xs)
        if out.shape not in weights:
            weights[out.shape] = np.random.default_rng(out_shape_seed).standard_normal(out.shape)
        return (out * weights[out.shape]).sum()

    return f


def test_every_op_has_a_case():
    assert set(CASES) == set(rm.OPS), (
        f"ops without a gradient case: {sorted(set(rm.OPS) - set(CASES))}; "
        f"cases for no op: {sorted(set(CASES) - set(rm.OPS))}"
    )


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_gradient_matches_finite_differences(name):
    fn, inputs = CASES[name]
    assert rm.gradcheck(weighted(fn), *inputs)


SECOND_ORDER_SKIP = {"where", "clip", "relu", "abs", "max", "min", "maximum", "minimum"}


@pytest.mark.parametrize("name", sorted(set(rm.OPS) - SECOND_ORDER_SKIP))
def test_second_derivative_matches_finite_differences(name):
    """grad of (grad(f) . v): differentiates every VJP rule once more."""
    fn, inputs = CASES[name]
    f = weighted(fn)
    argnums = tuple(range(len(inputs)))
    vs = [np.random.default_rng(7 + i).standard_normal(x.shape) for i, x in enumerate(inputs)]

    def directional(*xs):
        grads = rm.grad(f, argnums=argnums)(*xs)
        return sum((g * v).sum() for g, v in zip(grads, vs))

    assert rm.gradcheck(directional, *inputs, atol=1e-4)


@pytest.mark.parametrize("name", sorted(SECOND_ORDER_SKIP))
def test_piecewise_ops_have_zero_curvature_away_from_kinks(name):
    fn, inputs = CASES[name]
    f = weighted(fn)
    argnums = tuple(range(len(inputs)))

    def directional(*xs):
        grads = rm.grad(f, argnums=argnums)(*xs)
        return sum((g * 1.0).sum() for g in grads)

    assert rm.gradcheck(directional, *inputs)


def test_gradcheck_catches_a_wrong_vjp(monkeypatch):
    op = rm.OPS["sin"]
    monkeypatch.setattr(op, "vjps", (lambda ns, g, ans, x: g * ns.sin(x),))
    with pytest.raises(rm.GradcheckError, match=r"input 0 .* element .* analytic .* numeric"):
        rm.gradcheck(lambda x: rm.sin(x).sum(), r(3))


# guards: a NaN gradient passed gradcheck (NaN - numeric > tol is False, so excess.max() <= 0)
def test_gradcheck_refuses_a_nan_gradient():
    # sqrt(x * x) at 0: the VJP gives inf * 0 = NaN, the differences give 0
    with pytest.raises(rm.GradcheckError, match=r"element \(0,\): analytic .*nan"):
        with np.errstate(all="ignore"):
            rm.gradcheck(lambda x: rm.sqrt(x * x).sum(), np.array([0.0, 1.0]))


@pytest.mark.parametrize(
    "shapes",
    [((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((4, 2, 3), (3, 5)), ((2, 3), (2, 3, 4))],
)
def test_matmul_follows_numpy_rules_for_every_rank(shapes):
    a, b = r(*shapes[0]), r(*shapes[1])
    assert np.allclose(rm.matmul(a, b).data, np.matmul(a, b))
    assert rm.gradcheck(weighted(rm.matmul), a, b)


@pytest.mark.parametrize(
    "spec, shapes",
    [
        ("ij,jk", ((2, 3), (3, 4))),
        ("ij->", ((2, 3),)),
        ("ij,ij->i", ((2, 3), (2, 3))),
        ("i,j->ij", ((2,), (3,))),
        ("bij,bjk->bik", ((2, 3, 4), (2, 4, 1))),
    ],
)
def test_einsum_specs(spec, shapes):
    arrays = [r(*s) for s in shapes]
    assert np.allclose(rm.einsum(spec, *arrays).data, np.einsum(spec, *arrays))
    assert rm.gradcheck(weighted(lambda *xs: rm.einsum(spec, *xs)), *arrays)


@pytest.mark.parametrize(
    "index",
    [
        np.s_[1],
        np.s_[:, 1:3],
        np.s_[..., None, 0],
        MASK,
        np.s_[[2, 2, 0], [1, 1, 3]],
        np.s_[np.array([True, False, True])],
        np.s_[::-1, ::2],
    ],
)
def test_indexing_forms(index):
    x = r(3, 4)
    assert np.array_equal(rm.tensor(x)[index].data, x[index])
    assert rm.gradcheck(weighted(lambda t: t[index]), x)


def test_repeated_integer_indices_accumulate():
    x = rm.tensor(np.zeros(4), requires_grad=True)
    x[np.array([1, 1, 1, 3])].sum().backward()
    assert np.array_equal(x.grad, [0.0, 3.0, 0.0, 1.0])


def test_stable_forms_do_not_overflow():
    big = np.array([1000.0, -1000.0, 0.0])
    assert np.all(np.isfinite(rm.sigmoid(big).data))
    assert np.allclose(rm.softmax(big).data, [1.0, 0.0, 0.0])
    assert np.allclose(rm.logsumexp(big).data, 1000.0)
    assert np.all(np.isfinite(rm.log_softmax(big).data))


def test_functions_keep_numpy_semantics():
    x, y = r(3, 4), r(4)
    pairs = [
        (rm.add(x, y), x + y),
        (rm.power(pos(3), 2.5), None),
        (rm.sum(x, 0), x.sum(0)),
        (rm.max(x, axis=1, keepdims=True), x.max(1, keepdims=True)),
        (rm.mean(x), x.mean()),
        (rm.clip(x, None, 0.1), np.clip(x, None, 0.1)),
        (rm.transpose(x), x.T),
        (rm.tensor(x).T, x.T),
        (rm.tensor(x).reshape(2, 6), x.reshape(2, 6)),
        (rm.tensor(np.ones((2, 3, 4))).transpose(1, 0, 2), np.ones((3, 2, 4))),
        (rm.stack([x, x], axis=-1), np.stack([x, x], -1)),
        (rm.concatenate([x, x], axis=-1), np.concatenate([x, x], -1)),
    ]
    for got, want in pairs:
        if want is not None:
            assert got.shape == want.shape and np.allclose(got.data, want)


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_tangent_matches_finite_differences(name):
    # forward mode: rm.jvp of every op against a central difference along v
    fn, inputs = CASES[name]
    vs = [np.random.default_rng(7).standard_normal(x.shape) for x in inputs]
    _, tangent = rm.jvp(fn, tuple(inputs), tuple(vs))
    eps = 1e-6

    def at(sign):
        with rm.no_grad():
            return fn(*[rm.tensor(x + sign * eps * v) for x, v in zip(inputs, vs)]).numpy()

    numeric = (at(1) - at(-1)) / (2 * eps)
    np.testing.assert_allclose(tangent, numeric, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_eager_tangent_equals_the_recorded_sweeps_bit_for_bit(name):
    # rm.jvp computes each op's tangent at once on Duals (remat.dual); reading the inputs'
    # nodes switches it to recording and a forward sweep: the same rule, the same bits
    fn, inputs = CASES[name]
    vs = tuple(np.random.default_rng(9).standard_normal(x.shape) for x in inputs)
    made = []

    def eager(*xs):
        made.append(fn(*xs))
        return made[-1]

    def recorded(*xs):
        assert all(x.node for x in xs)  # each input is now a seeded leaf
        made.append(fn(*xs))
        return made[-1]

    _, t_eager = rm.jvp(eager, tuple(inputs), vs)
    _, t_recorded = rm.jvp(recorded, tuple(inputs), vs)
    assert type(made[0]) is rm.dual.Dual and made[1].record is not None
    assert np.array_equal(t_eager, t_recorded)


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_reverse_over_forward_is_the_hessian_vector_product(name):
    # rm.jvp inside rm.grad returns Tensors on the tape: the gradient of (J v), for a
    # scalar f, is H v, which rm.hvp (checked against differences below) also gives
    fn, inputs = CASES[name]
    f = weighted(fn)
    vs = tuple(np.random.default_rng(8).standard_normal(x.shape) for x in inputs)
    argnums = tuple(range(len(inputs)))
    got = rm.grad(lambda *xs: rm.jvp(f, xs, vs)[1], argnums)(*inputs)
    for g, want in zip(got, rm.hvp(f, tuple(inputs), vs)):
        np.testing.assert_allclose(g, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_forward_over_forward_matches_finite_differences(name):
    # rm.jvp inside rm.jvp: the derivative along u of (J v) is the second derivative
    # d2f[u, v], against a central difference of the top-level (array) J v along u
    fn, inputs = CASES[name]
    vs, us = (
        tuple(np.random.default_rng(s).standard_normal(x.shape) for x in inputs) for s in (5, 6)
    )

    def jv(*xs):
        return rm.jvp(fn, xs, vs)[1]

    got = rm.jvp(jv, tuple(inputs), us)[1]
    eps = 1e-6
    up = jv(*[x + eps * u for x, u in zip(inputs, us)])
    down = jv(*[x - eps * u for x, u in zip(inputs, us)])
    np.testing.assert_allclose(got, (up - down) / (2 * eps), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_tangents_that_are_differentiated_give_the_jacobian(name):
    # J v is linear in v: its gradient in v (reverse over forward, for a scalar f) is
    # the gradient of f, and its derivative along w (forward over forward) is J w
    fn, inputs = CASES[name]
    f = weighted(fn)
    vs, ws = (
        tuple(np.random.default_rng(s).standard_normal(x.shape) for x in inputs) for s in (3, 4)
    )
    argnums = tuple(range(len(inputs)))
    got = rm.grad(lambda *v: rm.jvp(f, tuple(inputs), v)[1], argnums)(*vs)
    for g, want in zip(got, rm.grad(f, argnums)(*inputs)):
        np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)
    along = rm.jvp(lambda *v: rm.jvp(fn, tuple(inputs), v)[1], vs, ws)[1]
    np.testing.assert_allclose(along, rm.jvp(fn, tuple(inputs), ws)[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_hessian_vector_product_matches_finite_differences(name):
    # forward over reverse: rm.hvp against a central difference of rm.grad
    fn, inputs = CASES[name]
    f = weighted(fn)
    vs = tuple(np.random.default_rng(8).standard_normal(x.shape) for x in inputs)
    argnums = tuple(range(len(inputs)))
    got = rm.hvp(f, tuple(inputs), vs)
    eps = 1e-6
    up = rm.grad(f, argnums)(*[x + eps * v for x, v in zip(inputs, vs)])
    down = rm.grad(f, argnums)(*[x - eps * v for x, v in zip(inputs, vs)])
    for g, u, d in zip(got, up, down):
        np.testing.assert_allclose(g, (u - d) / (2 * eps), rtol=1e-4, atol=1e-5)


def test_large_einsums_go_through_blas_with_numpys_result():
    q, k = r(2, 3, 48, 40), r(2, 3, 48, 40)  # above EINSUM_BLAS_SIZE: optimize=True
    assert q.size + k.size >= rm.backend.EINSUM_BLAS_SIZE
    got = rm.einsum("bhqd,bhkd->bhqk", q, k).numpy()
    np.testing.assert_allclose(got, np.einsum("bhqd,bhkd->bhqk", q, k), rtol=1e-12)
    assert np.array_equal(got, rm.einsum("bhqd,bhkd->bhqk", q, k).numpy())  # the same path
    f = weighted(lambda a, b: rm.einsum("bhqd,bhkd->bhqk", a, b))
    qt, kt = rm.tensor(q, requires_grad=True), rm.tensor(k, requires_grad=True)
    f(qt, kt).backward()
    eps, index = 1e-6, (1, 2, 5, 7)
    up, down = q.copy(), q.copy()
    up[index] += eps
    down[index] -= eps
    numeric = (f(up, k).item() - f(down, k).item()) / (2 * eps)
    assert qt.grad[index] == pytest.approx(numeric, rel=1e-6)


# The gradient of a weight a batch shares, x (b, n, k) @ w (k, m), was made as the
# (b, k, m) array of every batch element's product, then summed: b times w's size.
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_shared_weights_gradient_is_summed_as_it_is_made(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 8, 64)).astype(dtype)
    w = rm.tensor(rng.standard_normal((64, 64)).astype(dtype), requires_grad=True)
    y = rm.tensor(x, requires_grad=True) @ w  # (b is saved, and known 2-D, for x's gradient)
    g = rng.standard_normal(y.shape).astype(dtype)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    y.backward(g)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert peak <= 2 * x.nbytes + 4 * w.numpy().nbytes  # x's and w's gradients; not 16 products
    # the same bits as the products summed over the batch, as the tape sums them
    assert np.array_equal(w.grad, np.sum(np.swapaxes(x, -1, -2) @ g, axis=0))
