"""The primitives: each op's forward and VJP side by side, grouped by family.

``OPS`` (from :mod:`remat.ops.core`) is the single table of every primitive;
the tests check each entry's gradient against finite differences.
"""

from types import SimpleNamespace
from typing import TYPE_CHECKING

from .. import backend
from ..core import tape as _core_tape
from .core import OPS, ShapeError, Tensor, as_tensor, stack
from .elementwise import (
    abs,
    add,
    clip,
    cos,
    divide,
    exp,
    log,
    maximum,
    minimum,
    multiply,
    negative,
    power,
    sin,
    sqrt,
    subtract,
    tanh,
    where,
)
from .index import getitem, scatter_add
from .linalg import einsum, matmul
from .nn import cross_entropy, gelu, layer_norm, log_softmax, relu, sigmoid, softmax
from .numpy_coverage import *  # noqa: F403  (NumPy's functions, issue 27)
from .numpy_coverage import attach_numpy_methods
from .reduce import argmax, argmin, logsumexp, max, mean, min, sum
from .shape import (
    astype,
    broadcast_to,
    concatenate,
    identity,
    reshape,
    swapaxes,
    to_device,
    transpose,
)

if TYPE_CHECKING:
    from ..typing import TensorLike


def sign(x: "TensorLike") -> Tensor:
    """The sign of each element, as a constant (its derivative is zero almost everywhere).

    >>> import remat as rm
    >>> rm.sign(rm.tensor([-2.0, 0.0, 3.0]))
    tensor([-1.,  0.,  1.])
    """
    return Tensor._wrap(backend.sign(as_tensor(x)._data))


# The namespace VJP rules use when a backward is itself differentiated: the
# same names as backend.ArrayNamespace, on Tensors (see remat.tape).
TENSOR_NAMESPACE = SimpleNamespace(
    sin=sin,
    cos=cos,
    exp=exp,
    log=log,
    sqrt=sqrt,
    tanh=tanh,
    sign=sign,
    sum=sum,
    reshape=reshape,
    broadcast_to=broadcast_to,
    where=where,
    matmul=matmul,
    swapaxes=swapaxes,
    transpose=transpose,
    einsum=einsum,
    scatter_add=scatter_add,
    to_device=to_device,
    astype=astype,
    on_tape=Tensor._from_record,  # a saved array as a Tensor on its node (remat.tape)
)


def _comparison(name):
    ufunc = getattr(backend.xp, name)

    def compare(self, other):
        other = other._data if isinstance(other, Tensor) else other
        return Tensor._wrap(ufunc(self._data, other))

    compare.__name__ = f"__{name}__"
    return compare


def _transposed(x: Tensor) -> Tensor:
    """``x.T``: the axes reversed, as ``transpose(x)``."""
    return transpose(x)


def attach_methods(Tensor):
    """Give Tensor its operators and methods (called once, below, as remat.ops is
    imported: the ops sit above the Tensor, which imports none of them)."""
    Tensor.__add__ = Tensor.__radd__ = add
    Tensor.__sub__ = subtract
    Tensor.__rsub__ = lambda self, other: subtract(other, self)
    Tensor.__mul__ = Tensor.__rmul__ = multiply
    Tensor.__truediv__ = divide
    Tensor.__rtruediv__ = lambda self, other: divide(other, self)
    Tensor.__pow__ = power
    Tensor.__rpow__ = lambda self, other: power(other, self)
    Tensor.__matmul__ = matmul
    Tensor.__rmatmul__ = lambda self, other: matmul(other, self)
    Tensor.__neg__ = negative
    Tensor.__abs__ = abs
    Tensor.__getitem__ = getitem
    for name, dunder in [
        ("less", "lt"),
        ("less_equal", "le"),
        ("greater", "gt"),
        ("greater_equal", "ge"),
        ("equal", "eq"),
        ("not_equal", "ne"),
    ]:
        setattr(Tensor, f"__{dunder}__", _comparison(name))
    Tensor.sum = sum
    Tensor.mean = mean
    Tensor.max = max
    Tensor.min = min
    Tensor.reshape = reshape
    Tensor.transpose = transpose
    Tensor.T = property(_transposed)
    Tensor.exp = exp
    Tensor.log = log
    Tensor.tanh = tanh
    Tensor.to = to_device
    Tensor.astype = astype
    Tensor.argmax = argmax
    Tensor.argmin = argmin
    Tensor.swapaxes = swapaxes
    Tensor.clip = clip
    attach_numpy_methods(Tensor, globals())  # NumPy's ndarray methods and dispatch (issue 27)


attach_methods(Tensor)
_core_tape.tensor_ops = TENSOR_NAMESPACE  # the core tape's hook: what create_graph computes with

__all__ = sorted(
    name
    for name in dir()
    if not name.startswith("_") and name not in ("SimpleNamespace", "Tensor", "backend")
)
