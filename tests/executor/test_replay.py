"""The replay check of checkpointed loops, chains and scans (remat.executor.replay).

A step recomputed in backward must give what it gave in the forward sweep, or
the gradient is that of another function: the check refuses it with
rm.ReplayError.  It keeps fingerprints for the step tapes and the final state
only (and one per step of a scan's ys), so its memory does not grow with n.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm

W0 = np.array([[0.6, -0.3, 0.2], [0.1, 0.5, -0.4], [-0.2, 0.3, 0.7]])
X0 = np.array([0.3, -0.2, 0.5])


def traced_peak(run):
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def revolve_peak(kind, n, check):
    """tracemalloc's peak over one forward + backward of an n-step loop, chain or scan
    under revolve with 10 slots."""
    w = rm.tensor(W0, requires_grad=True)

    def cell(h):
        return h + rm.tanh(h @ w)

    def run():
        tape = rm.Tape(snapshots=10, check_replay=check)
        if kind == "loop":
            loss = tape.loop(cell, rm.tensor(X0), steps=n).sum()
        elif kind == "chain":
            loss = tape.chain([cell] * n, rm.tensor(X0)).sum()
        else:
            h, ys = tape.scan(lambda h, x: (cell(h) * x, h.sum()), rm.tensor(X0), np.ones(n))
            loss = h.sum() + ys.sum()
        loss.backward()

    run()  # warm: caches of the first run (plans, strides) are not the check's
    return traced_peak(run)


# Guards: the default check kept a fingerprint of every step's output for the whole run
# (an array("L") of n entries: 512 KiB at n = 65536), so memory grew with n where the
# schedule's s slots should bound it; a chain also kept a Spec object a step (390 bytes)
# and a scan a dict entry and a tuple a step for its ys (about 400 bytes) until the end.
# What may grow: a chain's list of functions and its specs (8 + 8 bytes a step), a scan's
# xs, stacked ys and their cotangent (8 + 8 + 8) and the fingerprints of its ys (4).
@pytest.mark.parametrize(
    ("kind", "per_step", "check"),
    [("loop", 0, True), ("loop", 0, "full"), ("chain", 16, True), ("scan", 28, True)],
)
def test_memory_is_flat_in_the_number_of_steps(kind, per_step, check):
    short, long = revolve_peak(kind, 64, check), revolve_peak(kind, 1024, check)
    assert long - short < 960 * per_step + 2048, (short, long)


def drifting_loop(kind, n, k, armed, tape):
    """A loop, chain or scan of n steps (state of 3 floats) whose step k returns a
    different value on each evaluation once ``armed[0]`` (set after the forward
    sweep): in its new state (``kind`` "state") or only in its y ("y", a scan)."""
    evaluations = [0]
    w = rm.tensor(W0, requires_grad=True)
    x = rm.tensor(X0, requires_grad=True)

    def drift(i):
        if i != k or not armed[0]:
            return 0.0
        evaluations[0] += 1
        return 1e-3 * evaluations[0]

    def cell(i, h):
        return h + rm.tanh(h @ w) * 0.5

    if kind == "chain":
        layers = [lambda h, i=i: cell(i, h) * (1.0 + drift(i)) for i in range(n)]
        loss = (tape.chain(layers, x) ** 2).sum()
    else:

        def scanned(h, xi):
            i = int(xi.data)  # the step index, passed in the scan's xs
            new = cell(i, h)
            y = new * 2.0
            if kind == "state":
                new = new * (1.0 + drift(i))
            else:
                y = y * (1.0 + drift(i))  # its VJP differs too
            return new, y

        h, ys = tape.scan(scanned, x, rm.tensor(np.arange(n, dtype=np.float64)))
        loss = (h**2).sum() + (ys**3).sum()
    return loss, w, x, evaluations


def tapes():
    """Tapes that recompute: revolve, sqrt, online, byte budgets, disk slots, policies."""
    return st.one_of(
        st.builds(lambda s: {"snapshots": s}, st.integers(1, 6)),
        st.just({"schedule": "sqrt"}),
        st.builds(lambda s: {"snapshots": s, "schedule": "online"}, st.integers(1, 4)),
        st.builds(lambda m: {"memory": m}, st.integers(600, 6000)),
        st.builds(lambda s: {"snapshots": s, "disk_snapshots": 1}, st.integers(0, 2)),
        st.builds(
            lambda s: {"snapshots": s, "policy": rm.policies.save_ops("tanh")}, st.integers(1, 3)
        ),
    )


# Guards: a step that does not reproduce itself when recomputed must be refused (or, if it
# never ran again for the gradient, the gradient must be store-all's, bit for bit) under
# every schedule and budget, whichever step drifts and wherever the check meets it.
@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(["state", "y", "chain"]),
    n=st.integers(2, 9),
    data=st.data(),
    options=tapes(),
    check=st.sampled_from([True, "full"]),
)
def test_a_step_that_changes_when_recomputed_is_refused(kind, n, data, options, check):
    k = data.draw(st.integers(0, n - 1), label="drifting step")
    loss, w, x, _ = drifting_loop(kind, n, k, [False], rm.Tape())
    loss.backward()
    exact = w.grad.copy(), x.grad.copy()

    armed = [False]
    try:
        loss, w, x, evaluations = drifting_loop(
            kind, n, k, armed, rm.Tape(check_replay=check, **options)
        )
    except ValueError as error:  # a byte budget below what any plan needs
        assert "too small" in str(error) or "least" in str(error)
        return
    armed[0] = True
    try:
        loss.backward()
    except rm.ReplayError as error:
        assert "values" in str(error)  # the policy names the op that differs
        return
    # not refused: the drifting step never ran again where the gradient could see it
    if kind != "y":
        assert evaluations[0] == 0
    assert np.array_equal(w.grad, exact[0]) and np.array_equal(x.grad, exact[1])


# Guards: rm.jvp runs the loop again from x_0 with tangents, taped from end to end, and
# reverses nothing: its check is where that run ends, against the forward's x_n.
@pytest.mark.parametrize("options", [{"snapshots": 2}, {}])
def test_a_step_that_changes_when_rerun_for_jvp_is_refused(options):
    runs = [0]

    def step(h):
        runs[0] += 1
        return rm.tanh(h) * (1.0 + 1e-3 * runs[0])

    def f(x):
        return rm.Tape(**options).loop(step, x, steps=5)

    with pytest.raises(rm.ReplayError, match="step 4 was recomputed.*different values"):
        rm.jvp(f, (X0,), (np.ones(3),))


class Handmade:
    """Tapes step 0 in the forward and keeps its tape; recomputes x_1 from x_0 to tape
    steps 1 and 2 in backward."""

    snapshots, steps = 1, 3

    def __iter__(self):
        from remat.schedules import Advance, End, EndForward, Free, Restore, Reverse, Snapshot, Tape

        return iter(
            [Snapshot(0, 0), Tape(0, 1), Advance(1, 3), EndForward(), Restore(0, 0)]
            + [Advance(0, 1), Tape(1, 3), Reverse(1, 3), Reverse(0, 1), Free(0), End()]
        )


# Guards: a step taped in the forward (its output is the first run's) whose next step was
# taped at a recomputed state that differs must be refused, and the error must not call the
# first-run step recomputed; here step 1 maps both states to one, so only that junction sees
# the difference (the old per-step check saw none).
def test_a_recomputed_input_that_differs_from_the_first_runs_output_is_refused():
    runs = [0]

    def drifting(h):
        runs[0] += 1
        return rm.tanh(h) * (1.0 + 1e-3 * runs[0])

    x = rm.tensor(X0, requires_grad=True)
    h = rm.Tape(schedule=Handmade()).chain([drifting, lambda h: h * 0.0 + 1.0, rm.sin], x)
    with pytest.raises(rm.ReplayError, match=r"step 1 was taped at an x_1 recomputed.*up to 0"):
        h.sum().backward()
