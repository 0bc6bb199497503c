"""MkDocs hook: tidy the Sphinx-style roles that remat's docstrings use.

The docstrings write ``:class:`Tape``` and ``:func:`simulate``` (read as
plain text by ``help()``).  mkdocstrings renders those as the role name
followed by the code, ``:class:<code>Tape</code>``; this hook drops the role
name, and turns a paragraph's closing ``::`` (reStructuredText's "a literal
block follows") into one colon.
"""

import re

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):(<code>)")
LITERAL = re.compile(r"::</p>")


def on_page_content(html, **kwargs):
    return LITERAL.sub(":</p>", ROLE.sub(r"\1", html))
