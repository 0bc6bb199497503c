"""Checkmate's MILP for one graph and budget, as HiGHS takes it (see :mod:`.graph_plan`).

:class:`Model` builds the variables and rows over an :class:`~.graph_greedy.OpGraph`
(op indices ``0 .. T-1``), optionally restricted to *windows*: stage ``t`` may
compute only the ops in ``candidates[t]`` (by default every op ``0 .. t``), and
to plans of cost at most ``bound`` (a plan known: the greedy one).
The restricted model is exact for the plans that respect the windows, and
much smaller: its memory rows cover the candidates only.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

from .graph_greedy import OpGraph


def scipy_parts() -> SimpleNamespace:
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


class Model:
    """The variables and rows of the MILP for one graph and budget (op indices ``0 .. T-1``)."""

    def __init__(
        self,
        graph: OpGraph,
        memory: float,
        candidates: list[list[int]] | None = None,
        bound: float | None = None,
    ) -> None:
        self.graph = graph
        self.ops, self.T, self.parents = graph.ops, graph.T, graph.parents
        self.children, self.size, self.outputs = graph.children, graph.size, graph.outputs
        self.cost: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []
        T = self.T
        # stage t may compute the ops in candidates[t] (all of 0..t by default), ending with t
        self.windowed, self.bound = candidates is not None, bound
        self.cand = [list(range(t + 1)) for t in range(T)] if candidates is None else candidates
        self.R: list[dict[int, int]] = [
            {j: self._var(graph.compute[j], 1.0 if j == t else 0.0, 1.0, True) for j in c}
            for t, c in enumerate(self.cand)
        ]
        self.S: list[dict[int, int]] = [{}]
        for t in range(1, T):
            row = {}
            for j in range(t):
                if graph.useful(j, t - 1):
                    output = j in self.outputs
                    row[j] = self._var(0.0, 1.0 if output else 0.0, 1.0, not self.windowed)
            self.S.append(row)
        for t in range(T):
            R, S = self.R[t], self.S[t]
            for k in R:
                for i in self.parents[k]:  # parents computed here or held
                    self._row({R[k]: 1, **self._either(t, i, -1)}, None, 0)
            for j in R.keys() & S.keys():
                self._row({R[j]: 1, S[j]: 1}, None, 1)
            if t + 1 < T:
                for j, s in self.S[t + 1].items():
                    self._row({s: 1, **self._either(t, j, -1)}, None, 0)
            for j in (R.keys() | S.keys()) - {t} - self.outputs:  # cuts: read here or kept
                readers = {R[c]: -1.0 for c in self.children[j] if c in R}
                kept = {self.S[t + 1][j]: -1.0} if t + 1 < T and j in self.S[t + 1] else {}
                for own in (R.get(j), S.get(j)):
                    if own is not None:
                        self._row({own: 1, **readers, **kept}, None, 0)
            self._memory(t, memory)
        if bound is not None:  # the cost of a plan known (the greedy one): none dearer
            costs = {v: c for v, c in enumerate(self.cost) if c}
            self._row(costs, None, bound * (1 + 1e-9) + 1e-9)

    def _var(self, cost: float, lo: float, hi: float, integer: bool) -> int:
        self.cost.append(cost)
        self.lo.append(lo)
        self.hi.append(hi)
        self.integer.append(1 if integer else 0)
        return len(self.cost) - 1

    def _row(self, coefficients: dict[int, float], lo: float | None, hi: float | None) -> None:
        inf = float("inf")
        self.rows.append((coefficients, -inf if lo is None else lo, inf if hi is None else hi))

    def _either(self, t: int, j: int, sign: float) -> dict[int, float]:
        """``sign (R[t, j] + S[t, j])``, over the variables that exist (the others are 0)."""
        out = {}
        for table in (self.R[t], self.S[t]):
            if j in table:
                out[table[j]] = sign
        return out

    def _memory(self, t: int, memory: float) -> None:
        """The frees and running bytes of stage ``t``: ``U[t, k] <= memory``."""
        size, R, S = self.size, self.R[t], self.S[t]
        previous: int | None = None
        frees: dict[int, float] = {}
        for k in sorted(R):
            u = self._var(0.0, 0.0, float(memory), False)
            if previous is None:
                start = {s: -size[j] for j, s in S.items() if size[j]}
                self._row({u: 1, R[k]: -size[k], **start}, 0, 0)
            else:
                self._row({u: 1, previous: -1, R[k]: -size[k], **frees}, 0, 0)
            frees = {}
            for i in (*self.parents[k], k):
                if not size[i] or i in self.outputs:  # free nothing, or kept to the end
                    continue
                f = self._var(0.0, 0.0, 1.0, False)
                frees[f] = size[i]
                self._row({f: 1, R[k]: -1}, None, 0)
                if t + 1 < self.T and i in self.S[t + 1]:
                    self._row({f: 1, self.S[t + 1][i]: 1}, None, 1)
                for c in self.children[i]:
                    if k < c <= t and c in R:
                        self._row({f: 1, R[c]: 1}, None, 1)
            previous = u

    def solve(self, time_limit: float, gap: float) -> Any:
        """The MILP by HiGHS' branch and bound, within ``time_limit`` seconds."""
        sp = scipy_parts()
        matrix, lo, hi = self._matrix
        return sp.milp(
            self.cost,
            constraints=sp.LinearConstraint(matrix, lo, hi),
            bounds=sp.Bounds(self.lo, self.hi),
            integrality=self.integer,
            options={"time_limit": max(time_limit, 0.1), "mip_rel_gap": gap, "disp": False},
        )

    def relax(self, time_limit: float) -> Any:
        """The LP relaxation (no integrality) by HiGHS' dual simplex, within ``time_limit``."""
        sp = scipy_parts()
        matrix, lo, hi = self._matrix
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

    @functools.cached_property
    def _matrix(self) -> tuple[Any, list[float], list[float]]:
        """The rows as a sparse matrix with their bounds (built once: MILP, then LP)."""
        coo_array = scipy_parts().coo_array
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

    def held(self, x: Any, j: int, t: int) -> float:
        """How much of op ``j`` the solution ``x`` holds entering stage ``t`` (0 if no variable)."""
        s = self.S[t].get(j)
        return 0.0 if s is None else float(x[s])

    def plan(self, x: Any, threshold: float = 0.5) -> tuple[list[list[int]], list[set[int]]]:
        """The plan holding ``S > threshold``, with the least recomputation that needs."""
        T = self.T
        held: list[set[int]] = [{j for j, s in S.items() if x[s] > threshold} for S in self.S]
        held.append(set(self.outputs))
        compute, keep = [], []
        for t in range(T):
            wanted = {t} | {j for j in held[t + 1] if j not in held[t] and j <= t}
            compute.append(self.graph.closure(wanted, held[t]))
            keep.append({j for j in held[t + 1] if j <= t})
        return compute, keep
