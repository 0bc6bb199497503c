"""benchmarks/RESULTS.md opens with a hand-written one-screen summary table,
which ``python -m benchmarks --write`` keeps above the sections it rewrites."""

from pathlib import Path

from benchmarks import __main__ as runner

RESULTS = Path(runner.__file__).with_name("RESULTS.md")


# --write rewrote RESULTS.md from its known sections and dropped the summary table
def test_write_keeps_the_summary_first(tmp_path, monkeypatch):
    results = tmp_path / "RESULTS.md"
    results.write_text(
        "# old\n\n## Summary\n\n| measure | remat |\n\n## Where remat is behind\n\nslow here.\n\n"
        "## Online (`python -m benchmarks online`)\n\nold online\n"
    )
    monkeypatch.setattr(runner, "RESULTS", results)
    runner.write_results(
        "python -m benchmarks online", {"online": "## Online (`python -m benchmarks online`)\n\n2"}
    )
    text = results.read_text()
    assert "## Summary\n\n| measure | remat |\n" in text
    assert text.index("## Summary") < text.index("## Where remat is behind") < text.index("Online")


def test_the_committed_results_open_with_the_summary_table():
    text = RESULTS.read_text()
    first = text.index("\n## ")
    assert text[first:].startswith("\n## Summary\n")
    assert "| measure | remat | best peer | ratio | date |" in text[: text.index("## Where")]
