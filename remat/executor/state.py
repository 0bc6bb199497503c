"""What a chain carries: states as pytrees of arrays, their specs, and the chain's
outputs on the outer tape (one record for the chain, one `loop_output` record a leaf)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import backend
from ..ops.core import Op
from ..pytree import flatten
from ..tape import GRAD_ENABLED, OPEN_TAPE, Record, check_step_value
from ..tensor import Tensor, refuse_complex
from .errors import StepOutputError


def is_value(v: object) -> bool:
    """A pytree leaf the executor carries: a Tensor or an array (the rest is static)."""
    return isinstance(v, Tensor) or backend.is_array(v)


@dataclass(frozen=True)
class Spec:
    """What a state looks like: its tree, and each leaf's shape and dtype."""

    tree: object
    shapes: tuple
    dtypes: tuple

    @classmethod
    def of(cls, tree, leaves):
        return cls(tree, tuple(a.shape for a in leaves), tuple(a.dtype for a in leaves))

    def fits(self, tree: object, leaves: tuple | list) -> bool:
        """Whether ``tree`` and ``leaves`` have this spec (no Spec made: once a step)."""
        shapes = self.shapes
        if len(leaves) != len(shapes) or tree != self.tree:
            return False
        for a, shape, dtype in zip(leaves, shapes, self.dtypes):
            if a.shape != shape or a.dtype != dtype:
                return False
        return True

    def differs(self, other: Spec) -> str | None:
        """How ``other`` differs from this spec, in words, or None."""
        if other.tree != self.tree:
            return f"structure {other.tree} instead of {self.tree}"
        for k, (s, d, s2, d2) in enumerate(
            zip(self.shapes, self.dtypes, other.shapes, other.dtypes)
        ):
            if s != s2 or d != d2:
                return f"leaf {k} of shape {s2} dtype {d2} instead of shape {s} dtype {d}"
        return None


def leaves_of(tree, where, tensors_only=False, copy_arrays=False):
    """(leaf arrays, their nodes or None, TreeDef) of a state; refuses escaped values,
    and with ``tensors_only`` arrays (what a step returns must be Tensors: an array
    there would silently cut the gradient)."""
    values, treedef = flatten(tree, is_value)
    arrays, nodes = arrays_of(values, where, tensors_only, copy_arrays)
    return arrays, nodes, treedef


def arrays_of(values, where, tensors_only=False, copy_arrays=False):
    """leaves_of for the flattened ``values``: (their arrays, their nodes or None)."""
    arrays, nodes = [], []
    for k, v in enumerate(values):
        if tensors_only and not isinstance(v, Tensor):
            raise StepOutputError(
                f"{where}: leaf {k} is a {type(v).__name__}, not a Tensor; what a step (or a "
                "checkpointed function) returns must be Tensors, since an array would cut the "
                "gradient. Wrap a constant with rm.tensor(...)"
            )
        if isinstance(v, Tensor):
            node = v.node
            if node is not None and not node:
                if GRAD_ENABLED.get():
                    check_step_value(where, node)
                node = None
            arrays.append(v._data)
            nodes.append(node)
        else:  # the caller's array: copied when kept, so later changes cannot reach it
            arrays.append(backend.copy(v) if copy_arrays else v)
            nodes.append(None)
    return tuple(arrays), tuple(nodes)


class StateCotangent:
    """Cotangents of a chain's outputs, one slot per output leaf (None = zero)."""

    __slots__ = ("parts", "shape")

    def __init__(self, parts, shape):
        self.parts = parts
        self.shape = shape

    def __add__(self, other):
        parts = [
            b if a is None else a if b is None else a + b for a, b in zip(self.parts, other.parts)
        ]
        return StateCotangent(parts, self.shape)


def _select_vjp(ns, g, ans, _, index, width, shape):
    parts = [None] * width
    parts[index] = g
    return StateCotangent(parts, shape)


# Outputs: one `loop_output` record per output leaf, each pointing at the
# chain's record, so a pytree of outputs fits a tape of single-output records.
SELECT = Op(
    "loop_output",
    None,
    (_select_vjp,),
    ("",),
    jvps=(lambda ns, t, ans, _, index, width, shape: t[index],),  # t: every output's tangent
)


def refuse_complex_leaves(arrays, what):
    """Refuse a complex leaf in what a checkpointed chain or function carries (``what``
    names leaf k with ``{}``): it would be carried as a constant, cutting the gradient
    and tangent through it, where a recorded computation refuses the complex gradient."""
    for k, a in enumerate(arrays):
        if a.dtype.kind == "c":  # (named only then: this runs on every checkpointed call)
            refuse_complex(a, what.format(k), allowed=CARRY_REAL)


CARRY_REAL = (
    "checkpointed loops, chains, scans and functions carry real values only (remat "
    "differentiates real functions): carry the real and imaginary parts as two real leaves"
)


def outputs_of(op, payload, parents, arrays, shape):
    """Tensors for ``arrays``, the outputs of one multi-output record of ``op``
    (a chain, a checkpoint) whose args are ``payload`` and inputs ``parents``; refused
    by a recorder open here that cannot hold it (a DTR tape: Recorder.admit)."""
    tape = OPEN_TAPE.get()
    if tape is not None:
        tape.admit(op)
    record = Record(op, parents, payload, None, None, shape)
    width = len(arrays)
    return [
        Tensor._from_record(
            a, Record(SELECT, (record,), (None,), None, _select(k, width, shape), a.shape)
        )
        if backend.is_floating(a.dtype)
        else Tensor._wrap(a)  # integer parts (counters) carry no gradient
        for k, a in enumerate(arrays)
    ]


def _select(k, width, shape):
    return {"index": k, "width": width, "shape": shape}


def relative_difference(arrays: Sequence[Any], exact: Sequence[Any]) -> float:
    """The largest ``|a - b|`` over the leaves, each relative to ``max |b|`` of its leaf
    (inf where a NaN or an inf differs: see backend.relative_difference)."""
    return max(map(backend.relative_difference, arrays, exact), default=0.0)
