"""The evicted neighbourhood ``e*`` of ``h_dtr_eq`` (remat/graph/value.py): the classes of
values out of memory, as the DTR paper keeps them.

On small graphs built by hand, the sums are the connected components' exactly, as
values go and come back (a class a value left is made again when next read); on a
tape, the class sums stay
those of the values counted in them, run after run of a reused tape whatever ends a
run (backward, an unfinished forward, an exception); and on random programs, under
random budgets, ``h_dtr_eq`` and scores of the user's own that read ``e*`` give
store-all's gradients bit for bit.
"""

import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat.graph import DTR, Heuristic
from remat.graph.value import Value

from ..strategies import program_gradients, programs

# --- graphs built by hand ---------------------------------------------------------


class Graph:
    """Values made by hand: ``reads[k]`` lists the values value ``k`` reads (earlier
    ones); each is in memory (an array this object holds, saved in a slot) until
    evicted or freed."""

    def __init__(self, costs, reads):
        self.arrays, self.values = {}, []
        for k, cost in enumerate(costs):
            a = self.arrays[k] = np.zeros(1)
            record = SimpleNamespace(op=SimpleNamespace(name=f"op{k}"), shape=(1,))
            ins = tuple(self.values[j] for j in reads.get(k, ()))
            v = Value(record, None, ins, weakref.ref(a), a.dtype, cost, k)
            v.slots.append((record, -1))
            for u in ins:
                u.users.append(weakref.ref(v))
            self.values.append(v)

    def evict(self, *ks):
        for k in ks:
            v = self.values[k]
            del self.arrays[k]
            v.evicted = True
            v.join()

    def free(self, *ks):
        """Values no record saves any more (out of memory, not evicted)."""
        for k in ks:
            self.values[k].slots.clear()
            del self.arrays[k]

    def restore(self, k):
        v = self.values[k]
        a = self.arrays[k] = np.zeros(1)
        v.ref, v.evicted = weakref.ref(a), False
        v.leave()

    def e(self, k):
        return self.values[k].evicted_neighbourhood_cost()

    def exact(self, k):
        """e* by search: the costs of the values out of memory reached from value k
        through values out of memory."""
        out = {j for j in range(len(self.values)) if j not in self.arrays}
        near = {j: set() for j in range(len(self.values))}
        for j, v in enumerate(self.values):
            for u in v.inputs:
                i = self.values.index(u)
                near[i].add(j)
                near[j].add(i)
        seen, todo = set(), [j for j in near[k] if j in out]
        while todo:
            j = todo.pop()
            if j not in seen:
                seen.add(j)
                todo.extend(i for i in near[j] if i in out and i != k)
        return sum(self.values[j].cost for j in seen)


def chain(n, costs=None):
    return Graph(costs or [float(k + 1) for k in range(n)], {k: (k - 1,) for k in range(1, n)})


def assert_classes_are_their_members_sums(values):
    """Each class costs what its members counted add up to, never less than 0."""
    sums, members = {}, {}
    for v in values:
        if v.counted is not None:
            r = v.cls.root()
            sums[id(r)] = sums.get(id(r), 0) + v.counted
            members[id(r)] = members.get(id(r), 0) + 1
    for v in values:
        if v.cls is not None:
            r = v.cls.root()
            assert r.cost == sums.get(id(r), 0) >= 0
            assert r.members == members.get(id(r), 0)


def test_a_chain_evicted_in_the_middle_is_one_class_each_side_sees_whole():
    g = chain(6)  # costs 1..6
    g.evict(2, 4, 3)  # values 2, 3, 4 (costs 3, 4, 5), the middle last
    assert g.e(1) == g.e(5) == 3.0 + 4.0 + 5.0 == g.exact(1)
    assert g.e(0) == 0.0  # no neighbour out of memory


def test_two_classes_next_to_one_value_are_each_counted_once():
    # 0 -> 1 -> 2 and 0 -> 3, with 4 reading 1 and 3 (a diamond)
    g = Graph([0.5, 1.0, 2.0, 4.0, 8.0], {1: (0,), 2: (1,), 3: (0,), 4: (1, 3)})
    g.evict(1, 2)
    assert g.e(0) == 3.0 == g.exact(0)  # the class {1, 2} once
    g.evict(3)  # {1, 2} and {3} meet at 0 and 4, not through values out of memory
    assert g.e(0) == g.e(4) == 7.0 == g.exact(0)
    assert g.values[1].cls.root() is not g.values[3].cls.root()


def test_values_freed_unsaved_count_with_the_evicted_ones_next_to_them():
    g = chain(5)
    g.free(1, 2)  # outputs no record saves, let go of by user code
    assert g.e(0) == 2.0 + 3.0 == g.exact(0)  # counted once reached
    g.evict(3)
    assert g.e(4) == g.e(0) == 2.0 + 3.0 + 4.0 == g.exact(4)
    assert_classes_are_their_members_sums(g.values)


def test_a_value_put_back_splits_its_class_when_next_read():
    g = chain(5)  # costs 1..5
    g.evict(1, 2, 3)
    g.restore(2)  # the class {1, 2, 3} costs 2 + 4 now, and is stale
    assert g.values[1].cls.root().stale and g.values[1].cls.root().cost == 2.0e9 + 4.0e9
    assert g.e(0) == 2.0 == g.exact(0)  # read from value 1: {1} made again
    assert g.e(2) == 2.0 + 4.0 == g.exact(2)  # {1} and {3}, each once
    assert g.values[1].cls.root() is not g.values[3].cls.root()
    g.evict(2)  # evicted again: the three are one class again
    assert g.e(0) == 2.0 + 3.0 + 4.0 == g.exact(0)
    for k in (1, 2, 3):
        g.restore(k)
    assert g.e(0) == 0.0  # a class whose members all came back costs exactly nothing
    assert g.values[1].cls.root().cost == 0 and g.values[1].cls.root().members == 0
    assert_classes_are_their_members_sums(g.values)


def test_a_pinned_value_leaves_its_class_and_is_no_neighbour():
    g = chain(4)
    g.evict(1, 2)
    g.values[2].pin()  # its record released
    assert g.e(0) == 2.0 and g.values[2].cls is None
    assert g.e(3) == 0.0  # value 2, its only input, can no longer be remade
    assert_classes_are_their_members_sums(g.values)


def test_a_cost_measured_again_leaves_with_what_it_brought():
    g = chain(3)
    g.evict(1)
    g.values[1].cost = 7.0  # a recomputation timed it again
    g.restore(1)
    assert g.values[1].cls.root().cost == 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_graphs_sum_their_components_exactly_as_values_go_and_come_back(data):
    n = data.draw(st.integers(2, 12))
    reads = {
        k: tuple(data.draw(st.lists(st.integers(0, k - 1), max_size=2, unique=True)))
        for k in range(1, n)
    }
    g = Graph([data.draw(st.integers(1, 64)) / 8 for _ in range(n)], reads)
    order = data.draw(st.permutations(range(n)))
    freed = data.draw(st.sets(st.sampled_from(range(n))))
    g.free(*freed)
    for k in order:
        if k not in freed:
            g.evict(k)
        for j in g.arrays:  # every value in memory, scored
            assert g.e(j) == g.exact(j)
        if len(g.arrays) == 1:
            break
    # then values come back and go again
    for _ in range(data.draw(st.integers(0, 12))):
        k = data.draw(st.sampled_from(range(n)))
        if k in freed:
            continue
        g.restore(k) if k not in g.arrays else g.evict(k)
        for j in g.arrays:
            assert g.e(j) == g.exact(j)
        assert_classes_are_their_members_sums(g.values)


# --- on a tape ----------------------------------------------------------------------


def mlp(params, x):
    h = x
    for w in params:
        h = rm.tanh(h @ w) + h * 0.5
    return (h * h).sum()


def tape_values(tape):
    return list(tape.dtr_cache.values.values())


def test_a_reused_tape_keeps_its_class_sums_bounded_whatever_ends_a_run():
    rng = np.random.default_rng(0)
    params = [rm.tensor(rng.standard_normal((16, 16)) / 4, requires_grad=True) for _ in range(6)]
    x = rm.tensor(rng.standard_normal((8, 16)))
    with rm.Tape():
        loss = mlp(params, x)
    loss.backward()
    expected = [p.grad.copy() for p in params]
    tape = rm.Tape(memory=10000, remat=DTR("h_dtr_eq"))
    seen = weakref.WeakSet()  # every value the tape made (held weakly: none kept alive)
    counts = []
    for run in range(24):
        kind = run % 4
        loss = None
        try:
            with tape:
                if kind == 3:  # cut short by an exception
                    loss = (rm.tanh(x @ params[0]) @ params[1]).sum()
                    raise KeyError("stop")
                loss = mlp(params, x)
        except KeyError:
            pass
        seen.update(tape_values(tape))
        if kind in (0, 2):  # (1: a forward never differentiated, forgotten when entered again)
            for p in params:
                p.grad = None
            loss.backward()
            assert all(np.array_equal(p.grad, g) for p, g in zip(params, expected))
        loss = None
        values = list(seen)
        assert all(v.counted is None and v.cls is None for v in values if v.pinned)
        assert_classes_are_their_members_sums(values)
        counts.append(sum(v.counted is not None for v in values))
    assert tape.stats.evictions > 0 and max(counts) > 0
    # what is counted is what the tape keeps now, at most a run's 26 values: no run
    # adds to the next
    assert max(counts) <= 26


def test_evicted_values_of_a_tape_are_counted_in_their_classes():
    rng = np.random.default_rng(1)
    params = [rm.tensor(rng.standard_normal((16, 16)) / 4, requires_grad=True) for _ in range(6)]
    x = rm.tensor(rng.standard_normal((8, 16)))
    with rm.Tape(memory=10000, remat=DTR("h_dtr_eq")) as tape:
        loss = mlp(params, x)
    values = tape_values(tape)
    evicted = [v for v in values if v.evicted]
    assert evicted and all(v.counted is not None for v in evicted)
    assert all(v.evicted or not v.slots for v in values if v.counted is not None)
    assert_classes_are_their_members_sums(values)
    loss.backward()
    assert tape.stats.recomputed_ops > 0


# --- random programs: gradients bit for bit -----------------------------------------


def _larger_neighbourhood_first(value, now):
    return -value.evicted_neighbourhood_cost()


SCORES = {
    "h_dtr_eq": DTR("h_dtr_eq"),
    # scores of the user's own reading e*: a callable, and a Heuristic that does not
    # say it reads it (its classes are made when first read)
    "callable": DTR(_larger_neighbourhood_first),
    "unsaid": DTR(Heuristic("unsaid", _larger_neighbourhood_first, neighbourhood=False)),
}


@settings(max_examples=30, deadline=None)
@given(programs(max_size=14), st.floats(0.0, 1.0), st.sampled_from(sorted(SCORES)))
def test_random_programs_under_random_budgets_give_store_alls_gradients(program, fraction, name):
    expected = program_gradients(program, rm.Tape())
    full = rm.Tape(memory=2**40, remat="dtr")
    program_gradients(program, full)
    budget = max(1, int(full.stats.peak_bytes * fraction))
    for _ in range(40):  # up to the least that works, as the MemoryError says it
        tape = rm.Tape(memory=budget, remat=SCORES[name])
        try:
            got = program_gradients(program, tape)
        except MemoryError as e:
            least = int(str(e).split("Give memory= at least ")[1].split()[0])
            assert least > budget
            budget = least
            continue
        for g, e in zip(got, expected):
            assert (g is None) == (e is None)
            if e is not None:
                np.testing.assert_array_equal(g, e)
        assert tape.stats.peak_bytes <= budget
        break
    else:
        pytest.fail("no budget worked")
