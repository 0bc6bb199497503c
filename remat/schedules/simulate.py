"""Run a schedule on paper: check every rule and count what it costs.

``simulate`` plays the executor without evaluating anything.  It tracks the
current position, which steps are taped, which slots hold which state and
which step must be reversed next, and refuses the first action that breaks a
rule with a :class:`ScheduleError` naming the action, its index, the rule and
what was expected.  The counts it returns are the schedule's cost model:
``forward_steps`` counts every evaluation of a step, taped or not (a store-all
schedule has ``forward_steps == n``; Revolve reaches ``T(n, s)``).

Two storage levels: memory slots are bounded by ``schedule.snapshots``; a
schedule that has a ``disk_snapshots`` attribute may also use
``level="disk"`` slots, at most that many (``None``: unbounded).  ``writes``
and ``reads`` count Snapshots and Restores by level.
Given a :class:`~.costs.ChainCosts`, it also prices the schedule under the
byte model of :mod:`.costs`: ``time`` and ``peak_bytes`` (see :class:`_Meter`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .actions import (
    DISK,
    MEMORY,
    Action,
    Advance,
    Discard,
    End,
    EndForward,
    Free,
    Invert,
    Restore,
    Reverse,
    Schedule,
    Snapshot,
    Tape,
)
from .arguments import require_count
from .costs import ChainCosts


class ScheduleError(ValueError):
    """A schedule broke a rule of the action vocabulary.

    >>> from remat.schedules import ScheduleError, StoreAll, Tape, End, simulate
    >>> class Skips(StoreAll):
    ...     def __iter__(self):
    ...         return iter([Tape(0, 2), End()])
    >>> try:
    ...     simulate(Skips(2))
    ... except ScheduleError as error:
    ...     print(str(error)[:50])
    action #1 End(): steps 1 down to 0 are not reverse
    """


@dataclass(frozen=True)
class Simulation:
    """What a schedule costs.

    ``forward_steps = advances + taped_steps``; ``peak_snapshots`` is the most
    memory slots in use at once and ``peak_tapes`` the most taped steps alive at
    once.  ``writes`` and ``reads`` map each storage level to its Snapshots and
    Restores (``{"memory": ..., "disk": ...}``); ``peak_disk_snapshots`` is the
    most disk slots in use at once.  ``peak_held`` is the most slots in use
    plus taped steps alive at the same moment (the count that mixed
    checkpointing bounds by ``s + 1``).  ``inversions`` counts the states
    recomputed backwards by ``Invert`` (reversible steps; not step evaluations).

    With costs, ``time`` is the sum of ``forward_time[i]`` over every untaped
    evaluation and ``reverse_time[i]`` over every taped one, and ``peak_bytes``
    the most bytes held at once (states in slots plus tapes held, each step's
    tape counted as ``tape_bytes[i]``); without costs both are None.

    >>> from remat.schedules import Revolve, simulate
    >>> r = simulate(Revolve(steps=10, snapshots=2))
    >>> r.steps, r.forward_steps, r.peak_snapshots, r.peak_tapes
    (10, 30, 2, 1)
    """

    steps: int
    forward_steps: int
    advances: int
    taped_steps: int
    reversed_steps: int
    peak_snapshots: int
    peak_tapes: int
    actions: int
    writes: dict = field(default_factory=lambda: {MEMORY: 0, DISK: 0})
    reads: dict = field(default_factory=lambda: {MEMORY: 0, DISK: 0})
    peak_disk_snapshots: int = 0
    peak_held: int = 0
    peak_bytes: float | None = None
    time: float | None = None
    inversions: int = 0


def simulate(
    schedule: Schedule, steps: int | ChainCosts | None = None, costs: ChainCosts | None = None
) -> Simulation:
    """Validate ``schedule`` action by action and count its cost.

    ``steps`` is required for an online schedule (``schedule.steps is None``):
    the simulated loop ends after that many steps, and ``finish`` is called
    right after the ``Tape`` that produces ``x_steps``.  For other schedules it
    may be given and must then equal ``schedule.steps``.

    ``costs`` (a :class:`~.costs.ChainCosts` of the loop's length) adds
    ``time`` and ``peak_bytes`` to the result; it may also be passed in place
    of ``steps``, as in ``simulate(Optimal(costs, memory), costs)``.

    >>> from remat.schedules import ChainCosts, Revolve, simulate
    >>> costs = ChainCosts.uniform(10, forward_time=1.0, reverse_time=2.0,
    ...                            state_bytes=8, tape_bytes=24)
    >>> r = simulate(Revolve(steps=10, snapshots=2), costs=costs)
    >>> r.forward_steps, r.time, r.peak_bytes
    (30, 40.0, 40)
    """
    if isinstance(steps, ChainCosts):
        if costs is not None:
            raise ValueError("simulate: costs given twice")
        steps, costs = None, steps
    if costs is not None and not isinstance(costs, ChainCosts):
        raise ValueError(f"simulate: costs must be a ChainCosts, got {costs!r}")
    if steps is None and costs is not None and getattr(schedule, "steps", 0) is None:
        steps = costs.steps  # an online schedule's loop is as long as the costs say
    if not all(hasattr(schedule, a) for a in ("__iter__", "steps", "snapshots")):
        raise ValueError(
            f"simulate: {schedule!r} is not a schedule (an iterable of actions with "
            "steps and snapshots attributes, such as Revolve(steps, snapshots))"
        )
    if schedule.steps is None:
        if steps is None:
            raise ValueError(
                f"simulate: steps is required for {schedule!r}, which learns the "
                f"loop length only when the loop ends"
            )
        n = require_count("simulate", "steps", steps)
    else:
        n = schedule.steps
        if steps is not None and steps != n:
            raise ValueError(f"simulate: steps={steps!r} contradicts {schedule!r} (steps={n})")
    if costs is not None and costs.steps != n:
        raise ValueError(f"simulate: the costs describe {costs.steps} steps but the loop has {n}")
    run = _Run(n, schedule.snapshots)
    if hasattr(schedule, "disk_snapshots"):
        run.budgets[DISK] = schedule.disk_snapshots
    meter = _Meter(costs)
    actions = iter(schedule)
    finish = getattr(actions, "finish", None)
    index = -1
    for index, action in enumerate(actions):
        if run.ended:
            run.fail(index, action, "the schedule went on after End()", "End() is last")
        run.apply(index, action)
        meter.apply(action)
        if finish is not None and run.current == n and not run.forward_over:
            finish(n)
            finish = None
    if not run.ended:
        raise ScheduleError(
            f"after action #{index}: the schedule stopped without End() "
            f"({run.next_reverse + 1} steps still to reverse)"
        )
    return Simulation(
        steps=n,
        forward_steps=run.advances + run.taped_steps,
        advances=run.advances,
        taped_steps=run.taped_steps,
        reversed_steps=n,
        peak_snapshots=run.peak_snapshots,
        peak_tapes=run.peak_tapes,
        actions=index + 1,
        writes=dict(run.writes),
        reads=dict(run.reads),
        peak_disk_snapshots=run.peak_disk,
        inversions=run.inversions,
        peak_held=meter.peak_held,
        peak_bytes=None if costs is None else meter.peak_bytes,
        time=None if costs is None else meter.time,
    )


class _Meter:
    """What a valid schedule holds and spends, action by action (after _Run's checks).

    Counts slots plus tapes held at each moment; with costs, also the bytes
    held (``state_bytes`` of each slot's state, ``tape_bytes`` of each taped
    step) and the time spent.  The peaks are taken after every action: within
    one action holdings only grow (Tape) or only shrink (Reverse, Discard).
    """

    def __init__(self, costs: ChainCosts | None) -> None:
        self.costs = costs
        self.slots: dict[tuple[int, str], int] = {}  # (slot, level) -> position
        self.tapes = 0
        self.peak_held = 0
        self.bytes: float = 0  # bytes and time stay 0 without costs (reported as None)
        self.peak_bytes: float = 0
        self.time: float = 0

    def apply(self, action: Any) -> None:  # dispatched on type(action) below
        kind, costs = type(action), self.costs
        if kind is Advance:
            if costs is not None:
                self.time += sum(costs.forward_time[action.start : action.stop])
            return
        if kind is Tape or kind is Reverse or kind is Discard:
            start, stop = action
            grows = kind is Tape
            self.tapes += (stop - start) if grows else start - stop
            if costs is not None:
                held = sum(costs.tape_bytes[start:stop])
                self.bytes += held if grows else -held
                if grows:
                    self.time += sum(costs.reverse_time[start:stop])
        elif kind is Snapshot:
            step, slot, level = action
            old = self.slots.get((slot, level))
            if old is not None and costs is not None:
                self.bytes -= costs.state_bytes[old]
            self.slots[(slot, level)] = step
            if costs is not None:
                self.bytes += costs.state_bytes[step]
        elif kind is Free:
            step = self.slots.pop(tuple(action))
            if costs is not None:
                self.bytes -= costs.state_bytes[step]
        else:
            return
        held = len(self.slots) + self.tapes
        if held > self.peak_held:
            self.peak_held = held
        if self.bytes > self.peak_bytes:
            self.peak_bytes = self.bytes


def _describe(steps: Iterable[int]) -> str:
    steps = sorted(steps)
    if not steps:
        return "none"
    if len(steps) > 6:
        return f"{len(steps)} steps from {steps[0]} to {steps[-1]}"
    return ", ".join(map(str, steps))


class _Run:
    """The executor's state, as far as the rules are concerned."""

    def __init__(self, n: int, budget: int) -> None:
        self.n = n
        self.budget = budget
        self.current: int | None = 0
        self.taped: set[int] = set()
        self.slots: dict[int, int] = {}  # memory slot -> stored position
        self.disk: dict[int, int] = {}  # disk slot -> stored position
        self.budgets: dict[str, int | None] = {MEMORY: budget}  # None: unbounded
        self.writes = {MEMORY: 0, DISK: 0}
        self.reads = {MEMORY: 0, DISK: 0}
        self.peak_disk = 0
        self.inversions = 0
        self.next_reverse = n - 1
        self.forward_over = False
        self.ended = False
        self.advances = 0
        self.taped_steps = 0
        self.peak_snapshots = 0
        self.peak_tapes = 0

    def fail(self, index: int, action: Action, problem: str, rule: str) -> NoReturn:
        raise ScheduleError(f"action #{index} {action!r}: {problem}; {rule}")

    def apply(self, index: int, action: Action) -> None:
        kind = type(action)
        if kind is Advance or kind is Tape:
            self._evaluate(index, action, taped=kind is Tape)
        elif kind is Reverse:
            self._reverse(index, action)
        elif kind is Invert:
            start, stop = action
            self._check_range(index, action, start, stop)
            if self.current != stop:
                self.fail(
                    index,
                    action,
                    f"the current state is {self._where()}",
                    f"Invert recomputes states backwards from the current one, which must be "
                    f"x_{stop}",
                )
            self.current = start
            self.inversions += stop - start
        elif kind is Restore:
            step, slot, level = action
            slots = self._check_slot(index, action, slot, level)
            if slots.get(slot) != step:
                held = slots.get(slot)
                what = "is empty" if held is None else f"holds x_{held}"
                self.fail(index, action, f"slot {slot} {what}", f"Restore needs x_{step}")
            self.current = step
            self.reads[level] += 1
        elif kind is Snapshot:
            step, slot, level = action
            slots = self._check_slot(index, action, slot, level)
            if self.current != step:
                self.fail(
                    index,
                    action,
                    f"the current state is {self._where()}",
                    f"a Snapshot stores the current state, which must be x_{step}",
                )
            slots[slot] = step
            self.writes[level] += 1
            self.peak_snapshots = max(self.peak_snapshots, len(self.slots))
            self.peak_disk = max(self.peak_disk, len(self.disk))
        elif kind is Free:
            slot, level = action
            slots = self._check_slot(index, action, slot, level)
            if slot not in slots:
                self.fail(index, action, f"slot {slot} is empty", "only a slot in use can be freed")
            del slots[slot]
        elif kind is Discard:
            start, stop = action
            self._check_range(index, action, start, stop)
            missing = set(range(start, stop)) - self.taped
            if missing:
                self.fail(
                    index,
                    action,
                    f"steps {_describe(missing)} are not taped",
                    "only taped steps can be discarded",
                )
            self.taped.difference_update(range(start, stop))
        elif kind is EndForward:
            self._end_forward(index, action)
        elif kind is End:
            self._end(index, action)
        else:
            self.fail(
                index,
                action,
                f"unknown action type {kind.__name__}",
                "schedules yield remat.schedules actions",
            )

    def _where(self) -> str:
        return "undefined" if self.current is None else f"x_{self.current}"

    def _check_range(self, index: int, action: Action, start: int, stop: int) -> None:
        if not 0 <= start < stop <= self.n:
            self.fail(
                index,
                action,
                f"the range [{start}, {stop}) is empty or outside the loop",
                f"steps run from 0 to {self.n - 1}",
            )

    def _check_slot(self, index: int, action: Action, slot: int, level: str) -> dict[int, int]:
        """Check ``slot`` against its level's budget; return that level's slots."""
        if level not in self.budgets:
            self.fail(
                index,
                action,
                f"unknown storage level {level!r}",
                f"this schedule's levels are {', '.join(map(repr, self.budgets))} "
                "('disk' needs a disk_snapshots attribute)",
            )
        budget = self.budgets[level]
        if slot < 0 or (budget is not None and slot >= budget):
            self.fail(
                index,
                action,
                f"slot {slot} is outside the budget",
                f"{level} slots run from 0 to {budget - 1} (budget {budget})"
                if budget is not None
                else f"{level} slots are numbered from 0",
            )
        return self.slots if level == MEMORY else self.disk

    def _evaluate(self, index: int, action: Action, taped: bool) -> None:
        start, stop = action
        self._check_range(index, action, start, stop)
        if self.current != start:
            self.fail(
                index,
                action,
                f"the current state is {self._where()}",
                f"evaluation must start at the current state, x_{start}",
            )
        if taped:
            again = self.taped.intersection(range(start, stop))
            if again:
                self.fail(
                    index,
                    action,
                    f"steps {_describe(again)} are already taped",
                    "a step is taped again only after its tape is reversed or discarded",
                )
            self.taped.update(range(start, stop))
            self.taped_steps += stop - start
            self.peak_tapes = max(self.peak_tapes, len(self.taped))
        else:
            self.advances += stop - start
        self.current = stop

    def _reverse(self, index: int, action: Action) -> None:
        start, stop = action
        self._check_range(index, action, start, stop)
        if not self.forward_over:
            self.fail(
                index, action, "the forward sweep is not over", "reversal starts after EndForward()"
            )
        if stop - 1 != self.next_reverse:
            expected = (
                "nothing (all steps are reversed)"
                if self.next_reverse < 0
                else f"step {self.next_reverse}"
            )
            self.fail(
                index,
                action,
                f"it reverses step {stop - 1} first but the next step to reverse is {expected}",
                "steps are reversed once each, n-1 down to 0",
            )
        missing = set(range(start, stop)) - self.taped
        if missing:
            self.fail(
                index,
                action,
                f"steps {_describe(missing)} are not taped (taped steps: {_describe(self.taped)})",
                "a step must be taped before it is reversed",
            )
        self.taped.difference_update(range(start, stop))
        self.next_reverse = start - 1
        self.current = None

    def _end_forward(self, index: int, action: Action) -> None:
        if self.forward_over:
            self.fail(index, action, "the forward sweep is already over", "EndForward() comes once")
        if self.current != self.n:
            self.fail(
                index,
                action,
                f"the current state is {self._where()}",
                f"the forward sweep ends at x_{self.n}",
            )
        if self.n - 1 not in self.taped:
            self.fail(
                index,
                action,
                f"step {self.n - 1} is not taped",
                "the last step must be taped when the forward sweep ends",
            )
        self.forward_over = True

    def _end(self, index: int, action: Action) -> None:
        if self.next_reverse >= 0:
            self.fail(
                index,
                action,
                f"steps {self.next_reverse} down to 0 are not reversed",
                "End() comes after every step is reversed",
            )
        if self.taped or self.slots or self.disk:
            disk = f", disk slots {_describe(self.disk)}" if self.disk else ""
            self.fail(
                index,
                action,
                f"still held: tapes of steps {_describe(self.taped)}, "
                f"slots {_describe(self.slots)}{disk}",
                "release everything before End()",
            )
        self.ended = True
