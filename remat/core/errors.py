"""What the core refuses, and how it says so: each error names the op, the shapes,
the dtypes and what is allowed.  Nothing here is needed to follow reverse mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend


class BackwardError(RuntimeError):
    """Backward cannot run: a graph already freed, or a gradient of bad shape.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> try:
    ...     y.backward()  # the first backward freed what the second needs
    ... except rm.BackwardError as error:
    ...     print(str(error)[:38])
    backward through `sum` (output shape (
    """


def freed_error(record):
    return BackwardError(
        f"backward through `{record.op.name}` (output shape {record.shape}) a second time: "
        "its saved arrays were freed by the first backward. Pass retain_graph=True to the "
        "first backward() if you need to backpropagate through the same graph twice."
    )


def changed_error(record: Any, i: int, sweep: str) -> BackwardError:
    """Saved value ``i`` of ``record`` (its output if past the inputs) was written in place."""
    arrays = (*record.args, record.ans)
    what = "its output" if i == len(record.args) else f"its input {i}"
    a = arrays[i]
    return BackwardError(
        f"{sweep} through `{record.op.name}` (output shape {record.shape}): {what}, an "
        f"array of shape {a.shape} and dtype {a.dtype} saved for this {sweep}, was "
        "changed in place after it was saved (through .data, np.asarray(t), .numpy() or "
        "a view of them). Change values only when no backward still needs them (after "
        "backward), or out of place: `with rm.no_grad(): p -= lr * p.grad` rebinds p."
    )


def own_gradients(pairs, seed):
    """Yield (key, gradient) from ``pairs`` with each gradient an array of its own.

    A VJP may pass its cotangent on unchanged (add does), so two leaves could
    otherwise share one array, or share the caller's seed.
    """
    seen = set()
    for leaf, g in pairs:
        if g is seed or id(g) in seen or not backend.is_owned(g):
            g = backend.copy(g)
        seen.add(id(g))
        yield leaf, g


def as_leaf_dtype(g, leaf):
    """A leaf's gradient in the leaf's own dtype (float32 stays float32), as in PyTorch."""
    if g.dtype == leaf.dtype:
        return g
    refuse_complex_gradient(g, leaf)
    return g.astype(leaf.dtype)


def refuse_complex_gradient(g, leaf):
    """Refuse gradient ``g`` of a real ``leaf`` (anything with a shape and a dtype) that
    came out complex: cast to the leaf's dtype, it would lose its imaginary part."""
    if backend.is_complex(g.dtype) and not backend.is_complex(leaf.dtype):
        raise BackwardError(
            f"backward(): the gradient of a real leaf of shape {leaf.shape} and dtype "
            f"{leaf.dtype} came out complex ({g.dtype}): a complex value was combined with it. "
            "remat differentiates real functions only; take the real part where it belongs."
        )


REAL_ONLY = (
    "remat differentiates real functions only. Allowed: a real (floating-point) array; "
    "carry a complex value as two real ones, its real and imaginary parts"
)


def refuse_complex(array, what, dtype=None, allowed=REAL_ONLY):
    """Refuse a complex ``array`` where remat wants a real value (of ``dtype``, if given,
    when that is real).  Cast, the array would lose its imaginary part with at most
    NumPy's ComplexWarning; carried as a constant, it would cut a gradient or a
    tangent.  Either way the answer would be wrong without a word, so this raises,
    naming ``what`` (the argument), the array's dtype and shape and what is ``allowed``."""
    if array.dtype.kind != "c" or (dtype is not None and backend.is_complex(dtype)):
        return  # (the kind, not backend.is_complex: this runs on every checkpointed call)
    real = "" if dtype is None else f", where a real value of dtype {dtype} belongs"
    raise DTypeError(
        f"{what} is complex (dtype {array.dtype}, shape {tuple(array.shape)}){real}; {allowed}"
    )


class DTypeError(TypeError, ValueError):
    """An array of the wrong dtype for what was asked (gradients need floats).

    >>> import remat as rm
    >>> try:
    ...     rm.tensor([1, 2], requires_grad=True)
    ... except rm.DTypeError as error:
    ...     print(str(error).split(";")[0])
    requires_grad=True needs a floating-point array
    """


def check_differentiable_dtype(array):
    if not backend.is_floating(array.dtype):
        raise DTypeError(
            f"requires_grad=True needs a floating-point array; got dtype {array.dtype} "
            f"(shape {tuple(array.shape)}). Pass dtype=float64 (or float32) to rm.tensor."
        )


# --- operands that do not fit ----------------------------------------------------


class ShapeError(ValueError):
    """An op was given arrays whose shapes do not fit together.

    >>> import remat as rm
    >>> try:
    ...     rm.ones(2) + rm.ones(3)
    ... except rm.ShapeError as error:
    ...     print(str(error).split(":")[0:2])
    ['add', ' cannot combine operands of shapes (2,) and (3,)']
    """


SHAPE_RULES: dict[str, Callable[..., str]] = {}
"""op name -> f(*operands) explaining, for a human, why their shapes do not fit."""


def check_axis(op_name: str, axis: int, ndim: int) -> int:
    """``axis`` as an index in [0, ndim), or a ShapeError naming the op (as NumPy would)."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op_name}: axis {axis} is out of bounds for {ndim} axes")
    return axis % ndim


def shape_error(op, datas, error):
    rule = SHAPE_RULES.get(op.name)
    if rule is not None:
        return ShapeError(rule(*datas))
    if len(datas) == 1:
        return ShapeError(f"{op.name}: {error} (operand of shape {getattr(datas[0], 'shape', ())})")
    shapes = " and ".join(str(getattr(d, "shape", ())) for d in datas)
    return ShapeError(f"{op.name}: cannot combine operands of shapes {shapes}: {error}")


def operand_error(op, datas, error):
    """Why an op refused its operands: two devices, shapes, or another NumPy error,
    always naming the op."""
    devices = backend.mixed_devices(datas)
    if devices is not None:
        return backend.DeviceError(
            f"{op.name}: operands are on different devices: {devices}; move one with .to()"
        )
    if isinstance(error, ValueError):
        return shape_error(op, datas, error)
    described = ", ".join(
        f"{getattr(d, 'dtype', type(d).__name__)} {getattr(d, 'shape', '')}".strip() for d in datas
    )
    kind = TypeError if isinstance(error, TypeError) else ValueError
    return kind(f"{op.name}: {error} (operands: {described})")
