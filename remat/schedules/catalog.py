"""Schedules by name, for APIs that take ``schedule="revolve"`` and a budget.

``snapshots`` is the slot budget.  ``"periodic"`` turns it into the shortest
interval that fits, ``ceil(steps / (snapshots + 1))`` (it stores one state
per segment but the last).  Arguments a schedule does not use must be left
out, so that a budget is never silently ignored.
"""

from __future__ import annotations

from .arguments import require_count
from .mixed import Mixed
from .offline import Periodic, Sqrt, StoreAll
from .online import Online
from .revolve import Revolve

SCHEDULE_NAMES = ("store_all", "sqrt", "periodic", "revolve", "online", "mixed")


def make_schedule(
    name: str, steps: int | None = None, snapshots: int | None = None
) -> StoreAll | Sqrt | Periodic | Revolve | Mixed | Online:
    """Build the schedule called ``name`` (one of :data:`SCHEDULE_NAMES`).

    >>> from remat.schedules import make_schedule
    >>> make_schedule('revolve', steps=100, snapshots=5)
    Revolve(steps=100, snapshots=5)
    >>> make_schedule('online', snapshots=4)
    Online(snapshots=4)
    """
    uses = {
        "store_all": ("steps",),
        "sqrt": ("steps",),
        "periodic": ("steps", "snapshots"),
        "revolve": ("steps", "snapshots"),
        "online": ("snapshots",),
        "mixed": ("steps", "snapshots"),
    }.get(name)
    if uses is None:
        raise ValueError(
            f"make_schedule: unknown schedule {name!r}; choose one of "
            f"{', '.join(map(repr, SCHEDULE_NAMES))}"
        )
    given = {"steps": steps, "snapshots": snapshots}
    for argument, value in given.items():
        if argument in uses and value is None:
            raise ValueError(f"make_schedule: {name!r} needs {argument}")
        if argument not in uses and value is not None:
            raise ValueError(
                f"make_schedule: {name!r} takes no {argument} (got {value!r})"
                + ("; it learns the loop length at the end" if name == "online" else "")
            )
    if name == "store_all":
        return StoreAll(steps)
    if name == "sqrt":
        assert steps is not None  # checked above, as for the other branches
        return Sqrt(steps)
    if name == "periodic":
        n = require_count("make_schedule", "steps", steps)
        s = require_count("make_schedule", "snapshots", snapshots)
        return Periodic(n, -(-n // (s + 1)))
    assert snapshots is not None
    if name == "online":
        return Online(snapshots)
    assert steps is not None
    if name == "revolve":
        return Revolve(steps, snapshots)
    return Mixed(steps, snapshots)
