"""Reversible loops: tape.loop(step, state, steps=n, inverse=inv) recomputes states backwards.

Checked on a RevNet additive-coupling block (Gomez et al. 2017) against
store-all in float64, for memory that does not grow with n, for the
reconstruction error in the stats, and for the errors of a bad inverse.
"""

import re

import numpy as np
import pytest

import remat as rm
from remat import schedules

RNG = np.random.default_rng(3)
W1 = RNG.normal(size=(8, 8)) * 0.3
W2 = RNG.normal(size=(8, 8)) * 0.3


def revnet(w1, w2):
    """An additive coupling block, ``(a, b) -> (a + F(b), b + G(a + F(b)))``, and its inverse."""

    def F(x):
        return rm.tanh(x @ w1)

    def G(x):
        return rm.tanh(x @ w2)

    def step(state):
        a, b = state
        a = a + F(b)
        return (a, b + G(a))

    def inverse(state):
        a, b = state
        b = b - G(a)
        return (a - F(b), b)

    return step, inverse


def grads(steps, inverse=True, **tape_kwargs):
    w1, w2 = rm.tensor(W1, requires_grad=True), rm.tensor(W2, requires_grad=True)
    a = rm.tensor(np.linspace(-1, 1, 32).reshape(4, 8), requires_grad=True)
    b = rm.tensor(np.cos(np.arange(32.0)).reshape(4, 8), requires_grad=True)
    step, inv = revnet(w1, w2)
    with rm.Tape(**tape_kwargs) as tape:
        a_n, b_n = tape.loop(step, (a, b), steps=steps, inverse=inv if inverse else None)
        loss = (a_n * a_n).sum() + (b_n**3).sum()
    loss.backward()
    return [t.grad for t in (w1, w2, a, b)], tape


@pytest.mark.parametrize("tape_kwargs", [{}, {"snapshots": 1}, {"snapshots": 4}])
def test_revnet_gradients_match_store_all(tape_kwargs):
    expected, _ = grads(40, inverse=False)
    got, tape = grads(40, **tape_kwargs)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    stats = tape.stats
    assert stats.schedule == "Reversible"
    assert stats.peak_snapshots <= tape_kwargs.get("snapshots", 2)
    assert stats.forward_steps == 2 * 40
    assert stats.reconstruction_error is not None and stats.reconstruction_error < 1e-12
    assert "reconstruction error" in str(stats)


def test_memory_does_not_grow_with_the_loop_length():
    peaks = [grads(n, snapshots=2)[1].stats.peak_bytes for n in (10, 40, 160)]
    assert peaks[0] == peaks[1] == peaks[2]
    store_all = grads(40, inverse=False)[1].stats.peak_bytes
    assert store_all > 10 * peaks[1]


def test_with_snapshots_the_exact_states_are_spaced_along_the_chain():
    plan = schedules.Reversible(100, 5)
    assert plan.anchors == (0, 24, 49, 74)
    sim = schedules.simulate(plan)
    assert sim.peak_snapshots == 5 and sim.peak_tapes == 1
    assert sim.forward_steps == 200 and sim.inversions == 100


def test_invert_from_the_wrong_state_is_a_schedule_error():
    bad = [
        schedules.Advance(0, 2),
        schedules.Invert(0, 1),
    ]

    class Bad:
        steps, snapshots = 2, 1

        def __iter__(self):
            return iter(bad)

    with pytest.raises(schedules.ScheduleError, match="must be x_1"):
        schedules.simulate(Bad())


def drifting(scale, error):
    """x -> scale x, with an inverse off by a relative ``error`` each time."""

    def step(x):
        return x * scale

    def inverse(x):
        return x * ((1 + error) / scale)

    return step, inverse


def test_drift_beyond_the_tolerance_raises_and_stored_states_bound_it():
    step, inverse = drifting(1.0, 1e-10)  # 1e-10 per inversion: 1.5e-8 after 150
    x = rm.tensor(np.ones(5), requires_grad=True)
    with rm.Tape() as tape:
        loss = tape.loop(step, x, steps=400, inverse=inverse).sum()
    with pytest.raises(rm.LoopError, match="drifted"):
        loss.backward()  # the check at x_0 passed: one inversion is within the tolerance
    x.grad = None
    with rm.Tape(snapshots=8) as tape:
        loss = tape.loop(step, x, steps=400, inverse=inverse).sum()
    loss.backward()
    error = tape.stats.reconstruction_error
    assert 45e-10 < error < 65e-10  # about 399 / 7 = 57 inversions since the last exact state
    np.testing.assert_allclose(x.grad, np.ones(5), rtol=1e-6)


def cubic():
    """x -> x^3 - 1/2, with the inverse (x + 1/2)^(1/3) taken by a power: NaN below -1/2."""

    def step(x):
        return x * x * x - 0.5

    def inverse(x):
        return (x + 0.5) ** (1.0 / 3.0)

    return step, inverse


# guards: a NaN from the inverse passed the drift check (max(0.0, nan) is 0.0), the gradient
# came out NaN with no error, and reconstruction_error read 0.0
@pytest.mark.parametrize("snapshots", [1, 2, 4])
def test_an_inverse_that_returns_nan_is_refused_naming_the_step(snapshots):
    step, inverse = cubic()
    x = rm.tensor(np.array([0.5, 0.6]), requires_grad=True)  # x_2 + 1/2 < 0: inverse(x_2) is NaN
    with rm.Tape(snapshots=snapshots) as tape:  # the check at x_0 passes: x_1 + 1/2 > 0
        loss = tape.loop(step, x, steps=3, inverse=inverse).sum()
    with pytest.raises(rm.LoopError) as caught, np.errstate(invalid="ignore"):
        loss.backward()
    message = str(caught.value)
    assert "inverse(x_2) returned x_1" in message and "step 1" in message
    assert "2 of its 2 values NaN or inf" in message and "shape (2,)" in message
    assert x.grad is None


# guards: a step taped again from a state the inverse rebuilt (finite, off by rounding) gave NaN
# where the first run did not (sqrt(-1e-300)), and the gradient came out NaN with no error
def test_a_step_that_turns_nan_on_a_rebuilt_state_is_refused_naming_the_step():
    def inverse(x):  # off by 1e-300: within any tolerance, but below 0 where x is 0
        return x * x - 1e-300

    x = rm.tensor(np.array([0.0, 1.0]), requires_grad=True)
    with rm.Tape(snapshots=1) as tape:
        loss = tape.loop(rm.sqrt, x, steps=4, inverse=inverse).sum()
    with pytest.raises(rm.LoopError) as caught, np.errstate(all="ignore"):
        loss.backward()
    message = str(caught.value)
    assert "step 2, taped again in backward from x_2 as the inverse rebuilt it" in message
    assert "1 of 2 values NaN or inf in output leaf 0 (shape (2,)" in message


# guards: relative_difference took max(0.0, nan) = 0.0, so a NaN or inf read as no difference
def test_a_nan_or_inf_is_never_a_small_reconstruction_error():
    from remat.executor import relative_difference

    exact = [np.array([1.0, 2.0]), np.array([3.0])]
    for bad in (np.nan, np.inf, -np.inf):
        assert relative_difference([np.array([1.0, bad]), np.array([3.0])], exact) == np.inf
        assert relative_difference([np.array([1.0, 2.0]), np.array([bad])], exact) == np.inf
        same = [np.array([1.0, bad])]  # the exact state non-finite too: equal values differ by 0
        with np.errstate(invalid="ignore"):
            assert relative_difference(same, [np.array([1.0, bad])]) == 0.0


def test_a_wrong_inverse_is_caught_before_any_gradient():
    step, _ = revnet(rm.tensor(W1), rm.tensor(W2))
    x = (rm.tensor(np.ones((2, 8)), requires_grad=True), rm.tensor(np.ones((2, 8))))
    with rm.Tape() as tape, pytest.raises(rm.LoopError, match="does not undo the step"):
        tape.loop(step, x, steps=10, inverse=lambda s: s)
    assert tape.loops == []


@pytest.mark.parametrize(
    "inverse, words",
    [
        (lambda s: (s[0],), "structure"),
        (lambda s: (s[0], s[1][:1]), "shape"),
        (lambda s: (s[0], s[1].astype("float32")), "dtype"),
    ],
)
def test_an_inverse_of_the_wrong_structure_or_shape_is_named(inverse, words):
    step, _ = revnet(rm.tensor(W1), rm.tensor(W2))
    x = (rm.tensor(np.ones((2, 8)), requires_grad=True), rm.tensor(np.ones((2, 8))))
    with rm.Tape() as tape, pytest.raises(rm.StepOutputError, match=words) as caught:
        tape.loop(step, x, steps=5, inverse=inverse)
    assert "inverse(x_1)" in str(caught.value) and "step 0" in str(caught.value)


def test_steps_that_draw_random_numbers_are_refused():
    rm.random.seed(0)

    def noisy(x):
        return x + rm.random.normal(0.0, 1.0, x.shape)

    with rm.Tape() as tape, pytest.raises(rm.LoopError, match="random"):
        tape.loop(noisy, rm.tensor(np.ones(3), requires_grad=True), steps=4, inverse=lambda x: x)


def test_inverse_arguments_are_checked():
    with rm.Tape() as tape:
        with pytest.raises(TypeError, match="inverse must be a function"):
            tape.loop(rm.tanh, rm.tensor(np.ones(2)), steps=3, inverse=3)
        with pytest.raises(ValueError, match="known length"):
            tape.loop(rm.tanh, rm.tensor(np.ones(2)), until=lambda x: True, inverse=rm.tanh)


@pytest.mark.parametrize(
    "tape_kwargs",
    [
        {"memory": "1 MiB"},
        {"snapshots": 2, "disk_snapshots": 2},
        {"schedule": "sqrt"},
        {"snapshots": 3, "policy": rm.policies.save_everything},
    ],
)
def test_any_tape_reverses_with_the_inverse(tape_kwargs):
    expected, _ = grads(12, inverse=False)
    got, tape = grads(12, **tape_kwargs)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
    assert tape.stats.schedule == "Reversible" and tape.stats.disk_writes == 0


# guards: under a small byte budget a reversible loop stopped with a message about the plan
# cache; it now keeps as many exact states as fit (x_0 where it can), or gives the least budget
def test_a_byte_budget_chooses_the_exact_states_or_gives_the_least_that_works():
    expected, _ = grads(12, inverse=False)
    with pytest.raises(ValueError, match="reversible loop") as caught:
        grads(12, memory=600)
    least = int(re.search(r"least budget that works is memory=(\d+) bytes", str(caught.value))[1])
    assert "plan cache" not in str(caught.value)
    state = 2 * 4 * 8 * 8  # two (4, 8) float64 leaves
    for budget, slots in ((least, 1), (least + state, 2), (2**20, 2)):
        got, tape = grads(12, memory=budget)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)
        stats = tape.stats
        assert stats.snapshots == slots and stats.peak_bytes <= budget == stats.memory
    with pytest.raises(ValueError, match=f"memory={least - 1} bytes is too small"):
        grads(12, memory=least - 1)
    with pytest.raises(ValueError, match="snapshots=3"):  # asked for, and over the budget
        grads(12, memory=least + state, schedule="revolve", snapshots=3)


def test_a_single_step_needs_no_inverse_call():
    calls = []

    def inverse(x):
        calls.append(1)
        return x

    x = rm.tensor(np.ones(3), requires_grad=True)
    with rm.Tape() as tape:
        tape.loop(lambda v: v * 2.0, x, steps=1, inverse=inverse).sum().backward()
    assert calls == [] and np.array_equal(x.grad, 2.0 * np.ones(3))


def test_second_order_through_a_reversible_loop_is_refused_clearly():
    w1, w2 = rm.tensor(W1), rm.tensor(W2)
    step, inv = revnet(w1, w2)

    def f(a):
        with rm.Tape() as tape:
            a_n, b_n = tape.loop(step, (a, a * 0.5), steps=6, inverse=inv)
        return (a_n * a_n).sum() + (b_n**3).sum()

    a = np.linspace(-1, 1, 16).reshape(2, 8)
    with pytest.raises(NotImplementedError, match="reversible loop"):
        rm.hvp(f, (a,), (np.ones_like(a),))


def test_forward_mode_through_a_reversible_loop_matches_store_all():
    w1, w2 = rm.tensor(W1), rm.tensor(W2)
    step, inv = revnet(w1, w2)

    def f(a, inverse):
        with rm.Tape() as tape:
            a_n, b_n = tape.loop(step, (a, a * 0.5), steps=6, inverse=inverse)
        return (a_n * a_n).sum() + (b_n**3).sum()

    a = np.linspace(-1, 1, 16).reshape(2, 8)
    t = np.cos(np.arange(16.0)).reshape(2, 8)
    _, expected = rm.jvp(lambda x: f(x, None), (a,), (t,))
    _, got = rm.jvp(lambda x: f(x, inv), (a,), (t,))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
