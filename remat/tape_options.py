"""The options of ``rm.Tape`` checked: what its chains are reversed with, and its disk slots.

:func:`reversal_of` reads ``snapshots=``, ``schedule=``, ``memory=`` and
``disk_snapshots=`` together: :func:`resolve_policy` turns ``snapshots=`` and
``schedule=`` into a :class:`Reversal` (a schedule name or object and a slot
budget), :func:`disk_policy` and :func:`check_disk_dir` check ``disk_snapshots=``
and ``disk_dir=``, and ``memory=`` is read by :mod:`remat.memory`; each refusal
says what is allowed.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from . import memory as _memory
from . import schedules
from .schedules.arguments import require_count
from .storage import DiskError

SCHEDULE_NAMES = schedules.SCHEDULE_NAMES


@dataclass(frozen=True)
class Reversal:
    """What a Tape's chains are reversed with: a schedule name or object, and a budget."""

    schedule: object  # one of SCHEDULE_NAMES, or a schedule object
    snapshots: int | None

    def offline(self, steps, form="tape.loop"):
        if not isinstance(self.schedule, str):  # used as given; an online one ends at steps
            if self.schedule.steps not in (None, steps):
                raise ValueError(
                    f"{form}(steps={steps}): the tape's schedule {self.schedule!r} is for "
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


NEEDS_A_BUDGET = ("revolve", "online", "periodic", "mixed")


def resolve_policy(snapshots, schedule):
    """The Reversal for ``rm.Tape(snapshots, schedule)``, with clear errors."""
    if snapshots is not None:
        snapshots = require_count("Tape", "snapshots", snapshots)
    if schedule is None:
        return Reversal("revolve" if snapshots is not None else "store_all", snapshots)
    if isinstance(schedule, str):
        if schedule == "optimal":  # planned from measured costs: only under a byte budget
            raise ValueError(
                "Tape: schedule='optimal' plans from the measured costs of each step, so it "
                "needs a byte budget: pass memory= (e.g. rm.Tape(memory='64 MiB', "
                "schedule='optimal'), or memory= alone, which plans optimally). For a slot "
                "budget, snapshots=s alone gives revolve, optimal in step evaluations when "
                "all steps cost alike"
            )
        if schedule not in SCHEDULE_NAMES:
            raise ValueError(
                f"Tape: unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULE_NAMES)} "
                "or pass a schedule object from remat.schedules"
            )
        if schedule in NEEDS_A_BUDGET and snapshots is None:
            raise ValueError(f"Tape: schedule={schedule!r} needs a budget: pass snapshots=")
        return Reversal(schedule, snapshots)  # store_all and sqrt size their own memory
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
    return Reversal(schedule, schedule.snapshots)


def reversal_of(snapshots, schedule, memory, disk_snapshots):
    """``(Reversal, byte_limit, memory_schedule, disk_snapshots)`` of a Tape's options:
    how its chains are reversed, the budget in bytes and the schedule it plans with
    (None without ``memory=``), and its disk slots (None without ``disk_snapshots=``)."""
    if disk_snapshots is not None:
        d, policy = disk_policy(snapshots, schedule, memory, disk_snapshots)
        return policy, None, None, d
    if memory is None:
        return resolve_policy(snapshots, schedule), None, None, None
    byte_limit = _memory.parse_bytes(memory)
    memory_schedule = _memory.check_schedule(memory, snapshots, schedule)
    if snapshots is not None:
        snapshots = require_count("Tape", "snapshots", snapshots)
    return Reversal(memory_schedule, snapshots), byte_limit, memory_schedule, None


def disk_policy(snapshots, schedule, memory, disk_snapshots):
    """``(d, Reversal)`` for ``rm.Tape(snapshots=s, disk_snapshots=d)``, with clear errors."""
    d = require_count("Tape", "disk_snapshots", disk_snapshots, minimum=0)
    if memory is not None:
        raise ValueError(
            "Tape: disk_snapshots= plans with slots (snapshots= in memory, disk_snapshots= on "
            "disk), memory= with bytes; give one or the other"
        )
    if schedule is not None:
        raise ValueError(
            f"Tape: disk_snapshots= runs the two-level schedule (TwoLevel), so schedule="
            f"{schedule!r} cannot be used with it; pass a schedule object such as "
            "TwoLevel(...) or DiskRevolve(...) as schedule= alone (with disk_dir=) instead"
        )
    if snapshots is None:
        raise ValueError(
            "Tape: disk_snapshots= needs snapshots= too, the memory slots (0 for none)"
        )
    s = require_count("Tape", "snapshots", snapshots, minimum=0)
    if s + d == 0:
        raise ValueError("Tape: snapshots + disk_snapshots must be at least 1")
    return d, Reversal("two_level", s)


def check_disk_dir(disk_dir, disk_snapshots, schedule):
    """``disk_dir`` as given, checked: an existing folder, for a tape that writes to disk."""
    if disk_dir is None:
        return None
    if disk_snapshots is None and getattr(schedule, "disk_snapshots", 0) == 0:
        raise ValueError(
            f"Tape: disk_dir={disk_dir!r} is where disk snapshots go, but this tape writes "
            "none: pass disk_snapshots= (or a schedule object that uses the disk)"
        )
    try:
        path = os.fsdecode(disk_dir)  # bytes too: tempfile takes a str folder with a str prefix
    except TypeError:
        raise TypeError(
            "Tape: disk_dir must be a folder's path (a str, bytes or os.PathLike), got "
            f"{disk_dir!r}"
        ) from None
    if not os.path.isdir(path):
        raise ValueError(
            f"Tape: disk_dir={path!r} is not an existing folder; disk snapshots go into a "
            "fresh folder made inside it. Create it first, or leave disk_dir=None for the "
            "system's temporary folder"
        )
    if not os.access(path, os.W_OK | os.X_OK):
        raise DiskError(
            errno.EACCES,
            f"Tape: disk_dir={path!r} is not writable: disk snapshots go into a fresh folder "
            "made inside it. Give a folder you may write in, or leave disk_dir=None for the "
            "system's temporary folder",
            path,
        )
    return path
