"""How a DTR tape makes room: :class:`Room`, a part of :class:`remat.graph.dtr.Cache`.

Room is made by evicting (:mod:`remat.graph.choice` picks what).  What cannot be
evicted: the values user code holds that records save, the arrays an op being
computed reads and makes, the constants recipes keep, and what the recomputations
in progress hold.  A recomputation (``Cache.materialize``) holds the values it
reads and makes until their last read, so that no eviction takes them meanwhile;
where nothing else can be evicted, it lets go of them (:meth:`Room._release_held`)
and reads each again when an op needs it: from memory where it still is, else
recomputed (recursively).  Before, a recomputation in the reverse sweep held every
value it would read from its start; which values those were followed the
heuristic's choices, and ``h_dtr``'s follow measured times: on the small
transformer at a third of store-all's bytes, a budget that had worked failed in
about one run in a hundred under load.  Now what must fit at once is the inputs
and output of the op being recomputed and of each op waiting on one of its
inputs to be recomputed (a chain of those still follows the choices): where that
passes the budget, a MemoryError says so, naming the op and the bytes.
"""

from __future__ import annotations

from typing import Any

from ..tape import Record
from .value import Value

LET_GO_ROUNDS = 4
"""How many times the tape's values the outermost recomputation in progress may recompute
while it still lets go of what recomputations hold (:meth:`Room._release_held`)."""


class Room:
    """Making room in a :class:`~remat.graph.dtr.Cache`, whose count, choice and
    eviction it uses."""

    bytes: int
    limit: int
    form: str
    recomputing: list[dict]  # per recomputation in progress: what it holds for its later ops
    remade_from: int  # the ops recomputed when the outermost recomputation began
    values: dict
    _stats: Any

    def adding(self, arrays: Any) -> int:
        raise NotImplementedError  # the cache's: bytes holding ``arrays`` would add

    def hold(self, a: Any) -> None:
        raise NotImplementedError

    def release(self, a: Any) -> None:
        raise NotImplementedError

    def _choose(self) -> Value | None:
        raise NotImplementedError

    def evict(self, v: Value) -> None:
        raise NotImplementedError

    def materialize(self, target: Value) -> Any:
        raise NotImplementedError

    def make_room(self, arrays: list, record: Record) -> None:
        """Evict until holding ``arrays`` fits in the budget.  With nothing left to evict,
        the recomputations in progress let go of what they hold for their later ops
        (:meth:`_release_held`), and eviction goes on; a MemoryError only when that is gone too."""
        while not self._fits(arrays):
            if not self._release_held():
                raise self._too_small(self.adding(arrays), record)

    def _fits(self, arrays: list) -> bool:
        """Evict until holding ``arrays`` fits; False where nothing else can be evicted.
        What they add is counted again after each eviction: evicting a view may uncount
        the buffer of one of them."""
        while self.bytes + self.adding(arrays) > self.limit:
            v = self._choose()
            if v is None:
                return False
            self.evict(v)
        return True

    def _release_held(self) -> bool:
        """Uncount and drop what the recomputations in progress hold for their later
        ops (each :meth:`materialize`'s ``have``; not the inputs of the op it runs):
        a value saved in a slot stays there, resident, so it can be evicted; one no
        record saves is freed.  Their later ops read them again from memory, or make
        them again.  Whether there was any.

        Not once the outermost recomputation in progress has recomputed
        :data:`LET_GO_ROUNDS` times as many ops as the tape has values: past that,
        nested recomputations were letting go of each other's values and making them
        again without end (a chain with skips under ``h_dtr``: 800,000 recomputations
        of 302 ops and counting), and the budget is too small for them: a MemoryError."""
        if self._stats.recomputed_ops - self.remade_from > LET_GO_ROUNDS * len(self.values):
            return False
        dropped = False
        for have in self.recomputing:
            for arr in have.values():
                self.release(arr)
            dropped = dropped or bool(have)
            have.clear()
        return dropped

    def _read_inputs(self, w: Value, have: dict) -> dict[int, Any]:
        """The arrays of ``w``'s input values by id, each held (counted) by the caller
        till it lets go: ``have`` itself where it holds them all, else a dict of them
        taken from ``have``, else from memory, else recomputed (a value let go of);
        those read first are held while the next is recomputed."""
        for u in w.inputs:
            if type(u) is Value and id(u) not in have:
                break
        else:
            return have  # the common case: all held (taken from it after the op)
        reading: dict[int, Any] = {}
        for u in w.inputs:
            if type(u) is not Value or id(u) in reading:
                continue
            arr = have.pop(id(u), None)
            if arr is None:  # let go of (make_room needed the room)
                arr = u.ref()
                if arr is None:
                    arr = self.materialize(u)
                self.make_room([arr], w.record)
                self.hold(arr)
            reading[id(u)] = arr
        return reading

    def _too_small(self, adding, record):
        need = self.bytes + adding
        where = " (recomputing it for the reverse sweep)" if self.recomputing else ""
        remade = self._stats.recomputed_ops - self.remade_from
        if self.recomputing and remade > LET_GO_ROUNDS * len(self.values):
            where += (
                f", after {remade} ops recomputed to reach it, recomputations letting go "
                "of each other's values and making them again"
            )
        return MemoryError(
            f"rm.Tape(memory={self.limit}, {self.form}): at op `{record.op.name}` (output "
            f"shape {record.shape}{where}; op {self._stats.ops} recorded on this tape) the "
            f"tape must hold {need} bytes at once, none of which can be evicted: the values "
            "user code still holds that its records save, the inputs and output of the op "
            "being computed (in a recomputation, of each op waiting on one), and the "
            f"constants its ops read. Give memory= at least {need} bytes, or hold fewer "
            "values (let go of Tensors you no longer need)"
        )
