"""NumPy's own functions on Tensors: ``np.sin(t)``, ``np.sum(t)``, ``np.concatenate([t, u])``.

A Tensor answers NumPy's two dispatch protocols (NEP 13 ``__array_ufunc__``,
NEP 18 ``__array_function__``), so that NumPy code written for arrays runs on
Tensors and is *recorded*: a NumPy function that remat has (``np.tanh``,
``np.sum``, ``np.roll``...) calls remat's (``rm.tanh``...), and the result is a
Tensor with its gradient.  Nothing is ever differentiated silently wrong:

* A function remat does not have runs on the values, as it did on the arrays
  NumPy took from Tensors before; but where a Tensor that requires a gradient
  reaches it while gradients are recorded and the result is a float (a
  quantity that would have a gradient), it raises a TypeError naming the
  function and the ``rm.`` function to use, where there is one.  Booleans and
  integers (``np.allclose``, ``np.argsort``, ``np.isnan``) have none to lose.
* An argument remat's function does not take (``dtype=``, ``where=``...) is
  refused by name unless it has NumPy's default value.
* ``out=`` follows the rules of ``t.data[...] = ...``: a Tensor given as
  ``out`` has its array written in place (its tape records see the change, as
  :mod:`remat.guard` makes them), and so has a NumPy array (``a += t``), but not
  with a result that needs a gradient, which the write would lose: that raises,
  saying to write ``a = a + t``.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import backend
from ..tape import GRAD_ENABLED
from .core import Tensor

xp = backend.xp

# NumPy's ufunc name -> remat's function name, where they differ or are aliases
UFUNC_NAMES = {
    "true_divide": "divide",
    "absolute": "abs",
    "conjugate": "conj",
    "positive": "identity",
}
# (ufunc, method) -> remat's function of (x, axis[, keepdims]): np.add.reduce is rm.sum
REDUCTIONS = {
    ("add", "reduce"): "sum",
    ("multiply", "reduce"): "prod",
    ("maximum", "reduce"): "max",
    ("minimum", "reduce"): "min",
    ("add", "accumulate"): "cumsum",
}
# ufuncs whose result is piecewise constant (derivative 0 almost everywhere): a constant
CONSTANT_UFUNCS = set(
    "less less_equal greater greater_equal equal not_equal logical_and logical_or logical_xor "
    "logical_not isnan isinf isfinite signbit sign floor ceil trunc rint floor_divide".split()
)
# NumPy's function name -> remat's, where they differ
FUNCTION_NAMES = {"amax": "max", "amin": "min"}
# functions whose arguments pass NumPy's defaults; these change nothing in the values
IGNORED = {"kind", "stable", "optimize"}
# how NumPy names the data argument that is remat's first parameter
DATA_NAMES = {"a", "arrays", "tup", "ary", "array", "m", "f", "v", "x", "arr", "z", "val"}


FUNCTIONS: dict[str, Any] = {}
"""name -> remat's public function of that name (``rm.<name>``), given by :func:`install`."""


def install(tensor_class: type, functions: dict[str, Any]) -> None:
    """Make ``tensor_class`` answer NumPy's protocols with ``functions`` (remat.ops' names)."""
    FUNCTIONS.update(
        (name, f) for name, f in functions.items() if inspect.isfunction(f) and name[0] != "_"
    )
    tensor_class.__array_ufunc__ = array_ufunc  # type: ignore[attr-defined]
    tensor_class.__array_function__ = array_function  # type: ignore[attr-defined]


def _remat_function(name: str) -> Any:
    """remat's public function ``name`` (``rm.<name>``), or None."""
    return FUNCTIONS.get(name)


def _needs_grad(values: Any) -> bool:
    if not GRAD_ENABLED.get():
        return False
    for v in values:
        if isinstance(v, Tensor) and v.requires_grad:
            return True
        if isinstance(v, (list, tuple)) and _needs_grad(v):
            return True
    return False


def _values(v: Any) -> Any:
    """Tensors replaced by their arrays (read-only views), in lists and tuples too."""
    if isinstance(v, Tensor):
        return v.numpy()
    if isinstance(v, (list, tuple)):
        return type(v)(_values(u) for u in v)
    return v


def _refuse(what: str, name: str, why: str) -> TypeError:
    has = _remat_function(name) is not None
    instead = f"use rm.{name}" if has else "remat has no differentiable form of it"
    return TypeError(f"{what} on a remat Tensor: {why}; {instead}")


def _unrecorded(
    func: Any, name: str, args: Any, kwargs: dict[str, Any], what: str, wrap: bool = False
) -> Any:
    """``func`` on the values, for a function remat does not have.  A result of booleans,
    integers or anything not a float (``np.allclose``, ``np.argsort``) has no gradient to
    lose; a float result of a tensor that requires grad would lose one, so it raises."""
    out = func(*_values(args), **{k: _values(v) for k, v in kwargs.items()})
    dtype = getattr(out, "dtype", None)
    floating = isinstance(out, float) or (dtype is not None and dtype.kind in "fc")
    if floating and (_needs_grad(args) or _needs_grad(kwargs.values())):
        raise _refuse(
            what,
            name,
            "remat does not record it, so a tensor that requires grad would get no gradient "
            "through it (run it on t.detach() for a constant)",
        )
    return Tensor._wrap(out) if wrap and backend.is_array(out) else out  # a ufunc: a Tensor


def array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """``Tensor.__array_ufunc__``: NumPy's ufunc calls on Tensors go to remat's functions."""
    name = ufunc.__name__
    what = f"numpy.{name}" if method == "__call__" else f"numpy.{name}.{method}"
    out = kwargs.pop("out", None)
    reduction = REDUCTIONS.get((name, method))
    if reduction is not None and len(inputs) == 1:  # the axis defaults to 0 there, not None
        function = _remat_function(reduction)
        keywords = {"axis": kwargs.pop("axis", 0)}
        if method == "reduce":
            keywords["keepdims"] = kwargs.pop("keepdims", False)
        _check_ufunc_keywords(what, kwargs)
        result = function(inputs[0], **keywords)
        return result if out is None else _write(what, out, result)
    _check_ufunc_keywords(what, kwargs)
    function = _remat_function(UFUNC_NAMES.get(name, name))
    if method != "__call__" or name in CONSTANT_UFUNCS or function is None:
        if name in CONSTANT_UFUNCS and method == "__call__":
            result = Tensor._wrap(xp.asarray(getattr(xp, name)(*_values(inputs))))
        else:
            result = _unrecorded(getattr(ufunc, method), name, inputs, {}, what, wrap=True)
    else:
        result = function(*inputs)
    if out is None:
        return result
    return _write(what, out, result)


def _check_ufunc_keywords(what: str, kwargs: dict[str, Any]) -> None:
    for key, value in kwargs.items():
        if not (key == "where" and value is True) and not (key == "casting"):
            raise TypeError(
                f"{what} on a remat Tensor: argument {key}={value!r} is not supported "
                "(allowed: the operands, and out= a Tensor)"
            )


def _write(what: str, out: tuple[Any, ...], result: Any) -> Any:
    """``out=(t,)``: the result written into t's array, as ``t.data[...] = result`` writes
    (into the array itself for a NumPy array: ``a += t``)."""
    if len(out) != 1 or not isinstance(result, Tensor):
        raise TypeError(f"{what} on a remat Tensor: out= takes one Tensor or array")
    (target,) = out
    if result.requires_grad and GRAD_ENABLED.get():
        raise TypeError(
            f"{what}(..., out=a) (or `a += t`, `a *= t`...) writes a's array in place, outside "
            "the tape, and the result needs a gradient that the write would lose; write "
            f"a = a + t (or a = rm.{what.split('.')[-1]}(...)) for a recorded result, or run "
            "it inside rm.no_grad()"
        )
    array = target.data if isinstance(target, Tensor) else target
    xp.copyto(array, result._data, casting="same_kind")
    return target


def _call_arguments(
    func: Any, function: Any, args: Any, kwargs: Any, what: str
) -> tuple[list[Any], dict[str, Any]]:
    """NumPy's call translated into remat's: its arguments by name, data first."""
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{what}: {error}") from None
    numpy_params = inspect.signature(func).parameters
    params = list(inspect.signature(function).parameters.values())
    names = {p.name for p in params}
    positional, keywords = [], {}
    for name, value in bound.arguments.items():
        kind = numpy_params[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            positional.extend(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            keywords.update(value)
        elif name in names:
            if any(p.name == name and p.kind is p.VAR_POSITIONAL for p in params):
                positional.extend(value if isinstance(value, (tuple, list)) else (value,))
            else:
                keywords[name] = value
        elif name in DATA_NAMES and not positional:
            positional.append(value)
        elif name in IGNORED or _is_default(value, numpy_params[name].default):
            continue
        else:
            allowed = ", ".join(p.name for p in params[1:]) or "none"
            raise TypeError(
                f"{what} on a remat Tensor: argument {name}={value!r} is not supported by "
                f"rm.{function.__name__} (its arguments: {allowed})"
            )
    for key in list(keywords):
        if key not in names and not any(p.kind is p.VAR_KEYWORD for p in params):
            raise TypeError(
                f"{what} on a remat Tensor: argument {key}={keywords[key]!r} is not supported"
            )
    return positional, keywords


def _is_default(value: Any, default: Any) -> bool:
    if value is default:
        return True
    simple = (type(None), bool, int, float, str)
    return isinstance(value, simple) and isinstance(default, simple) and value == default


def array_function(self: Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    """``Tensor.__array_function__``: NumPy's functions on Tensors go to remat's."""
    name = func.__name__
    module = func.__module__ or "numpy"
    what = f"numpy.{name}" if module.count(".") < 1 or "core" in module else f"{module}.{name}"
    function = _remat_function(FUNCTION_NAMES.get(name, name))
    if function is None or not module.startswith("numpy") or module.startswith("numpy.linalg"):
        return _unrecorded(func, name, args, kwargs, what)
    positional, keywords = _call_arguments(func, function, args, kwargs, what)
    return function(*positional, **keywords)
