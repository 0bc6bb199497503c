"""The plans of recorded graphs: made once per signature, cached, and prepared for the tape.

:func:`planned_for` gives the plan of a run's graph (:func:`~.joint.joint`) within
``m``: from the cache, keyed by the run's op signatures, the sweep's order, the
budget and the solver's options (the last :data:`CACHE_SIZE`, failures too, so
that no run solves again what a run solved already), else made by
:func:`remat.schedules.plan_graph` (or the reason none was: none fits, none in
``time_limit`` (:class:`~remat.schedules.GraphPlanTimeout`), a graph over
:data:`MAX_NODES`).  An :class:`Entry` holds it with what the tape does at each
stage, in the run's op numbers.

The first run's costs are timed under DTR, whose own work (choosing what to evict,
its bookkeeping) the ops' times then carry, a few times what a run under a plan
spends; so the runs that follow a plan to its end are timed too (:func:`refine`:
each op's and VJP's time, the ops' own times where recomputed, the tape's work per
op recomputed, the whole run), and where the median of :data:`TIMED_RUNS` runs'
times is off the plan's prediction by more than :data:`REPLAN_TOLERANCE`, the graph
is planned again with their median costs (at most :data:`MAX_REPLANS` times per
signature; then the plan stands, its prediction priced with them), for the runs
after.  A run traced by tracemalloc, which slows allocating ops, is not timed for
costs.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from ..schedules import GraphCosts, GraphPlan, plan_graph, simulate_graph
from ..schedules.graph_plan import GraphPlanTimeout
from .joint import Joint, joint
from .recording import Run

SCALE = 1e6
"""Costs go to the solver in microseconds: HiGHS proved plans of measured times in
seconds (objectives of about 1e-4) several times slower, near its tolerances."""

GAP = 1e-3
"""The relative gap within which HiGHS' plan is taken as optimal: 0.1% of the run's
predicted time, far below what timing its ops resolves.  (plan_graph's default, 1e-6,
kept HiGHS proving the U-Net's 38-node graph at a third of store-all's bytes past its
18 s, at a gap of 0.003%; at 1e-3 it stops in about 4 s.)"""

CACHE_SIZE = 32
"""Plans (and failures to plan) kept, the least recently used dropped first."""

MAX_NODES = 700
"""The largest graph handed to the solver: its MILP has ``T^2`` binaries, and building
it alone takes seconds at a few hundred nodes; larger graphs run under DTR."""

REPLAN_TOLERANCE = 0.1
"""A plan is made again when the costs timed under it put its prediction off by more
than this share."""

MAX_REPLANS = 2
"""The most times one signature's graph is planned again from the costs timed under its plan."""

TIMED_RUNS = 3
"""The runs under a plan timed before its prediction is checked: their median prices it
(one run's times swing with the machine's load)."""

Timed = tuple[list[float], dict[int, float], float, float, dict[int, float], float, float]
"""What a run under a plan is timed for: its ops', its VJPs', its overhead, its outside,
its ops' own times where recomputed, their gap to the forward's, its total."""

_PLANS: OrderedDict = OrderedDict()


def clear_plans() -> None:
    """Forget every cached graph plan (the next run that ends is planned afresh).

    >>> from remat.graph import planned
    >>> planned.clear_plans()
    """
    _PLANS.clear()


class Entry:
    """A plan (or the reason there is none) for one signature, and what the tape does.

    ``drops[t]``: the ops whose values go once stage ``t`` ends (held entering it or
    computed in it, and not kept); ``steps[t]``: the ops whose values the tape
    computes in stage ``t``, in order, each with the ops whose values go once it is
    computed (its parents and itself, where not kept nor read later in the stage).
    A VJP stage computes what it keeps and what its VJPs read; a forward stage only
    what it keeps (user code gives the op what it reads, whatever the plan
    recomputes for it).  ``at_op[k]``: the drops of the forward stage before op ``k``.
    """

    def __init__(self, plan: GraphPlan | None, graph: Joint, run: Run, reason: str | None):
        self.plan, self.joint, self.reason = plan, graph, reason
        self.signature, self.order = tuple(run.signatures), tuple(run.order)
        self.seconds = 0.0  # the time taken to plan (or to fail to)
        self.drops: list[tuple[int, ...]] = []
        self.at_op: dict[int, tuple[int, ...]] = {}
        self.steps: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
        self.again: list[int] = []  # the nodes the tape recomputes, once per time
        self.key: Any = None  # its key in the cache of plans
        self.replans = 0  # how many times this signature was planned again
        self.settled = False  # a run under it confirmed its prediction, or no more replans
        self.observed: list[Timed] = []  # the costs of the runs under it
        if plan is not None:
            self._prepare(plan)

    def _prepare(self, plan: GraphPlan) -> None:
        ops, parents, n = self.joint.ops, self.joint.graph.parents, len(self.joint.ops)
        held: frozenset[int] = frozenset()
        for t, (run, keep) in enumerate(zip(plan.compute, plan.keep)):
            self.drops.append(tuple(ops[i] for i in {*held, *run} - keep if i < n))
            # a cotangent (a node >= n) is the sweep's to hold: never computed again here
            wanted = {i for i in run[:-1] if i < n and i in keep}
            if t >= n:
                wanted.add(t)
            for i in reversed(run):
                if i in wanted:
                    wanted.update(j for j in parents[i] if j in run and j < n)
            made = [i for i in run[:-1] if i in wanted and i < n]
            steps = []
            for position, i in enumerate(made):
                later = {j for c in (*made[position + 1 :], t) for j in parents[c]}
                freed = [ops[j] for j in (*parents[i], i) if j < n and j not in keep | later]
                steps.append((ops[i], tuple(freed)))
            self.steps.append(tuple(steps))
            self.again += made
            held = keep
        for c in range(n - 1):
            self.at_op[ops[c] + 1] = self.drops[c]

    def predicted(self) -> tuple[float, int]:
        """(seconds, op evaluations) of a run under the plan, priced with the costs it was
        planned with: the forward once, every VJP, and the op values the tape recomputes
        (with their recipes)."""
        if self.plan is None:
            return 0.0, 0
        j, n = self.joint, len(self.joint.ops)
        seconds = j.forward + sum(j.graph.compute[n:]) + sum(j.graph.compute[i] for i in self.again)
        return seconds, sum(j.evaluations[i] for i in self.again)


def planned_for(run: Run, memory: int, options: Any) -> tuple[Entry, bool]:
    """``(the plan of run's graph within memory, whether it was solved now)``."""
    key = (tuple(run.signatures), tuple(run.order), memory, options.time_limit, options.relaxed)
    entry = _PLANS.get(key)
    if entry is not None:
        _PLANS.move_to_end(key)
        return entry, False
    entry = _plan(run, memory, options)
    entry.key = key
    _PLANS[key] = entry
    while len(_PLANS) > CACHE_SIZE:
        _PLANS.popitem(last=False)
    return entry, True


def refine(entry: Entry, run: Run, memory: int, options: Any) -> tuple[Entry, str | None]:
    """Note the costs of ``run``, which followed ``entry``'s plan to its end; where the
    median time of the runs under it is off the plan's prediction by more than
    :data:`REPLAN_TOLERANCE`, plan the graph again with their median costs (unless it was
    so :data:`MAX_REPLANS` times: then the plan stands, its prediction priced with those
    costs): ``(the plan for the next runs, why it was made again or None)``."""
    if entry.settled or entry.plan is None:
        return entry, None
    entry.observed.append(
        (list(run.cost), dict(run.vjp), run.overhead, run.outside, dict(run.raw), run.gap,
         run.total)
    )  # fmt: skip
    if len(entry.observed) < TIMED_RUNS:
        return entry, None
    predicted = entry.predicted()[0]
    measured = statistics.median(o[6] for o in entry.observed)
    if not predicted > 0 or abs(measured / predicted - 1) <= REPLAN_TOLERANCE:
        entry.settled = True  # confirmed: no more timing (pricing a run takes a millisecond)
        return entry, None
    timed = _median_run(run, entry.observed)
    if entry.replans >= MAX_REPLANS:  # the plan stands; what it takes is now measured
        entry.joint, entry.settled = joint(timed), True
        return entry, None
    why = (
        f"the plan predicted {predicted * 1e3:.3g} ms; the {len(entry.observed)} runs under "
        f"it took {measured * 1e3:.3g} ms (the median, {measured / predicted - 1:+.0%}): "
        "planned again with their median costs"
    )
    again = _plan(timed, memory, options)
    again.replans, again.key = entry.replans + 1, entry.key
    if again.plan is None:  # kept: the plan stands, and is not made again
        entry.joint, entry.settled = joint(timed), True
        return entry, f"{why}, which found none ({again.reason}); the plan stands"
    if entry.key in _PLANS:
        _PLANS[entry.key] = again
    return again, why


def _median_run(run: Run, observed: list[Timed]) -> Run:
    """``run`` with the median of the ``observed`` runs' figures: each op's and VJP's time,
    each op's own time (of the runs that recomputed it), its gap, the tape's work per op
    recomputed; and as the time outside them, what the median run spent beyond the sum
    of those medians, recomputing aside (a run whose ops the machine's load delays here
    and there takes longer than its ops' medians add up to: each run is delayed somewhere)."""
    median = statistics.median
    timed = copy.copy(run)
    timed.cost = [median(o[0][k] for o in observed) for k in range(len(run.cost))]
    timed.vjp = {k: median(o[1][k] for o in observed) for k in run.vjp}
    timed.overhead = median(o[2] for o in observed)
    ops = {k for o in observed for k in o[4]}
    timed.raw = {k: median(o[4][k] for o in observed if k in o[4]) for k in sorted(ops)}
    timed.gap = median(o[5] for o in observed)
    parts = median(sum(o[0]) + sum(o[1].values()) + o[3] for o in observed)
    timed.outside = max(0.0, parts - sum(timed.cost) - sum(timed.vjp.values()))
    timed.total = median(o[6] for o in observed)
    return timed


def _plan(run: Run, memory: int, options: Any) -> Entry:
    """The plan of ``run``'s graph within ``memory`` (or the reason there is none), solved now."""
    started = time.perf_counter()
    graph = joint(run)
    room = memory - graph.fixed
    plan, reason = None, None
    try:
        if room < 0:
            raise ValueError(f"the constants the ops read take {graph.fixed} bytes")
        if graph.graph.nodes > MAX_NODES:
            raise GraphPlanTimeout(
                f"the graph has {graph.graph.nodes} nodes, more than MAX_NODES = {MAX_NODES}"
            )
        plan = _solve(graph.graph, room, options)
    except GraphPlanTimeout as error:
        reason = f"no plan in time (GraphPlanTimeout: {error})"
    except ValueError as error:
        reason = f"no plan fits in memory={memory} bytes: {error}"
    entry = Entry(plan, graph, run, reason)
    entry.seconds = time.perf_counter() - started
    return entry


def _solve(graph: GraphCosts, room: int, options: Any) -> GraphPlan:
    """:func:`plan_graph` on ``graph`` with its costs in microseconds, within :data:`GAP` of
    the optimum, pruned (:func:`pruned`), priced in seconds."""
    scaled = replace(graph, compute=tuple(c * SCALE for c in graph.compute))
    solved = plan_graph(scaled, room, options.time_limit, GAP, relaxed=options.relaxed)
    plan = pruned(solved, graph)
    priced = simulate_graph(plan, graph)
    return replace(plan, predicted_cost=priced.cost, predicted_peak_bytes=priced.peak_bytes)


def pruned(plan: GraphPlan, graph: GraphCosts) -> GraphPlan:
    """``plan`` without the evaluations nothing uses: a value a stage computes that it
    neither keeps nor reads later in the stage (a plan found at the time limit, or by
    rounding, may hold some).  It computes less and holds no more.

    >>> from remat.schedules import GraphCosts, GraphPlan
    >>> g = GraphCosts([(), (0,), (0,), (2,)], [1, 1, 1, 1], [8, 8, 8, 8])
    >>> keep = [frozenset({0}), frozenset({0}), frozenset({2}), frozenset()]
    >>> pruned(GraphPlan(((0,), (1,), (1, 2), (3,)), tuple(keep), memory=24), g).compute
    ((0,), (1,), (2,), (3,))
    """
    compute = []
    for run, keep in zip(plan.compute, plan.keep):
        used = {run[-1], *(i for i in run if i in keep)}
        for i in reversed(run):
            if i in used:
                used.update(j for j in graph.parents[i] if j in run)
        compute.append(tuple(i for i in run if i in used))
    return replace(plan, compute=tuple(compute))
