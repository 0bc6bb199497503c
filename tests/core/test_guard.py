"""The write guard (remat.guard) and the tape's contexts: saves stay guarded under
threads, a Tape entered by two asyncio tasks exits cleanly, the guard hashes what
it must once (not once per use), and its errors blame the right place.  Each test
guards a bug, said in the comment above it; none asserts a time.
"""

import asyncio
import threading

import numpy as np
import pytest

import remat as rm
from remat import backend

X0 = np.array([0.5, 1.0])


# --- the write guard under threads -----------------------------------------------------------


def test_an_exposure_finishing_late_in_another_thread_keeps_earlier_saves_guarded(monkeypatch):
    # guard.expose takes its sequence number, fingerprints (crc32 frees the GIL) and only then
    # sets OLDEST: a slower thread lowers OLDEST below a save another thread exposed since
    original = backend.fingerprint
    slow, inside, resume = [], threading.Event(), threading.Event()

    def fingerprint(array):
        if threading.current_thread() in slow:
            inside.set()
            resume.wait(5)
        return original(array)

    monkeypatch.setattr(backend, "fingerprint", fingerprint)
    other = rm.tensor(np.zeros(3))
    thread = threading.Thread(target=lambda: other.data)
    slow.append(thread)
    thread.start()
    inside.wait(5)
    x = rm.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()  # saves x
    handle = x.data  # hands x out after the save
    resume.set()
    thread.join()
    handle[0] = 100.0
    with pytest.raises(rm.BackwardError, match="changed in place"):
        y.backward()


# --- contexts: one Tape (or no_grad object) entered by two asyncio tasks ---------------------


def test_a_tape_entered_by_two_interleaved_asyncio_tasks_exits_cleanly():
    # the token stack is per thread, not per context: the first task to leave pops the other
    # task's token and contextvars raises a bare "created in a different Context" ValueError
    tape = rm.Tape()

    async def record(entered, leave):
        with tape:
            x = rm.tensor([1.0], requires_grad=True)
            (x * 2.0).sum()
            entered.set()
            await leave.wait()

    async def main():
        a_in, b_in, b_leave = asyncio.Event(), asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(record(a_in, b_in))
        await a_in.wait()
        b = asyncio.create_task(record(b_in, b_leave))
        await b_in.wait()
        await a  # a leaves while b is still inside
        b_leave.set()
        await b

    asyncio.run(main())
    assert len(tape) == 4  # two ops in each task


# --- performance of the guard ----------------------------------------------------------------


def count_fingerprints(monkeypatch):
    counts = {"calls": 0, "bytes": 0}
    original = backend.fingerprint

    def fingerprint(array):
        counts["calls"] += 1
        counts["bytes"] += array.nbytes
        return original(array)

    monkeypatch.setattr(backend, "fingerprint", fingerprint)
    return counts


def test_backward_after_one_read_hashes_a_parameter_once_not_once_per_use(monkeypatch):
    # np.linalg.norm(W) (np.asarray -> exposure) after the forward: backward then hashes all
    # of W once per record that saved it, O(uses x size); once per sweep is enough
    counts = count_fingerprints(monkeypatch)
    w = rm.tensor(np.eye(64) * 0.5, requires_grad=True)
    h = rm.tensor(np.ones((2, 64)))
    for _ in range(50):
        h = rm.tanh(h @ w)
    np.linalg.norm(w.detach())  # logging a weight norm (of w itself: refused, see numpy.md)
    counts.update(calls=0, bytes=0)
    h.sum().backward()
    assert counts["calls"] <= 2


def test_reading_a_constant_once_does_not_make_every_later_forward_hash_it(monkeypatch):
    # after one np.asarray(X) (to plot the data, say) X's memory is watched for X's life:
    # every later op saving X hashes all of X, and every backward hashes it again (measured:
    # for a 500x500 array the hash costs 6x the matmul it guards), in every iteration
    counts = count_fingerprints(monkeypatch)
    data = rm.tensor(np.ones((64, 64)) / 64)
    np.asarray(data).max()  # one innocent read
    w = rm.tensor(np.eye(64) * 0.5, requires_grad=True)
    counts.update(calls=0, bytes=0)
    for _ in range(3):  # three ordinary training iterations
        h = w
        for _ in range(20):
            h = rm.tanh(data @ h)
        h.sum().backward()
        with rm.no_grad():
            w -= 0.01 * w.grad
        w.grad = None
    assert counts["calls"] <= 3


# --- clear errors ----------------------------------------------------------------------------


def test_a_write_caught_while_reversing_a_taped_step_is_not_blamed_on_a_recomputation():
    # store_all recomputes nothing, yet the guard's BackwardError (raised in step 0's sweep) was
    # wrapped as "step 5 raised BackwardError while being recomputed in backward"
    x = rm.tensor(X0, requires_grad=True)
    out = rm.Tape().loop(rm.sin, x, steps=6)
    x.data[:] = 5.0
    with pytest.raises(rm.BackwardError, match="`sin`.*changed in place") as caught:
        out.sum().backward()
    assert "recomputed" not in str(caught.value)


def test_reading_the_loss_before_backward_does_not_make_every_record_check_its_arrays(
    monkeypatch,
):
    # loss.numpy() (or np.asarray(loss), loss.data) bumps guard.OLDEST, so every record of the
    # backward runs check_saved's Python scan of its arrays: measured 1.5x slower backward on a
    # chain of small ops, though nothing saved the loss
    from remat.tape import Record

    calls = {"n": 0}
    original = Record.check_saved

    def check_saved(self):
        calls["n"] += 1
        return original(self)

    monkeypatch.setattr(Record, "check_saved", check_saved)
    x = rm.tensor(np.ones(4), requires_grad=True)
    h = x
    for _ in range(200):
        h = rm.tanh(h * 0.999)
    loss = h.sum()
    print(loss.numpy())  # log the loss, then backpropagate
    loss.backward()
    assert calls["n"] <= 1
