"""Forward mode: rm.jvp and rm.hvp (forward over reverse). Every op's tangent rule is
checked against finite differences in tests/ops/test_ops.py, generated from rm.OPS."""

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(0)


def test_jvp_of_a_composition_is_the_chain_rule():
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    value, tangent = rm.jvp(lambda x: rm.exp(rm.sin(x)) * x, (x,), (v,))
    np.testing.assert_allclose(value, np.exp(np.sin(x)) * x)
    want = (np.exp(np.sin(x)) * np.cos(x) * x + np.exp(np.sin(x))) * v
    np.testing.assert_allclose(tangent, want, rtol=1e-12)


def test_jvp_takes_and_gives_pytrees():
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    dirs = {"w": rng.standard_normal((3, 2)), "b": np.zeros(2)}
    x = rng.standard_normal((4, 3))

    def f(p, x):
        h = x @ p["w"] + p["b"]
        return {"h": h, "sum": h.sum()}

    value, tangent = rm.jvp(f, (params, x), (dirs, np.zeros_like(x)))
    np.testing.assert_allclose(tangent["h"], x @ dirs["w"], rtol=1e-12)
    np.testing.assert_allclose(tangent["sum"], (x @ dirs["w"]).sum(), rtol=1e-12)
    assert set(value) == {"h", "sum"}


def test_hvp_of_a_quadratic_is_the_matrix_times_v():
    a = rng.standard_normal((4, 4))
    a = a + a.T
    x, v = rng.standard_normal(4), rng.standard_normal(4)
    (hv,) = rm.hvp(lambda x: 0.5 * (x * (a @ x)).sum(), (x,), (v,))
    np.testing.assert_allclose(hv, a @ v, rtol=1e-12)


def test_hvp_of_a_network_matches_the_gradient_of_the_directional_gradient():
    w0, x = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((5, 3))
    v = rng.standard_normal((3, 3))

    def loss(w):
        return (rm.tanh(x @ w) ** 2).sum()

    (hv,) = rm.hvp(loss, (w0,), (v,))
    want = rm.grad(lambda w: (rm.grad(loss)(w) * v).sum())(w0)  # the Hessian is symmetric
    np.testing.assert_allclose(hv, want, rtol=1e-10)


def test_bad_tangents_and_loops_are_clear_errors():
    with pytest.raises(ValueError, match="tangent 0 has shape \\(2,\\)"):
        rm.jvp(rm.sin, (np.ones(3),), (np.ones(2),))
    with pytest.raises(TypeError, match="tuples"):
        rm.jvp(rm.sin, np.ones(3), np.ones(3))

    # a checkpointed loop run outside rm.grad / rm.jvp keeps no x_0: reversed once only
    w = rm.tensor(np.eye(2) * 0.5, requires_grad=True)
    h = rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h @ w), rm.tensor(np.ones((1, 2))), steps=4)
    with pytest.raises(rm.BackwardError, match="kept no copy of its initial state"):
        h.sum().backward(retain_graph=True)


def test_jvp_hvp_and_grad_of_grad_go_through_checkpoints():
    x = rm.tensor(rng.standard_normal((2, 3)))
    w0, v = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3))

    def block(h, w):
        return rm.tanh(h @ w) * rm.random.uniform(size=h.shape)  # random numbers replay too

    def loss(wrap):
        def f(w):
            rm.random.seed(3)
            return (wrap(block)(wrap(block)(x, w), w) ** 2).sum()

        return f

    plain, checkpointed = loss(lambda f: f), loss(rm.checkpoint)
    for transform in (
        lambda f: rm.jvp(f, (w0,), (v,))[1],
        lambda f: rm.hvp(f, (w0,), (v,))[0],
        lambda f: rm.grad(lambda w: (rm.grad(f)(w) ** 2).sum())(w0),
    ):
        np.testing.assert_allclose(transform(checkpointed), transform(plain), rtol=1e-12)


@pytest.mark.parametrize("schedule", ["store_all", "sqrt", "periodic", "revolve", "online"])
def test_jvp_goes_through_loops_chains_and_scans_exactly(schedule):
    def tape():
        if schedule == "store_all":
            return rm.Tape()
        if schedule == "sqrt":
            return rm.Tape(schedule="sqrt")
        return rm.Tape(snapshots=3, schedule=schedule)

    w0, h0 = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((2, 3))
    xs0 = rng.standard_normal((7, 2, 3))
    dirs = (
        rng.standard_normal((2, 3)),
        rng.standard_normal((3, 3)),
        rng.standard_normal((7, 2, 3)),
    )

    def layer(h, w):
        return h + rm.tanh(h @ w) * rm.random.uniform(size=h.shape)

    def checkpointed(h, w, xs):
        h = tape().loop(lambda h: layer(h, w), h, steps=5)
        h = tape().chain([lambda h: layer(h, w), lambda h: rm.sin(h) * 2.0], h)
        h, ys = tape().scan(lambda h, x: (layer(h + x, w), h.sum(axis=1)), h, xs)
        return {"h": h, "ys": ys}

    def unrolled(h, w, xs):
        for _ in range(5):
            h = layer(h, w)
        h = rm.sin(layer(h, w)) * 2.0
        ys = []
        for t in range(xs.shape[0]):
            ys.append(h.sum(axis=1))
            h = layer(h + xs[t], w)
        return {"h": h, "ys": rm.stack(ys)}

    rm.random.seed(5)
    got = rm.jvp(checkpointed, (h0, w0, xs0), dirs)
    rm.random.seed(5)
    want = rm.jvp(unrolled, (h0, w0, xs0), dirs)
    for key in ("h", "ys"):
        np.testing.assert_allclose(got[0][key], want[0][key], rtol=1e-13)
        np.testing.assert_allclose(got[1][key], want[1][key], rtol=1e-13)
