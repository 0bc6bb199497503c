"""The docs site's notebook figures: each has alt text saying what it shows.

nbconvert's HTML writes "No description has been provided for this image" on
every figure; docs/hooks.py puts the notebook's own alt text there (kept in the
output's metadata by ``IPython.display.Image(png, alt=...)``) and fails the build
on a figure without one.
"""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = next(d for d in Path(__file__).resolve().parents if (d / "pyproject.toml").is_file())
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)

PLACEHOLDER = (
    '<img src="data:image/png;base64,AAAA" alt="No description has been provided for this image">'
)


def notebook_page(tmp_path, alts):
    """A page for a notebook whose figures carry ``alts`` (None: no alt text)."""
    outputs = [
        {
            "output_type": "display_data",
            "data": {"image/png": "AAAA"},
            "metadata": {} if alt is None else {"image/png": {"alt": alt}},
        }
        for alt in alts
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": outputs}]}))
    return SimpleNamespace(file=SimpleNamespace(src_path="notebooks/nb.ipynb", abs_src_path=path))


# notebook figures reached the docs site with nbconvert's placeholder as their alt text
def test_each_figure_gets_its_notebook_alt_text(tmp_path):
    page = notebook_page(tmp_path, ["bars of MiB held", 'dots "on" a log axis'])
    html = hooks.on_page_content(PLACEHOLDER * 2, page)
    assert "No description" not in html
    assert 'alt="bars of MiB held"' in html and 'alt="dots &quot;on&quot; a log axis"' in html


def test_a_figure_without_alt_text_fails_the_build(tmp_path):
    page = notebook_page(tmp_path, ["bars of MiB held", None])
    with pytest.raises(ValueError, match="alt text"):
        hooks.on_page_content(PLACEHOLDER * 2, page)


def test_every_committed_notebook_figure_has_alt_text():
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        alts = hooks.figure_alts(path)
        assert alts and None not in alts, f"{path.name}: a figure without alt text"
