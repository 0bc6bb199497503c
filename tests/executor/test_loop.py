"""Checkpointed loops: exact gradients under every schedule, counted and measured."""

import gc
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat import schedules
from tests.helpers import tape_for

WIDTH = 6


def make_params(seed=0, width=WIDTH):
    rng = np.random.default_rng(seed)
    w = rm.tensor(rng.standard_normal((width, width)) * 0.4, requires_grad=True)
    b = rm.tensor(rng.standard_normal(width) * 0.1, requires_grad=True)
    h0 = rm.tensor(rng.standard_normal((2, width)), requires_grad=True)
    return w, b, h0


def residual_step(w, b):
    return lambda h: h + 0.5 * rm.tanh(h @ w + b)


def loop_gradients(tape, steps, seed=0, step_maker=residual_step):
    w, b, h0 = make_params(seed)
    pre = h0 * 1.5  # an ordinary op before the loop
    h = tape.loop(step_maker(w, b), pre, steps=steps)
    loss = (h * h).sum() + (w * w).sum()  # and after it, using a parameter again
    loss.backward()
    return w.grad, b.grad, h0.grad, loss.item()


SCHEDULES = ["store_all", "sqrt", "periodic", "revolve"]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8), st.sampled_from(SCHEDULES[1:]))
def test_every_schedule_gives_store_alls_gradients_bit_for_bit(n, s, name):
    want = loop_gradients(rm.Tape(), n)
    got = loop_gradients(tape_for(name, s), n)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8))
def test_online_gives_store_alls_gradients_bit_for_bit(n, s):
    want = loop_gradients(rm.Tape(), n)
    w, b, h0 = make_params()
    counter = {"k": 0}

    def until(h):
        counter["k"] += 1
        return counter["k"] >= n

    tape = rm.Tape(snapshots=s)
    h = tape.loop(residual_step(w, b), h0 * 1.5, until=until)
    ((h * h).sum() + (w * w).sum()).backward()
    assert tape.stats.steps == n
    for g, ref in zip((w.grad, b.grad, h0.grad), want):
        assert np.array_equal(g, ref)


def test_until_without_a_budget_stores_everything():
    want = loop_gradients(rm.Tape(), 9)
    w, b, h0 = make_params()
    h = h0 * 1.5
    tape = rm.Tape()
    steps_left = iter(range(8, -1, -1))
    h = tape.loop(residual_step(w, b), h, until=lambda _: next(steps_left) == 0)
    ((h * h).sum() + (w * w).sum()).backward()
    assert tape.stats.steps == tape.stats.forward_steps == 9
    for g, ref in zip((w.grad, b.grad, h0.grad), want):
        assert np.array_equal(g, ref)


def test_max_steps_ends_an_online_loop():
    w, b, h0 = make_params()
    tape = rm.Tape(snapshots=3)
    tape.loop(residual_step(w, b), h0, until=lambda h: False, max_steps=12)
    assert tape.stats.steps == 12


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(schedule="periodic"), "needs a budget"),
        (dict(schedule="online"), "needs a budget"),
    ],
)
def test_budget_and_schedule_must_fit(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rm.Tape(**kwargs)


@pytest.mark.parametrize("name", ["store_all", "sqrt", "periodic", "revolve", "online"])
def test_every_schedule_name_takes_a_budget_and_a_known_length(name):
    want = loop_gradients(rm.Tape(), 23)
    tape = rm.Tape(snapshots=4, schedule=name)
    got = loop_gradients(tape, 23)
    for g, ref in zip(got, want):
        assert np.array_equal(g, ref)
    assert tape.stats.steps == 23
    if name in ("revolve", "online"):
        optimum = schedules.optimal_forward_steps(23, 4)
        assert optimum <= tape.stats.forward_steps <= optimum + 1


def test_schedule_objects_on_a_tape():
    want = loop_gradients(rm.Tape(), 15)
    for schedule in (schedules.Revolve(15, 3), schedules.Online(3), schedules.StoreAll()):
        for g, ref in zip(loop_gradients(rm.Tape(schedule=schedule), 15), want):
            assert np.array_equal(g, ref)
    with pytest.raises(ValueError, match="is for 16 steps"):
        loop_gradients(rm.Tape(schedule=schedules.Revolve(16, 3)), 15)


def test_checkpointed_gradients_match_finite_differences():
    w0, b0, h00 = (t.data.copy() for t in make_params())

    def f(w, b, h0):
        tape = rm.Tape(snapshots=2)
        h = tape.loop(residual_step(w, b), h0, steps=7)
        return (h * h).sum()

    assert rm.gradcheck(f, w0, b0, h00)


def dropout_step(w, b):
    def step(h):
        keep = rm.random.uniform(size=h.shape) > 0.3
        noise = rm.random.normal(scale=0.1, size=h.shape)
        return h + 0.5 * rm.tanh(h @ w + b) * keep + noise

    return step


@pytest.mark.parametrize("name", ["sqrt", "periodic", "revolve"])
def test_random_numbers_inside_a_step_replay_exactly(name):
    rm.random.seed(3)
    want = loop_gradients(rm.Tape(), 30, step_maker=dropout_step)
    after_store_all = rm.random.uniform(size=3).data
    rm.random.seed(3)
    got = loop_gradients(tape_for(name, 3), 30, step_maker=dropout_step)
    after_checkpointed = rm.random.uniform(size=3).data
    for g, ref in zip(got, want):
        assert np.array_equal(g, ref)
    # the generator goes on after backward as if nothing had been recomputed
    assert np.array_equal(after_store_all, after_checkpointed)


@pytest.mark.parametrize("n, s", [(1, 1), (10, 2), (30, 3), (100, 5), (64, 64), (200, 10)])
def test_revolve_counts_the_optimum_and_keeps_the_budget(n, s):
    tape = rm.Tape(snapshots=s)
    loop_gradients(tape, n)
    assert tape.stats.steps == n
    assert tape.stats.forward_steps == schedules.optimal_forward_steps(n, s)
    assert tape.stats.recomputed_steps == tape.stats.forward_steps - n
    assert tape.stats.peak_snapshots <= s
    assert "revolve" in str(tape.stats).lower() or "Revolve" in str(tape.stats)


def test_store_all_evaluates_each_step_once():
    tape = rm.Tape()
    loop_gradients(tape, 50)
    assert tape.stats.forward_steps == 50 and tape.stats.peak_snapshots == 0


def test_tuple_states_and_several_loops_compose():
    w, b, h0 = make_params()
    c0 = rm.tensor(np.ones((2, WIDTH)), requires_grad=True)

    def step(state):
        h, c = state
        return h + 0.1 * rm.tanh(h @ w) * c, c * 0.9 + b

    def run(tape):
        h, c = tape.loop(step, (h0, c0), steps=12)
        h2 = tape.loop(residual_step(w, b), h * c, steps=5)
        return (h2**2).sum() + c.sum()

    loss = run(rm.Tape())
    loss.backward()
    want = [t.grad.copy() for t in (w, b, h0, c0)]
    for t in (w, b, h0, c0):
        t.grad = None
    tape = rm.Tape(snapshots=3)
    run(tape).backward()
    for t, ref in zip((w, b, h0, c0), want):
        assert np.array_equal(t.grad, ref)
    assert tape.stats.steps == 17


def state_bytes(width):
    return 2 * width * 8


@pytest.mark.parametrize("name", ["revolve", "store_all"])
def test_memory_is_bounded_by_the_budget_not_by_n(name):
    s, width = 4, 64
    b_state = state_bytes(width)
    peaks = {}
    for n in (10, 100, 1000):
        tape = rm.Tape(snapshots=s) if name == "revolve" else rm.Tape()
        w, b, h0 = make_params(width=width)
        h = tape.loop(residual_step(w, b), h0, steps=n)
        (h * h).sum().backward()
        peaks[n] = tape.stats.peak_bytes
    if name == "revolve":
        one_step = 4 * b_state  # a step's tape: its input, tanh's output, a product
        assert all(p <= s * b_state + one_step + 1024 for p in peaks.values()), peaks
        assert peaks[1000] == peaks[100]
    else:
        assert peaks[1000] > 9 * peaks[100] > 81 * peaks[10] / 10


def traced_peak_of_loop(tape, n, width):
    w, b, h0 = make_params(width=width)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    h = tape.loop(residual_step(w, b), h0, steps=n)
    (h * h).sum().backward()
    del h
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return peak


def test_tracemalloc_peak_is_flat_for_revolve_and_linear_for_store_all():
    width, s = 256, 4
    b_state = state_bytes(width)
    revolve = {n: traced_peak_of_loop(rm.Tape(snapshots=s), n, width) for n in (10, 100, 1000)}
    store_all = {n: traced_peak_of_loop(rm.Tape(), n, width) for n in (10, 100, 1000)}
    param_bytes = width * width * 8 + width * 8
    # Parameters' gradients and temporaries, plus the budget: flat in n, but
    # for Python's free lists of small objects (up to 2000 tuples of each
    # size), which fill up on long runs and which tracemalloc counts.
    free_lists = 128 * 1024
    assert revolve[1000] < revolve[10] + b_state + free_lists, revolve
    assert revolve[1000] < revolve[100] + b_state + free_lists, revolve
    # (3 gradients of W at once: the sum so far, one step's part, their sum)
    assert revolve[1000] < 3 * param_bytes + (s + 8) * b_state + free_lists, revolve
    # store_all holds every step's tape: about 3 states a step
    assert store_all[1000] - store_all[100] > 900 * 2 * b_state, store_all
    assert store_all[1000] > 5 * revolve[1000]


def test_log_n_snapshots_give_log_n_memory_and_n_log_n_work():
    width = 8
    b_state = state_bytes(width)
    rows = []
    for k in range(6, 13):
        n = 2**k
        s = math.ceil(math.log2(n))
        tape = rm.Tape(snapshots=s)
        w, b, h0 = make_params(width=width)
        h = tape.loop(residual_step(w, b), h0, steps=n)
        (h * h).sum().backward()
        stats = tape.stats
        assert stats.forward_steps == schedules.optimal_forward_steps(n, s)
        rows.append((k, stats.forward_steps / n, stats.peak_bytes / b_state))
    for k, work, memory in rows:
        assert work <= k + 1  # forward_steps / n grows like log2 n
        assert memory <= k + 5  # snapshots plus a step's tape, in states
    # and they do grow: more steps need (logarithmically) more of both
    assert rows[-1][1] > rows[0][1] and rows[-1][2] > rows[0][2]


def test_a_step_failing_during_recomputation_names_its_index_and_frees_everything():
    w, b, h0 = make_params()
    calls = {"n": 0}

    def step(h):
        calls["n"] += 1
        if calls["n"] > 20:  # the forward sweep passes; recomputation fails
            raise FloatingPointError("boom")
        return h + rm.tanh(h @ w)

    tape = rm.Tape(snapshots=2)
    h = tape.loop(step, h0, steps=20)
    run = h.record.parents[0].args[0]  # the executor behind the loop's record
    # The 21st evaluation is the first one after the forward sweep: read it
    # off the schedule.
    actions = list(schedules.Revolve(20, 2))
    after = actions[actions.index(schedules.EndForward()) :]
    first = next(a for a in after if isinstance(a, (schedules.Advance, schedules.Tape)))
    with pytest.raises(rm.LoopError, match=rf"step {first.start} raised FloatingPointError.*boom"):
        h.sum().backward()
    assert not run.slots and not run.tapes and run.held.bytes == 0


def failing_at(k, error):
    """A step that raises ``error`` at its k-th evaluation (counting from 1), else sin."""
    calls = [0]

    def step(h):
        calls[0] += 1
        if calls[0] == k:
            raise error
        return rm.sin(h)

    return step


FORMS = {
    "loop": lambda tape, step, x: tape.loop(step, x, steps=8),
    "chain": lambda tape, step, x: tape.chain([step] * 8, x),
    "scan": lambda tape, step, x: tape.scan(lambda h, xi: (step(h), None), x, rm.ones(8))[0],
}


# guards: an op failing inside step 5 of a chain (loop, scan) named the op and the shapes but
# not the step; the error keeps its type
@pytest.mark.parametrize("form", sorted(FORMS))
def test_an_op_failing_inside_a_step_names_the_step_and_keeps_its_type(form):
    def layer(k):
        def f(h):
            return h @ rm.ones((5, 3)) if k == 5 else rm.tanh(h)

        return f

    def step_five_fails(h, calls=[0]):  # noqa: B006 (a counter)
        calls[0] += 1
        return layer(calls[0] - 1)(h)

    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    with rm.Tape(snapshots=2) as tape, pytest.raises(rm.ShapeError) as caught:
        FORMS[form](tape, step_five_fails, x)
    assert str(caught.value).startswith(f"tape.{form}: step 5")
    assert "matmul: shapes (2, 3) and (5, 3)" in str(caught.value)


# guards: a step's own error raised in the forward sweep did not say which step raised it;
# one raised while its tape was reversed in backward was blamed on the last step recomputed
@pytest.mark.parametrize("form", sorted(FORMS))
def test_errors_in_either_sweep_name_the_step_that_raised_them(form, monkeypatch):
    x = rm.tensor(np.full(3, 0.5), requires_grad=True)
    with rm.Tape(snapshots=2) as tape, pytest.raises(ValueError, match=rf"^tape.{form}: step 3"):
        FORMS[form](tape, failing_at(4, ValueError("bad value")), x)
    with rm.Tape(snapshots=2) as tape:  # an error that is not a plain message gets a note
        with pytest.raises(KeyError) as caught:
            FORMS[form](tape, failing_at(2, KeyError("key")), x)
    if hasattr(caught.value, "add_note"):
        assert caught.value.__notes__[0].startswith(f"raised in tape.{form}: step 1")

    with rm.Tape(snapshots=2) as tape:  # the 9th evaluation: a recomputation in backward
        out = FORMS[form](tape, failing_at(9, ValueError("bad value")), x)
    with pytest.raises(rm.LoopError, match=rf"^tape.{form}: step \d .*recomputed.*: bad value$"):
        out.sum().backward()
    # a VJP failing at its 3rd call, reversing step 5 of 8 under store-all (7, 6, then 5)
    op, calls = rm.OPS["sin"], [0]
    real = op.vjps[0]

    def vjp(ns, g, ans, h):
        calls[0] += 1
        if calls[0] == 3:
            raise ArithmeticError("the VJP failed")
        return real(ns, g, ans, h)

    monkeypatch.setattr(op, "vjps", (vjp,))
    with rm.Tape() as tape:
        out = FORMS[form](tape, rm.sin, x)
    with pytest.raises(rm.LoopError, match=r"step 5 .*raised ArithmeticError while being reversed"):
        out.sum().backward()


def test_backward_twice_is_a_clear_error():
    w, b, h0 = make_params()
    h = rm.Tape(snapshots=2).loop(residual_step(w, b), h0, steps=5)
    loss = h.sum()
    loss.backward()
    with pytest.raises(rm.BackwardError, match="second time"):
        loss.backward()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(steps=-1), ValueError, "steps must be an integer >= 0, got -1"),
        (dict(), ValueError, "exactly one of steps"),
        (dict(steps=3, until=lambda h: True), ValueError, "exactly one of steps"),
        (dict(steps=2.5), ValueError, "steps must be an integer"),
    ],
)
def test_bad_loop_arguments(kwargs, error, match):
    w, b, h0 = make_params()
    tape = rm.Tape(snapshots=2)
    with pytest.raises(error, match=match):
        tape.loop(residual_step(w, b), h0, **kwargs)
    assert tape.loops == [] and len(tape) == 0


@pytest.mark.parametrize("snapshots", [0, -3, 1.5, True])
def test_bad_budget(snapshots):
    with pytest.raises(ValueError, match="snapshots must be an integer >= 1"):
        rm.Tape(snapshots=snapshots)


def test_unknown_schedule_lists_the_choices():
    with pytest.raises(ValueError, match="store_all, sqrt, periodic, revolve, online"):
        rm.Tape(schedule="fancy")


@pytest.mark.parametrize(
    "bad_step, match",
    [
        (lambda h: h[:1], r"step 3 returned a state with leaf 0 of shape \(1, 6\).*shape \(2, 6\)"),
        (lambda h: (h, h), r"structure \(Tensor, Tensor\) instead of Tensor"),
        (lambda h: h.data, "leaf 0 is a ndarray, not a Tensor"),
    ],
)
def test_a_step_changing_the_state_is_a_clear_error(bad_step, match):
    w, b, h0 = make_params()
    count = {"n": 0}

    def step(h):
        count["n"] += 1
        return bad_step(h) if count["n"] == 4 else h * 1.0

    tape = rm.Tape(snapshots=2)
    with pytest.raises(rm.LoopError, match=match) as caught:
        tape.loop(step, h0, steps=10)
    assert isinstance(caught.value, (ValueError, TypeError))  # a bad value, too
    assert tape.loops == [] and len(tape) == 0


def test_dtype_change_is_named():
    h0 = rm.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(rm.LoopError, match="dtype float32"):
        rm.Tape(snapshots=2).loop(lambda h: rm.tensor(h.data.astype(np.float32)), h0, steps=3)


def test_a_loop_under_no_grad_records_nothing():
    h0 = rm.tensor(np.ones(3))
    tape = rm.Tape(snapshots=2)
    with rm.no_grad():
        h = tape.loop(lambda h: h * 2.0, h0, steps=4)
    assert np.array_equal(h.data, np.full(3, 16.0)) and h.record is None
    assert tape.stats.forward_steps == 4  # the forward sweep only: no backward will come
    assert len(tape) == 0


def test_a_parameter_used_only_in_untaped_steps_still_gets_its_gradient():
    rng = np.random.default_rng(0)
    w = rm.tensor(rng.standard_normal((4, 4)) * 0.3, requires_grad=True)

    def step(state):  # uses w in the first two steps only; the last (taped) one does not
        h, k = state
        return (h @ w if k.item() < 2 else h * 0.5), k + 1

    def gradient(tape):
        w.grad = None
        h, k = tape.loop(step, (rm.tensor(np.ones((2, 4))), rm.tensor(0)), steps=6)
        assert not k.requires_grad  # an integer counter carries no gradient
        (h * h).sum().backward()
        return w.grad

    want = gradient(rm.Tape())
    for tape in (
        rm.Tape(snapshots=2),
        rm.Tape(schedule="sqrt"),
        rm.Tape(snapshots=2, schedule="periodic"),
    ):
        assert np.array_equal(gradient(tape), want)


def test_a_loop_in_a_step_reaches_the_parameters_it_uses():
    w = rm.tensor(np.eye(4) * 0.5, requires_grad=True)

    def step(h):
        return rm.Tape(snapshots=2).loop(lambda g: g + rm.tanh(g @ w), h, steps=3)

    def gradient(tape):
        w.grad = None
        tape.loop(step, rm.tensor(np.ones((2, 4))), steps=5).sum().backward()
        return w.grad

    want = gradient(rm.Tape())
    assert want is not None and np.array_equal(gradient(rm.Tape(snapshots=2)), want)


def test_random_numbers_drawn_by_until_do_not_break_exactness():
    w, b, h0 = make_params()

    def gradient(tape):
        rm.random.seed(11)
        w.grad = None
        step = lambda h: rm.tanh(h @ w) + 0.1 * rm.random.normal(size=h.shape)  # noqa: E731
        h = tape.loop(
            step, h0 * 1.0, until=lambda h: rm.random.uniform().item() < 0.1, max_steps=60
        )
        (h * h).sum().backward()
        return w.grad, tape.stats.steps

    (want, n), (got, m) = gradient(rm.Tape()), gradient(rm.Tape(snapshots=2))
    assert n == m and np.array_equal(got, want)


def test_a_snapshot_changed_in_place_is_refused():
    w, b, h0 = make_params()
    h = rm.Tape(snapshots=2).loop(residual_step(w, b), h0, steps=5)
    h0.data[...] = 7.0  # x_0's snapshot is h0's own array
    with pytest.raises(rm.LoopError, match="snapshot of x_0.*changed in place"):
        h.sum().backward()


def test_until_must_answer_with_a_bool():
    w, b, h0 = make_params()
    with pytest.raises(
        rm.LoopError, match="(?s)until returned .* after step 0; it must return a bool"
    ):
        rm.Tape(snapshots=2).loop(residual_step(w, b), h0, until=lambda h: h > 0)


def test_numpy_integers_are_integers_and_budgets_do_not_conflict():
    w, b, h0 = make_params()
    tape = rm.Tape(snapshots=np.int64(2))
    tape.loop(residual_step(w, b), h0, steps=np.int64(4))
    assert tape.stats.steps == 4
    with pytest.raises(ValueError, match="snapshots=3 but the schedule .* uses 6"):
        rm.Tape(snapshots=3, schedule=schedules.Revolve(10, 6))
    with pytest.raises(ValueError, match="schedule must be one of"):
        rm.Tape(schedule=[1, 2])
    with pytest.raises(ValueError, match="max_steps= caps a loop run with until="):
        tape.loop(residual_step(w, b), h0, steps=3, max_steps=2)


def test_tape_lists_the_loop_as_one_record():
    w, b, h0 = make_params()
    with rm.Tape(snapshots=3) as tape:
        h = tape.loop(residual_step(w, b), h0, steps=10)
        (h * h).sum()
    lines = str(tape).splitlines()[1:]
    assert [line.split()[1] for line in lines] == ["loop", "loop_output", "multiply", "sum"]
    # the loop's record holds its snapshots and the last step's tape
    assert f"{tape.records[0].saved_bytes()} B saved" in lines[0]
    assert tape.records[0].saved_bytes() >= 3 * h0.data.nbytes


def test_a_tape_reused_for_many_loops_holds_no_arrays():
    w, b, _ = make_params(width=64)
    h0 = rm.tensor(np.random.default_rng(1).standard_normal((64, 64)), requires_grad=True)
    tape = rm.Tape(snapshots=3)

    def once():
        h = tape.loop(residual_step(w, b), h0 * 1.0, steps=10)
        h.sum().backward()
        w.grad = b.grad = h0.grad = None

    once()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(30):
        once()
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    # Each loop leaves its small LoopStats and two released records on the
    # tape, and no array: a leaked state would be 32 KiB a loop.
    assert grown < 30 * h0.data.nbytes / 8, grown
    assert tape.stats.steps == 31 * 10


def test_loops_nest_and_stay_exact():
    w, b, _ = make_params(width=4)

    def gradients(outer, inner):
        w.grad = None
        h0 = rm.tensor(np.ones((2, 4)), requires_grad=True)

        def outer_step(h):  # each outer step runs a checkpointed loop of its own
            return rm.Tape(snapshots=inner).loop(residual_step(w, b), h, steps=5) * 0.9

        h = rm.Tape(snapshots=outer).loop(outer_step, h0, steps=7)
        (h * h).sum().backward()
        return w.grad.copy(), h0.grad.copy()

    want = gradients(7, 5)  # budgets as large as the loops
    for outer, inner in [(3, 2), (2, 1), (1, 3)]:
        for g, ref in zip(gradients(outer, inner), want):
            assert np.array_equal(g, ref)


# guards the replay check's comparison: it must compare bits, so that a recomputed NaN (NaN !=
# NaN), inf or -0.0 (-0.0 == 0.0) where the first run had a number or +0.0 is refused, naming
# the step (a check that compared values would pass -0.0 and, as max(0.0, nan), NaN)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -0.0])
@pytest.mark.parametrize("form", ["loop", "chain", "scan"])
def test_a_recomputation_that_turns_a_value_nan_inf_or_negative_zero_is_refused(bad, form):
    runs = [0]

    def step(h):
        runs[0] += 1
        out = h * 0.5
        if runs[0] > 6:  # recomputed: element 2 (0.0 in every first run) becomes bad
            at_2 = np.arange(5) == 2
            out = out * np.where(at_2, -1.0, 1.0) if bad == 0 else out + np.where(at_2, bad, 0.0)
        return out

    x = rm.tensor(np.array([1.0, 2.0, 0.0, 3.0, 4.0]), requires_grad=True)
    tape = rm.Tape(snapshots=2)
    if form == "loop":
        out = tape.loop(step, x, steps=6)
    elif form == "chain":
        out = tape.chain([step] * 6, x)
    else:
        out = tape.scan(lambda h, xi: (step(h), None), x, rm.tensor(np.ones(6)))[0]
    with pytest.raises(rm.ReplayError, match=r"step [0-5].* different values"):
        out.sum().backward()
    assert x.grad is None
