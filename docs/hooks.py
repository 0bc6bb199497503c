"""MkDocs hook: tidy the Sphinx-style roles that remat's docstrings use.

The docstrings write ``:class:`Tape``` and ``:func:`simulate``` (read as
plain text by ``help()``).  mkdocstrings renders those as the role name
followed by the code, ``:class:<code>Tape</code>``; this hook drops the role
name, and turns a paragraph's closing ``::`` (reStructuredText's "a literal
block follows") into one colon.

It also fails the build on a doctest prompt rendered as text: ``>>>`` outside a
code block reaches the page as three nested quotations (or as ``&gt;&gt;&gt;``),
which ``mkdocs build --strict`` does not catch by itself.

On a notebook's page it gives each figure its alt text: the notebooks show their
figures with ``IPython.display.Image(png, alt=...)``, which keeps the text in the
output's metadata, but nbconvert's HTML template drops it and writes "No
description has been provided for this image" instead.  A figure without alt text
fails the build.

No library does these: griffe's Sphinx parser reads the field lists only and
leaves inline roles as text, mkdocs has no check for a prompt rendered as
quotation, and mkdocs-jupyter renders through nbconvert's template, which has no
option for alt text.
"""

import json
import re
from html import escape

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(<code>)")
LITERAL = re.compile(r"::</p>")
CODE = re.compile(r"<pre.*?</pre>|<code.*?</code>", re.S)
PROMPT = re.compile(r"&gt;&gt;&gt;|<blockquote>\s*<blockquote>\s*<blockquote>")
NO_ALT = 'alt="No description has been provided for this image"'


def figure_alts(path):
    """The alt text of each PNG output of the notebook at ``path``, in order (None if absent)."""
    with open(path, encoding="utf-8") as file:
        cells = json.load(file)["cells"]
    return [
        output.get("metadata", {}).get("image/png", {}).get("alt")
        for cell in cells
        for output in cell.get("outputs", [])
        if "image/png" in output.get("data", {})
    ]


def with_alt_texts(html, page):
    """``html`` with the notebook's alt texts where nbconvert wrote its placeholder."""
    alts = figure_alts(page.file.abs_src_path)
    if html.count(NO_ALT) != len(alts) or None in alts:
        raise ValueError(
            f"{page.file.src_path}: every figure needs alt text saying what it shows "
            f"({len(alts)} figures, {sum(a is not None for a in alts)} with alt text): show "
            "it with IPython.display.Image(png, alt=...), as the notebooks' show() does"
        )
    for alt in alts:
        html = html.replace(NO_ALT, f'alt="{escape(alt)}"', 1)
    return html


def on_page_content(html, page, **kwargs):
    prompt = PROMPT.search(CODE.sub("", html))
    if prompt:
        raise ValueError(
            f"{page.file.src_path}: a doctest prompt (>>>) is rendered as text, not code: "
            "fence it as a code block (or, in a docstring, keep it where docs/griffe_doctest.py "
            "fences it)"
        )
    if page.file.src_path.endswith(".ipynb"):
        html = with_alt_texts(html, page)
    return LITERAL.sub(":</p>", ROLE.sub(r"\1", html))
