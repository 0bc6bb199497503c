"""The command line: exit codes, the three output formats, and one-line errors."""

import csv
import io
import json
import platform
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import remat as rm
from remat import blockwise, cli, schedules, workloads
from remat.cli import common
from remat.cli import curve as cb
from remat.cli import table as cs


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "remat", *args], capture_output=True, text=True, timeout=120
    )


def test_compare_prints_a_measured_table_and_exits_zero():
    result = run_cli("compare", "--steps", "40", "--snapshots", "4")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line}
    assert set(cs.COMPARED) <= set(rows)
    revolve = rows["revolve"]
    assert int(revolve[2]) == int(revolve[3]) == schedules.optimal_forward_steps(40, 4)
    assert int(rows["store_all"][2]) == 40
    assert all(float(rows[name][-1]) == 0.0 for name in cs.COMPARED)
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
        (["compare", "--plot", "figure.foo"], "cannot write a '.foo' figure; use one of"),
        (["compare", "--format", "xml"], "invalid choice: 'xml'"),
        (["compare", "--repeats", "0"], "--repeats must be between 1 and 1000, got 0"),
        # the size's error was prefixed twice ("argument --memory: --memory: memory must")
        (
            ["compare", "--memory", "0"],
            "argument --memory: memory must be at least 1 byte, got '0'",
        ),
        # a negative size was read as an option ("expected one argument")
        (["compare", "--memory", "-3MiB"], "memory must be at least 1 byte, got '-3MiB'"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(args, message):
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_compare_fails_when_a_gradient_differs(monkeypatch, capsys):
    real = cs.run_once

    def tampered(workload_name, steps, snapshots, name, **kwargs):
        row = real(workload_name, steps, snapshots, name, **kwargs)
        if name == "revolve" and "seconds" in row:  # one of the timed runs only
            row["grads"] = [g + 1e-12 for g in row["grads"]]
        return row

    monkeypatch.setattr(cs, "run_once", tampered)
    args = cli.build_parser().parse_args(["compare", "--steps", "12", "--snapshots", "3"])
    assert cli.compare(args) == 1
    assert "revolve: gradients differ from store_all" in capsys.readouterr().out


def test_compare_json_carries_every_figure_and_the_environment():
    result = run_cli(
        "compare", "--steps", "30", "--snapshots", "4", "--repeats", "2", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["failures"] == []
    assert (document["steps"], document["snapshots"], document["repeats"]) == (30, 4, 2)
    assert document["versions"] == {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "remat": rm.__version__,
    }
    assert document["machine"]["cpu_count"] >= 1 and document["machine"]["platform"]
    rows = {row["schedule"]: row for row in document["rows"]}
    assert list(rows) == list(cs.COMPARED)
    for name, row in rows.items():
        assert set(row) == set(cs.PUBLIC) | {"stats"}, name
        assert row["stats"]["forward_steps"] == row["forward_steps"], name  # tape.stats.to_dict()
        assert row["stats"]["peak_bytes"] == row["tape_peak_bytes"], name
        assert row["max_grad_diff"] == 0.0, name
        assert row["loss"] == rows["store_all"]["loss"]
        assert row["steps"] == 30
        assert row["forward_steps"] == row["steps"] + row["recomputed_steps"]
        assert len(row["seconds_runs"]) == 2
        assert row["seconds_min"] <= row["seconds"] <= row["seconds_max"]
        assert row["traced_peak_bytes"] > 0 and row["tape_peak_bytes"] > 0
    assert rows["revolve"]["forward_steps"] == schedules.optimal_forward_steps(30, 4)
    assert rows["revolve"]["optimum"] == schedules.optimal_forward_steps(30, 4)
    assert rows["store_all"]["forward_steps"] == 30 and rows["sqrt"]["optimum"] is None
    assert rows["revolve"]["tape_peak_bytes"] < rows["store_all"]["tape_peak_bytes"]


def test_compare_csv_has_one_row_per_schedule():
    result = run_cli("compare", "--steps", "20", "--snapshots", "3", "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["schedule"] for row in rows] == list(cs.COMPARED)
    assert all(list(row) == list(cs.PUBLIC) for row in rows)
    assert all(float(row["max_grad_diff"]) == 0.0 for row in rows)
    revolve = rows[2]
    assert int(revolve["forward_steps"]) == schedules.optimal_forward_steps(20, 3)
    assert len(revolve["seconds_runs"].split()) == 3  # the default --repeats


def test_time_is_measured_without_tracemalloc_and_memory_in_other_runs(monkeypatch):
    names, tracing = [], []  # for every run, in order: its schedule, and whether traced
    real_tape_for, real_run = cs._tape_for, workloads.Workload.loss_and_gradients

    def tape_for(name, snapshots, trace=False, memory=None):
        names.append(name)
        return real_tape_for(name, snapshots, trace, memory)

    def run(self, tape, online=False):
        tracing.append(tracemalloc.is_tracing())
        return real_run(self, tape, online=online)

    monkeypatch.setattr(cs, "_tape_for", tape_for)
    monkeypatch.setattr(workloads.Workload, "loss_and_gradients", run)
    rows = cs.measure("ode", 10, 3, repeats=3)
    order = list(cs.COMPARED)
    assert names[0] == "store_all" and tracing[0] is False  # times a step, to warn if long
    names, tracing = names[1:], tracing[1:]
    assert names[:4] == order and tracing[:4] == [True] * 4  # memory first, one run each
    assert tracing[4:] == [False] * 12 and not tracemalloc.is_tracing()
    rounds = [names[i : i + 4] for i in range(4, 16, 4)]
    assert rounds == [order, order[1:] + order[:1], order[2:] + order[:2]]  # interleaved
    for row in rows:
        assert len(row["seconds_runs"]) == 3
        assert row["seconds"] == sorted(row["seconds_runs"])[1]  # the median


def test_compare_refuses_to_time_under_an_outer_tracemalloc():
    result = subprocess.run(
        [sys.executable, "-X", "tracemalloc", "-m", "remat", "compare", "--steps", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert "tracemalloc is already tracing" in result.stderr


def test_version_and_bare_remat():
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"remat {rm.__version__}"
    bare = run_cli()
    assert bare.returncode == 0 and bare.stderr == ""
    assert bare.stdout.startswith("usage: remat") and "compare" in bare.stdout
    assert "schedule" in bare.stdout and "--version" in bare.stdout


@pytest.mark.parametrize("command", ["compare", "schedule"])
def test_every_option_has_help_and_its_default(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    parser = cli.build_parser()._subparsers._group_actions[0].choices[command]
    for action in parser._actions:
        assert action.help, f"{command} {action.option_strings} has no help"
        if action.default not in (None, False, "==SUPPRESS=="):
            assert f"(default: {action.default})" in text, action.option_strings


def test_plot_needs_matplotlib_and_says_so_before_any_work(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    monkeypatch.setattr(cs, "measure", lambda *a, **k: pytest.fail("work was done"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["compare", "--plot", str(tmp_path / "c.png")])
    assert exit_.value.code == 2
    assert "--plot needs matplotlib: pip install 'remat[plot]'" in capsys.readouterr().err


def test_compare_figure_has_one_colour_per_schedule(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    path = tmp_path / "compare"  # no extension: .png is added
    args = cli.build_parser().parse_args(
        ["compare", "--workload", "ode", "--steps", "15", "--snapshots", "3", "--plot", str(path)]
    )
    rows = cs.measure("ode", 15, 3, repeats=1, trace=True)
    fig = cs._compare_figure(rows, args)
    held, evaluations, seconds, timeline = fig.axes
    want = [to_hex(cs.COLORS[name]) for name in cs.COMPARED]
    for ax in (held, evaluations, seconds):
        assert [to_hex(bar.get_facecolor()) for bar in ax.patches] == want
    # bars on a linear axis; bytes over time log above one state and 0 on the axis
    assert held.get_yscale() == "linear" and timeline.get_yscale() == "symlog"
    assert all("10^" not in t.get_text() for t in timeline.get_yticklabels())
    assert [bar.get_height() for bar in evaluations.patches] == [
        row["forward_steps"] for row in rows
    ]
    lines = {line.get_label(): to_hex(line.get_color()) for line in timeline.get_lines()}
    assert lines == dict(zip(cs.COMPARED, want))
    assert cli.compare(args) == 0
    assert path.with_suffix(".png").stat().st_size > 10_000
    assert f"figure written to {path}.png" in capsys.readouterr().out


def test_schedule_prints_actions_and_totals(capsys):
    args = cli.build_parser().parse_args(["schedule", "--steps", "10", "--snapshots", "2"])
    assert cli.schedule(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].strip() == "Snapshot(0, 0)"
    assert "30 step evaluations" in out and "optimum with 2 slots is 30" in out


def test_schedule_csv_and_json(capsys):
    args = cli.build_parser().parse_args(
        ["schedule", "--steps", "10", "--snapshots", "2", "--format", "csv"]
    )
    assert cli.schedule(args) == 0
    (row,) = csv.DictReader(io.StringIO(capsys.readouterr().out))
    assert int(row["forward_steps"]) == int(row["optimum"]) == 30
    args = cli.build_parser().parse_args(
        ["schedule", "--steps", "10", "--snapshots", "2", "--format", "json"]
    )
    assert cli.schedule(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["forward_steps"] == schedules.optimal_forward_steps(10, 2)
    assert len(document["action_list"]) == document["actions"]
    assert document["action_list"][0] == {
        "action": "Snapshot",
        "step": 0,
        "slot": 0,
        "level": "memory",
    }
    assert document["versions"]["remat"] == rm.__version__


@pytest.mark.parametrize("fmt", common.FORMATS)
def test_a_reader_that_goes_away_is_not_an_error(fmt):
    # `remat schedule ... | head -1`: far more output than a pipe holds, so the
    # writer meets the closed pipe whatever the timing.
    process = subprocess.Popen(
        [sys.executable, "-m", "remat", "schedule", "--steps", "2000", "--snapshots", "4"]
        + ["--show", "2000", "--format", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    first = process.stdout.readline()
    process.stdout.close()
    errors = process.stderr.read()
    process.stderr.close()
    assert process.wait(timeout=120) == 0
    assert first.strip() and errors == b""


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


@pytest.mark.parametrize("name", ["widths", "scan_rnn"])
def test_compare_runs_a_chain_and_a_scan_exactly(name, capsys):
    assert (
        cli.main(
            [
                "compare",
                "--workload",
                name,
                "--steps",
                "12",
                "--snapshots",
                "3",
                "--repeats",
                "1",
                "--format",
                "json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["schedule"] for r in rows} == {"store_all", "sqrt", "revolve", "online"}
    assert all(r["max_grad_diff"] == 0 for r in rows)
    revolve = next(r for r in rows if r["schedule"] == "revolve")
    assert revolve["forward_steps"] == schedules.optimal_forward_steps(12, 3)


def test_compare_memory_draws_the_budget_curve_within_every_budget():
    result = run_cli(
        "compare", "--memory", "300KiB", "--steps", "30", "--repeats", "1", "--format", "json"
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["ok"] is True and document["memory"] == 300 * 1024
    rows = document["rows"]
    budgets = sorted({row["budget"] for row in rows})
    assert budgets[0] == document["start_bytes"] and budgets[-1] == 300 * 1024
    assert document["least_bytes"] <= document["start_bytes"]  # where it is worth plotting
    assert len(budgets) == 5 and [row["schedule"] for row in rows[:3]] == list(cb.CURVE)
    for row in rows:
        assert set(row) == set(cb.CURVE_PUBLIC) | {"stats"}
        if row["fits"]:
            assert row["stats"]["memory"] == row["budget"]  # tape.stats.to_dict() of the run
            assert row["peak_bytes"] <= row["budget"]
            assert row["max_grad_diff"] == 0.0
            assert row["predicted_seconds"] > 0 and row["seconds"] > 0
    optimal = [row for row in rows if row["schedule"] == "optimal"]
    assert all(row["fits"] for row in optimal)  # from the least budget up
    steps = [row["forward_steps"] for row in optimal]
    assert steps == sorted(steps, reverse=True) and steps[0] > 30
    table = run_cli("compare", "--memory", "300KiB", "--steps", "30", "--repeats", "1")
    assert table.returncode == 0, table.stderr
    assert "every run within its budget, gradients identical to store_all" in table.stdout


@pytest.mark.parametrize(
    "memory, message",
    [
        ("2 parsecs", "is not a size"),
        ("100B", "memory=100 bytes is too small"),
        ("40KiB", "needs at least"),
    ],
)
def test_compare_memory_refuses_a_bad_budget_in_one_line(memory, message):
    given = ["--budgets", "3"] if memory is None else ["--memory", memory]
    result = run_cli("compare", *given, "--steps", "20")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_compare_memory_draws_its_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the figure needs matplotlib")
    path = tmp_path / "curve.png"
    argv = ["compare", "--memory", "200KiB", "--steps", "12", "--repeats", "1", "--budgets", "2"]
    assert cli.main([*argv, "--plot", str(path)]) == 0
    assert path.stat().st_size > 0
    assert f"figure written to {path}" in capsys.readouterr().out


# --- remat compare --workload transformer ------------------------------------------------
def test_compare_transformer_runs_every_mode_bit_identically(capsys):
    code = cli.main(
        [
            "compare",
            "--workload",
            "transformer",
            "--steps",
            "4",
            "--repeats",
            "1",
            "--format",
            "json",
        ]
    )
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    rows = {row["mode"]: row for row in document["rows"]}
    assert set(rows) == set(blockwise.MODES) and document["snapshots"] == 3
    assert all(row["bit_identical"] and row["max_grad_diff"] == 0 for row in rows.values())
    assert rows["none"]["block_evaluations"] == 4 and rows["none"]["recomputed_blocks"] == 0
    assert rows["checkpoint"]["block_evaluations"] == 8  # each block once more in backward
    assert rows["selective"]["block_evaluations"] == 8
    # each block has 4 matmuls (projections), 2 einsums and a softmax (attention)
    assert rows["none"]["recomputed_ops"] == {}
    assert rows["checkpoint"]["recomputed_ops"]["matmul"] == 16
    assert rows["checkpoint"]["recomputed_ops"]["einsum"] == 8
    selective = rows["selective"]["recomputed_ops"]
    assert "matmul" not in selective and selective["einsum"] == 8 and selective["softmax"] == 4
    assert rows["revolve"]["recomputed_ops"]["softmax"] == rows["revolve"]["recomputed_blocks"]
    held = {mode: row["traced_peak_bytes"] for mode, row in rows.items()}
    assert held["checkpoint"] < held["selective"] < held["none"]
    assert rows["revolve"]["block_evaluations"] == schedules.optimal_forward_steps(4, 3)
    assert rows["revolve"]["tape_peak_bytes"] > 0
    assert rows["checkpoint"]["traced_peak_bytes"] < rows["none"]["traced_peak_bytes"]
    assert len({row["loss"] for row in rows.values()}) == 1


def test_compare_transformer_table_defaults_to_eight_blocks():
    result = run_cli("compare", "--workload", "transformer", "--repeats", "1")
    assert result.returncode == 0, result.stderr
    assert "8 blocks of width 32" in result.stdout
    modes = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line}
    assert int(modes["none"][1]) == 8 and int(modes["checkpoint"][1]) == 16
    assert modes["selective"][2:5] == ["0", "16", "8"]  # matmul, einsum, softmax again
    assert int(modes["revolve"][1]) == schedules.optimal_forward_steps(8, 3)
    assert "gradients bit-identical to no checkpointing in every mode" in result.stdout


def test_compare_transformer_fails_when_a_gradient_differs(monkeypatch, capsys):
    real = blockwise.run_mode

    def tampered(workload, mode, snapshots, **kwargs):
        done = real(workload, mode, snapshots, **kwargs)
        if mode == "checkpoint":
            done["grads"] = [g * (1 + 2**-52) for g in done["grads"]]  # one ulp off
        return done

    monkeypatch.setattr(blockwise, "run_mode", tampered)
    args = cli.build_parser().parse_args(
        ["compare", "--workload", "transformer", "--steps", "2", "--repeats", "1"]
    )
    assert cli.compare(args) == 1
    assert "rm.checkpoint per block: gradients differ from no checkpointing" in (
        capsys.readouterr().out
    )


# Sizes under a MiB printed as a column of 0.000 MiB: each column takes the unit its values fill.
def test_tables_print_small_sizes_in_a_unit_they_fill():
    result = run_cli("compare", "--steps", "6", "--snapshots", "2", "--repeats", "1")
    assert result.returncode == 0, result.stderr
    header = next(line for line in result.stdout.splitlines() if line.startswith("schedule"))
    assert "tape KiB" in header and "traced KiB" in header, header
    assert " 0.000 " not in result.stdout
    revolve = next(line.split() for line in result.stdout.splitlines() if line[:8] == "revolve ")
    assert float(revolve[5]) >= 2 * 16  # at least its two 16 KiB snapshots, in KiB


# remat schedule had no optimal, two-level or disk schedule.
@pytest.mark.parametrize(
    "name, extra, want",
    [
        ("optimal", [], schedules.Optimal),
        ("two_level", ["--disk-snapshots", "2"], schedules.TwoLevel),
        ("disk_revolve", ["--write-cost", "1", "--read-cost", "3"], schedules.DiskRevolve),
    ],
)
def test_schedule_lists_the_optimal_and_disk_schedules(name, extra, want, capsys):
    argv = ["schedule", "--steps", "30", "--snapshots", "3", "--schedule", name, *extra]
    args = cli.build_parser().parse_args([*argv, "--format", "json"])
    assert cli.schedule(args) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["description"].startswith(want.__name__)
    assert len(document["action_list"]) == document["actions"]
    if name == "optimal":  # unit costs, in the memory revolve holds with 3 slots
        costs = schedules.ChainCosts.uniform(30, 1.0, 2.0, 1, 2)
        revolve = schedules.simulate(schedules.Revolve(30, 3), costs=costs)
        assert document["peak_units"] <= revolve.peak_bytes == 5
        assert document["predicted_time"] <= revolve.time
        assert document["forward_steps"] <= revolve.forward_steps == 115
    else:
        assert document["peak_disk_snapshots"] >= 1 and document["disk_reads"] >= 1
        cost = (
            schedules.two_level_cost(30, 3, 2, 2.0, 2.0)
            if name == "two_level"
            else schedules.disk_revolve_cost(30, 3, 1.0, 3.0)
        )
        assert document["cost"] == cost
    assert cli.schedule(cli.build_parser().parse_args(argv)) == 0
    assert "step evaluations" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--schedule", "optimal"], "--schedule optimal needs --snapshots"),
        (["--schedule", "two_level", "--snapshots", "2"], "needs --disk-snapshots"),
        (["--schedule", "sqrt", "--disk-snapshots", "1"], "sqrt takes no --disk-snapshots"),
        (["--snapshots", "2", "--write-cost", "2"], "revolve takes no --write-cost"),
        (["--schedule", "disk_revolve", "--snapshots", "2", "--read-cost", "-1"], ">= 0"),
    ],
)
def test_schedule_refuses_options_its_schedule_does_not_use(args, message):
    result = run_cli("schedule", "--steps", "10", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


# compare could not put store-all and the optimal plan (or mixed, periodic) in one table.
def test_compare_puts_the_schedules_asked_for_in_one_table():
    names = "revolve,optimal,mixed,periodic"
    table = run_cli("compare", "--steps", "20", "--snapshots", "3", "--schedules", names)
    assert table.returncode == 0, table.stderr
    listed = [line.split()[0] for line in table.stdout.splitlines()[3:8]]
    assert listed == ["store_all", *names.split(",")]
    result = run_cli(
        *"compare --steps 20 --snapshots 3 --repeats 2 --format json".split(), "--schedules", names
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    rows = {row["schedule"]: row for row in document["rows"]}
    assert list(rows) == ["store_all", *names.split(",")]  # the reference always runs first
    assert all(row["max_grad_diff"] == 0.0 for row in rows.values())
    optimal = rows["optimal"]["stats"]
    assert optimal["memory"] == rows["revolve"]["tape_peak_bytes"]  # in revolve's bytes
    assert optimal["peak_bytes"] <= optimal["memory"] and optimal["plan"] == "reused"
    assert rows["mixed"]["forward_steps"] == rows["mixed"]["optimum"]
    assert rows["mixed"]["optimum"] == schedules.mixed_forward_steps(20, 3)
    assert rows["periodic"]["optimum"] is None and rows["optimal"]["optimum"] is None


def test_compare_refuses_an_unknown_schedule_in_one_line():
    result = run_cli("compare", "--schedules", "revolve,treeverse")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--schedules takes names from store_all," in lines[0]


# A comparison of 500,500 step evaluations ran two minutes with no warning and no progress.
def test_a_long_comparison_warns_first_and_shows_progress(monkeypatch, capsys):
    monkeypatch.setattr(cs, "WARN_SECONDS", 0.0)  # every comparison counts as long here
    assert cli.main(["compare", "--steps", "10", "--snapshots", "2", "--repeats", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    want = 2 * sum(cs.predicted_evaluations(n, 10, 2) for n in cs.COMPARED)
    assert err[0].startswith(f"remat compare: {want} step evaluations to make (2 runs of each")
    assert "revolve 30" in err[0]  # T(10, 2), one run
    assert [line.split(" (")[0] for line in err[1:]] == [f"remat: runs {k}/8" for k in range(1, 9)]


def test_a_short_comparison_says_nothing_on_stderr(capsys):
    assert cli.main(["compare", "--steps", "10", "--snapshots", "2", "--repeats", "1"]) == 0
    assert capsys.readouterr().err == ""


# The budget curve started at one slot (500,500 step evaluations at 1000 steps), which
# took minutes and flattened every other point of the figure.
def test_the_budget_curve_starts_where_it_is_worth_plotting():
    costs = schedules.ChainCosts.uniform(1000, 1e-5, 3e-5, 16384, 32768)
    least = schedules.minimum_bytes(costs)
    start = cb.worth_plotting(costs, least, 64 * least)
    store_all = sum(costs.reverse_time)

    def optimal_time(budget):
        return rm.memory.plan_optimal(costs, budget).predicted_time

    assert least < start < 64 * least
    assert optimal_time(start) <= cb.WORTH * store_all < optimal_time(int(start / 1.03))
    below = int(start / 1.03)  # no budget up to it is worth it: the curve starts at least
    assert cb.worth_plotting(costs, least, below) == least
    cells = [(start, name) for name in cb.CURVE]
    assert cb.warn_if_long(cells, costs, runs=4) == pytest.approx(
        4 * sum(rm.memory.predicted_time(cb.plan_for(n, costs, start), costs) for n in cb.CURVE)
    )


def test_a_long_budget_curve_warns_first(monkeypatch, capsys):
    monkeypatch.setattr(cb, "WARN_SECONDS", 0.0)
    argv = ["compare", "--memory", "200KiB", "--steps", "12", "--repeats", "1", "--budgets", "2"]
    assert cli.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert "step evaluations to make (6 budget and schedule cells, 2 runs each)" in err[0]
    assert err[1].startswith("remat: runs 1/12")


# --- every option documented -----------------------------------------------------------------


def test_every_cli_option_says_its_default_or_that_it_is_required():
    import argparse

    from remat.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            text = command._get_formatter()._expand_help(action) if action.help else ""
            assert "default" in text or "required" in text, (name, action.option_strings, text)
