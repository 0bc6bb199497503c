"""The optimal plan of a recorded graph, run on the tape: ``rm.Tape(memory=m, remat="optimal")``.

A training loop runs the same program again and again::

    tape = rm.Tape(memory=m, remat="optimal")   # or remat=remat.graph.Planned(...)
    for step in range(n):
        with tape:
            loss = f(params, x)
        loss.backward()

Each run (from entering the tape to the end of its backward) is recorded
(:class:`remat.graph.recording.Run`): per op its signature, its measured time and
its output's bytes, and in the reverse sweep the order of the VJPs and their times.
The first run has no plan: it runs under DTR (:mod:`remat.graph.dtr`, so within
``m``).  When its backward ends (in the hook before the last VJP, which is then
timed on a cotangent of ones: no hook follows a sweep; once a plan's prediction is
settled, not any more), its graph
(:func:`remat.graph.joint.joint`: a node per op whose output a record saves, the
others folded into the recipes of those made from them, then a node per VJP) is
planned within ``m`` by :func:`remat.schedules.plan_graph`, or the plan is taken
from the cache of plans (:mod:`remat.graph.plans`, keyed by the run's signature).
Later runs follow the plan, stage by stage (a stage per node):

* forward (the ``on_record`` hook, as op ``k`` records): the values of the stages
  before it that the plan no longer holds are evicted (those a record saves, once
  nothing else holds them), then the op is noted as DTR notes it
  (:meth:`Cache.record`, which also keeps the budget) and its signature checked
  against the plan's op ``k``.  A forward stage's recomputations are not run: user
  code holds what an op reads, so a value the plan recomputes there is still in
  memory, and is evicted only after the last forward stage that recomputes it;
* VJP (the ``before_vjp`` hook): what the stage before no longer holds is evicted,
  then the values the plan computes in this stage are brought back in its order
  (:meth:`Cache.materialize`: the value and its recipe, from the values held), each
  followed by the eviction of those it read for the last time in the stage (the
  plan frees them there); a value no record holds any more (its readers were
  reversed) that the plan keeps is held by the tape itself.

What cannot follow the plan keeps the budget by DTR's rules, and says so.  A run
whose op ``k`` differs from the plan's (another op, shape, dtype, source of an
input, keyword), that records more or fewer ops, or whose sweep reverses another
op than the plan's, goes on under DTR from there (``stats.planned`` False,
``stats.fallback`` names the op and the step); it is recorded all the same, and its
own graph is planned when its backward ends (the next run follows that).  A run
that records ops during a reverse sweep (``rm.grad`` or ``create_graph`` inside it)
or after its backward ended (a second forward) is not planned, and says so.  Where no
plan can be made (none fits; none in ``time_limit``: :class:`GraphPlanTimeout`; a
graph over :data:`~remat.graph.plans.MAX_NODES`), runs go on under DTR, with the
reason in ``stats.fallback``.  Where a value the plan evicts is still held by user
code (a Tensor it keeps, an op reading it), it is evicted once let go; the budget
is DTR's to keep meanwhile: :meth:`Cache.make_room` evicts by DTR's heuristic.
``stats.departures`` counts those evictions and the plan's evictions not made by
the time the backward starts (``stats.departed`` names the first).  When the next
run begins, the records no backward can reach any more are dropped and uncounted
(those of an evaluation, of a run an exception cut short: :func:`remat.graph.dtr.forget`),
so that the plan has its room; those of a finished run that its sweep did not reach
are let go even where user code keeps a value they made; a later sweep reaching one
is refused where the plan evicted what it saves.

Bytes.  The budget is DTR's: ``tape.stats.peak_bytes`` counts the values the
records save, each buffer once, the constants the ops read and the values held
while recomputing, never above ``m`` (:mod:`remat.graph.dtr`).  The plan counts
each op value from its op to its last reader (or while kept) at its buffer's bytes
(or its recipe's most, while recomputed), cotangents at 0, within ``m`` less the
constants' bytes (:mod:`remat.graph.joint`): at least what DTR counts of a run that
follows it, so such a run evicts nothing the plan does not.

Time.  An op costs, in the forward, the time from the tape's work for the op
before to the end of its own (the op, the Python code before it, recording it and
noting it), less what the tape spent evicting meanwhile; a VJP the time from its
``before_vjp`` hook's start to the next's, less what the hooks spent recomputing.
Recomputing an op costs its own time (:meth:`Run.price
<remat.graph.recording.Run.price>`: as timed where it was recomputed) and the tape's
work per op recomputed (``Run.overhead``: evicting it, fingerprinting it, bringing it
back).  ``stats.predicted_seconds`` is what a run under the plan takes: the forward
once, every VJP, the run's time outside them (``Run.outside``), and the op values
(with their recipes) recomputed before VJPs; ``stats.predicted_recomputed_ops``
counts those op evaluations.  The first run's costs carry DTR's own work; the runs
that then follow a plan to its end are timed too, and where their median time is off
the prediction, the graph is planned again with their costs
(:func:`remat.graph.plans.refine`; ``stats.replanned`` says so).

Gradients are store-all's bit for bit whatever is followed: every value is the
same op run on the same inputs (DTR's replay check stands guard).
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
import warnings
from typing import Any

from .. import backend
from ..tape import BackwardError, Record
from . import dtr
from .dtr import Cache
from .options import DTR, Planned, PlanStats
from .plans import Entry, clear_plans, planned_for, refine
from .recording import Run
from .value import Value

__all__ = ["PlannedCache", "cache", "clear_plans", "entered"]


def cache(limit: int, remat: DTR | Planned, check_replay: bool | str = True) -> Cache:
    """The cache a ``Tape(memory=limit, remat=remat)`` keeps its saved values in."""
    if isinstance(remat, Planned):
        return PlannedCache(limit, remat, check_replay)
    return Cache(limit, remat, check_replay)


def entered(tape: Any) -> None:
    """``tape`` (of a DTR or planned cache) is entered.  Entered again while open nowhere,
    its list and its cache first drop the records no backward can reach any more
    (:func:`remat.graph.dtr.forget`); then a planned one starts a
    run, and its list drops those of the run before that its finished sweep did not
    reach although user code still holds them (:meth:`PlannedCache._let_go`)."""
    if tape.records and not tape.open:
        dtr.forget(tape.dtr_cache, tape.records)
    if isinstance(tape.dtr_cache, PlannedCache):
        gone = tape.dtr_cache.begin()
        tape.records[:] = [r for r in tape.records if not r.freed and id(r) not in gone]
    dtr.entered()


def _let_go_slots(record: Record, cache: Cache) -> None:
    """Put ``cache.stale`` (made at the first) in the slots of ``record``, let go of,
    that hold an evicted value's placeholder (a :class:`Value`): not to be brought back."""
    args, ans = record.args, record.ans
    if type(ans) is not Value and not any(type(a) is Value for a in args):
        return
    mark = cache.stale = cache.stale or object()
    if type(ans) is Value:
        record.ans = mark
    record.args = tuple(mark if type(a) is Value else a for a in args)


def _refuse_stale(cache: Cache, record: Record) -> None:
    """Refuse to reverse ``record`` if :meth:`PlannedCache._let_go` let go of it holding
    values the plan had evicted (user code kept a value the run's backward did not
    reach, and a later backward reaches it): those cannot be brought back."""
    mark = cache.stale
    if record.ans is mark or any(a is mark for a in record.args):
        raise BackwardError(
            f"backward through `{record.op.name}` (output shape {record.shape}), "
            f"recorded by an earlier run of rm.Tape(memory={cache.limit}, {cache.form}) "
            "whose backward did not reach it: when the next run began, the tape let go "
            "of what it saved, some of it evicted and not to be remade. Detach a value "
            "kept from one run for another (Tensor.detach()), or let a run's backward "
            "reach what it records"
        )


class PlannedCache(Cache):
    """A DTR cache that follows the plan of the recorded graph (see the module)."""

    stats: PlanStats
    form = "remat='optimal'"
    refuse_stale = _refuse_stale  # (dtr's before_vjp hook: a record let go, reached)

    def __init__(self, limit: int, planned: Planned, check_replay: bool | str = True) -> None:
        super().__init__(limit, planned.dtr, check_replay)
        self.pending = None  # the tables from the first op: the plan evicts from there
        self.options = planned
        self.next: Entry | None = None  # what the next run follows
        self.entry: Entry | None = None  # the plan followed now
        self.run = Run()
        self.kept: dict[int, tuple[Value, Any]] = {}  # id(Value) -> (it, its array), held
        self.owed: set[int] = set()  # nodes the plan let go that are still in memory
        self.planning = False  # the plan is evicting (else DTR's heuristic is)
        self.vjp_from: tuple[int, float, float] | None = None  # (op, when its stage began,
        self.spent = 0.0  # and self.spent then): seconds spent evicting and recomputing
        self.spending = 0  # how deep in evict / materialize (the outermost one counts)
        self.spent_before = 0.0  # self.spent when the run began
        self.mark = (time.perf_counter(), 0.0)  # when the last op was noted, self.spent then
        self.began = self.mark[0]  # when the run began
        self.stats = PlanStats(memory=limit, heuristic=planned.dtr.name)

    # --- a run ---------------------------------------------------------------------
    def begin(self) -> set[int]:
        """A run starts (the tape is entered): follow the plan of the last graph planned;
        the ids of the records of the run before let go (:meth:`_let_go`).  The run's
        time starts here: this work is the first op's (a run under the plan does it)."""
        started = time.perf_counter()
        self._drop_released()  # the last record the previous sweep reversed: uncounted
        self._unkeep()
        gone = self._let_go(self.run)
        self.run, self.owed, self.vjp_from = Run(), set(), None
        entry = self.next
        stats = PlanStats(memory=self.limit, heuristic=self.stats.heuristic)
        stats.peak_bytes = self.bytes
        if entry is None:
            stats.fallback = (
                "no plan yet: this run records the graph, planned when its backward ends"
            )
        else:
            _describe(stats, entry, solved=False)
            if entry.plan is None:
                stats.fallback = entry.reason
            else:
                stats.planned, stats.method = True, entry.plan.method
        self.entry = entry if entry is not None and entry.plan is not None else None
        self.stats = stats
        self.time = self.began = started
        self.mark = (self.time, self.spent)
        self.spent_before = self.spent
        return gone

    def _let_go(self, run: Run) -> set[int]:
        """Uncount what the records of ``run`` (the run before) that its finished sweep did
        not reach save: ops the loss does not depend on (an adaptive solver's error
        estimates), which no later sweep reverses; else each run would leave them counted,
        and the room left to the plan would shrink run by run."""
        gone: set[int] = set()
        if not run.finished:  # (a sweep that recorded ops, or a second one: kept)
            return gone
        reversed_ = set(run.order)
        for k, v in enumerate(run.values):
            if k in reversed_ or v.record.freed or v.pinned:
                continue
            if id(v.record) in self.values:
                self._release_record(v)
                _let_go_slots(v.record, self)  # (a sweep reaching it is refused)
                gone.add(id(v.record))
        return gone

    def record(self, record: Record, datas: Any, kwargs: Any, out: Any) -> None:
        """Forward stage ``t``: evict what stage ``t - 1`` let go, note the op, check it."""
        entry, run = self.entry, self.run
        if run.reachable >= 0:  # an op recorded by the backward itself (rm.grad, create_graph)
            if entry is not None or not run.ended:  # (a run planned at its end: stands)
                self._fall_back(
                    f"`{record.op.name}` was recorded after this run's backward ended (a "
                    "second forward in one run: the plan has the first)"
                    if run.finished
                    else f"`{record.op.name}` was recorded during a reverse sweep of this run "
                    f"(after its VJP {len(run.order) - 1}: rm.grad, create_graph), so the "
                    "run is not planned"
                )
            run.ended = True  # this run is not planned: its graph is not a forward's
            super().record(record, datas, kwargs, out)
            return
        t = len(run.values)
        if entry is not None and (t in entry.at_op or self.owed):
            self._drop(entry.at_op.get(t, ()))
        super().record(record, datas, kwargs, out)
        v = self.values[id(record)]
        signature = run.add(v, out, self.leaves, self._owner)
        if entry is not None:
            differs = _differs(entry, t, signature, v)
            if differs is not None:
                self._fall_back(differs)
            elif (c := entry.joint.node.get(t)) is not None:  # what the plan recomputes to keep
                self._follow(entry.steps[c])
        self.time = now = time.perf_counter()  # the next op's time starts here
        mark, spent = self.mark  # this op's time, with the tape's work for it, less evicting
        run.cost[t] = now - mark - (self.spent - spent)
        self.mark = (now, self.spent)

    def before_vjp(self, record: Record) -> None:
        """VJP stage: time the last VJP, follow the plan, put back what the VJP reads."""
        now = time.perf_counter()
        run = self.run
        if self.vjp_from is not None:  # the stage before: its hook and VJP, less recomputing
            before, began, spent = self.vjp_from
            run.vjp[before] = now - began - (self.spent - spent)
            self.vjp_from = None
        v = self.values.get(id(record))
        k = None if v is None else run.node.get(id(v))
        if v is None or k is None or run.ended:  # not this run's op, or a second sweep
            if k is not None and self.entry is not None:
                self._fall_back(f"a second reverse sweep reached `{record.op.name}` (op {k})")
            super().before_vjp(record)
            return
        if run.reachable < 0:
            self._sweep_starts(k)
        run.order.append(k)
        spent = self.spent
        if self.entry is not None:
            self._stage(self.entry, k, record)
        super().before_vjp(record)
        if len(run.order) == run.reachable:  # the last: this hook, and the VJP timed apart
            run.vjp[k] = time.perf_counter() - now - (self.spent - spent)
            if self.entry is None or not self.entry.settled:  # (else its costs are not used)
                run.vjp[k] += _vjp_seconds(record, v)
            self._end()
        self.vjp_from = (k, now, spent)

    def materialize(self, target: Value) -> Any:
        """DTR's, timed (an op's or a VJP's time is its stage's, less this)."""
        started = time.perf_counter()
        self.spending += 1
        try:
            return super().materialize(target)
        finally:
            self.spending -= 1
            if not self.spending:
                self.spent += time.perf_counter() - started

    def _sweep_starts(self, root: int) -> None:
        self.run.start_sweep(root)
        if self.entry is None:
            return
        self._drop(())
        for k in sorted(self.owed):
            v = self.run.values[k]
            if id(v) in self.resident:
                self._depart(
                    f"user code still holds `{v.op.name}` {v.shape} (op {k}) when the "
                    "backward starts, which the plan evicts"
                )

    def _stage(self, entry: Entry, k: int, record: Record) -> None:
        run, n = self.run, len(entry.signature)
        i = len(run.order) - 1  # the i-th VJP, in stage t of the plan
        if len(run.values) != n or i >= len(entry.order) or entry.order[i] != k:
            expected = f"op {entry.order[i]}'s" if i < len(entry.order) else "no"
            self._fall_back(
                f"VJP {i} of the sweep reverses `{record.op.name}` {record.shape} (op {k} of "
                f"{len(run.values)}), where the plan of {n} ops has {expected} VJP"
            )
            return
        t = entry.joint.stage[i]
        if i and entry.joint.stage[i - 1] == t:  # the stage began with a VJP before this one
            return
        prev = self.reversing  # the record reversed last is released: its saves uncounted
        if prev is not None and prev.record.parents is None:
            self._release_record(prev)
            self.reversing = None
        self._drop(entry.drops[t - 1])
        self._follow(entry.steps[t])

    def _follow(self, steps: tuple[tuple[int, tuple[int, ...]], ...]) -> None:
        """Compute the values of a stage as the plan does, each from what is held, and
        evict each value once the stage has read it for the last time."""
        for j, gone in steps:
            v = self.run.values[j]
            if v.pinned:  # reversed already: no later VJP reads it (a plan may hold it still)
                self._drop(gone)
                continue
            a = self.materialize(v)
            if not v.slots:  # no record saves it now (or yet): the tape holds it
                self._keep(v, a)
            self._drop(gone)

    def _end(self) -> None:
        """The run's backward ends: plan its graph unless it followed its plan to here."""
        run, stats = self.run, self.stats
        run.ended = run.finished = True
        spent = self.spent - self.spent_before
        timed = sum(run.cost) + sum(run.vjp.values()) - run.vjp[run.order[-1]] + spent
        run.outside = max(0.0, time.perf_counter() - self.began - timed)
        run.total = timed + run.vjp[run.order[-1]] + run.outside
        if stats.recomputed_ops:  # what evicting and recomputing cost beyond the ops run
            extra = spent - stats.recompute_seconds
            run.overhead = max(0.0, extra) / stats.recomputed_ops
            again = stats.recomputed_by_op  # their own times, as the last recomputation took
            run.raw = {k: v.cost for k, v in enumerate(run.values) if v.index in again}
            if run.raw:  # (none where what was recomputed is an earlier run's)
                gaps = [run.cost[k] - t for k, t in run.raw.items()]
                run.gap = max(0.0, statistics.median(gaps))
        if self.entry is not None:  # followed to here: its costs price the plan again
            if not tracemalloc.is_tracing():  # (tracing slows the ops that allocate)
                self.next, stats.replanned = refine(self.entry, run, self.limit, self.options)
            return
        entry, solved = planned_for(run, self.limit, self.options)
        self.next = entry
        _describe(self.stats, entry, solved)

    # --- following the plan ---------------------------------------------------------
    def _drop(self, ops: tuple[int, ...]) -> None:
        """Evict the values of ``ops`` (and those owed from before) where nothing else
        holds them; in the forward, one no record saves yet is evicted once one does."""
        owed = self.owed
        owed.update(ops)
        values, forward = self.run.values, self.run.reachable < 0
        self.planning = True
        try:
            for k in list(owed):
                v = values[k]
                if id(v) in self.kept:
                    self._unkeep(v)
                elif id(v) in self.resident:
                    freeable = self._freeable(v)  # its array or None (a bool on h/dtrfast)
                    if freeable is None or freeable is False:
                        continue  # user code (or the op running) holds it: later
                    self.evict(v)
                elif forward and not v.evicted and not v.pinned:
                    continue  # not saved yet: its reader comes
                owed.discard(k)
        finally:
            self.planning = False

    def _keep(self, v: Value, a: Any) -> None:
        """Hold ``a``, the array of ``v``, which the plan keeps and no record saves (until
        the plan lets it go, or DTR needs the room: :meth:`_choose`)."""
        if id(v) not in self.kept:
            self.make_room([a], v.record)
            self.hold(a)
            self.kept[id(v)] = (v, a)

    def _unkeep(self, v: Value | None = None) -> None:
        """Let go of what the tape holds for the plan: ``v``'s array, or all."""
        for key in [id(v)] if v is not None else list(self.kept):
            self.release(self.kept.pop(key)[1])

    def _choose(self) -> Value | None:
        """DTR's choice, else a value the tape holds for the plan (let go, not evicted)."""
        v = super()._choose()
        if v is None and self.kept:
            v = next(iter(self.kept.values()))[0]
        return v

    def evict(self, v: Value) -> None:
        if id(v) in self.kept and not self.planning:  # DTR needs the room: a departure
            self._depart(f"DTR let go of `{v.op.name}` {v.shape}, which the plan keeps")
            self._unkeep(v)
            return
        if not self.planning and self.entry is not None:
            k = self.run.node.get(id(v))
            self._depart(
                f"DTR evicted `{v.op.name}` {v.shape} (op {k}) to keep the budget, at op "
                f"{len(self.run.values)} of the run"
            )
        started = time.perf_counter()
        self.spending += 1
        try:
            super().evict(v)
        finally:
            self.spending -= 1
            if not self.spending:
                self.spent += time.perf_counter() - started

    def _depart(self, what: str) -> None:
        self.stats.departures += 1
        if self.stats.departed is None:
            self.stats.departed = what

    def _fall_back(self, reason: str) -> None:
        """Go on under DTR for the rest of this run."""
        self.entry = None
        self._unkeep()
        self.owed.clear()
        stats = self.stats
        stats.planned, stats.method = False, "dtr"
        stats.fallback = f"{reason}; the rest of this run is DTR's"


def _differs(entry: Entry, t: int, signature: tuple, v: Value) -> str | None:
    """Why op ``t`` (``v``, of ``signature``) is not the plan's op ``t``, or None if it is."""
    if t < len(entry.signature) and signature == entry.signature[t]:
        return None
    planned = (
        f"`{entry.signature[t][0]}` {entry.signature[t][1]}"
        if t < len(entry.signature)
        else f"no op (its graph has {len(entry.signature)})"
    )
    return (
        f"at step {t} the run recorded `{v.op.name}` {v.shape} where the "
        f"plan has {planned}, or an input or keyword differs: the program changed"
    )


def _describe(stats: PlanStats, entry: Entry, solved: bool) -> None:
    stats.plan, stats.graph, stats.names = entry.plan, entry.joint.graph, entry.joint.names
    first: dict[int, int] = {}  # a VJP node -> the op of its first VJP in the sweep
    for k, node in zip(entry.joint.order, entry.joint.stage):
        first.setdefault(node, k)
    stats.columns = [*entry.joint.ops, *(first[node] for node in sorted(first))]
    stats.solve_seconds, stats.solved = entry.seconds, solved
    stats.predicted_seconds, stats.predicted_recomputed_ops = entry.predicted()


def _vjp_seconds(record: Record, v: Value) -> float:
    """The time of ``record``'s VJP rules on a cotangent of ones (the sweep's last VJP,
    which no hook follows), or its forward's where they cannot run so."""
    args, ans, kw, vjps = record.args, record.ans, record.kwargs or {}, record.op.vjps
    try:
        g = backend.xp.ones(record.shape, v.dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            for i, node in enumerate(record.parents):
                if node is not None:
                    vjps[i](backend.ARRAY_NAMESPACE, g, ans, *args, **kw)
            return time.perf_counter() - start
    except Exception:  # noqa: BLE001  (a cost, not a result: the op's own time stands in)
        return v.cost
