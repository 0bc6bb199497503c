"""Plots render headless and draw what the schedule does."""

import pytest

import remat as rm
from remat import schedules as S
from remat.workloads import make_workload

pytest.importorskip("matplotlib")
plot = pytest.importorskip("remat.plot")


def test_trace_follows_the_schedule():
    segments = plot.trace_schedule(S.Revolve(10, 2))
    evaluations = sum(t1 - t0 for kind, t0, t1, *_ in segments if kind in ("advance", "tape"))
    reversals = [s for s in segments if s[0] == "reverse"]
    assert evaluations == S.optimal_forward_steps(10, 2)
    assert [s[3] for s in reversals] == list(range(10, 0, -1))


@pytest.mark.parametrize(
    "schedule, steps", [(S.Revolve(20, 3), None), (S.Sqrt(20), None), (S.Online(3), 20)]
)
def test_schedule_diagram_renders(tmp_path, schedule, steps):
    fig = plot.schedule_diagram(schedule, steps=steps)
    fig.savefig(tmp_path / "d.png")
    assert (tmp_path / "d.png").stat().st_size > 1000


def test_schedule_diagram_draws_the_disk_level(tmp_path):
    schedule = S.TwoLevel(30, 2, 2, 1, 1)
    sim = S.simulate(schedule)
    segments = plot.trace_schedule(schedule)
    kinds = [segment[0] for segment in segments]
    assert kinds.count("disk snapshot") == sim.writes[S.DISK] > 0
    assert kinds.count("disk restore") == sim.reads[S.DISK] > 0
    assert kinds.count("snapshot") == sim.writes[S.MEMORY]
    fig = plot.schedule_diagram(schedule)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "disk snapshot" in labels and "disk restore" in labels and "snapshot" in labels
    assert "disk writes" in fig.axes[0].get_title()
    fig.savefig(tmp_path / "disk.png")
    assert (tmp_path / "disk.png").stat().st_size > 1000


def test_memory_timeline_needs_a_traced_tape(tmp_path):
    workload = make_workload("ode", steps=20)
    tape = rm.Tape(snapshots=3, trace=True)
    workload.loss_and_gradients(tape)
    timeline = tape.loops[0].timeline
    assert timeline[0] == (0, 0)
    assert timeline[-1][0] == tape.stats.forward_steps
    assert max(b for _, b in timeline) == tape.stats.peak_bytes
    plot.memory_timeline(tape).savefig(tmp_path / "m.png")
    untraced = rm.Tape(snapshots=3)
    make_workload("ode", steps=5).loss_and_gradients(untraced)
    with pytest.raises(ValueError, match="trace=True"):
        plot.memory_timeline(untraced)


def test_budget_curve_draws_simulated_points_on_the_optimum(tmp_path):
    fig = plot.budget_curve(100, range(2, 12), state_bytes=1024)
    lines = {line.get_label(): line.get_ydata() for line in fig.axes[0].get_lines()}
    want = [S.optimal_forward_steps(100, s) / 100 for s in range(2, 12)]
    assert list(lines["binomial optimum"]) == want
    assert list(lines["Revolve (simulated)"]) == want
    fig.savefig(tmp_path / "b.png")
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_slot_spans_follow_the_two_level_schedule():
    plan = S.TwoLevel(21, 2, 2, 2, 2)
    spans = plot.slot_spans(plan)
    sim = S.simulate(plan)
    disk = [span for span in spans if span[0] == S.DISK]
    memory = [span for span in spans if span[0] == S.MEMORY]
    assert len(disk) == sim.writes[S.DISK] and len(memory) == sim.writes[S.MEMORY]
    assert {slot for _, slot, *_ in disk} == {0, 1} and {slot for _, slot, *_ in memory} == {0, 1}
    assert disk[-1][2] == 0 and disk[-1][3] == 0  # x_0 is on disk from the start
    assert all(t0 <= t1 for *_, t0, t1 in spans)


def test_two_level_diagram_has_a_lane_per_slot(tmp_path):
    fig = plot.two_level_diagram(S.TwoLevel(21, 2, 2, 2, 2))
    lanes = fig.axes[1]
    assert [t.get_text() for t in lanes.get_yticklabels()] == [
        "disk 0",
        "disk 1",
        "memory 0",
        "memory 1",
    ]
    fig.savefig(tmp_path / "two_level.png")
    assert (tmp_path / "two_level.png").stat().st_size > 1000


def test_trace_draws_the_states_an_inverse_recomputes():
    segments = plot.trace_schedule(S.Reversible(8, 2))
    inverted = [s for s in segments if s[0] == "invert"]
    assert len(inverted) == S.simulate(S.Reversible(8, 2)).inversions
    assert all(p0 == p1 + 1 for _, _, _, p0, p1 in inverted)  # each goes one state down
