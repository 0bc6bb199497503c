"""What a chain did, counted as it ran: :class:`LoopStats` (``tape.stats``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..units import format_bytes


@dataclass(slots=True)
class LoopStats:
    """What one chain (or all chains of a tape, added up) did, counted as it ran.

    ``snapshots`` is the schedule's slot budget; ``timeline`` lists
    (step evaluations so far, bytes held) after every step and action when the
    tape was made with ``trace=True`` (else it is None; ``tape.stats`` has it
    for a tape of one chain, ``tape.loops[i]`` for each of several).  ``seconds`` is the
    wall time of the chain's forward and backward sweeps (the schedule's
    actions).  Under ``rm.Tape(memory=...)`` (:mod:`remat.memory`):
    ``memory`` is the byte budget, ``plan`` says whether the plan was
    "measured" for this chain or "reused" from an earlier one, and
    ``predicted_seconds`` is the plan's time under the measured costs (with a
    measured overhead per action that runs steps).

    Disk snapshots (:mod:`remat.storage`): ``disk_writes`` and ``disk_reads``
    count the files written and read back, ``disk_bytes_written`` and
    ``disk_bytes_read`` their data bytes, ``peak_disk_bytes`` the most bytes
    on disk at once and ``disk_seconds`` the time spent writing and reading.
    Reversible loops (``tape.loop(..., inverse=)``): ``reconstruction_error``
    is the largest difference seen between a state recomputed by the inverse
    and the exact one stored (relative to the largest magnitude of that
    state; None when no state was compared).

    >>> import remat as rm
    >>> with rm.Tape(snapshots=4) as tape:
    ...     h = tape.loop(lambda h: h * 0.9, rm.ones(8, requires_grad=True), steps=100)
    >>> h.sum().backward()
    >>> s = tape.stats
    >>> s.steps, s.forward_steps, s.recomputed_steps, s.peak_snapshots, s.schedule
    (100, 474, 374, 4, 'Revolve')
    """

    steps: int = 0
    forward_steps: int = 0
    peak_snapshots: int = 0
    peak_bytes: int = 0
    schedule: str = ""
    snapshots: int = 0
    timeline: list | None = None
    seconds: float = 0.0
    memory: int | None = None
    plan: str = ""
    predicted_seconds: float | None = None
    disk_writes: int = 0
    disk_reads: int = 0
    disk_bytes_written: int = 0
    disk_bytes_read: int = 0
    peak_disk_bytes: int = 0
    disk_seconds: float = 0.0
    reconstruction_error: float | None = None

    @property
    def recomputed_steps(self) -> int:
        """Step evaluations beyond the first of each step: ``forward_steps - steps``."""
        return self.forward_steps - self.steps

    @classmethod
    def combine(cls, stats: Iterable[LoopStats]) -> LoopStats:
        """The counts of several chains added up (peaks: the largest), as ``tape.stats``.
        A timeline is kept only when there is one chain; several chains keep theirs
        in ``tape.loops``."""
        stats = list(stats)
        return cls(
            steps=sum(s.steps for s in stats),
            forward_steps=sum(s.forward_steps for s in stats),
            peak_snapshots=max((s.peak_snapshots for s in stats), default=0),
            peak_bytes=max((s.peak_bytes for s in stats), default=0),
            schedule=", ".join(s.schedule for s in stats),
            snapshots=max((s.snapshots for s in stats), default=0),
            timeline=stats[0].timeline if len(stats) == 1 else None,
            seconds=sum(s.seconds for s in stats),
            memory=max((s.memory for s in stats if s.memory is not None), default=None),
            plan=", ".join(s.plan for s in stats if s.plan),
            predicted_seconds=(
                sum(s.predicted_seconds or 0.0 for s in stats)
                if stats and all(s.predicted_seconds is not None for s in stats)
                else None
            ),
            disk_writes=sum(s.disk_writes for s in stats),
            disk_reads=sum(s.disk_reads for s in stats),
            disk_bytes_written=sum(s.disk_bytes_written for s in stats),
            disk_bytes_read=sum(s.disk_bytes_read for s in stats),
            peak_disk_bytes=max((s.peak_disk_bytes for s in stats), default=0),
            disk_seconds=sum(s.disk_seconds for s in stats),
            reconstruction_error=max(
                (s.reconstruction_error for s in stats if s.reconstruction_error is not None),
                default=None,
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        """The counts as a plain dict (``recomputed_steps`` included), ready for
        ``json.dump``: what ``remat compare --format json`` prints of each tape.

        >>> import remat as rm
        >>> with rm.Tape(snapshots=4) as tape:
        ...     h = tape.loop(lambda h: h * 0.9, rm.ones(8, requires_grad=True), steps=10)
        >>> h.sum().backward()
        >>> d = tape.stats.to_dict()
        >>> d["steps"], d["recomputed_steps"], d["schedule"]
        (10, 14, 'Revolve')
        """
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if fields["timeline"] is not None:
            fields["timeline"] = [list(point) for point in fields["timeline"]]
        return dict(fields, recomputed_steps=self.recomputed_steps)

    def __str__(self):
        factor = self.forward_steps / self.steps if self.steps else 0.0
        text = (
            f"{self.schedule or 'no loop'}: {self.steps} steps, {self.forward_steps} step "
            f"evaluations ({self.recomputed_steps} recomputed, {factor:.2f}x), "
            f"peak {self.peak_snapshots} snapshots, peak {format_bytes(self.peak_bytes)} held"
        )
        if self.memory is not None:
            text += f" of a {format_bytes(self.memory)} budget (plan {self.plan})"
        if self.predicted_seconds is not None:
            text += f"; {self.seconds:.4f} s measured, {self.predicted_seconds:.4f} s predicted"
        if self.disk_writes:
            text += (
                f"; disk: {self.disk_writes} writes ({format_bytes(self.disk_bytes_written)}), "
                f"{self.disk_reads} reads ({format_bytes(self.disk_bytes_read)}), peak "
                f"{format_bytes(self.peak_disk_bytes)} on disk, {self.disk_seconds:.4f} s"
            )
        if self.reconstruction_error is not None:
            text += f"; reconstruction error {self.reconstruction_error:.3g}"
        return text
