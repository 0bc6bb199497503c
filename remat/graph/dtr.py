"""Dynamic rematerialization (DTR) on the tape: ``rm.Tape(memory=m, remat="dtr")``.

The tape is a cache of the values its records save for backward.  Each op
recorded inside the tape records as usual; the tape notes, beside the record,
how to make its output again (the op, its forward keywords and where each
input came from: another record of this tape, or an array it keeps).  When
the bytes saved would pass ``m``, the tape *evicts* saved values, lowest
heuristic score first (:mod:`remat.graph.heuristics`; of a sample,
:mod:`remat.graph.choice`), until they fit.  The reverse sweep (and the
recomputation of another value) that needs an evicted value recomputes it from
its inputs, recursively, and puts it back.

What eviction frees.  A value lives in its :class:`Value`'s *slots*: the
``ans`` of the record that made it and the ``args`` of the records that read
it, when their VJP keeps it.  Evicting puts the Value itself in those slots
(so a record whose values were evicted keeps what recomputes them alive) and
drops the array.  It is evicted only when nothing else holds it, which
``sys.getrefcount`` tells exactly: a Tensor user code still holds, a view of
it, an array handed out by ``t.data`` all hold it, so values the user can
see are never evicted and evicting never changes what user code sees.
Leaves (parameters) are never evicted: nothing can remake them.

Bytes are counted as :mod:`remat.alive` counts them: by buffer, each once,
a view as its whole base; a leaf's buffer is the user's and is not counted.
Counted: every buffer the records save, the constants the recipes keep (an
array an op read that is neither a leaf nor a value of this tape: nothing
could remake it), and the values a recomputation holds while it runs.
``tape.stats.peak_bytes`` is the most counted at once, never above ``m``.
Not counted: the op being evaluated (its inputs and output before it is
recorded), values user code holds that no record saves, cotangents.  So a
run traced by tracemalloc from before the forward to after the backward peaks
at most at ``m + X`` with ``X = 4 V + 2 G + U + c``: ``V`` the largest value
(an op's inputs, output and temporaries, in backward a cotangent and its VJP's
temporaries), ``G`` the parameters' bytes (their gradients, summed as they
arrive), ``U`` what user code holds that no record saves, and ``c`` Python's
objects, 64 KiB and 2 KiB a record (``tests/graph/test_dtr*.py`` check it).

A tape reused (entered again, run after run) lists and counts what a backward can
still reach: entered while open nowhere, it first drops, with all it saved, the
records a backward released and those nothing but the tape holds (a forward never
differentiated, a run an exception cut short: :func:`forget`), so that a later run
has the room the live program leaves.  A record a live Tensor still reaches stays,
its values evicted or not, and a backward through it later is store-all's.

Too small a budget raises a MemoryError at the op where the values that cannot be
evicted (held by user code, read or made by the op being computed or recomputed, or
constants) pass it, naming how many bytes they take: the least that can work there.
A recomputation holds what it will read again only while that fits
(:mod:`remat.graph.room`), so the least budget that works hardly follows which
values were evicted (h_dtr's choices follow measured times, which change run to run).

Random numbers: ``rm.random`` draws are constants, not ops, so a recipe
keeps the drawn array and a recomputation reads the same numbers.  Every
recomputed value is checked against what it was when evicted: shape and dtype
always, and a fingerprint of its values (:func:`remat.backend.replay_fingerprint`)
unless ``check_replay=False``; a mismatch raises :class:`remat.ReplayError`.

Lazily: until what an op saves would first pass ``m``, the tape only notes each
op (what runs it again, its time, a bound of the byte count, exact where it must
be: :mod:`remat.graph.lazy`),
and builds the tables below (Values, slots, readers, resident values) at that op,
for the records still alive.  Per-op bookkeeping a tape never evicting would not
use is so deferred: its cost (about 10 us an op) was 40% of a chain of small ops.

The core calls in through two of its documented hooks and nothing else:
``remat.core.tape.on_record`` (set while a DTR tape is open) after each op records,
and ``remat.core.tape.before_vjp`` (set while a DTR cache is watched: an eager one
always, a lazy one until a sweep reaches its records) before the reverse sweep
reads a record's saved values.  Both hooks serve every thread: ``on_record`` finds
the tape open in the calling context, ``before_vjp`` the cache whose record it is.
"""

from __future__ import annotations

import functools
import random
import sys
import threading
import time
import weakref
from typing import Any

from .. import backend, guard
from ..alive import keyword_arrays
from ..core import tape as core_tape
from ..executor import ReplayError
from ..tape import BackwardError, Leaf, Record
from .choice import Choice
from .heuristics import Heuristic
from .lazy import Pending, build, on_record
from .options import DTR, DTRStats, refuse
from .room import Room
from .value import Value


def _recompute(cache: Cache, w: Value, datas: Any) -> Any:
    """``w``'s op evaluated again on ``datas``, timed, counted and checked against its
    first run (the replay check)."""
    if w.checks is not None or w.record.seq < guard.OLDEST[0]:
        i = guard.changed(datas, w.checks, w.record.seq)  # a value or constant handed out
        if i is not None:
            raise BackwardError(
                f"a DTR tape recomputing `{w.op.name}` (output shape {w.shape}): its input "
                f"{i}, which it read when first run, was changed in place since. Change "
                "values only after backward, or out of place"
            )
    start = time.perf_counter()
    out = w.op.forward(*datas, **w.kwargs) if w.kwargs else w.op.forward(*datas)
    if not backend.is_array(out):
        out = backend.xp.asarray(out)
    w.cost = time.perf_counter() - start
    stats = cache._stats
    stats.recomputed_ops += 1
    stats.recomputed_by_op[w.index] = stats.recomputed_by_op.get(w.index, 0) + 1
    stats.recompute_seconds += w.cost
    if out.shape != w.shape or out.dtype != w.dtype:
        raise ReplayError(
            f"a DTR tape recomputing `{w.op.name}`: it gave shape {out.shape} dtype "
            f"{out.dtype}, but {w.shape} {w.dtype} the first time"
        )
    if w.print is not None:
        full = cache.check_replay == "full"
        if backend.replay_fingerprint(out, full=full) != w.print:
            raise ReplayError(
                f"a DTR tape recomputing `{w.op.name}` (output shape {w.shape}) got other "
                "values than the first run: the op (or what it reads) is not deterministic, "
                "so its gradient would not be store-all's. Draw random numbers with "
                "rm.random outside the op, or compute it outside the DTR tape"
            )
    return out


def _set_slot(record, i, value):
    if i < 0:
        record.ans = value
    else:
        args = record.args
        record.args = (*args[:i], value, *args[i + 1 :])


class Cache(Choice, Room):
    """The values one DTR tape saves, what they cost, and the byte count against ``limit``."""

    form = "remat='dtr'"  # how its errors name the tape's option
    # what the slots of the records a PlannedCache let go of hold for evicted values
    stale: object = None

    def __init__(self, limit: int, dtr: DTR, check_replay: bool | str = True) -> None:
        self.limit = limit
        self.heuristic: Heuristic | Any = dtr.heuristic
        self.check_replay = check_replay
        self._stats = DTRStats(memory=limit, heuristic=dtr.name)
        self.values: dict[int, Value] = {}  # id(record) -> its Value (the tape holds records)
        self.resident: dict[int, Value] = {}  # values saved in a slot and in memory
        self.owners: dict[int, list] = {}  # id(buffer) -> [buffer, holders]
        self.leaves: dict[int, Any] = {}  # id(buffer) -> a leaf's buffer, weakly (not counted)
        self.bytes = 0
        self.clock = 0
        self.time = time.perf_counter()
        self.reversing: Value | None = None
        self.rng = random.Random(0)
        self.drawn: list[Value] = []  # what the eviction samples from (see _choose)
        self.draws = 0  # samples left before the list is taken again
        self.queue: list[Value] = []  # the next lowest of the last sample, last first
        self.queued_at = 0  # the clock's tick when it was scored
        self.pending: Pending | None = Pending()  # None once the tables are built
        self.watched = False  # whether before_vjp calls reach it (see _watch)
        self.recomputing: list[dict] = []  # per one in progress: what it holds (Room)
        self.remade_from = 0  # recomputed_ops when the outermost one in progress began

    @property
    def stats(self) -> DTRStats:
        """What this tape did so far (``tape.stats``)."""
        pending = self.pending
        if pending is not None:  # lazy: the ops and the count are brought up to date
            pending.update_peak(self)
            self._stats.ops = pending.ops
        return self._stats

    @stats.setter
    def stats(self, stats: DTRStats) -> None:  # (a subclass may count into its own)
        self._stats = stats

    # --- counting by buffer -------------------------------------------------------
    def _owner(self, a):
        return a if a.base is None else backend.memory_owner(a)

    def leaf(self, o: Any) -> None:
        """Note buffer ``o`` as a leaf's (the user's: not counted), weakly: a tape reused
        with an optimizer (new arrays each step) keeps no parameter's old arrays."""
        k, leaves = id(o), self.leaves
        if k not in leaves:  # the entry goes with its buffer: an id stays its own
            leaves[k] = weakref.ref(o, functools.partial(_leaf_gone, weakref.ref(self), k))

    def adding(self, arrays: Any) -> int:
        """Bytes holding ``arrays`` would add (buffers not counted yet, each once)."""
        new = {}
        for a in arrays:
            o = self._owner(a)
            if id(o) not in self.owners and id(o) not in self.leaves:
                new[id(o)] = o.nbytes
        return sum(new.values())

    def hold(self, a: Any) -> None:
        o = self._owner(a)
        if id(o) in self.leaves:
            return
        entry = self.owners.get(id(o))
        if entry is None:
            self.owners[id(o)] = [o, 1]
            self.bytes += o.nbytes
            if self.bytes > self._stats.peak_bytes:
                self._stats.peak_bytes = self.bytes
        else:
            entry[1] += 1

    def release(self, a: Any) -> None:
        o = self._owner(a)
        entry = self.owners.get(id(o))
        if entry is None:
            return  # a leaf's buffer
        entry[1] -= 1
        if entry[1] == 0:
            del self.owners[id(o)]
            self.bytes -= o.nbytes

    # --- recording ----------------------------------------------------------------
    def record(self, record: Record, datas: Any, kwargs: Any, out: Any) -> None:
        """Note ``record`` (just made, with its forward's inputs and output), then evict
        what must go for its saved arrays to fit.  Called once the budget is approached:
        before, the hook has :class:`~remat.graph.lazy.Pending` note each op instead."""
        now = time.perf_counter()
        pending = self.pending
        if pending is not None:  # the budget is approached: build the tables, then evict
            if pending.swept:
                pending.recount(self)
            self.pending = None
            build(self, pending)
        if not self.watched:  # eager from here (or from the start, in a subclass)
            self.watch()
        self.clock += 1
        inputs, consts = [], []
        for node, d in zip(record.parents, datas):
            src = self.values.get(id(node)) if node is not None else None
            if src is not None and not src.pinned and src.ref() is d:  # (as made)
                inputs.append(src)
                continue
            inputs.append(d)  # a leaf's array, a constant, or a value from outside
            if backend.is_array(d):
                if isinstance(node, Leaf):
                    self.leaf(self._owner(d))
                else:
                    consts.append(d)
        if kwargs or record.kwargs:  # an index table its keywords keep: a constant
            consts.extend(keyword_arrays(kwargs, record.kwargs))
        v = Value(
            record, kwargs, tuple(inputs), weakref.ref(out), out.dtype, now - self.time, self.clock
        )
        v.consts = tuple(consts)
        if guard.WATCHED:  # what it read that user code may change (a value's .data too)
            v.checks = guard.checks(datas)
        held = list(consts)
        v.link(self, held)
        v.index = self._stats.ops
        self._stats.ops += 1
        upper = sum(a.nbytes if a.base is None else self._owner(a).nbytes for a in held)
        if self.bytes + upper > self.limit:  # else it fits, counting each buffer as new
            self.make_room(held, record)
        for a in held:
            self.hold(a)
        self.time = time.perf_counter()

    def watch(self) -> None:
        """Have the reverse sweeps' ``before_vjp`` calls reach this cache."""
        _watch(self)

    # --- eviction -----------------------------------------------------------------
    def evict(self, v: Value) -> None:
        """Drop ``v``'s array from its slots (each slot then holds ``v``, which remakes it)."""
        a = v.ref()
        if self.check_replay:
            v.print = backend.replay_fingerprint(a, full=self.check_replay == "full")
        for record, i in v.slots:
            _set_slot(record, i, v)
            self.release(a)
        v.evicted = True
        v.cache = self
        if getattr(self.heuristic, "neighbourhood", True):  # (h_dtr_eq's classes)
            v.join()
        del self.resident[id(v)]
        stats = self._stats
        stats.evictions += 1
        stats.evicted_by_op[v.index] = stats.evicted_by_op.get(v.index, 0) + 1

    # --- backward -----------------------------------------------------------------
    def before_vjp(self, record: Record) -> None:
        """Put back what ``record``'s VJP reads (the reverse sweep is about to)."""
        prev = self.reversing
        if prev is not None and prev.record.parents is None:
            self._release_record(prev)
        v = self.values.get(id(record))
        self.reversing = v
        if v is None:
            return
        self.clock += 1
        keep, evicted = [], []  # all held before any comes back: none evicts another
        for u, _ in v.saves:
            u = u or v
            u.last = self.clock
            if u.evicted:
                evicted.append(u)
            else:
                keep.append(u.ref())
        for u in evicted:
            keep.append(self.materialize(u))

    def _drop_released(self):
        prev = self.reversing
        if prev is not None and prev.record.parents is None:
            self._release_record(prev)
            self.reversing = None

    def _release_record(self, v: Value) -> None:
        """Backward released v's record: uncount what its slots held, pin v itself
        (its record can no longer remake it)."""
        for u, i in v.saves:
            u = u or v
            u.slots.remove((v.record, i))
            if not u.evicted:
                a = u.ref()
                if a is not None:
                    self.release(a)
            if not u.slots:
                self.resident.pop(id(u), None)
        for a in v.consts:
            self.release(a)
        v.pin()
        self.resident.pop(id(v), None)
        self.values.pop(id(v.record), None)

    # --- recomputation ------------------------------------------------------------
    def materialize(self, target: Value) -> Any:
        """``target``'s array, recomputed from the nearest values in memory.  The values
        its ops read that are in memory are held from the start (if they fit), each value
        it makes from then, each till its last read here; where room is needed and
        nothing else can be evicted, they are let go of (:mod:`remat.graph.room`)."""
        a = target.ref()
        if a is not None:
            return a
        if not self.recomputing:  # the outermost: what Room bounds its letting go by
            self.remade_from = self._stats.recomputed_ops
        need, frontier, todo, seen = [], {}, [target], {id(target)}
        while todo:
            w = todo.pop()
            if w.pinned:
                raise BackwardError(
                    f"a DTR tape must recompute `{w.op.name}` (output shape {w.shape}), but "
                    "backward has already passed it and freed its inputs. Pass "
                    "retain_graph=True to the first backward() to backpropagate twice"
                )
            need.append(w)
            for u in w.inputs:
                if type(u) is Value and id(u) not in seen:
                    seen.add(id(u))
                    arr = u.ref()
                    if arr is None:
                        todo.append(u)
                    else:
                        frontier[id(u)] = arr  # held here: no eviction can take it now
        have: dict[int, Any] = {}  # what this recomputation holds for its later ops
        self.recomputing.append(have)
        try:
            # the inputs in memory count while the recomputation reads them (a value user
            # code holds that no record saves was not counted so far)
            if self._fits(list(frontier.values())):
                for k, arr in frontier.items():
                    self.hold(arr)
                    have[k] = arr
            frontier.clear()  # (else read: from memory, when an op reads it)
            arr = None
            need.sort(key=lambda w: w.record.seq)
            uses: dict[int, int] = {}
            for w in need:
                for u in w.inputs:
                    if type(u) is Value:
                        uses[id(u)] = uses.get(id(u), 0) + 1
            for w in need:
                reading = self._read_inputs(w, have)
                out = _recompute(
                    self, w, [reading[id(u)] if type(u) is Value else u for u in w.inputs]
                )
                for u in w.inputs:
                    if type(u) is Value:
                        uses[id(u)] -= 1
                        if uses[id(u)] == 0:
                            self.release(reading.pop(id(u)))
                if reading is not have:
                    have.update(reading)  # (held still, for later ops)
                del reading
                self.make_room([out], w.record)
                self.hold(out)
                have[id(w)] = out
                w.ref = weakref.ref(out)
                if w.evicted:
                    self._restore(w, out)
                out = None  # (held by `have` alone, which Room may let go of)
            out = have.pop(id(target))
            self.release(out)
            for arr in have.values():  # nothing is left but in a DAG of odd shape
                self.release(arr)
            have.clear()
            return out
        finally:
            self.recomputing.pop()  # (this one: they nest)

    def _restore(self, w: Value, out: Any) -> None:
        for record, i in w.slots:  # `out` is counted already: no new bytes
            _set_slot(record, i, out)
            self.hold(out)
        w.evicted = False
        w.cache = None
        w.leave()
        w.print = None
        w.last = self.clock
        if w.slots:
            self.resident[id(w)] = w


def forget(cache: Cache, records: list) -> None:
    """The tape is entered again, open nowhere: drop from ``records`` (its list) and
    from ``cache`` the records no backward can reach, by the rule of
    :meth:`remat.tape.Recorder._forget` (released by a backward, or held by nothing
    but the list and this cache: no Tensor made by them alive, no record kept reads
    them: an evaluation's, a run an exception cut short), newest first; uncount what
    they saved, so that the room left is what the live program holds.  Their
    records are released: a Value of one the eviction's samples still list holds
    nothing through it."""
    cache._drop_released()
    pending, values, kept = cache.pending, cache.values, []
    notes = {} if pending is None else pending.forgetting(cache)
    noted = len(notes)
    while records:
        record = records.pop()  # (rebinding `record`, `v` and `note` lets the ones
        v = values.get(id(record))  # before go, and the parents they held: judged next)
        note = notes.get(id(record))
        # what this cache holds of it: its Value, the slots its record saves, its note
        ours = 0 if v is None else 1 + len(v.saves)
        if not record.freed and sys.getrefcount(record) > 2 + ours + (note is not None):
            kept.append(record)
            continue
        if v is not None:
            cache._release_record(v)
            if v is cache.reversing:  # (the last a sweep reversed, retaining the graph)
                cache.reversing = None
        if note is not None:
            del notes[id(record)]
        record.release()
    kept.reverse()
    records[:] = kept
    if pending is not None:
        pending.forgot(cache, notes, len(notes) < noted)


def _leaf_gone(cache: weakref.ref[Cache], key: int, _: Any = None) -> None:
    """A leaf's buffer was freed: its entry goes.  The callback holds its cache weakly
    (one closing over the table would make a cycle, table -> reference -> callback ->
    table, and a tape with leaves would wait for the cyclic collector to be freed)."""
    c = cache()
    if c is not None:
        c.leaves.pop(key, None)


# --- the hooks --------------------------------------------------------------------

_lock = threading.Lock()  # never waited for by a collected cache's callback: _gone
_open = [0]  # DTR tapes open now (on_record is set while any is)
_caches: dict[int, weakref.ref[Cache]] = {}  # watched (before_vjp is set while any is)
_hooked: list[tuple] = [()]  # a snapshot of _caches' references, which the hook reads
_dead: list[int] = []  # ids of caches finalized and not yet taken out of _caches


def _before_vjp(record):
    """Hand ``record`` to the cache it belongs to, if any (sweeps of every thread, of
    plain tapes too, call here: a cache must see only its own records)."""
    for ref in _hooked[0]:  # () while no cache is watched: the common case
        cache = ref()
        if cache is None:
            continue
        key, pending = id(record), cache.pending
        if pending is None:
            if key in cache.values:
                cache.before_vjp(record)
            elif cache.stale:  # (remat='optimal' let go of records holding placeholders)
                cache.refuse_stale(record)
        elif record is pending.last or pending.find(key) is not None:  # lazy: count again
            pending.reached(cache)  # at the next op; till then, no calls (the peak first)
            _watch(cache, False)


def _watch(cache: Cache, on: bool = True) -> None:
    """Have ``before_vjp`` calls reach ``cache`` (or no longer).  An eager cache is
    watched for good; a lazy one from its first op to the first sweep that reaches
    one of its records (it counts again at its next op, and is watched again)."""
    with _lock:
        key = id(cache)
        ref = _caches.get(key)
        if on and (ref is None or ref() is not cache):  # (a collected one's id: reused)
            _caches[key] = weakref.ref(cache, functools.partial(_gone, key))
        elif not on and ref is not None and ref() is cache:
            del _caches[key]
        else:
            return
        cache.watched = on
        _rehook()
    _settle()


def _gone(key: int, _: Any = None) -> None:
    """A watched cache was collected (its weak reference's callback), maybe inside an
    allocation made while this thread holds the lock: the key waits in ``_dead`` until
    the lock is free; nothing waits for the lock here (it would wait for itself)."""
    _dead.append(key)
    _settle()


def _settle() -> None:
    while _dead and _lock.acquire(blocking=False):
        try:
            _rehook()
        finally:
            _lock.release()


def _rehook() -> None:
    """(The lock held.)  Take the collected caches out, and hook the others."""
    while True:
        while _dead:
            key = _dead.pop()
            ref = _caches.get(key)
            if ref is not None and ref() is None:  # (else the id is a newer cache's now)
                del _caches[key]
        hooked = tuple(_caches.values())  # a collection here adds to _dead, not _caches
        if not _dead:
            break
    _hooked[0] = hooked
    core_tape.before_vjp = _before_vjp if _caches else None


def entered() -> None:
    """A DTR tape was entered: watch the ops recorded (on_record)."""
    with _lock:
        _open[0] += 1
        core_tape.on_record = on_record  # (remat.graph.lazy's: it notes a chain's op itself)


def exited() -> None:
    with _lock:
        _open[0] -= 1
        if _open[0] == 0:
            core_tape.on_record = None
    _settle()


class Records(list):
    """A DTR tape's record list: it refuses a record it cannot evict nor recompute (a
    loop's, a checkpoint's), at once: before one is made (:meth:`admit`, which
    :func:`remat.executor.outputs_of` asks through the tape), or as a tape opened
    inside lists its records here too.  Each op's record is appended unchecked."""

    def admit(self, op: Any) -> None:
        if op.custom_backward is not None:
            raise refuse("rm.checkpoint" if op.name != "loop" else "a checkpointed loop")

    def extend(self, records: Any) -> None:
        records = list(records)
        for record in records:
            self.admit(record.op)
        list.extend(self, records)
