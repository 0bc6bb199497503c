"""DTR with its default heuristic (``h_dtr_eq``) on programs that read views of values
(slices, transposes, reshapes), whose user code holds some values to the end, rebinds
a value's ``.data`` to its own array, and cuts some runs short with an exception, run
after run on one reused tape: at the least budget that works (following the
MemoryError's numbers up from nothing) and above it, the gradients are store-all's bit
for bit and the count never passes the budget."""

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm

N = 6
NEVER = 2**40

UNARY = [
    rm.sin,
    rm.tanh,
    rm.exp,
    lambda a: a[::-1],  # a view
    lambda a: a.T,  # a view
    lambda a: a.reshape(N * N).reshape(N, N),  # views of views
    lambda a: a * 1.5,
]
BINARY = [lambda a, b: a * b, lambda a, b: a + b, lambda a, b: (a @ b) * 0.1]


def instructions():
    index = st.integers(0, 63)
    return st.lists(
        st.tuples(st.booleans(), index, index, index, st.sampled_from(["drop", "keep", "rebind"])),
        min_size=1,
        max_size=20,
    )


def forward(program, x, y, stop_at=None):
    """The program on ``x`` and ``y``: each value let go of after its last reader,
    unless ``keep`` (held to the end), or rebound to its own array (``rebind``)."""
    values, last, start = [x, y], {}, 2
    for k, (_, _, i, j, _) in enumerate(program):
        n = start + k
        last[i % n] = last[j % n] = k
    kept = []
    for k, (unary, op, i, j, fate) in enumerate(program):
        if k == stop_at:
            raise KeyError("cut short")
        n = len(values)
        a, b = values[i % n], values[j % n]
        if a is None or b is None:
            a = b = values[-1]
        v = UNARY[op % len(UNARY)](a) if unary else BINARY[op % len(BINARY)](a, b)
        a = b = None
        if fate == "rebind":
            v.data = v.data
        elif fate == "keep":
            kept.append(v)
        values.append(v)
        for m in (i % n, j % n):
            if m >= start and last.get(m, k) <= k:
                values[m] = None
        v = None
    h = values[-1] if values[-1] is not None else x
    return (h * h).sum() + h.sum(), kept


def grads(program, tape, runs=1, stop_every=0):
    rng = np.random.default_rng(0)
    x = rm.tensor(rng.standard_normal((N, N)) * 0.5, requires_grad=True)
    y = rm.tensor(rng.standard_normal((N, N)) * 0.5, requires_grad=True)
    out = []
    for run in range(runs):
        x.grad = y.grad = None
        try:
            with tape:
                stop = len(program) // 2 if stop_every and run % stop_every == 1 else None
                loss, kept = forward(program, x, y, stop)
        except KeyError:
            continue
        loss.backward()
        del kept, loss  # (user code held them through the backward)
        out.append([None if t.grad is None else t.grad.copy() for t in (x, y)])
    return out


def least_that_works(message):
    return int(re.search(r"Give memory= at least (\d+) bytes", message).group(1))


@settings(max_examples=40, deadline=None)
@given(instructions(), st.sampled_from([0, 1, 7]))
def test_views_held_values_rebinding_and_reuse_give_store_alls_gradients(program, above):
    expected = grads(program, rm.Tape())[0]
    budget = 1
    for _ in range(60):
        tape = rm.Tape(memory=budget + above * 96, remat="dtr")
        try:
            got = grads(program, tape, runs=4, stop_every=2)
        except MemoryError as e:
            assert "Give memory= at least" in str(e), str(e)
            need = least_that_works(str(e))
            assert need > budget + above * 96
            budget = need
            continue
        assert len(got) == 2
        for g in got:
            assert all(a is b is None or np.array_equal(a, b) for a, b in zip(g, expected))
        assert tape.stats.peak_bytes <= budget + above * 96
        return
    raise AssertionError("following the MemoryError's numbers up never ended")
