"""The schedule interpreter: one handler per kind of action, each ``handler(run, action)``.

A schedule (:mod:`remat.schedules`) is an iterator of actions that the run
carries out one by one and never second-guesses:

* ``Advance(a, b)``: run steps a..b-1 without recording (``no_grad``);
* ``Tape(a, b)``: run steps a..b-1 recording each on a small tape of its own;
* ``Snapshot / Restore / Free``: keep, reload or drop the state in a slot;
* ``Reverse(a, b)``: backpropagate through the taped steps b-1..a;
* ``Discard(a, b)``: drop step tapes unreversed (online checkpointing);
* ``Invert(a, b)``: recompute x_{b-1}..x_a with a reversible loop's inverse.

The handlers are plain functions in a table (:data:`HANDLERS`): bound methods
kept on the run would make a reference cycle, and hold the run until the
cyclic GC.  The run with tangents has a table of its own
(:mod:`remat.executor.tangents`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

from .. import backend, guard, schedules
from ..pytree import unflatten
from ..tape import UNTAPED, next_sequence, no_grad
from ..tensor import Tensor
from .errors import LoopError
from .reversible import compare_reconstruction, invert, refuse_nonfinite_output
from .steps import Recording, StepTape, retag, reverse_step, saved_by, step_recorder


def advance(run, action):
    run.expect_position(action, action.start)
    run.replay.taped_end = None
    arrays, rng = run.current
    backend.set_random_state(rng)
    call, timeline = run.steps.call, run.stats.timeline
    spill = step_recorder(run.check_replay)  # what a step records under enable_grad
    with Recording(spill, UNTAPED):
        for i in range(action.start, action.stop):
            arrays = call(i, arrays, False)[0]
            if timeline is not None:
                run.mark()
    retag(spill.records)
    run.current = (arrays, backend.random_state())
    run.position = action.stop


def tape_steps(run, action):
    run.expect_position(action, action.start)
    arrays, rng = run.current
    backend.set_random_state(rng)
    steps, replay, held, tapes, xs_buffers = (
        run.steps,
        run.replay,
        run.held,
        run.tapes,
        run.xs_buffers,
    )
    call, forward, timeline = steps.call, replay.forward, run.stats.timeline
    # One recorder for the action, emptied after each step (tape_call, inlined: bench_overheads'
    # tiny-step rows pay its cost once an action instead of once a step).
    recorder = step_recorder(run.check_replay)
    at = replay.fingerprint(arrays)  # of x_i, the state step i is taped at
    with Recording(recorder, True):
        for i in range(action.start, action.stop):
            recomputed = i < steps.reached
            floor = next_sequence()
            x_i = arrays
            arrays, inputs, outputs = call(i, x_i, True)
            stop = next_sequence()
            records = recorder.records[:]
            recorder.records.clear()
            retag(records)
            if recomputed and (guard.WATCHED or guard.REBOUND[0] > forward.seq):
                forward.refuse_changed(records, run.chain.name(i))  # (its own test, inlined
                # here so that a step pays no name and no call while nothing changed)
            saved = saved_by(records, floor, inputs, x_i, xs_buffers)
            tapes[i] = StepTape(inputs, outputs, floor, stop, saved)
            held.hold(saved)
            if at is not None:
                at = replay.taped(i, at, arrays, recomputed)
            if timeline is not None:
                run.mark()
            if run.online_forward and stop_online(run, i + 1, arrays):
                break
    run.current = (arrays, backend.random_state())
    run.position = i + 1
    replay.taped_end = None if at is None else (arrays, at)


def stop_online(run, n, arrays):
    """After an online step: tell the schedule if the loop has ended at x_n."""
    done = run.max_steps is not None and n >= run.max_steps
    if not done and run.until is not None:
        done = ask_until(run, n, arrays)
    if done:
        run.actions.finish(n)
        run.stats.steps = n
        run.online_forward = False
        return True
    return False


def ask_until(run, n, arrays):
    """The predicate on x_n.  Random numbers it draws do not move the steps' stream
    (they would not be drawn again when steps are recomputed)."""
    rng = backend.random_state()
    state = unflatten(run.spec_at(n).tree, [Tensor._wrap(a) for a in arrays])
    with no_grad():
        answer = run.until(state)
    backend.set_random_state(rng)
    try:
        return bool(answer)
    except (TypeError, ValueError):
        raise LoopError(
            f"tape.loop: until returned {answer!r} after step {n - 1}; it must return a "
            "bool (or a one-element Tensor)"
        ) from None


def discard(run, action):
    for i in range(action.start, action.stop):
        run.held.release(run.tapes.pop(i).saved)
        run.replay.drop(i)


def snapshot(run, action):
    run.expect_position(action, action.step)
    run.slots.snapshot(action, run.current, run.held)


def restore(run, action):
    run.replay.taped_end = None
    compare = None
    if run.inverted == action.step and run.position == action.step:
        compare = partial(compare_reconstruction, run)  # the state the inverse rebuilt
    run.current = run.slots.restore(action, compare)
    run.position = action.step


def free(run, action):
    run.slots.free(action, run.held)


def reverse(run, action):
    steps, replay, held, tapes = run.steps, run.replay, run.held, run.tapes
    keeping, chain, n = steps.keeping, run.chain, run.stats.steps
    for i in range(action.stop - 1, action.start - 1, -1):
        steps.evaluating = i  # for the error of a VJP that fails
        replay.meet(i, chain, n)
        step_tape = tapes.pop(i)
        if run.inverted == i:  # taped from x_i as the inverse rebuilt it
            refuse_nonfinite_output(i, step_tape)
        held.release(step_tape.saved)  # before: reverse_step lets them go as it goes
        grads = reverse_step(run.outer_sweep, step_tape, seeds(run, i, run.cotangent))
        run.cotangent = gather(run, i, grads, run.xs_grads, step_tape)
        if keeping is not None and i in keeping:
            held.release(keeping.pop(i).arrays())
    run.position = None


def seeds(run, i, state, ys=None):
    """What step i's outputs are seeded with in reverse: the cotangent of x_{i+1}
    (``state``), then row i of the ys' cotangents (of ``run.ys_cotangent``)."""
    if not run.chain.has_ys:
        return list(state)
    ys = run.ys_cotangent if ys is None else ys
    return list(state) + [None if g is None else g[i] for g in ys]


def gather(run, i, grads, xs_grads, step_tape):
    """From the cotangents of step i's inputs (``grads``): add xs[i]'s into row i of
    ``xs_grads`` (a buffer per xs leaf, made when a first one arrives), and
    return x_i's (zeros where none arrived)."""
    spec = run.steps.spec_at(i)
    width = len(spec.shapes)
    for k, g in enumerate(grads[width:]):
        if g is not None:
            buffer = xs_grads[k]
            if buffer is None:  # in the cotangents' dtype: the leaf casts once, at the end
                xs = run.chain.xs[k]
                buffer = xs_grads[k] = backend.zeros(xs.shape, g.dtype, like=xs)
            buffer[i] += g if g.shape == buffer.shape[1:] else g.reshape(buffer.shape[1:])
    like = step_tape.outputs[0]._data if step_tape.outputs else run.like
    return [
        g if g is not None else backend.zeros(s, d, like=like)
        for g, s, d in zip(grads[:width], spec.shapes, spec.dtypes)
    ]


# What carries out each action.
HANDLERS: dict[Any, Callable[..., Any]] = {
    schedules.Advance: advance,
    schedules.Tape: tape_steps,
    schedules.Reverse: reverse,
    schedules.Discard: discard,
    schedules.Snapshot: snapshot,
    schedules.Restore: restore,
    schedules.Free: free,
    schedules.Invert: invert,
}
