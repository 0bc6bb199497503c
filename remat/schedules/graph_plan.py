"""The least-compute plan for a recorded graph under a byte budget: Checkmate's MILP, by HiGHS.

Problem.  Given a :class:`~.graph_costs.GraphCosts` (the joint forward +
backward graph) and a budget of ``memory`` bytes, find the
:class:`~.graph_costs.GraphPlan` of least total compute whose peak, in the
memory model of :mod:`.graph_costs`, stays within ``memory``.

Formulation (Checkmate: Jain et al., "Checkmate: breaking the memory wall with
optimal tensor rematerialization", MLSys 2020, with its free variables made
continuous; built in :mod:`.graph_milp`).  Over the ``T`` ops (stages; op ``j``
is ``ops[j]``):

* ``R[t, j]`` binary, ``j <= t``: stage ``t`` computes op ``j``; ``R[t, t] = 1``;
* ``S[t, j]`` binary, ``j < t``: op ``j`` is held entering stage ``t`` (``S[0] = 0``);
* ``F[t, i, k]`` in ``[0, 1]``, for ``k <= t`` and ``i`` = ``k`` or an op parent
  of ``k``: ``i`` is freed just after stage ``t`` computes ``k``;
* ``U[t, k]`` continuous in ``[0, memory]``: bytes resident after computing ``k``.

Minimise ``sum compute[j] R[t, j]`` subject to: a computed op's op parents
are computed before it or held (``R[t, k] <= R[t, i] + S[t, i]``); what is held
was held or computed (``S[t+1, j] <= S[t, j] + R[t, j]``); a held value is not
recomputed (``R[t, j] + S[t, j] <= 1``); outputs are held from their stage on;
``F[t, i, k] <= R[t, k]``, ``<= 1 - S[t+1, i]`` and ``<= 1 - R[t, c]`` for every
child ``c`` of ``i`` with ``k < c <= t`` (so ``F`` is 0 unless ``k`` is computed,
``i`` is not kept and no later reader runs: the solver sets it to 1 when that
helps, as freeing at the last use never hurts); and
``U[t, 0] = sum bytes[j] S[t, j] + bytes[0] R[t, 0]``, ``U[t, k] = U[t, k-1] +
bytes[k] R[t, k] - sum_i bytes[i] F[t, i, k-1]``.  Because every ``F`` bound is
0 or 1 when ``R`` and ``S`` are integral, ``F`` needs no integrality: the
integer variables are ``R`` and ``S`` only, ``T^2`` of them, against
Checkmate's ``T^2 + T |E|``.  Values held that no later stage reads, and
that are no outputs, get no ``S`` (keeping them never helps), and two cuts
that no optimal plan needs to break tighten the relaxation: a value
recomputed, or held, in stage ``t`` is read in it or kept after it
(``R[t, j] <= S[t+1, j] + sum R[t, c]`` over ``j``'s children ``c <= t``, and
the same for ``S[t, j]``).

Windows (graphs of more than 62 ops).  The full model's LP has ``T^2 / 2 (1 +
edges per op)`` columns: at 300 ops, 250 000, and neither HiGHS' simplex nor
its interior point solves it in 30 s.  Above 62 ops (``window=None``), stage
``t`` may recompute only the ancestors of op ``t`` at most ``d`` edges up
(:func:`windows`; ``d`` the deepest with at most 20 of them a stage on
average): ``R`` and the memory rows exist for those alone, so the model
shrinks to about ``20 T (1 + edges)`` columns plus the ``S``.  The windowed
model is exact for the plans that respect the windows (a plan recomputing
further up is not in it), so its optimum is an upper bound on the true
one.  In it, ``S`` is continuous: given integral ``R``, a value a stage reads
or keeps without computing it is held at 1 all the way from where it was
computed, so rounding every ``S`` down gives a plan that needs no more
recomputation than ``R`` and no more bytes than ``U`` (the plan is read with
``S >= 0.999``); only ``R`` branches (about ``20 T`` binaries, against
``T^2``).

Solving (``plan.method`` says which way the plan was found; ``plan.gap`` is
the bound on its distance from the optimum, 1 for none).  ``"store all"``
when keeping everything fits (no solve).  Otherwise a greedy plan first
(:mod:`.graph_greedy`: Belady/DTR-like eviction on paper, a fraction of a
second at 300 ops), whose cost bounds the MILP's (a row: no plan dearer than
it is looked at, which prunes HiGHS' search: on a ResNet's 66-op graph at a
third of its bytes HiGHS found no plan better than the greedy one in 18 s
without the row, and one 1.3% better with it), then ``scipy.optimize.milp``
(HiGHS' branch and bound) for
3/5 of ``time_limit``: ``"optimal"`` when HiGHS proves the full model's
optimum within the relative ``gap`` (returned at once); ``"time limit"`` when
time ran out with a plan (``gap``: HiGHS' bound); ``"windowed optimal"`` and
``"windowed time limit"`` the same for the windowed model (the gap is to the
windowed optimum).  When the MILP finds no plan, the LP relaxation (HiGHS'
dual simplex, until 85% of the time) is solved, and gives two kinds of plan:
``"lp rounding"``, its ``S`` rounded at a range of thresholds, each completed
with the least recomputation it needs (the stage's op, the values newly kept,
and their missing parents, recursively); ``"lp heuristic"``, the greedy plan
dropping first the values the relaxation holds least.  Of every plan found
(the MILP's, the LP's, the greedy one), the cheapest is returned;
``"heuristic"`` says the greedy plan won: no bound on its distance from the
optimum.  :class:`GraphPlanTimeout` says when none was found (the greedy
plan too meets a stage it cannot fit): the caller falls back to DTR, which
needs no plan.  ``relaxed=True`` skips the MILP and gives the relaxation its
time.  A budget below some op's bytes plus its parents' and the outputs held
before it raises a ValueError at once, at any size, and so does one that
HiGHS proves infeasible for the full model.  Every plan returned has been
checked by :func:`~.graph_costs.simulate_graph`, which the solver does not
use.

Size and time.  The full model at 300 ops has 250 000 columns and 650 000
rows; neither its MILP nor its LP (simplex or interior point) finishes in 30
s, and before windows :func:`plan_graph` raised :class:`GraphPlanTimeout`
there after 39 to 46 s.  The windowed model at 300 ops has about 50 000
columns, 6 000 of them binary, built in under a second; its LP takes 1 to 3
s.  On joint graphs of 100 to 312 ops of four shapes (a chain with skips, a
U-Net, a ResNet, a transformer op by op; ``python -m
benchmarks.bench_graph_plan``, ``time_limit=30``, a 2-core machine shared
with other work, load average 3.5 to 5), every graph at 50% and 33% of
store-all's peak got a plan in 7.5 to 22 s: the windowed optimum proven in
7.5 to 11 s on three of them, the windowed MILP's best on five, the
LP-guided heuristic on two, the greedy plan on the rest, at 1.045 to 1.307
times store-all's compute; the greedy plan alone is within 2.4% of the best
plan found (the table is in ``docs/guide/graph_plan.md``).  At 100 ops and
50% the windowed MILP finds the full MILP's proven optimum.

SciPy is an optional dependency (the ``milp`` extra: ``pip install
"remat[milp]"``); without it, :func:`plan_graph` raises an ImportError naming
the extra.  Everything else in :mod:`remat.schedules` runs without it.
"""

from __future__ import annotations

import time

from .graph_costs import GraphCosts, GraphPlan, GraphPlanError, simulate_graph
from .graph_greedy import OpGraph, Plan, greedy_plan, plan_cost
from .graph_milp import Model, scipy_parts

# the full model up to this many R variables (T (T + 1) / 2: 62 ops); above, the deepest
# windows with at most WINDOWED_R R variables a stage on average
FULL_R = 2000
WINDOWED_R = 20
ROUNDINGS = (0.5, 0.3, 0.7, 0.1, 0.9, 0.2, 0.8, 0.99, 0.01)


class GraphPlanTimeout(ValueError):
    """No plan found in the time given: the caller falls back to DTR, which needs none.

    >>> from remat.schedules import GraphPlanTimeout
    >>> issubclass(GraphPlanTimeout, ValueError)
    True
    """


def plan_graph(
    costs: GraphCosts,
    memory: float,
    time_limit: float = 30.0,
    gap: float = 1e-6,
    relaxed: bool = False,
    window: int | None = None,
) -> GraphPlan:
    """The least-compute plan for ``costs`` within ``memory`` bytes (see the module).

    ``relaxed=True`` skips the MILP and gives the LP relaxation up to 85% of
    ``time_limit``: a plan by rounding it (``"lp rounding"``), by the
    heuristic it guides (``"lp heuristic"``) or the greedy one
    (``"heuristic"``), faster and with no bound on its distance from the
    optimum.  ``window`` is the depth of the windows
    (stage ``t`` recomputes only ancestors of its op at most ``window`` edges
    up): ``None`` chooses (none up to 62 ops), ``0`` solves the full model.

    >>> from remat.schedules import GraphCosts, plan_graph
    >>> g = GraphCosts([(), (0,), (1,), (2,), (2, 3), (1, 4)], [0, 1, 1, 1, 1, 1],
    ...                [0, 8, 8, 8, 0, 0], inputs={0}, outputs={5})
    >>> plan_graph(g, memory=24).method  # keeping everything fits
    'store all'
    >>> plan = plan_graph(g, memory=16)  # node 1 is recomputed in the last stage
    >>> plan.method, plan.predicted_cost, plan.predicted_peak_bytes, plan.compute[-1]
    ('optimal', 6, 16, (1, 5))
    """
    if not isinstance(costs, GraphCosts):
        raise ValueError(f"plan_graph: costs must be a GraphCosts, got {costs!r}")
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not memory >= 0:
        raise ValueError(f"plan_graph: memory must be a number of bytes >= 0, got {memory!r}")
    if not isinstance(relaxed, bool):
        raise ValueError(f"plan_graph: relaxed must be True or False, got {relaxed!r}")
    if not time_limit > 0 or not 0 <= gap < 1:
        raise ValueError(
            f"plan_graph: time_limit must be > 0 seconds and gap in [0, 1), got {time_limit!r} "
            f"and {gap!r}"
        )
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 0
    ):
        raise ValueError(
            f"plan_graph: window must be None (choose), 0 (the full model) or a depth >= 1, "
            f"got {window!r}"
        )
    scipy_parts()
    started = time.perf_counter()
    graph = OpGraph(costs)
    check = _Checker(graph, costs, memory, started)
    store_all = check(_store_all(graph), "store all")
    if store_all is not None:
        return store_all
    if _least_peak(graph) > memory:  # a proof no model needs (the windowed one cannot give it)
        raise ValueError(_infeasible(graph.T, memory))
    candidates = windows(graph, window)
    prefix = "" if candidates is None else "windowed "
    greedy = greedy_plan(graph, memory)
    found: list[GraphPlan | None] = []
    # the MILP gets 3/5 of the time; if it finds no plan, the LP relaxation up to 85%,
    # leaving the rest to round it and to simulate every plan found
    bound = None if greedy is None else plan_cost(graph, greedy)
    model = Model(graph, memory, candidates, bound)
    result = None if relaxed else model.solve(0.6 * time_limit - check.elapsed(), gap)
    if result is not None and result.status == 2 and candidates is None and bound is None:
        raise ValueError(_infeasible(graph.T, memory))
    if result is not None and result.x is not None:
        method = prefix + ("optimal" if result.status == 0 else "time limit")
        plan = check(model.plan(result.x, 0.999), method, getattr(result, "mip_gap", 0) or 0.0)
        if plan is None:
            raise GraphPlanError("plan_graph: HiGHS returned a plan the simulator refuses (a bug)")
        if method == "optimal":
            return plan
        found.append(plan)
    elif result is None or result.status != 2:
        found += _relaxation(model, check, 0.85 * time_limit - check.elapsed())
    if greedy is not None:
        found.append(check(greedy, "heuristic"))
    plans = [plan for plan in found if plan is not None]
    if not plans:
        milp = "" if relaxed else "HiGHS found no plan, "
        raise GraphPlanTimeout(
            f"plan_graph: for {graph.T} ops within memory={memory!r} bytes in "
            f"time_limit={time_limit!r} s, {milp}the heuristic found none, and "
            f"{check.why}: give more time or memory, or use DTR (Tape(remat='dtr')), which "
            "needs no plan"
        )
    return min(plans, key=lambda p: p.predicted_cost)


def windows(graph: OpGraph, window: int | None) -> list[list[int]] | None:
    """Each stage's candidates: the ancestors of its op within ``window`` edges (None: all).

    ``window=None`` chooses: no windows while the full model has at most
    ``FULL_R`` R variables (62 ops), else the deepest windows with at most
    ``WINDOWED_R`` (20) a stage on average.

    >>> from remat.schedules import GraphCosts
    >>> from remat.schedules.graph_greedy import OpGraph
    >>> g = OpGraph(GraphCosts([(), (0,), (1,), (2,), (3,)], [0, 1, 1, 1, 1], [1] * 5, {0}))
    >>> windows(g, 1)
    [[0], [0, 1], [1, 2], [2, 3]]
    """
    T = graph.T
    if window == 0 or (window is None and T * (T + 1) // 2 <= FULL_R):
        return None
    depth = window or 1
    chosen = _ancestors(graph, depth)
    while window is None and depth < T:
        deeper = _ancestors(graph, depth + 1)
        if sum(map(len, deeper)) > WINDOWED_R * T or deeper == chosen:
            break
        depth, chosen = depth + 1, deeper
    return chosen


def _ancestors(graph: OpGraph, depth: int) -> list[list[int]]:
    out = []
    for t in range(graph.T):
        seen, frontier = {t}, [t]
        for _ in range(depth):
            frontier = [i for k in frontier for i in graph.parents[k] if i not in seen]
            seen.update(frontier)
        out.append(sorted(seen))
    return out


def _relaxation(model: Model, check: _Checker, time_limit: float) -> list[GraphPlan | None]:
    """Plans from the LP relaxation: its roundings, and the heuristic it guides."""
    relaxation = model.relax(time_limit)
    if relaxation.status == 2:  # the full model's is a proof; the windows' says check.why
        if not model.windowed and model.bound is None:  # (a plan of that cost exists)
            raise ValueError(_infeasible(model.T, check.memory))
        return []
    if relaxation.x is None:
        check.why = "the LP relaxation did not finish"
        return []
    check.why = "no rounding of the LP relaxation fits"
    x = relaxation.x
    plans = [check(model.plan(x, threshold), "lp rounding") for threshold in ROUNDINGS]
    guided = greedy_plan(model.graph, check.memory, lambda j, t: model.held(x, j, t))
    if guided is not None:
        plans.append(check(guided, "lp heuristic"))
    return plans


def _store_all(graph: OpGraph) -> Plan:
    keep = [{j for j in range(t + 1) if graph.useful(j, t)} for t in range(graph.T)]
    return [[t] for t in range(graph.T)], keep


def _least_peak(graph: OpGraph) -> float:
    """A bound below every plan's peak: an op, its parents and the outputs held before it."""
    held: set[int] = set()
    least: float = 0
    for k in range(graph.T):
        least = max(least, sum(graph.size[i] for i in held | {k, *graph.parents[k]}))
        if k in graph.outputs:
            held.add(k)
    return least


def _infeasible(ops: int, memory: float) -> str:
    return (
        f"plan_graph: no plan keeps the {ops} ops within memory={memory!r} bytes (the least is "
        "at least the largest op's bytes plus its parents' and the outputs held before it)"
    )


class _Checker:
    """Turns plans in op indices into simulated :class:`GraphPlan` s, or None above ``memory``."""

    def __init__(self, graph: OpGraph, costs: GraphCosts, memory: float, started: float):
        self.graph, self.costs, self.memory, self.started = graph, costs, memory, started
        self.why = "the MILP's windows admit no plan"

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def __call__(self, plan: Plan, method: str, gap: float = 1.0) -> GraphPlan | None:
        ops = self.graph.ops
        compute, keep = plan
        given = GraphPlan(
            tuple(tuple(ops[j] for j in c) for c in compute),
            tuple(frozenset(ops[j] for j in k) for k in keep),
            self.memory,
        )
        result = simulate_graph(given, self.costs, memory=float("inf"))
        if result.peak_bytes > self.memory:
            return None
        return GraphPlan(
            given.compute,
            given.keep,
            self.memory,
            method,
            result.cost,
            result.peak_bytes,
            gap if method != "store all" else 0.0,
            self.elapsed(),
        )
