"""The optimal graph plan (rm.schedules.plan_graph): optimal, valid, within budget, checked.

The oracle is an exhaustive search written apart from remat: a shortest path over
the sets of values held between stages, trying every set of values to keep at
every stage (the values some later stage reads, and the outputs); each stage
recomputes what it must (its op, the values it newly keeps, their missing parents)
and its own memory accounting prices it.  Recomputing more than that never
lowers the cost or the peak, and keeping a value no later stage reads never helps,
so the search covers every plan that can be optimal.
"""

import itertools
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remat.schedules import (
    ChainCosts,
    GraphCosts,
    GraphPlan,
    GraphPlanError,
    GraphPlanTimeout,
    Optimal,
    plan_graph,
    simulate_graph,
)
from remat.schedules.graph_greedy import OpGraph, greedy_plan, plan_cost

pytest.importorskip("scipy")


def _stage(costs, op, held, keep):
    """(cost, peak) of one stage that starts holding ``held`` and ends keeping ``keep``."""
    parents, size = costs.parents, costs.bytes
    need = {op} | (keep - held)
    grow = list(need)
    while grow:
        for i in parents[grow.pop()]:
            if i not in held and i not in costs.inputs and i not in need:
                need.add(i)
                grow.append(i)
    order = sorted(need)
    live = set(held)
    peak = sum(size[i] for i in live)
    for n, k in enumerate(order):
        live.add(k)
        peak = max(peak, sum(size[i] for i in live))
        rest = order[n + 1 :]
        for i in [*parents[k], k]:
            if i in live and i not in keep and not any(i in parents[j] for j in rest):
                live.discard(i)
    return sum(costs.compute[k] for k in order), peak


def brute_force(costs, memory):
    """The least cost of any plan within ``memory``, or None."""
    ops, parents = costs.ops, costs.parents
    best = {frozenset(): 0}
    for op in ops:
        read_later = {i for j in range(op + 1, costs.nodes) for i in parents[j]}
        done = [i for i in range(op + 1) if i not in costs.inputs]
        forced = {o for o in costs.outputs if o <= op}
        optional = [i for i in done if i in read_later and i not in forced]
        after = {}
        for held, cost in best.items():
            for r in range(len(optional) + 1):
                for chosen in itertools.combinations(optional, r):
                    keep = frozenset(chosen) | forced
                    more, peak = _stage(costs, op, held, keep)
                    if peak <= memory and cost + more < after.get(keep, float("inf")):
                        after[keep] = cost + more
        best = after
    return min(best.values(), default=None)


@st.composite
def graphs(draw, most=12):
    """A random DAG of 4..most nodes: 1-2 inputs, each op reading 1-3 earlier nodes."""
    n = draw(st.integers(4, most))
    inputs = set(range(draw(st.integers(1, 2))))
    parents = []
    for i in range(n):
        if i in inputs:
            parents.append(())
        else:
            k = draw(st.integers(1, min(3, i)))
            parents.append(
                tuple(sorted(draw(st.sets(st.integers(0, i - 1), min_size=k, max_size=k))))
            )
    compute = [0 if i in inputs else draw(st.integers(1, 5)) for i in range(n)]
    size = [draw(st.integers(0, 4)) for _ in range(n)]
    outputs = {n - 1} | ({n - 2} if n - 2 not in inputs and draw(st.booleans()) else set())
    return GraphCosts(parents, compute, size, frozenset(inputs), frozenset(outputs))


def optima(costs):
    """{budget: least cost} from store-all's peak down to the least feasible budget, and
    the largest infeasible budget below it."""
    feasible = {}
    for memory in range(plan_graph(costs, 1e9).predicted_peak_bytes, -1, -1):
        cost = brute_force(costs, memory)
        if cost is None:
            return feasible, memory
        feasible[memory] = cost
    return feasible, None


@settings(max_examples=20, deadline=None)
@given(graphs(), st.data())
def test_optimal_plan_equals_brute_force(costs, data):
    feasible, infeasible = optima(costs)
    if infeasible is not None:
        with pytest.raises(ValueError, match="no plan"):
            plan_graph(costs, infeasible)
    budgets = sorted(feasible)
    for memory in {budgets[0], data.draw(st.sampled_from(budgets), label="memory")}:
        plan = plan_graph(costs, memory)
        assert plan.predicted_cost == feasible[memory]
        checked = simulate_graph(plan, costs, memory=memory)  # raises at a moment above it
        assert checked.peak_bytes <= memory
        assert (checked.cost, checked.peak_bytes) == (
            plan.predicted_cost,
            plan.predicted_peak_bytes,
        )


@settings(max_examples=15, deadline=None)
@given(graphs(), st.data())
def test_lp_rounding_is_valid_and_never_below_the_optimum(costs, data):
    feasible, _ = optima(costs)
    memory = data.draw(st.sampled_from(sorted(feasible)), label="memory")
    try:
        plan = plan_graph(costs, memory, relaxed=True)
    except GraphPlanTimeout as error:  # no rounding fits: said, never a plan above the budget
        assert "no rounding of the LP relaxation fits" in str(error)
        return
    assert plan.method in {"store all", "lp rounding", "lp heuristic", "heuristic"}
    assert simulate_graph(plan, costs, memory=memory).cost == plan.predicted_cost
    assert plan.predicted_cost >= feasible[memory]


@settings(max_examples=15, deadline=None)
@given(graphs(), st.data())
def test_heuristic_plans_are_valid_and_never_below_the_optimum(costs, data):
    feasible, _ = optima(costs)
    memory = data.draw(st.sampled_from(sorted(feasible)), label="memory")
    graph = OpGraph(costs)
    for guide in (None, lambda j, t: (j * 7 + t) % 3):  # unguided, and an arbitrary guide
        found = greedy_plan(graph, memory, guide)
        if found is None:  # a heuristic may miss a plan; plan_graph then asks the MILP
            continue
        compute, keep = found
        plan = GraphPlan(
            tuple(tuple(graph.ops[j] for j in run) for run in compute),
            tuple(frozenset(graph.ops[j] for j in held) for held in keep),
            memory,
        )
        checked = simulate_graph(plan, costs)  # raises at a broken rule or above the budget
        assert checked.cost == plan_cost(graph, found) >= feasible[memory]


@settings(max_examples=15, deadline=None)
@given(graphs(), st.data(), st.integers(1, 3))
def test_windowed_plans_are_valid_and_never_below_the_optimum(costs, data, window):
    feasible, _ = optima(costs)
    memory = data.draw(st.sampled_from(sorted(feasible)), label="memory")
    try:
        plan = plan_graph(costs, memory, window=window)
    except GraphPlanTimeout as error:  # windows too narrow and no heuristic plan: said so
        assert "windows admit no plan" in str(error)
        return
    assert plan.method in {"store all", "windowed optimal", "windowed time limit", "heuristic"}
    assert simulate_graph(plan, costs, memory=memory).cost == plan.predicted_cost
    assert plan.predicted_cost >= feasible[memory]


def _chain(n, sizes):
    return ChainCosts([1] * n, [3] * n, sizes[: n + 1], sizes[:n])


@pytest.mark.parametrize("sizes", [[2] * 7, [1, 3, 1, 2, 3, 1, 2]])
@pytest.mark.parametrize("n", [3, 5])
def test_chain_costs_agree_with_optimal_where_the_models_coincide(n, sizes):
    # The models differ: Optimal counts slots and tapes but not the state being
    # advanced (nor cotangents), and re-tapes step i before reversing it; the graph
    # counts every resident value and g_i reads x_i, not x_{i+1}.  Every Optimal
    # schedule is a graph plan holding at most the current and next states more, so
    # with 2 max(s) bytes more the graph plan is never dearer; once both store all,
    # they cost the same, sum(reverse_time).
    costs = _chain(n, sizes)
    graph = GraphCosts.chain(costs)
    extra = 2 * max(costs.state_bytes[1:])
    store_all = sum(costs.reverse_time)
    for memory in range(1, sum(sizes[: n + 1]) + 1):
        try:
            optimal = Optimal(costs, memory).predicted_time
        except ValueError:
            continue
        assert plan_graph(graph, memory + extra).predicted_cost <= optimal
        if memory >= sum(costs.state_bytes):
            assert plan_graph(graph, memory).predicted_cost == optimal == store_all


def test_chain_graph_is_the_joint_graph():
    graph = GraphCosts.chain(ChainCosts([1, 2], [3, 5], [4, 5, 6], [4, 5]))
    # x0 x1 x2 g1 g0: g1 reads x1 and x2, g0 reads x0 and g1
    assert graph.parents == ((), (0,), (1,), (1, 2), (0, 3))
    assert graph.compute == (0, 1, 2, 3, 2)
    assert graph.bytes == (4, 5, 6, 0, 0)
    assert graph.inputs == {0} and graph.outputs == {4}


def test_simulator_refuses_broken_plans():
    g = GraphCosts([(), (0,), (1,), (1, 2)], [0, 1, 1, 2], [8, 8, 8, 8], {0}, {3})
    good = GraphPlan(((1,), (2,), (3,)), (frozenset({1}), frozenset({1, 2}), frozenset({3})), 24)
    assert simulate_graph(good, g).peak_bytes == 24
    with pytest.raises(GraphPlanError, match="stage 2 .* node 3 reads node 1"):
        simulate_graph(
            GraphPlan(good.compute, (frozenset({1}), frozenset({2}), frozenset({3})), 24), g
        )
    with pytest.raises(GraphPlanError, match="above the budget of 16"):
        simulate_graph(good, g, memory=16)
    with pytest.raises(GraphPlanError, match="above the budget of 16"):  # the plan's own budget
        simulate_graph(GraphPlan(good.compute, good.keep, 16), g)
    with pytest.raises(GraphPlanError, match="outputs \\[3\\] must be kept"):
        simulate_graph(GraphPlan(good.compute, good.keep[:2] + (frozenset(),), 24), g)
    with pytest.raises(GraphPlanError, match="held already"):
        simulate_graph(GraphPlan(((1,), (1, 2), (3,)), good.keep, 24), g)


def test_bad_graphs_and_arguments_are_refused():
    with pytest.raises(ValueError, match=r"parents\[1\] = \(1,\)"):
        GraphCosts([(), (1,)], [0, 1], [1, 1], {0})
    with pytest.raises(ValueError, match=r"bytes\[1\] must be a finite number >= 0"):
        GraphCosts([(), (0,)], [0, 1], [1, -1], {0})
    with pytest.raises(ValueError, match="no node to compute"):
        GraphCosts([()], [0], [1], {0})
    g = GraphCosts([(), (0,)], [0, 1], [1, 1], {0}, {1})
    with pytest.raises(ValueError, match="memory must be a number of bytes >= 0"):
        plan_graph(g, -1)


def test_time_limit_falls_back_and_says_so():
    # a 60-op chain at a tight budget is not proven optimal in 0.2 s: the plan says how it
    # was found (the heuristic's plan at worst), and is valid
    graph = GraphCosts.chain(ChainCosts([1] * 30, [3] * 30, [2] * 31, [2] * 30))
    plan = plan_graph(graph, 16, time_limit=0.2)
    assert plan.method in {"optimal", "time limit", "lp rounding", "lp heuristic", "heuristic"}
    assert simulate_graph(plan, graph, memory=16).cost == plan.predicted_cost


def _chain_300(seed=0):
    """The joint graph of a 150-step chain, steps of random times and bytes: 300 ops."""
    rng = random.Random(seed)
    forward = [rng.randint(1, 3) for _ in range(150)]
    sizes = [1000 * rng.randint(1, 4) for _ in range(151)]
    return GraphCosts.chain(ChainCosts(forward, [3 * f for f in forward], sizes, sizes[:150]))


# bug: at 300 ops neither the MILP nor its relaxation finished in the time given, and
# plan_graph raised GraphPlanTimeout; the heuristic's plan now answers
def test_a_300_op_graph_gets_a_plan_in_a_short_time():
    graph = _chain_300()
    memory = 0.33 * plan_graph(graph, float("inf")).predicted_peak_bytes
    plan = plan_graph(graph, memory, time_limit=1.0)
    assert len(graph.ops) == 300
    assert plan.method in {"windowed time limit", "lp rounding", "lp heuristic", "heuristic"}
    assert simulate_graph(plan, graph, memory=memory).cost == plan.predicted_cost


def test_a_300_op_graph_at_half_its_peak_gets_a_windowed_plan():
    graph = _chain_300()
    memory = 0.5 * plan_graph(graph, float("inf")).predicted_peak_bytes
    plan = plan_graph(graph, memory, time_limit=60.0)
    greedy = greedy_plan(OpGraph(graph), memory)
    assert plan.method in {"windowed optimal", "windowed time limit"}
    assert simulate_graph(plan, graph, memory=memory).cost == plan.predicted_cost
    assert greedy is not None and plan.predicted_cost < plan_cost(OpGraph(graph), greedy)


def test_the_benchmark_runs_at_small_sizes():
    bench = pytest.importorskip(
        "benchmarks.bench_graph_plan", reason="benchmarks/ is not here (an installed remat)"
    )
    text = bench.run(quick=True)
    assert "| shape | ops | budget | method | cost | heuristic | solve s |" in text
    assert all(f"| {shape} |" in text for shape in bench.SHAPES)


def test_without_scipy_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)  # import scipy.optimize fails
    g = GraphCosts([(), (0,)], [0, 1], [1, 1], {0}, {1})
    with pytest.raises(ImportError, match=r'pip install "remat\[milp\]"'):
        plan_graph(g, 1)
