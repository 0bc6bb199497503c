"""The action vocabulary that every schedule speaks.

A loop of ``n`` steps is a chain of states ``x_0 -> x_1 -> ... -> x_n``: step
``i`` maps ``x_i`` to ``x_{i+1}``.  A schedule is a sequence of actions that an
executor carries out one by one; at any moment there is a *current state* (a
position on the chain, or undefined right after a reversal).

Evaluation and reversal:

* ``Advance(start, stop)``  evaluate steps ``start .. stop-1`` without taping.
* ``Tape(start, stop)``     evaluate them while recording their tapes.
* ``Reverse(start, stop)``  run the taped steps backwards, ``stop-1`` down to
  ``start``; reversal visits ``n-1, n-2, ..., 0`` strictly in that order.
* ``Discard(start, stop)``  drop tapes without reversing them.
* ``Invert(start, stop)``   recompute states backwards with the step's inverse
  (reversible steps): current goes ``x_stop -> x_start``, untaped.

Storage (``slot`` is an index below the schedule's budget; ``level`` says
where the slot lives: :data:`MEMORY`, the default, or :data:`DISK`, whose
slots are counted by the schedule's ``disk_snapshots``):

* ``Snapshot(step, slot)``  store the current state, which must be ``x_step``.
* ``Restore(step, slot)``   make the stored ``x_step`` current; the slot keeps it.
* ``Free(slot)``            release the slot.

Markers: ``EndForward()`` separates the user's forward pass from the backward
pass, ``End()`` closes the schedule.

The cost of a schedule is counted in step evaluations: ``forward_steps`` is
the sum of ``stop - start`` over every ``Advance`` and ``Tape``.

Actions are tuples (cheap to build, hashable, usable in ``match`` statements),
but two actions are equal only when they have the same type, so
``Advance(0, 1) != Tape(0, 1)``.  Hot loops may build them with
``tuple.__new__(Advance, (start, stop))``, which skips the Python-level
``__new__``.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import Protocol

MEMORY = "memory"
"""Storage level of a slot held in the memory of the running process."""

DISK = "disk"
"""Storage level of a slot held in a file: writing and reading it costs time."""


class Schedule(Protocol):
    """What every schedule is, for type checkers: an iterable of actions that says
    how many steps it reverses (None: learned when the loop ends, as
    :class:`~.online.Online`) with how many slots.  The executor, ``rm.Tape(schedule=)``
    and :func:`~.simulate.simulate` take any object of this shape.

    >>> from remat.schedules import Revolve, Schedule, Tape, End, EndForward, Reverse
    >>> class OneTape:  # a schedule of one's own: tape everything (store-all)
    ...     snapshots = 0
    ...     def __init__(self, steps: int) -> None:
    ...         self.steps = steps
    ...     def __iter__(self):
    ...         n = self.steps
    ...         return iter([Tape(0, n), EndForward(), Reverse(0, n), End()])
    >>> def evaluations(schedule: Schedule) -> int:
    ...     return sum(a.stop - a.start for a in schedule if isinstance(a, Tape))
    >>> evaluations(OneTape(10)), evaluations(Revolve(10, 2))
    (10, 10)
    """

    @property
    def steps(self) -> int | None: ...

    @property
    def snapshots(self) -> int: ...

    def __iter__(self) -> Iterator[Action]: ...


def _field(index: int, doc: str) -> property:
    return property(itemgetter(index), doc=doc)


class Action(tuple):
    """Base class: an immutable record whose fields are named in ``_fields``.

    >>> from remat.schedules import Action, Advance
    >>> isinstance(Advance(0, 3), Action), Advance(0, 3)._fields
    (True, ('start', 'stop'))
    """

    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        values = tuple(self)
        if self._fields[-1:] == ("level",) and values[-1] == MEMORY:
            values = values[:-1]  # the default level is left implicit
        return f"{type(self).__name__}({', '.join(map(repr, values))})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(self)))

    def __getnewargs__(self) -> tuple:
        return tuple(self)


class Advance(Action):
    """Evaluate steps ``start .. stop-1`` untaped; current goes ``start -> stop``.

    >>> from remat.schedules import Advance
    >>> action = Advance(0, 3)
    >>> action.start, action.stop, tuple(action)
    (0, 3, (0, 3))
    """

    __slots__ = ()
    _fields = __match_args__ = ("start", "stop")
    start = _field(0, "first step evaluated (the current position before)")
    stop = _field(1, "position reached (one past the last step evaluated)")

    def __new__(cls, start: int, stop: int) -> Advance:
        return tuple.__new__(cls, (start, stop))


class Tape(Action):
    """Evaluate steps ``start .. stop-1`` and keep their tapes for reversal.

    >>> from remat.schedules import StoreAll
    >>> list(StoreAll(3))[0]
    Tape(0, 3)
    """

    __slots__ = ()
    _fields = __match_args__ = ("start", "stop")
    start = _field(0, "first step taped (the current position before)")
    stop = _field(1, "position reached (one past the last step taped)")

    def __new__(cls, start: int, stop: int) -> Tape:
        return tuple.__new__(cls, (start, stop))


class Reverse(Action):
    """Reverse the taped steps ``stop-1`` down to ``start`` and release their tapes.

    >>> from remat.schedules import StoreAll
    >>> list(StoreAll(3))[2]
    Reverse(0, 3)
    """

    __slots__ = ()
    _fields = __match_args__ = ("start", "stop")
    start = _field(0, "last step reversed (the lowest)")
    stop = _field(1, "one past the first step reversed")

    def __new__(cls, start: int, stop: int) -> Reverse:
        return tuple.__new__(cls, (start, stop))


class Discard(Action):
    """Drop the tapes of steps ``start .. stop-1`` without reversing them.

    >>> from remat.schedules import Discard
    >>> Discard(4, 6).stop
    6
    """

    __slots__ = ()
    _fields = __match_args__ = ("start", "stop")
    start = _field(0, "first step whose tape is dropped")
    stop = _field(1, "one past the last step whose tape is dropped")

    def __new__(cls, start: int, stop: int) -> Discard:
        return tuple.__new__(cls, (start, stop))


class Invert(Action):
    """Recompute ``x_{stop-1}, ..., x_start`` from the current ``x_stop`` with the inverse.

    >>> from remat.schedules import Invert
    >>> Invert(3, 5), Invert(3, 5).start, Invert(3, 5).stop
    (Invert(3, 5), 3, 5)
    """

    __slots__ = ()
    _fields = __match_args__ = ("start", "stop")
    start = _field(0, "position reached (the lowest state recomputed)")
    stop = _field(1, "the current position before")

    def __new__(cls, start: int, stop: int) -> Invert:
        return tuple.__new__(cls, (start, stop))


class Snapshot(Action):
    """Store the current state, ``x_step``, in ``slot`` (replacing its content).

    >>> from remat.schedules import DISK, Snapshot
    >>> Snapshot(0, 1), Snapshot(5, 0, DISK).level
    (Snapshot(0, 1), 'disk')
    """

    __slots__ = ()
    _fields = __match_args__ = ("step", "slot", "level")
    step = _field(0, "position of the stored state")
    slot = _field(1, "slot index, 0 <= slot < budget")
    level = _field(2, "storage level of the slot")

    def __new__(cls, step: int, slot: int, level: str = MEMORY) -> Snapshot:
        return tuple.__new__(cls, (step, slot, level))


class Restore(Action):
    """Make the state stored in ``slot`` (which is ``x_step``) current.

    >>> from remat.schedules import Restore
    >>> Restore(step=1, slot=1)
    Restore(1, 1)
    """

    __slots__ = ()
    _fields = __match_args__ = ("step", "slot", "level")
    step = _field(0, "position of the restored state")
    slot = _field(1, "slot index, 0 <= slot < budget")
    level = _field(2, "storage level of the slot")

    def __new__(cls, step: int, slot: int, level: str = MEMORY) -> Restore:
        return tuple.__new__(cls, (step, slot, level))


class Free(Action):
    """Release ``slot``; schedules do it right after the slot's last use.

    >>> from remat.schedules import Free, Revolve
    >>> [a for a in Revolve(4, 2) if isinstance(a, Free)]
    [Free(1), Free(0)]
    """

    __slots__ = ()
    _fields = __match_args__ = ("slot", "level")
    slot = _field(0, "slot index, 0 <= slot < budget")
    level = _field(1, "storage level of the slot")

    def __new__(cls, slot: int, level: str = MEMORY) -> Free:
        return tuple.__new__(cls, (slot, level))


class EndForward(Action):
    """The forward sweep is over: current is ``x_n`` and step ``n-1`` is taped.

    >>> from remat.schedules import EndForward, StoreAll
    >>> EndForward() in list(StoreAll(2))
    True
    """

    __slots__ = ()

    def __new__(cls) -> EndForward:
        return tuple.__new__(cls, ())


class End(Action):
    """Every step has been reversed; tapes and slots are all released.

    >>> from remat.schedules import End, Revolve
    >>> list(Revolve(4, 2))[-1] == End()
    True
    """

    __slots__ = ()

    def __new__(cls) -> End:
        return tuple.__new__(cls, ())
