"""The least-compute plan for a recorded graph under a byte budget: Checkmate's MILP, by HiGHS.

Problem.  Given a :class:`~.graph_costs.GraphCosts` (the joint forward +
backward graph) and a budget of ``memory`` bytes, find the
:class:`~.graph_costs.GraphPlan` of least total compute whose peak, in the
memory model of :mod:`.graph_costs`, stays within ``memory``.

Formulation (Checkmate: Jain et al., "Checkmate: breaking the memory wall with
optimal tensor rematerialization", MLSys 2020, with its free variables made
continuous).  Over the ``T`` ops (stages; op ``j`` is ``ops[j]``):

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
that are no outputs, are fixed to 0 (keeping them never helps), and two cuts
that no optimal plan needs to break tighten the relaxation: a value
recomputed, or held, in stage ``t`` is read in it or kept after it
(``R[t, j] <= S[t+1, j] + sum R[t, c]`` over ``j``'s children ``c <= t``, and
the same for ``S[t, j]``).

Solving.  ``scipy.optimize.milp`` (HiGHS' branch and bound) gets 3/5 of
``time_limit`` seconds.  The plan says how it was found (``plan.method``):
``"store all"`` when keeping everything fits (no solve); ``"optimal"`` when
HiGHS proves it within the relative ``gap``; ``"time limit"`` when time ran
out with a feasible plan (``plan.gap`` is HiGHS' bound on its distance from
the optimum); ``"lp rounding"`` when time ran out with none: the LP relaxation
(no integrality; HiGHS' dual simplex, the rest of the time) is solved and its
``S`` rounded at a range of thresholds, each completed with the least
recomputation it needs (``R``: the stage's op, the values newly kept, and
their missing parents, recursively), and the cheapest rounding that fits is
returned, with no bound on its distance from the optimum (``gap`` 1).  If the
relaxation does not finish either, or no rounding fits, :class:`GraphPlanTimeout`
says so: the caller falls back to DTR, which needs no plan.  ``relaxed=True``
skips the MILP and gives the relaxation the whole time.  A budget that
HiGHS proves infeasible raises a ValueError.  Every plan returned has been
checked by :func:`~.graph_costs.simulate_graph`, which the solver does not use.

Size and time.  ``T^2`` binaries, about ``T^2 / 2 (1 + edges per op)``
continuous variables and twice as many rows; building it takes 0.3 s at 100
ops and 2 s at 300.  On joint graphs of chains with skips (``python -m
benchmarks.bench_graph_plan``, ``time_limit=30``, a 2-core machine shared with
other work): 100 ops at half of store-all's peak were proven optimal in 16 s,
and at a third ended in LP rounding (19 s); 30 and 60 ops ended at the time
limit with plans within 1-12% of the optimum (HiGHS' gap); at 300 ops neither
the MILP nor its relaxation finished in 30 s (GraphPlanTimeout): those graphs
are DTR's.  MOCCASIN's formulation (Bartan et al., 2023: ``O(n)`` integer
variables, retention intervals) is the way to larger graphs; it is not
implemented here.

SciPy is an optional dependency (the ``milp`` extra: ``pip install
"remat[milp]"``); without it, :func:`plan_graph` raises an ImportError naming
the extra.  Everything else in :mod:`remat.schedules` runs without it.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from .graph_costs import GraphCosts, GraphPlan, GraphPlanError, simulate_graph


def _scipy() -> SimpleNamespace:
    try:
        from scipy.optimize import (  # type: ignore[import-untyped]  # noqa: PLC0415
            Bounds,
            LinearConstraint,
            linprog,
            milp,
        )
        from scipy.sparse import coo_array, vstack  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        raise ImportError(
            "plan_graph solves a MILP with HiGHS through scipy.optimize.milp; install SciPy "
            '(>= 1.9) with the extra: pip install "remat[milp]"'
        ) from None
    return SimpleNamespace(
        Bounds=Bounds,
        LinearConstraint=LinearConstraint,
        coo_array=coo_array,
        linprog=linprog,
        milp=milp,
        vstack=vstack,
    )


class GraphPlanTimeout(ValueError):
    """No plan found in the time given: the caller falls back to DTR, which needs none.

    >>> from remat.schedules import GraphPlanTimeout
    >>> issubclass(GraphPlanTimeout, ValueError)
    True
    """


class _Model:
    """The variables and rows of the MILP for one graph and budget (op indices ``0 .. T-1``)."""

    def __init__(self, costs: GraphCosts, memory: float) -> None:
        ops = costs.ops
        index = {node: j for j, node in enumerate(ops)}
        self.ops, self.T = ops, len(ops)
        self.parents = [tuple(index[i] for i in costs.parents[k] if i in index) for k in ops]
        self.children: list[list[int]] = [[] for _ in ops]
        for k, p in enumerate(self.parents):
            for i in p:
                self.children[i].append(k)
        self.size = [costs.bytes[k] for k in ops]
        self.outputs = {index[o] for o in costs.outputs}
        self.cost: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []
        T = self.T
        last_use = [max(self.children[j], default=-1) for j in range(T)]
        self.R = [[self._var(costs.compute[ops[j]], 1.0 if j == t else 0.0, 1.0, True)
                   for j in range(t + 1)] for t in range(T)]  # fmt: skip
        self.S: list[list[int]] = [[]]
        for t in range(1, T):
            row = []
            for j in range(t):
                output = j in self.outputs
                useful = output or last_use[j] >= t
                row.append(self._var(0.0, 1.0 if output else 0.0, 1.0 if useful else 0.0, True))
            self.S.append(row)
        for t in range(T):
            for k in range(t + 1):
                for i in self.parents[k]:  # parents computed here or held
                    self._row({self.R[t][k]: 1, self.R[t][i]: -1, **self._held(t, i, -1)}, None, 0)
            for j in range(t):
                self._row({self.R[t][j]: 1, self.S[t][j]: 1}, None, 1)
                if t + 1 < T:
                    self._row({self.S[t + 1][j]: 1, self.S[t][j]: -1, self.R[t][j]: -1}, None, 0)
            if t + 1 < T:
                self._row({self.S[t + 1][t]: 1, self.R[t][t]: -1}, None, 0)
            for j in range(t):  # cuts: what is recomputed or held is read here or kept
                if j in self.outputs:
                    continue
                readers = {self.R[t][c]: -1.0 for c in self.children[j] if c <= t}
                kept = {self.S[t + 1][j]: -1.0} if t + 1 < T else {}
                self._row({self.R[t][j]: 1, **readers, **kept}, None, 0)
                self._row({self.S[t][j]: 1, **readers, **kept}, None, 0)
            self._memory(t, memory)

    def _var(self, cost: float, lo: float, hi: float, integer: bool) -> int:
        self.cost.append(cost)
        self.lo.append(lo)
        self.hi.append(hi)
        self.integer.append(1 if integer else 0)
        return len(self.cost) - 1

    def _row(self, coefficients: dict[int, float], lo: float | None, hi: float | None) -> None:
        inf = float("inf")
        self.rows.append((coefficients, -inf if lo is None else lo, inf if hi is None else hi))

    def _held(self, t: int, j: int, sign: float) -> dict[int, float]:
        return {self.S[t][j]: sign} if j < t else {}

    def _memory(self, t: int, memory: float) -> None:
        """The frees and running bytes of stage ``t``: ``U[t, k] <= memory``."""
        T, size = self.T, self.size
        previous: int | None = None
        frees: dict[int, float] = {}
        for k in range(t + 1):
            u = self._var(0.0, 0.0, float(memory), False)
            if previous is None:
                start = {self.S[t][j]: -size[j] for j in range(t) if size[j]}
                self._row({u: 1, self.R[t][0]: -size[0], **start}, 0, 0)
            else:
                self._row({u: 1, previous: -1, self.R[t][k]: -size[k], **frees}, 0, 0)
            frees = {}
            for i in (*self.parents[k], k):
                if not size[i] or i in self.outputs:  # free nothing, or kept to the end
                    continue
                f = self._var(0.0, 0.0, 1.0, False)
                frees[f] = size[i]
                self._row({f: 1, self.R[t][k]: -1}, None, 0)
                if t + 1 < T:
                    self._row({f: 1, self.S[t + 1][i]: 1}, None, 1)
                for c in self.children[i]:
                    if k < c <= t:
                        self._row({f: 1, self.R[t][c]: 1}, None, 1)
            previous = u

    def solve(self, time_limit: float, gap: float) -> Any:
        """The MILP by HiGHS' branch and bound, within ``time_limit`` seconds."""
        sp = _scipy()
        matrix, lo, hi = self._matrix()
        return sp.milp(
            self.cost,
            constraints=sp.LinearConstraint(matrix, lo, hi),
            bounds=sp.Bounds(self.lo, self.hi),
            integrality=self.integer,
            options={"time_limit": max(time_limit, 0.1), "mip_rel_gap": gap, "disp": False},
        )

    def relax(self, time_limit: float) -> Any:
        """The LP relaxation (no integrality) by HiGHS' dual simplex, within ``time_limit``."""
        sp = _scipy()
        matrix, lo, hi = self._matrix()
        equal = [r for r in range(len(lo)) if lo[r] == hi[r]]
        upper = [r for r in range(len(lo)) if hi[r] < float("inf") and lo[r] != hi[r]]
        lower = [r for r in range(len(lo)) if lo[r] > -float("inf") and lo[r] != hi[r]]
        return sp.linprog(
            self.cost,
            A_ub=sp.vstack([matrix[upper], -matrix[lower]]),
            b_ub=[hi[r] for r in upper] + [-lo[r] for r in lower],
            A_eq=matrix[equal],
            b_eq=[hi[r] for r in equal],
            bounds=list(zip(self.lo, self.hi)),
            method="highs-ds",
            options={"time_limit": max(time_limit, 0.1)},
        )

    def _matrix(self) -> tuple[Any, list[float], list[float]]:
        coo_array = _scipy().coo_array
        rows, cols, vals, lo, hi = [], [], [], [], []
        for r, (coefficients, low, high) in enumerate(self.rows):
            for c, v in coefficients.items():
                rows.append(r)
                cols.append(c)
                vals.append(v)
            lo.append(low)
            hi.append(high)
        shape = (len(self.rows), len(self.cost))
        return coo_array((vals, (rows, cols)), shape=shape).tocsr(), lo, hi

    def plan(self, x: Any, threshold: float = 0.5) -> tuple[list[list[int]], list[set[int]]]:
        """The plan holding ``S > threshold``, with the least recomputation that needs."""
        T = self.T
        held: list[set[int]] = [set()] + [
            {j for j in range(t) if x[self.S[t][j]] > threshold} for t in range(1, T)
        ]
        held.append(set(self.outputs))
        compute, keep = [], []
        for t in range(T):
            need = {t} | {j for j in held[t + 1] if j not in held[t] and j <= t}
            stack = list(need)
            while stack:
                for i in self.parents[stack.pop()]:
                    if i not in held[t] and i not in need:
                        need.add(i)
                        stack.append(i)
            compute.append(sorted(need))
            keep.append({j for j in held[t + 1] if j <= t})
        return compute, keep


def _store_all(model: _Model) -> tuple[list[list[int]], list[set[int]]]:
    last = [max(c, default=-1) for c in model.children]
    keep = [{j for j in range(t + 1) if last[j] > t or j in model.outputs} for t in range(model.T)]
    return [[t] for t in range(model.T)], keep


def plan_graph(
    costs: GraphCosts,
    memory: float,
    time_limit: float = 30.0,
    gap: float = 1e-6,
    relaxed: bool = False,
) -> GraphPlan:
    """The least-compute plan for ``costs`` within ``memory`` bytes (see the module).

    ``relaxed=True`` skips the MILP and gives the LP relaxation the whole
    ``time_limit``: a plan by rounding (``method == "lp rounding"``), faster and
    with no bound on its distance from the optimum.

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
    _scipy()
    started = time.perf_counter()
    model = _Model(costs, memory)
    compute, keep = _store_all(model)
    store_all = _checked(model, costs, compute, keep, memory, "store all", 0.0, started)
    if store_all is not None:
        return store_all
    # the MILP gets 3/5 of the time; if it finds no plan, the LP relaxation the rest
    result = (
        None if relaxed else model.solve(0.6 * time_limit - (time.perf_counter() - started), gap)
    )
    if result is not None and result.status == 2:
        raise ValueError(_infeasible(model.T, memory))
    if result is not None and result.x is not None:
        method = "optimal" if result.status == 0 else "time limit"
        compute, keep = model.plan(result.x)
        bound = getattr(result, "mip_gap", 0.0) or 0.0
        plan = _checked(model, costs, compute, keep, memory, method, bound, started)
        if plan is None:
            raise GraphPlanError("plan_graph: HiGHS returned a plan the simulator refuses (a bug)")
        return plan
    relaxation = model.relax(time_limit - (time.perf_counter() - started))
    if relaxation.status == 2:
        raise ValueError(_infeasible(model.T, memory))
    plans = []
    if relaxation.x is not None:
        for threshold in (0.5, 0.3, 0.7, 0.1, 0.9, 0.2, 0.8, 0.99, 0.01):
            compute, keep = model.plan(relaxation.x, threshold)
            plan = _checked(model, costs, compute, keep, memory, "lp rounding", 1.0, started)
            if plan is not None:
                plans.append(plan)
    if not plans:
        what = (
            "no rounding of the LP relaxation fits"
            if relaxation.x is not None
            else ("the LP relaxation did not finish")
        )
        milp = "" if relaxed else "HiGHS found no plan, and "
        raise GraphPlanTimeout(
            f"plan_graph: for {model.T} ops within memory={memory!r} bytes in "
            f"time_limit={time_limit!r} s, {milp}{what}: give more time or memory, or use "
            "DTR (Tape(remat='dtr')), which needs no plan"
        )
    return min(plans, key=lambda p: p.predicted_cost)


def _infeasible(ops: int, memory: float) -> str:
    return (
        f"plan_graph: no plan keeps the {ops} ops within memory={memory!r} bytes (the least is "
        "at least the largest op's bytes plus its parents' and the outputs held before it)"
    )


def _checked(
    model: _Model,
    costs: GraphCosts,
    compute: list[list[int]],
    keep: list[set[int]],
    memory: float,
    method: str,
    gap: float,
    started: float,
) -> GraphPlan | None:
    """The plan in node ids, simulated; None if it passes ``memory``."""
    ops = model.ops
    plan = GraphPlan(
        tuple(tuple(ops[j] for j in c) for c in compute),
        tuple(frozenset(ops[j] for j in k) for k in keep),
        memory,
    )
    result = simulate_graph(plan, costs, memory=float("inf"))
    if result.peak_bytes > memory:
        return None
    return GraphPlan(
        plan.compute,
        plan.keep,
        memory,
        method,
        result.cost,
        result.peak_bytes,
        gap,
        time.perf_counter() - started,
    )
