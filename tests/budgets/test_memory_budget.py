"""rm.Tape(memory=...): a byte budget, measured, planned with Optimal, cached, and kept to.

Every run must hold at most the budget (tape.stats.peak_bytes, the executor's
own count), measuring included, and give gradients bit-identical to
store-all's whatever the plan.  No test here asserts anything about time.
"""

import functools
import itertools
import json
import random
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat import measure, memory, schedules
from remat.budget import Tape
from remat.executor import LoopError
from remat.units import format_bytes

rng = np.random.default_rng(0)


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# --- three small workloads: a loop, a chain of changing widths, a scan ------------

W = rm.tensor(rng.standard_normal((8, 8)) / 3, requires_grad=True)
V = rm.tensor(rng.standard_normal((8, 8)) / 9, requires_grad=True)
H0 = rng.standard_normal((4, 8))


def res_step(h):
    return h + rm.tanh(h @ W) @ V


WIDTHS = [6, 11, 3, 9, 14, 5, 8, 2, 12, 7, 10]
LAYER_WEIGHTS = [
    rm.tensor(rng.standard_normal((a, b)) / a**0.5, requires_grad=True)
    for a, b in zip(WIDTHS, WIDTHS[1:])
]
LAYERS = [lambda h, w=w: rm.tanh(h @ w) for w in LAYER_WEIGHTS]
C0 = rng.standard_normal((3, WIDTHS[0]))

WX = rm.tensor(rng.standard_normal((5, 6)) / 2, requires_grad=True)
WH = rm.tensor(rng.standard_normal((6, 6)) / 3, requires_grad=True)
XS = rng.standard_normal((13, 4, 5))


def cell(h, x):
    h = rm.tanh(x @ WX + h @ WH)
    return h, (h * h).sum(axis=1)


def run_loop(tape, steps=12):
    h0 = rm.tensor(H0, requires_grad=True)
    with tape:
        loss = (tape.loop(res_step, h0, steps=steps) ** 2).sum()
    loss.backward()
    return [h0.grad, W.grad, V.grad]


def run_chain(tape, layers=LAYERS):
    h0 = rm.tensor(C0, requires_grad=True)
    with tape:
        loss = (tape.chain(layers, h0) ** 2).sum()
    loss.backward()
    return [h0.grad, *(w.grad for w in LAYER_WEIGHTS[: len(layers)])]


def run_scan(tape):
    h0 = rm.tensor(np.zeros((4, 6)), requires_grad=True)
    xs = rm.tensor(XS, requires_grad=True)
    with tape:
        carry, ys = tape.scan(cell, h0, xs)
        loss = (carry**2).sum() + ys.sum()
    loss.backward()
    return [h0.grad, xs.grad, WX.grad, WH.grad]


def clear_grads():
    for p in [W, V, WX, WH, *LAYER_WEIGHTS]:
        p.grad = None


FORMS = {"loop": run_loop, "chain": run_chain, "scan": run_scan}


def store_all(form):
    clear_grads()
    tape = rm.Tape()
    grads = FORMS[form](tape)
    return grads, tape.stats.peak_bytes


def costs_of(form):
    """The measured costs of a form, as Tape(memory=) measures them (a large budget)."""
    tape = rm.Tape(memory=2**40)
    clear_grads()
    FORMS[form](tape)
    return memory._PLANS[next(reversed(memory._PLANS))][1]


# --- units ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        (1, 1),
        (4096, 4096),
        (np.int64(7), 7),
        ("100", 100),
        ("100 B", 100),
        ("512 KiB", 512 * 1024),
        ("64 MiB", 64 * 2**20),
        ("2 GB", 2 * 10**9),
        ("2GiB", 2 * 2**30),
        ("1.5 kB", 1500),
        ("0.5 KiB", 512),
        ("3 mb", 3 * 10**6),
        ("  8 kib ", 8192),
        ("1 TB", 10**12),
    ],
)
def test_sizes_parse(text, value):
    assert memory.parse_bytes(text) == value
    assert Tape(memory=text).byte_limit == value


@pytest.mark.parametrize(
    "bad, error, message",
    [
        ("", ValueError, "is not a size"),
        ("MiB", ValueError, "is not a size"),
        ("12 parsecs", ValueError, "is not a size"),
        ("-5 MiB", ValueError, "at least 1 byte"),  # a size, and under one byte
        ("1e6", ValueError, "is not a size"),
        ("0 B", ValueError, "at least 1 byte"),
        ("0.5 B", ValueError, "at least 1 byte"),
        (0, ValueError, "at least 1 byte"),
        (-3, ValueError, "at least 1 byte"),
        (2.0e6, TypeError, "int number of bytes or a string"),
        (True, TypeError, "int number of bytes or a string"),
        ([1024], TypeError, "int number of bytes or a string"),
    ],
)
def test_bad_sizes_are_refused(bad, error, message):
    with pytest.raises(error, match=message):
        Tape(memory=bad)


# --- what memory= serves, and snapshots= beside it ---------------------------------


@pytest.mark.parametrize("schedule", ["sqrt", "periodic", "online", "store_all"])
def test_schedules_that_do_not_plan_for_bytes_are_refused(schedule):
    with pytest.raises(ValueError, match="cannot serve schedule="):
        Tape(memory="1 MiB", schedule=schedule, snapshots=3)


def test_a_schedule_object_is_refused():
    with pytest.raises(ValueError, match="cannot serve the schedule object"):
        Tape(memory="1 MiB", schedule=schedules.Revolve(10, 3))


# Tape(schedule="optimal") alone said the schedule was unknown, though the docstring lists it.
@pytest.mark.parametrize("snapshots", [None, 3])
def test_optimal_without_a_byte_budget_says_it_needs_one(snapshots):
    with pytest.raises(ValueError, match="'optimal' plans from the measured costs.*memory="):
        Tape(schedule="optimal", snapshots=snapshots)


def test_optimal_takes_no_snapshots():
    with pytest.raises(ValueError, match="chooses its own slots"):
        Tape(memory="1 MiB", schedule="optimal", snapshots=3)


def test_a_loop_of_unknown_length_is_refused():
    tape = Tape(memory="1 MiB")
    with tape, pytest.raises(ValueError, match="unknown length cannot be planned"):
        tape.loop(res_step, rm.tensor(H0), until=lambda h: True)


def test_snapshots_that_fit_agree_with_the_budget():
    costs = costs_of("loop")
    need = schedules.simulate(schedules.Revolve(12, 3), costs).peak_bytes
    clear_grads()
    reference, _ = store_all("loop")
    clear_grads()
    tape = Tape(memory=need, snapshots=3)  # revolve with 3 slots, which fit exactly
    assert same(run_loop(tape), reference)
    assert tape.stats.schedule == "Revolve" and tape.stats.snapshots == 3
    assert tape.stats.peak_bytes <= need
    need = schedules.simulate(schedules.Mixed(12, 3), costs).peak_bytes
    clear_grads()
    tape = Tape(memory=need, snapshots=3, schedule="mixed")
    assert same(run_loop(tape), reference)
    assert tape.stats.schedule == "Mixed" and tape.stats.peak_bytes <= need


def test_snapshots_that_do_not_fit_disagree_with_the_budget():
    costs = costs_of("loop")
    need = schedules.simulate(schedules.Revolve(12, 3), costs).peak_bytes
    tape = Tape(memory=need - 1, snapshots=3)
    with (
        tape,
        pytest.raises(ValueError, match=f"disagree: revolve with 3 slots holds up to {need}"),
    ):
        tape.loop(res_step, rm.tensor(H0, requires_grad=True), steps=12)


@pytest.mark.parametrize("name, cls", [("revolve", schedules.Revolve), ("mixed", schedules.Mixed)])
def test_revolve_or_mixed_take_the_most_slots_that_fit(name, cls):
    costs = costs_of("loop")
    budget = schedules.simulate(cls(12, 4), costs).peak_bytes
    clear_grads()
    tape = Tape(memory=budget, schedule=name)
    run_loop(tape)
    s = tape.stats.snapshots
    assert s >= 4
    assert schedules.simulate(cls(12, s), costs).peak_bytes <= budget
    assert s == 12 or schedules.simulate(cls(12, s + 1), costs).peak_bytes > budget
    assert tape.stats.peak_bytes <= budget


# --- the budget is kept, gradients are exact ---------------------------------------


def bounds(form):
    costs = costs_of(form)
    return schedules.minimum_bytes(costs), sum(costs.tape_bytes) + max(costs.state_bytes)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(FORMS)), st.floats(0, 1), st.sampled_from([None, "revolve", "mixed"]))
def test_peak_bytes_stay_within_every_budget_and_gradients_are_exact(form, where, schedule):
    low, high = bounds(form)
    budget = int(low + where * (high - low))
    memory.clear_plans()  # an earlier example may have planned this budget
    reference, _ = store_all(form)
    clear_grads()
    tape = Tape(memory=budget, schedule=schedule)
    try:
        grads = FORMS[form](tape)
    except ValueError as error:  # revolve or mixed: one slot and a tape do not fit
        assert schedule is not None and "with one slot it holds" in str(error)
        return
    assert tape.stats.peak_bytes <= budget
    assert tape.stats.memory == budget and tape.stats.plan == "measured"
    assert same(grads, reference)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_smallest_budget_recomputes_and_a_large_one_stores_all(form):
    low, high = bounds(form)
    reference, full = store_all(form)
    clear_grads()
    tight = Tape(memory=low)
    assert same(FORMS[form](tight), reference)
    assert tight.stats.peak_bytes <= low < full
    assert tight.stats.recomputed_steps > 0
    clear_grads()
    roomy = Tape(memory=high)
    assert same(FORMS[form](roomy), reference)
    assert roomy.stats.recomputed_steps == 0 and roomy.stats.peak_bytes == full


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_budget_too_small_says_the_minimum(form):
    low, _ = bounds(form)
    memory.clear_plans()
    clear_grads()
    with pytest.raises(ValueError, match=f"too small .*needs at least {low} bytes"):
        FORMS[form](Tape(memory=low - 1))


# guards: with schedule="revolve" and snapshots=3, a budget below one tape gave optimal's least
# (a plan with the fewest slots), which revolve with 3 slots does not fit in
@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("schedule, snapshots", [("revolve", 3), ("mixed", 4)])
def test_a_budget_below_one_tape_gives_the_least_for_the_schedule_asked(form, schedule, snapshots):
    def run(budget):
        memory.clear_plans()
        clear_grads()
        return FORMS[form](Tape(memory=budget, schedule=schedule, snapshots=snapshots))

    with pytest.raises(ValueError, match="tape alone would") as caught:
        run(100)
    least = int(re.search(r"slots needs at least (\d+) bytes", str(caught.value))[1])
    assert least > bounds(form)[0]  # more than the fewest slots need
    assert same(run(least), store_all(form)[0])
    with pytest.raises(ValueError, match="disagree|too small"):
        run(least - 1)


def test_a_budget_below_one_tape_stops_measuring_at_once():
    calls = []

    def step(h):
        calls.append(1)
        return res_step(h)

    need = H0.nbytes + costs_of("loop").tape_bytes[0]  # keep x_0, tape one step at a time
    memory.clear_plans()
    calls.clear()
    tape = Tape(memory=100)  # less than one step's tape
    with tape, pytest.raises(ValueError, match=f"step 0's tape alone would .* {need} bytes"):
        tape.loop(step, rm.tensor(H0, requires_grad=True), steps=12)
    assert len(calls) == 2  # step 0 advanced once and taped once, then refused


@pytest.mark.parametrize("form", sorted(FORMS))
def test_measuring_respects_a_budget_below_one_tape(form, monkeypatch):
    low, _ = bounds(form)
    smallest = min(costs_of(form).tape_bytes)
    monkeypatch.setattr(memory, "Holdings", SpyHoldings)
    for budget in (1, smallest - 1):
        memory.clear_plans()
        SpyHoldings.most = 0
        clear_grads()
        with pytest.raises(ValueError, match=f"too small: .* needs at least {low} bytes"):
            FORMS[form](Tape(memory=budget))
        assert SpyHoldings.most <= budget


def test_a_loop_is_measured_over_as_many_tapes_as_fit(monkeypatch):
    monkeypatch.setattr(memory, "Holdings", SpyHoldings)
    tape_bytes = costs_of("loop").tape_bytes[0]
    for fit in (1, 3, 12):
        memory.clear_plans()
        SpyHoldings.most = 0
        clear_grads()
        try:
            run_loop(Tape(memory=fit * tape_bytes))
        except ValueError as error:
            assert "too small" in str(error)
        assert SpyHoldings.most <= fit * tape_bytes
        assert SpyHoldings.most > (fit - 1) * tape_bytes


class SpyHoldings(memory.Holdings):
    most = 0

    def hold(self, arrays):
        super().hold(arrays)
        SpyHoldings.most = max(SpyHoldings.most, self.bytes)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_measuring_holds_no_more_than_the_budget(form, monkeypatch):
    low, _ = bounds(form)
    costs = costs_of(form)
    monkeypatch.setattr(memory, "Holdings", SpyHoldings)
    for budget in (low, max(costs.tape_bytes)):  # the least plan; a budget too small to plan
        memory.clear_plans()
        SpyHoldings.most = 0
        clear_grads()
        try:
            FORMS[form](Tape(memory=budget))
        except ValueError as error:
            assert budget < low and "too small" in str(error)
        assert max(costs.tape_bytes) <= SpyHoldings.most <= budget
        if form == "chain":  # one tape at a time, no snapshot
            assert SpyHoldings.most == max(costs.tape_bytes)


def test_measuring_adds_no_gradient_and_keeps_the_random_stream():
    def noisy(h):
        return res_step(h) + 0.01 * rm.random.normal(size=h.shape)

    def run(tape):
        rm.random.seed(3)
        h0 = rm.tensor(H0, requires_grad=True)
        with tape:
            loss = (tape.loop(noisy, h0, steps=9) ** 2).sum()
        loss.backward()
        return [h0.grad, W.grad, V.grad], rm.random.normal(size=(2,))

    clear_grads()
    reference, after = run(rm.Tape())
    low = schedules.minimum_bytes(costs_of("loop"))
    clear_grads()
    grads, after_budget = run(Tape(memory=low))
    assert same(grads, reference)
    assert np.array_equal(after.data, after_budget.data)


# --- the cache --------------------------------------------------------------------


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_training_loop_measures_once(form):
    low, _ = bounds(form)
    memory.clear_plans()
    reference, _ = store_all(form)
    plans = []
    for _ in range(3):
        clear_grads()
        tape = Tape(memory=low)  # a new tape per iteration, as the README advises
        assert same(FORMS[form](tape), reference)
        plans.append(tape.stats.plan)
        assert tape.stats.predicted_seconds > 0 and tape.stats.seconds > 0
        assert "predicted" in str(tape.stats) and f"plan {plans[-1]}" in str(tape.stats)
    assert plans == ["measured", "reused", "reused"]


def test_another_budget_shape_or_function_is_measured_again():
    low = schedules.minimum_bytes(costs_of("loop"))
    memory.clear_plans()

    def plan(budget=low, shape=None, step=res_step):
        tape = Tape(memory=budget)
        h0 = rm.tensor(H0 if shape is None else rng.standard_normal(shape))
        with tape:
            tape.loop(step, h0, steps=12)
        return tape.stats.plan

    assert plan() == "measured" and plan() == "reused"
    assert plan(budget=low + 8) == "measured"
    assert plan(shape=(2, 8)) == "measured"
    assert plan(step=lambda h: res_step(h)) == "measured"
    assert plan() == "reused"


def test_a_step_grown_since_it_was_measured_is_refused_by_the_executor():
    wide = [False]

    def step(h):
        out = res_step(h)
        if wide[0]:  # records that hold more than when the plan was measured
            out = out + 0 * rm.tanh(rm.tensor(np.zeros((200, 8)), requires_grad=True)).sum()
        return out

    low = None
    tape = Tape(memory=2**40)
    with tape:
        tape.loop(step, rm.tensor(H0), steps=12)
    costs = memory._PLANS[next(reversed(memory._PLANS))][1]
    low = schedules.minimum_bytes(costs)
    tape = Tape(memory=low)
    with tape:
        tape.loop(step, rm.tensor(H0, requires_grad=True), steps=12)  # measured, fine
    wide[0] = True
    tape = Tape(memory=low)
    with tape, pytest.raises(LoopError, match="more than its budget"):
        tape.loop(step, rm.tensor(H0, requires_grad=True), steps=12)  # the cached plan


# --- plans that depend on the timing ------------------------------------------------


def fake_clock(seed):
    """A perf_counter whose intervals are random: costs, and so plans, vary with seed."""
    draw = np.random.default_rng(seed)
    now = itertools.accumulate(draw.uniform(1e-4, 1e-2) for _ in itertools.count())
    return lambda: next(now)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_gradients_do_not_depend_on_the_measured_times(form, monkeypatch):
    low, high = bounds(form)
    reference, _ = store_all(form)
    plans = set()
    # a budget where the plan depends on the times (a scan's tapes do not count the
    # rows of xs, the caller's: at a third of the way its plan is the same for all)
    budget = (low + high) // (4 if form == "scan" else 3)
    for seed in range(6):
        monkeypatch.setattr(measure.time, "perf_counter", fake_clock(seed))
        memory.clear_plans()
        clear_grads()
        tape = Tape(memory=budget)
        grads = FORMS[form](tape)
        monkeypatch.undo()
        assert same(grads, reference)
        assert tape.stats.peak_bytes <= budget
        plans.add(tuple(memory._PLANS[next(reversed(memory._PLANS))][0]))
    assert len(plans) > 1  # the times did change the plan, and not the gradients


# --- long heterogeneous chains: planned over blocks ---------------------------------


def test_a_long_heterogeneous_chain_is_planned_over_blocks(monkeypatch):
    monkeypatch.setattr(memory, "BLOCK_LIMIT", 4)
    costs = costs_of("chain")  # 10 steps: 4 blocks
    budget = schedules.block_minimum_bytes(costs, schedules.block_starts(10, 4, costs.state_bytes))
    reference, _ = store_all("chain")
    clear_grads()
    tape = Tape(memory=budget)
    assert same(run_chain(tape), reference)
    assert tape.stats.schedule == "Optimal" and tape.stats.peak_bytes <= budget
    plan, measured = tape.plans[0]
    assert plan.blocks == 4
    assert tape.stats.predicted_seconds >= schedules.simulate(plan, measured).time


def test_the_prediction_adds_an_overhead_for_each_action_that_runs_steps():
    costs = schedules.ChainCosts.uniform(10, 1.0, 3.0, 8, 16)
    plan = schedules.Revolve(10, 2)
    kinds = [type(a) for a in plan]
    running = sum(k in (schedules.Advance, schedules.Tape, schedules.Reverse) for k in kinds)
    assert 0 < running < len(kinds) - 2
    base = schedules.simulate(plan, costs).time
    assert memory.predicted_time(plan, costs) == base
    each = dict.fromkeys((schedules.Advance, schedules.Tape, schedules.Reverse), 0.5)
    assert memory.predicted_time(plan, costs, each) == base + 0.5 * running
    advances = kinds.count(schedules.Advance)
    assert memory.predicted_time(plan, costs, {schedules.Advance: 2.0}) == base + 2 * advances
    optimal = schedules.Optimal(costs, 64)
    assert memory.predicted_time(optimal, costs) == optimal.predicted_time


def test_a_loop_prediction_is_the_plan_time_and_a_measured_overhead():
    tape = Tape(memory=schedules.minimum_bytes(costs_of("loop")))
    clear_grads()
    run_loop(tape)
    plan, measured = tape.plans[0]
    assert tape.stats.predicted_seconds >= schedules.simulate(plan, measured).time


def test_a_budget_too_tight_for_the_blocks_is_planned_exactly(monkeypatch):
    costs = costs_of("chain")
    exact = schedules.minimum_bytes(costs)
    coarse = schedules.block_minimum_bytes(costs, schedules.block_starts(10, 3, costs.state_bytes))
    assert coarse > exact
    monkeypatch.setattr(memory, "EXACT_LIMIT", 10)  # 10 steps: planned exactly if need be
    plan = memory.plan_optimal(costs, exact, block_limit=3)
    assert isinstance(plan, schedules.Optimal)
    sim = schedules.simulate(plan, costs)
    assert sim.peak_bytes <= exact and sim.reversed_steps == 10
    reference, _ = store_all("chain")
    monkeypatch.setattr(memory, "BLOCK_LIMIT", 3)
    memory.clear_plans()
    clear_grads()
    tape = Tape(memory=exact)
    assert same(run_chain(tape), reference)
    assert tape.stats.peak_bytes <= exact


def test_a_chain_too_long_for_the_exact_programme_falls_back_to_revolve(monkeypatch):
    costs = costs_of("chain")
    exact = schedules.minimum_bytes(costs)
    monkeypatch.setattr(memory, "EXACT_LIMIT", 3)
    plan = memory.plan_optimal(costs, exact, block_limit=3)
    assert isinstance(plan, schedules.Revolve)
    assert schedules.simulate(plan, costs).peak_bytes <= exact
    with pytest.raises(ValueError, match=f"needs at least {exact} bytes"):
        memory.plan_optimal(costs, exact - 1, block_limit=3)


def test_the_messages_name_the_form():
    with pytest.raises(ValueError, match="tape.chain: memory=5 bytes is too small"):
        run_chain(Tape(memory=5))
    with pytest.raises(ValueError, match="tape.scan: memory=5 bytes is too small"):
        run_scan(Tape(memory=5))


def test_the_cache_keeps_the_latest_plans_only(monkeypatch):
    monkeypatch.setattr(memory, "CACHE_SIZE", 2)
    low = schedules.minimum_bytes(costs_of("loop"))
    memory.clear_plans()

    def plan(budget):
        tape = Tape(memory=budget)
        with tape:
            tape.loop(res_step, rm.tensor(H0), steps=12)
        return tape.stats.plan

    assert [plan(low), plan(low + 8), plan(low)] == ["measured", "measured", "reused"]
    assert plan(low + 16) == "measured"  # evicts low + 8, the least recently used
    assert len(memory._PLANS) == 2
    assert [plan(low), plan(low + 8)] == ["reused", "measured"]


# --- a layer repeated along a chain: measured once a kind, planned exactly -----------


def test_steps_of_one_kind_run_the_same_code_on_captured_values_alike():
    a, b, c = (rm.tensor(rng.standard_normal((4, 4))) for _ in range(3))
    wide = rm.tensor(rng.standard_normal((4, 6)))
    kinds = [
        memory.step_kind(f)
        for f in [lambda h, w=w: rm.tanh(h @ w) for w in (a, b, wide)]
        + [lambda h, w=c, act=act: act(h @ w) for act in (rm.tanh, rm.tanh, rm.sin)]
        + [lambda h, k=k: h * k for k in (2, 2, 3)]
    ]
    assert kinds[0] == kinds[1] != kinds[2]  # weights of one shape; another shape
    assert kinds[3] == kinds[4] != kinds[5]  # the same activation; another one
    assert kinds[6] == kinds[7] != kinds[8]  # numbers by value
    assert len(set(kinds[:3] + kinds[3:6] + kinds[6:])) == 6
    assert memory.step_kind(res_step) == memory.step_kind(res_step)
    assert memory.step_kind(rm.tanh) != memory.step_kind(rm.sin)
    assert memory.step_kind(abs) != memory.step_kind(round)  # builtins: by identity
    halves = [functools.partial(lambda h, k: h * k, k=0.5) for _ in range(2)]
    assert memory.step_kind(halves[0]) != memory.step_kind(halves[1])  # partials: too


class Layer:
    def __init__(self, w, act):
        self.w, self.act = w, act

    def __call__(self, h):
        return self.act(h @ self.w)

    def forward(self, h):
        return self.act(h @ self.w)


def test_layers_written_as_classes_are_of_one_kind_when_their_attributes_are():
    a, b = (rm.tensor(rng.standard_normal((4, 4))) for _ in range(2))
    wide = rm.tensor(rng.standard_normal((4, 6)))
    layers = [Layer(a, rm.tanh), Layer(b, rm.tanh), Layer(wide, rm.tanh), Layer(b, rm.sin)]
    for kinds in (
        [memory.step_kind(layer) for layer in layers],
        [memory.step_kind(layer.forward) for layer in layers],
    ):
        assert kinds[0] == kinds[1]
        assert len({kinds[1], kinds[2], kinds[3]}) == 3
    assert memory.step_kind(layers[0]) != memory.step_kind(layers[0].forward)


def test_pooled_times_are_a_median_each_kind_took():
    times = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0]
    assert memory.pool_times(times, "aabaac") == [1.5, 1.5, 4.0, 1.5, 1.5, 9.0]
    assert memory.pool_times(times, "aabaab") == [1.5, 1.5, 4.0, 1.5, 1.5, 4.0]
    assert memory.pool_times(times, range(6)) == times


def repeated_layers(steps, period=2):
    """A residual chain cycling through ``period`` kinds of layer (inner widths 5, 9,
    ...), each step with weights of its own."""
    inner = [5, 9, 3, 7][:period]
    weights = [
        (
            rm.tensor(rng.standard_normal((8, inner[i % period])) / 3, requires_grad=True),
            rm.tensor(rng.standard_normal((inner[i % period], 8)) / 9, requires_grad=True),
        )
        for i in range(steps)
    ]
    layers = [lambda h, w=w, v=v: h + rm.tanh(h @ w) @ v for w, v in weights]
    return layers, [p for pair in weights for p in pair]


def run_layers(tape, layers, params):
    for p in params:
        p.grad = None
    h0 = rm.tensor(H0, requires_grad=True)
    with tape:
        loss = (tape.chain(layers, h0) ** 2).sum()
    loss.backward()
    return [h0.grad, *(p.grad for p in params)]


def test_a_long_chain_of_repeated_layers_pools_its_times_and_plans_exactly(monkeypatch):
    monkeypatch.setattr(memory, "BLOCK_LIMIT", 8)  # 40 steps: over blocks, were they all different
    layers, params = repeated_layers(40)
    reference = run_layers(rm.Tape(), layers, params)
    budget = 2**40
    pooled, pool = [], measure.pool_times  # the kinds measure_costs pools the times by
    monkeypatch.setattr(
        measure, "pool_times", lambda times, kinds: pooled.append(kinds) or pool(times, kinds)
    )
    run_layers(Tape(memory=budget), layers, params)
    costs = memory._PLANS[next(reversed(memory._PLANS))][1]
    for times in (list(costs.forward_time), list(costs.reverse_time)):
        assert times[0::2] == [times[0]] * 20 and times[1::2] == [times[1]] * 20
    # two kinds of layer, pooled apart (their times, a few microseconds each, were compared
    # here and came out equal to the nanosecond in 1 run in 50-75 under load)
    assert len(pooled) == 2  # the forward and the reverse times
    for kinds in pooled:
        assert kinds[0::2] == [kinds[0]] * 20 and kinds[1::2] == [kinds[1]] * 20
        assert kinds[0] != kinds[1]
    budget = (schedules.minimum_bytes(costs) + sum(costs.tape_bytes)) // 4
    memory.clear_plans()
    tape = Tape(memory=budget)
    assert same(run_layers(tape, layers, params), reference)
    plan, measured = tape.plans[0]
    assert isinstance(plan, schedules.Optimal) and plan.blocks is None  # the exact programme
    assert 0 < plan.predicted_time and tape.stats.peak_bytes <= budget
    assert schedules.simulate(plan, measured).peak_bytes <= budget


def test_a_chain_whose_layers_all_differ_is_still_planned_over_blocks(monkeypatch):
    monkeypatch.setattr(memory, "BLOCK_LIMIT", 8)
    weights = [rm.tensor(rng.standard_normal((8, 8)) / 3, requires_grad=True) for _ in range(40)]
    layers = [lambda h, w=w, k=k: h + rm.tanh(h @ w) * (1 + k) for k, w in enumerate(weights)]
    reference = run_layers(rm.Tape(), layers, weights)
    run_layers(Tape(memory=2**40), layers, weights)
    costs = memory._PLANS[next(reversed(memory._PLANS))][1]
    budget = (schedules.minimum_bytes(costs) + sum(costs.tape_bytes)) // 4
    memory.clear_plans()
    tape = Tape(memory=budget)
    assert same(run_layers(tape, layers, weights), reference)
    assert tape.plans[0][0].blocks == 8 and tape.stats.peak_bytes <= budget


KINDS = [  # three kinds of residual layer on the (4, 8) state of H0: inner widths 5, 9, 3
    [
        (
            rm.tensor(rng.standard_normal((8, width)) / 3, requires_grad=True),
            rm.tensor(rng.standard_normal((width, 8)) / 9, requires_grad=True),
        )
        for _ in range(40)
    ]
    for width in (5, 9, 3)
]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 2), min_size=1, max_size=5),
    st.integers(33, 40),
    st.booleans(),
    st.floats(0, 1),
)
def test_chains_of_repeated_layers_are_exact_within_every_budget(cycle, steps, shuffle, where):
    order = [cycle[i % len(cycle)] for i in range(steps)]
    if shuffle:  # a chain of the same kinds out of order: few alike segments
        order = random.Random(steps).sample(order, steps)
    weights = [KINDS[kind][i] for i, kind in enumerate(order)]
    layers = [lambda h, w=w, v=v: h + rm.tanh(h @ w) @ v for w, v in weights]
    params = [p for pair in weights for p in pair]
    reference = run_layers(rm.Tape(), layers, params)
    memory.clear_plans()
    run_layers(Tape(memory=2**40), layers, params)
    costs = memory._PLANS[next(reversed(memory._PLANS))][1]
    for i, j in itertools.combinations(range(len(order)), 2):
        if order[i] == order[j]:  # one kind: one time (the state's shape never changes)
            assert costs.forward_time[i] == costs.forward_time[j]
            assert costs.reverse_time[i] == costs.reverse_time[j]
    low, high = schedules.minimum_bytes(costs), sum(costs.tape_bytes)
    budget = int(low + where * (high - low))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(memory, "BLOCK_LIMIT", 8)  # over blocks, unless it shares enough
        memory.clear_plans()
        tape = Tape(memory=budget)
        grads = run_layers(tape, layers, params)
    assert tape.stats.peak_bytes <= budget
    assert same(grads, reference)
    plan = tape.plans[0][0]
    if len(set(cycle)) == 1 or not shuffle:  # a loop, or a short cycle: planned exactly
        assert getattr(plan, "blocks", None) is None


# --- sizes written back --------------------------------------------------------------


@pytest.mark.parametrize(
    "count, text",
    [
        (0, "0 B"),
        (300, "300 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (48 * 1024 + 512, "48.5 KiB"),
        (2**20, "1.000 MiB"),
        (3 * 2**30 + 2**29, "3.500 GiB"),
    ],
)
def test_sizes_are_written_in_the_largest_unit_they_fill(count, text):
    assert format_bytes(count) == text


# A 256-byte peak printed as "peak 0.000 MiB held".
def test_stats_print_small_peaks_in_bytes():
    with Tape(snapshots=4) as tape:
        h = tape.loop(lambda h: h * 0.9, rm.ones(8, requires_grad=True), steps=10)
    h.sum().backward()
    assert "peak 320 B held" in str(tape.stats)  # 4 snapshots and a tape's input: 8 float64 each


def test_stats_to_dict_is_plain_data_with_every_count():
    for tape in (Tape(memory="64 KiB"), Tape(snapshots=3, trace=True)):
        with tape:
            h = tape.loop(res_step, rm.tensor(H0, requires_grad=True), steps=12)
        (h * h).sum().backward()
        counts = tape.stats.to_dict()
        assert json.loads(json.dumps(counts)) == counts  # plain data, as json writes it
        assert counts["steps"] == 12 and counts["memory"] == tape.byte_limit
        assert counts["recomputed_steps"] == counts["forward_steps"] - 12
        assert counts["peak_bytes"] == tape.stats.peak_bytes
    assert counts["timeline"] == [list(point) for point in tape.stats.timeline]
    assert len(counts["timeline"]) > 12


# --- steps that save nothing -----------------------------------------------------------------


def test_a_byte_budget_takes_a_loop_whose_step_saves_nothing():
    # h * 0.5 saves no array for its backward (the factor is a Python number), so the
    # measured tape of a step is 0 bytes; measuring divided the budget by it
    x = rm.tensor(np.linspace(0.0, 1.0, 64), requires_grad=True)
    with rm.Tape(memory="1 MiB") as tape:
        h = tape.loop(lambda h: h * 0.5, x, steps=10)
    h.sum().backward()
    assert tape.stats.steps == 10 and tape.stats.peak_bytes <= 2**20
    np.testing.assert_array_equal(x.grad, np.full(64, 0.5**10))
