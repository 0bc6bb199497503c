"""A DTR tape that has not approached its budget only notes its ops (remat.graph.lazy):
its count stays exact across reverse sweeps, and the tables it builds late give
store-all's gradients within the budget."""

import numpy as np

import remat as rm
from remat.graph import DTR

WIDTH = 1000  # floats: 8000 bytes a value


def chain(x, n):
    h = x
    for _ in range(n):
        h = rm.sin(h)
    return h.sum()


def passes(tape, x, lengths):
    """One forward and backward on ``tape`` per length; x's gradients."""
    grads = []
    for n in lengths:
        with tape:
            loss = chain(x, n)
        loss.backward()
        grads.append(x.grad)
        x.grad = None
    return grads


# The lazy count must drop what a sweep released: counted again, the peak of each
# pass is its own (a count that kept the first pass's buffers would double it).
def test_a_budget_never_reached_counts_each_pass_exactly():
    x = rm.tensor(np.linspace(-1.0, 1.0, WIDTH), requires_grad=True)
    tape = rm.Tape(memory=2**40, remat="dtr")
    # 701 ops a pass (700 sin, a sum): more notes than are kept before pruning
    passes(tape, x, [700, 700, 700])
    # sin saves its input: 699 values of 8000 bytes (x itself is a leaf, uncounted)
    assert tape.stats.peak_bytes == 699 * 8000
    assert tape.stats.ops == 3 * 701 and tape.stats.evictions == 0


def test_a_budget_first_reached_after_a_backward_gives_store_alls_gradients():
    x = rm.tensor(np.linspace(-1.0, 1.0, WIDTH), requires_grad=True)
    lengths = [50, 40, 300]  # the third pass passes the budget: the tables are built then
    expected = passes(rm.Tape(), x, lengths)
    for heuristic in ("h_dtr", "lru"):
        tape = rm.Tape(memory=100 * 8000, remat=DTR(heuristic))
        for g, e in zip(passes(tape, x, lengths), expected):
            np.testing.assert_array_equal(g, e)
        assert tape.stats.evictions > 0 and tape.stats.peak_bytes <= 100 * 8000


def test_the_budget_reached_with_the_graph_retained_gives_store_alls_gradients():
    x = rm.tensor(np.linspace(-1.0, 1.0, WIDTH), requires_grad=True)

    def run(tape):
        with tape:
            h = x
            for _ in range(60):
                h = rm.sin(h)
            first = h.sum()
        first.backward(retain_graph=True)  # a sweep that releases nothing
        g1, x.grad = x.grad, None
        with tape:
            for _ in range(200):  # the budget is passed here: built with the first 60 alive
                h = rm.cos(h)
            second = h.sum()
        second.backward()
        return g1, x.grad

    expected = run(rm.Tape())
    x.grad = None
    tape = rm.Tape(memory=120 * 8000, remat="dtr")
    for g, e in zip(run(tape), expected):
        np.testing.assert_array_equal(g, e)
    assert tape.stats.evictions > 0 and tape.stats.peak_bytes <= 120 * 8000


# A lazy tape counts its ops from its notes: tape.stats read at any moment is current.
def test_stats_read_during_the_forward_are_current():
    x = rm.tensor(np.linspace(-1.0, 1.0, WIDTH), requires_grad=True)
    tape = rm.Tape(memory=2**40, remat="dtr")
    with tape:
        h = x
        for k in range(10):
            h = rm.sin(h)
            assert tape.stats.ops == k + 1
    # each sin saves its input: 9 values of 8000 bytes (x is a leaf, uncounted)
    assert tape.stats.peak_bytes == 9 * 8000 and tape.stats.evictions == 0
