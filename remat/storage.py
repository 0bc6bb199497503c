"""Disk snapshots: the files behind a schedule's ``level="disk"`` slots.

A chain run whose schedule writes to disk (:class:`~remat.schedules.TwoLevel`,
:class:`~remat.schedules.DiskRevolve`) gets one :class:`DiskStore`: a fresh
folder (``tempfile.mkdtemp``) inside the tape's ``disk_dir``, or inside the
system's temporary folder when that is None, made on the first write.  Each
disk slot is one file in it, holding the state's leaf arrays one after the
other in NumPy's ``.npy`` format (:func:`remat.backend.save_arrays`), read
back bit for bit.  The random-number state stays in memory (a few hundred
bytes).

The folder goes away with everything in it when the run is released (after
its backward, or when anything fails), when the store is garbage collected,
and at the latest when the process exits (``weakref.finalize``).  A file that
cannot be written (a full disk, a folder that is not writable or has gone)
raises :class:`DiskError`, naming the folder and the state; so does one that
the file system cut short without an error (each file's size is checked
against what was written once it is closed).  The half-written file is
removed first, and the executor then releases the run, which removes
the rest.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
import weakref

from . import backend


class DiskError(OSError):
    """A disk snapshot could not be written or read back (its folder is named).

    A write is verified by the file's size after it is closed: one the file
    system cut short raises this too, saying how many bytes are missing.  An
    OSError (not a :class:`~remat.LoopError`): the cause is the file system's
    (a full disk, a folder gone or not writable), not the chain's, so it carries
    ``errno`` and ``filename`` (the folder) and ``except OSError`` catches it.

    >>> import errno, remat as rm
    >>> error = rm.DiskError(errno.ENOSPC, "remat: cannot write ... the disk is full", "/scratch")
    >>> isinstance(error, OSError), error.errno == errno.ENOSPC, error.filename
    (True, True, '/scratch')
    """


def _remove_folder(folder):
    shutil.rmtree(folder, ignore_errors=True)


def _why(error):
    if error.errno == errno.ENOSPC:
        return "the disk is full"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the folder is not writable"
    if error.errno == errno.ENOENT:
        return "the folder does not exist (any more)"
    return f"{type(error).__name__}: {error.strerror or error}"


class DiskStore:
    """The disk slots of one chain run, one file each, counted as they are used."""

    def __init__(self, parent=None):
        self.parent = parent  # the tape's disk_dir, or None: the system's temporary folder
        self.folder = None  # made on the first write
        self.files = {}  # slot -> (path, data bytes)
        self.writes = self.reads = 0
        self.bytes_written = self.bytes_read = 0
        self.bytes = self.peak_bytes = 0  # data bytes in the files now, and at most
        self.seconds = 0.0  # spent writing and reading
        self._finalizer = None

    def where(self):
        return self.folder or self.parent or tempfile.gettempdir()

    def _open(self, step):
        try:
            self.folder = tempfile.mkdtemp(prefix="remat-disk-", dir=self.parent)
        except OSError as error:
            raise DiskError(
                error.errno,
                f"remat: cannot make a folder for disk snapshots in {self.where()} (to write "
                f"x_{step}): {_why(error)}. Pass rm.Tape(disk_dir=...) a folder with room",
                self.where(),
            ) from error
        self._finalizer = weakref.finalize(self, _remove_folder, self.folder)

    def write(self, slot, step, arrays):
        """Store x_step's ``arrays`` in disk slot ``slot`` (replacing what it held)."""
        if self.folder is None:
            self._open(step)
        self.drop(slot)
        path = os.path.join(self.folder, f"slot-{slot}.npy")
        start = time.perf_counter()
        try:
            with open(path, "wb") as file:
                size = backend.save_arrays(file, arrays)
        except OSError as error:
            try:
                os.unlink(path)
            except OSError:
                pass
            size = sum(backend.nbytes(a) for a in arrays)
            raise DiskError(
                error.errno,
                f"remat: cannot write the disk snapshot of x_{step} (disk slot {slot}, "
                f"{size} bytes) in {self.folder}: {_why(error)}. The chain was abandoned and "
                "its files removed; free space there, pass rm.Tape(disk_dir=...) another "
                "folder, or give fewer disk_snapshots",
                self.folder,
            ) from error
        self._verify(path, slot, step, arrays)
        self.seconds += time.perf_counter() - start
        self.files[slot] = (path, size)
        self.writes += 1
        self.bytes_written += size
        self.bytes += size
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def _verify(self, path, slot, step, arrays):
        """Check the file ``write`` just closed by its size: a write the file system cut
        short without an error (numpy's writer does not check that the C library flushed
        its buffer when it closes, and a full disk or a file size limit, EFBIG, may fail
        just there) would otherwise surface in backward as a file that cannot be read."""
        want = backend.saved_bytes(arrays)
        try:
            got = os.path.getsize(path)
        except OSError:
            got = 0
        if got != want:
            try:
                os.unlink(path)
            except OSError:
                pass
            short = "missing" if got < want else "too many"
            raise DiskError(
                errno.EIO,
                f"remat: the disk snapshot of x_{step} (disk slot {slot}) in {self.folder} was "
                f"cut short: its file {os.path.basename(path)} holds {got} bytes of the {want} "
                f"written, {abs(want - got)} bytes {short} (a full disk, or a file size "
                "limit?). The chain was abandoned and its files removed; free space there, pass "
                "rm.Tape(disk_dir=...) another folder, or give fewer disk_snapshots",
                self.folder,
            )

    def read(self, slot, step, devices):
        """The arrays disk slot ``slot`` holds (x_step's), on ``devices``."""
        path, size = self.files[slot]
        start = time.perf_counter()
        try:
            with open(path, "rb") as file:
                arrays = backend.load_arrays(file, devices)
        except (OSError, ValueError) as error:
            code = getattr(error, "errno", None)
            raise DiskError(
                code,
                f"remat: cannot read back the disk snapshot of x_{step} (disk slot {slot}) "
                f"from {path}: {type(error).__name__}: {error} (was the file removed or "
                "changed while the chain ran?)",
                self.folder,
            ) from error
        self.seconds += time.perf_counter() - start
        self.reads += 1
        self.bytes_read += size
        return arrays

    def drop(self, slot):
        """Remove disk slot ``slot``'s file, if it has one."""
        entry = self.files.pop(slot, None)
        if entry is not None:
            self.bytes -= entry[1]
            try:
                os.unlink(entry[0])
            except OSError:
                pass  # the folder goes at close

    def close(self):
        """Remove the folder and every file in it (idempotent)."""
        self.files.clear()
        self.bytes = 0
        if self._finalizer is not None:
            self._finalizer()
