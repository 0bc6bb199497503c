"""What a DTR tape notes per op before its budget is approached, and the build that follows.

A DTR tape whose budget is never reached should cost about what a plain tape costs
(issue 26 asks at most 5% more).  Building the eager tables per op (a
:class:`~remat.graph.value.Value` with its slots, readers and heuristic fields, a
resident table, a count of holders per buffer) cost about 10 us an op, 40% of a
1000-op chain of ``sin``.  So until what an op saves would pass ``m``,
:class:`Pending` notes per op only what cannot be learnt later:

* what runs the op again: the record, its forward keywords, and per input the
  record of this tape that made it (checked to be the array read) or the array
  itself (a constant, held as a recipe holds it, or a leaf's); a weak reference to
  the output and its dtype (for the replay check's shape and dtype);
* the op's time (one clock read) and the clock's tick: the heuristics read them;
* the fingerprints of the constants it read while something was handed out
  (:mod:`remat.guard`): they must be taken before user code can change them;
* the byte count, exact by the eager rules (by buffer, each once, a leaf's buffer
  uncounted, a constant a recipe holds counted), with the peak: ``owned`` maps each
  buffer counted to a weak reference, so the count holds nothing alive, and a
  buffer freed whose id is reused is seen as new.  A reverse sweep may release
  records: the ``before_vjp`` hook only notes which noted records it reached, and
  the next op, if one of them was released, counts again what the records still
  alive save (:meth:`Pending.recount`; a sweep that retains the graph costs none).

Deferred, to :func:`build`, run at the first op whose saved arrays would pass ``m``
(the one point where eviction may be needed; the count is exact, so no margin is
kept): the Values, the slots each array is saved in, the readers (``h_dtr_eq``), the
resident table the heuristics score, the holder counts; then the tape runs eagerly
(:class:`~remat.graph.dtr.Cache`) for good.  Nothing of the replay check is
deferred: a value is fingerprinted when it is evicted, before its array is
dropped (as before), and its recomputation is checked against that fingerprint
(shape and dtype always).  Staleness differs from an eager tape's in one way: a
reverse sweep run while the tape was lazy ticks no clock.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from .. import backend, guard
from ..tape import Leaf, Record
from .value import Value

_clock, _weak, _is_array, _owner = (
    time.perf_counter,
    weakref.ref,
    backend.is_array,
    backend.memory_owner,
)

PRUNE_AT = 1024
"""Notes of released records are dropped when the notes double past this many (so a
tape that records many forward and backward passes keeps no constant of a past one)."""


class Pending:
    """The notes of a DTR tape that has not approached its budget (see the module)."""

    def __init__(self) -> None:
        self.notes: dict[int, tuple] = {}  # id(record) -> note, in the order recorded
        self.owned: dict[int, Any] = {}  # id(buffer) -> a weak reference to the buffer
        self.swept: dict[int, Record] = {}  # the noted records a sweep has reached since
        self.prune_at = PRUNE_AT

    def record(self, cache: Any, record: Record, datas: Any, kwargs: Any, out: Any) -> bool:
        """Note ``record``; False (noting nothing) when what it saves would pass the
        budget: the tape must then build its tables and evict."""
        now = _clock()
        if self.swept:  # a sweep reached noted records: if it released one, count again
            if any(r.parents is None for r in self.swept.values()):
                self.recount(cache)
            self.swept.clear()
        notes, args, parents = self.notes, record.args, record.parents
        if len(parents) == 1:  # the common case, unrolled: an op of one value of this tape
            node = parents[0]
            note = notes.get(id(node))
            if note is not None and note[3]() is datas[0] and node.parents is not None:
                inputs, consts = (node,), ()
                held = [] if args[0] is None else [args[0]]
            else:
                inputs, consts, held = self._resolve(cache, parents, datas, args)
        else:
            inputs, consts, held = self._resolve(cache, parents, datas, args)
        if record.ans is not None:
            held.append(record.ans)
        if held:  # count the buffers not counted yet (undone if they do not fit)
            owned, leaves, adding, keys = self.owned, cache.leaves, 0, []
            for a in held:
                o = a if a.base is None else _owner(a)
                k = id(o)
                r = owned.get(k)
                if (r is None or r() is not o) and k not in leaves:
                    owned[k] = _weak(o)
                    adding += o.nbytes
                    keys.append(k)
            if adding:
                total = cache.bytes + adding
                if total > cache.limit:
                    for k in keys:
                        del owned[k]
                    return False
                cache.bytes = total
                if total > cache.stats.peak_bytes:
                    cache.stats.peak_bytes = total
        checks = None
        if guard.WATCHED:  # fingerprints of what it read that user code may change
            checks = guard.checks(datas)
        cache.clock = tick = cache.clock + 1
        notes[id(record)] = (
            record, kwargs, inputs, _weak(out), out.dtype, now - cache.time, tick, checks,
            consts,
        )  # fmt: skip
        cache.time = now
        cache.stats.ops += 1
        if len(notes) > self.prune_at:
            self.prune()
        return True

    def _resolve(self, cache: Any, parents: Any, datas: Any, args: Any) -> tuple:
        """Per input: its record if a value of this tape made it (read as it was made),
        else the array or number itself; the arrays held as constants; what is held."""
        notes, inputs, held = self.notes, [], []
        consts: tuple = ()
        for i, node in enumerate(parents):
            d = datas[i]
            if node is not None:
                note = notes.get(id(node))
                if note is not None and note[3]() is d and node.parents is not None:
                    inputs.append(node)  # a value of this tape: its record remakes it
                    if args[i] is not None:
                        held.append(args[i])
                    continue
            inputs.append(d)
            if _is_array(d):
                if isinstance(node, Leaf):
                    cache.leaf(d if d.base is None else _owner(d))
                else:
                    consts += (d,)
                    held.append(d)
        return tuple(inputs), consts, held

    def recount(self, cache: Any) -> None:
        """Count again, exactly, what the records still alive save (a reverse sweep
        released some): each buffer once, a leaf's not."""
        self.prune()
        owned, leaves, total = {}, cache.leaves, 0
        for record, _, inputs, *_, consts in self.notes.values():
            held = [*consts, *(a for a, u in zip(record.args, inputs) if type(u) is Record)]
            held.append(record.ans)
            for a in held:
                if a is None:
                    continue
                o = a if a.base is None else backend.memory_owner(a)
                if id(o) not in owned and id(o) not in leaves:
                    owned[id(o)] = weakref.ref(o)
                    total += o.nbytes
        self.owned = owned
        cache.bytes = total

    def prune(self) -> None:
        """Drop the notes of records backward has released (their constants with them)."""
        self.notes = {k: n for k, n in self.notes.items() if n[0].parents is not None}
        self.prune_at = max(PRUNE_AT, 2 * len(self.notes))


def build(cache: Any, pending: Pending) -> None:
    """Make ``cache``'s tables (Values, slots, readers, resident values, the count
    by the eager rules) from ``pending``'s notes, as if each op had been recorded
    eagerly; released records give pinned Values (what read them cannot be remade)."""
    made: dict[int, Value] = {}
    cache.bytes = 0  # counted again below, by the eager rules
    for record, kwargs, inputs, ref, dtype, cost, tick, checks, consts in pending.notes.values():
        ins = tuple(_source(made, u) if type(u) is Record else u for u in inputs)
        v = Value(record, kwargs, ins, ref, dtype, cost, tick)
        made[id(record)] = v
        if record.parents is None:  # released by a backward run while lazy
            v.pin()
            continue
        v.checks, v.consts = checks, consts
        held = list(consts)
        v.link(cache, held)
        for a in held:
            cache.hold(a)


def _source(made: dict, record: Record) -> Any:
    """The Value of ``record`` (made already, being older), or a pinned one for a record
    whose note was pruned: backward released it, nothing can remake its output."""
    v = made.get(id(record))
    if v is None:
        v = Value(record, None, (), lambda: None, None, 0.0, 0)
        v.pin()
        made[id(record)] = v
    return v
