"""One function for both namespaces a VJP rule runs in.

A rule computes on raw arrays in an ordinary backward (``ns`` is
:data:`remat.backend.ARRAY_NAMESPACE`) and on Tensors when the backward is
itself differentiated.  The rules of the NumPy-coverage ops need functions the
namespace does not list (``cosh``, ``roll``, ``cumsum``...): :func:`call`
picks NumPy's on arrays and remat's own (recorded, differentiable) on Tensors,
so that the rule is still written once.  The modules defining those functions
list them in :data:`TENSOR_FUNCTIONS` (:func:`recorded`), so this module
imports nothing of remat's ops above it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from .. import backend

TENSOR_FUNCTIONS: dict[str, Callable[..., Any]] = {}
"""name -> remat's function of that name, for :func:`call` on Tensors."""


def recorded(*functions: Callable[..., Any]) -> None:
    """List remat functions that VJP rules call through :func:`call`."""
    for function in functions:
        TENSOR_FUNCTIONS[function.__name__] = function


def call(ns: Any, name: str, *args: Any, **kw: Any) -> Any:
    """``xp.<name>(*args)`` on arrays, ``rm.<name>(*args)`` on Tensors.

    >>> import remat as rm
    >>> from remat.backend import ARRAY_NAMESPACE
    >>> call(ARRAY_NAMESPACE, "cosh", rm.backend.xp.zeros(1))
    array([1.])
    """
    if ns is backend.ARRAY_NAMESPACE:
        return getattr(backend.xp, name)(*args, **kw)
    return TENSOR_FUNCTIONS[name](*args, **kw)


def raw(value: Any) -> Any:
    """The array of a Tensor (a constant inside a rule: a floor, a mask), else ``value``."""
    data = getattr(value, "_data", None)
    return value if data is None else data


def ints(name: str, what: str, value: Any) -> Any:
    """An integer (a NumPy one too) as an int, a sequence of them as a tuple of ints,
    or a TypeError naming the function, the argument and the value.

    >>> import numpy as np
    >>> ints("tile", "reps", np.int64(2)), ints("tile", "reps", [1, np.int32(3)])
    (2, (1, 3))
    """
    try:
        return operator.index(value)
    except TypeError:
        pass
    try:
        return tuple(operator.index(v) for v in value)
    except TypeError:
        raise TypeError(
            f"{name}: {what} must be an int or a sequence of ints, not {value!r}"
        ) from None
