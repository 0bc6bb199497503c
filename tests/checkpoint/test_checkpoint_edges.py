"""rm.checkpoint (and checkpointed chains) at their edges: rm.grad inside, the replay
switch inside loop steps, grad_enabled in the first run, values escaping, static
outputs, failures while recomputing, arguments the caller changes later, and
parameters changed in place before backward.  Each gives store-all's result or a
clear error; each test guards a bug, said in the comment above it.
"""

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(0)


W0 = rng.standard_normal((3, 3)) * 0.5


X0 = rng.standard_normal((2, 3))


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


# rm.checkpoint(f), then w.data changed in place before backward (f closes over w): was no
# error and a gradient from the new w (the sampled replay check missed the column); store-all
# raises BackwardError ("changed in place").  Fixed: the recomputation checks what it reads
# against the forward sweep's moment (executor.Forward; checkpoint/test_recompute_guard.py).
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
