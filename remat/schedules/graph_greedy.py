"""A fast plan for a recorded graph on paper: Belady-like eviction, stage by stage.

:func:`~.graph_plan.plan_graph` solves a MILP; this module finds a good plan in
a fraction of a second, with no solver, and :func:`plan_graph` uses it three
ways: as the plan it returns when the solver finds nothing better in the time
given (``plan.method == "heuristic"``), as the incumbent a solver's plan must
beat, and as the upper bound in the benchmark's tables.

The view (:class:`OpGraph`).  The ``T`` ops of a :class:`~.graph_costs.GraphCosts`
renumbered ``0 .. T-1`` (stage ``t`` computes op ``t``), with their op parents
(inputs dropped: always resident), children, bytes, costs and outputs.  The
MILP of :mod:`.graph_plan` is built on the same view.

The heuristic (:func:`greedy_plan`).  Stages run in order, as in
:func:`~.graph_costs.simulate_graph`: stage ``t`` starts holding ``H`` and
computes op ``t`` after recomputing its missing ancestors (recursively, in
order); it keeps what some later stage reads.  When the stage's peak would
pass the budget, it first tries keeping only what it held and op ``t`` (not
the values it recomputed), then drops one held value from ``H`` (from the
previous stage's ``keep``, which never raises that stage's peak: a value not
kept is freed after its last reader, or held to the stage's end as before)
and tries again.  The value dropped is the one of least
``cost / (bytes x distance to its next reader)``, where ``cost`` is what
recomputing it would take from what stays held: either its evicted ancestors
included (the static form of DTR's ``h`` with its evicted neighbourhood,
Kirisame et al. 2021), or only it and its parents (with the distance,
Belady's rule); a value this stage reads goes last.  It runs with both costs
and a few weightings of the score, and returns the cheapest plan; None if
every one meets a stage it cannot fit (it is a heuristic: a plan may exist;
the MILP's answer then decides).
"""

from __future__ import annotations

from collections.abc import Callable

from .graph_costs import GraphCosts

Plan = tuple[list[list[int]], list[set[int]]]


class OpGraph:
    """The ops of ``costs`` as stages ``0 .. T-1``, inputs dropped (see the module).

    >>> from remat.schedules import GraphCosts
    >>> from remat.schedules.graph_greedy import OpGraph
    >>> g = OpGraph(GraphCosts([(), (0,), (1,), (1, 2)], [0, 1, 1, 2], [8, 8, 8, 8], {0}, {3}))
    >>> g.ops, g.parents, g.last_use
    ((1, 2, 3), [(), (0,), (0, 1)], [2, 2, -1])
    """

    def __init__(self, costs: GraphCosts) -> None:
        ops = costs.ops
        index = {node: j for j, node in enumerate(ops)}
        self.ops, self.T = ops, len(ops)
        self.parents = [tuple(index[i] for i in costs.parents[k] if i in index) for k in ops]
        self.children: list[list[int]] = [[] for _ in ops]
        for k, p in enumerate(self.parents):
            for i in p:
                self.children[i].append(k)
        self.size = [costs.bytes[k] for k in ops]
        self.compute = [costs.compute[k] for k in ops]
        self.outputs = {index[o] for o in costs.outputs}
        self.last_use = [max(c, default=-1) for c in self.children]

    def useful(self, j: int, t: int) -> bool:
        """Whether holding op ``j`` after stage ``t`` can help: an output, or read later."""
        return j in self.outputs or self.last_use[j] > t

    def closure(self, wanted: set[int], held: set[int]) -> list[int]:
        """``wanted`` and their ancestors not in ``held``, recursively, in order."""
        need = set(wanted)
        stack = list(need)
        while stack:
            for i in self.parents[stack.pop()]:
                if i not in held and i not in need:
                    need.add(i)
                    stack.append(i)
        return sorted(need)

    def stage_peak(self, held: set[int], run: list[int], keep: set[int]) -> float:
        """The peak bytes of a stage holding ``held``, computing ``run``, keeping ``keep``.

        The moments and frees of :func:`~.graph_costs.simulate_graph`, which
        checks every plan returned: this only steers the search.
        """
        size, parents = self.size, self.parents
        last: dict[int, int] = {}
        for k in run:
            for i in parents[k]:
                last[i] = k
        resident = set(held)
        used = sum(size[i] for i in resident)
        peak = used
        for k in run:
            resident.add(k)
            used += size[k]
            peak = max(peak, used)
            for i in (*parents[k], k):
                if i in resident and i not in keep and last.get(i, -1) <= k:
                    resident.discard(i)
                    used -= size[i]
        return peak


def greedy_plan(
    graph: OpGraph, memory: float, guide: Callable[[int, int], float] | None = None
) -> Plan | None:
    """The cheapest plan of a few weightings of the eviction score, or None (see the module).

    ``guide(j, t)``, if given, ranks first: the held value of least ``guide``
    entering stage ``t`` is dropped first (:func:`~.graph_plan.plan_graph`
    passes the LP relaxation's ``S[t, j]``: how much of ``j`` it keeps).
    """
    weights = _WEIGHTS if guide is None else tuple(_guided(guide, w) for w in _WEIGHTS)
    plans = [
        plan
        for weight in weights
        for deep in (True, False)
        if (plan := _greedy(graph, memory, weight, deep)) is not None
    ]
    return min(plans, key=lambda p: plan_cost(graph, p), default=None)


def plan_cost(graph: OpGraph, plan: Plan) -> float:
    """The compute a plan (in op indices) spends."""
    return sum(graph.compute[k] for run in plan[0] for k in run)


# score(j, t, cost, bytes, distance): the held value of least score is dropped first
Score = Callable[[int, int, float, float, int], tuple[float, float]]
_WEIGHTS: tuple[Score, ...] = (
    lambda j, t, cost, size, distance: (0.0, cost / (size * distance)),
    lambda j, t, cost, size, distance: (0.0, cost / size),
    lambda j, t, cost, size, distance: (0.0, cost / (size * distance * distance)),
)


def _guided(guide: Callable[[int, int], float], then: Score) -> Score:
    return lambda j, t, cost, size, distance: (
        round(guide(j, t), 3),
        then(j, t, cost, size, distance)[1],
    )


def _greedy(graph: OpGraph, memory: float, score: Score, deep: bool) -> Plan | None:
    compute: list[list[int]] = []
    keep: list[set[int]] = []
    held: set[int] = set()
    for t in range(graph.T):
        while True:
            run = graph.closure({t}, held)
            kept = {j for j in (*held, *run) if graph.useful(j, t)}
            if graph.stage_peak(held, run, kept) <= memory:
                break
            kept = {j for j in held if graph.useful(j, t)} | {
                j for j in run if j in graph.outputs or (j == t and graph.useful(j, t))
            }
            if graph.stage_peak(held, run, kept) <= memory:
                break
            victim = _victim(graph, held, t, run, score, deep)
            if victim is None:
                return None
            held.discard(victim)
            if keep:
                keep[-1].discard(victim)
        compute.append(run)
        keep.append(kept)
        held = set(kept)
    return compute, keep


def _victim(
    graph: OpGraph,
    held: set[int],
    t: int,
    run: list[int],
    score: Score,
    deep: bool,
) -> int | None:
    """The held value to drop before stage ``t``: least score, values this stage reads last."""
    reads = {i for k in run for i in graph.parents[k]}
    best: tuple[bool, tuple[float, float], int] | None = None
    for j in held:
        if j in graph.outputs or not graph.size[j]:
            continue
        after = [c for c in graph.children[j] if c >= t]
        distance = (min(after) - t + 1) if after else graph.T
        if deep:  # what recomputing it takes, evicted ancestors included
            cost = sum(graph.compute[i] for i in graph.closure({j}, held - {j}))
        else:  # it and its parents not held
            cost = graph.compute[j] + sum(
                graph.compute[i] for i in graph.parents[j] if i not in held
            )
        key = (j in reads, score(j, t, cost + 1e-12, graph.size[j], distance), j)
        if best is None or key < best:
            best = key
    return None if best is None else best[2]
