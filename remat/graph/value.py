"""The output of one record of a DTR tape (:class:`Value`): how to make it again, where
it is saved, and what the heuristics read of it (``cost``, ``size``, ``last``)."""

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
        "index", "__weakref__",
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
        """Its record was released: it can no longer be remade, and keeps no recipe."""
        self.inputs = self.consts = ()
        self.pinned = True

    def evicted_neighbourhood_cost(self, limit: int = 32) -> float:
        """The cost of the values next to this one (inputs and readers, transitively)
        that are not in memory now: evicting this one makes their recomputation dearer."""
        total = 0.0
        seen, frontier = {id(self)}, [self]
        while frontier and len(seen) < limit:
            nxt = []
            for w in frontier:
                users = (r() for r in w.users)
                for u in (*(x for x in w.inputs if type(x) is Value), *users):
                    if u is None or id(u) in seen or u.ref() is not None:
                        continue
                    seen.add(id(u))
                    total += u.cost
                    nxt.append(u)
            frontier = nxt
        return total

    def __repr__(self) -> str:
        state = "evicted" if self.evicted else "resident"
        return f"<Value of {self.op.name} {self.shape}, {self.size} B, {state}>"
