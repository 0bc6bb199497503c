"""Indexing: ``x[index]`` and its adjoint, adding a cotangent back into zeros.

Integer-array indices may name an element twice; the adjoint then *adds* the
cotangents (an unbuffered scatter-add), so repeated indices accumulate.
"""

from .. import backend
from ..engine.fast import basic_getitem
from .core import Tensor, apply, as_tensor, defop

_BASIC = (int, slice, type(None), type(Ellipsis))


def is_basic(index: object) -> bool:
    """Integers, slices, None and ``...`` (alone or in a tuple): an index that makes a
    view and names no element twice, so its adjoint is a plain assignment."""
    if type(index) is tuple:
        return all(type(part) in _BASIC for part in index)
    return type(index) in _BASIC


def _normalize_index(index):
    """Tensors and lists inside an index become (copied) arrays; the rest stays."""
    parts = index if isinstance(index, tuple) else (index,)
    fixed = []
    for part in parts:
        if isinstance(part, Tensor):
            part = part._data
        if isinstance(part, list) or backend.is_array(part):
            part = backend.as_index(part)
        fixed.append(part)
    return tuple(fixed) if isinstance(index, tuple) else fixed[0]


def _getitem(x, index):
    return x[index]


GETITEM = defop(
    "getitem",
    _getitem,
    lambda ns, g, ans, x, index, shape: ns.scatter_add(shape, index, g),
    needs=("",),
    jvps=(lambda ns, t, ans, x, index, shape: t[index],),
)


def getitem(x, index):
    """``x[index]`` with NumPy's basic and advanced indexing."""
    if type(x) is Tensor and is_basic(index):
        return basic_getitem(GETITEM, x, index)
    x = as_tensor(x)
    index = _normalize_index(index)
    try:
        return apply(GETITEM, (x,), {"index": index}, {"index": index, "shape": x.shape})
    except IndexError as error:  # still an IndexError: iteration over a Tensor stops on it
        raise IndexError(f"getitem: {error} (tensor of shape {x.shape})") from None


def _scatter_add(values, shape, index):
    return backend.scatter_into(shape, index, values)


# The adjoint of getitem as an op of its own, so that a backward through
# indexing can itself be differentiated (its VJP is indexing again).
SCATTER_ADD = defop(
    "scatter_add",
    _scatter_add,
    lambda ns, g, ans, values, shape, index: g[index],
    needs=("",),
    jvps=(lambda ns, t, ans, values, shape, index: ns.scatter_add(shape, index, t),),
)


def scatter_add(shape, index, values):
    """zeros(shape) with ``values`` added at ``index`` (repeated indices add up)."""
    index = _normalize_index(index)  # copied: later changes cannot reach the tape
    return apply(SCATTER_ADD, (as_tensor(values),), {"shape": tuple(shape), "index": index})
