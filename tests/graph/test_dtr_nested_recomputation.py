"""Nested recomputations (a recomputation that lets go of what it holds, then makes
it again: remat/graph/room.py) end: at any budget the reverse sweep either gives
store-all's gradients or raises the documented MemoryError, after a number of
recomputations bounded by a multiple of the ops recorded, not thrashing."""

import numpy as np
import pytest

import remat as rm
from remat.graph import DTR, dtr


def skips(x, n):
    """A chain whose ops also read the values 3 and 7 back (held by user code only
    while it needs them)."""
    window, h = [x], x
    for _ in range(n):
        h = (
            rm.sin(h) * 1.01
            + rm.tanh(window[max(0, len(window) - 7)]) * window[max(0, len(window) - 3)]
        )
        window.append(h)
        if len(window) > 8:
            window.pop(0)
    window = None
    return (h * h).sum()


# Bug guarded: at 80000 bytes under h_dtr (n=60: 302 ops), nested recomputations let
# go of each other's held values and made them again without end (800k recomputations
# in 12 s and counting, nesting 6-12 deep); before room.py, a MemoryError; now one
# again once the outermost recomputation has made LET_GO_ROUNDS times the tape's values.
@pytest.mark.parametrize("budget", [60000, 80000, 100000])
@pytest.mark.parametrize(
    "heuristic",
    ["h_dtr", "h_dtr_eq", "lru"],
)
def test_nested_recomputations_end_in_gradients_or_a_memory_error(monkeypatch, heuristic, budget):
    x0 = np.random.default_rng(0).standard_normal(500)
    x = rm.tensor(x0.copy(), requires_grad=True)
    with rm.Tape():
        loss = skips(x, 60)
    loss.backward()
    expected = x.grad

    recompute, count = dtr._recompute, [0]

    def counted(cache, w, datas):
        count[0] += 1
        if count[0] > 50 * cache._stats.ops:
            raise AssertionError(f"{count[0]} recomputations of {cache._stats.ops} ops")
        return recompute(cache, w, datas)

    monkeypatch.setattr(dtr, "_recompute", counted)
    x = rm.tensor(x0.copy(), requires_grad=True)
    tape = rm.Tape(memory=budget, remat=DTR(heuristic))
    try:
        with tape:
            loss = skips(x, 60)
        loss.backward()
    except MemoryError as e:
        assert "Give memory= at least" in str(e)
        return
    assert np.array_equal(x.grad, expected)
    assert tape.stats.peak_bytes <= budget
