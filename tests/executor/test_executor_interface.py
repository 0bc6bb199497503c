"""The run's interface for what measures a chain (remat.memory, remat.measure, remat.disk).

They drive a run through ChainRun.measuring, state, move_to, carry_out, tape_of,
seed, hold_with, spec_at, devices and release, never through its attributes.
"""

import ast
from pathlib import Path

import numpy as np

import remat as rm
from remat import backend, schedules
from remat.alive import Holdings
from remat.executor import Chain, ChainRun

DRIVERS = ("memory.py", "measure.py", "disk.py")
INTERFACE = {
    "measuring",
    "state",
    "position",
    "move_to",
    "carry_out",
    "tape_of",
    "seed",
    "hold_with",
    "spec_at",
    "devices",
    "release",
}


# memory.py and disk.py wrote the run's internals (run.held, run.tapes, run.current,
# run.position, the HANDLERS table) to drive their measuring runs
def test_what_measures_a_chain_uses_only_the_runs_interface():
    folder = Path(rm.__file__).parent
    for name in DRIVERS:
        tree = ast.parse((folder / name).read_text())
        used = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "run"
        }
        assert used <= INTERFACE, f"{name} reaches into the run: {sorted(used - INTERFACE)}"
        assigned = [
            target
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "run"
        ]
        assert not assigned, f"{name} assigns to the run's attributes"
        names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert "HANDLERS" not in names, f"{name} carries out actions without the run"


def loop_chain(w):
    def step(h):
        return rm.tanh(h @ w)

    return Chain("tape.loop", lambda i, h, x: (step(h), None), "step".format, True, step=step)


class Sink:
    """An outer sweep that keeps what reaches it (the parameters' cotangents)."""

    ns = backend.ARRAY_NAMESPACE
    create_graph = retain_graph = False

    def __init__(self):
        self.got = []

    def add(self, node, g):
        self.got.append(g)


def test_a_measuring_run_tapes_reverses_and_counts_with_the_holdings_given():
    rng = np.random.default_rng(0)
    w = rm.tensor(rng.standard_normal((3, 3)), requires_grad=True)
    x = rm.tensor(rng.standard_normal(3))
    held, sink = Holdings(), Sink()
    run = ChainRun.measuring(rm.Tape(), loop_chain(w), x, 4, held, sink=sink)
    start = run.state
    run.carry_out(schedules.Tape(0, 2))
    assert held.bytes > 0 and run.position == 2
    tape = run.tape_of(1)
    run.seed([np.ones(3)])
    run.carry_out(schedules.Reverse(0, 2))
    assert held.bytes == 0 and held.peak > 0
    # the cotangent carried back to x_0: d(sum(tanh(tanh(x W) W)))/dx, by hand
    h1 = np.tanh(x.data @ w.data)
    g1 = (1 - np.tanh(h1 @ w.data) ** 2) @ w.data.T
    g0 = (g1 * (1 - h1**2)) @ w.data.T
    assert np.allclose(run.cotangent[0], g0)
    assert len(sink.got) == 2  # W's cotangent from each step
    assert tape.outputs[0].shape == (3,)
    run.move_to(0, start)
    run.carry_out(schedules.Advance(0, 3))
    assert np.allclose(run.state[0][0], np.tanh(np.tanh(h1 @ w.data) @ w.data))
    run.release()
