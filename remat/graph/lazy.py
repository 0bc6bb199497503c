"""What a DTR tape notes per op before its budget is approached, and the build that follows.

A DTR tape whose budget is never reached should cost about what a plain tape costs
(issue 26 asks at most 5% more: on a chain of ``sin`` on 1000 floats, about 1 us an
op).  Building the eager tables per op (a :class:`~remat.graph.value.Value` with its
slots, readers and heuristic fields, a resident table, a count of holders per
buffer) cost about 10 us an op.  So until what an op saves would pass ``m``,
:class:`Pending` notes per op only what its record does not keep (a chain's op,
the common case, noted by the hook itself, :func:`on_record`, without a call):

* what runs the op again: the record, its forward keywords, and per input the
  record of this tape that made it (checked to be the array read) or the array
  itself (a constant, held as a recipe holds it, or a leaf's); of the output, a
  weak reference (the check above; and an array no record saves, a recomputation
  later reads while it is alive, as an eager tape's does) and its dtype;
* when the op ended (one clock read: an op's cost is the time since the op before);
* the fingerprints of the constants it read while something was handed out
  (:mod:`remat.guard`): they must be taken before user code can change them;
* a bound of the byte count: the bytes of each buffer its record saves (and of
  its constants), added up without asking whether another note holds it too, so
  never less than the count by the eager rules (by buffer, each once, a leaf's
  buffer uncounted, a constant a recipe holds counted).  Asking that, per op, cost
  more than all the rest.  The bound is also *exact* (it is the count) while no
  buffer was added twice, which the common case shows at no cost: an op saving
  only its input, made by the op noted just before (whose readers are all noted
  later), that saved only its own input, is the first to hold it.  Where a buffer
  may be held twice (a view, an output its op saves, a value read twice, a
  constant), :meth:`Pending.sync` counts exactly (``owned``: the id of each
  buffer counted) when the count must be known: when the bound would pass ``m``
  (from there on each op is counted exactly), for ``tape.stats``, and before a
  sweep lets records go.  Nothing is let go between two counts (records live
  until a sweep), so the peak is the latest count.  The first ``before_vjp``
  call of a sweep that reaches a noted record so raises the peak, marks the count
  stale and stops the calls; the next op counts again what the records still
  alive save (:meth:`Pending.recount`).

Deferred, to :func:`build`, run at the first op whose saved arrays would pass ``m``
by the exact count (the one point where eviction may be needed; no margin is
kept): the Values, the slots, the readers
(``h_dtr_eq``), the resident table the heuristics score, the holder counts, the
costs and clock ticks; then the tape runs eagerly (:class:`~remat.graph.dtr.Cache`)
for good.  Nothing of the replay check is deferred: a value is fingerprinted when
it is evicted, before its array is dropped, and its recomputation is checked
against that fingerprint (shape and dtype always).  Staleness differs from an
eager tape's in one way: a reverse sweep run while the tape was lazy ticks no clock.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from .. import backend, guard
from ..alive import keyword_arrays
from ..tape import FORWARD_MODE, OPEN_TAPE, Leaf, Record
from .value import Value

_clock, _weak, _is_array, _owner = (
    time.perf_counter,
    weakref.ref,
    backend.is_array,
    backend.memory_owner,
)
_watched = guard.WATCHED  # (a dict, changed in place: what was handed out)
_open_tape, _forward_mode = OPEN_TAPE.get, FORWARD_MODE.get

LEAF = -1
"""What ``Pending.owned`` maps a leaf's buffer to (it is not counted)."""


class Pending:
    """The notes of a DTR tape that has not approached its budget (see the module)."""

    def __init__(self) -> None:
        self.notes: list[tuple] = []  # in the order recorded
        self.index: dict[int, tuple] = {}  # id(record) -> note, of the first notes (find)
        # id of each buffer counted (alive until a sweep) -> id of the record that
        # first held it; leaves' buffers (not counted) -> LEAF
        self.owned: dict[int, int] = {}
        self.counted = 0  # the first notes, counted in `owned` and the cache's bytes
        # the cache's bytes and, per note after those, its arrays' buffers' bytes (a
        # buffer may be in several: at least the count, were all counted); `exact`
        # while none is (then the bound is the count)
        self.bound, self.exact = 0, True
        self.last: Any = None  # the record noted last
        # the record noted last, if an op reading its output may be noted by
        # on_record's fast path (a buffer of its own, which the record does not save;
        # no sweep since), else None; and (the check that it is read as made) its
        # output's weak reference
        self.chain: Any = None
        self.ref: Any = _UNSEEN
        # a sweep has reached a noted record since the count was taken: count again
        # (and be watched by before_vjp again) at the next op; first, be watched
        self.swept = True
        self.pruned = 0  # notes dropped: with the notes kept, the ops recorded

    def record(self, cache: Any, record: Record, datas: Any, kwargs: Any, out: Any) -> bool:
        """Note ``record``; False (noting nothing) when what it saves would pass the
        budget: the tape must then build its tables and evict.  (A chain's op, the
        common case, is noted by :func:`on_record` itself, alike.)"""
        now = _clock()
        if self.swept:  # a sweep reached noted records: it may have released some
            self.recount(cache)
        inputs, consts, checks, adding = self._resolve(cache, record, datas)
        if kwargs or record.kwargs:  # an index table its keywords keep: a constant
            extra = keyword_arrays(kwargs, record.kwargs)
            if extra:
                consts = (*consts, *extra)
                adding += sum(a.nbytes if a.base is None else _owner(a).nbytes for a in extra)
                self.exact = False
        ref = _weak(out)
        note = (record, kwargs, inputs, ref, out.dtype, now, checks, consts)
        bound = self.bound + adding
        if bound > cache.limit:  # near the budget: count exactly
            if not self._fits(cache, note):
                return False  # the tape builds its tables and evicts
            bound = cache.bytes
        self.bound, self.last, self.ref = bound, record, ref
        self.chain = record if record.ans is None and out.base is None else None
        self.notes.append(note)
        return True

    def _output(self, ans: Any, datas: Any) -> int:
        """The bytes of ``ans``'s buffer, an op's output its record saves: new, unless
        it is a view, or one of the op's inputs (then maybe counted twice)."""
        if ans.base is None and not any(ans is d for d in datas):
            return ans.nbytes
        self.exact = False
        return _owner(ans).nbytes

    def _resolve(self, cache: Any, record: Record, datas: Any) -> tuple:
        """Per input: its record if a value of this tape made it (read as it was made),
        else the array or number itself; the arrays held as constants and their
        fingerprints (when something was handed out); the bytes of the buffers its
        note holds (each as often as held: a bound)."""
        find, args, inputs, held = self.find, record.args, [], [record.ans]
        consts: tuple = ()
        last = self.last
        for i, node in enumerate(record.parents):
            d = datas[i]
            if node is not None:  # (the op noted last: its note is at hand, no index made)
                note = self.notes[-1] if node is last else find(id(node))
                if note is not None and note[3]() is d and node.parents is not None:
                    inputs.append(node)  # a value of this tape: its record remakes it
                    held.append(args[i])
                    continue
            inputs.append(d)
            if _is_array(d):
                if isinstance(node, Leaf):
                    o = d if d.base is None else _owner(d)
                    cache.leaf(o)
                    self.owned[id(o)] = LEAF
                else:
                    consts += (d,)
        checks = None
        if _watched:  # fingerprints of what it read that user code may change
            checks = guard.checks(datas)
        ans, saved = held[0], [a for a in held[1:] if a is not None]  # (this tape's values)
        adding = 0 if ans is None else self._output(ans, datas)
        if saved or consts:  # (a value the op before made, alone: saved by no note yet)
            if consts or len(saved) > 1 or not self._alone(record, saved[0]):
                self.exact = False
            adding += sum(a.nbytes if a.base is None else _owner(a).nbytes for a in saved)
            adding += sum(a.nbytes if a.base is None else _owner(a).nbytes for a in consts)
        return tuple(inputs), consts, checks, adding

    def _alone(self, record: Record, a: Any) -> bool:
        """Whether ``a``, the one value of this tape ``record`` saves, is held by no
        note yet: a buffer of its own, made by the op before, whose record saves only
        its input.  (Who else read it was noted later: that op would be the last.)"""
        last = self.last
        if a.base is not None or last is None or last.ans is not None:
            return False
        return any(node is last and s is a for node, s in zip(record.parents, record.args))

    def _fits(self, cache: Any, note: tuple) -> bool:
        """Near the budget (the bound passes it): count exactly the notes the bound
        alone counted, then ``note``'s op; whether its arrays fit (if so, counted)."""
        self.sync(cache)
        owned, mark = self.owned, id(note[0])
        total = _count((note,), owned, cache.bytes)[0]
        if total > cache.limit:  # undo: the tape builds its tables and evicts
            for k in [k for k, m in owned.items() if m == mark]:
                del owned[k]
            return False
        cache.bytes = total
        stats = cache._stats
        if total > stats.peak_bytes:
            stats.peak_bytes = total
        self.counted = len(self.notes) + 1  # with this op's note, to be made
        return True

    def sync(self, cache: Any) -> None:
        """Count exactly (each buffer once, a leaf's not) the notes the bound alone
        counted, and raise the peak to the count: it only grew since the last time
        (nothing is let go until a sweep, whose first ``before_vjp`` call syncs)."""
        notes = self.notes
        if self.counted < len(notes):
            fresh = notes[self.counted :]  # (a sweep of another thread may call)
            total, released = _count(fresh, self.owned, cache.bytes)
            cache.bytes, self.counted = total, len(notes)
            stats = cache._stats
            peak = self.bound if released else total  # (the bound: at least what was held)
            if peak > stats.peak_bytes:
                stats.peak_bytes = peak
        self.bound, self.exact = cache.bytes, True

    def reached(self, cache: Any) -> None:
        """A sweep reached a noted record (its first ``before_vjp`` call): the peak is
        raised to the count before records go, and the count taken again at the next
        op (which :func:`on_record` so leaves to :meth:`record`: ``last`` is forgotten)."""
        self.update_peak(cache)
        self.swept, self.last, self.chain = True, None, None

    def update_peak(self, cache: Any) -> None:
        """Raise the peak to the count (for ``tape.stats``, or before a sweep lets
        records go): the bound, while exact; else the notes are counted (:meth:`sync`)."""
        if not self.exact:
            self.sync(cache)
        elif self.bound > cache._stats.peak_bytes:
            cache._stats.peak_bytes = self.bound

    def recount(self, cache: Any) -> None:
        """Count again, exactly, what the records still alive save (a reverse sweep
        reached some, and may have released them): each buffer once, a leaf's not.
        The sweeps to come are watched again."""
        self.update_peak(cache)  # (before the sweep: its first before_vjp call did)
        self.swept = False
        cache.watch()
        self.prune()
        owned = dict.fromkeys(cache.leaves, LEAF)
        cache.bytes = self.bound = _count(self.notes, owned, 0)[0]
        self.owned, self.counted, self.exact = owned, len(self.notes), True
        self.last = self.chain = None

    def forgetting(self, cache: Any) -> dict[int, tuple]:
        """The tape is entered again (:func:`remat.graph.dtr.forget`): the peak
        raised to the count, the notes handed over by record id, in order (no list nor
        index here holds them meanwhile: a note let go lets go of its inputs)."""
        self.update_peak(cache)
        notes = {id(note[0]): note for note in self.notes}
        self.pruned += len(notes)  # (less those kept, once known: the ops stay counted)
        self.notes, self.index, self.last, self.chain = [], {}, None, None
        return notes

    def forgot(self, cache: Any, notes: dict[int, tuple], dropped: bool) -> None:
        """The notes kept (those of records a backward can still reach), counted again
        if some were ``dropped`` (else the count stands)."""
        kept = list(notes.values())
        self.pruned -= len(kept)
        self.notes = kept
        if not dropped:
            return
        owned = dict.fromkeys(cache.leaves, LEAF)
        cache.bytes = self.bound = _count(kept, owned, 0)[0]
        self.owned, self.counted, self.exact = owned, len(kept), True

    def prune(self) -> None:
        """Drop the notes of records backward has released (their constants with them)."""
        kept = [n for n in self.notes if n[0].parents is not None]
        self.pruned += len(self.notes) - len(kept)
        self.notes, self.index = kept, {}

    def find(self, key: int) -> tuple | None:
        """The note of the record whose id is ``key``, or None.  The index is made
        when asked (by an op reading a value not made just before, by a sweep): not
        per op.  (Its entries are as many as the notes it covers: ids alive differ.)"""
        notes, index = self.notes, self.index
        if len(index) < len(notes):
            index.update({id(note[0]): note for note in notes[len(index) :]})
        return index.get(key)

    @property
    def ops(self) -> int:
        """The ops noted so far (``tape.stats.ops`` while lazy)."""
        return self.pruned + len(self.notes)


def on_record(record: Record, datas: Any, kwargs: Any, out: Any) -> None:
    """The core's ``on_record`` hook while a DTR tape is open (in any thread): ``record``
    goes to the DTR tape open here, if any: to its cache's
    :meth:`~remat.graph.dtr.Cache.record` once built, else to :meth:`Pending.record`
    (and to both at the op whose saved arrays would pass the budget).

    A chain's op, the common case, is noted here, inlined: one input, the output of
    the op noted last as it made it (not a rebound tensor's new array), a buffer of
    its own that op did not save; it saves only that input, and takes no keywords.
    Then no other note holds the buffer (the bound stays exact), and the note is
    :meth:`Pending.record`'s without its search for the input's note, nor a call:
    bench_dtr's chain spends about 0.3 us less an op, of the 1 us issue 26 allows.
    tests/graph/test_dtr_lazy.py checks both paths give the same notes and counts."""
    tape = _open_tape()
    if tape is None or tape.dtr_cache is None:
        return
    cache = tape.dtr_cache
    if _forward_mode():
        raise ValueError(
            f"rm.jvp recording inside rm.Tape({cache.form}) is not supported: its forward "
            "sweep reads saved values that DTR may have evicted"
        )
    pending = cache.pending
    if pending is not None:
        parents, a = record.parents, record.args[0]
        if (
            parents[0] is pending.chain  # (so not after a sweep reached a note: reached)
            and len(parents) == 1
            and pending.ref() is datas[0]
            and a is not None
            and record.ans is None
            and not (kwargs or record.kwargs)
        ):
            now, ref = _clock(), _weak(out)
            checks = guard.checks(datas) if _watched else None  # (a value's .data)
            note = (record, None, parents, ref, out.dtype, now, checks, ())
            bound = pending.bound + a.nbytes
            if bound > cache.limit:  # near the budget: count exactly
                if not pending._fits(cache, note):
                    cache.record(record, datas, kwargs, out)  # builds the tables, evicts
                    return
                bound = cache.bytes
            pending.bound, pending.last, pending.ref = bound, record, ref
            pending.chain = record if out.base is None else None
            pending.notes.append(note)
            return
        if pending.record(cache, record, datas, kwargs, out):
            return
    cache.record(record, datas, kwargs, out)


def _count(notes: Any, owned: dict, total: int) -> tuple[int, bool]:
    """``total`` plus the bytes of the buffers ``notes`` hold (the constants their
    recipes keep, what their records save of this tape's values and of their outputs)
    that ``owned`` has not, each once, noted there (by the record first holding it);
    and whether the record of one of them was released (holding nothing now)."""
    released = False
    for note in notes:
        record = note[0]
        args = record.args
        if args is None:
            released = True
            continue
        mark, inputs = id(record), note[2]
        if len(args) == 1:  # (the common case, unrolled)
            held = (args[0] if type(inputs[0]) is Record else None, record.ans, *note[7])
        else:
            saved = [a if type(u) is Record else None for a, u in zip(args, inputs)]
            held = (*saved, record.ans, *note[7])
        for a in held:
            if a is not None:
                o = a if a.base is None else _owner(a)
                if id(o) not in owned:
                    owned[id(o)] = mark
                    total += o.nbytes
    return total, released


def build(cache: Any, pending: Pending) -> None:
    """Make ``cache``'s tables (Values, slots, readers, resident values, the count
    by the eager rules, the clock) from ``pending``'s notes, as if each op had been
    recorded eagerly; released records give pinned Values (what read them cannot be
    remade).  An op's cost is the time from the note before it (or the tape's start)."""
    made: dict[int, Value] = {}
    cache.bytes = 0  # counted again below, by the eager rules
    tick = pending.pruned  # a tick per op, as eagerly
    before = cache.time
    for record, kwargs, inputs, ref, dtype, now, checks, consts in pending.notes:
        ins = tuple(_source(made, u) if type(u) is Record else u for u in inputs)
        tick += 1
        v = Value(record, kwargs, ins, ref, dtype, now - before, tick)
        before, v.index = now, tick - 1
        made[id(record)] = v
        if record.parents is None:  # released by a backward run while lazy
            v.pin()
            continue
        v.checks, v.consts = checks, consts
        held = list(consts)
        v.link(cache, held)
        for a in held:
            cache.hold(a)
    cache.clock, cache.time, cache._stats.ops = tick, before, pending.ops


def _UNSEEN() -> None:
    """The weak reference of the value of a record whose note was pruned: its array
    is not known (nothing can remake it)."""


def _source(made: dict, record: Record) -> Any:
    """The Value of ``record`` (made already, being older), or a pinned one for a record
    whose note was pruned: backward released it, nothing can remake its output."""
    v = made.get(id(record))
    if v is None:
        v = Value(record, None, (), _UNSEEN, None, 0.0, 0)
        v.pin()
        made[id(record)] = v
    return v
