"""Pytrees: nested tuples, lists and dicts whose leaves are arrays or Tensors.

A loop's state, a scan's carry and inputs, a checkpointed function's
arguments and ``rm.grad``'s arguments may all be pytrees, as in JAX.
:func:`flatten` splits one into its leaves (in a fixed order) and a
:class:`TreeDef` that remembers everything else; :func:`unflatten` puts new
leaves back into the same shape::

    >>> is_float = lambda v: isinstance(v, float)
    >>> leaves, tree = flatten({"h": 1.0, "c": [2.0, "tag"]}, is_float)
    >>> leaves
    [2.0, 1.0]
    >>> unflatten(tree, [20.0, 10.0])
    {'h': 10.0, 'c': [20.0, 'tag']}

Dicts are flattened in sorted key order (so equal dicts flatten alike) and
rebuilt in their own order.  Any value that is neither a container nor a
leaf (a string, a number, None) is *static*: it is kept in the TreeDef, and
two trees with different static values have different TreeDefs.  Tuples keep
their type, so namedtuples come back as namedtuples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class TreeDef:
    """The shape of a pytree without its leaves: compare two with ``==``.

    Two dicts with the same keys in another insertion order have equal
    TreeDefs (their leaves flatten alike); a static value that is not equal to
    itself (NaN) compares by identity, and objects of a class that defines no
    ``==`` of its own (a fresh one each call) by their class.

    >>> import remat as rm
    >>> is_float = lambda v: isinstance(v, float)
    >>> _, a = rm.pytree.flatten({"x": 1.0, "y": (2.0, 3.0)}, is_float)
    >>> _, b = rm.pytree.flatten({"y": (5.0, 6.0), "x": 4.0}, is_float)
    >>> a == b, a.leaves, str(a)
    (True, 3, "{'x': Tensor, 'y': (Tensor, Tensor)}")
    """

    kind: object  # "leaf", "static", or the container type (tuple subclass, list, dict)
    children: tuple = ()  # TreeDefs of the children (dict: in sorted key order)
    meta: object = None  # dict: its keys in their own order; static: the value

    def _key(self):
        if self.kind is dict:
            return (dict, self.children, tuple(sorted(self.meta, key=_sort_key)))
        return (self.kind, self.children)

    def __eq__(self, other):
        if not isinstance(other, TreeDef) or self._key() != other._key():
            return False
        if self.kind != "static":
            return True
        a, b = self.meta, other.meta
        if type(a) is type(b) and type(a).__eq__ is object.__eq__:
            return True  # no value to compare: the class is the structure
        return a is b or bool(a == b) or (a != a and b != b)  # NaN is NaN here

    def __hash__(self):
        return hash(self._key())

    @property
    def leaves(self) -> int:
        """How many leaves a tree of this shape has."""
        if self.kind == "leaf":
            return 1
        return sum(child.leaves for child in self.children)

    def __str__(self):
        if self.kind == "leaf":
            return "Tensor"
        if self.kind == "static":
            return repr(self.meta)
        if self.kind is dict:
            keys = sorted(self.meta, key=_sort_key)
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, self.children)) + "}"
        inner = ", ".join(map(str, self.children))
        if self.kind is list:
            return f"[{inner}]"
        name = "" if self.kind is tuple else self.kind.__name__
        return f"{name}({inner}{',' if len(self.children) == 1 and not name else ''})"


def _sort_key(key):
    return (type(key).__name__, repr(key)) if not isinstance(key, str) else ("", key)


def flatten(tree: Any, is_leaf: Callable[[Any], bool]) -> tuple[list[Any], TreeDef]:
    """``(leaves, treedef)``: the leaves of ``tree`` (values for which ``is_leaf`` holds).

    >>> import remat as rm
    >>> is_tensor = lambda v: isinstance(v, rm.Tensor)
    >>> leaves, tree = rm.pytree.flatten([rm.ones(2), {'b': rm.zeros(1), 'a': 'static'}], is_tensor)
    >>> leaves
    [tensor([1., 1.]), tensor([0.])]
    >>> tree.leaves
    2
    """
    leaves: list[Any] = []
    return leaves, _flatten(tree, is_leaf, leaves)


def _flatten(tree, is_leaf, leaves):
    if is_leaf(tree):
        leaves.append(tree)
        return TreeDef("leaf")
    if isinstance(tree, dict):
        keys = sorted(tree, key=_sort_key)
        children = tuple(_flatten(tree[k], is_leaf, leaves) for k in keys)
        return TreeDef(dict, children, tuple(tree))
    if isinstance(tree, (tuple, list)):
        kind = list if isinstance(tree, list) else type(tree)
        return TreeDef(kind, tuple(_flatten(v, is_leaf, leaves) for v in tree))
    return TreeDef("static", (), tree)


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> Any:
    """The tree of shape ``treedef`` holding ``leaves`` (in flatten's order).

    >>> import remat as rm
    >>> leaves, tree = rm.pytree.flatten((1.0, [2.0]), lambda v: isinstance(v, float))
    >>> rm.pytree.unflatten(tree, [x * 10 for x in leaves])
    (10.0, [20.0])
    """
    leaves = list(leaves)
    if len(leaves) != treedef.leaves:
        raise ValueError(f"unflatten: {treedef} has {treedef.leaves} leaves, got {len(leaves)}")
    iterator = iter(leaves)
    return _build(treedef, iterator)


def _build(treedef, leaves):
    kind = treedef.kind
    if kind == "leaf":
        return next(leaves)
    if kind == "static":
        return treedef.meta
    children = [_build(child, leaves) for child in treedef.children]
    if kind is dict:
        by_key = dict(zip(sorted(treedef.meta, key=_sort_key), children))
        return {k: by_key[k] for k in treedef.meta}
    if kind is list:
        return children
    if kind is tuple:
        return tuple(children)
    return kind._make(children) if hasattr(kind, "_make") else kind(children)  # namedtuples
