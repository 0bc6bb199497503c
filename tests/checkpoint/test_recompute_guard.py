"""A value a recomputation reads must be what the forward sweep read.

rm.checkpoint and the checkpointed chains (tape.loop/chain/scan) save nothing
in their forward sweep and evaluate the steps again in backward.  A parameter
changed in between, by a write through a handle (``w.data[...] += 1``) or by a
new value (``with rm.no_grad(): w -= ...``), would be read by the recomputation
and give the gradient of another function.  These tests pin that backward
refuses it, names the op, and that nothing else is refused.
"""

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(7)
W0 = rng.standard_normal((4, 300)) * 0.1
X0 = rng.standard_normal((2, 4))


def checkpointed(w, x):
    return (rm.checkpoint(lambda h: rm.tanh(h @ w))(x) ** 2).sum()


def chained(w, x):
    tape = rm.Tape(snapshots=1)
    return (tape.chain([lambda h: rm.tanh(h @ w)] + [rm.sin] * 4, x) ** 2).sum()


def looped(w, x):  # every step reads w, through ops that save nothing of it
    return (rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h + w[0, :4]), x, steps=6) ** 2).sum()


def reads_w_unsaved(w, x):  # h + w: add saves neither operand, so only the leaf tells
    return (rm.checkpoint(lambda h: rm.sin(h + w))(x) ** 2).sum()


FORMS = [checkpointed, chained, looped]


def leaves():
    return rm.tensor(W0, requires_grad=True), rm.tensor(X0, requires_grad=True)


def grads(form, w, x):
    form(w, x).backward()
    return w.grad, x.grad


@pytest.mark.parametrize("form", FORMS)
def test_write_through_a_handle_taken_before_the_forward(form):
    w, x = leaves()
    handle = w.data  # handed out before the forward sweep: the saves' check cannot see it
    loss = form(w, x)
    handle[0, :] += 1.0
    refused = (rm.BackwardError, rm.ReplayError)
    with pytest.raises(refused, match="changed in place after the forward"):
        loss.backward()


@pytest.mark.parametrize("form", FORMS + [reads_w_unsaved])
def test_write_through_a_handle_taken_after_the_forward(form):
    w, x = leaves()
    if form is reads_w_unsaved:
        w = rm.tensor(rng.standard_normal((2, 4)), requires_grad=True)
    loss = form(w, x)
    w.data[1, 2] += 3.0
    with pytest.raises((rm.BackwardError, rm.ReplayError), match="after the forward sweep"):
        loss.backward()


@pytest.mark.parametrize("form", FORMS)
def test_a_new_value_for_a_parameter_after_the_forward(form):
    w, x = leaves()
    loss = form(w, x)
    with rm.no_grad():
        w -= 0.1
    refused = (rm.BackwardError, rm.ReplayError)
    with pytest.raises(refused, match="given a new value after the forward"):
        loss.backward()


@pytest.mark.parametrize("form", FORMS)
def test_data_assignment_after_the_forward(form):
    w, x = leaves()
    loss = form(w, x)
    w.data = W0 * 2.0
    with pytest.raises((rm.BackwardError, rm.ReplayError), match="given a new value"):
        loss.backward()


def test_store_all_keeps_the_gradient_of_the_old_value():
    """Without recomputation a backward uses what it saved: the documented rule."""
    w, x = leaves()
    loss = (rm.Tape().chain([lambda h: rm.tanh(h @ w)] + [rm.sin] * 4, x) ** 2).sum()
    with rm.no_grad():
        w -= 0.1
    loss.backward()
    w2, x2 = leaves()  # the old value, never changed
    (rm.Tape().chain([lambda h: rm.tanh(h @ w2)] + [rm.sin] * 4, x2) ** 2).sum().backward()
    np.testing.assert_array_equal(w.grad, w2.grad)


@pytest.mark.parametrize("form", FORMS)
def test_handles_and_new_values_outside_the_window_are_fine(form):
    """Reading .data, writing before the forward, and updating after backward: no error,
    and the gradients are those of an untouched run, bit for bit."""
    w, x = leaves()
    w.data[0, 0] += 0.0  # a handle, written before the forward sweep
    with rm.no_grad():
        w += 0.0  # a new value before the forward sweep
    other = rm.tensor(np.ones(3), requires_grad=True)
    loss = form(w, x)
    _ = w.data  # read, not written
    with rm.no_grad():
        other -= 1.0  # another leaf gets a new value: not one the recomputation reads
    loss.backward()
    w2, x2 = leaves()
    expected = grads(form, w2, x2)
    np.testing.assert_array_equal(w.grad, expected[0])
    np.testing.assert_array_equal(x.grad, expected[1])
    with rm.no_grad():
        w -= 0.1  # after backward: the next iteration's business
    form(w, x).backward()


# -- the replay check's sample ----------------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 64), (16, 48), (4, 60)])
def test_the_replay_check_sees_a_change_in_any_one_column(shape):
    """A step whose recomputation differs in one column only (Python-side state) is
    refused whichever the column: the sample's prime stride visits every column."""
    for column in range(shape[1]):
        runs = [0]
        bump = np.zeros(shape)
        bump[:, column] = 1e-3

        def step(h):
            runs[0] += 1
            return rm.sin(h) + (bump if runs[0] > 6 else 0.0)  # differs once recomputed

        x = rm.tensor(np.full(shape, 0.5), requires_grad=True)
        loss = rm.Tape(snapshots=2).loop(step, x, steps=6).sum()
        with pytest.raises(rm.ReplayError, match="different values"):
            loss.backward()


def test_the_replay_check_sees_a_change_in_any_one_row():
    shape = (40, 70)
    for row in range(shape[0]):
        runs = [0]
        bump = np.zeros(shape)
        bump[row] = 1e-3

        def step(h):
            runs[0] += 1
            return rm.sin(h) + (bump if runs[0] > 6 else 0.0)

        x = rm.tensor(np.full(shape, 0.5), requires_grad=True)
        with pytest.raises(rm.ReplayError, match="different values"):
            rm.Tape(snapshots=2).loop(step, x, steps=6).sum().backward()


# -- code that branches on rm.grad_enabled() ----------------------------------------------------
@pytest.mark.parametrize("tape", [rm.Tape(snapshots=2), rm.Tape(snapshots=3, schedule="online")])
def test_loop_steps_see_grad_enabled_in_every_run(tape):
    """Advances run untaped, taped steps taped: both must see the same grad mode."""
    seen = []

    def step(h):
        seen.append(rm.grad_enabled())
        return rm.sin(h) * (2.0 if rm.grad_enabled() else 3.0)

    x = rm.tensor(np.full(3, 0.5), requires_grad=True)
    tape.loop(step, x, steps=8).sum().backward()
    assert all(seen) and len(seen) > 8  # steps were recomputed, all saw gradients on
    y = rm.tensor(np.full(3, 0.5), requires_grad=True)
    out = y
    for _ in range(8):
        out = rm.sin(out) * 2.0
    out.sum().backward()
    np.testing.assert_array_equal(x.grad, y.grad)


def test_no_grad_inside_a_checkpoint_is_still_off():
    def f(h):
        with rm.no_grad():
            assert not rm.grad_enabled()
        return rm.tanh(h)

    x = rm.tensor(np.ones(3), requires_grad=True)
    rm.checkpoint(f)(x).sum().backward()
    np.testing.assert_array_equal(x.grad, 1 - np.tanh(1.0) ** 2)


def test_second_order_through_a_checkpoint_refuses_a_changed_parameter():
    """rm.grad of rm.grad splices the recomputation into the graph: checked the same way."""
    w = rm.tensor(rng.standard_normal((4, 4)) * 0.3, requires_grad=True)
    x = rm.tensor(X0, requires_grad=True)
    block = rm.checkpoint(lambda h: rm.tanh(h @ w))

    def inner(h):
        loss = (block(h) ** 2).sum()
        w.data[0, 0] += 1.0  # between the checkpoint's forward and its (recorded) backward
        return loss

    with pytest.raises(rm.BackwardError, match="changed in place after the forward sweep"):
        rm.grad(lambda h: (rm.grad(inner)(h) ** 2).sum())(x)
