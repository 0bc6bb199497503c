"""What a loop step may do: change a parameter before backward (refused), keep values
aside (refused unless exact), update its state in place, run loops, tapes and
threads inside.  A gradient is either exactly the unrolled program's or refused
with a clear error; each test guards a bug, said in the comment above it.
"""

import contextvars

import numpy as np
import pytest

import remat as rm

from ..helpers import right_or_refused, unrolled

X0 = np.array([0.5, 1.0])


W0 = np.array([0.7, -0.3])


# --- a loop recomputes from its closure: a parameter changed before backward -----------------


@pytest.mark.parametrize("change", ["no_grad -=", "data setter", "data write"])
def test_a_parameter_changed_between_loop_forward_and_backward_is_refused(change):
    # revolve recomputes steps with the parameter's *new* value: silently wrong gradients
    want = unrolled(lambda s, b: rm.sin(s + b), 8, X0, W0)
    x, b = rm.tensor(X0, requires_grad=True), rm.tensor(W0, requires_grad=True)

    def compute():
        nonlocal b
        loss = rm.Tape(snapshots=2).loop(lambda s: rm.sin(s + b), x, steps=8).sum()
        if change == "no_grad -=":
            with rm.no_grad():
                b -= 10.0
        elif change == "data setter":
            b.data = W0 + 10.0
        else:
            b.data[:] += 10.0
        loss.backward()
        return x.grad, b.grad

    right_or_refused(compute, want)


# --- values escaping a step ------------------------------------------------------------------


@pytest.mark.parametrize("schedule", ["revolve", "store_all"])
def test_a_step_keeping_its_input_state_aside_is_refused(schedule):
    # the step's input (a loop-made leaf, or a bare constant when untaped) escapes unmarked
    x = rm.tensor(X0, requires_grad=True)
    s = x
    kept = []
    for _ in range(6):
        kept.append(s)
        s = rm.sin(s)
    (s.sum() + kept[2].sum()).backward()
    want = [x.grad]

    def compute():
        x = rm.tensor(X0, requires_grad=True)
        kept = []

        def step(s):
            kept.append(s)
            return rm.sin(s)

        out = rm.Tape(snapshots=2, schedule=schedule).loop(step, x, steps=6)
        (out.sum() + kept[2].sum()).backward()
        return [x.grad]

    right_or_refused(compute, want)


@pytest.mark.parametrize(
    "use",
    [
        lambda v: rm.clip(rm.tensor([-5.0, -5.0]), v, None),
        lambda v: rm.random.normal(loc=v, size=2),
    ],
    ids=["clip bound", "random loc"],
)
def test_an_escaped_value_given_as_a_constant_operand_is_refused(use):
    # constant slots (clip bounds, random parameters) never check the StepValue marker: a value
    # escaping an untaped step is used as a constant and its gradient is silently dropped
    # (store_all refuses the same program)
    x = rm.tensor(X0, requires_grad=True)
    kept = []

    def step(s):
        kept.append(rm.sin(s))
        return kept[-1]

    out = rm.Tape(snapshots=2).loop(step, x, steps=6)
    with pytest.raises((rm.EscapeError, TypeError)):
        (out.sum() + use(kept[1]).sum()).backward()


def test_a_value_recorded_under_enable_grad_in_an_untaped_step_is_refused_when_it_escapes():
    # `with rm.enable_grad():` inside a step run untaped (Advance) makes plain Records, not
    # StepRecords: the escaped value is reversed as if the state were a constant, silently
    # (store_all refuses the same program with an EscapeError)
    x, w = rm.tensor(X0, requires_grad=True), rm.tensor(W0, requires_grad=True)
    kept = []

    def step(s):
        with rm.enable_grad():
            y = s * w
        kept.append(y)
        return rm.sin(y)

    out = rm.Tape(snapshots=2).loop(step, x, steps=6)
    with pytest.raises(rm.EscapeError):
        (out.sum() + kept[1].sum()).backward()


def test_a_gradient_computed_by_rm_grad_in_an_untaped_step_is_refused_when_it_escapes():
    # in an untaped step rm.grad returns a bare ndarray (no StepValue mark can ride on it): kept
    # aside and used by the loss it is a silent constant; store_all refuses the same program
    def energy(u):
        return (u * u * u).sum()

    x = rm.tensor(X0, requires_grad=True)
    kept = []

    def step(s):
        kept.append(rm.grad(energy)(s))
        return s - 0.1 * kept[-1]

    out = rm.Tape(snapshots=2).loop(step, x, steps=6)
    with pytest.raises((rm.EscapeError, TypeError)):
        (out.sum() + rm.sum(kept[1])).backward()


def test_a_step_updating_its_state_with_augmented_assignment_is_not_refused():
    # false error (regression of 857c666): in taped steps the state is a loop-made leaf, so the
    # symplectic Euler `p -= dt * q; q += dt * p` is refused with advice (do it under no_grad)
    # that, if followed, silently passes the state's gradient through unchanged
    def step(state):
        q, p = state
        p -= 0.1 * q
        q += 0.1 * p
        return q, p

    x = rm.tensor(X0, requires_grad=True)
    q, p = x * 1.0, rm.tensor(np.zeros(2))
    for _ in range(4):
        q, p = step((q, p))
    q.sum().backward()
    want = x.grad
    x = rm.tensor(X0, requires_grad=True)
    out = rm.Tape(snapshots=2).loop(step, (x, rm.tensor(np.zeros(2))), steps=4)
    out[0].sum().backward()
    np.testing.assert_allclose(x.grad, want)


def test_a_function_given_to_rm_grad_may_update_its_argument_with_augmented_assignment():
    # false error (regression of 857c666): rm.grad's argument is a leaf it made itself, so
    # `x *= 2` inside f is refused as if it were the user's parameter (it gave [8, 16] before)
    def f(x):
        x *= 2.0
        return (x * x).sum()

    np.testing.assert_allclose(rm.grad(f)(np.array([1.0, 2.0])), [8.0, 16.0])


# --- loops in loops, tapes in steps (regressions of 857c666) ---------------------------------


@pytest.mark.parametrize("inner", ["revolve", "store_all"])
def test_a_loop_nested_in_a_loop_step_gets_the_unrolled_gradient(inner):
    # the inner loop's records go to the inner tape, are never retagged StepRecord, and the
    # outer step's sweep hands them to the outermost sweep: x.grad comes out zero
    want = unrolled(lambda s, w: rm.sin(s * w), 12, X0, W0)
    x, w = rm.tensor(X0, requires_grad=True), rm.tensor(W0, requires_grad=True)

    def outer(s):
        return rm.Tape(snapshots=2, schedule=inner).loop(lambda u: rm.sin(u * w), s, steps=3)

    rm.Tape(snapshots=2).loop(outer, x, steps=4).sum().backward()
    np.testing.assert_allclose(x.grad, want[0])
    np.testing.assert_allclose(w.grad, want[1])


def test_a_tape_opened_inside_a_loop_step_keeps_the_gradient():
    # `with rm.Tape():` inside a step (to print what it does) silently zeroes the gradient
    want = unrolled(lambda s: rm.sin(s), 4, X0)
    x = rm.tensor(X0, requires_grad=True)

    def step(s):
        with rm.Tape():
            return rm.sin(s)

    rm.Tape(snapshots=2).loop(step, x, steps=4).sum().backward()
    np.testing.assert_allclose(x.grad, want[0])


def test_a_step_that_computes_in_a_worker_thread_keeps_the_gradient():
    # the worker's records go to its own (empty) context, not the step's recorder, so they are
    # never retagged StepRecord and the step's sweep hands them away: x.grad comes out zero
    from concurrent.futures import ThreadPoolExecutor

    want = unrolled(lambda s: rm.sin(s) * 1.0, 4, X0)
    x = rm.tensor(X0, requires_grad=True)
    with ThreadPoolExecutor(1) as pool:  # the step's context goes with the work (README)
        rm.Tape(snapshots=2).loop(
            lambda s: pool.submit(contextvars.copy_context().run, rm.sin, s).result() * 1.0,
            x,
            steps=4,
        ).sum().backward()
    np.testing.assert_allclose(x.grad, want[0])


def test_random_numbers_drawn_in_a_worker_thread_replay_when_a_step_is_recomputed():
    # each thread has its own generator and only the loop thread's state is snapshotted: a
    # step drawing its noise in a worker sees other numbers when recomputed, silently
    from concurrent.futures import ThreadPoolExecutor

    def gradient(tape):
        x = rm.tensor(X0, requires_grad=True)
        with ThreadPoolExecutor(1) as pool:  # a fresh worker: its generator starts at seed 0

            def step(s):
                noise = pool.submit(rm.random.normal, size=2).result()
                return rm.sin(s * (1.0 + 0.5 * noise))

            tape.loop(step, x, steps=6).sum().backward()
        return x.grad

    right_or_refused(lambda: [gradient(rm.Tape(snapshots=2))], [gradient(rm.Tape())])


def test_an_inner_loop_may_use_a_constant_made_in_the_outer_step():
    # false EscapeError: the inner step runs under its own StepValue, not the outer one's
    c0 = np.array([1.0, 2.0]) * 0.5
    want = unrolled(lambda s: rm.sin(s * rm.tensor(c0)), 12, X0)
    x = rm.tensor(X0, requires_grad=True)

    def outer(s):
        c = rm.tensor([1.0, 2.0]) * 0.5  # a constant computed inside the outer step
        return rm.Tape(snapshots=2).loop(lambda u: rm.sin(u * c), s, steps=3)

    rm.Tape(snapshots=2).loop(outer, x, steps=4).sum().backward()
    np.testing.assert_allclose(x.grad, want[0])


def test_values_logged_under_no_grad_inside_a_step_can_be_averaged_afterwards():
    # false EscapeError: sum(energies) / n (to print a mean) is refused, and its advice
    # ("or compute under rm.no_grad()") is what the step already did
    x = rm.tensor(X0, requires_grad=True)
    energies = []

    def step(s):
        with rm.no_grad():
            energies.append((s * s).sum())
        return rm.sin(s)

    out = rm.Tape(snapshots=2).loop(step, x, steps=5)
    out.sum().backward()
    mean = sum(energies) / len(energies)
    assert np.isfinite(float(mean))
