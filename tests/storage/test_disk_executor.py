"""Disk snapshots in the executor: rm.Tape(snapshots=s, disk_snapshots=d, disk_dir=...).

Gradients must equal store-all's bit for bit, every file must be gone after
backward, after any failure and at process exit, and a disk that cannot take
a file must say which folder.
"""

import errno
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat import backend, memory, schedules

RNG = np.random.default_rng(7)
W = RNG.normal(size=(6, 6)) * 0.4


def dict_step(w):
    def step(state):
        h = rm.tanh(state["h"] @ w) + 0.5 * state["h"]
        return {"h": h, "c": state["c"] * 0.9 + h.sum(axis=0)}

    return step


def loop_grads(steps=30, **tape_kwargs):
    """Gradients of a loop over a dict state, the tape, and the loss."""
    w = rm.tensor(W, requires_grad=True)
    h = rm.tensor(np.linspace(-1, 1, 18).reshape(3, 6), requires_grad=True)
    c = rm.tensor(np.ones(6), requires_grad=True)
    with rm.Tape(**tape_kwargs) as tape:
        out = tape.loop(dict_step(w), {"h": h, "c": c}, steps=steps)
        loss = (out["h"] ** 2).sum() + out["c"].sum()
    loss.backward()
    return (w.grad, h.grad, c.grad), tape


def cheap_disk(steps, s, d):
    """A TwoLevel plan that writes to disk (costs low enough that the disk pays)."""
    plan = schedules.TwoLevel(steps, s, d, 0.5, 0.5)
    assert simulate_disk(plan)[0] > 0
    return plan


def simulate_disk(plan):
    sim = schedules.simulate(plan)
    return sim.writes[schedules.DISK], sim.reads[schedules.DISK]


def test_two_level_gradients_equal_store_all_bit_for_bit_and_leave_no_file(tmp_path):
    expected, _ = loop_grads()
    plan = cheap_disk(30, 2, 3)
    got, tape = loop_grads(schedule=plan, disk_dir=tmp_path)
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)
    assert os.listdir(tmp_path) == []
    writes, reads = simulate_disk(plan)
    stats = tape.stats
    assert (stats.disk_writes, stats.disk_reads) == (writes, reads)
    state_bytes = 3 * 6 * 8 + 6 * 8
    assert stats.disk_bytes_written == writes * state_bytes
    assert stats.disk_bytes_read == reads * state_bytes
    assert state_bytes <= stats.peak_disk_bytes <= 3 * state_bytes
    assert stats.peak_snapshots <= 2  # memory slots only
    assert "disk:" in str(stats)


def test_tape_disk_snapshots_measures_once_then_reuses_the_plan(tmp_path):
    memory.clear_plans()
    w_step = dict_step(rm.tensor(W))  # one step object for both runs: the cache key
    grads = []
    for _ in range(2):
        h = rm.tensor(np.linspace(-1, 1, 18).reshape(3, 6), requires_grad=True)
        c = rm.tensor(np.ones(6), requires_grad=True)
        with rm.Tape(snapshots=2, disk_snapshots=4, disk_dir=tmp_path) as tape:
            out = tape.loop(w_step, {"h": h, "c": c}, steps=40)
            ((out["h"] ** 2).sum() + out["c"].sum()).backward()
        grads.append((h.grad, tape))
    (_, first), (_, second) = grads
    assert first.stats.plan == "measured" and second.stats.plan == "reused"
    plan, costs = first.plans[0]
    assert isinstance(plan, schedules.TwoLevel)
    assert (plan.steps, plan.snapshots, plan.disk_snapshots) == (40, 2, 4)
    assert costs.step_seconds > 0 and costs.write_seconds > 0 and costs.read_seconds > 0
    assert plan.write_cost == costs.write_cost and plan.read_cost == costs.read_cost
    assert second.plans[0][0] is plan
    assert os.listdir(tmp_path) == []


def test_tape_disk_snapshots_grad_matches_store_all_whatever_the_measured_costs(tmp_path):
    memory.clear_plans()
    expected, _ = loop_grads(steps=25)
    got, tape = loop_grads(steps=25, snapshots=1, disk_snapshots=2, disk_dir=tmp_path)
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)
    assert isinstance(tape.plans[0][0], schedules.TwoLevel)
    assert os.listdir(tmp_path) == []


def test_disk_snapshots_zero_is_revolve_without_measuring():
    _, tape = loop_grads(steps=20, snapshots=3, disk_snapshots=0)
    assert tape.stats.forward_steps == schedules.simulate(schedules.Revolve(20, 3)).forward_steps
    assert tape.stats.disk_writes == 0 and tape.plans[0][1] is None


def test_chain_and_scan_on_disk_equal_store_all(tmp_path):
    w = rm.tensor(W, requires_grad=True)
    xs = rm.tensor(np.linspace(0, 1, 12 * 6).reshape(12, 6), requires_grad=True)

    def run(**kw):
        w.grad = xs.grad = None
        x0 = rm.tensor(np.ones((2, 6)))
        with rm.Tape(**kw) as tape:
            fs = [lambda x: rm.tanh(x @ w)] * 9
            y = tape.chain(fs, x0)
            carry, ys = tape.scan(lambda c, x: (rm.sin(c @ w) + x, c.sum()), y, xs)
            loss = (carry**2).sum() + ys.sum()
        loss.backward()
        return w.grad, xs.grad, tape

    gw, gx, _ = run()
    w2, x2, tape = run(snapshots=1, disk_snapshots=2, disk_dir=tmp_path)
    assert np.array_equal(w2, gw) and np.array_equal(x2, gx)
    assert [type(plan) for plan, _ in tape.plans] == [schedules.TwoLevel] * 2
    assert os.listdir(tmp_path) == []


def test_disk_revolve_schedule_object_uses_disk_dir(tmp_path):
    expected, _ = loop_grads(steps=30)
    got, tape = loop_grads(
        steps=30, schedule=schedules.DiskRevolve(30, 1, 0.5, 0.5), disk_dir=tmp_path
    )
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)
    assert tape.stats.disk_writes > 0
    assert os.listdir(tmp_path) == []


class Boom(Exception):
    pass


def failing_step(w, fail_at):
    calls = [0]

    def step(x):
        calls[0] += 1
        if calls[0] == fail_at:
            raise Boom(f"call {calls[0]}")
        return rm.tanh(x @ w)

    return step


def test_files_are_removed_when_the_forward_sweep_fails(tmp_path):
    w = rm.tensor(W, requires_grad=True)
    plan = cheap_disk(30, 1, 3)
    with rm.Tape(schedule=plan, disk_dir=tmp_path) as tape:
        with pytest.raises(Boom):
            tape.loop(failing_step(w, 25), rm.tensor(np.ones((2, 6))), steps=30)
    assert os.listdir(tmp_path) == [] and tape.loops == []


def test_files_are_removed_when_the_backward_sweep_fails(tmp_path):
    w = rm.tensor(W, requires_grad=True)
    plan = cheap_disk(30, 1, 3)
    with rm.Tape(schedule=plan, disk_dir=tmp_path) as tape:
        y = tape.loop(failing_step(w, 40), rm.tensor(np.ones((2, 6))), steps=30)
        loss = y.sum()
    assert len(os.listdir(tmp_path)) == 1  # the run's folder, holding its disk slots
    with pytest.raises(rm.LoopError, match="Boom"):
        loss.backward()
    assert os.listdir(tmp_path) == [] and w.grad is None


def test_a_full_disk_raises_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    real = backend.save_arrays
    calls = [0]

    def full_after_two(file, arrays):
        calls[0] += 1
        if calls[0] > 2:
            file.write(b"half a state")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(file, arrays)

    monkeypatch.setattr(backend, "save_arrays", full_after_two)
    w = rm.tensor(W, requires_grad=True)
    plan = cheap_disk(30, 1, 3)
    with rm.Tape(schedule=plan, disk_dir=tmp_path) as tape:
        with pytest.raises(rm.DiskError) as caught:
            tape.loop(rm.tanh, rm.tensor(np.ones((2, 6))) @ w, steps=30)
    message = str(caught.value)
    assert "the disk is full" in message and str(tmp_path) in message
    assert "x_" in message and "disk slot" in message
    assert caught.value.errno == errno.ENOSPC
    assert isinstance(caught.value.__cause__, OSError)
    assert os.listdir(tmp_path) == [] and tape.loops == []


def test_a_full_disk_in_backward_raises_and_leaves_nothing(tmp_path, monkeypatch):
    w = rm.tensor(W, requires_grad=True)
    plan = cheap_disk(40, 1, 3)
    writes_forward = sum(
        1 for a in _forward_part(plan) if type(a) is schedules.Snapshot and a.level == "disk"
    )
    assert writes_forward < simulate_disk(plan)[0]  # some disk writes happen in backward
    real, calls = backend.save_arrays, [0]

    def full_in_backward(file, arrays):
        calls[0] += 1
        if calls[0] > writes_forward:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(file, arrays)

    monkeypatch.setattr(backend, "save_arrays", full_in_backward)
    with rm.Tape(schedule=plan, disk_dir=tmp_path) as tape:
        loss = tape.loop(lambda x: rm.tanh(x @ w), rm.tensor(np.ones((2, 6))), steps=40).sum()
    with pytest.raises(rm.DiskError, match="the disk is full"):
        loss.backward()
    assert os.listdir(tmp_path) == [] and w.grad is None


def _forward_part(plan):
    for action in plan:
        if type(action) is schedules.EndForward:
            return
        yield action


def test_a_folder_that_disappears_is_named_in_the_error(tmp_path):
    folder = tmp_path / "snapshots"
    folder.mkdir()
    tape = rm.Tape(schedule=cheap_disk(30, 1, 3), disk_dir=folder)
    folder.rmdir()
    with tape, pytest.raises(rm.DiskError) as caught:
        tape.loop(rm.tanh, rm.tensor(np.ones(3)), steps=30)
    assert str(folder) in str(caught.value) and "does not exist" in str(caught.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_folder_is_named_in_the_error(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(rm.DiskError, match="not writable") as caught:
            rm.Tape(schedule=cheap_disk(30, 1, 3), disk_dir=folder)
        assert str(folder) in str(caught.value)
    finally:
        folder.chmod(0o700)


# guards: a folder that cannot be written in was found only at the first disk write, mid-run
def test_a_disk_dir_that_is_not_writable_is_refused_by_the_tape(tmp_path, monkeypatch):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: p != str(tmp_path) and real(p, mode))
    with pytest.raises(rm.DiskError, match="is not writable") as caught:
        rm.Tape(snapshots=1, disk_snapshots=2, disk_dir=tmp_path)
    assert str(tmp_path) in str(caught.value) and caught.value.errno == errno.EACCES


# guards: a disk_dir given as bytes failed deep inside tempfile (str prefix, bytes folder)
def test_a_disk_dir_may_be_bytes_or_a_path(tmp_path):
    expected, _ = loop_grads(steps=12)
    for folder in (os.fsencode(tmp_path), tmp_path):
        got, tape = loop_grads(steps=12, schedule=cheap_disk(12, 1, 3), disk_dir=folder)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected))
        assert tape.stats.disk_writes > 0 and os.listdir(tmp_path) == []
    with pytest.raises(TypeError, match="disk_dir must be a folder's path"):
        rm.Tape(snapshots=1, disk_snapshots=2, disk_dir=3)


class ShortWrites:
    """A file whose writes keep only the first ``room`` bytes in all, without an error
    (as a full disk or a file size limit may cut a write short)."""

    def __init__(self, file, room):
        self.file, self.room = file, room

    def write(self, data):
        data = bytes(data)[: max(self.room, 0)]
        self.room -= len(data)
        return self.file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


# guards: a write cut short went unnoticed: the forward "succeeded" with a truncated .npy file,
# and backward failed later with "cannot read back"
@pytest.mark.parametrize("room", [0, 100, 200])
def test_a_write_cut_short_raises_naming_the_folder_and_the_bytes_missing(
    tmp_path, monkeypatch, room
):
    from remat import storage

    files = [0]

    def short_open(path, mode="r", *args):
        files[0] += 1
        file = open(path, mode, *args)
        return ShortWrites(file, room) if files[0] == 3 else file  # the third file written

    monkeypatch.setattr(storage, "open", short_open, raising=False)
    w = rm.tensor(W, requires_grad=True)
    x = rm.tensor(np.ones((4, 6)))  # one state: a 128-byte header and 192 bytes of data
    with rm.Tape(schedule=cheap_disk(30, 1, 3), disk_dir=tmp_path) as tape:
        with pytest.raises(rm.DiskError, match="cut short") as caught:
            tape.loop(lambda h: rm.tanh(h @ w), x, steps=30)
    message = str(caught.value)
    assert str(tmp_path) in message and "slot-" in message and "x_" in message
    assert f"holds {room} bytes of the 320 written, {320 - room} bytes missing" in message
    assert os.listdir(tmp_path) == [] and tape.loops == []


def test_tape_refuses_a_disk_dir_that_is_not_a_folder(tmp_path):
    with pytest.raises(ValueError, match="not an existing folder"):
        rm.Tape(snapshots=2, disk_snapshots=2, disk_dir=tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not an existing folder"):
        rm.Tape(snapshots=2, disk_snapshots=2, disk_dir=tmp_path / "file")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(snapshots=2, disk_snapshots=2, memory="1 MiB"), "one or the other"),
        (dict(snapshots=2, disk_snapshots=2, schedule="revolve"), "TwoLevel"),
        (dict(disk_snapshots=2), "needs snapshots="),
        (dict(snapshots=0, disk_snapshots=0), "at least 1"),
        (dict(snapshots=2, disk_snapshots=-1), "disk_snapshots"),
        (dict(snapshots=2, disk_dir="."), "writes none"),
    ],
)
def test_tape_disk_arguments_are_checked(kwargs, words):
    with pytest.raises(ValueError, match=words):
        rm.Tape(**kwargs)


def test_a_disk_tape_refuses_a_loop_of_unknown_length():
    with rm.Tape(snapshots=1, disk_snapshots=2) as tape, pytest.raises(ValueError, match="steps="):
        tape.loop(rm.tanh, rm.tensor(np.ones(2)), until=lambda x: True)


def test_snapshots_zero_keeps_every_state_on_disk(tmp_path):
    expected, _ = loop_grads(steps=12)
    plan = schedules.TwoLevel(12, 0, 12, 0.0, 0.0)
    got, tape = loop_grads(steps=12, schedule=plan, disk_dir=tmp_path)
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)
    assert tape.stats.peak_snapshots == 0 and tape.stats.disk_writes > 0


def test_files_are_removed_at_process_exit_without_backward(tmp_path):
    script = textwrap.dedent(
        f"""
        import numpy as np, remat as rm
        plan = rm.schedules.TwoLevel(30, 1, 3, 0.5, 0.5)
        w = rm.tensor(np.eye(4) * 0.5, requires_grad=True)
        tape = rm.Tape(schedule=plan, disk_dir={str(tmp_path)!r})
        with tape:
            y = tape.loop(lambda x: rm.tanh(x @ w), rm.tensor(np.ones(4)), steps=30)
        import os
        print(len(os.listdir({str(tmp_path)!r})))
        keep = (tape, y)  # alive until the interpreter exits
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "1"  # the folder existed while the process ran
    assert os.listdir(tmp_path) == []


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 40),
    s=st.integers(0, 3),
    d=st.integers(1, 5),
    wc=st.sampled_from([0.0, 0.5, 2.0]),
    rc=st.sampled_from([0.0, 1.0, 3.0]),
)
def test_any_two_level_plan_runs_exactly_and_cleans_up(n, s, d, wc, rc):
    plan = schedules.TwoLevel(n, s, d, wc, rc)
    expected, _ = loop_grads(steps=n)
    with tempfile.TemporaryDirectory() as folder:
        got, tape = loop_grads(steps=n, schedule=plan, disk_dir=folder)
        assert os.listdir(folder) == []
    for a, b in zip(got, expected):
        assert np.array_equal(a, b)
    writes, reads = simulate_disk(plan)
    assert (tape.stats.disk_writes, tape.stats.disk_reads) == (writes, reads)


def test_second_order_through_a_disk_loop_equals_store_all(tmp_path):
    w = rm.tensor(W)
    plan = cheap_disk(20, 1, 3)

    def f(h, **tape_kwargs):
        with rm.Tape(**tape_kwargs) as tape:
            out = tape.loop(lambda x: rm.tanh(x @ w) + 0.5 * x, h, steps=20)
        return (out**3).sum()

    h = np.linspace(-1, 1, 12).reshape(2, 6)
    v = np.cos(np.arange(12.0)).reshape(2, 6)
    expected = rm.hvp(lambda x: f(x), (h,), (v,))
    got = rm.hvp(lambda x: f(x, schedule=plan, disk_dir=tmp_path), (h,), (v,))
    for a, b in zip(np.atleast_1d(got), np.atleast_1d(expected)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert os.listdir(tmp_path) == []
