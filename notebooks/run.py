"""Execute the notebooks from their text sources and write the executed .ipynb files.

Each notebook here is a pair: ``NAME.py`` (jupytext percent format) is the source
of truth, and ``NAME.ipynb`` is that source executed top to bottom, with its
outputs, so that a browser shows the figures.  After editing a ``.py`` file
(or a notebook in Jupyter with jupytext, which keeps the pair in step), run

    python notebooks/run.py                  # every notebook
    python notebooks/run.py notebooks/02_schedules_explained.py   # some

``tests/tools/test_notebooks.py`` uses the same functions: it executes every source
and checks that each committed ``.ipynb`` holds exactly its source's cells,
executed in order, and stays small.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import jupytext
import nbclient
import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CELL_TIMEOUT = 120  # seconds, per cell


def sources(folder=HERE):
    """The text sources of the notebooks in ``folder``, in order."""
    return sorted(path for path in Path(folder).glob("[0-9][0-9]_*.py"))


def read_source(path):
    """The notebook a text source describes (not executed), with fixed cell ids."""
    nb = jupytext.read(path)
    for index, cell in enumerate(nb.cells):
        cell.id = f"cell-{index:02d}"
        cell.metadata = {}
    nb.metadata = {
        "kernelspec": nb.metadata["kernelspec"],
        "language_info": {"name": "python"},
    }
    return nb


@contextlib.contextmanager
def this_interpreter():
    """A ``python3`` kernel that is this interpreter, found before any other.

    So that a ``python3`` kernelspec installed elsewhere (another environment's)
    cannot be picked up, and remat is importable from this checkout.
    """
    saved = {name: os.environ.get(name) for name in ("JUPYTER_PATH", "PYTHONPATH", "IPYTHONDIR")}
    with tempfile.TemporaryDirectory() as scratch:
        spec_dir = Path(scratch, "jupyter", "kernels", "python3")
        spec_dir.mkdir(parents=True)
        spec = {
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (this interpreter)",
            "language": "python",
        }
        (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")

        def prepend(name, path):
            os.environ[name] = os.pathsep.join([path, *([saved[name]] if saved[name] else [])])

        prepend("JUPYTER_PATH", str(Path(scratch, "jupyter")))
        prepend("PYTHONPATH", str(ROOT))
        os.environ["IPYTHONDIR"] = str(Path(scratch, "ipython"))
        try:
            yield "python3"
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def execute(nb, workdir):
    """Run ``nb`` in place, in ``workdir``, on this interpreter.

    Raises ``nbclient.exceptions.CellExecutionError`` with the failing cell's
    source and traceback.
    """
    with this_interpreter() as kernel:
        nbclient.NotebookClient(
            nb,
            timeout=CELL_TIMEOUT,
            kernel_name=kernel,
            record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
        ).execute()
    nb.metadata["language_info"] = {"name": "python"}  # not the kernel's version details
    return nb


def run(source):
    """Execute one text source in a scratch copy of its folder; write its .ipynb."""
    source = Path(source).resolve()
    nb = read_source(source)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch, "notebooks")
        shutil.copytree(source.parent, workdir)
        execute(nb, workdir)
    target = source.with_suffix(".ipynb")
    nbformat.validate(nb)
    nbformat.write(nb, target)
    return target


if __name__ == "__main__":
    for path in sys.argv[1:] or sources():
        written = run(path)
        print(f"{written}: {written.stat().st_size / 1024:.0f} KiB")
