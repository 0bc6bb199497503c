"""The states and inputs of tape.loop, tape.chain and tape.scan: an empty middle
state, dicts in another key order, float32 xs under a float64 carry, 1-D xs,
a scan with no carry, and an initial state the caller changes after the loop.
Each gives the unrolled program's gradient; each test guards a bug, said in the
comment above it.
"""

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(0)


W0 = rng.standard_normal((3, 3)) * 0.5


X0 = rng.standard_normal((2, 3))


def unrolled(h, w, steps=5):
    for _ in range(steps):
        h = rm.tanh(h @ w)
    return h


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
