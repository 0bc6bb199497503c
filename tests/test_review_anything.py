"""Adversarial review: checkpoint / chain / scan / pytrees / replay check / jvp, hvp.

Each test is a confirmed problem: it fails on the code as reviewed.
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


# rm.grad called inside a checkpointed f on an argument requiring grad (gradient penalty):
# StepOutputError "leaf 0 is a ndarray", without checkpoint it works (rm.grad returns Tensors
# there); severity: false error (with a misleading message).
def test_rm_grad_inside_checkpoint():
    def inner(x, w):
        return rm.grad(lambda y: (rm.tanh(y @ w) ** 2).sum())(x)

    results = []
    for wrap in (lambda f: f, rm.checkpoint):
        x, w = rm.tensor(X0, requires_grad=True), rm.tensor(W0, requires_grad=True)
        (wrap(inner)(x, w) ** 2).sum().backward()
        results.append((x.grad, w.grad))
    (gx, gw), (cx, cw) = results
    np.testing.assert_array_equal(cx, gx)
    np.testing.assert_array_equal(cw, gw)


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


# rm.checkpoint(f) inside a tape.loop step, Tape(check_replay=False), f not bit-reproducible
# (the documented use of the switch): ReplayError, should run (the switch is ignored inside
# loop steps, whose open tape is a plain Recorder); severity: false error.
def test_check_replay_false_reaches_checkpoints_inside_loop_steps():
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)
    calls = [0]

    def noisy(h):
        calls[0] += 1
        return rm.tanh(h @ w) * (1.0 + 1e-12 * calls[0])

    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    with rm.Tape(snapshots=2, check_replay=False) as tape:
        h = tape.loop(rm.checkpoint(noisy), x, steps=6)
    h.sum().backward()
    assert x.grad is not None


# rm.checkpoint(f) with f branching on rm.grad_enabled() (train-mode logic): the forward value is
# f's no-grad branch (3x, store-all gives 2x) and backward raises ReplayError; should give
# store-all's value and gradient; severity: false error (and a different forward value).
# Fixed: grad_enabled() is True in untaped runs too.
def test_checkpoint_first_run_sees_grad_enabled():
    def f(h):
        return h * 2 if rm.grad_enabled() else h * 3

    x = rm.tensor(np.ones(3), requires_grad=True)
    out = rm.checkpoint(f)(x)
    np.testing.assert_array_equal(out.data, f(x).data)
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, np.full(3, 2.0))


# tape.chain whose middle state holds no Tensor (h -> () -> w * 2 -> tanh), any schedule incl.
# store-all: LoopError "raised IndexError ... list index out of range" blaming a step, should
# give the unrolled gradient (or name the empty state); severity: unclear error.  Fixed: the
# reverse sweep makes zero cotangents where the inputs are, not beside a step's first output.
@pytest.mark.parametrize("schedule", ["store_all", "revolve"])
def test_chain_through_an_empty_state(schedule):
    def run(chained):
        w = rm.tensor(W0, requires_grad=True)
        x = rm.tensor(X0, requires_grad=True)
        fs = [lambda h: (), lambda s: w * 2, rm.tanh]
        if chained:
            tape = rm.Tape() if schedule == "store_all" else rm.Tape(snapshots=1)
            out = tape.chain(fs, x)
        else:
            out = x
            for f in fs:
                out = f(out)
        out.sum().backward()
        return w.grad

    np.testing.assert_array_equal(run(True), run(False))


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


# rm.checkpoint(f), then w.data changed in place before backward (f closes over w): was no
# error and a gradient from the new w (the sampled replay check missed the column); store-all
# raises BackwardError ("changed in place").  Fixed: the recomputation checks what it reads
# against the forward sweep's moment (executor.Forward; tests/test_recompute_guard.py).
def test_checkpoint_closed_over_parameter_changed_in_place_before_backward():
    w = rm.tensor(rng.standard_normal((4, 1000)) * 0.1, requires_grad=True)
    x = rm.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    loss = (rm.checkpoint(lambda h: rm.tanh(h @ w))(x) ** 2).sum()
    w.data[:, 1] += 5.0
    with pytest.raises((rm.BackwardError, rm.ReplayError)):
        loss.backward()


# rm.checkpoint(f) where f keeps an intermediate in a list and the caller uses it in the loss:
# silently no gradient through it (x.grad differs from store-all); tape.loop raises EscapeError
# for the same thing; severity: silent wrong gradient.
def test_value_escaping_a_checkpoint_is_refused_or_exact():
    w = rm.tensor(W0, requires_grad=True)
    results = []
    for wrap in (lambda f: f, rm.checkpoint):
        saved = []

        def f(h):
            a = rm.tanh(h @ w)
            saved.append(a)
            return a * 2

        x = rm.tensor(X0, requires_grad=True)
        out = wrap(f)(x)
        try:
            (out.sum() + (saved[0] ** 2).sum()).backward()
        except rm.EscapeError:
            return  # refused: fine
        results.append(x.grad)
    np.testing.assert_array_equal(results[1], results[0])


# rm.checkpoint(f) returning (h, float("nan")) as a static aux output: ReplayError "returned
# structure (Tensor, nan) instead of (Tensor, nan)", should run; severity: false error.
def test_checkpoint_static_nan_output():
    w = rm.tensor(np.eye(3), requires_grad=True)
    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    out, aux = rm.checkpoint(lambda h: (rm.tanh(h @ w), float("nan")))(x)
    out.sum().backward()
    assert x.grad is not None


class Info:  # a plain aux object (no __eq__)
    def __init__(self, n):
        self.n = n


# rm.checkpoint(f) returning (h, Info(3)), a fresh aux object, even under check_replay=False:
# ReplayError "returned structure ... instead of ..."; should run (store-all runs); severity:
# false error.  Fixed: statics of a class with no == of its own compare by class.
def test_checkpoint_static_object_output():
    w = rm.tensor(np.eye(3), requires_grad=True)
    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    with rm.Tape(check_replay=False):
        out, info = rm.checkpoint(lambda h: (rm.tanh(h @ w), Info(3)))(x)
    out.sum().backward()
    assert info.n == 3 and x.grad is not None


# tape.scan over float32 xs (requires grad) with a float64 carry, xs also used outside the
# scan: xs.grad differs from the unrolled program by 1 float32 ulp (the scan casts its xs
# gradient buffer to float32 before it meets the other float64 contribution); severity:
# silent wrong gradient (ulps).
def test_scan_float32_xs_gradient_is_bit_for_bit():
    r = np.random.default_rng(1)
    wa = r.standard_normal((3, 3)) * 0.5
    xsa = r.standard_normal((6, 2, 3)).astype(np.float32)

    def run(scan):
        w = rm.tensor(wa, requires_grad=True)
        xs = rm.tensor(xsa, requires_grad=True)
        h0 = rm.tensor(np.ones((2, 3)) * 0.1)
        if scan:
            h, _ = rm.Tape().scan(lambda c, x: (rm.tanh(c @ w) * x + x * 0.3, None), h0, xs)
        else:
            h = h0
            for i in range(6):
                h = rm.tanh(h @ w) * xs[i] + xs[i] * 0.3
        loss = (h**2).sum() + (rm.sin(xs) * rm.tensor(np.float64(1.7))).sum()
        loss.backward()
        return xs.grad

    np.testing.assert_array_equal(run(True), run(False))


# tape.loop whose step builds its dict state in another insertion order ({'c','h'} for
# {'h','c'}): StepOutputError "structure {'c': Tensor, 'h': Tensor} instead of {'c': Tensor,
# 'h': Tensor}", should run (dicts are equal; pytree docs: "equal dicts flatten alike");
# severity: false error (self-contradictory message).
def test_loop_state_dict_in_another_key_order():
    w = rm.tensor(np.eye(2) * 0.5, requires_grad=True)
    s0 = {"h": rm.tensor(np.ones(2), requires_grad=True), "c": rm.tensor(np.ones(2))}
    out = rm.Tape(snapshots=1).loop(
        lambda s: {"c": s["c"] * 2, "h": rm.tanh(s["h"] @ w)}, s0, steps=3
    )
    out["h"].sum().backward()
    assert w.grad is not None


# rm.jvp with a tangent dict in another key order than the primal dict: ValueError "tangents
# have structure ({'a': Tensor, 'b': Tensor},), primals ({'a': Tensor, 'b': Tensor},)", should
# pair by key; severity: false error.
def test_jvp_tangent_dict_in_another_key_order():
    primal = {"a": np.ones(2), "b": np.ones(2) * 2}
    tangent = {"b": np.ones(2), "a": np.zeros(2)}
    got = rm.jvp(lambda p: p["a"] * p["b"], (primal,), (tangent,))[1]
    np.testing.assert_array_equal(got, np.ones(2))


# tape.scan over a 1-D xs whose f reads x.data (x is a 0-d slice): TypeError "cannot create
# weak reference to 'numpy.float64' object" from remat/guard.py, should give the value (x[i]
# of a 1-D xs is a numpy scalar, not an array); severity: unclear error (a crash).
def test_scan_over_1d_xs_step_reads_data():
    h, ys = rm.Tape().scan(
        lambda c, x: (c * x if float(x.data) > 0 else c, x),
        rm.tensor(1.0),
        rm.tensor(np.arange(3.0)),
    )
    np.testing.assert_array_equal(ys.data, np.arange(3.0))


# rm.checkpoint(f) where f raises while recomputed in backward: bare KeyError('boom') from deep in
# backward with nothing naming the checkpoint (tape.loop wraps the same in a LoopError naming the
# step); severity: unclear error.
def test_checkpoint_recompute_failure_names_the_checkpoint():
    w = rm.tensor(np.eye(3), requires_grad=True)
    calls = [0]

    def f(h):
        calls[0] += 1
        if calls[0] > 1:
            raise KeyError("boom")
        return rm.tanh(h @ w)

    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    loss = rm.checkpoint(f)(x).sum()
    with pytest.raises(Exception, match=r"rm\.checkpoint\(f\)"):
        loss.backward()


# rm.checkpoint(f)(x, c) with c a NumPy array the caller changes after the call (as store-all
# allows: "arrays given as constants are copied"): the checkpoint kept c itself, so backward
# recomputes with the new c: n=3 ReplayError (false error), n=2000 a silently different
# gradient (the sampled check misses it); should equal store-all; severity: silent wrong gradient.
@pytest.mark.parametrize("n", [3, 2000])
def test_checkpoint_copies_array_arguments(n):
    r = np.random.default_rng(0)
    wa = r.standard_normal((4, n)) * 0.1
    grads = []
    for wrap in (lambda f: f, rm.checkpoint):
        w = rm.tensor(wa, requires_grad=True)
        c = np.ones((2, n))
        x = rm.tensor(np.ones((2, 4)), requires_grad=True)
        loss = (wrap(lambda h, c: rm.tanh(h @ w) * c)(x, c) ** 2).sum()
        c[0, 1] = 7.0
        loss.backward()
        grads.append(x.grad)
    np.testing.assert_array_equal(grads[1], grads[0])


# tape.loop from a NumPy array x0 that the caller changes after the loop, before backward: the
# loop kept x0 itself: Tape() (store-all!) gives a silently different W.grad than the unrolled
# program (which copies constant arrays), Tape(snapshots=1) raises ReplayError blaming step 2;
# severity: silent wrong gradient.
@pytest.mark.parametrize("snapshots", [None, 1])
def test_loop_copies_an_array_initial_state(snapshots):
    grads = []
    for form in ("plain", "loop"):
        w = rm.tensor(W0, requires_grad=True)
        x0 = np.ones((2, 3))
        if form == "plain":
            h = unrolled(x0, w, 4)
        else:
            h = rm.Tape(snapshots=snapshots).loop(lambda h: rm.tanh(h @ w), x0, steps=4)
        loss = (h**2).sum()
        x0[0, 0] = 5.0
        loss.backward()
        grads.append(w.grad)
    np.testing.assert_array_equal(grads[1], grads[0])


# tape.scan(f, None, xs), a carry-free scan (jax.lax.scan's map idiom, README "as
# jax.lax.scan"): TypeError "the state must be a Tensor or a pytree holding Tensors", should
# scan and give the unrolled gradient; severity: false error.  Fixed: a scan's carry may hold
# no Tensor.
@pytest.mark.parametrize("init", [None, ()])
def test_scan_without_a_carry(init):
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)
    xs = rm.tensor(np.ones((4, 2, 3)))
    _, ys = rm.Tape(snapshots=1).scan(lambda c, x: (c, rm.tanh(x @ w)), init, xs)
    ys.sum().backward()
    w2 = rm.tensor(np.eye(3) * 0.5, requires_grad=True)
    rm.stack([rm.tanh(xs[i] @ w2) for i in range(4)]).sum().backward()
    np.testing.assert_array_equal(w.grad, w2.grad)


# tape.chain([tanh(h @ w), sin x5]) under revolve/online/periodic, then w.data changed in place
# before backward: was no error, the first layer recomputed with the new w (the sampled replay
# check missed one changed column); store-all and the unrolled program raise BackwardError.
# Fixed as the checkpoint case above.
@pytest.mark.parametrize("schedule", ["revolve", "online", "periodic"])
def test_chain_parameter_changed_in_place_before_backward(schedule):
    r = np.random.default_rng(0)
    w = rm.tensor(r.standard_normal((4, 1000)) * 0.1, requires_grad=True)
    x = rm.tensor(r.standard_normal((2, 4)), requires_grad=True)
    fs = [lambda h: rm.tanh(h @ w)] + [rm.sin] * 5
    loss = (rm.Tape(snapshots=1, schedule=schedule).chain(fs, x) ** 2).sum()
    w.data[:, 1] += 5.0
    with pytest.raises((rm.BackwardError, rm.ReplayError, rm.LoopError)):
        loss.backward()
