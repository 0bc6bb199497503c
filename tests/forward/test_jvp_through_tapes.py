"""rm.jvp, rm.hvp and rm.grad(rm.grad(f)) through what records on a tape: a
``with rm.Tape():`` block, rm.checkpoint, tape.loop and tape.scan, and what their
functions close over.  Each result equals the program without the tape or
checkpoint (bit for bit where the README promises it), or the call raises an
error that names the call.  Each test guards a bug, said in the comment above it.
"""

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(0)


W0 = rng.standard_normal((3, 3)) * 0.5


X0 = rng.standard_normal((2, 3))


VX = rng.standard_normal((2, 3))


VW = rng.standard_normal((3, 3))


def unrolled(h, w, steps=5):
    for _ in range(steps):
        h = rm.tanh(h @ w)
    return h


# rm.jvp(f) where f records inside `with rm.Tape():` (README's own idiom): the tangent is all
# zeros, should be cos(x)*v; severity: silent wrong gradient.
def test_jvp_through_a_with_tape_block_is_not_zero():
    def f(x):
        with rm.Tape():
            return rm.sin(x)

    got = rm.jvp(f, (X0,), (VX,))[1]
    want = rm.jvp(rm.sin, (X0,), (VX,))[1]
    np.testing.assert_array_equal(got, want)


# rm.hvp(f) where f computes inside `with rm.Tape():`: a wrong (nonzero) Hessian-vector
# product, should equal the hvp without the with-block; severity: silent wrong gradient.
def test_hvp_through_a_with_tape_block():
    def f(x):
        with rm.Tape():
            return (rm.sin(x) ** 2).sum()

    got = rm.hvp(f, (X0,), (VX,))[0]
    want = rm.hvp(lambda x: (rm.sin(x) ** 2).sum(), (X0,), (VX,))[0]
    np.testing.assert_array_equal(got, want)


# rm.jvp through `with rm.Tape(snapshots=2) as tape: tape.loop(...)` (the README form): zero
# tangent, should equal the unrolled loop's; severity: silent wrong gradient.
def test_jvp_through_loop_in_with_tape():
    def f(x, w):
        with rm.Tape(snapshots=2) as tape:
            return tape.loop(lambda h: rm.tanh(h @ w), x, steps=5)

    got = rm.jvp(f, (X0, W0), (VX, VW))[1]
    want = rm.jvp(unrolled, (X0, W0), (VX, VW))[1]
    np.testing.assert_array_equal(got, want)


# rm.jvp wrt a parameter that rm.checkpoint's f closes over (arguments carry no tangent):
# tangent all zeros, should equal the plain function's; severity: silent wrong gradient.
def test_jvp_of_checkpoint_closing_over_the_differentiated_value():
    x = rm.tensor(X0)

    def f(w, wrap):
        return wrap(lambda h: rm.tanh(h @ w))(x)

    got = rm.jvp(lambda w: f(w, rm.checkpoint), (W0,), (VW,))[1]
    want = rm.jvp(lambda w: f(w, lambda g: g), (W0,), (VW,))[1]
    np.testing.assert_array_equal(got, want)


# rm.jvp wrt a parameter a checkpointed tape.loop's step closes over, x_0 constant: tangent
# all zeros, should equal the unrolled loop's; severity: silent wrong gradient.
def test_jvp_of_loop_wrt_closed_over_parameter_only():
    x = rm.tensor(X0)
    got = rm.jvp(
        lambda w: rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h @ w), x, steps=5), (W0,), (VW,)
    )[1]
    want = rm.jvp(lambda w: unrolled(x, w), (W0,), (VW,))[1]
    np.testing.assert_array_equal(got, want)


# rm.jvp wrt a parameter a tape.scan's f closes over, carry and xs constant: zero tangent,
# should equal the unrolled scan's; severity: silent wrong gradient.
def test_jvp_of_scan_wrt_closed_over_parameter_only():
    h0, xs = rm.tensor(X0), rng.standard_normal((4, 2, 3))

    def scanned(w):
        return rm.Tape(snapshots=2).scan(
            lambda c, x: (rm.tanh(c @ w + x), None), h0, rm.tensor(xs)
        )[0]

    def plain(w):
        h = h0
        for t in range(4):
            h = rm.tanh(h @ w + xs[t])
        return h

    got = rm.jvp(scanned, (W0,), (VW,))[1]
    want = rm.jvp(plain, (W0,), (VW,))[1]
    np.testing.assert_array_equal(got, want)


# rm.hvp wrt a parameter rm.checkpoint's f closes over: off by ~6.6 from the plain hvp,
# should be equal; severity: silent wrong gradient.
def test_hvp_of_checkpoint_closing_over_the_differentiated_value():
    x = rm.tensor(X0)

    def loss(wrap):
        return lambda w: (wrap(lambda h: rm.tanh(h @ w))(x) ** 2).sum()

    got = rm.hvp(loss(rm.checkpoint), (W0,), (VW,))[0]
    want = rm.hvp(loss(lambda f: f), (W0,), (VW,))[0]
    np.testing.assert_array_equal(got, want)


# rm.grad(rm.grad(f)) through rm.checkpoint (closed-over w): differs from the plain program in
# the last bits (~7e-15), README promises bit for bit; severity: silent wrong gradient (ulps).
def test_grad_of_grad_through_checkpoint_is_bit_for_bit():
    x = rm.tensor(X0)

    def loss(wrap):
        return lambda w: (wrap(lambda h: rm.tanh(h @ w))(x) ** 2).sum()

    def gg(wrap):
        return rm.grad(lambda w: (rm.grad(loss(wrap))(w) ** 2).sum())(W0)

    np.testing.assert_array_equal(gg(rm.checkpoint), gg(lambda f: f))


# rm.jvp through rm.checkpoint(f) where f runs a checkpointed tape.loop ("checkpoints mix with
# loops in either direction"): NotImplementedError "this checkpointed chain was run outside
# rm.jvp", though it ran inside; should equal the unrolled jvp; severity: false error.
def test_jvp_through_a_loop_inside_a_checkpoint():
    def f(x, w):
        return rm.checkpoint(
            lambda h: rm.Tape(snapshots=1).loop(lambda g: rm.tanh(g @ w), h, steps=4)
        )(x)

    got = rm.jvp(f, (X0, W0), (VX, VW))[1]
    want = rm.jvp(lambda x, w: unrolled(x, w, 4), (X0, W0), (VX, VW))[1]
    np.testing.assert_array_equal(got, want)


# rm.jvp with an integer primal (a count): DTypeError "rm.grad: argument 1 ...", names rm.grad
# though rm.jvp was called; should accept it (as jax) or name rm.jvp; severity: unclear error.
def test_jvp_integer_primal_error_names_jvp():
    with pytest.raises(Exception) as info:
        rm.jvp(lambda x, k: x * k, (X0, np.array(2)), (VX, np.array(0)))
    assert "rm.jvp" in str(info.value)


# rm.jvp with a tangent dict in another key order than the primal dict: ValueError "tangents
# have structure ({'a': Tensor, 'b': Tensor},), primals ({'a': Tensor, 'b': Tensor},)", should
# pair by key; severity: false error.
def test_jvp_tangent_dict_in_another_key_order():
    primal = {"a": np.ones(2), "b": np.ones(2) * 2}
    tangent = {"b": np.ones(2), "a": np.zeros(2)}
    got = rm.jvp(lambda p: p["a"] * p["b"], (primal,), (tangent,))[1]
    np.testing.assert_array_equal(got, np.ones(2))
