"""Matrix products: matmul (NumPy's rules for 1-D and batched operands) and einsum."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import backend
from .core import SHAPE_RULES, ShapeError, Variadic, apply, as_tensor, defop, make_binary, xp
from .einsum_spec import expand_ellipsis

if TYPE_CHECKING:
    from ..tensor import Tensor
    from ..typing import TensorLike

# Each rule sees only the other operand; the rank of its own operand follows
# from the cotangent's rank (NumPy drops the axis a 1-D operand contributed).


def _matmul_vjp_a(ns, g, ans, a, b):
    if b.ndim == 1:  # (..., n, k) @ (k,) -> (..., n), or (k,) @ (k,) -> ()
        return g[..., None] * b if g.ndim else g * b
    if g.ndim == b.ndim - 1:  # (k,) @ (..., k, m) -> (..., m)
        return ns.matmul(b, g[..., None])[..., 0]
    return ns.matmul(g, ns.swapaxes(b, -1, -2))


def _matmul_vjp_b(ns, g, ans, a, b):
    if a.ndim == 1:  # (k,) @ (..., k, m) -> (..., m), or (k,) @ (k,) -> ()
        return a[:, None] * g[..., None, :] if g.ndim else g * a
    if g.ndim == a.ndim - 1:  # (..., n, k) @ (k,) -> (..., n)
        return ns.matmul(ns.swapaxes(a, -1, -2), g[..., None])[..., 0]
    shared = b is not None and b.ndim == 2 < a.ndim and b.size >= SHARED  # (..., n, k) @ (k, m)
    if shared and ns is backend.ARRAY_NAMESPACE:
        return _summed_over_batch(a, g)
    return ns.matmul(ns.swapaxes(a, -1, -2), g)


SHARED = 1 << 12
"""From this size on, a 2-D ``b`` shared by a batch of ``a`` gets its gradient summed
as it is computed (:func:`_summed_over_batch`).  The rule knows b is 2-D only where
the record saved b, for a's gradient: a batch of activations, not of data."""


def _summed_over_batch(a, g):
    """a^T g summed over a's batch axes, for a 2-D b that the batch shares.

    The products are added one by one in the batch's order, as the tape's sum
    over the batch axes adds them (so the same bits), without holding the
    (batch, k, m) array of them all: batch times b's size, where torch, folding
    the batch into rows, holds one.
    """
    out = None
    for i in xp.ndindex(a.shape[:-2]):
        product = xp.matmul(xp.swapaxes(a[i], -1, -2), g[i])
        if out is None:
            out = product
        else:
            out += product
    return xp.matmul(xp.swapaxes(a, -1, -2), g) if out is None else out  # (an empty batch)


def _matmul_shapes(a, b):
    a_shape, b_shape = getattr(a, "shape", ()), getattr(b, "shape", ())
    return (
        f"matmul: shapes {a_shape} and {b_shape} do not align: the last axis of the first "
        f"operand must equal the {'second-to-last' if len(b_shape) > 1 else 'only'} axis of "
        "the second (and neither may be a scalar)"
    )


MATMUL = defop(
    "matmul",
    xp.matmul,
    _matmul_vjp_a,
    _matmul_vjp_b,
    needs=("1", "0"),
    jvps=(lambda ns, t, ans, a, b: ns.matmul(t, b), lambda ns, t, ans, a, b: ns.matmul(a, t)),
)
SHAPE_RULES["matmul"] = _matmul_shapes
matmul = make_binary(
    MATMUL,
    doc="""Matrix product with NumPy's rules (1-D operands, broadcast batch axes); also ``a @ b``.

    >>> import remat as rm
    >>> rm.matmul(rm.ones((2, 3)), rm.arange(3.0))
    tensor([3., 3.])
    """,
)


def _parse_einsum(subscripts, count):
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise NotImplementedError(f"einsum {subscripts!r}: ellipsis ('...') is not supported yet")
    inputs, _, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != count:
        raise ShapeError(f"einsum {subscripts!r}: {len(terms)} terms but {count} operands")
    if "->" not in spec:  # implicit mode: letters seen once, in alphabetical order
        letters = "".join(terms)
        output = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return terms, output


def _einsum_vjp(i, ns, g, ans, *operands, subscripts, shapes):
    terms, output = _parse_einsum(subscripts, len(operands))
    others = [t for j, t in enumerate(terms) if j != i]
    present = set(output).union(*others)
    target = "".join(c for c in terms[i] if c in present)
    spec = ",".join([output, *others]) + "->" + target
    grad = ns.einsum(spec, g, *(op for j, op in enumerate(operands) if j != i))
    # Back to operand i's axes: a letter summed within operand i alone comes back
    # as size 1, and so does one that operand i broadcast from size 1 (the tape
    # sums those); a size-1 axis of the gradient that operand i has in full is
    # broadcast out again.
    sizes = dict(zip(target, grad.shape))
    kept = tuple(sizes.get(c, 1) for c in terms[i])
    if kept != grad.shape:
        grad = ns.reshape(grad, kept)
    full = tuple(n if k == 1 else k for k, n in zip(kept, shapes[i]))
    if full != kept:
        grad = ns.broadcast_to(grad, full)
    return grad


def _einsum_jvp(i, ns, t, ans, *operands, subscripts, shapes):
    # einsum is linear in each operand: the same product with operand i's tangent
    return ns.einsum(subscripts, *(t if j == i else op for j, op in enumerate(operands)))


def _einsum(*operands, subscripts):
    return backend.einsum(subscripts, *operands)


EINSUM = defop(
    "einsum",
    _einsum,
    Variadic(_einsum_vjp),
    needs=lambda n: tuple(tuple(j for j in range(n) if j != i) for i in range(n)),
    jvps=Variadic(_einsum_jvp),
)


def einsum(subscripts: str, *operands: TensorLike) -> Tensor:
    """Einstein summation, as numpy.einsum (explicit or implicit output; ``...`` for
    leading axes, broadcast).

    >>> import remat as rm
    >>> rm.einsum("ij,j->i", rm.eye(2), rm.tensor([3.0, 4.0]))
    tensor([3., 4.])
    >>> rm.einsum("...ij,...j->...i", rm.ones((5, 2, 3)), rm.ones(3)).shape
    (5, 2)
    """
    tensors = [as_tensor(o) for o in operands]
    subscripts = expand_ellipsis(subscripts, [t.ndim for t in tensors])  # issue 27
    terms, _ = _parse_einsum(subscripts, len(tensors))
    for term, t in zip(terms, tensors):
        if len(set(term)) != len(term) and t.requires_grad:
            raise NotImplementedError(
                f"einsum {subscripts!r}: a repeated index within one operand ({term!r}, a trace "
                "or diagonal) is not differentiable yet"
            )
        if len(term) != t.ndim:
            raise ShapeError(
                f"einsum {subscripts!r}: term {term!r} has {len(term)} indices but its operand "
                f"has shape {t.shape}"
            )
    vjp_kw = {"subscripts": subscripts, "shapes": tuple(t.shape for t in tensors)}
    return apply(EINSUM, tensors, {"subscripts": subscripts}, vjp_kw)
