"""The notebooks run top to bottom, and are committed small (without outputs).

Each ``notebooks/*.ipynb`` is executed with nbclient in a temporary copy of the
folder, on a ``python3`` kernel that is this interpreter (a kernelspec written
for the test, so a ``python3`` kernel installed elsewhere cannot be picked up).
The notebooks assert what they claim, so a failing claim fails here with the
cell's traceback.
"""

import importlib.util
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

REASON = "{} is not installed; pip install -e '.[dev]' to run the notebooks"
nbformat = pytest.importorskip("nbformat", reason=REASON.format("nbformat"))
nbclient = pytest.importorskip("nbclient", reason=REASON.format("nbclient"))
pytest.importorskip("ipykernel", reason=REASON.format("ipykernel"))

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
CELL_TIMEOUT = 120  # seconds, per cell
ANSI_COLOR = re.compile(r"\x1b\[[0-9;]*m")


def test_the_notebooks_are_there():
    names = [path.name for path in NOTEBOOKS]
    assert names == [
        "01_revolve_vs_store_all.ipynb",
        "02_schedules_explained.ipynb",
        "03_model_under_a_memory_budget.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    nbformat.validate(nbformat.from_dict(nb))
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell["outputs"] == [], f"{path.name} cell {index} has outputs: clear them"
        assert cell["execution_count"] is None, (
            f"{path.name} cell {index} has an execution count: clear outputs before saving"
        )


def test_notebooks_are_what_build_py_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("notebooks_build", FOLDER / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    written = build.main(tmp_path)
    assert sorted(path.name for path in written) == [path.name for path in NOTEBOOKS]
    for path in written:
        built = json.loads(path.read_text(encoding="utf-8"))
        committed = json.loads((FOLDER / path.name).read_text(encoding="utf-8"))
        for part in ("cells", "metadata"):
            assert built[part] == committed[part], (
                f"the {part} of notebooks/{path.name} differ from what notebooks/build.py "
                "writes: edit build.py and run `python notebooks/build.py`"
            )


@pytest.fixture
def this_interpreter_kernel(tmp_path, monkeypatch):
    """A ``python3`` kernelspec that runs ``sys.executable``, found before any other."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    path = os.environ.get("JUPYTER_PATH")
    monkeypatch.setenv(
        "JUPYTER_PATH", os.pathsep.join([str(tmp_path / "jupyter"), *([path] if path else [])])
    )
    python_path = os.environ.get("PYTHONPATH")  # remat importable even if not installed
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(ROOT), *([python_path] if python_path else [])])
    )
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, this_interpreter_kernel):
    workdir = tmp_path / "notebooks"
    shutil.copytree(FOLDER, workdir)
    nb = nbformat.read(workdir / path.name, as_version=4)
    # First make sure the kernel is this interpreter's environment.
    nb.cells.insert(
        0,
        nbformat.v4.new_code_cell(f"import sys\nassert sys.prefix == {sys.prefix!r}, sys.prefix"),
    )
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT,
        kernel_name=this_interpreter_kernel,
        resources={"metadata": {"path": str(workdir)}},
    )
    start = time.perf_counter()
    failure = None
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        failure = ANSI_COLOR.sub("", str(error))  # the cell, its output and its traceback
    if failure is not None:
        pytest.fail(f"{path.name} failed:\n{failure}", pytrace=False)
    print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s")
