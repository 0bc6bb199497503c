"""The tape: records of the ops applied, and the reverse sweep that walks them back.

Every op that sees an input requiring a gradient leaves a :class:`Record`: the
op, a sequence number (its place on the tape), the arrays its VJP will read,
and the node each input came from (``parents``: the Record that made it, the
:class:`Leaf` of a leaf tensor, or None for a constant).  Nothing else is
kept: an op whose VJP does not read an input does not keep that input alive.

The sweep walks the tape backwards.  Starting from the output, it always takes
the *latest* record whose cotangent is known (a heap ordered by sequence
number), applies the op's VJP rules and adds the results into its parents'
cotangents.  When a record is taken, every later op that used its output has
been reversed already, so its cotangent is complete.  Records that do not lead
to the output are never visited, and the walk is a loop, not a recursion, so a
chain of any length backpropagates.

Each VJP rule is written once against a namespace ``ns``: in an ordinary
backward ``ns`` is the array module and the rule runs on raw arrays; when the
backward itself is to be differentiated (``create_graph``) ``ns`` is remat's
op namespace, the saved values become Tensors, and the rule is recorded like
any other computation.

Hooks: where the engine enters the core (all unused by the core itself)
--------------------------------------------------------------------------
* :data:`OPEN_TAPE` -- an open recorder (``remat.Recorder``) lists each record made.
* :data:`on_record` -- ``f(record, inputs, forward_kw, out)`` for each op recorded, with
  what its forward read and returned (enough to run it again); :data:`before_vjp` --
  ``f(record)`` before the sweep reads what a record saved (it may put back what it evicted).
* ``record.checks`` and ``remat.guard`` -- saved arrays the user could have written
  in place are checked before they are read (:meth:`Record.check_saved`).
* ``node.reached(sweep, g)`` -- a node that is neither a user's :class:`Leaf` nor a
  record this sweep reverses says itself what reaching it means.
* ``op.custom_backward(record, g, sweep)`` -- an op that reverses itself;
  :data:`tensor_ops` -- what ``create_graph`` computes with (``remat.ops`` sets it).
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from itertools import count
from typing import Any

from .. import backend, guard
from .errors import changed_error, freed_error

_sequence = count()  # shared by all threads: numbers only ever grow
next_sequence = _sequence.__next__  # a number: every record made after it has a larger one


# Per thread and per context (each asyncio task sees its own values): whether ops
# record, the node an output that needs no gradient gets (None, or the marker of the
# loop step running, see remat.tape.StepValue), and the recorder open here.
GRAD_ENABLED = ContextVar("remat_grad_enabled", default=True)
STEP = ContextVar("remat_step", default=None)
OPEN_TAPE = ContextVar("remat_open_tape", default=None)

on_record: Callable[[Record, Any, Any, Any], None] | None = None  # hook: remat.graph's eviction
before_vjp: Callable[[Record], None] | None = None  # hook: remat.graph puts evicted values back


class Record:
    """One op on the tape, holding what its VJP needs and nothing more.

    ``op`` is the primitive (its ``name``), ``parents`` the node of each input
    (a Record, a Leaf, or None for a constant), ``args`` and ``ans`` what the
    VJP reads (None where it reads nothing), ``shape`` the output's shape.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> y = rm.sin(x)
    >>> y.record.op.name, y.record.shape, y.record.saved_bytes()
    ('sin', (2,), 16)
    """

    __slots__ = tuple("op seq parents args ans kwargs shape ct checks rebound".split())
    rebound: int  # set only when a tensor it made gets a new value (Tensor.data); getattr

    def __init__(self, op: Any, parents: Any, args: Any, ans: Any, kwargs: Any, shape: Any) -> None:
        self.op = op
        self.seq = next(_sequence)
        self.parents = parents  # per input: None, a Record, or a Leaf
        self.args = args  # per input: the saved array / constant, or None
        self.ans = ans  # the output array if the VJP needs it, else None
        self.kwargs, self.shape = kwargs, shape  # what the VJP rules take besides; output's shape
        self.ct = None  # the cotangent, filled in during backward
        self.checks = None  # fingerprints of saved arrays the user could write (remat.guard)
        tape = OPEN_TAPE.get()
        if tape is not None:
            tape.records.append(self)

    @property
    def freed(self) -> bool:
        """Whether backward has passed and released what this record saved."""
        return self.parents is None

    def saved_bytes(self) -> int:
        """The bytes of the arrays this record holds for its VJP."""
        if self.parents is None:
            return 0
        return sum(backend.nbytes(a) for a in self.args) + backend.nbytes(self.ans)

    def release(self) -> None:
        """Drop what the record holds (backward calls it once it has passed)."""
        self.parents = self.args = self.ans = None

    def check_saved(self, cache: dict | None = None, sweep: str = "backward") -> None:
        """Raise if a value this record saved was changed in place since (remat.guard);
        ``sweep`` names what was about to read it (backward, or rm.jvp's forward sweep)."""
        i = guard.changed((*self.args, self.ans), self.checks, self.seq, cache)
        if i is not None:
            raise changed_error(self, i, sweep)

    def __repr__(self):
        return f"<Record #{self.seq} {self.op.name} {self.shape}>"


class Leaf:
    """Where a leaf tensor's gradient goes: the tensor (held weakly) and its shape.

    A leaf tensor's ``node`` is its Leaf.  The link back is weak, so a leaf
    and its node form no reference cycle: dropping the tensor frees it at once.
    """

    __slots__ = ("tensor", "shape", "dtype", "rebound")

    def __init__(self, tensor):
        self.tensor = weakref.ref(tensor)
        self.shape = tensor._data.shape
        self.dtype = tensor._data.dtype
        self.rebound = -1  # sequence number of the latest new value (guard.rebound)

    def __repr__(self):
        return f"<Leaf {self.shape}>"


# --- the reverse sweep ------------------------------------------------------


def unbroadcast(ns, g, shape):
    """Sum a cotangent over the axes that broadcasting added or stretched."""
    extra = g.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        i + extra for i, n in enumerate(shape) if n == 1 and g.shape[i + extra] != 1
    )
    if axes:
        g = ns.sum(g, axis=axes, keepdims=True)
    return ns.reshape(g, shape)


class Sweep:
    """One reverse sweep: a heap of records waiting, and the leaves' gradients.

    ``ns`` is the namespace VJPs compute with (the array module, or remat's
    ops when ``create_graph``).  ``leaf_grads`` maps id(leaf) -> [leaf, grad,
    owned] for each :class:`Leaf` reached; ``owned`` says the sweep made
    ``grad`` itself and may add into it.  ``RECORD`` is the kind of record
    this sweep reverses itself, and ``floor`` the first sequence number it
    reverses (the engine's sweeps of one loop step or one ``rm.grad`` call
    set them).
    """

    RECORD = Record

    def __init__(self, ns, retain_graph=False, create_graph=False):
        self.ns = ns
        self.create_graph = create_graph
        self.retain_graph = retain_graph or create_graph
        self.heap = []
        self.leaf_grads = {}
        self.floor = 0  # records below this sequence number belong to an outer sweep

    def owns(self, node: object) -> bool:
        """Whether this sweep reverses ``node`` itself (else it belongs elsewhere)."""
        return type(node) is Record

    def push(self, record, g):
        """Add ``g`` to the cotangent of a record this sweep reverses."""
        ct = record.ct
        if ct is None:
            record.ct = g
            heapq.heappush(self.heap, (-record.seq, record))
        else:
            record.ct = ct + g

    def add(self, node, g):
        """Add cotangent ``g`` to ``node``: a record to reverse, or a leaf's gradient."""
        if self.owns(node):
            self.push(node, g)
        elif type(node) is Leaf:
            self.collect(node, g)
        else:
            node.reached(self, g)  # the engine's kinds of node say what reaching them means

    def collect(self, node, g):
        """Add ``g`` into the gradient of leaf ``node``."""
        entry = self.leaf_grads.get(id(node))
        if entry is None:
            self.leaf_grads[id(node)] = [node, g, False]
        elif entry[2]:  # a sum this sweep made: add in place, no new array
            entry[1] += g
        else:
            entry[1] = entry[1] + g
            entry[2] = not self.create_graph

    def run(self):
        """Reverse every record reached; on an error, leave no cotangent behind."""
        try:
            self._run()
        except BaseException:
            for _, record in self.heap:
                record.ct = None
            self.heap.clear()
            raise

    def _run(self):
        heap, ns, push, pop = self.heap, self.ns, heapq.heappush, heapq.heappop
        graph, retain, floor = self.create_graph, self.retain_graph, self.floor
        own, oldest, verified, hook = self.RECORD, guard.OLDEST, {}, before_vjp
        # One waiting record is kept out of the heap, in `held`, so that in a chain
        # of ops the heap stays empty (bench_core's chain); each turn takes the
        # latest of `held` and the heap's top, as the heap alone would.
        held = None
        try:
            while heap or held is not None:
                if held is None:
                    record = pop(heap)[1]
                elif heap and heap[0][0] < -held.seq:  # a later record waits in the heap
                    record = heapq.heapreplace(heap, (-held.seq, held))[1]
                    held = None
                else:
                    record, held = held, None
                g = record.ct
                record.ct = None
                parents = record.parents
                if parents is None:
                    raise freed_error(record)
                if hook is not None:
                    hook(record)
                if record.checks is not None or record.seq < oldest[0]:
                    record.check_saved(verified)  # something it saved was handed out: intact?
                op = record.op
                if op.custom_backward is not None:
                    op.custom_backward(record, g, self)
                    continue
                if graph:
                    args, ans = _as_tensors(record)
                else:
                    args, ans = record.args, record.ans
                kw = record.kwargs
                vjps = op.vjps
                i = -1
                for node in parents:
                    i += 1
                    if node is None:
                        continue
                    gi = vjps[i](ns, g, ans, *args, **kw) if kw else vjps[i](ns, g, ans, *args)
                    if gi.shape != node.shape:
                        gi = unbroadcast(ns, gi, node.shape)
                    if type(node) is own and node.seq >= floor:  # self.add, inlined
                        ct = node.ct
                        if ct is None:
                            node.ct = gi
                            if held is None:
                                held = node
                            else:
                                push(heap, (-node.seq, node))
                        else:
                            node.ct = ct + gi
                    else:
                        self.add(node, gi)
                g = gi = None  # let this cotangent go before the next record is reversed
                if not retain:
                    record.parents = record.args = record.ans = None
        except BaseException:
            if held is not None:  # run() clears the heap's
                held.ct = None
            raise


tensor_ops: Any = None
"""Hook: remat.ops' namespace of differentiable ops, set as it is imported (the tape
sits below the ops): what VJP rules compute with when a backward is itself recorded
(``create_graph``); its ``on_tape(array, node)`` makes a saved array a Tensor."""


def _as_tensors(record):
    """The record's saved values as Tensors linked to their nodes (for create_graph)."""
    on_tape = tensor_ops.on_tape
    args = tuple(
        a if node is None or a is None else on_tape(a, node)
        for a, node in zip(record.args, record.parents)
    )
    ans = None if record.ans is None else on_tape(record.ans, record)
    return args, ans
