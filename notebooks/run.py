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

The work is the libraries': jupytext reads the sources, nbclient executes them on
ipykernel's kernel for this interpreter, nbformat validates and writes.  What is
left here is what none of them does in one call.  ``jupytext --to ipynb --execute``
runs nbconvert's executor with no cell timeout, on whichever ``python3`` kernelspec
the Jupyter path finds first, in the notebooks' own folder, and writes the kernel's
version details and jupytext's metadata into the notebook; papermill and nbmake
(a pytest plugin) also pick the kernel by name from that search, and execute the
``.ipynb`` rather than its source.  A kernel found by name can be another
environment's, or one whose editable install is another checkout: the notebooks
would then test other code without a word.  So this script pins the kernel to this
interpreter and this checkout, runs each notebook in a scratch copy of its folder,
and gives every cell a fixed id, so that rerunning a notebook changes only its
outputs.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import jupytext
import nbclient
import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager

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


def execute(nb, workdir):
    """Run ``nb`` in place, in ``workdir``, on this interpreter, with remat from this checkout.

    The kernel is ipykernel's own ``python3`` spec, which runs this interpreter:
    jupyter_client finds it when it searches no kernel directory, so that a
    ``python3`` kernelspec installed elsewhere (another environment's) cannot be
    picked up.  ``PYTHONPATH`` puts this checkout first, and a scratch
    ``IPYTHONDIR`` keeps the user's IPython profile out.  Raises
    ``nbclient.exceptions.CellExecutionError`` with the failing cell's source and
    traceback.
    """
    native = KernelSpecManager(kernel_dirs=[])
    kernel = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=native)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as ipython_dir:
        env = {**os.environ, "PYTHONPATH": path, "IPYTHONDIR": ipython_dir}
        nbclient.NotebookClient(
            nb,
            km=kernel,
            timeout=CELL_TIMEOUT,
            record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
        ).execute(cleanup_kc=True, env=env)  # a kernel it was given: stop it all the same
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
