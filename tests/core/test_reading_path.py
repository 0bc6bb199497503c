"""The "Read the code" page (docs/read_the_code.md) states what it measures.

Issue 25 asks that reverse mode on the tape read in at most about 600 lines,
counted with ``wc -l``, and the page gives each file's count: both are checked
against the files, so that a change to the core updates the page, or fails here.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "read_the_code.md").read_text()
CORE = ("remat/core/tape.py", "remat/core/tensor.py", "remat/core/apply.py")


def lines(path):
    return len((ROOT / path).read_text().splitlines())  # what `wc -l` counts


def test_the_page_gives_each_file_as_wc_counts_it():
    rows = re.findall(r"^\| (?:\d+ \| )?`(remat/[\w/]+\.py)`[^|]*\| (\d+) \|", PAGE, re.M)
    assert len(rows) >= 8, rows
    assert {path: int(n) for path, n in rows} == {path: lines(path) for path, _ in rows}


def test_reverse_mode_reads_in_about_600_lines():
    total = sum(lines(path) for path in CORE)
    assert f"| **reverse mode in all** | **{total}** |" in PAGE
    assert total <= 620, f"the core's reading path grew to {total} lines (issue 25: about 600)"
