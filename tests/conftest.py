"""What every test shares: the layout of this tree, and the fixtures pytest applies.

The tests are kept by feature, one folder per area of remat:

* ``core/``: the tape, the reverse sweep, rm.grad, the guards and the public API;
* ``ops/``: the op table (every op gradchecked from ``ops/cases.py``), NN helpers,
  dtypes, extreme inputs, devices;
* ``forward/``: rm.jvp (dual numbers and the recorded sweep), rm.hvp, second order;
* ``schedules/``: the pure schedules (revolve, online, optimal, disk levels) and simulate;
* ``executor/``: checkpointed loops, chains and scans, the replay check, reversible steps;
* ``checkpoint/``: rm.checkpoint, policies, the recompute guard;
* ``budgets/``: byte budgets (``rm.Tape(memory=)``) and what they count;
* ``storage/``: disk snapshots;
* ``graph/``: any program under a budget: DTR, the graph planner, planned tapes,
  the graph workloads and their comparison;
* ``tools/``: the command line, plots, benchmarks, notebooks, workloads.

Shared code lives in modules, never in test files: ``strategies.py`` (hypothesis
strategies, the one random-program generator), ``helpers.py`` (tapes by schedule
name, tracemalloc measurement), ``ops/cases.py`` (the op table's cases) and
``schedules/oracles.py`` (exhaustive searches).  A test that guards a bug says
which in a one-line comment above it.

``python -m pytest -m "not slow" -n auto`` is the quick loop (under a minute on two
cores, about a minute on one: leave out ``-n auto``); ``python -m pytest -n auto`` runs
everything, as CI does (under three minutes on two cores).  ``-n auto`` (pytest-xdist)
runs the tests in a process per core, each test in one process, so what a test
measures (tracemalloc, threads, gc) is its own.  The slow tests are the
notebooks (marked where they are) and those listed in :data:`SLOW`: each is the
slowest of several tests of its feature, so the quick loop still tests every feature.
"""

import gc
import sys

import pytest

from remat import memory

# Tests marked slow here (node ids under tests/; a name without [params] takes every
# parametrization), each with the quicker test that keeps its feature in the quick loop.
# An entry that matches no test of a collected file is an error, so none goes stale
# when a test is renamed.
SLOW = {
    "graph/test_dtr_workloads.py::test_every_workload_at_half_a_third_and_the_least_budget_"
    "gives_store_alls_gradients[adaptive_ode-h_dtr_eq]": "[adaptive_ode-lru], [unet-h_dtr_eq]",
    "graph/test_dtr_workloads.py::test_every_workload_at_half_a_third_and_the_least_budget_"
    "gives_store_alls_gradients[adaptive_ode-h_dtr]": "[adaptive_ode-lru], [unet-h_dtr]",
    "graph/test_dtr_workloads.py::test_every_workload_at_half_a_third_and_the_least_budget_"
    "gives_store_alls_gradients[adaptive_ode-largest_first]": (
        "[adaptive_ode-lru], [unet-largest_first]"
    ),
    "graph/test_graph_plan.py::test_a_300_op_graph_at_half_its_peak_gets_a_windowed_plan": (
        "test_a_300_op_graph_gets_a_plan_in_a_short_time"
    ),
    "graph/test_planned.py::test_every_graph_workload_under_its_plan": (
        "test_a_skip_connection_at_a_third_of_its_memory"
    ),
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[overheads]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[memory]": "[planning]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[depth]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[core]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[forward]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[loop]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[traced]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[transformer]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[dtr]": "[logn]",
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[graph]": (
        "[logn]; graph/test_graph_compare.py keeps the function it measures with"
    ),
    "tools/test_benchmarks.py::test_quick_run_prints_its_table[planning]": "[logn]",
    "tools/test_cli.py::test_compare_figure_has_one_colour_per_schedule": (
        "test_compare_memory_draws_the_budget_curve_within_every_budget"
    ),
    "tools/test_cli.py::test_time_is_measured_without_tracemalloc_and_memory_in_other_runs": (
        "test_compare_refuses_to_time_under_an_outer_tracemalloc"
    ),
    "tools/test_cli.py::test_compare_fails_when_a_gradient_differs": (
        "test_compare_transformer_fails_when_a_gradient_differs"
    ),
    "tools/test_cli.py::test_a_long_budget_curve_warns_first": (
        "test_a_long_comparison_warns_first_and_shows_progress"
    ),
    "tools/test_cli.py::test_compare_memory_draws_its_figure": (
        "test_compare_memory_draws_the_budget_curve_within_every_budget"
    ),
    "tools/test_cli.py::test_compare_runs_a_chain_and_a_scan_exactly[widths]": "[scan_rnn]",
    "budgets/test_memory_traced.py::"
    "test_tracemalloc_peak_is_within_the_budget_and_the_count_plus_transients": (
        "budgets/test_memory_accounting.py and test_memory_traced.py's fixed programs"
    ),
    "schedules/test_schedules.py::test_revolve_equals_optimum_for_all_small_cases": (
        "the other revolve tests of test_schedules.py"
    ),
    "schedules/test_schedules_online.py::test_near_optimal_for_every_n_up_to_1e5": (
        "test_cost_model_matches_simulate"
    ),
    "schedules/test_schedules_online.py::test_cost_model_matches_simulate_at_sample_points"
    "[30011-10]": "[5000-10]",
    "schedules/test_schedules_online.py::test_cost_model_matches_simulate_at_sample_points"
    "[20011-30]": "[4099-4]",
    "tools/test_cli.py::test_the_budget_curve_starts_where_it_is_worth_plotting": (
        "test_compare_memory_draws_the_budget_curve_within_every_budget"
    ),
    "tools/test_cli.py::test_compare_transformer_runs_every_mode_bit_identically": (
        "test_compare_transformer_fails_when_a_gradient_differs, tools/test_transformer.py"
    ),
    "tools/test_cli.py::test_a_short_comparison_says_nothing_on_stderr": (
        "test_a_long_comparison_warns_first_and_shows_progress"
    ),
    "budgets/test_memory_traced.py::"
    "test_the_replay_check_holds_memory_flat_in_the_number_of_steps": (
        "executor/test_replay.py::test_memory_is_flat_in_the_number_of_steps"
    ),
    "budgets/test_memory_budget.py::"
    "test_peak_bytes_stay_within_every_budget_and_gradients_are_exact": (
        "test_chains_of_repeated_layers_are_exact_within_every_budget"
    ),
    "forward/test_second_order.py::test_second_order_under_a_byte_budget_stays_within_it": (
        "budgets/test_budget_second_order.py"
    ),
    "schedules/test_schedules.py::test_revolve_million_steps": "test_revolve_large_grid",
    "schedules/test_schedules.py::test_revolve_large_grid[2-100000]": "[5-100000]",
    "schedules/test_schedules.py::test_revolve_large_grid[10-100000]": "[5-100000]",
    "schedules/test_schedules.py::test_revolve_large_grid[30-100000]": "[5-100000]",
    "schedules/test_schedules_online.py::test_cost_model_matches_simulate[7]": "[1] to [4]",
    "schedules/test_schedules_online.py::test_cost_model_matches_simulate[10]": "[1] to [4]",
    "schedules/test_schedules_disk.py::test_disk_revolve_is_optimal_against_exhaustive_search": (
        "test_two_level_is_optimal_against_exhaustive_search"
    ),
    "schedules/test_planning_shared.py::test_a_shared_plan_equals_exhaustive_search": (
        "the bit-for-bit table tests of test_planning_shared.py"
    ),
    "executor/test_loop.py::test_tracemalloc_peak_is_flat_for_revolve_and_linear_for_store_all": (
        "test_log_n_snapshots_give_log_n_memory_and_n_log_n_work"
    ),
    "executor/test_replay.py::test_memory_is_flat_in_the_number_of_steps[scan-28-True]": (
        "[chain-16-True] and the loop's"
    ),
}


def pytest_collection_modifyitems(config, items):
    """Mark the tests of :data:`SLOW` slow; refuse an entry that matches nothing."""
    matched, files = set(), set()
    for item in items:
        node = item.nodeid.removeprefix("tests/")
        files.add(node.split("::")[0])
        for entry in SLOW:
            if node == entry or node.startswith(entry + "["):
                item.add_marker(pytest.mark.slow)
                matched.add(entry)
    stale = [e for e in SLOW if e.split("::")[0] in files and e not in matched]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py: SLOW entries that match no test: {stale}")


@pytest.fixture(autouse=True, scope="module")
def frozen_heap():
    """Before each test file, collect, then put every object still alive (pytest,
    hypothesis, numpy, matplotlib, the test modules: 180,000 objects and more) out of
    the cyclic collector's reach with ``gc.freeze()``.  Otherwise each ``gc.collect()``
    walks them all, a tenth of a second each, and a run calls it a thousand times (the
    tracemalloc measurements, remat's comparisons and the benchmarks collect before they
    measure): once half the quick loop's time.  What the file's tests make is collected
    as before; an object frozen here that became garbage in a cycle would stay."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def fresh_plans():
    """Each test starts and ends with an empty cache of byte-budget plans, so none
    depends on a plan another test measured (tests are independent of their order)."""
    memory.clear_plans()
    yield
    memory.clear_plans()


@pytest.fixture(autouse=True)
def close_figures():
    """Each test's figures are closed after it: pyplot keeps them open otherwise, and
    warns once twenty are."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")
