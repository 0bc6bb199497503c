"""remat.plot_graph draws a recorded graph, each value coloured by what a plan does with it."""

import math

import pytest

import remat as rm
from remat.graph_workloads import unet
from remat.schedules import GraphCosts, GraphPlan, simulate_graph

pytest.importorskip("matplotlib")
plot_graph = pytest.importorskip("remat.plot_graph")
from matplotlib.colors import to_rgba  # noqa: E402  (after the importorskip)

from remat.plot import GRAPH_COLOURS  # noqa: E402


def chain_and_plan():
    """x0 (input) -> 1 -> 2 -> 3 (the loss), and its joint graph's gradient nodes
    4 (of 3: reads 2, 3), 5 (of 2: reads 1, 4), 6 (of 1: reads 0, 5).  The plan,
    written by hand, drops node 1 after stage 1 and computes it again just before
    node 5, which reads it: node 1 is recomputed once; node 6 is read by nothing."""
    graph = GraphCosts.joint([(), (0,), (1,), (2,)], [0, 1, 1, 1], [0, 4, 4, 4], {0}, loss=3)
    assert graph.parents[4:] == ((2, 3), (1, 4), (0, 5))
    keep = [{1}, {2}, {2, 3}, {3, 4}, {3, 5}, {3}]
    plan = GraphPlan(((1,), (2,), (3,), (4,), (1, 5), (6,)), tuple(map(frozenset, keep)), 16)
    simulate_graph(plan, graph)  # a valid plan
    return graph, plan


def drawn_colours(fig):
    """The colour of each node's marker, in the order of graph_layout's nodes."""
    return [tuple(c) for c in fig.axes[0].collections[-1].get_facecolors()]


def test_the_colours_are_what_the_hand_made_plan_does():
    graph, plan = chain_and_plan()
    want = ["recomputed", "kept", "kept", "kept", "kept", "freed"]  # nodes 1 .. 6
    assert plot_graph.value_fates(graph, plan) == [("input", 0)] + [
        (kind, int(kind == "recomputed")) for kind in want
    ]
    fig = plot_graph.graph_diagram(graph, plan, names="x a b loss g3 g2 g1".split())
    assert list(plot_graph.graph_layout(graph)) == [1, 2, 3, 4, 5, 6]
    assert drawn_colours(fig) == [to_rgba(GRAPH_COLOURS[kind]) for kind in want]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1" in texts and {"a", "b", "loss"} <= set(texts)  # the count, the labels
    # 3 forward ops, 3 VJPs at 2 each, 1 recomputation; stage 4 holds 3, 4, then 1 and 5
    want_title = "given plan: 4 kept, 1 recomputed once; cost 10, peak 16 bytes (budget 16 bytes)"
    assert fig.axes[0].get_title() == want_title


def test_a_run_that_was_not_planned_is_coloured_by_its_recomputations():
    graph, _ = chain_and_plan()
    fates = plot_graph.value_fates(graph, recomputed={2: 3})
    assert fates[1:4] == [("kept", 0), ("recomputed", 3), ("kept", 0)]
    fig = plot_graph.graph_diagram(graph, recomputed={2: 3})
    assert drawn_colours(fig)[1] == to_rgba(GRAPH_COLOURS["recomputed"])
    assert fig.axes[0].get_title() == "a run: 4 kept, 1 recomputed 3 times in all"
    with pytest.raises(ValueError, match="node ids in 0..6"):
        plot_graph.value_fates(graph, recomputed={9: 1})
    with pytest.raises(ValueError, match="not both"):
        plot_graph.value_fates(graph, GraphPlan((), (), 0), recomputed={})


def test_a_plan_for_another_graph_is_refused():
    graph, plan = chain_and_plan()
    other = GraphCosts.joint([(), (0,), (1,)], [0, 1, 1], [0, 4, 4], {0}, loss=2)
    with pytest.raises(ValueError, match="plan has 6 stages but the graph has 4 ops"):
        plot_graph.graph_diagram(other, plan)


def recorded(workload):
    """The joint graph of one recorded forward: a node per leaf and per record, unit
    compute, each op's output bytes (float64), names the ops'."""
    with rm.Recorder() as recorder:
        loss = workload.forward()
    index, parents, size, names = {}, [], [], []
    for record in recorder.records:
        for p in record.parents:
            if p is not None and id(p) not in index:  # a leaf
                index[id(p)] = len(parents)
                parents.append(())
                size.append(0)
                names.append("leaf")
        parents.append(tuple(sorted({index[id(p)] for p in record.parents if p is not None})))
        index[id(record)] = len(parents) - 1
        size.append(8 * math.prod(record.shape))
        names.append(record.op.name)
    inputs = {i for i, p in enumerate(parents) if not p}
    compute = [0 if i in inputs else 1 for i in range(len(parents))]
    graph = GraphCosts.joint(parents, compute, size, inputs, loss=index[id(loss.record)])
    return graph, names + ["grad"] * (graph.nodes - len(names)), len(recorder.records)


def test_a_workloads_graph_is_drawn_with_each_gradient_under_its_op(tmp_path):
    graph, names, ops = recorded(unet(levels=1, width=2, length=4, batch=1))
    where = plot_graph.graph_layout(graph)
    top = [node for node, (_, y) in where.items() if y == plot_graph.ROWS[0]]
    bottom = [x for x, y in where.values() if y == plot_graph.ROWS[1]]
    assert len(top) == ops and len(bottom) == len(graph.ops) - ops
    assert set(bottom) <= {where[node][0] for node in top}  # each under an op
    recomputed = {top[3]: 2}
    fig = plot_graph.graph_diagram(graph, names=names, recomputed=recomputed)
    colours = drawn_colours(fig)
    assert colours.count(to_rgba(GRAPH_COLOURS["recomputed"])) == 1
    fig.savefig(tmp_path / "unet.png")
    assert (tmp_path / "unet.png").stat().st_size > 1000


def test_forward_says_where_the_gradient_nodes_start():
    # a graph laid out as a tape's run is: no input nodes, the forward ops 0, 1, 2, then
    # one gradient node per op in the sweep's order (2, 1, 0), each under its op
    graph = GraphCosts([(), (0,), (1,), (2,), (1, 3), (0, 4)], [1] * 6, [4, 4, 4, 0, 0, 0],
                       outputs={5})  # fmt: skip
    assert plot_graph.graph_layout(graph) == {i: (float(i), 0.0) for i in range(6)}  # one row
    below = plot_graph.ROWS[1]
    assert plot_graph.graph_layout(graph, forward=3) == {
        0: (0.0, 0.0), 1: (1.0, 0.0), 2: (2.0, 0.0), 3: (2.0, below), 4: (1.0, below),
        5: (0.0, below),
    }  # fmt: skip
    with pytest.raises(ValueError, match="forward=0 must count the forward nodes, 1..6"):
        plot_graph.graph_diagram(graph, forward=0)


def test_columns_place_each_node_and_the_gradient_nodes_without_an_op_above_are_labelled():
    # forward nodes for ops 0 and 2 only (op 1's value is no node), a gradient node per op
    graph = GraphCosts([(), (0,), (1,), (0, 2), (3,)], [1] * 5, [4, 4, 0, 0, 0], outputs={4})
    columns = [0, 2, 2, 1, 0]
    below = plot_graph.ROWS[1]
    where = plot_graph.graph_layout(graph, forward=2, columns=columns)
    assert where == {0: (0.0, 0.0), 1: (2.0, 0.0), 2: (2.0, below), 3: (1.0, below),
                     4: (0.0, below)}  # fmt: skip
    names = ["a", "c", "vjp c", "vjp b", "vjp a"]
    fig = plot_graph.graph_diagram(graph, names=names, forward=2, columns=columns)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"a", "c", "vjp b"} <= texts and not {"vjp a", "vjp c"} & texts
    with pytest.raises(ValueError, match="columns has 2 entries for 5 nodes"):
        plot_graph.graph_layout(graph, forward=2, columns=[0, 1])


def test_a_planned_tapes_graph_is_drawn_with_its_plan(tmp_path):
    workload = unet(levels=2, width=2, length=8, batch=1)
    tape = rm.Tape(memory=workload.measure().saved_bytes * 3 // 4, remat="optimal")
    for _ in range(2):  # the first run records and plans, the second follows the plan
        workload.loss_and_gradients(tape)
    stats = tape.stats
    assert stats.planned, stats.fallback
    forward = sum(not name.startswith("vjp ") for name in stats.names)
    # "op k", "vjp op k", "vjp op k (+2)": the index of the op a node stands for
    columns = [next(int(w) for w in name.split() if w.isdigit()) for name in stats.names]
    fig = plot_graph.graph_diagram(stats.graph, stats.plan, stats.names, forward=forward,
                                   columns=columns)  # fmt: skip
    fates = plot_graph.value_fates(stats.graph, stats.plan)
    want = [GRAPH_COLOURS[fates[node][0]] for node in plot_graph.graph_layout(
        stats.graph, forward, columns)]  # fmt: skip
    assert drawn_colours(fig) == [to_rgba(c) for c in want]
    assert sum(times for _, times in fates) == stats.plan.recomputed > 0
    fig.savefig(tmp_path / "planned.png")
