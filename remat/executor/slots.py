"""Where a chain's snapshots live: memory, another device's memory, or disk, behind one
interface (:class:`Slots`), for the schedule's Snapshot, Restore and Free actions.

A slot is named by the action's ``(level, slot)``.  In memory (``level`` 0) it
holds the state's arrays, moved to ``rm.Tape(snapshot_device=)`` if given
(offload: GPU to host, say) and back to each leaf's device on Restore; the
bytes count in the run's holdings (:mod:`remat.alive`).  A snapshot changed in
place after it was taken would give wrong gradients: what the user could write
is fingerprinted (:mod:`remat.guard`) and checked on Restore.  On disk
(``level`` :data:`remat.schedules.DISK`) it is a file of the run's
:class:`~remat.storage.DiskStore`, made on the first write; the slot keeps the
random-number state.  Either way a slot keeps the state's rng state, so a
recomputation from it draws the numbers the first run drew.
"""

from __future__ import annotations

from .. import backend, guard, schedules
from ..storage import DiskStore
from ..tape import next_sequence
from .errors import LoopError


class Slots:
    """One run's snapshots: ``(level, slot)`` -> (step, arrays or None on disk, rng
    state, guard checks, sequence number when taken).  Counts the most held in
    memory at once, and the disk's traffic, in ``stats``."""

    __slots__ = ("held", "device", "devices", "disk_dir", "disk", "stats")

    def __init__(self, device, devices, disk_dir, stats):
        self.held = {}
        self.device = device  # rm.Tape(snapshot_device=): where memory slots keep states
        self.devices = devices  # each state leaf's own device, for Restore
        self.disk_dir = disk_dir
        self.disk = None  # the DiskStore of level="disk" slots, made on the first write
        self.stats = stats

    def __len__(self):
        return len(self.held)

    def snapshot(self, action, state, holdings):
        """Keep ``state`` ((arrays, rng state) of x_step) in the action's slot."""
        key = (action.level, action.slot)
        arrays, rng = state
        if action.level == schedules.DISK:  # a file; the slot keeps the rng state
            if self.disk is None:
                self.disk = DiskStore(self.disk_dir)
            self.held.pop(key, None)
            self.disk.write(action.slot, action.step, arrays)
            self.held[key] = (action.step, None, rng, None, None)
            return
        if key in self.held:
            holdings.release(self.held[key][1])
        if self.device is not None:  # offload, e.g. GPU -> host memory
            arrays = tuple(backend.to_device(a, self.device) for a in arrays)
        # A snapshot changed in place would give wrong gradients: fingerprint
        # what the user could write (remat.guard), and check at Restore.
        found = guard.checks(arrays) if guard.WATCHED else None
        self.held[key] = (action.step, arrays, rng, found, next_sequence())
        holdings.hold(arrays)
        in_memory = len(self.held) - (len(self.disk.files) if self.disk is not None else 0)
        self.stats.peak_snapshots = max(self.stats.peak_snapshots, in_memory)

    def restore(self, action, compare=None):
        """(arrays, rng state) of the state in the action's slot, on its leaves' devices.
        ``compare(step, arrays, rng)`` first sees a memory slot's state as it was kept
        (a reversible loop's check of the state its inverse rebuilt)."""
        step, arrays, rng, found, seq = self.held[(action.level, action.slot)]
        if step != action.step:
            raise LoopError(f"schedule asked for {action} but that slot holds x_{step}")
        if arrays is None:  # on disk
            return self.disk.read(action.slot, step, self.devices), rng
        if compare is not None:
            compare(step, arrays, rng)
        k = guard.changed(arrays, found, seq)
        if k is not None:
            raise LoopError(
                f"tape.loop: the snapshot of x_{step} (state leaf {k}, shape "
                f"{arrays[k].shape}) was changed in place after it was taken (through .data, "
                "np.asarray(t) or a view of them inside a step), so recomputing from it would "
                "give wrong gradients. A step must not write into its input state: compute a "
                "new state out of place."
            )
        if self.device is not None:
            arrays = tuple(backend.to_device(a, d) for a, d in zip(arrays, self.devices))
        return arrays, rng

    def free(self, action, holdings):
        """Empty the action's slot."""
        arrays = self.held.pop((action.level, action.slot))[1]
        if arrays is None:
            self.disk.drop(action.slot)
        else:
            holdings.release(arrays)

    def count_disk(self):
        """Copy the disk store's counts into the stats (if anything went to disk)."""
        disk, stats = self.disk, self.stats
        if disk is not None:
            stats.disk_writes, stats.disk_reads = disk.writes, disk.reads
            stats.disk_bytes_written, stats.disk_bytes_read = disk.bytes_written, disk.bytes_read
            stats.peak_disk_bytes, stats.disk_seconds = disk.peak_bytes, disk.seconds

    def release(self):
        """Empty every slot, and remove the disk store's files."""
        self.count_disk()
        if self.disk is not None:
            self.disk.close()
        self.held.clear()
