"""remat.graph_compare: every way of rematerializing a graph workload, measured side by side.

Tiny workloads (a few milliseconds a run), one timed round: what is checked is
what the rows hold, never how fast anything ran.
"""

import tracemalloc

import numpy as np
import pytest

from remat import graph_compare as gc
from remat.graph import HEURISTICS
from remat.graph_workloads import unet


def tiny_unet():
    return unet(levels=2, width=4, length=16, batch=2)


def test_every_method_has_a_row_per_budget_within_it_and_store_alls_gradients():
    workload = tiny_unet()
    saved = workload.measure().saved_bytes
    rows = gc.compare_graph(workload, ["16 KiB", 0.5], repeats=1, time_limit=0.5)
    budgets = [16 * 1024, saved // 2]
    expected = [("store_all", None), ("checkpoint", None)] + [
        (m, b) for b in budgets for m in [*(f"dtr:{h}" for h in HEURISTICS), "optimal"]
    ]
    assert [(r.method, r.budget) for r in rows] == expected
    assert gc.failures_of(rows) == []
    for row in rows:
        assert row.available and row.bit_identical and row.max_grad_diff == 0.0, row
        assert len(row.seconds_runs) == 1 and row.time_ratio > 0 and row.traced_peak_bytes > 0
        if row.budget is not None:
            assert 0 < row.tape_peak_bytes <= row.budget, row
            assert row.share == row.budget / saved
    store_all, checkpoint = rows[:2]
    assert store_all.time_ratio == 1.0 and store_all.tape_peak_bytes == saved
    assert store_all.recomputed_ops == 0
    # every block runs again once in backward.  A convolution is 7 ops (pad, three
    # slices, concatenate, matmul, add); the 2 encoder blocks and the bottom's add a
    # GELU: 8 ops; the 2 decoder blocks a repeat, a concatenate and a GELU: 10 ops
    assert checkpoint.recomputed_ops == 3 * 8 + 2 * 10


def test_the_optimal_row_reports_its_plan_measured_and_predicted():
    rows = gc.compare_graph(tiny_unet(), [0.8], repeats=2, methods=["store_all", "optimal"])
    optimal = rows[1]
    assert optimal.available and optimal.reason is None  # every run followed the plan
    assert optimal.bit_identical and optimal.tape_peak_bytes <= optimal.budget
    assert optimal.plan_method in ("optimal", "lp rounding")
    assert optimal.solve_seconds > 0 and optimal.predicted_seconds > 0
    assert len(optimal.seconds_runs) == 2 and optimal.traced_peak_bytes > 0


def test_a_budget_too_tight_for_a_method_gives_a_row_saying_why():
    rows = gc.compare_graph(tiny_unet(), [64], repeats=1, methods=["store_all", "dtr:lru"])
    tight = rows[1]
    assert not tight.available and tight.reason.startswith("MemoryError: ")
    assert "at least" in tight.reason and tight.seconds is None
    assert gc.failures_of(rows) == []


def test_a_gradient_that_differs_from_store_alls_is_a_failure(monkeypatch):
    real = gc._run

    def tampered(workload, method, tape):
        loss, grads = real(workload, method, tape)
        if method == "dtr:lru":
            grads = [g.copy() for g in grads]
            grads[0].flat[0] = np.nextafter(grads[0].flat[0], np.inf)  # one ulp
        return loss, grads

    monkeypatch.setattr(gc, "_run", tampered)
    rows = gc.compare_graph(tiny_unet(), [0.5], repeats=1, methods=["store_all", "dtr:lru"])
    (failure,) = gc.failures_of(rows)
    assert failure.startswith("dtr:lru @ 50%: gradients differ from store-all's")
    assert rows[1].bit_identical is False and rows[1].max_grad_diff > 0


@pytest.mark.parametrize(
    "budget, message",
    [
        (0, "out of range: give a fraction in (0, 1]"),
        (-0.5, "out of range"),
        (1.5, "out of range"),  # neither a fraction nor whole bytes
        (True, "out of range"),
        ("nan", "out of range"),
        ("inf", "out of range"),
        (1e-9, "is under 1 byte"),
        ("3 parsecs", "is not a size"),
    ],
)
def test_budgets_out_of_range_are_refused(budget, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gc.budget_bytes(budget, 1000)


def test_budgets_are_fractions_of_store_alls_bytes_or_bytes():
    assert gc.budget_bytes(0.33, 1000) == 330
    assert gc.budget_bytes(1, 1000) == 1000  # the whole of store-all's
    assert gc.budget_bytes("2", 1000) == 2 and gc.budget_bytes(5000, 1000) == 5000
    assert gc.budget_bytes("1 KiB", 1000) == 1024


def test_unknown_methods_and_an_outer_tracemalloc_are_refused():
    with pytest.raises(ValueError, match="unknown method dtr:nope; choose from store_all"):
        gc.compare_graph(tiny_unet(), methods=["dtr:nope"])
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="tracemalloc is already tracing"):
            gc.compare_graph(tiny_unet())
    finally:
        tracemalloc.stop()


def test_a_timed_run_over_the_budget_marks_its_row_and_stops_the_method(monkeypatch):
    real, calls = gc._run, []

    def once_too_tight(workload, method, tape):
        calls.append(method)
        if method == "dtr:lru" and calls.count(method) == 2:  # the first timed run
            raise MemoryError("too tight this time")
        return real(workload, method, tape)

    monkeypatch.setattr(gc, "_run", once_too_tight)
    rows = gc.compare_graph(tiny_unet(), [0.5], repeats=3, methods=["store_all", "dtr:lru"])
    lru = rows[1]
    assert not lru.available and lru.seconds is None and calls.count("dtr:lru") == 2
    assert (
        lru.reason
        == "MemoryError in timed run 1 (the runs before it did not raise it): too tight this time"
    )
    assert len(rows[0].seconds_runs) == 3 and rows[0].available


@pytest.mark.parametrize("when", [1, 2])  # the traced run, a timed run
def test_an_error_no_budget_explains_is_a_failure_and_the_others_still_run(monkeypatch, when):
    real, calls = gc._run, []

    def broken(workload, method, tape):
        calls.append(method)
        if method == "dtr:lru" and calls.count(method) == when:
            raise IndexError("tuple index out of range")
        return real(workload, method, tape)

    monkeypatch.setattr(gc, "_run", broken)
    methods = ["store_all", "dtr:lru", "dtr:h_dtr"]
    rows = gc.compare_graph(tiny_unet(), [0.5], repeats=2, methods=methods)
    broken, fine = {r.method: r for r in rows}["dtr:lru"], {r.method: r for r in rows}["dtr:h_dtr"]
    assert broken.crashed and not broken.available and "IndexError" in broken.reason
    assert fine.available and len(fine.seconds_runs) == 2
    (failure,) = gc.failures_of(rows)
    assert failure.startswith("dtr:lru @ 50%: raised IndexError") and failure.endswith("a bug")
