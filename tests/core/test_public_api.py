"""The public API is documented and typed (issue 16, item 1 and 3).

Every public name (what ``import remat as rm`` gives, and the names of the public
submodules) has a docstring with an example, the example runs, and the signature
of every public function, class and method is annotated.  The names are
collected from the modules, so a name added without an example or without hints
fails here.  ``mypy`` (run by .ci/run) checks that the hints are right.
"""

import doctest
import inspect
import types

import pytest

import remat as rm
import remat.graph_workloads
import remat.memory
import remat.plot
import remat.plot_graph
import remat.typing
import remat.units
import remat.workloads

SUBMODULES = [
    rm.schedules,
    rm.random,
    rm.optim,
    rm.memory,
    rm.plot,
    rm.plot_graph,
    rm.pytree,
    rm.typing,
    rm.units,
    rm.workloads,
    rm.graph_workloads,
    rm.policies,
]


def _is_data(value):
    """Constants (OPS, SCHEDULE_NAMES, type aliases) carry no docstring of their own:
    their module's docstring or the API page describes them."""
    return not (inspect.isclass(value) or inspect.isfunction(value) or inspect.isbuiltin(value))


def _public(module):
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    for name in sorted(names):
        value = getattr(module, name)
        if isinstance(value, types.ModuleType) or _is_data(value):
            continue
        if module is not rm and not getattr(value, "__module__", "").startswith(module.__name__):
            continue  # imported from elsewhere, e.g. typing helpers
        yield f"{module.__name__}.{name}", value


PUBLIC = dict(_public(rm))
for _module in SUBMODULES:
    PUBLIC.update(_public(_module))


def test_the_public_names_are_found():
    # a guard on the collection itself: these are public, and must be seen
    for name in [
        "remat.Tape",
        "remat.sin",
        "remat.schedules.Revolve",
        "remat.optim.Adam",
        "remat.units.parse_bytes",  # also remat.memory.parse_bytes, where budgets are read
        "remat.random.normal",
        "remat.plot.schedule_diagram",
    ]:
        assert name in PUBLIC


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_name_has_an_example_that_runs(name):
    value = PUBLIC[name]
    doc = inspect.getdoc(value) or ""
    assert ">>>" in doc, f"{name} has no example in its docstring"
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(value, name, globs={}) if t.examples]
    assert tests, f"{name}: doctest finds no example"
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"{name}: its example fails (see the output above)"


def _members(cls):
    """The public methods and properties ``cls`` defines (its own, not object's)."""
    for klass in cls.__mro__:
        if klass is object or not klass.__module__.startswith("remat"):
            continue
        for attr, value in vars(klass).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            if isinstance(value, property):
                if inspect.isfunction(value.fget):  # not a field getter (operator.itemgetter)
                    yield attr, value.fget, True
            elif isinstance(value, (staticmethod, classmethod)):
                yield attr, value.__func__, False
            elif inspect.isfunction(value) and value.__module__.startswith("remat"):
                yield attr, value, False  # (not typing.Protocol's own __init__)


def _missing_hints(function, is_property=False):
    signature = inspect.signature(function)
    missing = [
        p.name
        for i, p in enumerate(signature.parameters.values())
        if p.annotation is inspect.Parameter.empty and not (i == 0 and p.name in ("self", "cls"))
    ]
    if signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_signature_is_annotated(name):
    value = PUBLIC[name]
    if inspect.isclass(value):
        if issubclass(value, Exception) and "__init__" not in vars(value):
            return  # an exception takes its message, as Exception does
        missing = {
            attr: hints
            for attr, function, is_property in _members(value)
            if (hints := _missing_hints(function, is_property))
        }
    else:
        missing = {name: hints} if (hints := _missing_hints(value)) else {}
    assert not missing, f"{name}: no type hints for {missing}"


def test_py_typed_ships_with_the_package():
    from importlib import resources

    assert resources.files("remat").joinpath("py.typed").is_file()


def test_the_user_code_mypy_checks_also_runs():
    import importlib

    importlib.import_module("tests.typing_usage")  # see its docstring; mypy checks its types
