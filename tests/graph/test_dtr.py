"""Dynamic rematerialization on the tape: ``rm.Tape(memory=m, remat="dtr")``.

Random programs drawn from the op table (views, reductions broadcast back,
parameters, random masks) run under random budgets with each heuristic; their
gradients must be a plain tape's bit for bit, the bytes counted within the
budget, and the traced peak within the documented bound.  Combinations DTR does
not run are refused at once.
"""

import contextlib
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import remat as rm
from remat.core import tape as core_tape
from remat.graph import DTR, HEURISTICS
from remat.ops import core

from ..helpers import traced

N = 4
MASK = np.arange(N * N).reshape(N, N) % 3 == 0

UNARY = [
    rm.sin,
    rm.tanh,
    lambda x: rm.exp(x * 0.1),
    rm.sigmoid,
    rm.relu,
    rm.gelu,
    lambda x: rm.softmax(x, axis=0),
    rm.log_softmax,
    lambda x: x.T,  # a view
    lambda x: x.reshape(2, 8).reshape(N, N),  # views of views
    lambda x: x[::-1] * 1.0,  # a view read by an op
    lambda x: rm.sqrt(x * x + 1.0),
    lambda x: x - rm.logsumexp(x, axis=1, keepdims=True),
    lambda x: rm.clip(x, -0.5, 0.7),
    lambda x: x * (rm.random.uniform(shape=(N, N)) > 0.3),  # dropout: random numbers
]
BINARY = [
    rm.add,
    rm.multiply,
    rm.subtract,
    lambda a, b: (a @ b) * 0.3,
    rm.maximum,
    lambda a, b: rm.where(MASK, a, b),
    lambda a, b: a / (1.0 + b * b),
]


def programs(max_size=14):
    """Instructions (binary?, which op, which earlier value, which other)."""
    instruction = st.tuples(
        st.booleans(), st.integers(0, 63), st.integers(0, 63), st.integers(0, 63)
    )
    return st.lists(instruction, min_size=1, max_size=max_size)


def run(program, tape, seed=0, cut=None):
    """Run ``program`` on ``tape`` holding only the values still to be read, as user code
    does; backward; return the parameters' gradients and the tape.  With ``cut=k``, a
    KeyError raised inside the tape after instruction ``k`` cuts the run short."""
    rng = np.random.default_rng(1)
    params = [rm.tensor(rng.standard_normal((N, N)) * 0.5, requires_grad=True) for _ in range(3)]
    w, b = rm.tensor(rng.standard_normal(N), requires_grad=True), rm.tensor(rng.standard_normal(N))
    rm.random.seed(seed)
    values = list(params)
    picks = [(i % (k + 3), j % (k + 3)) for k, (_, _, i, j) in enumerate(program)]
    last = {}
    for k, (i, j) in enumerate(picks):
        last[i] = last[j] = k + 3
    with tape:
        for k, ((binary, op, _, _), (i, j)) in enumerate(zip(program, picks)):
            a, c = values[i], values[j]
            if binary:
                out = BINARY[op % len(BINARY)](a, c)
            else:
                out = UNARY[op % len(UNARY)](a)
            if k % 5 == 4:
                out = rm.layer_norm(out, w, b)
            values.append(out)
            if k == cut:
                raise KeyError(cut)
            for v in (i, j):  # let go of what no later instruction reads
                if last.get(v, 0) <= k + 3 and v >= 3:
                    values[v] = None
            a = c = out = None
        loss = (values[-1] * values[-1]).sum()
        values = None
    loss.backward()
    grads = [p.grad for p in (*params, w)]
    return grads, tape


def store_all_bytes(program):
    """The bytes a tape holds saving everything (as DTR counts them)."""
    return run(program, rm.Tape(memory=2**40, remat="dtr"))[1].stats.peak_bytes


def least_that_works(error):
    return int(re.search(r"at least (\d+) bytes", str(error)).group(1))


def fitting(attempt, budget):
    """``(budget, attempt(budget))``, the budget raised to the least that works where
    ``attempt`` finds it too small."""
    for _ in range(20):
        try:
            return budget, attempt(budget)
        except MemoryError as error:
            least = least_that_works(error)
            assert least > budget, str(error)
            budget = least
    raise AssertionError("no budget found")


def run_within(program, budget, heuristic, seed=0):
    """``(budget, (gradients, tape))`` under ``budget``, raised to the least that works
    where the error says it is too small (h_dtr's choices, made from measured times,
    may need more one run than another)."""
    return fitting(lambda b: run(program, rm.Tape(memory=b, remat=DTR(heuristic)), seed), budget)


@settings(max_examples=20, deadline=None)
# a peak over the budget: evicting a view uncounted the buffer of an input about to be held
@example(
    [(False, 0, 0, 0)] * 3 + [(False, 1, 0, 0), (False, 23, 3, 0), (True, 1, 3, 4)], 0.0, "lru", 0
)
@given(
    programs(),
    st.floats(0.0, 1.0),
    st.sampled_from(sorted(HEURISTICS)),
    st.integers(0, 2**16),
)
def test_random_programs_give_store_alls_gradients_within_the_budget(
    program, fraction, heuristic, seed
):
    expected = run(program, rm.Tape(), seed)[0]
    budget = max(1, int(store_all_bytes(program) * fraction))
    budget, (grads, tape) = run_within(program, budget, heuristic, seed)
    for g, e in zip(grads, expected):
        assert (g is None) == (e is None)  # a parameter the program never read
        if e is not None:
            assert g.dtype == np.float64
            np.testing.assert_array_equal(g, e)  # bit for bit, random masks replayed
    assert tape.stats.peak_bytes <= budget
    assert tape.stats.heuristic == heuristic


@settings(max_examples=10, deadline=None)
@given(programs(), st.floats(0.0, 1.0), st.integers(0, 13))
def test_runs_cut_short_on_a_reused_tape_leave_nothing_counted(program, fraction, cut):
    # A run an exception cut short left its records counted in the cache for the tape's
    # life; dropping them must not change the gradients of the runs around it.
    expected = run(program, rm.Tape())[0]

    def runs(budget):
        tape, grads = rm.Tape(memory=budget, remat="dtr"), []
        for k in range(4):
            if k % 2:
                with contextlib.suppress(KeyError):
                    run(program, tape, cut=cut % len(program))
            else:
                grads.append(run(program, tape)[0])
        with tape:
            pass
        return tape, grads

    budget = max(1, int(store_all_bytes(program) * fraction))
    budget, (tape, grads) = fitting(runs, budget)
    for got in grads:
        for g, e in zip(got, expected):
            assert (g is None) == (e is None)
            if e is not None:
                np.testing.assert_array_equal(g, e)
    assert tape.stats.peak_bytes <= budget
    assert tape.dtr_cache.bytes == 0 and len(tape.records) == 0


def mlp(layers=8, width=64, batch=32):
    rng = np.random.default_rng(0)
    ws = [
        rm.tensor(rng.standard_normal((width, width)) / width**0.5, requires_grad=True)
        for _ in range(layers)
    ]
    x = rm.tensor(rng.standard_normal((batch, width)))

    def forward(first=None):
        h = x
        for k, w in enumerate(ws):
            w = first if k == 0 and first is not None else w
            h = rm.tanh(h @ w) + h * 0.5
        return (h * h).sum()

    return ws, forward


def train(tape, ws, forward):
    with tape:
        loss = forward()
    loss.backward()
    grads = [w.grad for w in ws]
    for w in ws:
        w.grad = None
    return grads


@pytest.mark.parametrize("heuristic", sorted(HEURISTICS))
def test_an_mlp_at_a_third_of_its_memory(heuristic):
    ws, forward = mlp()
    expected = train(rm.Tape(), ws, forward)
    full = rm.Tape(memory=2**40, remat="dtr")
    train(full, ws, forward)

    def attempt(budget):  # h_dtr's choices follow measured times: the least that works varies
        tape = rm.Tape(memory=budget, remat=DTR(heuristic))
        return train(tape, ws, forward), tape

    budget, (grads, tape) = fitting(attempt, full.stats.peak_bytes // 3)
    for g, e in zip(grads, expected):
        np.testing.assert_array_equal(g, e)
    s = tape.stats
    assert 0 < s.peak_bytes <= budget < full.stats.peak_bytes
    assert s.evictions > 0 and s.recomputed_ops >= s.evictions and s.recompute_seconds > 0
    assert full.stats.evictions == full.stats.recomputed_ops == 0


def test_the_traced_peak_is_within_the_budget_and_the_transients():
    # memory as tracemalloc sees it: budget + X (remat.graph.dtr's docstring), X made of the
    # op being evaluated or reversed (4 values), the gradients (2 G) and Python's objects
    ws, forward = mlp(layers=8, width=64, batch=256)
    expected = train(rm.Tape(), ws, forward)
    full = rm.Tape(memory=2**40, remat="dtr")
    train(full, ws, forward)
    value = 256 * 64 * 8
    params = sum(w.data.nbytes for w in ws)
    x = 4 * value + 2 * params + 2048 * full.stats.ops + 64 * 1024
    peaks = []
    for fraction in (1.0, 0.33):
        budget = int(full.stats.peak_bytes * fraction)
        tape = rm.Tape(memory=budget, remat=DTR("lru"))  # deterministic: no measured times
        grads, peak = traced(lambda tape=tape: train(tape, ws, forward))
        for g, e in zip(grads, expected):
            np.testing.assert_array_equal(g, e)
        assert tape.stats.peak_bytes <= budget
        assert peak <= budget + x, (fraction, peak, budget, x)
        peaks.append(peak)
    assert peaks[1] < 0.7 * peaks[0]  # evicting frees memory: tracemalloc sees it go


def test_values_the_user_holds_are_never_evicted():
    ws, _ = mlp(layers=6)
    x = rm.tensor(np.random.default_rng(2).standard_normal((32, 64)))
    expected = None
    budget = 1000
    for _ in range(20):
        held = []
        try:
            with rm.Tape(memory=budget, remat="dtr") as tape:
                h = x
                for w in ws:
                    h = rm.sin(h @ w) * 0.5  # h @ w: saved by sin, held by no one
                    held.append((h, h.data, h.data.copy()))  # the Tensor and its array
                loss = (h * h).sum()
            break
        except MemoryError as error:
            budget = least_that_works(error)
    loss.backward()
    for t, array, copy in held:
        assert t.data is array
        np.testing.assert_array_equal(array, copy)
    assert tape.stats.evictions > 0 and tape.stats.peak_bytes <= budget
    expected = [w.grad for w in ws]
    for w in ws:
        w.grad = None
    with rm.Tape():
        h = x
        for w in ws:
            h = rm.sin(h @ w) * 0.5
        (h * h).sum().backward()
    for w, e in zip(ws, expected):
        np.testing.assert_array_equal(w.grad, e)


def test_a_budget_too_small_names_the_least_that_works():
    ws, forward = mlp(layers=3)
    with pytest.raises(MemoryError) as error:
        train(rm.Tape(memory=1000, remat="dtr"), ws, forward)
    least = least_that_works(error.value)
    assert "rm.Tape(memory=1000, remat='dtr')" in str(error.value)
    assert "`matmul`" in str(error.value) or "`tanh`" in str(error.value)
    assert least > 1000


def test_a_recomputation_that_differs_is_refused():
    calls = [0]

    def forward(x):  # not deterministic: gives another value each time
        calls[0] += 1
        return np.sin(x) + calls[0]

    flaky = core.Op("flaky", forward, (lambda ns, g, ans, x: g * ns.cos(x),), ("0",))
    x = rm.tensor(np.ones((64, 64)), requires_grad=True)
    with rm.Tape(memory=40000, remat=DTR("lru")):
        h = core.apply(flaky, [x])
        for _ in range(4):
            h = rm.sin(h)
        loss = h.sum()
    with pytest.raises(rm.ReplayError, match="flaky"):
        loss.backward()


def test_rm_grad_inside_a_dtr_tape():
    ws, forward = mlp(layers=6)
    expected = rm.grad(forward)(ws[0].data)

    def attempt(budget):
        with rm.Tape(memory=budget, remat="dtr") as tape:
            return rm.grad(forward)(ws[0].data), tape

    budget, (got, tape) = fitting(attempt, 30000)
    np.testing.assert_array_equal(got, expected)
    assert tape.stats.evictions > 0 and tape.stats.peak_bytes <= budget


def test_rm_grad_of_rm_grad_inside_a_dtr_tape():
    rng = np.random.default_rng(3)
    ws = [rng.standard_normal((16, 16)) * 0.3 for _ in range(6)]
    x0, v = rng.standard_normal((8, 16)), rng.standard_normal((8, 16))

    def f(x):
        h = x
        for w in ws:
            h = rm.tanh(h @ w) + h * 0.5
        return (h * h).sum()

    def hvp(x):  # the gradient of <grad f, v>: a backward that is itself recorded
        return rm.grad(lambda y: (rm.grad(f)(y) * v).sum())(x)

    expected = hvp(x0)

    def attempt(budget):
        with rm.Tape(memory=budget, remat="dtr") as tape:
            return hvp(x0), tape

    budget, (got, tape) = fitting(attempt, 30000)
    np.testing.assert_array_equal(got, expected)
    assert tape.stats.evictions > 0 and tape.stats.peak_bytes <= budget


def test_backward_twice_with_retain_graph():
    ws, forward = mlp(layers=6)
    expected = train(rm.Tape(), ws, forward)

    def attempt(budget):
        with rm.Tape(memory=budget, remat="dtr") as tape:
            loss = forward()
        loss.backward(retain_graph=True)
        return loss, tape

    _, (loss, tape) = fitting(attempt, 30000)
    for w in ws:
        w.grad = None
    loss.backward()
    for w, e in zip(ws, expected):
        np.testing.assert_array_equal(w.grad, e)
    assert tape.stats.evictions > 0
    with pytest.raises(rm.BackwardError):
        loss.backward()


def test_a_value_rebound_by_user_code_is_not_recomputed_from_its_old_op():
    x = rm.tensor(np.linspace(0.1, 1.0, 4096).reshape(64, 64), requires_grad=True)

    def f(tape):
        with tape:
            h = rm.sin(x)
            h.data = h.data * 2.0  # a new value, same shape: later ops read this one
            for _ in range(6):
                h = rm.tanh(h) * 1.5
            loss = h.sum()
        loss.backward()
        g, x.grad = x.grad, None
        return g

    np.testing.assert_array_equal(f(rm.Tape(memory=70000, remat=DTR("lru"))), f(rm.Tape()))


@pytest.mark.parametrize(
    "form",
    [
        lambda tape, x: tape.loop(rm.sin, x, steps=3),
        lambda tape, x: tape.chain([rm.sin], x),
        lambda tape, x: tape.scan(lambda c, y: (c + y, None), x[0], x),
        lambda tape, x: rm.checkpoint(rm.sin)(x),
    ],
    ids=["loop", "chain", "scan", "checkpoint"],
)
def test_forms_dtr_does_not_run_are_refused_at_once(form):
    x = rm.ones((2, 2), requires_grad=True)
    with rm.Tape(memory="1 MiB", remat="dtr") as tape:
        with pytest.raises(ValueError, match="remat='dtr'"):
            form(tape, x)


# The records of a tape opened inside a DTR tape are listed there too: a checkpoint's
# is refused as the inner tape closes (the list checks what is added, not each op).
def test_a_checkpoint_on_a_tape_opened_inside_a_dtr_tape_is_refused():
    x = rm.ones((2, 2), requires_grad=True)
    with rm.Tape(memory="1 MiB", remat="dtr") as tape:
        with pytest.raises(ValueError, match="remat='dtr'"):
            with rm.Tape():
                rm.checkpoint(rm.sin)(x)
        assert not tape.records


@pytest.mark.parametrize(
    "options, message",
    [
        ({"remat": "dtr"}, "pass memory="),
        ({"remat": "dtr", "memory": 100, "snapshots": 2}, "snapshots=2"),
        ({"remat": "dtr", "memory": 100, "schedule": "revolve"}, "schedule='revolve'"),
        ({"remat": "dtr", "memory": 100, "policy": rm.policies.save_nothing}, "policy="),
        ({"remat": "dtr", "memory": 100, "disk_snapshots": 1}, "disk_snapshots=1"),
        ({"remat": "dtr", "memory": 100, "trace": True}, "trace=True"),
        ({"remat": "dtr", "memory": 100, "snapshot_device": "cpu"}, "snapshot_device='cpu'"),
        ({"remat": "lru", "memory": 100}, "must be 'dtr', 'optimal'"),
    ],
)
def test_options_dtr_does_not_combine_with_are_refused(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        rm.Tape(**options)


def test_unknown_heuristics_are_refused():
    with pytest.raises(ValueError, match="h_dtr_eq"):
        DTR("fastest")
    with pytest.raises(TypeError):
        DTR(3)


def test_a_heuristic_of_ones_own():
    ws, forward = mlp(layers=6)
    expected = train(rm.Tape(), ws, forward)
    newest_first = DTR(lambda value, now: -value.last)

    def attempt(budget):
        tape = rm.Tape(memory=budget, remat=newest_first)
        return train(tape, ws, forward), tape

    _, (grads, tape) = fitting(attempt, 60000)
    for g, e in zip(grads, expected):
        np.testing.assert_array_equal(g, e)
    assert tape.stats.evictions > 0 and tape.stats.heuristic == "<lambda>"


def test_a_tape_without_remat_pays_nothing():
    import gc

    ws, forward = mlp(layers=2)
    train(rm.Tape(memory="1 MiB", remat="dtr"), ws, forward)
    gc.collect()
    assert core_tape.on_record is None  # set only while a DTR tape is open
    assert core_tape.before_vjp is None  # set only while a DTR tape's cache is alive


# The leaf table's entries closed over the table (table -> reference -> callback -> table):
# a cycle per DTR tape with leaves, freed only by the cyclic collector.
def test_a_dtr_tape_with_leaves_is_freed_by_reference_counting_alone():
    import gc
    import sys
    import weakref

    ws, forward = mlp(layers=2)
    full = rm.Tape(memory=2**40, remat="dtr")
    train(full, ws, forward)
    was = gc.isenabled()
    gc.disable()
    try:
        tape = rm.Tape(memory=full.stats.peak_bytes * 9 // 10, remat="dtr")  # counts at once
        train(tape, ws, forward)
        table, cache = tape.dtr_cache.leaves, weakref.ref(tape.dtr_cache)
        assert len(table) == len(ws)  # the parameters' buffers
        del tape
        assert cache() is None
        assert sys.getrefcount(table) == 2  # `table` and the call's: no entry holds it
    finally:
        if was:
            gc.enable()
