"""The command line: exit codes, the comparison table, and one-line errors."""

import subprocess
import sys

import numpy as np
import pytest

import remat as rm
from remat import cli, schedules, workloads


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "remat", *args], capture_output=True, text=True, timeout=120
    )


def test_compare_prints_a_measured_table_and_exits_zero():
    result = run_cli("compare", "--steps", "40", "--snapshots", "4")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line}
    assert set(cli.COMPARED) <= set(rows)
    revolve = rows["revolve"]
    assert int(revolve[2]) == int(revolve[3]) == schedules.optimal_forward_steps(40, 4)
    assert int(rows["store_all"][2]) == 40
    assert all(float(rows[name][-1]) == 0.0 for name in cli.COMPARED)
    assert "gradients identical under every schedule" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["compare", "--steps", "-3"], "--steps must be between 1 and 1000000, got -3"),
        (["compare", "--snapshots", "0"], "--snapshots must be between 1 and 10000, got 0"),
        (["schedule", "--steps", "10**30", "--snapshots", "2"], "must be an integer"),
        (["schedule", "--steps", str(10**20)], "between 1 and 10000000"),
        (
            ["schedule", "--steps", "5", "--snapshots", "2", "--plot", "/no/such/dir/x.png"],
            "does not exist",
        ),
        (["compare", "--plot", "."], "is a folder"),
        (["compare", "--workload", "nope"], "invalid choice: 'nope'"),
        (["schedule", "--steps", "10", "--schedule", "fancy"], "invalid choice: 'fancy'"),
        (["schedule", "--steps", "10"], "--schedule revolve needs --snapshots"),
        (["schedule", "--steps", "ten", "--snapshots", "2"], "must be an integer"),
        ([], "required: command"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_compare_fails_when_a_gradient_differs(monkeypatch, capsys):
    real = cli.measure

    def tampered(workload, steps, snapshots, name, trace=False):
        row = real(workload, steps, snapshots, name, trace)
        if name == "revolve":
            row["grads"] = [g + 1e-12 for g in row["grads"]]
        return row

    monkeypatch.setattr(cli, "measure", tampered)
    args = cli.build_parser().parse_args(["compare", "--steps", "12", "--snapshots", "3"])
    assert cli.compare(args) == 1
    assert "revolve: gradients differ from store_all" in capsys.readouterr().out


def test_schedule_prints_actions_and_totals(capsys):
    args = cli.build_parser().parse_args(["schedule", "--steps", "10", "--snapshots", "2"])
    assert cli.schedule(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].strip() == "Snapshot(0, 0)"
    assert "30 step evaluations" in out and "optimum with 2 slots is 30" in out


def test_online_schedule_from_the_command_line(capsys):
    args = cli.build_parser().parse_args(
        ["schedule", "--steps", "12", "--snapshots", "3", "--schedule", "online"]
    )
    assert cli.schedule(args) == 0
    assert "End()" in capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
def test_workloads_give_identical_gradients_under_revolve(name):
    ref = workloads.make_workload(name, steps=25).loss_and_gradients(rm.Tape())
    got = workloads.make_workload(name, steps=25).loss_and_gradients(rm.Tape(snapshots=3))
    assert ref[0] == got[0]
    assert all(np.array_equal(a, b) for a, b in zip(ref[1], got[1]))


def test_unknown_workload_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown workload 'x'; choose one of resmlp"):
        workloads.make_workload("x")
