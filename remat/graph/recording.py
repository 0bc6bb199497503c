"""What one run of a planned tape records (:class:`Run`), to be planned (:mod:`.joint`).

A :class:`Run` notes, per op recorded (numbered in the order recorded): its
signature (the op, its output's shape and dtype, where each input came from: an
earlier op of this run, an array (shape, dtype), a number (its type); its
keywords), its measured time (from the end of the tape's work for the op before
to the end of its own: the op, the Python code before it, the recording), the
bytes of its output's buffer (0 for a view of an earlier op's buffer, whose owner
the view's readers then also hold, and for a view of a leaf's or a constant's:
not counted by the plan), the ops whose output its record saves, the
constants it read (counted by DTR from then on), and the ops its VJP sends
cotangents to (``grads``: those it read, and those whose tensor user code gave a
new array, ``t.data = a``, before the op read it: the op read a constant, which
the record differentiates through to them; the sweep reaches them so, and
:meth:`Run.start_sweep` counts them); then, in the reverse sweep, the
order in which the records are reversed and each VJP's time (its stage's: the
hook before it and the VJP, less what the hook spent recomputing).  An op's time
excludes what DTR spent evicting while it recorded; what evicting and recomputing
cost beyond the ops they ran, per op recomputed, is the run's ``overhead``; its time
outside all of those (from the forward's last op to the sweep's first hook: user
code, the sweep's set-up) is its ``outside``; all of it is its ``total``.

An op's time in the forward is not what recomputing it costs: it carries the Python
code before it, the core's work to record it and the tape's to note it, none of
which a recomputation runs (it calls the op's forward alone).  So a run also notes
the op's own time where it was recomputed (``raw``, as DTR times it), and prices a
recomputation (:meth:`Run.price`) at that, or, for an op not recomputed in the run,
at its forward time less ``gap``: the median, over the ops recomputed, of their
forward time less their own.  (Measured, 2026-12-02: the forward time of the ops a
plan recomputes was 2.4x their own on the U-Net, 5x on the adaptive ODE; priced at
it, predictions ran high by about the difference.)
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import backend
from .value import Value


def _key(value: Any) -> Any:
    """What a signature keeps of an input or keyword: shape and dtype of an array, the
    type of a number, the value of anything else small (an axis, a flag)."""
    if backend.is_array(value):
        return ("array", value.shape, value.dtype)
    if backend.is_number(value):
        return ("number", type(value).__name__)
    try:
        hash(value)
    except TypeError:
        return ("object", type(value).__name__)
    return value


class Run:
    """What one run records (see the module): the forward nodes, then the sweep."""

    def __init__(self) -> None:
        self.values: list[Value] = []  # node k -> its Value
        self.node: dict[int, int] = {}  # id(Value) -> node
        self.signatures: list[tuple] = []
        self.parents: list[tuple[int, ...]] = []  # node k -> the nodes its op read
        self.grads: list[tuple[int, ...]] = []  # node k -> those its VJP sends cotangents to
        self.by_record: dict[int, int] = {}  # id(Record) -> node
        self.cost: list[float] = []
        self.bytes: list[int] = []  # node k -> its buffer's bytes (0: a view, or not ours)
        self.saved: set[int] = set()  # nodes some record saves
        self.reads: list[tuple[int, ...]] = []  # node k -> the nodes its record saves
        self.base: dict[int, int] = {}  # a node whose output is a view -> the node owning it
        self.owners: dict[int, tuple[Any, int]] = {}  # id(buffer) -> (weak ref, first node)
        self.fixed: dict[int, int] = {}  # id(buffer) -> bytes counted from its reader on
        self.order: list[int] = []  # the nodes reversed, in the sweep's order
        self.vjp: dict[int, float] = {}
        self.raw: dict[int, float] = {}  # node -> its op's own time, where recomputed
        self.gap = 0.0  # an op's forward time less its own (the median where both are known)
        self.overhead = 0.0  # seconds of the tape's work per op recomputed (evicting too)
        self.outside = 0.0  # seconds of the run outside its ops, VJPs, evicting, recomputing
        self.total = 0.0  # seconds of the whole run, forward and backward
        self.reachable = -1  # nodes the sweep will reverse (-1: not started)
        self.ended = False
        self.finished = False  # its sweep reversed every node it reaches, and nothing else

    def add(self, v: Value, out: Any, leaves: dict, owner: Any) -> tuple:
        """Note the new value ``v`` (op ``len(values)``), whose output is ``out``; its signature."""
        k = len(self.values)
        sources: list[Any] = []
        parents = []
        for u in v.inputs:
            if type(u) is Value:
                j = self.node.get(id(u))
                if j is None:  # a value of an earlier run: a constant to this one
                    self.fixed[id(u)] = u.size
                    sources.append(("earlier", u.shape, u.dtype))
                else:
                    parents.append(j)
                    sources.append(("node", j))
            else:
                sources.append(_key(u))
        for a in v.consts:
            o = owner(a)
            self.fixed[id(o)] = o.nbytes
        kwargs = v.kwargs
        keywords = tuple(sorted((name, _key(x)) for name, x in kwargs.items())) if kwargs else ()
        signature = (v.op.name, v.shape, v.dtype, tuple(sources), keywords)
        self.values.append(v)
        self.node[id(v)] = k
        self.signatures.append(signature)
        self.parents.append(tuple(parents) if len(parents) < 2 else tuple(sorted(set(parents))))
        by_record = self.by_record  # the sweep follows the record's parents: those read,
        grads = [j for p in v.record.parents if (j := by_record.get(id(p))) is not None]
        self.grads.append(tuple(grads) if len(grads) < 2 else tuple(sorted(set(grads))))
        by_record[id(v.record)] = k  # and those rebound (t.data = a) before it read them
        self.cost.append(v.cost)  # until the tape's own time for it is known
        o = owner(out)
        first = self.owners.get(id(o))
        if first is not None and first[0]() is o:  # a view of an earlier node's buffer
            self.base[k] = first[1]
            self.bytes.append(0)
        elif id(o) in leaves or id(o) in self.fixed:  # the user's buffer, or a constant's
            self.bytes.append(0)
        else:
            self.owners[id(o)] = (weakref.ref(o), k)
            self.bytes.append(o.nbytes)
        reads = []
        for u, _ in v.saves:
            j = k if u is None else self.node.get(id(u))
            if j is not None:
                self.saved.add(j)
                reads.append(j)
        self.reads.append(tuple(reads) if len(reads) < 2 else tuple(sorted(set(reads))))
        return signature

    def price(self, k: int) -> float:
        """What recomputing op ``k`` costs, the op alone (see the module)."""
        raw = self.raw.get(k)
        return max(0.0, self.cost[k] - self.gap) if raw is None else raw

    def start_sweep(self, root: int) -> None:
        """The sweep starts at node ``root``: count the nodes it will reverse."""
        seen, todo = {root}, [root]
        while todo:
            for j in self.grads[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        self.reachable = len(seen)
