"""The plans of recorded graphs: made once per signature, cached, and prepared for the tape.

:func:`planned_for` gives the plan of a run's graph (:func:`~.joint.joint`) within
``m``: from the cache, keyed by the run's op signatures, the sweep's order, the
budget and the solver's options (the last :data:`CACHE_SIZE`, failures too, so
that no run solves again what a run solved already), else made by
:func:`remat.schedules.plan_graph` (or the reason none was: none fits, none in
``time_limit`` (:class:`~remat.schedules.GraphPlanTimeout`), a graph over
:data:`MAX_NODES`).  An :class:`Entry` holds it with what the tape does at each
stage, in the run's op numbers.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from ..schedules import GraphCosts, GraphPlan, plan_graph
from ..schedules.graph_plan import GraphPlanTimeout
from .joint import Joint, joint
from .recording import Run

SCALE = 1e6
"""Costs go to the solver in microseconds: HiGHS proved plans of measured times in
seconds (objectives of about 1e-4) several times slower, near its tolerances."""

CACHE_SIZE = 32
"""Plans (and failures to plan) kept, the least recently used dropped first."""

MAX_NODES = 700
"""The largest graph handed to the solver: its MILP has ``T^2`` binaries, and building
it alone takes seconds at a few hundred nodes; larger graphs run under DTR."""

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
    computed in it, and not kept); ``steps[t]``, for a VJP stage: the ops whose
    values it computes, in order, each with the ops whose values go once it is
    computed (its parents and itself, where not kept nor read later in the stage).
    """

    def __init__(self, plan: GraphPlan | None, graph: Joint, run: Run, reason: str | None):
        self.plan, self.joint, self.reason = plan, graph, reason
        self.signature, self.order = tuple(run.signatures), tuple(run.order)
        self.seconds = 0.0  # the time taken to plan (or to fail to)
        self.drops: list[tuple[int, ...]] = []
        self.at_op: dict[int, tuple[int, ...]] = {}  # op -> the drops of the stage before it
        self.steps: list[tuple[tuple[int, tuple[int, ...]], ...]] = []
        if plan is not None:
            self._prepare(plan)

    def _prepare(self, plan: GraphPlan) -> None:
        ops, parents, n = self.joint.ops, self.joint.graph.parents, len(self.joint.ops)
        held: frozenset[int] = frozenset()
        for t, (run, keep) in enumerate(zip(plan.compute, plan.keep)):
            self.drops.append(tuple(ops[i] for i in {*held, *run} - keep if i < n))
            steps = []
            if t >= n:
                for position, i in enumerate(run[:-1]):
                    later = {j for c in run[position + 1 :] for j in parents[c]}
                    gone = [ops[j] for j in (*parents[i], i) if j not in keep and j not in later]
                    steps.append((ops[i], tuple(gone)))
            self.steps.append(tuple(steps))
            held = keep
        for c in range(n - 1):  # a forward stage's drops: at the next op's record
            self.at_op[ops[c] + 1] = self.drops[c]

    def predicted(self) -> tuple[float, int]:
        """(seconds, op evaluations) a run under the plan recomputes, with the forward and
        the VJPs as measured: the forward once, every VJP, and the op values (with their
        recipes) recomputed before VJPs; a forward stage's recomputations are not run
        (user code holds what an op reads)."""
        if self.plan is None:
            return 0.0, 0
        j, n = self.joint, len(self.joint.ops)
        again = [i for t in range(n, j.graph.nodes) for i in self.plan.compute[t][:-1] if i < n]
        seconds = j.forward + sum(j.graph.compute[n:]) + sum(j.graph.compute[i] for i in again)
        return seconds, sum(j.evaluations[i] for i in again)


def planned_for(run: Run, memory: int, options: Any) -> tuple[Entry, bool]:
    """``(the plan of run's graph within memory, whether it was solved now)``."""
    key = (tuple(run.signatures), tuple(run.order), memory, options.time_limit, options.relaxed)
    entry = _PLANS.get(key)
    if entry is not None:
        _PLANS.move_to_end(key)
        return entry, False
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
    _PLANS[key] = entry
    while len(_PLANS) > CACHE_SIZE:
        _PLANS.popitem(last=False)
    return entry, True


def _solve(graph: GraphCosts, room: int, options: Any) -> GraphPlan:
    """:func:`plan_graph` on ``graph`` with its costs in microseconds; the plan's in seconds."""
    scaled = replace(graph, compute=tuple(c * SCALE for c in graph.compute))
    plan = plan_graph(scaled, room, options.time_limit, relaxed=options.relaxed)
    return replace(plan, predicted_cost=plan.predicted_cost / SCALE)
