"""NumPy's functions beyond remat's first ops (issue 27), gathered for export.

``remat.ops`` and ``remat`` import every name of :data:`__all__` from here, so
that the NumPy-coverage functions join the public API in one line each.  The
functions live by family: :mod:`~remat.ops.transcendental` (one-input
elementwise), :mod:`~remat.ops.binary_ufuncs`, :mod:`~remat.ops.complex_parts`,
:mod:`~remat.ops.arrange` (shapes, stacks, splits), :mod:`~remat.ops.stencil`
(roll, pad, cumsum, diff, gradient), :mod:`~remat.ops.matrix` and
:mod:`~remat.ops.statistics` (prod, var, std, sort, partition, select, linspace).
"""

from typing import Any

from .arrange import (
    array_split,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    column_stack,
    dsplit,
    dstack,
    expand_dims,
    flip,
    fliplr,
    flipud,
    hsplit,
    hstack,
    moveaxis,
    ravel,
    repeat,
    rollaxis,
    rot90,
    row_stack,
    split,
    squeeze,
    tile,
    vsplit,
    vstack,
)
from .binary_ufuncs import (
    arctan2,
    fmax,
    fmin,
    hypot,
    logaddexp,
    logaddexp2,
    mod,
    remainder,
)
from .complex_parts import (
    angle,
    conj,
    conjugate,
    imag,
    real,
    real_if_close,
)
from .dispatch import install
from .matrix import (
    cross,
    diag,
    diagonal,
    dot,
    inner,
    kron,
    make_diagonal,
    outer,
    tensordot,
    trace,
    tril,
    triu,
)
from .statistics import (
    linspace,
    partition,
    prod,
    select,
    sort,
    std,
    var,
)
from .stencil import (
    cumsum,
    diff,
    gradient,
    pad,
    roll,
)
from .transcendental import (
    arccos,
    arccosh,
    arcsin,
    arcsinh,
    arctan,
    arctanh,
    cosh,
    deg2rad,
    degrees,
    exp2,
    expm1,
    fabs,
    log1p,
    log2,
    log10,
    nan_to_num,
    rad2deg,
    radians,
    reciprocal,
    sinc,
    sinh,
    square,
    tan,
)

__all__ = [
    "angle",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "array_split",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "column_stack",
    "conj",
    "conjugate",
    "cosh",
    "cross",
    "cumsum",
    "deg2rad",
    "degrees",
    "diag",
    "diagonal",
    "diff",
    "dot",
    "dsplit",
    "dstack",
    "exp2",
    "expand_dims",
    "expm1",
    "fabs",
    "flip",
    "fliplr",
    "flipud",
    "fmax",
    "fmin",
    "gradient",
    "hsplit",
    "hstack",
    "hypot",
    "imag",
    "inner",
    "kron",
    "linspace",
    "log10",
    "log1p",
    "log2",
    "logaddexp",
    "logaddexp2",
    "make_diagonal",
    "mod",
    "moveaxis",
    "nan_to_num",
    "outer",
    "pad",
    "partition",
    "prod",
    "rad2deg",
    "radians",
    "ravel",
    "real",
    "real_if_close",
    "reciprocal",
    "remainder",
    "repeat",
    "roll",
    "rollaxis",
    "rot90",
    "row_stack",
    "select",
    "sinc",
    "sinh",
    "sort",
    "split",
    "square",
    "squeeze",
    "std",
    "tan",
    "tensordot",
    "tile",
    "trace",
    "tril",
    "triu",
    "var",
    "vsplit",
    "vstack",
]


# NumPy ndarray methods a Tensor gains (remat.ops.attach_methods calls attach_numpy_methods):
# name -> the function; ``t.var(0)`` is ``rm.var(t, 0)``.  Not the in-place ones
# (ndarray.sort, .partition, .fill): remat never writes into a tensor's array.
METHODS = {
    "squeeze": squeeze,
    "ravel": ravel,
    "flatten": ravel,  # NumPy copies; remat's arrays are never written in place, so the same
    "dot": dot,
    "var": var,
    "std": std,
    "prod": prod,
    "cumsum": cumsum,
    "repeat": repeat,
    "diagonal": diagonal,
    "trace": trace,
    "conj": conj,
    "conjugate": conj,
}
PROPERTIES = {"real": real, "imag": imag}


def _format(self: Any, spec: str) -> str:
    """``f"{t:.3f}"``: a format spec applies to the value, as for a NumPy array (0-d ones)."""
    return format(self._data, spec) if spec else str(self)


def attach_numpy_methods(tensor_class: type, functions: dict[str, Any]) -> None:
    """Give Tensor NumPy's ndarray methods and properties from :data:`METHODS`, and
    NumPy's dispatch to ``functions`` (remat.ops' namespace: :mod:`remat.ops.dispatch`).

    >>> import remat as rm
    >>> t = rm.tensor([[1.0], [3.0]])
    >>> t.squeeze(), t.var(), t.ravel().dot(t.ravel())
    (tensor([1., 3.]), tensor(1.), tensor(10.))
    """
    for name, function in METHODS.items():
        setattr(tensor_class, name, function)
    for name, function in PROPERTIES.items():
        setattr(tensor_class, name, property(function))
    tensor_class.__format__ = _format  # type: ignore[assignment]
    install(tensor_class, functions)
