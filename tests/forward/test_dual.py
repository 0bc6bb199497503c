"""Eager forward mode (remat.dual): rm.jvp carries tangents on the values themselves,
and switches to recording where the tape is needed.  Whichever path a computation
takes, its tangents must be those of the recorded forward sweep, bit for bit."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat.dual import EAGER, Dual
from remat.pytree import flatten as _flatten
from tests.strategies import programs, run_program

rng = np.random.default_rng(0)
X0, V0 = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
W0, VW = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((4, 4))


def flatten(tree):
    return _flatten(tree, lambda v: isinstance(v, np.ndarray))


def recorded(f):
    """``f``, made to take the recorded path: reading an input's node switches rm.jvp."""

    def g(*args):
        for a in args:
            assert type(a) is Dual and a.node  # a seeded leaf now
        return f(*args)

    return g


def both(f, primals, tangents):
    """rm.jvp of f eagerly and recorded: the two results, checked equal bit for bit."""
    kinds = []

    def eager(*args):
        out = f(*args)
        kinds.append(bool(EAGER))
        return out

    value, tangent = rm.jvp(eager, primals, tangents)
    value_r, tangent_r = rm.jvp(recorded(f), primals, tangents)
    for a, b in zip(flatten(value)[0], flatten(value_r)[0]):
        assert np.array_equal(a, b)
    for a, b in zip(flatten(tangent)[0], flatten(tangent_r)[0]):
        assert np.array_equal(a, b)
    return tangent, kinds[0]


def test_ops_on_duals_carry_their_tangent_and_record_nothing():
    seen = {}

    def f(x):
        with rm.Recorder() as recorder:
            y = rm.exp(rm.sin(x)) * x + 1.0
        seen["records"], seen["y"] = len(recorder.records), y
        return y

    value, tangent = rm.jvp(f, (X0,), (V0,))
    assert seen["records"] == 0 and type(seen["y"]) is Dual
    want = (np.exp(np.sin(X0)) * np.cos(X0) * X0 + np.exp(np.sin(X0))) * V0
    np.testing.assert_allclose(tangent, want, rtol=1e-12)
    assert not EAGER  # the call is over


def test_a_recorded_tensor_switches_to_recording_with_the_same_tangents():
    w = rm.tensor(W0, requires_grad=True)  # f closes over a parameter that requires grad
    tangent, stayed_eager = both(lambda x: rm.tanh(rm.sin(x) @ w) * x, (X0,), (V0,))
    assert not stayed_eager
    np.testing.assert_allclose(
        tangent,
        (1 - np.tanh(np.sin(X0) @ W0) ** 2) * ((np.cos(X0) * V0) @ W0) * X0
        + np.tanh(np.sin(X0) @ W0) * V0,
        rtol=1e-12,
    )


@pytest.mark.parametrize("where", ["checkpoint", "loop", "hvp"])
def test_what_needs_the_tape_switches_and_gets_the_recorded_tangents(where):
    def f(x, w):
        h = rm.sin(x)  # eager so far
        if where == "checkpoint":
            h = rm.checkpoint(lambda h: rm.tanh(h @ w))(h)
        elif where == "loop":
            h = rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h @ w), h, steps=6)
        else:
            h = rm.grad(lambda w: (rm.tanh(h @ w) ** 2).sum())(w)
        return (h * h).sum() + (w * w).sum()

    tangent, stayed_eager = both(f, (X0, W0), (V0, VW))
    assert not stayed_eager

    def plain(x, w):  # the same function with nothing that needs the tape
        h = rm.sin(x)
        if where == "hvp":
            h = rm.grad(lambda w: (rm.tanh(h @ w) ** 2).sum())(w)
        else:
            for _ in range(6 if where == "loop" else 1):
                h = rm.tanh(h @ w)
        return (h * h).sum() + (w * w).sum()

    eps = 1e-6
    up = rm.jvp(plain, (X0 + eps * V0, W0 + eps * VW), (V0, VW))[0]
    down = rm.jvp(plain, (X0 - eps * V0, W0 - eps * VW), (V0, VW))[0]
    np.testing.assert_allclose(tangent, (up - down) / (2 * eps), rtol=1e-5)


def test_a_checkpoint_closing_over_a_dual_carries_its_tangent():
    # the first run of a checkpointed function is untaped: a Dual it reads switches there,
    # so that the recomputation in the forward sweep finds its seeded leaf
    x = rm.tensor(X0)
    got = rm.jvp(lambda w: rm.checkpoint(lambda h: rm.tanh(h @ w))(x), (W0,), (VW,))[1]
    want = rm.jvp(lambda w: rm.tanh(x @ w), (W0,), (VW,))[1]
    np.testing.assert_array_equal(got, want)


def test_a_grad_inside_f_closing_over_a_dual_carries_its_tangent():
    z0 = rng.standard_normal(4)
    # d/dz sum(z * sin(w)) = sin(w): its tangent along v is cos(w) v
    got = rm.jvp(lambda w: rm.grad(lambda z: (z * rm.sin(w)).sum())(z0), (z0,), (V0[0],))[1]
    np.testing.assert_allclose(got, np.cos(z0) * V0[0], rtol=1e-12)


def test_no_grad_inside_f_makes_constants_in_both_modes():
    def f(x):
        with rm.no_grad():
            c = rm.sin(x)  # a constant: no tangent flows through it
        return c * x

    tangent, stayed_eager = both(f, (X0,), (V0,))
    assert stayed_eager
    np.testing.assert_array_equal(tangent, np.sin(X0) * V0)


def test_in_place_updates_stay_eager():
    def euler(x):
        h = x * 1.0
        for _ in range(5):
            h += 0.1 * rm.tanh(h)
        h *= 2.0
        return h

    tangent, stayed_eager = both(euler, (X0,), (V0,))
    assert stayed_eager
    assert not np.array_equal(tangent, 2 * V0)  # the updates did carry tangents


def test_ops_are_counted_and_errors_name_the_op_as_when_recorded():
    with rm.count_ops() as counted:
        rm.jvp(lambda x: rm.sin(x) * 2.0 + x, (X0,), (V0,))
    assert dict(counted) == {"sin": 1, "multiply": 1, "add": 1}
    with pytest.raises(rm.ShapeError, match="add: cannot combine operands of shapes"):
        rm.jvp(lambda x: x + rm.ones(5), (X0,), (V0,))


def test_a_dual_shows_its_tangent_and_is_a_constant_once_the_call_is_over():
    kept = []
    rm.jvp(lambda x: kept.append(rm.sin(x)) or x * 1.0, (np.array([0.0]),), (np.array([2.0]),))
    (d,) = kept
    assert repr(d) == "dual(array([0.]), tangent=array([2.]))"
    later = d * 3.0
    assert type(later) is not Dual and later.node is None and d.node is None
    g = rm.grad(lambda y: (y * d).sum())(np.ones(1))  # used as a constant
    np.testing.assert_array_equal(g, [0.0])


def test_a_dual_first_read_when_recomputed_still_carries_its_tangent():
    # a checkpointed function that reads what it closes over only when run again (in the
    # forward sweep, after f returned): the Dual's leaf carries its tangent there too
    x, calls = rm.tensor(X0), []

    def f(w):
        def block(h):
            calls.append(1)
            return rm.tanh(h @ (w if len(calls) > 1 else rm.tensor(W0)))  # the same values

        return rm.checkpoint(block)(x)

    got = rm.jvp(f, (W0,), (VW,))[1]
    want = rm.jvp(lambda w: rm.tanh(x @ w), (W0,), (VW,))[1]
    assert len(calls) == 2
    np.testing.assert_array_equal(got, want)


def test_duals_used_in_another_thread_carry_their_tangents():
    out = {}

    def f(x):
        worker = threading.Thread(target=lambda: out.setdefault("y", rm.sin(x) * 2.0))
        worker.start()
        worker.join()
        return out["y"] + x

    tangent = rm.jvp(f, (X0,), (V0,))[1]
    np.testing.assert_allclose(tangent, 2 * np.cos(X0) * V0 + V0, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(programs(12), st.integers(0, 2**31))
def test_random_compositions_eager_equal_recorded(program, seed):
    r = np.random.default_rng(seed)
    x0, y0 = r.standard_normal((3, 3)) * 0.5, r.standard_normal((3, 3)) * 0.5
    vx, vy = r.standard_normal((3, 3)), r.standard_normal((3, 3))

    def f(x, y):
        values = run_program(program, [x, y])
        return values[-1].sum() + values[-2]

    both(f, (x0, y0), (vx, vy))


def f_sin_x(x):
    return (rm.sin(x) * x).sum()


def test_a_jvp_inside_a_transform_gives_tensors_it_differentiates():
    x0, v, u = X0[0], V0[0], V0[1]
    hv = rm.hvp(f_sin_x, (x0,), (v,))[0]
    # reverse over forward: the gradient of J v is H v
    np.testing.assert_allclose(rm.grad(lambda x: rm.jvp(f_sin_x, (x,), (v,))[1])(x0), hv)
    # forward over forward: the derivative of J v along u is u . H v
    ff = rm.jvp(lambda x: rm.jvp(f_sin_x, (x,), (v,))[1], (x0,), (u,))[1]
    np.testing.assert_allclose(ff, u @ hv, rtol=1e-12)
    # what f closes over, and the tangent itself, are differentiated too
    w0 = W0[0]
    g = rm.grad(lambda w: rm.jvp(lambda x: (x * rm.sin(w)).sum(), (x0,), (w,))[1])(w0)
    np.testing.assert_allclose(g, np.sin(w0) + w0 * np.cos(w0), rtol=1e-12)  # of sum(w sin w)


def test_a_jvp_of_values_that_require_grad_stays_on_the_tape():
    p = rm.tensor(X0, requires_grad=True)
    value, tangent = rm.jvp(rm.sin, (p,), (V0,))
    assert value.requires_grad and tangent.requires_grad
    (value.sum() + tangent.sum()).backward()
    np.testing.assert_allclose(p.grad, np.cos(X0) - np.sin(X0) * V0, rtol=1e-12)


def test_a_differentiated_jvp_through_a_checkpoint_is_refused_clearly():
    def inner(x):
        return rm.checkpoint(lambda h: rm.tanh(h @ W0))(x).sum()

    with pytest.raises(NotImplementedError, match="cannot go through `checkpoint`"):
        rm.grad(lambda x: rm.jvp(inner, (x,), (V0,))[1])(X0)
