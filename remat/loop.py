"""The executor: one loop, reversed under a snapshot budget by following a schedule.

``tape.loop(step, state, steps=n)`` evaluates ``state = step(state)`` n times.
What it keeps is decided by a schedule from :mod:`remat.schedules`, an
iterator of actions that this module carries out one by one and never second-
guesses:

* ``Advance(a, b)``: run steps a..b-1 without recording (``no_grad``);
* ``Tape(a, b)``: run steps a..b-1 recording each on a small tape of its own;
* ``Snapshot / Restore / Free``: keep, reload or drop the state in a slot;
* ``Reverse(a, b)``: backpropagate through the taped steps b-1..a;
* ``Discard(a, b)``: drop step tapes unreversed (online checkpointing);
* ``EndForward``: the forward sweep is over; the rest runs in ``backward``.

The loop appears on the outer tape as one record.  Its backward runs the rest
of the schedule: each step's cotangent flows through that step's own records;
cotangents for tensors the step closed over (parameters) go straight into the
outer sweep, so their gradients accumulate exactly as without checkpointing.

A state is the step's value (one Tensor or a tuple) plus the random-number
generator's state, so a step that draws random numbers replays them exactly
when it is recomputed.  Everything is counted as it happens: ``stats`` reports
step evaluations, snapshots and the bytes held.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import backend, schedules
from .ops.core import Op
from .schedules.arguments import require_count
from .tape import STATE, BackwardError, Record, Sweep, Tape, enable_grad, next_sequence, no_grad
from .tensor import Tensor

SCHEDULE_NAMES = schedules.SCHEDULE_NAMES


class LoopError(RuntimeError):
    """A checkpointed loop could not run: a bad step, or a step that failed."""


class StepOutputError(LoopError, TypeError, ValueError):
    """A step returned a state of another structure, shape or dtype than it was given."""


# --- choosing the schedule --------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """What a Tape's loops are reversed with: a schedule name or object, and a budget."""

    schedule: object  # one of SCHEDULE_NAMES, or a schedule object
    snapshots: int | None

    def offline(self, steps):
        if not isinstance(self.schedule, str):  # used as given; an online one ends at steps
            if self.schedule.steps not in (None, steps):
                raise ValueError(
                    f"tape.loop(steps={steps}): the tape's schedule {self.schedule!r} is for "
                    f"{getattr(self.schedule, 'steps', None)} steps"
                )
            return self.schedule
        if self.schedule == "online":  # it serves a known length too: the loop ends at steps
            return schedules.Online(snapshots=self.snapshots)
        budget = None if self.schedule in ("store_all", "sqrt") else self.snapshots
        return schedules.make_schedule(self.schedule, steps=steps, snapshots=budget)

    def online(self):
        if not isinstance(self.schedule, str):
            if self.schedule.steps is not None:
                raise ValueError(
                    f"tape.loop(until=...): the tape's schedule {self.schedule!r} is for a known "
                    "length; a loop of unknown length needs Online(snapshots) or StoreAll()"
                )
            return self.schedule
        if self.schedule == "store_all":
            return schedules.StoreAll()  # tapes every step until the loop ends
        if self.snapshots is None:
            raise ValueError(
                "tape.loop(until=...) reverses a loop of unknown length with online "
                "checkpointing, which needs a budget: use rm.Tape(snapshots=s)"
            )
        return schedules.Online(snapshots=self.snapshots)


def resolve_policy(snapshots, schedule):
    """The Policy for ``rm.Tape(snapshots, schedule)``, with clear errors."""
    if snapshots is not None:
        snapshots = require_count("Tape", "snapshots", snapshots)
    if schedule is None:
        return Policy("revolve" if snapshots is not None else "store_all", snapshots)
    if isinstance(schedule, str):
        if schedule not in SCHEDULE_NAMES:
            raise ValueError(
                f"Tape: unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULE_NAMES)} "
                "or pass a schedule object from remat.schedules"
            )
        if schedule in ("revolve", "online", "periodic", "mixed") and snapshots is None:
            raise ValueError(f"Tape: schedule={schedule!r} needs a budget: pass snapshots=")
        return Policy(schedule, snapshots)  # store_all and sqrt size their own memory
    if not all(hasattr(schedule, a) for a in ("__iter__", "steps", "snapshots")):
        raise ValueError(
            f"Tape: schedule must be one of {', '.join(SCHEDULE_NAMES)} or a schedule object "
            f"from remat.schedules, got {schedule!r}"
        )
    if snapshots is not None and snapshots != schedule.snapshots:
        raise ValueError(
            f"Tape: snapshots={snapshots} but the schedule {schedule!r} uses "
            f"{schedule.snapshots}; give one or the other"
        )
    return Policy(schedule, schedule.snapshots)


# --- counting -------------------------------------------------------------------


@dataclass(slots=True)
class LoopStats:
    """What one loop (or all loops of a tape, added up) did, counted as it ran.

    ``snapshots`` is the schedule's slot budget; ``timeline`` lists
    (step evaluations so far, bytes held) after every step and action when the
    tape was made with ``trace=True`` (else it is None).
    """

    steps: int = 0
    forward_steps: int = 0
    peak_snapshots: int = 0
    peak_bytes: int = 0
    schedule: str = ""
    snapshots: int = 0
    timeline: list | None = None

    @property
    def recomputed_steps(self) -> int:
        return self.forward_steps - self.steps

    @classmethod
    def combine(cls, stats):
        stats = list(stats)
        return cls(
            steps=sum(s.steps for s in stats),
            forward_steps=sum(s.forward_steps for s in stats),
            peak_snapshots=max((s.peak_snapshots for s in stats), default=0),
            peak_bytes=max((s.peak_bytes for s in stats), default=0),
            schedule=", ".join(s.schedule for s in stats),
            snapshots=max((s.snapshots for s in stats), default=0),
        )

    def __str__(self):
        factor = self.forward_steps / self.steps if self.steps else 0.0
        return (
            f"{self.schedule or 'no loop'}: {self.steps} steps, {self.forward_steps} step "
            f"evaluations ({self.recomputed_steps} recomputed, {factor:.2f}x), "
            f"peak {self.peak_snapshots} snapshots, peak {self.peak_bytes / 2**20:.3f} MiB held"
        )


class Holdings:
    """Bytes held by the loop right now, each array counted once however often held."""

    def __init__(self):
        self.count = {}  # id(array) -> [array, holders]
        self.bytes = 0
        self.peak = 0

    def hold(self, arrays):
        for a in arrays:
            entry = self.count.get(id(a))
            if entry is None:
                self.count[id(a)] = [a, 1]
                self.bytes += backend.nbytes(a)
            else:
                entry[1] += 1
        if self.bytes > self.peak:
            self.peak = self.bytes

    def release(self, arrays):
        for a in arrays:
            entry = self.count[id(a)]
            entry[1] -= 1
            if entry[1] == 0:
                del self.count[id(a)]
                self.bytes -= backend.nbytes(a)


# --- one step, taped or not -------------------------------------------------------


class StepTape:
    """The recording of one step: its input leaves, its outputs, and what it saved."""

    __slots__ = ("inputs", "outputs", "floor", "saved")

    def __init__(self, inputs, outputs, floor, saved):
        self.inputs = inputs  # leaf Tensors standing for x_i
        self.outputs = outputs  # Tensors of x_{i+1}, whose records lead back to inputs
        self.floor = floor  # first sequence number recorded by this step
        self.saved = saved  # the arrays its records hold (for byte accounting)


class StepSweep(Sweep):
    """Backpropagate through one step tape inside an outer sweep.

    Records the step made are reversed here; cotangents for the step's input
    leaves are collected (they are the cotangent of the previous state); any
    other tensor (a parameter, or a value made before the loop) is handed to
    the outer sweep, which finishes its gradient.
    """

    def __init__(self, outer, step_tape):
        super().__init__(outer.ns)
        self.outer = outer
        self.floor = step_tape.floor
        self.input_ids = {id(t.node): k for k, t in enumerate(step_tape.inputs)}
        self.input_grads = [None] * len(step_tape.inputs)

    def add(self, node, g):
        if type(node) is Record and node.seq >= self.floor:
            super().add(node, g)
            return
        k = self.input_ids.get(id(node))
        if k is None:
            self.outer.add(node, g)
        elif self.input_grads[k] is None:
            self.input_grads[k] = g
        else:
            self.input_grads[k] = self.input_grads[k] + g


class StateCotangent:
    """Cotangents of a loop's output state, one slot per component (None = zero)."""

    __slots__ = ("parts", "shape")

    def __init__(self, parts, shape):
        self.parts = parts
        self.shape = shape

    def __add__(self, other):
        parts = [
            b if a is None else a if b is None else a + b for a, b in zip(self.parts, other.parts)
        ]
        return StateCotangent(parts, self.shape)


def _select_vjp(ns, g, ans, _, index, width, shape):
    parts = [None] * width
    parts[index] = g
    return StateCotangent(parts, shape)


# Loop outputs: one `loop_output` record per state component, each pointing at
# the loop's record, so a tuple state fits a tape of single-output records.
SELECT = Op("loop_output", None, (_select_vjp,), ("",))


def _loop_backward(record, g, sweep):
    if sweep.create_graph or sweep.retain_graph:  # refuse before anything is released
        raise BackwardError(
            "a checkpointed tape.loop can be reversed once and not differentiated twice: "
            "its snapshots are released by its backward (retain_graph and nested rm.grad "
            "are not supported through a loop yet)"
        )
    run = record.args[0]
    record.release()
    run.backward(g, sweep)


LOOP = Op("loop", None, (), None, custom_backward=_loop_backward)


# --- the executor ---------------------------------------------------------------


class LoopRun:
    """One execution of ``tape.loop``: the schedule's actions, carried out."""

    def __init__(self, tape, step, schedule, x0, x0_nodes, structure, until, max_steps):
        self.tape = tape
        self.step = step
        self.schedule = schedule
        self.actions = iter(schedule)
        self.structure = structure  # "tensor" or the tuple's length
        self.width = len(x0)
        self.shapes = tuple(a.shape for a in x0)
        self.devices = tuple(backend.device_of(a) for a in x0)
        self.dtypes = tuple(a.dtype for a in x0)
        self.differentiable = tuple(backend.is_floating(d) for d in self.dtypes)
        self.record_shape = self.shapes if self.width > 1 else self.shapes[0]
        self.until = until
        self.max_steps = max_steps
        self.online_forward = hasattr(self.actions, "finish")  # until the end is known
        self.x0_nodes = x0_nodes  # where the initial state's gradient goes
        self.position = 0
        self.evaluating = None  # the step being evaluated, for error messages
        self.current = (x0, backend.random_state())  # (arrays, rng state) of x_position
        self.slots = {}  # (level, slot) -> (step, arrays, rng state)
        self.tapes = {}  # step index -> StepTape
        self.held = Holdings()
        self.cotangent = None  # of x_position during the reverse sweep
        self.stats = LoopStats(
            schedule=type(schedule).__name__,
            snapshots=schedule.snapshots,
            timeline=[(0, 0)] if tape.trace else None,
        )
        self.handlers = {
            schedules.Advance: self.advance,
            schedules.Tape: self.tape_steps,
            schedules.Reverse: self.reverse,
            schedules.Discard: self.discard,
            schedules.Snapshot: self.snapshot,
            schedules.Restore: self.restore,
            schedules.Free: self.free,
        }

    @property
    def nbytes(self):
        """Bytes the loop holds now (snapshots and step tapes): what its record saves."""
        return self.held.bytes

    # -- evaluating steps --
    def call_step(self, i, arrays, taped):
        """Evaluate step i on ``arrays``; returns (output arrays, input leaves, outputs).

        Taped, the inputs are leaves (for the float components) so that the
        step's ops are recorded; untaped, they are constants.
        """
        self.evaluating = i
        self.stats.forward_steps += 1
        if self.structure == "tensor":  # the common case, kept short
            inputs = (Tensor(arrays[0], taped and self.differentiable[0]),)
            out = self.step(inputs[0])
            data = getattr(out, "data", None)
            if (
                type(out) is Tensor
                and data.shape == self.shapes[0]
                and data.dtype == self.dtypes[0]
            ):
                return (data,), inputs, (out,)
        else:
            inputs = tuple([Tensor(a, taped and d) for a, d in zip(arrays, self.differentiable)])
            out = self.step(inputs)
        outputs = self.check_output(i, out)
        return tuple([t.data for t in outputs]), inputs, outputs

    def check_output(self, i, out):
        if self.structure == "tensor":
            if not isinstance(out, Tensor):
                raise StepOutputError(
                    f"tape.loop: step {i} returned {type(out).__name__}; the state is one Tensor, "
                    "so the step must return one Tensor"
                )
            out = (out,)
        elif not (isinstance(out, tuple) and len(out) == self.width):
            got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
            raise StepOutputError(
                f"tape.loop: step {i} returned {got}; the state is a tuple of {self.width} "
                "Tensors, so the step must return a tuple of the same length"
            )
        for k, (t, shape, dtype) in enumerate(zip(out, self.shapes, self.dtypes)):
            if not isinstance(t, Tensor):
                raise StepOutputError(
                    f"tape.loop: step {i} returned {type(t).__name__} for state component {k}; "
                    "expected a Tensor"
                )
            if t.shape != shape or t.dtype != dtype:
                raise StepOutputError(
                    f"tape.loop: step {i} returned shape {t.shape} dtype {t.dtype} for state "
                    f"component {k}, but the state has shape {shape} dtype {dtype}; a step must "
                    "return a state of the same structure, shapes and dtypes"
                )
        return out

    def expect_position(self, action, index):
        if self.position != index:
            raise LoopError(
                f"schedule {self.schedule!r} asked for {action} while the current state is "
                f"x_{self.position}: this schedule is invalid (remat.schedules.simulate "
                "names the broken rule)"
            )

    # -- the actions --
    def advance(self, action):
        self.expect_position(action, action.start)
        arrays, rng = self.current
        backend.set_random_state(rng)
        with no_grad():
            for i in range(action.start, action.stop):
                arrays = self.call_step(i, arrays, taped=False)[0]
                self.mark()
        self.current = (arrays, backend.random_state())
        self.position = action.stop

    def tape_steps(self, action):
        self.expect_position(action, action.start)
        arrays, rng = self.current
        backend.set_random_state(rng)
        for i in range(action.start, action.stop):
            recorder = Tape()
            floor = next_sequence()
            with recorder, enable_grad():
                arrays, inputs, outputs = self.call_step(i, arrays, taped=True)
            saved = _saved_by_step(recorder.records, floor, inputs)
            self.tapes[i] = StepTape(inputs, outputs, floor, saved)
            self.held.hold(saved)
            self.mark()
            if self.online_forward and self.stop_online(i + 1, arrays):
                break
        self.current = (arrays, backend.random_state())
        self.position = i + 1

    def stop_online(self, n, arrays):
        """After an online step: tell the schedule if the loop has ended at x_n."""
        done = self.max_steps is not None and n >= self.max_steps
        if not done and self.until is not None:
            done = self.ask_until(n, arrays)
        if done:
            self.actions.finish(n)
            self.stats.steps = n
            self.online_forward = False
            return True
        return False

    def ask_until(self, n, arrays):
        """The predicate on x_n.  Random numbers it draws do not move the steps' stream
        (they would not be drawn again when steps are recomputed)."""
        rng = backend.random_state()
        inputs = tuple(Tensor(a) for a in arrays)
        with no_grad():
            answer = self.until(inputs[0] if self.structure == "tensor" else inputs)
        backend.set_random_state(rng)
        try:
            return bool(answer)
        except (TypeError, ValueError):
            raise LoopError(
                f"tape.loop: until returned {answer!r} after step {n - 1}; it must return a "
                "bool (or a one-element Tensor)"
            ) from None

    def discard(self, action):
        for i in range(action.start, action.stop):
            self.held.release(self.tapes.pop(i).saved)

    def snapshot(self, action):
        self.expect_position(action, action.step)
        key = (action.level, action.slot)
        if key in self.slots:
            self.held.release(self.slots[key][1])
        arrays, rng = self.current
        if self.tape.snapshot_device is not None:  # offload, e.g. GPU -> host memory
            arrays = tuple(backend.to_device(a, self.tape.snapshot_device) for a in arrays)
        for a in arrays:  # a snapshot changed in place would give wrong gradients
            backend.lock(a)
        self.slots[key] = (action.step, arrays, rng)
        self.held.hold(arrays)
        self.stats.peak_snapshots = max(self.stats.peak_snapshots, len(self.slots))

    def restore(self, action):
        step, arrays, rng = self.slots[(action.level, action.slot)]
        if step != action.step:
            raise LoopError(f"schedule asked for {action} but that slot holds x_{step}")
        if self.tape.snapshot_device is not None:
            arrays = tuple(backend.to_device(a, d) for a, d in zip(arrays, self.devices))
        self.current = (arrays, rng)
        self.position = step

    def free(self, action):
        _, arrays, _ = self.slots.pop((action.level, action.slot))
        self.held.release(arrays)

    def reverse(self, action):
        for i in range(action.stop - 1, action.start - 1, -1):
            step_tape = self.tapes.pop(i)
            sweep = StepSweep(self.outer_sweep, step_tape)
            for t, g in zip(step_tape.outputs, self.cotangent):
                if t.node is not None:
                    sweep.add(t.node, g)
            sweep.run()
            self.cotangent = [
                g if g is not None else backend.zeros(t.shape, t.dtype, like=t.data)
                for g, t in zip(sweep.input_grads, step_tape.inputs)
            ]
            self.held.release(step_tape.saved)
        self.position = None

    # -- the two sweeps --
    def mark(self):
        """Note the bytes held now in the timeline (with Tape(trace=True))."""
        if self.stats.timeline is not None:
            self.stats.timeline.append((self.stats.forward_steps, self.held.bytes))

    def carry_out(self, action):
        self.handlers[type(action)](action)
        self.mark()

    def run_forward(self):
        """Carry out the schedule up to EndForward; return the final state's arrays."""
        for action in self.actions:
            if type(action) is schedules.EndForward:
                break
            self.carry_out(action)
        else:
            raise LoopError(f"schedule {self.schedule!r} ended before EndForward")
        if not hasattr(self.actions, "finish"):  # online runs counted it at their end
            self.stats.steps = self.position
        self.stats.peak_bytes = self.held.peak
        return self.current[0]

    def backward(self, cotangent, sweep):
        """Carry out the rest of the schedule, from the output's cotangent back to x_0."""
        self.outer_sweep = sweep
        self.cotangent = [
            g if g is not None else backend.zeros(s, d, like=self.current[0][k])
            for k, (g, s, d) in enumerate(zip(cotangent.parts, self.shapes, self.dtypes))
        ]
        rng_after_forward = backend.random_state()
        try:
            for action in self.actions:
                if type(action) is schedules.End:
                    break
                try:
                    self.carry_out(action)
                except LoopError:
                    raise
                except Exception as error:
                    raise LoopError(
                        f"tape.loop: step {self.evaluating} raised "
                        f"{type(error).__name__} while being recomputed in backward "
                        f"({action}): {error}"
                    ) from error
            for k, node in enumerate(self.x0_nodes):
                if node is not None:
                    sweep.add(node, self.cotangent[k])
        finally:
            backend.set_random_state(rng_after_forward)
            self.release()

    def release(self):
        """Drop every snapshot and step tape (after backward, or on an error)."""
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.held.peak)
        self.slots.clear()
        self.tapes.clear()
        self.held = Holdings()
        self.current = (None, None)
        self.cotangent = self.outer_sweep = None


def _saved_by_step(records, floor, inputs):
    """The arrays a step's records hold of the step's own values (what it made, or
    its input state); parameters are not the loop's to count."""
    input_ids = {id(t.node) for t in inputs}
    saved = []
    for record in records:
        for a, node in zip(record.args, record.parents):
            inside = node is None or (
                node.seq >= floor if type(node) is Record else id(node) in input_ids
            )
            if inside and a is not None and backend.is_array(a):
                saved.append(a)
        if record.ans is not None:
            saved.append(record.ans)
    return saved


def run_loop(tape, step, state, steps=None, until=None, max_steps=None):
    """Run ``state = step(state)`` under ``tape``'s snapshot budget; return the final state.

    ``step`` maps a state (a Tensor, or a tuple of Tensors) to a new state of
    the same structure, shapes and dtypes; it may close over Tensors that
    require gradients (parameters), and gradients reach them and the initial
    state.  Pass ``steps=n`` for a loop of known length (an offline schedule),
    or ``until=predicate`` (checked after each step, with optional
    ``max_steps``) for a loop of unknown length (online checkpointing).
    """
    if not callable(step):
        raise TypeError(f"tape.loop: step must be callable, got {step!r}")
    if (steps is None) == (until is None):
        raise ValueError("tape.loop: pass exactly one of steps= (a known length) or until=")
    if steps is not None:
        steps = require_count("tape.loop", "steps", steps, minimum=0)
    if max_steps is not None:
        if until is None:
            raise ValueError("tape.loop: max_steps= caps a loop run with until=; not with steps=")
        max_steps = require_count("tape.loop", "max_steps", max_steps)
    if until is not None and not callable(until):
        raise TypeError(f"tape.loop: until must be a predicate state -> bool, got {until!r}")
    structure, tensors = _flatten(state)
    if steps == 0:
        return state
    schedule = tape.policy.online() if until is not None else tape.policy.offline(steps)
    if steps is not None and schedule.steps is None:  # an online schedule, on a known length
        max_steps = steps
    x0 = tuple(t.data for t in tensors)
    x0_nodes = tuple(t.node for t in tensors)
    run = LoopRun(tape, step, schedule, x0, x0_nodes, structure, until, max_steps)
    try:
        final = run.run_forward()
    except BaseException:
        run.release()
        raise
    tape.loops.append(run.stats)
    if not STATE.grad_enabled:
        run.release()
        outputs = tuple(Tensor(a) for a in final)
    else:
        # Recorded even when x_0 needs no gradient: a step may use a parameter
        # in steps that were not taped in the forward sweep.
        with tape:
            record = Record(LOOP, run.x0_nodes, (run,), None, None, run.record_shape)
            select = {"width": run.width, "shape": run.record_shape}
            outputs = tuple(
                Tensor._from_record(
                    a, Record(SELECT, (record,), (None,), None, {"index": k, **select}, a.shape)
                )
                if differentiable
                else Tensor(a)  # integer parts (counters) carry no gradient
                for k, (a, differentiable) in enumerate(zip(final, run.differentiable))
            )
    return outputs[0] if structure == "tensor" else outputs


def _flatten(state):
    if isinstance(state, Tensor):
        return "tensor", (state,)
    if isinstance(state, tuple) and state and all(isinstance(t, Tensor) for t in state):
        return len(state), state
    raise TypeError(
        "tape.loop: the state must be a Tensor or a non-empty tuple of Tensors, got "
        f"{type(state).__name__}"
    )
