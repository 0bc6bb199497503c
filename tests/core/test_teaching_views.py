"""Teaching views of a tape: print(tape) / tape.describe(), tape.to_dot(), tape.draw()
(issue 16, item 6)."""

import doctest
import re
import sys

import numpy as np
import pytest

import remat as rm
from remat import schedules
from remat.tape import Recorder

EDGE = re.compile(r"^\s*(\w+) -> (\w+);$")
NODE = re.compile(r'^\s*(\w+) \[shape=(\w+), label="(.*)"\];$')


def parse_dot(text):
    """(nodes: name -> (shape, label lines), edges: [(tail, head)]) from to_dot's text."""
    lines = text.strip().splitlines()
    assert lines[0] == "digraph tape {" and lines[-1] == "}"
    nodes, edges = {}, []
    for line in lines[1:-1]:
        if (m := NODE.match(line)) is not None:
            assert m.group(1) not in nodes
            nodes[m.group(1)] = (m.group(2), re.split(r"\\[nl]", m.group(3)))
        elif (m := EDGE.match(line)) is not None:
            edges.append((m.group(1), m.group(2)))
    for tail, head in edges:  # every edge joins two declared nodes
        assert tail in nodes and head in nodes
    return nodes, edges


def small_graph():
    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    w = rm.tensor(np.ones((3, 4)), requires_grad=True)
    with rm.Tape() as tape:
        h = x @ w  # 1
        y = rm.tanh(h)  # 2
        z = y * 2.0  # 3: a constant operand
        loss = (z * h).sum()  # 4, 5
    return tape, loss, (x, w)


def record_lines(tape, **kw):
    return tape.describe(**kw).splitlines()[1:]


# --- print(tape) -------------------------------------------------------------------------


def test_records_are_numbered_per_tape_from_one():
    first, _, _ = small_graph()
    second, _, _ = small_graph()  # made later: global sequence numbers are larger
    for tape in (first, second):
        numbers = [line.split()[0] for line in record_lines(tape)]
        assert numbers == ["#1", "#2", "#3", "#4", "#5"]
    assert second.records[0].seq > first.records[-1].seq
    assert str(first) == first.describe() and str(first) == str(first)


def test_each_line_names_its_inputs():
    tape, _, _ = small_graph()
    lines = record_lines(tape)
    assert [line.split()[1] for line in lines] == ["matmul", "tanh", "multiply", "multiply", "sum"]
    inputs = [line.split("inputs: ")[1] for line in lines]
    assert inputs == ["leaf 2x3, leaf 3x4", "#1", "#2, constant", "#3, #1", "#4"]
    assert "2x4" in lines[0] and f"{tape.records[0].saved_bytes()} B saved" in lines[0]
    assert "scalar" in lines[4]


def test_inputs_from_before_the_tape_and_after_backward():
    x = rm.tensor([1.0, 2.0], requires_grad=True)
    before = rm.exp(x)  # recorded on no tape that lists it
    with Recorder() as tape:  # the plain recorder has the views too
        y = (before * x).sum()
    lines = record_lines(tape)
    assert lines[0].split("inputs: ")[1] == "outside: exp 2, leaf 2"
    y.backward()
    lines = record_lines(tape)
    assert all("freed" in line and "inputs freed by backward" in line for line in lines)


def test_inputs_remat_made_are_named_input():
    """A loop step's state, rm.grad's argument: leaves remat makes itself (StandIns)."""
    v = rm.Tensor._stand_in(np.array([0.5, 1.0]))
    with rm.Tape() as tape:
        rm.sin(v)
    assert record_lines(tape)[0].split("inputs: ")[1] == "input 2"


def test_columns_line_up():
    tape, _, _ = small_graph()
    lines = record_lines(tape)
    starts = {line.index("inputs:") for line in lines}
    assert len(starts) == 1


# --- to_dot -------------------------------------------------------------------------------


def test_to_dot_has_a_node_per_record_and_the_edges_between_them():
    tape, _, (x, w) = small_graph()
    nodes, edges = parse_dot(tape.to_dot())
    boxes = {n: label for n, (shape, label) in nodes.items() if shape == "box"}
    ellipses = {n: label for n, (shape, label) in nodes.items() if shape == "ellipse"}
    assert sorted(boxes) == [f"r{k}" for k in range(1, 6)]
    for k, record in enumerate(tape.records, 1):
        label = boxes[f"r{k}"]
        assert label[0] == f"#{k} {record.op.name}"
        assert label[2] == f"{record.saved_bytes()} B saved"
    assert boxes["r1"][1] == "2x4" and boxes["r5"][1] == "scalar"
    # two leaves, drawn once each; constants are not drawn
    assert sorted(label[0] for label in ellipses.values()) == ["leaf 2x3", "leaf 3x4"]
    leaf_of = {label[0]: name for name, label in ellipses.items()}
    expected = {
        (leaf_of["leaf 2x3"], "r1"),
        (leaf_of["leaf 3x4"], "r1"),
        ("r1", "r2"),
        ("r2", "r3"),
        ("r3", "r4"),
        ("r1", "r4"),
        ("r4", "r5"),
    }
    assert set(edges) == expected and len(edges) == len(expected)


def test_to_dot_draws_an_input_used_twice_as_two_edges():
    x = rm.tensor([1.0, 2.0], requires_grad=True)
    with rm.Tape() as tape:
        (x * x).sum()
    nodes, edges = parse_dot(tape.to_dot())
    assert edges.count(("n1", "r1")) == 2 and ("r1", "r2") in edges


def test_to_dot_escapes_quotes_and_backslashes():
    from remat.engine.views import _dot_label

    assert _dot_label(['say "hi"', "a\\b"]) == '"say \\"hi\\"\\na\\\\b"'


def test_an_empty_tape_gives_an_empty_graph():
    with rm.Tape() as tape:
        pass
    nodes, edges = parse_dot(tape.to_dot())
    assert nodes == {} and edges == []
    assert str(tape).startswith("Tape: 0 records, 0 bytes saved")


@pytest.mark.skipif(
    not __import__("shutil").which("dot"), reason="the Graphviz program dot is not installed"
)
def test_dot_text_is_accepted_by_graphviz(tmp_path):
    import subprocess

    tape, _, _ = loop_tape(steps=5, snapshots=2)
    path = tmp_path / "tape.dot"
    path.write_text(tape.to_dot(expand_loops=True))
    subprocess.run(["dot", "-Tsvg", str(path), "-o", str(tmp_path / "tape.svg")], check=True)


def test_draw_needs_the_optional_graphviz_package(monkeypatch):
    tape, _, _ = small_graph()
    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz fails
    with pytest.raises(ImportError, match=r"pip install 'remat\[graph\]'.*to_dot"):
        tape.draw()


def test_draw_gives_a_graphviz_source_when_installed():
    graphviz = pytest.importorskip("graphviz")
    tape, _, _ = small_graph()
    source = tape.draw()
    assert isinstance(source, graphviz.Source) and source.source == tape.to_dot()


# --- loops, expanded ------------------------------------------------------------------------


def loop_tape(steps, snapshots=None, schedule=None, until=None):
    rng = np.random.default_rng(0)
    w = rm.tensor(rng.standard_normal((3, 3)) * 0.4, requires_grad=True)
    h0 = rm.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    step = lambda h: h + 0.5 * rm.tanh(h @ w)
    with rm.Tape(snapshots=snapshots, schedule=schedule) as tape:
        if until is None:
            h = tape.loop(step, h0, steps=steps)
        else:
            h = tape.loop(step, h0, until=until, max_steps=steps)
        loss = (h * h).sum()
    return tape, loss, (w, h0)


def expanded_actions(tape, max_actions):
    lines = record_lines(tape, expand_loops=True, max_actions=max_actions)
    k = next(i for i, line in enumerate(lines) if line.split()[1] == "loop")
    header = lines[k + 1].strip()
    body = []
    for line in lines[k + 2 :]:
        if line.lstrip().startswith("#"):
            break
        body.append(line.strip())
    return header, body


def test_a_loop_expands_to_its_schedules_actions():
    tape, loss, _ = loop_tape(steps=9, snapshots=3)
    want = [repr(a) for a in schedules.Revolve(9, 3)]
    header, body = expanded_actions(tape, max_actions=1000)
    assert header == f"tape.loop: {schedules.Revolve(9, 3)!r}, 9 steps, {len(want)} actions"
    assert body == want
    # at most max_actions, and how many are left out
    header, body = expanded_actions(tape, max_actions=4)
    assert body == want[:4] + [f"... {len(want) - 4} more"]
    # without expand_loops, the loop is one line like any other
    plain = record_lines(tape)
    assert len(plain) == len(tape.records) and plain[0].split()[1] == "loop"


@pytest.mark.parametrize("schedule", ["online", "store_all"])
def test_an_online_loop_expands_to_what_the_executor_carried_out(schedule):
    """A loop of unknown length: the listing replays the schedule, told the length at
    the step where the loop ended; its step evaluations are those the run counts."""
    tape, loss, _ = loop_tape(steps=7, snapshots=2, schedule=schedule, until=lambda h: False)
    header, body = expanded_actions(tape, max_actions=10_000)
    assert header.startswith("tape.loop: ") and ", 7 steps," in header
    assert body[-1] == "End()" and "EndForward()" in body
    loss.backward()
    evaluated = 0
    for text in body:
        kind, args = text.split("(", 1)
        if kind in ("Advance", "Tape"):
            start, stop = (int(v) for v in args.rstrip(")").split(","))
            evaluated += stop - start
    assert evaluated == tape.stats.forward_steps


def test_an_expanded_loop_after_backward_says_its_schedule_is_gone():
    tape, loss, _ = loop_tape(steps=4, snapshots=2)
    loss.backward()
    header, body = expanded_actions(tape, max_actions=5)
    assert "released by backward" in header and body == []


def test_to_dot_expands_a_loop_into_its_box():
    tape, _, _ = loop_tape(steps=6, snapshots=2)
    want = [repr(a) for a in schedules.Revolve(6, 2)]
    nodes, edges = parse_dot(tape.to_dot(expand_loops=True, max_actions=3))
    loop = next(label for shape, label in nodes.values() if label[0].endswith(" loop"))
    assert loop[3].startswith("tape.loop: Revolve")
    assert loop[4:7] == want[:3] and loop[7] == f"... {len(want) - 3} more"
    plain_nodes, plain_edges = parse_dot(tape.to_dot())
    assert plain_edges == edges  # expanding changes labels only
    assert all(len(label) == 3 for shape, label in plain_nodes.values() if shape == "box")
    # the loop's input is the leaf h0; its outputs reach the loss through loop_output
    names = {label[0]: name for name, (shape, label) in nodes.items()}
    assert (names["leaf 2x3"], names["#1 loop"]) in edges
    assert (names["#1 loop"], names["#2 loop_output"]) in edges


def test_docstring_examples():
    result = doctest.testmod(rm.tape)
    assert result.attempted > 0 and result.failed == 0


# --- names ------------------------------------------------------------------------------


# Two leaves of one shape were both "leaf 3" in to_dot(): tensors could not be named.
def test_named_leaves_show_their_names_in_print_and_to_dot():
    W = rm.tensor(np.ones((3, 3)), requires_grad=True, name="W")
    V = rm.tensor(np.ones((3, 3)), requires_grad=True, name="V")
    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    with rm.Tape() as tape:
        loss = (x @ W @ V).sum()
    assert (W.name, V.name, x.name, loss.name) == ("W", "V", None, None)
    lines = record_lines(tape)
    assert lines[0].endswith("inputs: leaf 2x3, W: leaf 3x3")
    assert lines[1].endswith("inputs: #1, V: leaf 3x3")
    nodes, _ = parse_dot(tape.to_dot())
    ellipses = sorted(label[0] for shape, label in nodes.values() if shape == "ellipse")
    assert ellipses == ["V: leaf 3x3", "W: leaf 3x3", "leaf 2x3"]
    import copy

    assert copy.deepcopy(W).name == "W" and copy.copy(W).name == "W"
    with pytest.raises(TypeError, match="name must be a string, got 3"):
        rm.tensor(1.0, name=3)
