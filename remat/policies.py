"""Selective recomputation policies: which values a checkpointed function keeps.

``rm.checkpoint(f)`` keeps only f's inputs and evaluates all of f again in
backward.  ``rm.checkpoint(f, policy=p)`` (and ``rm.Tape(policy=p)`` for the
steps of its loops, chains and scans) keeps, besides, the outputs of the ops
``p`` chooses during the first run; the recomputation reuses them instead of
evaluating those ops again.  Keep what is costly to compute and cheap to
hold (matrix products), recompute what is cheap to compute and costly to
hold (attention scores, softmax, elementwise ops): Korthikanti et al.'s
selective activation recomputation, JAX's ``jax.checkpoint(policy=...)``.

* :data:`save_nothing` (the default): keep nothing, recompute everything;
* :data:`save_everything`: keep every op's output (nothing is evaluated again;
  as much memory as no checkpointing, or more);
* :func:`save_ops` ``(*op_names)``: keep the outputs of these ops, e.g.
  ``save_ops("matmul", "einsum")`` (JAX's ``dots_saveable``);
* :func:`save_names` ``(*names)``: keep the values named with
  :func:`remat.checkpoint_name`.

Any callable is a policy too.  It is called with **two positional
arguments**, ``policy(op_name, value_name)``, and returns a ``bool`` (True:
keep).  ``op_name`` is the name of the primitive that made the value (a key
of ``rm.OPS``: ``"matmul"``, ``"softmax"``, ...).  It is called once for every
op evaluated in the first run, with ``value_name=None``, and once more for
each ``rm.checkpoint_name(x, name)`` on a value the function made, with
``value_name=name`` and the name of the op that made ``x``; a value is kept
if any call said True.  A policy that raises, or answers anything but a
bool, stops the computation with a :class:`PolicyError`.

Gradients are the same under every policy, bit for bit (the kept values are
exactly what the ops would compute again).  What a policy keeps is held from
the forward until the backward uses it, and counted: in ``print(tape)`` (a
checkpoint's record), and in ``tape.stats.peak_bytes`` (a step's, until the
step is reversed).  ``rm.count_ops()`` shows which ops ran again.

>>> import remat as rm
>>> w = rm.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
>>> def block(x):
...     return rm.tanh(x @ w) @ w
>>> x = rm.tensor([[1.0, 2.0]])
>>> f = rm.checkpoint(block, policy=rm.policies.save_ops("matmul"))
>>> y = f(x).sum()
>>> with rm.count_ops() as counts:
...     y.backward()
>>> counts["matmul"], counts["tanh"]  # backward reused both products, redid tanh
(0, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .ops import OPS
from .selective import PolicyError

__all__ = [
    "Policy",
    "PolicyError",
    "resolve",
    "save_everything",
    "save_names",
    "save_nothing",
    "save_ops",
]


class Policy:
    """A policy: ``policy(op_name, value_name) -> bool``, with a name for messages.

    ``by_name`` says whether it may answer True for a value only once it is
    named (after its op ran); the ones that cannot are cheaper to check.

    >>> import remat as rm
    >>> big = rm.policies.Policy(lambda op, name: op == "matmul", "matmuls")
    >>> big("matmul", None), big("tanh", None), big
    (True, False, matmuls)
    """

    __slots__ = ("decide", "text", "by_name", "key")

    def __init__(
        self,
        decide: Callable[[str, str | None], bool],
        text: str,
        by_name: bool = True,
        key: Any = None,
    ) -> None:
        self.decide = decide
        self.text = text
        self.by_name = by_name
        self.key = text if key is None else key  # equal keys: the same decisions

    def __eq__(self, other):
        return isinstance(other, Policy) and self.key == other.key

    def __hash__(self):  # a Tape(memory=)'s plan is cached by its policy
        return hash(self.key)

    def __call__(self, op_name: str, value_name: str | None) -> bool:
        return self.decide(op_name, value_name)

    def __repr__(self):
        return self.text


save_nothing = Policy(lambda op_name, value_name: False, "save_nothing", by_name=False)
"""Keep nothing: the recomputation evaluates everything again (the default)."""

save_everything = Policy(lambda op_name, value_name: True, "save_everything", by_name=False)
"""Keep every op's output: the recomputation evaluates no op again."""


def save_ops(*op_names: str) -> Policy:
    """Keep the outputs of these ops (names from ``rm.OPS``): ``save_ops("matmul", "einsum")``.

    >>> import remat as rm
    >>> keep = rm.policies.save_ops("matmul", "einsum")
    >>> keep("matmul", None), keep("tanh", None)
    (True, False)
    """
    names = _strings("save_ops", op_names)
    unknown = [name for name in names if name not in OPS]
    if unknown:
        raise ValueError(
            f"save_ops: unknown op {', '.join(map(repr, unknown))}; the ops are "
            f"{', '.join(sorted(OPS))}"
        )
    chosen = frozenset(names)
    return Policy(
        lambda op_name, value_name: op_name in chosen,
        f"save_ops({', '.join(map(repr, names))})",
        by_name=False,
    )


def save_names(*names: str) -> Policy:
    """Keep the values named with ``rm.checkpoint_name(x, name)`` for one of ``names``.

    >>> import remat as rm
    >>> keep = rm.policies.save_names("q", "k")
    >>> keep("matmul", "q"), keep("matmul", None)
    (True, False)
    """
    chosen = frozenset(_strings("save_names", names))
    return Policy(
        lambda op_name, value_name: value_name in chosen,
        f"save_names({', '.join(map(repr, names))})",
    )


def _strings(where, names):
    if not names:
        raise ValueError(f"{where}: give at least one name")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{where}: names must be str, got {name!r}")
    return names


def resolve(policy: Policy | Callable[[str, str | None], bool] | None, where: str) -> Policy | None:
    """The Policy that ``policy=`` asks for, or None for save_nothing (nothing to keep).

    >>> import remat as rm
    >>> rm.policies.resolve(None, "Tape"), rm.policies.resolve(rm.policies.save_nothing, "Tape")
    (None, None)
    >>> def only_exp(op_name, value_name):
    ...     return op_name == "exp"
    >>> rm.policies.resolve(only_exp, "Tape")
    only_exp
    """
    if policy is None or policy is save_nothing:
        return None
    if isinstance(policy, Policy):
        return policy
    if callable(policy):
        return Policy(policy, getattr(policy, "__name__", repr(policy)), key=(policy,))
    named = isinstance(policy, str) and policy in ("save_everything", "save_nothing")
    hint = f" (rm.policies.{policy})" if named else ""
    raise TypeError(
        f"{where}: policy must be None, one of rm.policies.save_nothing, save_everything, "
        "save_ops(*op_names), save_names(*names), or a callable policy(op_name, value_name) "
        f"-> bool; got {policy!r}{hint}"
    )
