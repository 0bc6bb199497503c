"""The import graph of remat: layers in one direction, no cycle, schedules/ standing alone.

The graph is read from the source with ``ast`` (nothing of remat runs), and holds
every import, function-level ones included (a function-level import hides a cycle,
it does not remove it).  ``from . import x`` counts as an import of the module
``x``, not of the package it is taken from: every module's package is imported
before the module itself, so that edge tells nothing.  Imports under ``if
TYPE_CHECKING:`` never run and are how a low module names a higher one's type in
its annotations, so the cycle and layer checks leave them out; the schedules check
keeps them, because a copy of schedules/ must type-check alone too.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "remat"

# The layers of docs' design sketch, lowest first, by today's module names (a
# package stands for everything under it).  A module may import its own layer or a
# lower one; a module in no layer fails below, to be given one.
LAYERS = [
    ["remat.backend", "remat.units", "remat.pytree", "remat.guard", "remat.typing"],
    ["remat.core"],  # the teaching core: Tensor, Record, Leaf, the sweep, one generic apply
    # the engine, over the core: fast paths, tape views, step values and stand-ins,
    # rm.tensor, dual numbers, selective replay (the op modules build on its fast paths)
    ["remat.engine", "remat.tape", "remat.tensor", "remat.dual", "remat.selective"],
    ["remat.ops", "remat.creation", "remat.random"],
    ["remat.functional"],
    ["remat.schedules"],
    ["remat.executor", "remat.alive", "remat.storage"],
    ["remat.graph"],
    ["remat.checkpoint", "remat.policies", "remat.budget", "remat.tape_options"]
    + ["remat.memory", "remat.measure"]
    + ["remat.disk", "remat.blockwise", "remat.optim", "remat.workloads"]  # the front ends
    + ["remat.graph_workloads", "remat.graph_compare"],
    # plots, CLI, the public face
    ["remat.plot", "remat.plot_graph", "remat.cli", "remat.__main__", "remat"],
]


def module_names():
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = module_names()


def imports(name, path, type_checking):
    """The remat modules that module ``name`` imports (with TYPE_CHECKING's or not)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def visit(node):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body if type_checking else []:
                visit(child)
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: package.count(".") + 2 - node.level]
            target = ".".join(base + [node.module or ""]).strip(".") if node.level else node.module
            subs = {f"{target}.{alias.name}" for alias in node.names} & MODULES.keys()
            found.update(subs if subs and not node.module else subs | {target})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    above = {".".join(package.split(".")[:k]) for k in range(1, package.count(".") + 2)}
    return {m for m in found if m in MODULES and m != name and m not in above}


def graph(type_checking=False):
    return {name: imports(name, path, type_checking) for name, path in MODULES.items()}


def layer(name):
    """The index in LAYERS of the longest name listed that is ``name`` or a package above it
    (``remat``, the public face, stands for itself alone)."""
    owners = [
        (len(p), i)
        for i, listed in enumerate(LAYERS)
        for p in listed
        if name == p or (p != "remat" and name.startswith(p + "."))
    ]
    assert owners, f"{name} is in no layer of LAYERS: add it to the layer it belongs to"
    return max(owners)[1]


def cycles(edges):
    """The strongly connected components of more than one module (Tarjan's)."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set(stack[stack.index(v) :])
            del stack[stack.index(v) :]
            if len(component) > 1:
                found.append(component)

    for v in edges:
        if v not in index:
            visit(v)
    return found


# Guards issue 25: tensor, tape, dual, selective and ops imported one another in a circle.
def test_no_import_cycle():
    assert [sorted(c) for c in cycles(graph())] == []


def test_every_import_points_down_the_layers():
    up = [
        f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"
        for name, targets in graph().items()
        for target in targets
        if layer(target) > layer(name)
    ]
    assert up == []


def test_schedules_import_nothing_of_remat_outside_their_folder():
    outside = {
        name: sorted(t for t in targets if not t.startswith("remat.schedules"))
        for name, targets in graph(type_checking=True).items()
        if name.startswith("remat.schedules")
    }
    assert {name: targets for name, targets in outside.items() if targets} == {}
