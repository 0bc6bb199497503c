"""Griffe extension: render the docstrings' ``>>>`` examples as code on the site.

remat's docstrings show examples as doctest blocks (``>>> ...`` lines and the
output below them, up to a blank line), which ``help()`` and doctest read as
they are.  Markdown would read the ``>`` as quotation marks; this extension
wraps each such block that is not already an indented literal block in a
fenced ``pycon`` block when the API pages are built.  It changes what the
site shows, not the docstrings.

Why not griffe's own handling: its Google and NumPy parsers make code of ``>>>``
lines only inside an ``Examples:`` section, and its Sphinx parser reads field
lists only.  remat's docstrings put their examples (over 700 ``>>>`` lines) in
the text, mostly right under the summary, with no such section; a griffe
extension is the way griffe's maintainers point to for rewriting docstrings
(mkdocstrings discussion 596).
"""

from __future__ import annotations

import griffe


def fence_doctests(text: str) -> str:
    lines, out, k = text.splitlines(), [], 0
    while k < len(lines):
        if not lines[k].startswith(">>>"):
            out.append(lines[k])
            k += 1
            continue
        block = []
        while k < len(lines) and lines[k].strip():
            block.append(lines[k])
            k += 1
        out += ["```pycon", *block, "```"]
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)

    def on_package(self, *, pkg, **kwargs) -> None:  # the top package: not an on_object
        self.on_object(obj=pkg)
