"""Online checkpointing: budget, cost against the offline optimum, protocol."""

from math import comb

import pytest

from remat.schedules import (
    Discard,
    EndForward,
    Free,
    Online,
    Snapshot,
    Tape,
    beta,
    optimal_forward_steps,
    simulate,
)


def untaped(length, slots):
    """E(L, s) of an optimal reversal, from the Griewank-Walther formula."""
    if length <= 1:
        return 0
    r = 0
    while comb(slots + r, slots) < length:
        r += 1
    return r * length - comb(slots + r, slots + 1)


def cost_model(positions, n, s):
    """Forward steps of an online run stopped at n with these stored positions.

    2n - 1 (forward sweep, plus one taped evaluation of every step but the
    last) plus an optimal reversal of each segment between stored positions,
    segment i owning s - i slots.  Checked against simulate below.
    """
    ends = positions[1:] + [n - 1]
    return (
        2 * n
        - 1
        + sum(untaped(end - start, s - i) for i, (start, end) in enumerate(zip(positions, ends)))
    )


def forward_costs(s, n_max):
    """Run the forward phase once; yield (n, cost_model) for every n <= n_max."""
    it = iter(Online(s))
    held = {}  # slot -> position
    closed_cost, closed_key = 0, None
    for action in it:
        if type(action) is Snapshot:
            held[action.slot] = action.step
        elif type(action) is Free:
            del held[action.slot]
        elif type(action) is Tape:
            n = action.stop
            assert len(held) <= s
            positions = sorted(held.values())
            key = tuple(positions)
            if key != closed_key:  # segments before the last one changed
                closed_key = key
                closed_cost = cost_model(positions, positions[-1] + 1, s) - (
                    2 * (positions[-1] + 1) - 1
                )
            last = n - 1 - positions[-1]
            yield n, 2 * n - 1 + closed_cost + untaped(last, s - len(positions) + 1), positions
            if n == n_max:
                return
        else:
            assert type(action) is Discard


@pytest.mark.parametrize("s", [1, 2, 3, 4, 7, 10])
def test_cost_model_matches_simulate(s):
    for n, predicted, positions in forward_costs(s, 250):
        assert simulate(Online(s), n).forward_steps == predicted, (n, s, positions)


@pytest.mark.parametrize("n, s", [(5000, 10), (30011, 10), (20011, 30), (4099, 4)])
def test_cost_model_matches_simulate_at_sample_points(n, s):
    *_, (m, predicted, _) = forward_costs(s, n)
    assert m == n and simulate(Online(s), n).forward_steps == predicted


def test_within_one_of_optimum_up_to_beta_s_2():
    for s in range(1, 41):
        for n, cost, _ in forward_costs(s, beta(s, 2)):
            assert cost <= optimal_forward_steps(n, s) + 1, (n, s)
            if n <= s:
                assert cost == optimal_forward_steps(n, s), (n, s)


@pytest.mark.parametrize("s, beyond", [(4, 1.08), (10, 1.03), (30, 1.025)])
def test_near_optimal_for_every_n_up_to_1e5(s, beyond):
    worst = 0.0
    for n, cost, _ in forward_costs(s, 10**5):
        ratio = cost / optimal_forward_steps(n, s)
        assert ratio <= 1.5, (n, s)
        if n > beta(s, 2):
            worst = max(worst, ratio)
    assert worst <= beyond  # the figures quoted in the docstring of online.py


# step evaluations of the online scheme in equinox, as quoted in the issue
EQUINOX = {
    (1000, 4): 18701,
    (1000, 10): 6469,
    (1000, 30): 5703,
    (10**4, 4): 1721553,
    (10**4, 10): 77296,
    (10**4, 30): 61255,
}


@pytest.mark.parametrize("n, s", sorted(EQUINOX))
def test_fewer_evaluations_than_equinox(n, s):
    result = simulate(Online(s), n)
    assert result.forward_steps < EQUINOX[n, s]
    assert result.peak_snapshots <= s


def test_protocol():
    online = Online(3)
    it = iter(online)
    assert iter(it) is it and iter(online) is not it
    assert next(it) == Snapshot(0, 0)
    assert next(it) == Tape(0, 1)
    with pytest.raises(ValueError, match=r"got steps=2 but the last Tape produced x_1"):
        it.finish(2)
    assert next(it) == Discard(0, 1)
    with pytest.raises(ValueError, match="no forward Tape is waiting"):
        it.finish(1)
    forward = []
    while (action := next(it)) != Tape(3, 4):
        forward.append(action)
    it.finish(4)
    with pytest.raises(ValueError, match="already finished"):
        it.finish(4)
    assert next(it) == EndForward()
    with pytest.raises(ValueError, match=r"Online.finish: steps must be an integer >= 1, got 0"):
        iter(online).finish(0)


def test_runs_are_independent():
    online = Online(5)
    first = simulate(online, 77)
    assert simulate(online, 20).steps == 20
    assert simulate(online, 77) == first
