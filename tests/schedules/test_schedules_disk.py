"""Memory + disk schedules: DiskRevolve, TwoLevel, their costs, simulate's disk level.

The optimum is checked against two oracles written here, independently of
remat.schedules.disk: an exhaustive shortest-path search over every legal
sequence of executor moves (small n), and the plain O(n^2 d) recurrence.
"""

import heapq
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import (
    DISK,
    MEMORY,
    Advance,
    DiskRevolve,
    End,
    EndForward,
    Free,
    Restore,
    Reverse,
    Revolve,
    ScheduleError,
    Snapshot,
    Tape,
    TwoLevel,
    disk_revolve_cost,
    optimal_forward_steps,
    simulate,
    two_level_cost,
)

INF = float("inf")


def exhaustive(n, s, d, wc, rc):
    """Cheapest reversal of n steps by Dijkstra over executor states.

    A state is (current position or None, positions in memory, positions on
    disk, steps still to reverse).  Moves: advance one step (cost 1); tape and
    reverse the next step when it is current (cost 0); store the current
    state in memory (0) or on disk (wc); restore from memory (0) or disk (rc);
    drop a stored state (0).  d=None means an unbounded disk.
    """
    d = n if d is None else d
    start = (0, frozenset(), frozenset(), n)
    best = {start: 0}
    queue, tie = [(0, 0, start)], itertools.count()
    while queue:
        cost, _, state = heapq.heappop(queue)
        if best.get(state, INF) < cost:
            continue
        current, memory, disk, left = state
        if left == 0:
            return cost
        moves = []
        if current is not None:
            if current + 1 <= left - 1:
                moves.append((1, (current + 1, memory, disk, left)))
            if current == left - 1:
                keep = left - 1
                moves.append(
                    (
                        0,
                        (
                            None,
                            frozenset(p for p in memory if p < keep),
                            frozenset(p for p in disk if p < keep),
                            keep,
                        ),
                    )
                )
            if current not in memory and len(memory) < s:
                moves.append((0, (current, memory | {current}, disk, left)))
            if current not in disk and len(disk) < d:
                moves.append((wc, (current, memory, disk | {current}, left)))
        for p in memory:
            moves.append((0, (p, memory, disk, left)))
            moves.append((0, (current, memory - {p}, disk, left)))
        for p in disk:
            moves.append((rc, (p, memory, disk, left)))
            moves.append((0, (current, memory, disk - {p}, left)))
        for step_cost, new in moves:
            total = cost + step_cost
            if total < best.get(new, INF):
                best[new] = total
                heapq.heappush(queue, (total, next(tie), new))
    return INF


def memory_only(n, s):
    """E(n, s) from the closed formula (INF when no slot and n > 1)."""
    if s == 0:
        return 0 if n == 1 else INF
    return optimal_forward_steps(n, s) - n


def recurrence(n_max, s, d, wc, rc):
    """T[n] for n <= n_max by the plain H-Revolve recurrence (every split tried)."""
    M = [INF] + [memory_only(n, s) for n in range(1, n_max + 1)]
    T_prev = M[:]
    for _ in range(d):
        P = [INF] * (n_max + 1)
        for n in range(1, n_max + 1):
            P[n] = min([M[n]] + [j + T_prev[n - j] + rc + P[j] for j in range(1, n)])
        T_prev = [INF] + [min(M[n], wc + P[n]) for n in range(1, n_max + 1)]
    return T_prev


def cost_of(schedule):
    result = simulate(schedule)
    return (
        result.advances
        + schedule.write_cost * result.writes[DISK]
        + schedule.read_cost * result.reads[DISK]
    )


# --- anchors -----------------------------------------------------------------


def test_anchor_disk_revolve():
    assert disk_revolve_cost(11, 1, 2, 2) == 30
    schedule = DiskRevolve(11, 1, 2, 2)
    assert schedule.cost == 30 == cost_of(schedule)


def test_anchor_two_level():
    assert two_level_cost(21, 2, 2, 2, 2) == 53
    schedule = TwoLevel(21, 2, 2, 2, 2)
    assert schedule.cost == 53 == cost_of(schedule)
    assert simulate(schedule).peak_disk_snapshots <= 2


# --- against the oracles -----------------------------------------------------------

SMALL = [
    (n, s, d, wc, rc)
    for n in range(1, 8)
    for s in range(0, 3)
    for d in range(0, 3)
    for wc, rc in ((0, 0), (1, 1), (2, 2), (1, 3), (3, 0.5))
    if n == 1 or s + d > 0
]


@pytest.mark.parametrize("n, s, d, wc, rc", SMALL)
def test_two_level_is_optimal_against_exhaustive_search(n, s, d, wc, rc):
    want = exhaustive(n, s, d, wc, rc)
    assert two_level_cost(n, s, d, wc, rc) == pytest.approx(want)
    schedule = TwoLevel(n, s, d, wc, rc)
    assert cost_of(schedule) == pytest.approx(want)
    result = simulate(schedule)
    assert result.peak_snapshots <= s and result.peak_disk_snapshots <= d


@pytest.mark.parametrize(
    "n, s, wc, rc",
    [
        (n, s, wc, rc)
        for n in range(1, 8)
        for s in (0, 1, 2)
        for wc, rc in ((2, 2), (1, 3), (0.5, 0))
    ],
)
def test_disk_revolve_is_optimal_against_exhaustive_search(n, s, wc, rc):
    want = exhaustive(n, s, None, wc, rc)
    assert disk_revolve_cost(n, s, wc, rc) == pytest.approx(want)
    assert cost_of(DiskRevolve(n, s, wc, rc)) == pytest.approx(want)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 70),
    s=st.integers(0, 5),
    d=st.integers(0, 4),
    wc=st.sampled_from([0, 0.5, 1, 2, 3, 7, 1.25]),
    rc=st.sampled_from([0, 0.5, 1, 2, 3, 7, 0.75]),
)
def test_two_level_matches_the_plain_recurrence(n, s, d, wc, rc):
    if n > 1 and s + d == 0:
        d = 1
    want = recurrence(n, s, d, wc, rc)[n]
    schedule = TwoLevel(n, s, d, wc, rc)
    assert schedule.cost == pytest.approx(want)
    assert cost_of(schedule) == pytest.approx(want)
    result = simulate(schedule)
    assert result.peak_snapshots <= s and result.peak_disk_snapshots <= d
    assert result.forward_steps == n + result.advances
    assert result.taped_steps == n and result.peak_tapes == 1


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 70),
    s=st.integers(0, 5),
    wc=st.sampled_from([0, 0.5, 1, 2, 3, 7]),
    rc=st.sampled_from([0, 0.5, 1, 2, 3, 7]),
)
def test_disk_revolve_is_two_level_with_a_disk_as_long_as_the_chain(n, s, wc, rc):
    schedule = DiskRevolve(n, s, wc, rc)
    assert schedule.disk_snapshots is None
    assert schedule.cost == pytest.approx(recurrence(n, s, n, wc, rc)[n])
    assert cost_of(schedule) == pytest.approx(schedule.cost)


# --- TwoLevel(d=0) is Revolve ------------------------------------------------------


@pytest.mark.parametrize("n, s", [(1, 1), (2, 1), (10, 2), (57, 3), (300, 6)])
def test_two_level_without_disk_is_revolve(n, s):
    two, revolve = TwoLevel(n, s, 0, 2, 2), Revolve(n, s)
    assert list(two) == list(revolve)
    a, b = simulate(two), simulate(revolve)
    assert (a.actions, a.forward_steps) == (b.actions, b.forward_steps)
    assert two.cost == two_level_cost(n, s, 0, 2, 2) == optimal_forward_steps(n, s) - n
    assert a.writes == {MEMORY: b.writes[MEMORY], DISK: 0}


def test_free_disk_io_never_hurts_and_expensive_io_is_never_used():
    for n in (5, 40, 200):
        for s in (1, 3):
            memory = optimal_forward_steps(n, s) - n
            assert two_level_cost(n, s, 3, 0, 0) <= memory
            assert two_level_cost(n, s, 3, 10**6, 10**6) == memory
            assert simulate(TwoLevel(n, s, 3, 10**6, 10**6)).writes[DISK] == 0


def test_where_x0_lives_is_explicit():
    cheap = TwoLevel(50, 1, 3, 1, 1)
    assert cheap.x0_level == DISK and next(iter(cheap)) == Snapshot(0, 0, DISK)
    dear = TwoLevel(50, 3, 3, 100, 100)
    assert dear.x0_level == MEMORY and next(iter(dear)) == Snapshot(0, 0, MEMORY)
    assert DiskRevolve(11, 1, 2, 2).x0_level == DISK
    assert TwoLevel(1, 1, 1, 1, 1).x0_level is None


# --- simulate's disk level ---------------------------------------------------------


class Listed:
    def __init__(self, steps, snapshots, actions, disk_snapshots=0):
        self.steps, self.snapshots, self.actions = steps, snapshots, actions
        self.disk_snapshots = disk_snapshots

    def __iter__(self):
        return iter(self.actions)


ONE_DISK = [
    Snapshot(0, 0, DISK),
    Advance(0, 1),
    Tape(1, 2),
    EndForward(),
    Reverse(1, 2),
    Restore(0, 0, DISK),
    Free(0, DISK),
    Tape(0, 1),
    Reverse(0, 1),
    End(),
]


def test_simulate_counts_writes_and_reads_by_level():
    result = simulate(Listed(2, 0, ONE_DISK, disk_snapshots=1))
    assert result.writes == {MEMORY: 0, DISK: 1} and result.reads == {MEMORY: 0, DISK: 1}
    assert (result.peak_snapshots, result.peak_disk_snapshots) == (0, 1)
    assert simulate(Listed(2, 0, ONE_DISK, disk_snapshots=None)).reads[DISK] == 1
    revolve = simulate(Revolve(10, 2))
    assert revolve.writes[DISK] == revolve.reads[DISK] == 0
    assert revolve.writes[MEMORY] >= 2 and revolve.reads[MEMORY] >= 2


@pytest.mark.parametrize(
    "disk_snapshots, actions, pattern",
    [
        (0, ONE_DISK, r"#0 Snapshot\(0, 0, 'disk'\): slot 0 is outside the budget.*budget 0"),
        (1, [Snapshot(0, 1, DISK)], r"slot 1 is outside the budget.*disk slots run from 0 to 0"),
        (None, [Snapshot(0, -1, DISK)], r"slot -1 is outside the budget"),
        (1, [Restore(0, 0, DISK)], r"#0 Restore\(0, 0, 'disk'\): slot 0 is empty"),
        (1, [Snapshot(0, 0), Restore(0, 0, DISK)], r"slot 0 is empty"),
        (1, [Snapshot(0, 0, "tape")], r"unknown storage level 'tape'"),
        (1, ONE_DISK[:6] + ONE_DISK[7:], r"End\(\): still held: .*disk slots 0"),
    ],
)
def test_simulate_checks_the_disk_level(disk_snapshots, actions, pattern):
    with pytest.raises(ScheduleError, match=pattern):
        simulate(Listed(2, 1, actions, disk_snapshots))


def test_a_schedule_without_disk_snapshots_has_no_disk_level():
    class MemoryOnly(Listed):
        def __init__(self, *args):
            super().__init__(*args)
            del self.disk_snapshots

    with pytest.raises(ScheduleError, match="unknown storage level 'disk'.*disk_snapshots"):
        simulate(MemoryOnly(2, 1, ONE_DISK))


# --- arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: DiskRevolve(0, 1, 2, 2), r"DiskRevolve: steps must be an integer >= 1, got 0"),
        (lambda: DiskRevolve(5, -1, 2, 2), r"snapshots must be an integer >= 0, got -1"),
        (lambda: DiskRevolve(5, 1, -2, 2), r"write_cost must be a finite number >= 0, got -2"),
        (lambda: DiskRevolve(5, 1, 2, INF), r"read_cost must be a finite number >= 0, got inf"),
        (lambda: DiskRevolve(5, 1, True, 2), r"write_cost must be .* got True"),
        (lambda: TwoLevel(5, 1, -1, 2, 2), r"TwoLevel: disk_snapshots must be .* got -1"),
        (lambda: TwoLevel(5, 1, 2.5, 2, 2), r"disk_snapshots must be an integer >= 0, got 2.5"),
        (lambda: TwoLevel(5, 0, 0, 2, 2), r"snapshots \+ disk_snapshots must be >= 1.*got snap"),
        (lambda: TwoLevel(5, 1, 1, "2", 2), r"write_cost must be a finite number >= 0, got '2'"),
        (lambda: two_level_cost(5, 1, 1, 2, None), r"two_level_cost: read_cost .* got None"),
        (lambda: disk_revolve_cost(5, 1.0, 2, 2), r"disk_revolve_cost: snapshots .* got 1.0"),
    ],
)
def test_bad_arguments_name_the_argument_and_value(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()


def test_repr_and_disk_only_memory():
    assert repr(TwoLevel(5, 1, 2, 2, 3)) == (
        "TwoLevel(steps=5, snapshots=1, disk_snapshots=2, write_cost=2, read_cost=3)"
    )
    assert repr(DiskRevolve(5, 0, 1.5, 2)).startswith("DiskRevolve(steps=5, snapshots=0")
    # no memory slot at all: every stored state is on disk
    result = simulate(TwoLevel(6, 0, 2, 1, 1))
    assert result.peak_snapshots == 0 and result.writes[MEMORY] == 0


# --- the peer, when installed ------------------------------------------------------


@pytest.mark.parametrize("n", [2, 11, 21, 40])
def test_same_optima_as_checkpoint_schedules(n):
    peer = pytest.importorskip("checkpoint_schedules")
    common = pytest.importorskip("benchmarks.common", reason="benchmarks/ is not here")

    def peer_disk_cost(schedule, n, wd, rd):
        return common.peer_counts(schedule, n, wd, rd)[3]

    for ram in (1, 2, 3):
        for wd, rd in ((2, 2), (1, 3), (0.5, 0.5)):
            # ub = 1, its default: the same optimal schedule as ub = 0 (every
            # step is taped once); its HRevolve misbehaves with ub = 0
            theirs = peer.DiskRevolve(n, ram, uf=1, ub=1, wd=wd, rd=rd)
            assert disk_revolve_cost(n, ram, wd, rd) == peer_disk_cost(theirs, n, wd, rd)
            for disk in (1, 2, 3):
                theirs = peer.HRevolve(n, ram, disk, uf=1, ub=1, wd=wd, rd=rd)
                assert two_level_cost(n, ram, disk, wd, rd) == peer_disk_cost(theirs, n, wd, rd)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 400),
    s=st.integers(0, 6),
    d=st.integers(1, 12),
    wc=st.sampled_from([0.0, 0.3, 1.0, 2.0, 4.5]),
    rc=st.sampled_from([0.0, 0.7, 1.0, 2.0, 3.25]),
)
def test_pruning_the_disk_splits_changes_no_cost_and_no_split(n, s, d, wc, rc):
    """The convex-minorant pruning of TwoLevel's tables (used when the kinks are many)
    gives the very tables that trying every kink gives, ties included."""
    from remat.schedules import disk_tables

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(disk_tables, "PRUNE_FROM", 0)
        pruned = disk_tables.Tables(n, s, wc, rc).two_level(d)
        patch.setattr(disk_tables, "PRUNE_FROM", 10**9)
        full = disk_tables.Tables(n, s, wc, rc).two_level(d)
    assert pruned == full


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 120),
    s=st.integers(0, 4),
    extra=st.integers(0, 3),
    wc=st.sampled_from([0.0, 0.5, 2.0, 5.0]),
    rc=st.sampled_from([0.0, 1.0, 2.0]),
)
def test_with_enough_disk_slots_two_level_is_disk_revolve(n, s, extra, wc, rc):
    """When Disk-Revolve's plan fits in the disk slots, TwoLevel takes it: the same
    optimum as its own tables give, a valid schedule within the slots."""
    from remat.schedules import disk

    needed = simulate(DiskRevolve(n, s, wc, rc)).peak_disk_snapshots
    d = max(needed, 1) + extra
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(disk, "SHORTCUT_FROM", 0)
        short = TwoLevel(n, s, d, wc, rc)
        shortcut_cost = two_level_cost(n, s, d, wc, rc)
        patch.setattr(disk, "SHORTCUT_FROM", 10**9)
        levels = TwoLevel(n, s, d, wc, rc)
    assert short._unbounded is not None and levels._unbounded is None
    sim = simulate(short)
    assert sim.peak_disk_snapshots <= d and sim.peak_snapshots <= s
    assert sim.advances + wc * sim.writes[DISK] + rc * sim.reads[DISK] == pytest.approx(short.cost)
    assert levels.cost == pytest.approx(short.cost, rel=1e-12, abs=1e-12)
    assert shortcut_cost == pytest.approx(short.cost, rel=1e-12, abs=1e-12)
