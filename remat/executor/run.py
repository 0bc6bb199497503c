"""One run of a chain: the schedule's actions carried out, over the forward sweep and then
the chain's backward (:class:`ChainRun`).

The run holds the chain's position (``current``: x_position's arrays and
random-number state), the step tapes it has taped and not reversed, and the
cotangent carried back.  The rest is done by its collaborators, each of its
own module: a :class:`~remat.executor.evaluate.Stepper` evaluates steps and
checks what they return; :class:`~remat.executor.slots.Slots` keeps the
snapshots (memory, another device, disk); a
:class:`~remat.executor.replay.ReplayCheck` checks that recomputations
reproduce the first run; :class:`~remat.alive.Holdings` counts the bytes held
(and refuses more than a budget); the handlers of
:mod:`remat.executor.interpreter` carry out one action each.

:mod:`remat.memory` and :mod:`remat.disk` measure a chain with a run of its
own, driven through a small interface (see "driving a run" below), never
through the run's attributes.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable, ClassVar

from .. import backend, schedules
from ..alive import Holdings
from ..tape import FORWARD_MODE, RECORDED_BACKWARD
from .errors import NAMED_ERRORS, LoopError
from .evaluate import KeepingStepper, Stepper
from .interpreter import HANDLERS
from .replay import ReplayCheck
from .slots import Slots
from .state import Spec, leaves_of
from .stats import LoopStats

# what a step was doing when an error stopped it in backward, by kind of action
BACKWARD_DOING = {schedules.Reverse: "being reversed", schedules.Invert: "being inverted"}


class ChainRun:
    """One execution of a chain: the schedule's actions, carried out.

    What measures a chain (:mod:`remat.measure`, :mod:`remat.memory`,
    :mod:`remat.disk`) drives a run of its own through :meth:`measuring`,
    :attr:`state` and ``position`` (read only), :meth:`move_to`,
    :meth:`carry_out`, :meth:`tape_of`, :meth:`seed`, :meth:`hold_with`,
    :meth:`spec_at`, :attr:`devices` and :meth:`release`; the rest is the run's
    own (``tests/executor/test_executor_interface.py`` holds them to it).
    """

    HANDLERS: ClassVar[dict[Any, Callable[..., Any]]] = HANDLERS  # action type -> handler

    def __init__(self, tape, chain, schedule, x0, x0_nodes, spec0, until, max_steps):
        self.chain = chain
        self.schedule = schedule
        self.actions = iter(schedule)
        self.until = until
        self.max_steps = max_steps
        self.online_forward = hasattr(self.actions, "finish")  # until the end is known
        self.like = (*x0, *chain.xs, None)[0]  # zeros go where the inputs are (a state may be ())
        self.x0_nodes = x0_nodes  # where the initial state's gradient goes
        # the buffers of a scan's xs: the caller's, not counted in a step's tape
        self.xs_buffers = frozenset(id(backend.memory_owner(a)) for a in chain.xs)
        self.check_replay = tape.check_replay  # what a checkpoint inside a step reads
        # x_0, kept when the chain may run again: for rm.jvp, or for a backward that is
        # recorded (rm.hvp, rm.grad of rm.grad), which runs it with tangents (TangentRun)
        keep = FORWARD_MODE.get() or RECORDED_BACKWARD.get()
        self.position = 0
        self.current = (x0, backend.random_state())  # (arrays, rng state) of x_position
        self.start = self.current if keep else None
        self.reversed = False  # whether a backward ran (a second one starts from x_0)
        self.inverted = None  # the position reached by the last Invert, until it moves
        self.tapes = {}  # step index -> StepTape
        self.loops = tape.loops  # the tape's LoopStats: runs again add theirs
        self.byte_limit = getattr(tape, "byte_limit", None)
        # Tape(memory=): a callable giving the schedule of the run with tangents, planned
        # for what that run holds (run_chain's plan_with_tangents); None: this schedule
        self.plan_with_tangents = None
        self.held = Holdings(self.byte_limit, error=LoopError)  # Tape(memory=): its budget
        self.stats = LoopStats(
            schedule=type(schedule).__name__,
            snapshots=schedule.snapshots,
            timeline=[(0, 0)] if tape.trace else None,
        )
        # store-all never evaluates a step twice: nothing to compare; a reversible
        # schedule tapes its steps again from reconstructed states, whose values differ
        # by rounding: its replay check is structural
        check_values = (
            tape.check_replay
            and (keep or not isinstance(schedule, schedules.StoreAll))
            and not getattr(schedule, "reconstructs", False)
        )
        self.replay = ReplayCheck(check_values, tape.check_replay == "full")
        self.steps = self.stepper(tape, chain, spec0)
        devices = tuple(backend.device_of(a) for a in x0)
        # (the tape's snapshot_device, not the tape: it lists this run's record)
        disk_dir = getattr(tape, "disk_dir", None)
        self.slots = Slots(tape.snapshot_device, devices, disk_dir, self.stats)
        self.cotangent = None  # of x_position during the reverse sweep
        self.ys_cotangent = None
        self.xs_grads = None
        self.outer_sweep = None

    def stepper(self, tape, chain, spec0):
        """What evaluates this run's steps (a KeepingRun's also keeps a policy's values)."""
        return Stepper(chain, spec0, self.stats, self.replay, self.held)

    @property
    def nbytes(self):
        """Bytes the chain holds now (snapshots and step tapes): what its record saves."""
        return self.held.bytes

    def holding(self):
        """The buffers this run holds for its backward, and its kept x_0: what a step
        that runs the chain keeps alive (:func:`remat.executor.steps.saved_by`)."""
        arrays = self.held.arrays()
        if self.start is not None:  # its x_0, kept for its runs again
            arrays.extend(self.start[0])
        return arrays

    def spec_at(self, i):
        """The Spec of x_i (a loop's and a scan's states all have x_0's)."""
        return self.steps.spec_at(i)

    def expect_position(self, action, index):
        if self.position != index:
            raise LoopError(
                f"schedule {self.schedule!r} asked for {action} while the current state is "
                f"x_{self.position}: this schedule is invalid (remat.schedules.simulate "
                "names the broken rule)"
            )

    def mark(self):
        """Note the bytes held now in the timeline (with Tape(trace=True))."""
        if self.stats.timeline is not None:
            self.stats.timeline.append((self.stats.forward_steps, self.held.bytes))

    # -- driving a run: the interface remat.memory and remat.disk measure with --
    @classmethod
    def measuring(
        cls, tape, chain, state, steps, holdings, check_values=None, sink=None, xs_grads=None
    ):
        """A run of ``chain`` from ``state`` (a pytree) that stores all of its ``steps``
        steps and is recorded nowhere, for measuring: it counts what it holds with
        ``holdings`` (an object with ``hold(arrays)``, ``release(arrays)``, ``bytes`` and
        ``peak``, such as :class:`~remat.alive.Holdings`); ``check_values`` times the
        replay check's fingerprints as a plan's recomputed steps take them; the
        cotangents a Reverse hands outside the chain go to ``sink`` (a sweep's
        ``add(node, g)``), and those of a scan's ``xs`` into ``xs_grads`` (one buffer
        a leaf of ``xs``, indexed by step)."""
        x0, x0_nodes, tree = leaves_of(state, "the initial state")
        spec0 = Spec.of(tree, x0)
        run = cls(tape, chain, schedules.StoreAll(steps), x0, x0_nodes, spec0, None, None)
        run.hold_with(holdings)
        if check_values is not None:
            run.replay.check_values = check_values
        run.outer_sweep = sink
        run.xs_grads = xs_grads
        return run

    @property
    def state(self):
        """(arrays, random-number state) of x_position: a token for :meth:`move_to`."""
        return self.current

    @property
    def devices(self):
        """The device of each leaf of the state (where a state read back goes)."""
        return self.slots.devices

    def move_to(self, position, state=None):
        """Make x_position current, given as ``state`` (a token of :attr:`state`), or
        the current state (what the last action left) when None."""
        if state is not None:
            self.current = state
        self.position = position

    def carry_out(self, action):
        """Carry out one action of a schedule (any but EndForward and End)."""
        self.HANDLERS[type(action)](self, action)
        self.mark()

    def tape_of(self, i):
        """The StepTape of step i, taped and not yet reversed."""
        return self.tapes[i]

    def seed(self, cotangent, ys_cotangent=None):
        """The cotangent of x_position's leaves (and of the ys, rows by step), for a
        Reverse action to carry back."""
        self.cotangent, self.ys_cotangent = cotangent, ys_cotangent

    def hold_with(self, holdings):
        """Count what the run holds from now on with ``holdings``; the step tapes held
        (counted by the holdings before) are dropped."""
        self.tapes.clear()
        self.held = self.steps.held = holdings

    # -- the two sweeps --
    def run_forward(self, again=False):
        """Carry out the schedule up to EndForward; return x_n's arrays and the ys.

        A run ``again`` (see :meth:`again`) gathers no ys, and its recomputed
        steps are checked against the values of the first run's forward sweep
        (its ``forward``, copied from the first run's)."""
        start = time.perf_counter()
        handlers, end = self.HANDLERS, schedules.EndForward  # (carry_out, inlined)
        traced = self.stats.timeline is not None
        for action in self.actions:
            kind = type(action)
            if kind is end:
                break
            handlers[kind](self, action)
            if traced:
                self.mark()
        else:
            raise LoopError(f"schedule {self.schedule!r} ended before EndForward")
        if not hasattr(self.actions, "finish"):  # online runs counted it at their end
            self.stats.steps = self.position
        if not again:  # the x_n the user holds: the last taped step must return it
            self.replay.first_run.final = self.replay.fingerprint(self.current[0])
        self.stats.peak_bytes = self.held.peak
        self.slots.count_disk()
        ys = ()
        if self.chain.has_ys and not again:
            ys, self.steps.ys = tuple(self.steps.ys), []
        self.stats.seconds += time.perf_counter() - start
        return self.current[0], ys

    def backward(self, cotangent, sweep):
        """Carry out the rest of the schedule, from the outputs' cotangents back to x_0."""
        self.outer_sweep = sweep
        final = self.spec_at(self.stats.steps)
        width = len(final.shapes)
        self.cotangent = [
            g if g is not None else backend.zeros(s, d, like=self.current[0][k])
            for k, (g, s, d) in enumerate(zip(cotangent.parts[:width], final.shapes, final.dtypes))
        ]
        self.ys_cotangent = cotangent.parts[width:]
        self.xs_grads = [None] * len(self.chain.xs)  # made when a cotangent arrives
        self.replay.begin()
        rng_after_forward = backend.random_state()
        start = time.perf_counter()
        handlers, end = self.HANDLERS, schedules.End
        traced = self.stats.timeline is not None
        try:
            for action in self.actions:
                kind = type(action)
                if kind is end:
                    break
                try:
                    handlers[kind](self, action)  # (carry_out, inlined)
                    if traced:
                        self.mark()
                except NAMED_ERRORS:  # named already
                    raise
                except Exception as error:
                    name = self.chain.name(self.steps.evaluating)
                    doing = BACKWARD_DOING.get(type(action), "being recomputed")
                    raise LoopError(
                        f"{name} raised {type(error).__name__} while {doing} in backward "
                        f"({action}): {str(error).removeprefix(name + ': ')}"
                    ) from error
            self.deliver(sweep, self.cotangent, self.xs_grads)
        finally:
            self.stats.seconds += time.perf_counter() - start
            backend.set_random_state(rng_after_forward)
            self.release()

    def deliver(self, sweep, state, xs_grads):
        """Hand the cotangents of x_0's leaves (``state``) and of xs to ``sweep``."""
        for k, node in enumerate(self.x0_nodes):
            if node is not None:
                sweep.add(node, state[k])
        for node, g, xs in zip(self.chain.xs_nodes, xs_grads, self.chain.xs):
            if node is not None:
                sweep.add(node, g if g is not None else backend.zeros(xs.shape, xs.dtype, like=xs))

    def again(self, kind=None):
        """A fresh run of the same schedule from x_0 (kept in ``start``), to reverse
        the chain once more, or (``kind=TangentRun``) to run it with tangents.
        Its counts are listed on the tape after the first run's."""
        run = copy.copy(self)
        run.__class__ = kind or ChainRun
        # under a byte budget the run with tangents has a plan of its own, for its states
        # with their tangents and its tapes with theirs: it stays within the budget too
        budgeted = kind is not None and self.plan_with_tangents is not None
        if budgeted:
            run.schedule = self.plan_with_tangents()
        run.actions = iter(run.schedule)
        run.online_forward = hasattr(run.actions, "finish")
        run.until, run.max_steps = None, self.stats.steps  # the length is known now
        run.current, run.position = self.start, 0
        run.tapes = {}
        run.inverted = None
        run.held = Holdings(None if kind and not budgeted else self.byte_limit, error=LoopError)
        if budgeted:
            run.held.why = (
                f"{self.chain.owner}'s run with tangents (rm.hvp, rm.grad of rm.grad) was "
                "planned with each step's tape doubled, and a step that runs an rm.checkpoint "
                "or a chain of its own holds more (the tangents of all they output), as may a "
                "step whose records depend on the values; give more memory"
            )
        run.cotangent = run.ys_cotangent = run.xs_grads = run.outer_sweep = None
        what = "with tangents" if kind else "again"
        run.stats = LoopStats(
            schedule=f"{type(run.schedule).__name__} {what}",
            snapshots=run.schedule.snapshots,
            timeline=[(0, 0)] if self.stats.timeline is not None else None,
        )
        run.replay = self.replay.again()  # its own junctions; its first run is this one's
        # a policy's kept values went with the first backward: its steps recompute them
        run.steps = self.steps.again(run.stats, run.replay, run.held)
        slots = self.slots  # its disk slots are files of its own (the first run's are gone)
        run.slots = Slots(slots.device, slots.devices, slots.disk_dir, run.stats)
        self.loops.append(run.stats)
        return run

    def release(self):
        """Drop every snapshot and step tape (after backward, or on an error)."""
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.held.peak)
        self.slots.release()
        self.tapes.clear()
        self.steps.release()
        self.replay.release(keep_first=self.start is not None)
        self.held = self.steps.held = Holdings()
        self.current = (None, None)
        self.cotangent = self.outer_sweep = self.ys_cotangent = self.xs_grads = None


class KeepingRun(ChainRun):
    """A ChainRun under ``rm.Tape(policy=)`` (:mod:`remat.selective`): its steps keep
    what the policy chooses on their first run and reuse it on later runs
    (:class:`~remat.executor.evaluate.KeepingStepper`)."""

    def stepper(self, tape, chain, spec0):
        """A KeepingStepper, with the tape's policy."""
        return KeepingStepper(chain, spec0, self.stats, self.replay, self.held, tape.recompute)
