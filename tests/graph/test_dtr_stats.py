"""``tape.stats`` per op: which ops' values DTR evicted and which ops it evaluated
again (``evicted_by_op``, ``recomputed_by_op``), and, under a plan, the op of each
node of the planner's graph (``columns``): what notebook 06 draws, without looking
inside remat.graph."""

import numpy as np

import remat as rm
from remat.graph import DTR

WIDTH = 1000  # floats: 8000 bytes a value


def chain(tape, x, n=10):
    with tape:
        h = x
        for _ in range(n):
            h = rm.sin(h)
        loss = h.sum()
    loss.backward()


# tape.stats gave only totals: the notebook wrapped Cache.evict and dtr._recompute.
def test_the_counts_per_op_name_the_ops_lru_evicted_and_recomputed():
    x = rm.tensor(np.full(WIDTH, 0.5), requires_grad=True)
    tape = rm.Tape(memory=5 * 8000, remat=DTR("lru"))
    chain(tape, x)
    # sins 0..8 have their outputs saved (by the next sin): 9 values, 5 fit, so LRU
    # evicts the 4 oldest; backward brings back sin 3's output by running sins 0..3
    # again, which restores each (the VJPs of sins 1..3 find theirs in memory)
    stats = tape.stats
    assert stats.evicted_by_op == {0: 1, 1: 1, 2: 1, 3: 1}
    assert stats.recomputed_by_op == {0: 1, 1: 1, 2: 1, 3: 1}
    assert [tape.records[k].op.name for k in stats.evicted_by_op] == ["sin"] * 4
    # a second run on the same tape counts on: its ops are 11.. (stats.ops is cumulative)
    chain(tape, x)
    assert stats.ops == 22
    assert stats.evicted_by_op == {k: 1 for k in (0, 1, 2, 3, 11, 12, 13, 14)}
    assert sum(stats.recomputed_by_op.values()) == stats.recomputed_ops == 8


def test_a_run_that_evicts_nothing_counts_nothing_per_op():
    x = rm.tensor(np.full(WIDTH, 0.5), requires_grad=True)
    tape = rm.Tape(memory=2**30, remat="dtr")
    chain(tape, x)
    assert tape.stats.evicted_by_op == {} and tape.stats.recomputed_by_op == {}


# The notebook parsed the op index out of each node's label ("vjp sin 8 (+1)").
def test_a_planned_runs_columns_give_each_nodes_op():
    x = rm.tensor(np.full(WIDTH, 0.5), requires_grad=True)
    tape = rm.Tape(memory=5 * 8000, remat="optimal")
    chain(tape, x)
    chain(tape, x)
    stats = tape.stats
    assert stats.planned, stats.fallback
    assert len(stats.columns) == len(stats.names) == stats.graph.nodes
    for name, k in zip(stats.names, stats.columns):
        op = name.removeprefix("vjp ").split()
        assert (op[0], int(op[1])) == ("sin" if k < 10 else "sum", k), name
    assert sum(stats.recomputed_by_op.values()) == stats.recomputed_ops
    assert all(0 <= k < stats.ops for k in stats.recomputed_by_op)
