"""Smoke test: every benchmark runs at tiny sizes and prints its table.

Peers (torch, autograd, mygrad, checkpoint_schedules, pyrevolve, matplotlib)
are optional: a benchmark skips a missing one and says so, and this file
passes with none of them installed.
"""

import importlib
import importlib.util
import pathlib

import pytest

# benchmarks/ lives in the repository, not in the installed package: a test run of an
# installed remat (pip install ., tests run from elsewhere) skips this file
runner = pytest.importorskip(
    "benchmarks.__main__", reason="benchmarks/ is not here (an installed remat, not a checkout)"
)

HEADERS = {
    "core": ["| contender | us per op (fwd+bwd) |"],
    "schedules": ["| n | s | remat s |", "| n | schedule | plan s | iterate s |"],
    "loop": [
        "| s | forward_steps | predicted ratio (forward steps) | refined prediction |",
        "| contender | s (fwd+bwd) | time ratio | forward_steps |",
    ],
    "online": ["| n | s | offline optimum T(n, s) | remat Online |"],
    "logn": ["| n | s = ceil(log2 n) | forward_steps / n |"],
    "depth": ["| contender | depth L | s (fwd+bwd) | time vs smallest depth |"],
    "replay": ["| schedule | check_replay=True ms | False ms | ratio |"],
    "traced": [
        "| tape | schedule | budget | budget KiB | tape.stats.peak_bytes KiB | tracemalloc KiB |"
    ],
    "forward": [
        "| contender | wall us per op | vs hand-written | CPU us per op | vs (CPU) |",
        "| schedule | two gradients s | rm.hvp s | hvp / two gradients |",
    ],
    "memory": [
        "| steps | costs | budget | plan | seconds |",
        "| steps | budget | 5 steps a block | 2 steps a block |",
        "| clock | width | budget MiB | plan | slots | forward_steps | predicted s | measured s |",
        "| clock | width | budget MiB | optimal s | revolve slots | revolve s |",
    ],
    "overheads": [
        "| contender | ms (fwd+bwd) | vs unrolled | us per step beyond |",
        "| schedule | forward_steps | ms | refined prediction ms | measured / refined |",
        "| KiB swept a step | unrolled us/step | tape.loop us/step | beyond | ratio |",
        "| revolve of | actions | actions per step |",
        "| contender | us (10 steps) | vs hand-written fwd+bwd |",
    ],
    "disk": [
        "| n | schedule | plan seconds | cost |",
        "| tape | step evaluations | seconds (median) | / revolve |",
    ],
    "planning": [
        "| steps | period (kinds) | table rows | budget | exact s (CPU) |",
        "| steps | exact s (CPU) | ns per step^3 |",
        "| costs | steps | budget | 5 steps a block, even | 5 a block, at small states |",
    ],
    "dtr": [
        "| tape | ms | vs store-all | recomputing | bookkeeping | recomputed ops | evictions | "
        "peak / store-all |"
    ],
    "graph": [
        "| method | budget | ms | vs store-all | tape peak | traced peak | recomputed ops | "
        "solve s | predicted ms | gradients bit for bit |",
        "| method | small: vs store-all | large: vs store-all | small: recomputed ops | "
        "large: recomputed ops |",
        "| target | workload | figure | met |",
    ],
    "heap": [
        "| workload | method | default ms | held ms | default / held | vs store-all (default) | "
        "vs store-all (held) | fresh MiB (default) | fresh MiB (held) |"
    ],
    "transformer": [
        "| contender | s (fwd+bwd) | time ratio | peak RSS MiB | memory ratio (RSS) |",
        "| schedule | forward_steps | tape.stats.peak_bytes MiB | tracemalloc MiB |",
    ],
}


@pytest.mark.parametrize("name", runner.MODULES)
def test_quick_run_prints_its_table(name):
    text = runner.run_benchmark(name, quick=True)
    for header in HEADERS[name]:
        assert header in text
    assert "|---|" in text
    if name == "loop":  # torch is compared with, or its absence explained
        has_torch = importlib.util.find_spec("torch") is not None
        assert ("torch checkpoint_sequential" if has_torch else "torch skipped: ") in text
    if name == "disk":  # gradients identical, files gone, checkpoint_schedules or why not
        assert "**NO**" not in text and "(empty afterwards)" in text
        has_peer = importlib.util.find_spec("checkpoint_schedules") is not None
        assert ("| HRevolve" if has_peer else "checkpoint_schedules is not installed") in text
    if name == "graph":  # every method's gradients are store-all's bit for bit, both sizes
        assert "**NO**" not in text and "**FAILURE**" not in text
        assert "### unet, small: " in text and "### unet, large: " in text
        assert "| dtr:h_dtr_eq at 33%: <= 1.25x store-all | resnet (large) @ 33% |" in text
    if name == "transformer":
        has_torch = importlib.util.find_spec("torch") is not None
        assert ("torch selective" if has_torch else "torch skipped: ") in text
    if name == "memory":
        has_torch = importlib.util.find_spec("torch") is not None
        assert ("| library | plan |" if has_torch else "torch skipped: ") in text


def test_graph_targets_set_each_target_of_the_two_sizes_side_by_side():
    # guards the targets table listing one size's rows after the other's, far apart
    from benchmarks import bench_graph

    small = [["t", "unet (small) @ 50%", "a", "yes"], ["u", "unet (small)", "b", "no"]]
    large = [["t", "unet (large) @ 50%", "c", "yes"], ["u", "unet (large)", "d", "no"]]
    rows = bench_graph._side_by_side(small, large)
    assert [row[2] for row in rows] == ["a", "c", "b", "d"]


def test_logn_plot_is_drawn(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs matplotlib")
    from benchmarks import bench_logn

    path = tmp_path / "logn.png"
    bench_logn.plot(bench_logn.bench(range(4, 6)), path)
    assert path.stat().st_size > 0


def test_write_replaces_only_what_was_rerun(tmp_path, monkeypatch):
    results = tmp_path / "RESULTS.md"
    results.write_text(
        "# old\n\n## Where remat is behind\n\nslow here.\n\n"
        "## Online (`python -m benchmarks online`)\n\nold online\n\n"
        "## Logn (`python -m benchmarks logn`)\n\nold logn\n"
    )
    monkeypatch.setattr(runner, "RESULTS", results)
    runner.write_results(
        "python -m benchmarks online", {"online": "## Online (`python -m benchmarks online`)\n\n2"}
    )
    text = results.read_text()
    assert "## Where remat is behind\n\nslow here.\n" in text
    assert "\n2\n" in text and "old online" not in text and "old logn" in text
    assert text.index("Online") < text.index("Logn")  # in the order of MODULES
    assert "`python -m benchmarks online`" in text


@pytest.mark.parametrize(
    "argv, message",
    [(["nonsense"], "unknown benchmark nonsense"), (["--quick", "--write"], "drop --quick")],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit):
        runner.main(argv)
    assert message in capsys.readouterr().err


def test_versus_times_two_checkouts_and_compares_their_gradients(capsys):
    versus = importlib.import_module("benchmarks.versus")
    here = str(pathlib.Path(__file__).resolve().parents[2])
    versus.main([here, here, "--rounds", "1", "--repeats", "1", "--cases", "chain", "heat"])
    out = capsys.readouterr().out
    assert "| case | old ms | new ms | new/old (median of rounds) |" in out
    rows = [line for line in out.splitlines() if line.startswith(("| chain ", "| heat "))]
    assert len(rows) == 2 and all(row.endswith("| yes |") for row in rows)


def test_versus_refuses_an_unknown_case(capsys):
    versus = importlib.import_module("benchmarks.versus")
    with pytest.raises(SystemExit):
        versus.main([".", ".", "--cases", "nonsense"])
    assert "unknown case(s) ['nonsense']" in capsys.readouterr().err
