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
  output no VJP keeps, which user code lets go of once the next op has read it;
  the tape is not told when, so it does not ask);
* an evicted value joins a class with its neighbours out of memory, whose classes
  merge into it (:meth:`Value.join`); a value saved by no record joins when first
  reached, by a neighbour's eviction or a score;
* a value put back (recomputed for good), saved by an op that reads it, or whose
  record was released (:meth:`Value.pin`) takes its cost out of its class, which is
  then *stale*: its members may no longer be connected.  The paper leaves such a
  class whole (splitting is the costly part), and so counts, from then on, values
  no longer connected; in a backward sweep, where values come back all the time,
  the classes grew into one and every value next to it scored the same ``e*``
  (``h_dtr_eq`` then ran out of a third of the MLP's memory in ``python -m
  benchmarks dtr``, which ``h_dtr`` and the exact sum fit in).  So a stale class
  is made again when next read, from the value read on, over the values out of
  memory connected to it: one walk of a component per class left, not one per
  score;
* ``e*`` of a value is then the sum of the distinct classes of its neighbours out
  of memory: a few look-ups.

The sums are the connected components' (``tests/graph/test_dtr_neighbourhood.py``),
but for values that stop being saved in a backward sweep (their readers released):
they are counted once reached, as those saved by no record, and a class made before
misses them until then.  The costs are summed in integer nanoseconds, so that adding
and taking out in any order comes back exactly: a class whose members all went back
or were released costs exactly 0, run after run of a reused tape.
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
        memory, each class once (a class a value left since it was made is made again
        first, from the neighbour on)."""
        total, roots = 0, []
        for u in self._near():
            if type(u) is not Value:
                continue
            if u.counted is None:
                if u.pinned or (u.slots and not u.evicted):
                    continue  # in memory, or out of the graph
                r = u._gather()  # out of memory and not counted yet: saved by no record
            else:
                r = u.cls.root()  # type: ignore[union-attr]
                if r.stale:
                    r = u._gather()
            if r not in roots:
                roots.append(r)
                total += r.cost
        return total / 1e9

    def join(self) -> None:
        """This value left memory: it joins a class with its neighbours out of memory."""
        self._gather()

    def leave(self) -> None:
        """This value is back in memory, or out of the graph (pinned): its cost leaves
        its class, which may no longer be connected: stale, it is made again when
        next read."""
        c = self.counted
        if c is not None:
            r = self.cls.root()  # type: ignore[union-attr]
            r.cost -= c
            r.members -= 1
            r.stale = True
            self.counted = None

    def _gather(self) -> Class:
        """A new class of this value (out of memory) and the values out of memory
        connected to it, merged with the classes it meets that are not stale: a value
        of a stale class is moved into it, one of none counted in it.  Its root."""
        root = self._into(Class())
        todo = [self]
        while todo:
            for w in todo.pop()._near():
                if type(w) is not Value:
                    continue
                if w.counted is not None:
                    r = w.cls.root()  # type: ignore[union-attr]
                    if not r.stale:
                        root = _union(root, r)
                        continue
                elif w.pinned or (w.slots and not w.evicted):
                    continue  # in memory, or out of the graph
                root = w._into(root)
                todo.append(w)
        return root

    def _into(self, root: Class) -> Class:
        """Count this value in the class of ``root`` (out of its stale one); ``root``."""
        c = self.counted
        if c is None:
            c = self.counted = int(self.cost * 1e9)
        else:
            old = self.cls.root()  # type: ignore[union-attr]
            old.cost -= c
            old.members -= 1
        self.cls = root
        root.cost += c
        root.members += 1
        return root

    def _near(self) -> tuple:
        """Its inputs and its readers (None for one collected; an input may be an
        array, or a number): the callers take the Values."""
        return (*self.inputs, *[r() for r in self.users])

    def __repr__(self) -> str:
        state = "evicted" if self.evicted else "resident"
        return f"<Value of {self.op.name} {self.shape}, {self.size} B, {state}>"


class Class:
    """A class of values out of memory (see the module): a union-find node.  A root
    has no ``parent`` (no reference cycle: a tape's classes go with its values, not
    with the cyclic collector) and holds its members' ``cost``, in nanoseconds, and
    how many they are."""

    __slots__ = ("parent", "rank", "cost", "members", "stale")

    def __init__(self) -> None:
        self.parent: Class | None = None
        self.rank = 0
        self.cost = 0
        self.members = 0
        self.stale = False  # a member left: it may no longer be connected

    def root(self) -> Class:
        """The root of this class, the path to it made direct (path compression)."""
        r = self
        while r.parent is not None:
            r = r.parent
        c = self
        while c is not r:
            c.parent, c = r, c.parent
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
