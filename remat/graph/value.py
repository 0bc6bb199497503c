"""The output of one record of a DTR tape (:class:`Value`): how to make it again, where
it is saved, and what the heuristics read of it (``cost``, ``size``, ``last``,
:meth:`Value.evicted_neighbourhood_cost`).

The evicted neighbourhood.  Recomputing a value out of memory recomputes, first,
its inputs out of memory, theirs, and so on; and an evicted value's readers out of
memory need it back.  So evicting a value next to values out of memory makes their
recomputation dearer by its own, and DTR's ``h_dtr_eq`` adds to a value's cost that
of its *evicted neighbourhood* ``e*``: the values out of memory connected to it
through values out of memory (inputs and readers).  Walking that neighbourhood at
every score is a search per candidate, so, as Kirisame et al. (*Dynamic Tensor
Rematerialization*, ICLR 2021) do for their ``h_DTR^eq``, the values out of memory
are kept in equivalence classes (:class:`Class`, a union-find with the cost of its
members):

* out of memory, for the tape, is evicted, or saved by no record (no slot: an
  output no VJP keeps, which user code lets go of as soon as the next op read it;
  the tape is not told when, so it does not ask);
* an evicted value joins its class (one of its own the first time) and merges it
  with the classes of its neighbours out of memory (:meth:`Value.join`); a value
  saved by no record joins when first reached, by a neighbour's eviction or a
  score;
* a value put back (recomputed for good), or saved by an op that reads it, takes
  its cost out of its class, and the class is *not* split (splitting is the costly
  part): its members stay together, so after a rematerialization ``e*`` may count
  values no longer connected;
* a value whose record was released (:meth:`Value.pin`) takes its cost out too;
* ``e*`` of a value is then the sum of the distinct classes of its neighbours out
  of memory: a few look-ups, not a search.

Until something is rematerialized the classes are the connected components exactly
(``tests/graph/test_dtr_neighbourhood.py``).  The costs are summed in integer
nanoseconds, so that adding and taking out in any order comes back exactly: a class
whose members all went back or were released costs exactly 0, run after run of a
reused tape.
"""

from __future__ import annotations

import weakref
from typing import Any

from .. import backend
from ..tape import Record


class Value:
    """The output of one record of a DTR tape: how to make it, and where it is saved.

    ``inputs`` has, per input of the op, the :class:`Value` that made it or
    the array (or number) itself; ``slots`` lists ``(record, i)`` where the
    array is saved (``i = -1``: the record's ``ans``); ``saves`` lists the
    ``(Value, i)`` of the slots of this value's own record.
    """

    __slots__ = (
        "cache", "record", "op", "kwargs", "inputs", "ref", "slots", "saves", "users",
        "cost", "size", "last", "evicted", "print", "shape", "dtype", "checks", "pinned", "consts",
        "index", "cls", "counted", "__weakref__",
    )  # fmt: skip

    def __init__(
        self,
        record: Record,
        kwargs: Any,
        inputs: tuple,
        ref: Any,
        dtype: Any,
        cost: float,
        last: int,
    ) -> None:
        self.cache: Any = None  # while evicted: so that the cache outlives the tape
        self.record = record
        self.op = record.op
        self.kwargs = kwargs
        self.inputs = inputs
        self.ref = ref  # a weak reference to its array
        self.slots: list[tuple[Record, int]] = []
        self.saves: list[tuple[Value | None, int]] = []  # None: this value itself (no cycle)
        self.users: list[weakref.ref[Value]] = []  # the values made from this one
        self.cost = cost
        out = ref()
        # its buffer's bytes (an output freed before it was noted never becomes resident)
        self.size = 0 if out is None else backend.memory_owner(out).nbytes
        self.last = last
        self.evicted = False
        self.print: int | None = None  # the replay fingerprint taken when evicted
        self.shape, self.dtype = record.shape, dtype
        self.checks = None  # guard fingerprints of the constants it reads
        self.pinned = False  # its record was released: it can no longer be remade
        self.consts: tuple = ()  # the arrays it reads that are counted as constants
        self.index = -1  # its op's index among those the tape counted (stats' by_op keys)
        self.cls: Class | None = None  # its class, once it first left memory
        self.counted: int | None = None  # the nanoseconds it adds to its class, while out

    def link(self, cache: Any, held: list) -> None:
        """Enter this new value in ``cache``'s tables: where its record saves each input
        value (and its own output), who reads what, and what is resident; the arrays
        its record saves are added to ``held``, to be counted.  (Eagerly as an op
        records, or for each note when a lazy tape first nears its budget.)"""
        record = self.record
        for i, a in enumerate(record.args):
            u = self.inputs[i]
            if a is not None and type(u) is Value:
                u.slots.append((record, i))
                if u.counted is not None:  # saved now: in memory, for the tape
                    u.leave()
                self.saves.append((u, i))
                held.append(a)
                u.last = self.last
                if not (u.evicted or u.pinned):
                    cache.resident[id(u)] = u
        readers = weakref.ref(self)
        for u in self.inputs:
            if type(u) is Value:
                u.users.append(readers)
        if record.ans is not None:
            self.slots.append((record, -1))
            self.saves.append((None, -1))
            held.append(record.ans)
            cache.resident[id(self)] = self
        cache.values[id(record)] = self

    def pin(self) -> None:
        """Its record was released: it can no longer be remade, and keeps no recipe
        (nor a place in a class of values out of memory)."""
        self.inputs = self.consts = ()
        self.pinned = True
        self.leave()
        self.cls = None

    # --- the evicted neighbourhood (see the module) ---------------------------------
    def evicted_neighbourhood_cost(self) -> float:
        """The seconds of the values out of memory next to this one, transitively (its
        evicted neighbourhood ``e*``): the sum of the classes of its neighbours out of
        memory, each class once.  Exact until a value of those classes was put back;
        from then on it may count values no longer connected (the paper's
        approximation: classes are merged, never split)."""
        total, roots = 0, []
        for u in self._neighbours():
            if u.counted is None:
                if u.pinned or (u.slots and not u.evicted):
                    continue  # in memory, or out of the graph
                u.join()  # out of memory and not counted yet: saved by no record
            r = u.cls.root()  # type: ignore[union-attr]
            if r not in roots:
                roots.append(r)
                total += r.cost
        return total / 1e9

    def join(self) -> None:
        """This value left memory: its cost joins its class, which the classes of its
        neighbours out of memory join too.  A neighbour out of memory not counted yet
        (one saved by no record) is counted here, and its own neighbours joined."""
        root = self._count()
        todo = [self]
        while todo:
            for u in todo.pop()._neighbours():
                if u.counted is not None:
                    root = _union(root, u.cls.root())  # type: ignore[union-attr]
                elif not u.pinned and (u.evicted or not u.slots):
                    root = _union(root, u._count())
                    todo.append(u)

    def leave(self) -> None:
        """This value is back in memory, or out of the graph (pinned): its cost leaves
        its class, which stays whole (it keeps the value, so that a later eviction
        joins it again)."""
        c = self.counted
        if c is not None:
            r = self.cls.root()  # type: ignore[union-attr]
            r.cost -= c
            r.members -= 1
            self.counted = None

    def _count(self) -> Class:
        """Add this value's cost to its class (a new one if it has none); the root."""
        if self.cls is None:
            root = self.cls = Class()
        else:
            root = self.cls.root()
        c = self.counted = int(self.cost * 1e9)
        root.cost += c
        root.members += 1
        return root

    def _neighbours(self) -> list[Value]:
        """Its inputs that are values of the tape, and its readers still alive."""
        near = [u for u in self.inputs if type(u) is Value]
        for r in self.users:
            u = r()
            if u is not None:
                near.append(u)
        return near

    def __repr__(self) -> str:
        state = "evicted" if self.evicted else "resident"
        return f"<Value of {self.op.name} {self.shape}, {self.size} B, {state}>"


class Class:
    """A class of values out of memory (see the module): a union-find node.  A root
    has no ``parent`` (no reference cycle: a tape's classes go with its values, not
    with the cyclic collector) and holds its members' ``cost``, in nanoseconds, and
    how many they are."""

    __slots__ = ("parent", "rank", "cost", "members")

    def __init__(self) -> None:
        self.parent: Class | None = None
        self.rank = 0
        self.cost = 0
        self.members = 0

    def root(self) -> Class:
        """The root of this class, the path to it made direct (path compression)."""
        r = self
        while r.parent is not None:
            r = r.parent
        c = self
        while c is not r:
            c.parent, c = r, c.parent  # type: ignore[assignment]
        return r


def _union(a: Class, b: Class) -> Class:
    """Merge the classes of roots ``a`` and ``b`` (by rank); the root of the union."""
    if a is b:
        return a
    if a.rank < b.rank:
        a, b = b, a
    b.parent = a
    if a.rank == b.rank:
        a.rank += 1
    a.cost += b.cost
    a.members += b.members
    b.cost = b.members = 0
    return a
