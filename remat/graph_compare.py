"""A graph workload under every way of rematerializing it, measured side by side.

This is what ``remat compare --graph WORKLOAD`` prints, what ``python -m
benchmarks graph`` measures the issue's targets with, and what notebook 06
draws.  :func:`compare_graph` runs one of :data:`remat.graph_workloads.GRAPH_WORKLOADS`
as

* ``store_all``: a plain ``rm.Tape()``, every saved value kept (the reference);
* ``checkpoint``: each block wrapped in ``rm.checkpoint`` by hand (the
  workload's ``wrap=rm.checkpoint``): only the blocks' inputs are kept, each
  block runs again in backward;
* ``dtr:NAME``, one per heuristic of :data:`remat.graph.HEURISTICS`:
  ``rm.Tape(memory=b, remat=DTR(NAME))``, at each budget ``b``;
* ``optimal``: ``rm.Tape(memory=b, remat="optimal")``, the optimal plan of the
  recorded graph, at each budget.  One tape per budget runs the program again
  and again: its first run records the graph and plans it (not timed), the
  later runs follow the plan.

A budget is a share of store-all's saved bytes (a fraction in (0, 1]) or a
number of bytes (:func:`budget_bytes`); store-all's saved bytes are those of
:meth:`GraphWorkload.measure <remat.graph_workloads.GraphWorkload.measure>`,
counted by buffer as a DTR tape counts them.

Each row (:class:`GraphRow`) holds what was measured.  Time: the median of
``repeats`` runs without tracemalloc, every method once a round in a rotated
order (so drift hits all alike), over store-all's median.  Memory: the tape's
own count (``tape.stats.peak_bytes``; store-all's is the bytes it saves) and
the tracemalloc peak of the whole forward and backward, in one more run of
each method, never timed.  Recomputed ops: ``tape.stats.recomputed_ops`` of
DTR and the optimal plan, the ops ``rm.count_ops`` sees backward evaluate
again under ``rm.checkpoint``.  The solve time and predicted time of the
optimal plan, from its ``tape.stats``.  Gradients: every run's are compared
with store-all's bit for bit (a difference is a bug; :func:`failures_of` lists
it).  A method that cannot run at a budget (too tight for it, or the optimal
mode not available) gives a row that says why instead of figures.

BLAS threads: a NumPy that multiplies matrices on several threads makes the
times of small graphs noisy; set ``OPENBLAS_NUM_THREADS=1`` (``OMP_``,
``MKL_``) before NumPy loads, as ``benchmarks/common.py`` does.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .blockwise import _bit_identical, _max_diff
from .budget import Tape
from .checkpoint import checkpoint
from .graph import DTR, HEURISTICS, Planned
from .graph.plans import MAX_REPLANS, TIMED_RUNS
from .graph_workloads import GraphWorkload
from .selective import count_ops
from .units import parse_bytes

METHODS = ("store_all", "checkpoint", *(f"dtr:{h}" for h in HEURISTICS), "optimal")
"""Every method, in the order of the rows: the two without a budget, then those with."""

BUDGETED = tuple(m for m in METHODS if m.startswith("dtr:") or m == "optimal")

LABELS = {
    "store_all": "rm.Tape(): every saved value kept",
    "checkpoint": "rm.checkpoint around each block, placed by hand",
    **{f"dtr:{h}": f'rm.Tape(memory=b, remat=DTR("{h}"))' for h in HEURISTICS},
    "optimal": 'rm.Tape(memory=b, remat="optimal"): the optimal plan of the recorded graph',
}


@dataclass
class GraphRow:
    """One method at one budget (``budget`` None: store_all and checkpoint), measured.

    ``available`` False: the method did not run (``reason`` says why) and the
    figures are None.  ``seconds``: median of ``seconds_runs``; ``time_ratio``:
    over store-all's median.  ``tape_peak_bytes``: the tape's own count (None
    for checkpoint, which has no such count); ``traced_peak_bytes``: tracemalloc
    peak of one forward + backward.  ``solve_seconds``, ``predicted_seconds``,
    ``plan_method``: the optimal plan's, from its ``tape.stats``; ``plan_ops``: the ops of
    the graph it planned, forward and backward.  ``bit_identical``: every run's gradients
    equal store-all's exactly.  ``crashed``: the method raised an error no budget
    explains (a bug; ``reason`` holds it, :func:`failures_of` lists it).
    """

    method: str
    budget: int | None
    share: float | None
    available: bool = True
    reason: str | None = None
    seconds: float | None = None
    time_ratio: float | None = None
    seconds_runs: list[float] = field(default_factory=list)
    tape_peak_bytes: int | None = None
    traced_peak_bytes: int | None = None
    recomputed_ops: int | None = None
    evictions: int | None = None
    solve_seconds: float | None = None
    predicted_seconds: float | None = None
    plan_method: str | None = None
    plan_ops: int | None = None
    bit_identical: bool | None = None
    max_grad_diff: float | None = None
    loss: float | None = None
    crashed: bool = False

    @property
    def label(self) -> str:
        """The method and its budget, as a table cell: ``dtr:lru @ 50%``."""
        return self.method if self.share is None else f"{self.method} @ {self.share:.0%}"


def budget_bytes(budget: float | int | str, saved_bytes: int) -> int:
    """A budget in bytes: ``budget`` a fraction in (0, 1] of ``saved_bytes`` (store-all's),
    or a whole number of bytes above 1 (an int, or a size such as ``"256 KiB"``).

    >>> from remat.graph_compare import budget_bytes
    >>> budget_bytes(0.5, 1000), budget_bytes("1 KiB", 1000), budget_bytes(3000, 1000)
    (500, 1024, 3000)
    """
    given = budget
    if isinstance(budget, str):
        text = budget
        try:
            budget = float(text)
        except ValueError:  # a size with a unit
            return parse_bytes(text, "budget")
    whole = not isinstance(budget, bool) and isinstance(budget, int | float) and budget > 1
    if whole and float(budget).is_integer():
        return int(budget)
    share = isinstance(budget, float | int) and not isinstance(budget, bool) and 0 < budget <= 1
    if not share:
        raise ValueError(
            f"budget {given!r} is out of range: give a fraction in (0, 1] of store-all's "
            f"{saved_bytes} saved bytes, or a whole number of bytes above 1"
        )
    if math.floor(budget * saved_bytes) < 1:
        raise ValueError(f"budget {given!r} of store-all's {saved_bytes} bytes is under 1 byte")
    return math.floor(budget * saved_bytes)


def _run(workload: GraphWorkload, method: str, tape: Any) -> tuple[float, list[Any]]:
    """One forward + backward of ``workload`` by ``method`` (``tape``: its tape, or None)."""
    if method == "checkpoint":
        return workload.loss_and_gradients(wrap=checkpoint)
    return workload.loss_and_gradients(tape)


class _Method:
    """One method at one budget: how to make its tape, its runs' figures, and whether its
    gradients stayed store-all's."""

    def __init__(
        self, workload: GraphWorkload, row: GraphRow, make_tape: Callable[[], Any] | None
    ) -> None:
        self.workload, self.row, self.make_tape = workload, row, make_tape
        self.tape: Any = None  # the optimal mode's, kept across runs: its plan is cached
        self.first_grads: list[Any] = []  # the gradients of the traced run

    def run(self) -> tuple[float, list[Any], Any]:
        """One forward + backward: (loss, gradients, the tape it ran on or None)."""
        tape = self.tape
        if tape is None and self.make_tape is not None:
            tape = self.make_tape()
        loss, grads = _run(self.workload, self.row.method, tape)
        return loss, grads, tape

    def check(self, grads: list[Any], reference: list[Any]) -> None:
        row = self.row
        same = _bit_identical(grads, reference)
        row.bit_identical = same and row.bit_identical is not False
        row.max_grad_diff = max(row.max_grad_diff or 0.0, _max_diff(grads, reference))

    def ran(self, tape: Any) -> None:
        """What a run under a budget tells: the largest peak of its runs, and for the
        optimal mode, a run that did not follow its plan (noted in ``reason``)."""
        row = self.row
        if row.budget is None:
            return
        row.tape_peak_bytes = max(row.tape_peak_bytes or 0, tape.stats.peak_bytes)
        if row.method == "optimal" and not tape.stats.planned and row.reason is None:
            why = getattr(tape.stats, "fallback", None) or tape.stats.method
            row.reason = f"a run did not follow the plan: {why}"


def _make_tape(
    method: str, budget: int | None, time_limit: float = 30.0
) -> Callable[[], Any] | None:
    if method == "store_all":
        return Tape
    if method == "checkpoint":
        return None
    if method == "optimal":  # Planned() raises an ImportError naming the extra without SciPy
        return lambda: Tape(memory=budget, remat=Planned(time_limit=time_limit))
    return lambda: Tape(memory=budget, remat=DTR(method.removeprefix("dtr:")))


def _first_run(method: _Method, counted_base: int) -> None:
    """The optimal mode's recording and planning run (untimed), then the traced run of
    ``method``: its tracemalloc peak, ops recomputed, tape.stats figures.  A method that
    cannot run (MemoryError: the budget is too tight; the optimal mode not built) is
    marked unavailable, with the error's words."""
    row = method.row
    try:
        if row.method == "optimal":
            method.tape = method.make_tape()  # type: ignore[misc]
            method.run()  # records and plans: not traced, not timed
            for _ in range((1 + MAX_REPLANS) * TIMED_RUNS):  # runs under the plan time its
                if method.tape.dtr_cache.next.settled:  # costs, and may plan again from
                    break  # them (remat.graph.plans.refine): untimed, until it is settled;
                gc.collect()  # each after another method's run and a collection, as in
                _run(method.workload, "store_all", Tape())  # the timed rounds, so that
                gc.collect()  # the costs it plans with are timed as its runs will be
                method.run()
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            with count_ops() as counted:
                row.loss, grads, tape = method.run()
            row.traced_peak_bytes = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    except (MemoryError, NotImplementedError, ImportError) as error:
        row.available, row.reason = False, f"{type(error).__name__}: {error}"
        return
    except Exception as error:  # a bug: the other methods are still measured
        if row.method == "store_all":
            raise
        row.available, row.crashed = False, True
        row.reason = f"{type(error).__name__}: {error}"
        return
    method.first_grads = grads
    method.ran(tape)
    stats: Any = getattr(tape, "stats", None)
    if row.method == "checkpoint":
        row.recomputed_ops = sum(counted.values()) - counted_base
    elif row.method != "store_all":
        row.recomputed_ops, row.evictions = stats.recomputed_ops, stats.evictions
    if row.method == "optimal":
        row.solve_seconds = stats.solve_seconds
        row.predicted_seconds = stats.predicted_seconds
        row.plan_method = stats.method
        row.plan_ops = None if stats.graph is None else len(stats.graph.ops)


def _timed_rounds(methods: Sequence[_Method], repeats: int, reference: list[Any]) -> None:
    """``repeats`` rounds, each running every method once, the order rotated a place each
    round; a run's time is its ``seconds_runs`` entry; its gradients and (under a budget)
    its peak are taken after.  DTR's choices depend on the times it measures, so a budget
    one run fits in can be too tight for another: a MemoryError marks the row unavailable,
    saying so, and the method runs no more."""
    for round_ in range(repeats):
        shift = round_ % len(methods)
        for method in [*methods[shift:], *methods[:shift]]:
            row = method.row
            if not row.available:
                continue
            gc.collect()
            start = time.perf_counter()
            try:
                _, grads, tape = method.run()
            except Exception as error:
                if row.method == "store_all":
                    raise
                row.available, row.crashed = False, not isinstance(error, MemoryError)
                row.reason = (
                    f"{type(error).__name__} in timed run {len(row.seconds_runs) + 1} (the "
                    f"runs before it did not raise it): {error}"
                )
                continue
            row.seconds_runs.append(time.perf_counter() - start)
            method.check(grads, reference)
            method.ran(tape)


def compare_graph(
    workload: GraphWorkload,
    budgets: Sequence[float | int | str] = (0.5, 0.33),
    repeats: int = 5,
    methods: Sequence[str] = METHODS,
    time_limit: float = 30.0,
) -> list[GraphRow]:
    """Every method of ``methods`` (store_all, the reference, always runs) on
    ``workload`` at each of ``budgets`` (:func:`budget_bytes`): a list of
    :class:`GraphRow`, store_all and checkpoint first, then each budget's rows.
    ``time_limit``: the optimal plan's, in seconds, for each budget
    (``remat.graph.Planned(time_limit=)``: past it, the LP relaxation rounded, or DTR).

    >>> from remat.graph_compare import compare_graph
    >>> from remat.graph_workloads import unet
    >>> w = unet(levels=2, width=4, length=16, batch=2)
    >>> rows = compare_graph(w, [0.5], repeats=1, methods=["store_all", "dtr:lru"])
    >>> [(r.label, r.tape_peak_bytes, r.budget, r.bit_identical) for r in rows]
    [('store_all', 29696, None, True), ('dtr:lru @ 50%', 14528, 14848, True)]
    """
    if tracemalloc.is_tracing():
        raise ValueError(
            "tracemalloc is already tracing (PYTHONTRACEMALLOC or -X tracemalloc?): "
            "run without it, so that the timed runs are not slowed down by tracing"
        )
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    saved = workload.measure().saved_bytes
    in_bytes = [budget_bytes(b, saved) for b in budgets]
    chosen = ["store_all", *(m for m in METHODS if m in methods and m != "store_all")]
    cells: list[tuple[str, int | None]] = [(m, None) for m in chosen if m not in BUDGETED]
    cells += [(m, b) for b in in_bytes for m in chosen if m in BUDGETED]
    runs = []
    for name, budget in cells:
        row = GraphRow(name, budget, None if budget is None else budget / saved)
        runs.append(_Method(workload, row, _make_tape(name, budget, time_limit)))
    with count_ops() as counted:
        workload.loss_and_gradients(Tape())  # warms up; the ops store-all evaluates
    base = sum(counted.values())
    for method in runs:
        _first_run(method, base)
    runs[0].row.tape_peak_bytes, runs[0].row.recomputed_ops = saved, 0
    reference = runs[0].first_grads
    live = [m for m in runs if m.row.available]
    for method in live:
        method.check(method.first_grads, reference)
    _timed_rounds(live, repeats, reference)
    base_seconds = statistics.median(runs[0].row.seconds_runs)
    for method in live:
        row = method.row
        if not row.available:
            continue
        row.seconds = statistics.median(row.seconds_runs)
        row.time_ratio = row.seconds / base_seconds
    return [m.row for m in runs]


def failures_of(rows: Sequence[GraphRow]) -> list[str]:
    """What went wrong: gradients not bit for bit store-all's, a tape over its budget, an
    error no budget explains."""
    failures = [f"{row.label}: raised {row.reason}: a bug" for row in rows if row.crashed]
    for row in rows:
        if row.available and not row.bit_identical:
            failures.append(
                f"{row.label}: gradients differ from store-all's (max |diff| "
                f"{row.max_grad_diff:g}): a bug"
            )
        if row.budget is not None and (row.tape_peak_bytes or 0) > row.budget:
            failures.append(
                f"{row.label}: the tape held {row.tape_peak_bytes} bytes, over its budget "
                f"of {row.budget}"
            )
    return failures
