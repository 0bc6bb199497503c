"""MkDocs hook: tidy the Sphinx-style roles that remat's docstrings use.

The docstrings write ``:class:`Tape``` and ``:func:`simulate``` (read as
plain text by ``help()``).  mkdocstrings renders those as the role name
followed by the code, ``:class:<code>Tape</code>``; this hook drops the role
name, and turns a paragraph's closing ``::`` (reStructuredText's "a literal
block follows") into one colon.

It also fails the build on a doctest prompt rendered as text: ``>>>`` outside a
code block reaches the page as three nested quotations (or as ``&gt;&gt;&gt;``),
which ``mkdocs build --strict`` does not catch by itself.
"""

import re

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(<code>)")
LITERAL = re.compile(r"::</p>")
CODE = re.compile(r"<pre.*?</pre>|<code.*?</code>", re.S)
PROMPT = re.compile(r"&gt;&gt;&gt;|<blockquote>\s*<blockquote>\s*<blockquote>")


def on_page_content(html, page, **kwargs):
    prompt = PROMPT.search(CODE.sub("", html))
    if prompt:
        raise ValueError(
            f"{page.file.src_path}: a doctest prompt (>>>) is rendered as text, not code: "
            "fence it as a code block (or, in a docstring, keep it where docs/griffe_doctest.py "
            "fences it)"
        )
    return LITERAL.sub(":</p>", ROLE.sub(r"\1", html))
