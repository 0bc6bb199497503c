"""Tests of remat.schedules: vocabulary, formulas, offline schedules, simulate."""

import pickle
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import (
    MEMORY,
    Advance,
    Discard,
    End,
    EndForward,
    Free,
    Online,
    Periodic,
    Restore,
    Reverse,
    Revolve,
    ScheduleError,
    Snapshot,
    Sqrt,
    StoreAll,
    Tape,
    beta,
    make_schedule,
    optimal_forward_steps,
    repetition_number,
    simulate,
)


def brute_force_untaped(n_max, s_max):
    """E[s][n] by the split recursion, written without the closed formula."""
    E = [[0] * (n_max + 1) for _ in range(s_max + 1)]
    for n in range(1, n_max + 1):
        E[1][n] = n * (n - 1) // 2
    for s in range(2, s_max + 1):
        for n in range(2, n_max + 1):
            E[s][n] = min(j + E[s - 1][n - j] + E[s][j] for j in range(1, n))
    return E


@pytest.fixture(scope="module")
def oracle():
    return brute_force_untaped(300, 20)


def replay(schedule, steps=None):
    """An independent, minimal replay: reversal order, slot use, forward count."""
    it = iter(schedule)
    finish = getattr(it, "finish", None)
    n = schedule.steps if steps is None else steps
    reversed_order, in_use, peak, forward, current = [], set(), 0, 0, 0
    for action in it:
        if isinstance(action, (Advance, Tape)):
            forward += action.stop - action.start
            current = action.stop
            if finish is not None and current == n:
                finish(n)
                finish = None
        elif isinstance(action, Reverse):
            reversed_order.extend(range(action.stop - 1, action.start - 1, -1))
        elif isinstance(action, Snapshot):
            in_use.add(action.slot)
            peak = max(peak, len(in_use))
        elif isinstance(action, Free):
            in_use.remove(action.slot)
    return reversed_order, peak, forward, in_use


# --- actions -------------------------------------------------------------


def test_actions_repr_fields_and_equality():
    assert repr(Advance(0, 5)) == "Advance(0, 5)"
    assert repr(Snapshot(3, 1)) == "Snapshot(3, 1)"
    assert repr(Snapshot(3, 1, "disk")) == "Snapshot(3, 1, 'disk')"
    assert repr(Free(2)) == "Free(2)"
    assert repr(EndForward()) == "EndForward()" and repr(End()) == "End()"
    assert Restore(4, 2).step == 4 and Restore(4, 2).slot == 2
    assert Restore(4, 2).level == MEMORY == "memory"
    assert Tape(1, 3).start == 1 and Tape(1, 3).stop == 3
    assert Advance(0, 1) != Tape(0, 1) and Reverse(0, 1) != Discard(0, 1)
    assert Advance(0, 1) == Advance(0, 1) and Advance(0, 1) != (0, 1)
    assert len({Advance(0, 1), Tape(0, 1), Advance(0, 1)}) == 2
    assert tuple.__new__(Advance, (0, 5)) == Advance(0, 5)
    for action in (Advance(0, 5), Snapshot(3, 1), Free(2), End()):
        assert pickle.loads(pickle.dumps(action)) == action


def test_actions_match_and_immutability():
    match Snapshot(7, 2):
        case Snapshot(step, slot):
            assert (step, slot) == (7, 2)
        case _:
            pytest.fail("Snapshot did not match its own pattern")
    with pytest.raises(AttributeError):
        Advance(0, 1).start = 3


# --- formulas --------------------------------------------------------------


def test_formula_examples_from_the_issue():
    assert optimal_forward_steps(10, 2) == 30
    assert optimal_forward_steps(100, 5) == 416
    assert optimal_forward_steps(1000, 10) == 4636
    assert optimal_forward_steps(10**4, 10) == 67624


def test_formula_matches_brute_force(oracle):
    for s in range(1, 21):
        for n in range(1, 301):
            assert optimal_forward_steps(n, s) == n + oracle[s][n], (n, s)


def test_formula_degenerate_budgets():
    for n in range(1, 60):
        assert optimal_forward_steps(n, 1) == n + n * (n - 1) // 2
        for s in (n - 1, n, n + 5):
            if s >= 1:
                assert optimal_forward_steps(n, s) == (2 * n - 1 if n > 1 else 1)


def test_beta_and_repetition_number():
    assert beta(2, 3) == comb(5, 2) == 10 and beta(0, 7) == 1 and beta(5, 0) == 1
    for s in range(1, 8):
        for n in range(1, 500):
            r = repetition_number(n, s)
            assert comb(s + r, s) >= n
            assert r == 0 or comb(s + r - 1, s) < n


# --- every schedule --------------------------------------------------------


def check_schedule(schedule, steps=None):
    n = schedule.steps if steps is None else steps
    result = simulate(schedule, steps)
    order, peak, forward, left = replay(schedule, steps)
    assert order == list(range(n - 1, -1, -1))
    assert peak <= schedule.snapshots and not left
    assert result.forward_steps == forward
    assert result.reversed_steps == n
    assert result.peak_snapshots == peak
    return result


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), s=st.integers(1, 40))
def test_revolve_property(n, s):
    result = check_schedule(Revolve(n, s))
    assert result.forward_steps == optimal_forward_steps(n, s)
    assert result.peak_tapes == 1


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), k=st.integers(1, 60))
def test_periodic_property(n, k):
    result = check_schedule(Periodic(n, k))
    last = n - (n - 1) // k * k
    assert result.forward_steps == 2 * n - last <= 2 * n
    assert result.peak_tapes <= k
    assert Periodic(n, k).snapshots == -(-n // k) - 1


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 2000))
def test_sqrt_and_store_all_property(n):
    sqrt = Sqrt(n)
    assert (sqrt.interval - 1) ** 2 < n <= sqrt.interval**2
    assert check_schedule(sqrt).forward_steps <= 2 * n
    result = check_schedule(StoreAll(n))
    assert (result.forward_steps, result.peak_snapshots, result.peak_tapes) == (n, 0, n)
    assert list(StoreAll(n)) == [Tape(0, n), EndForward(), Reverse(0, n), End()]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 600), s=st.integers(1, 40))
def test_online_property(n, s):
    result = check_schedule(Online(s), n)
    assert result.peak_snapshots <= s
    if n <= beta(s, 2):
        assert result.forward_steps <= optimal_forward_steps(n, s) + 1


def test_revolve_equals_optimum_for_all_small_cases(oracle):
    for s in range(1, 21):
        for n in range(1, 301):
            result = simulate(Revolve(n, s))
            assert result.forward_steps == n + oracle[s][n], (n, s)
            assert result.peak_snapshots <= s


def test_revolve_shape():
    actions = list(Revolve(5, 2))
    assert actions[0] == Snapshot(0, 0)
    cut = actions.index(EndForward())
    assert actions[cut - 1] == Tape(4, 5) and actions[cut + 1] == Reverse(4, 5)
    assert actions[-1] == End()
    assert list(Revolve(1, 3)) == [Tape(0, 1), EndForward(), Reverse(0, 1), End()]


@pytest.mark.parametrize("n", [1000, 12345, 10**5])
@pytest.mark.parametrize("s", [2, 5, 10, 30])
def test_revolve_large_grid(n, s):
    result = simulate(Revolve(n, s))
    assert result.forward_steps == optimal_forward_steps(n, s)
    assert result.peak_snapshots <= s


@pytest.mark.parametrize("s", [3, 30])
def test_revolve_million_steps(s):
    n = 10**6
    forward = pending = 0
    for action in Revolve(n, s):
        if type(action) is Advance or type(action) is Tape:
            forward += action.stop - action.start
        elif type(action) is Snapshot:
            pending += 1
        elif type(action) is Free:
            pending -= 1
        assert pending <= s
    assert forward == optimal_forward_steps(n, s)


def test_revolve_with_more_slots_than_steps():
    for n in range(1, 30):
        result = check_schedule(Revolve(n, n + 7))
        assert result.forward_steps == optimal_forward_steps(n, n + 7)
        assert result.peak_snapshots <= max(n - 1, 0)


def test_schedule_attributes_and_repr():
    assert (StoreAll(5).steps, StoreAll(5).snapshots) == (5, 0)
    assert (Revolve(9, 3).steps, Revolve(9, 3).snapshots) == (9, 3)
    assert (Online(4).steps, Online(4).snapshots) == (None, 4)
    assert Sqrt(100).interval == 10 and Sqrt(101).interval == 11
    assert repr(Revolve(9, 3)) == "Revolve(steps=9, snapshots=3)"
    assert repr(Online(4)) == "Online(snapshots=4)"
    assert repr(Sqrt(9)) == "Sqrt(steps=9)"
    assert repr(Periodic(9, 2)) == "Periodic(steps=9, interval=2)"
    assert repr(StoreAll(9)) == "StoreAll(steps=9)"


# --- bad input -------------------------------------------------------------


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Revolve(10, 0), "Revolve: snapshots must be an integer >= 1, got 0"),
        (lambda: Revolve(0, 3), "Revolve: steps must be an integer >= 1, got 0"),
        (lambda: Revolve(10, True), "Revolve: snapshots must be an integer >= 1, got True"),
        (lambda: Revolve(10.0, 2), "Revolve: steps must be an integer >= 1, got 10.0"),
        (lambda: StoreAll(-1), "StoreAll: steps must be an integer >= 1, got -1"),
        (lambda: Periodic(10, 0), "Periodic: interval must be an integer >= 1, got 0"),
        (lambda: Sqrt("9"), "Sqrt: steps must be an integer >= 1, got '9'"),
        (lambda: Online(0), "Online: snapshots must be an integer >= 1, got 0"),
        (
            lambda: optimal_forward_steps(5, 0),
            "optimal_forward_steps: snapshots must be an integer >= 1, got 0",
        ),
        (
            lambda: repetition_number(False, 2),
            "repetition_number: steps must be an integer >= 1, got False",
        ),
        (lambda: beta(-1, 2), "beta: s must be an integer >= 0, got -1"),
    ],
)
def test_bad_input_names_argument_value_and_rule(build, message):
    with pytest.raises(ValueError) as info:
        build()
    assert str(info.value) == message


def test_make_schedule():
    assert repr(make_schedule("revolve", 10, 3)) == "Revolve(steps=10, snapshots=3)"
    assert repr(make_schedule("online", snapshots=3)) == "Online(snapshots=3)"
    assert repr(make_schedule("store_all", 7)) == "StoreAll(steps=7)"
    assert repr(make_schedule("sqrt", 7)) == "Sqrt(steps=7)"
    periodic = make_schedule("periodic", 100, 4)
    assert periodic.snapshots <= 4 and periodic.interval == 20
    with pytest.raises(ValueError, match="unknown schedule 'treeverse'.*'store_all'.*'online'"):
        make_schedule("treeverse", 10, 2)
    with pytest.raises(ValueError, match="'revolve' needs snapshots"):
        make_schedule("revolve", 10)
    with pytest.raises(ValueError, match="'online' takes no steps"):
        make_schedule("online", 10, 2)


# --- simulate rejects broken schedules ------------------------------------


class Listed:
    def __init__(self, steps, snapshots, actions):
        self.steps, self.snapshots, self.actions = steps, snapshots, actions

    def __iter__(self):
        return iter(self.actions)


@pytest.mark.parametrize(
    "steps, snapshots, actions, pattern",
    [
        (2, 1, [Tape(1, 2)], r"#0 Tape\(1, 2\): the current state is x_0"),
        (
            2,
            1,
            [Advance(0, 1), Tape(1, 2), EndForward(), Reverse(0, 2)],
            r"#3 Reverse\(0, 2\): steps 0 are not taped .*taped before it is reversed",
        ),
        (
            2,
            1,
            [Advance(0, 1), Tape(1, 2), EndForward(), Reverse(1, 2), Reverse(1, 2)],
            r"#4 Reverse\(1, 2\): .*next step to reverse is step 0",
        ),
        (
            2,
            1,
            [Tape(0, 2), EndForward(), Reverse(0, 1)],
            r"#2 Reverse\(0, 1\): it reverses step 0 first but the next step to reverse is step 1",
        ),
        (2, 1, [Tape(0, 2), Reverse(0, 2)], r"#1 .*forward sweep is not over"),
        (2, 1, [Snapshot(0, 1)], r"#0 Snapshot\(0, 1\): slot 1 is outside the budget"),
        (2, 0, [Snapshot(0, 0)], r"slot 0 is outside the budget.*budget 0"),
        (2, 1, [Restore(0, 0)], r"#0 Restore\(0, 0\): slot 0 is empty"),
        (2, 1, [Snapshot(0, 0), Restore(1, 0)], r"#1 Restore\(1, 0\): slot 0 holds x_0"),
        (2, 1, [Advance(0, 1), Snapshot(0, 0)], r"the current state is x_1.*must be x_0"),
        (2, 1, [Free(0)], r"#0 Free\(0\): slot 0 is empty"),
        (2, 1, [Advance(0, 2), EndForward()], r"#1 EndForward\(\): step 1 is not taped"),
        (2, 1, [Tape(0, 1), EndForward()], r"the current state is x_1.*ends at x_2"),
        (
            2,
            1,
            [Tape(0, 2), EndForward(), Reverse(1, 2), End()],
            r"#3 End\(\): steps 0 down to 0 are not reversed",
        ),
        (
            1,
            1,
            [Snapshot(0, 0), Tape(0, 1), EndForward(), Reverse(0, 1), End()],
            r"#4 End\(\): still held: .*slots 0",
        ),
        (1, 1, [Tape(0, 1), EndForward(), Reverse(0, 1)], r"stopped without End\(\)"),
        (1, 1, [Tape(0, 1), EndForward(), Reverse(0, 1), End(), End()], r"#4 .*after End"),
        (2, 1, [Tape(0, 1), Tape(1, 3)], r"outside the loop"),
        (2, 1, [Tape(0, 1), Discard(0, 1), Discard(0, 1)], r"#2 .*steps 0 are not taped"),
        (2, 1, [Snapshot(0, 0, "disk")], r"unknown storage level 'disk'"),
    ],
)
def test_simulate_rejects(steps, snapshots, actions, pattern):
    with pytest.raises(ScheduleError, match=pattern):
        simulate(Listed(steps, snapshots, actions))


def test_simulate_arguments():
    with pytest.raises(ValueError, match="steps is required"):
        simulate(Online(3))
    with pytest.raises(ValueError, match="contradicts"):
        simulate(Revolve(5, 2), 6)
    assert simulate(Revolve(5, 2), 5).forward_steps == optimal_forward_steps(5, 2)
    assert issubclass(ScheduleError, ValueError)


@pytest.mark.parametrize("n", [1, 2, 17])
def test_store_all_of_unknown_length_learns_it_at_the_end(n):
    result = simulate(StoreAll(), steps=n)
    assert (result.forward_steps, result.reversed_steps, result.peak_snapshots) == (n, n, 0)


def test_simulate_says_when_it_is_not_given_a_schedule():
    with pytest.raises(ValueError, match="is not a schedule"):
        simulate([End()])
