"""``remat compare --graph``: the table, json and figure of a graph workload's methods,
and one-line errors (tiny workloads, one timed round: a second or two each)."""

import json

import pytest

from remat import cli
from remat import graph_compare as gc

TINY = ["compare", "--graph", "unet", "--size", "2", "--repeats", "1"]
FEW = ["--methods", "store_all,checkpoint,dtr:lru,dtr:h_dtr"]


def test_compare_graph_prints_every_method_at_every_budget(capsys):
    assert cli.main([*TINY, *FEW, "--budgets", "0.5", "256KiB"]) == 0
    out = capsys.readouterr().out
    rows = {line[:24].strip(): line.split() for line in out.splitlines()[3:] if line.strip()}
    expected = ["store_all", "checkpoint"] + [
        f"{m} @ {share}" for share in ("50%", "57%") for m in ("dtr:h_dtr", "dtr:lru")
    ]
    assert all(name in rows for name in expected), out
    assert all(rows[name][-1] == "bit-identical" for name in expected), out
    assert rows["store_all"][3:5] == ["1.00x", "448.0"]  # unet(levels=2) saves 458752 bytes
    assert "gradients bit-identical to store-all's under every method" in out


def test_compare_graph_json_carries_every_row(capsys):
    argv = [*TINY, "--methods", "store_all,dtr:lru", "--budgets", "0.5", "--format", "json"]
    assert cli.main(argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] and document["workload"] == "unet" and document["size"] == 2
    (store_all, lru) = document["rows"]
    assert store_all["method"] == "store_all" and store_all["tape_peak_bytes"] == 458752
    assert lru["budget"] == 458752 // 2 and lru["tape_peak_bytes"] <= lru["budget"]
    assert lru["bit_identical"] and len(lru["seconds_runs"]) == 1


def test_compare_graph_draws_time_against_memory(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the figure needs matplotlib")
    path = tmp_path / "graph.png"
    argv = [*TINY, "--methods", "store_all,dtr:lru", "--budgets", "0.5", "0.4"]
    assert cli.main([*argv, "--plot", str(path)]) == 0
    assert path.stat().st_size > 0
    assert f"figure written to {path}" in capsys.readouterr().out


def test_compare_graph_fails_when_a_gradient_differs(monkeypatch, capsys):
    real = gc._run

    def tampered(workload, method, tape):
        loss, grads = real(workload, method, tape)
        return loss, [g * 1.5 for g in grads] if method == "checkpoint" else grads

    monkeypatch.setattr(gc, "_run", tampered)
    assert cli.main([*TINY, "--methods", "store_all,checkpoint", "--budgets", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "DIFFER" in out and "checkpoint: gradients differ from store-all's" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--graph", "vgg"],
            "unknown graph workload 'vgg'; choose one of unet, resnet, transformer_ops, "
            "adaptive_ode",
        ),
        (["--graph", "unet", "--budgets", "0"], "budget '0' is out of range"),
        (["--graph", "unet", "--budgets", "1.5"], "a fraction in (0, 1]"),
        (["--graph", "unet", "--budgets", "3 parsecs"], "is not a size"),
        # a negative size was read as an option ("expected at least one argument")
        (["--graph", "unet", "--budgets", "-3MiB"], "at least 1 byte, got '-3MiB'"),
        (["--graph", "unet", "--steps", "3"], "drop --steps"),
        (["--graph", "unet", "--workload", "rnn"], "drop --workload"),
        (["--graph", "unet", "--size", "0"], "--size must be positive, got '0'"),
        (["--graph", "unet", "--methods", "dtr:fifo"], "--methods takes names from"),
        (["--size", "3"], "--size needs --graph"),
        (["--time-limit", "3"], "--time-limit needs --graph"),
        (["--graph", "unet", "--time-limit", "0"], "--time-limit must be positive, got '0'"),
        (["--budgets", "0.5"], "--budgets needs --memory or --graph"),
        (["--memory", "1MiB", "--budgets", "2", "3"], "--budgets with --memory is one count"),
        (["--memory", "1MiB", "--budgets", "0"], "--budgets must be between 1 and 100, got 0"),
    ],
)
def test_bad_graph_arguments_give_one_line_and_status_2(args, message, capsys):
    try:
        status = cli.main(["compare", *args])
    except SystemExit as exit:  # argparse's own errors
        status = exit.code
    assert status == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    import remat.plot

    def missing():
        raise ImportError("no matplotlib")

    monkeypatch.setattr(remat.plot, "_pyplot", missing)
    with pytest.raises(SystemExit) as exit:
        cli.main([*TINY, "--plot", str(tmp_path / "x.png")])
    assert exit.value.code == 2
    assert "--plot needs matplotlib: pip install 'remat[plot]'" in capsys.readouterr().err


def test_the_figure_draws_the_optimal_plans_prediction_beside_its_time():
    pytest.importorskip("matplotlib", reason="the figure needs matplotlib")
    from remat.cli.graph import graph_figure

    row = gc.GraphRow
    rows = [
        row("store_all", None, None, seconds=0.01, time_ratio=1.0, tape_peak_bytes=2**20,
            traced_peak_bytes=2**21),
        row("optimal", 2**19, 0.5, seconds=0.012, time_ratio=1.2, tape_peak_bytes=2**19,
            traced_peak_bytes=2**20, predicted_seconds=0.011),
        row("dtr:lru", 2**19, 0.5, available=False, reason="MemoryError: too tight"),
    ]  # fmt: skip
    counted, traced = graph_figure(rows, "title").axes
    lines = {line.get_label(): line for line in counted.get_lines()}
    assert set(lines) >= {"store_all", "optimal", "optimal, predicted"} and "dtr:lru" not in lines
    assert list(lines["optimal, predicted"].get_xdata()) == [0.5]
    assert list(lines["optimal, predicted"].get_ydata()) == pytest.approx([1.1])
    assert list(lines["optimal"].get_ydata()) == [1.2]
    assert [line.get_xdata()[0] for line in traced.get_lines()[:2]] == [2.0, 1.0]
