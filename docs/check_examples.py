"""Run every code example of the docs pages and the README: ``python docs/check_examples.py``.

Each page's fenced ``python`` blocks run in order in one namespace (a page is
one session: later blocks use what earlier ones defined), in a fresh Python
process of its own, so that what a page prints (record numbers, the random
stream) does not depend on the pages before it.  A ``python`` block followed
directly by a ``text`` block must print exactly that text (trailing spaces
aside).  Any exception, or any printed output that differs, fails the check,
and so does a block fenced as ``py``, ``pycon`` or ``python3``, which would
otherwise go unchecked.
The API pages (docs/api/) hold no examples of their own; the ``>>>``
examples of the docstrings they render are run with doctest, in every module
of the remat package.

Why not a library (checked again in round 2): mktestdocs and pytest-markdown-docs
run a page's fences (in one namespace, as here) but, as documented, compare no
printed output.  sybil compares output only for doctest examples: its Markdown
parser runs a ``python`` block that opens with ``>>>`` as a doctest, and any other
block as code whose output goes unchecked (a block printing 5 above a ``text``
block saying 6 passes).  Rewriting the pages as console sessions would let it check
them, but the pages show scripts a reader copies and runs, and sybil runs every
page in the one pytest process, so what a page prints would depend on the pages
before it.  phmdoctest does pair a ``python`` block with the output block after
it, but only an output block with no language named, runs each block as a test
of its own unless an HTML comment before it shares its names, and writes a test
file per page to run.  What this check adds is exactly the ``text`` block a
``python`` block prints, which would be a custom parser in any of them; the
blocks themselves are found by a library, markdown-it-py (jupytext's Markdown
parser, also in the docs extra).
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import os
import pkgutil
import subprocess
import sys
import traceback
from pathlib import Path

from markdown_it import MarkdownIt

DOCS = Path(__file__).resolve().parent


def blocks(text: str):
    """(code, expected output or None, line) for each python block of a page.

    markdown-it-py finds the fenced blocks as CommonMark does, so that a block
    inside a list item, or fenced with ``~~~``, runs too.
    """
    tokens = MarkdownIt("commonmark").parse(text)
    for token, following in zip(tokens, tokens[1:] + [None]):
        language = (token.info.split() or [""])[0] if token.type == "fence" else ""
        if language.startswith("py") and language != "python":  # would go unchecked
            raise ValueError(f"line {token.map[0] + 1}: write ```python, not ```{language}")
        if language != "python":
            continue
        expected = None
        if following is not None and following.type == "fence":
            expected = following.content if following.info.split()[:1] == ["text"] else None
        yield token.content, expected, token.map[0] + 1


def tidy(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


def check_page(path: Path) -> tuple[int, list[str]]:
    namespace: dict = {"__name__": "__docs__"}
    failures, ran, page = [], 0, os.path.relpath(path, DOCS.parent)
    try:
        found = list(blocks(path.read_text()))
    except ValueError as error:
        return 0, [f"{page}: {error}"]
    for code, expected, line in found:
        ran += 1
        out = io.StringIO()
        where = f"{page}:{line}"
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, where, "exec"), namespace)
        except Exception:
            failures.append(f"{where}: the example raised\n{traceback.format_exc()}")
            break  # later blocks of the page depend on this one
        if expected is not None and tidy(out.getvalue()) != tidy(expected):
            failures.append(f"{where}: printed\n{out.getvalue()}\nbut the page shows\n{expected}")
    return ran, failures


def main() -> int:
    if sys.argv[1:2] == ["--page"]:  # the child process: one page
        ran, failures = check_page(Path(sys.argv[2]))
        for failure in failures:
            print(failure, file=sys.stderr)
        print(ran)
        return 1 if failures else 0
    pages = sorted(p for p in DOCS.rglob("*.md") if "api" not in p.relative_to(DOCS).parts)
    pages.insert(0, DOCS.parent / "README.md")  # the README is a page too
    failed, total = 0, 0
    for page in pages:
        child = subprocess.run(
            [sys.executable, __file__, "--page", str(page)], capture_output=True, text=True
        )
        sys.stderr.write(child.stderr)
        lines = child.stdout.split()
        total += int(lines[-1]) if lines and lines[-1].isdigit() else 0
        failed += child.returncode != 0
    remat = importlib.import_module("remat")
    modules = [m.name for m in pkgutil.walk_packages(remat.__path__, "remat.")]
    for name in ["remat"] + [m for m in modules if not m.endswith("__main__")]:
        result = doctest.testmod(importlib.import_module(name))
        total += result.attempted
        failed += result.failed
    print(f"docs examples: {total} ran, {failed} failed ({len(pages)} pages and the doctests)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
