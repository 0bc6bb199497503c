"""What a chain keeps alive, in bytes: the one accounting behind every byte budget.

A budget (``rm.Tape(memory=...)``) and ``tape.stats.peak_bytes`` count memory
the way the allocator sees it: by **buffer**, not by array.

* A view (``a[-1]``, ``a.T``, ``a.reshape(...)``) keeps its whole base alive:
  it is counted as the buffer that owns its memory
  (:func:`remat.backend.memory_owner`), at that buffer's size.
* Each buffer is counted once, however many arrays (views, snapshots, tapes)
  hold it.
* Every array counts, whatever its dtype: an integer index table an op keeps
  (``u[nbr]`` copies ``nbr`` into its record) is memory like any other.

What a chain holds is its snapshots (the states in its slots), the tapes of
the steps it has taped and not yet reversed (:func:`remat.executor.saved_by`:
every array a step's records keep, operands and outputs, non-float ones
too, the output state the step tape keeps through its outputs, and whatever
a chain or an ``rm.checkpoint`` inside the step holds), and what a policy
(``rm.Tape(policy=)``) kept.  :class:`Holdings` counts them as they are held
and released (``tape.stats.peak_bytes``); the planner's model
(:mod:`remat.memory`: ``state_bytes``, ``tape_bytes``) is measured with the
same Holdings, so that the plan and the run count the same bytes.  The
model sums a step's tape and each snapshot on its own, where Holdings counts
a buffer shared by both once: the run never holds more than the plan says.
A parameter's buffer (a leaf tensor's) is the user's, not the chain's: a
step's view of it (``W.T``) is not counted.

The transients: what is alive during a run and not counted.  A run under a
budget ``B`` (the plan cached: a second run) peaks, as tracemalloc sees it, at
most at ``B + X``, and any run at ``tape.stats.peak_bytes + X``, with::

    X = 2 M + 3 S + 3 G + Y + c

* ``M``: one step's working set, what one recorded evaluation of the step
  allocates (its tape, the temporaries no VJP keeps, such as ``h * s`` in
  ``tanh(h * s)``, and its output): the state being evaluated, and the tape
  being made before it is counted.  Reversing a step (its cotangents and the
  VJPs' temporaries) takes at most about as much again: ``2 M``;
* ``S``: the largest state, by its buffers: the chain's output ``x_n`` (the
  caller holds it), its cotangent (held through the chain's backward), and
  the cotangent carried back, ``x_0``'s gradient in the end;
* ``G``: the parameters' bytes: each one's gradient, summed as it arrives (the
  sum, the one arriving, the sum being made);
* ``Y``: a scan's ``ys``, held row by row and then stacked: twice their bytes;
* ``c``: Python's own objects: 64 KiB, plus for each step tape held at once
  about 0.6 KiB per record it holds (the record, its tuples, Tensors, array
  headers; 1 KiB a record bounds it), which dominate when the states are a
  few hundred bytes; under a policy (``rm.Tape(policy=)``) as much again for
  every step, whose first run notes each op it evaluates
  (:class:`remat.selective.Kept`) until the step is reversed.

Planning is not in ``X``: the planner's tables (:class:`remat.schedules.Optimal`)
exist only while a plan is made, the first time a chain of that kind runs; the
plan is then cached (``tests/budgets/test_memory_accounting.py`` checks the bound).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .backend import is_array, memory_owner


def buffers(arrays: Iterable[Any]) -> dict[int, Any]:
    """The distinct buffers ``arrays`` keep alive: id -> the array owning each.

    >>> import numpy as np
    >>> a = np.zeros(100)
    >>> [b.nbytes for b in buffers([a[-1:], a.reshape(10, 10), np.ones(3)]).values()]
    [800, 24]
    """
    owners = {}
    for a in arrays:
        if getattr(a, "base", None) is not None:
            a = memory_owner(a)
        owners[id(a)] = a
    return owners


def keyword_arrays(*keywords: Any) -> tuple:
    """The arrays keyword dicts hold (the integer index table of ``t[idx]``, a
    boolean mask), alone or in a tuple, each once: a record keeps them alive beside
    its operands, so every count of what a record holds counts them.

    >>> import numpy as np
    >>> idx = np.arange(3)
    >>> len(keyword_arrays({"index": idx}, {"index": (idx, 2), "axis": 0}, None))
    1
    """
    found: tuple = ()
    for kw in keywords:
        if not kw:
            continue
        for x in kw.values():
            for a in x if type(x) is tuple else (x,):
                if is_array(a) and not any(a is b for b in found):
                    found += (a,)
    return found


def nbytes(arrays: Iterable[Any]) -> int:
    """The bytes ``arrays`` keep alive: each distinct buffer's, once.

    >>> import numpy as np
    >>> a = np.zeros(100)
    >>> nbytes([a[-1:], a, np.ones(3, dtype=np.int32)])
    812
    """
    return sum(getattr(a, "nbytes", 0) for a in buffers(arrays).values())


class Holdings:
    """Bytes held by a chain right now: each buffer counted once however often held
    (by the id of the array owning it, so a view counts its whole base).

    With a ``limit`` (a byte budget), holding more raises ``error`` (the
    executor's LoopError): the costs a plan was made from no longer describe
    the chain (``why``: what the error says of it, where the cause is known
    beforehand).
    """

    def __init__(self, limit=None, why=None, error=RuntimeError):
        self.count = {}  # id(owner) -> [owner, holders]
        self.bytes = 0
        self.peak = 0
        self.limit = limit
        self.why = why
        self.error = error

    def hold(self, arrays):
        count = self.count
        added = 0
        for a in arrays:
            if a.base is not None:
                a = memory_owner(a)
            key = id(a)
            entry = count.get(key)
            if entry is None:
                count[key] = [a, 1]
                added += a.nbytes
            else:
                entry[1] += 1
        self.bytes += added
        if self.bytes > self.peak:
            self.peak = self.bytes
            if self.limit is not None and self.peak > self.limit:
                why = self.why or (
                    "a step's tape or state is larger than when the plan was measured (a step "
                    "whose records depend on the values?); clear the plan cache "
                    "(remat.memory.clear_plans()) or give more memory"
                )
                raise self.error(
                    f"the chain now holds {self.peak} bytes, more than its budget of "
                    f"{self.limit} bytes: {why}"
                )

    def release(self, arrays):
        count = self.count
        freed = 0
        for a in arrays:
            if a.base is not None:
                a = memory_owner(a)
            key = id(a)
            entry = count[key]
            if entry[1] == 1:
                del count[key]
                freed += a.nbytes
            else:
                entry[1] -= 1
        self.bytes -= freed

    def adding(self, arrays: Iterable[Any]) -> int:
        """The bytes holding ``arrays`` would add (buffers not held yet)."""
        count = self.count
        return sum(a.nbytes for k, a in buffers(arrays).items() if k not in count)

    def arrays(self) -> list[Any]:
        """The buffers held (for a chain inside a step: what its tape keeps)."""
        return [a for a, _ in self.count.values()]
