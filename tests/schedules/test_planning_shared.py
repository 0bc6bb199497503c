"""Optimal's table with rows shared by segments alike step for step (remat.schedules.planning).

Sharing must change nothing: the shared table is compared bit for bit, row
by row and choice by choice, with the table of a row a segment, and both
with a plain recursion written here that adds in the same order.  Times are
random floats, so that sums done in another order would differ in their last
bits.  Chains are made of a few kinds of steps, repeated in a pattern or at
random, as real chains (a transformer's blocks, residual stages) are.
"""

import random
from functools import lru_cache
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import ChainCosts, Optimal, block_starts, levels, minimum_bytes, simulate
from remat.schedules.planning import SegmentClasses, SplitTable, table_rows

from .oracles import search


def kinds_chain(rng, n, kinds, periodic):
    """Units and times of ``n`` steps drawn from ``kinds`` kinds (a cycle or at random)."""
    made = [
        (rng.uniform(0.5, 2.0), rng.uniform(2.0, 6.0), rng.randint(1, 5), rng.randint(1, 9))
        for _ in range(kinds)
    ]
    order = [i % kinds if periodic else rng.randrange(kinds) for i in range(n)]
    f, r, s, t = (list(column) for column in zip(*(made[k] for k in order)))
    return s + [rng.randint(1, 5)], t, f, r


def reference(s, t, budget, f, r):
    """``D(a, b, k)`` by the recursion itself, summing as the tables do (left to right)."""
    inf = float("inf")

    def total(values, a, b):
        out = values[a]
        for x in values[a + 1 : b]:
            out = out + x
        return out

    @lru_cache(maxsize=None)
    def D(a, b, k):
        if k < 0:
            return inf
        if k >= sum(t[a:b]):
            return total(r, a, b)
        if b - a == 1:
            return inf
        best = r[a] + D(a + 1, b, k - t[a]) if k >= t[a] else inf
        for j in range(a + 1, b):
            if k >= s[a]:
                best = min(best, (D(a, j, k) + total(f, a, j)) + D(j, b, k - s[a]))
        return best

    return D


def same_tables(one, other, n, budget):
    for a in range(n):
        for b in range(a + 1, n + 1):
            assert one.row(a, b).tobytes() == other.row(a, b).tobytes(), (a, b)
            if b - a >= 2:
                for k in range(budget + 1):
                    if one.value(a, b, k) < float("inf"):
                        assert one.choose(a, b, k) == other.choose(a, b, k), (a, b, k)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**9),
    n=st.integers(1, 14),
    kinds=st.integers(1, 3),
    periodic=st.booleans(),
    share=st.floats(0.05, 1.0),
)
def test_shared_rows_give_the_same_table_and_choices_bit_for_bit(seed, n, kinds, periodic, share):
    rng = random.Random(seed)
    s, t, f, r = kinds_chain(rng, n, kinds, periodic)
    budget = max(1, int(share * sum(t)))
    shared = SplitTable(s, t, budget, f, r, share=True)
    plain = SplitTable(s, t, budget, f, r, share=False)
    assert shared.shared and not plain.shared
    assert shared.classes.count <= n * (n + 1) // 2
    assert shared.feasible == plain.feasible
    same_tables(shared, plain, n, budget)
    D = reference(s, t, budget, f, r)
    for a in range(n):
        for b in range(a + 1, n + 1):
            expected = [D(a, b, k) for k in range(budget + 1)]
            assert plain.row(a, b).tolist() == expected, (a, b)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(2, 12), blocks=st.integers(2, 6))
def test_shared_rows_with_leaves_blocks_of_a_repeated_chain(seed, n, blocks):
    rng = random.Random(seed)
    s, t, f, r = kinds_chain(rng, n, 2, periodic=True)
    budget = int(0.6 * sum(t))
    starts = block_starts(n, min(blocks, n))
    pairs = list(zip(starts, starts[1:]))
    inner = [SplitTable(s[a : b + 1], t[a:b], budget, f[a:b], r[a:b]) for a, b in pairs]
    outer = (
        [s[a] for a in starts],
        [sum(t[a:b]) for a, b in pairs],
        budget,
        [sum(f[a:b]) for a, b in pairs],
        [sum(r[a:b]) for a, b in pairs],
    )
    leaves = [table.row(0, table.n) for table in inner]
    shared = SplitTable(*outer, leaves=leaves, share=True)
    plain = SplitTable(*outer, leaves=leaves, share=False)
    same_tables(shared, plain, len(pairs), budget)


def test_classes_of_a_periodic_chain():
    # kinds 0 1 2 0 1 2 0: a segment's class is its start's phase and its length
    classes = SegmentClasses(np.array([0, 1, 2, 0, 1, 2, 0]))
    assert classes.count == 3 + 3 + 3 + 3 + 3 + 2 + 1
    assert classes.of[4, 1] == classes.of[7, 4]  # [1, 4) and [4, 7): kinds 1 2 0
    assert classes.of[4, 1] != classes.of[5, 2]
    assert classes.of[3, 0] == classes.of[6, 3] != classes.of[6, 0]
    assert [list(s) for s in classes.starts[1:4]] == [[0, 1, 2]] * 3
    assert classes.split_work() == sum(len(s) * (L - 1) for L, s in enumerate(classes.starts))


def test_sharing_is_chosen_when_it_saves_work():
    rng = random.Random(5)
    s, t, f, r = kinds_chain(rng, 60, 4, periodic=True)
    assert SplitTable(s, t, 40, f, r).shared  # 4 kinds in a cycle: 4 classes a length
    s, t, f, r = kinds_chain(rng, 60, 60, periodic=True)
    assert not SplitTable(s, t, 40, f, r).shared  # every step its own kind
    s, t, f, r = kinds_chain(rng, 20, 2, periodic=True)
    assert not SplitTable(s, t, 40, f, r).shared  # short: a row a segment is quick enough
    assert table_rows(s, t, f, r) == 21**2


def test_sharing_lets_long_repeated_chains_plan_exactly():
    # 1000 steps, 4 kinds: 2 x 1001^2 x 129 floats would be refused (2 GB); shared,
    # the tables hold about 4 rows a length, and 4 stacks of at most 1000 rows
    rng = random.Random(2)
    s, t, f, r = kinds_chain(rng, 1000, 4, periodic=True)
    costs = ChainCosts(f, r, s, t)
    assert table_rows(s, t, f, r) < 2 * 4 * 1001  # a row a class, and the stacks
    memory = 3 * minimum_bytes(costs)
    plan = Optimal(costs, memory, levels=16)
    result = simulate(plan, costs)
    assert result.peak_bytes <= memory and result.time == pytest.approx(plan.predicted_time)
    assert plan.blocks is None


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**9),
    n=st.integers(1, 5),
    kinds=st.integers(1, 2),
    extra=st.integers(0, 20),
)
def test_a_shared_plan_equals_exhaustive_search(seed, n, kinds, extra):
    rng = random.Random(seed)
    made = [(rng.randint(1, 4), rng.randint(0, 4), rng.randint(1, 6), rng.randint(1, 8))]
    made += [(rng.randint(1, 4), rng.randint(0, 4), rng.randint(1, 6), rng.randint(1, 8))]
    order = [rng.randrange(kinds) for _ in range(n)]
    f = [made[k][0] for k in order]
    r = [made[k][0] + made[k][1] for k in order]
    costs = ChainCosts(f, r, [made[k][2] for k in order] + [3], [made[k][3] for k in order])
    memory = minimum_bytes(costs) + extra

    class Shared(SplitTable):  # rows shared whatever the work saved (these chains are tiny)
        def __init__(self, *args, **kwargs):
            super().__init__(*args, share=True, **kwargs)
            assert self.shared

    with mock.patch.object(levels, "SplitTable", Shared):
        plan = Optimal(costs, memory)
    assert simulate(plan, costs).time == plan.predicted_time == search(costs, memory, True)
