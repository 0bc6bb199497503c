"""The notebooks: text sources in sync with the committed notebooks, which run.

Each notebook is a pair in ``notebooks/``: ``NAME.py`` (jupytext percent
format, the source of truth) and ``NAME.ipynb``, that source executed top to
bottom (``python notebooks/run.py`` writes it).  The fast tests check that the
pairs agree cell for cell, that each ``.ipynb`` was executed in order with no
error and stays small enough for a browser; the slow ones (``-m "not slow"``
skips them) execute every text source with nbclient on a ``python3`` kernel
that is this interpreter.  The notebooks assert what they claim, so a failing
claim fails here with the cell's traceback.
"""

import importlib.util
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "notebooks"
if not (FOLDER / "run.py").is_file():  # e.g. tests run from an unpacked sdist
    pytest.skip("notebooks/ is not here", allow_module_level=True)

REASON = "{} is not installed; pip install -e '.[dev]' to check the notebooks"
pytest.importorskip("jupytext", reason=REASON.format("jupytext"))
pytest.importorskip("ipykernel", reason=REASON.format("ipykernel"))
nbformat = pytest.importorskip("nbformat", reason=REASON.format("nbformat"))
nbclient = pytest.importorskip("nbclient", reason=REASON.format("nbclient"))

_spec = importlib.util.spec_from_file_location("notebooks_run", FOLDER / "run.py")
run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

SOURCES = run.sources(FOLDER)
MAX_BYTES = 500 * 1024  # an executed notebook, figures included
ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")


def test_each_notebook_is_a_pair():
    assert [path.stem for path in SOURCES] == [
        "01_revolve_vs_store_all",
        "02_schedules_explained",
        "03_model_under_a_memory_budget",
        "04_transformer_under_a_memory_budget",
        "05_forward_and_reverse",
        "06_any_program_under_a_memory_budget",
    ]
    assert sorted(path.stem for path in FOLDER.glob("*.ipynb")) == [p.stem for p in SOURCES]
    assert not (FOLDER / "build.py").exists()


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_the_notebook_holds_exactly_its_text_source(source):
    want = run.read_source(source)
    path = source.with_suffix(".ipynb")
    got = nbformat.read(path, as_version=4)
    nbformat.validate(got)
    hint = f"notebooks/{path.name} is out of step with {source.name}: run python notebooks/run.py"
    assert [(c.cell_type, c.source) for c in got.cells] == [
        (c.cell_type, c.source) for c in want.cells
    ], hint
    assert got.metadata.get("kernelspec") == want.metadata["kernelspec"], hint


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_the_committed_notebook_is_executed_in_order_and_small(source):
    path = source.with_suffix(".ipynb")
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    hint = f"run python notebooks/run.py to execute notebooks/{path.name} top to bottom"
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), hint
    outputs = [output for cell in code for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"], hint
    assert any("image/png" in o.get("data", {}) for o in outputs), "a figure is expected"
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_runs(source, tmp_path):
    workdir = tmp_path / "notebooks"
    shutil.copytree(FOLDER, workdir)
    nb = run.read_source(source)
    # First make sure the kernel is this interpreter's environment.
    nb.cells.insert(
        0,
        nbformat.v4.new_code_cell(f"import sys\nassert sys.prefix == {sys.prefix!r}, sys.prefix"),
    )
    start = time.perf_counter()
    failure = None
    try:
        run.execute(nb, workdir)
    except nbclient.exceptions.CellExecutionError as error:
        failure = ANSI_COLOR.sub("", str(error))  # the cell, its output and its traceback
    if failure is not None:
        pytest.fail(f"{source.name} failed:\n{failure}", pytrace=False)
    print(f"{source.name}: executed in {time.perf_counter() - start:.1f} s")


# The kernel must be this interpreter with remat from this checkout, whatever
# python3 kernelspec the Jupyter path holds: else the notebooks test other code.
def test_the_kernel_is_this_interpreter_and_this_checkout(tmp_path, monkeypatch):
    elsewhere = tmp_path / "jupyter" / "kernels" / "python3"
    elsewhere.mkdir(parents=True)
    spec = {"argv": ["/bin/false", "{connection_file}"], "display_name": "x", "language": "python"}
    (elsewhere / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": kernelspec})
    nb.cells.append(
        nbformat.v4.new_code_cell("import sys, remat\nprint(sys.executable)\nprint(remat.__file__)")
    )
    run.execute(nb, tmp_path)
    printed = nb.cells[0].outputs[0]["text"].splitlines()
    assert printed == [sys.executable, str(ROOT / "remat" / "__init__.py")]
