"""The tape: operations recorded in execution order, and the reverse sweep.

Every op that sees an input requiring a gradient leaves a :class:`Record`: the
op, a sequence number (its place on the tape), the arrays its VJP will need,
and links to where its inputs came from (``parents``: the record that made an
input, or the :class:`Leaf` of a leaf tensor).  Nothing else is kept: an op whose VJP does
not need an input does not keep that input alive.

Backward walks the tape in reverse: starting from the output, it always takes
the *latest* record whose cotangent is known (a heap ordered by sequence
number), applies the op's VJP and adds the results into its parents'
cotangents.  By the time a record is taken, every later op that used its
output has already been reversed, so its cotangent is complete.  Records that
do not lead to the output are never visited, and the walk is a loop, not a
recursion, so a chain of any length backpropagates.

Each VJP is written once against a small namespace ``ns``: in an ordinary
backward ``ns`` is the array module and the VJP runs on raw arrays (nothing is
recorded, so a backward costs little more than hand-written NumPy); when the
backward itself is to be differentiated (``rm.grad`` of ``rm.grad``) ``ns`` is
remat's own op namespace, the arguments are Tensors, and the VJP is recorded
like any other computation.

Tapes: ``with rm.Tape() as tape:`` lists every record made inside it, so that
``print(tape)`` shows the computation.  Outside any ``with``, records go to the
default tape, which keeps no list: a record lives exactly as long as a tensor
that can still reach it, so computations never differentiated do not pile up.
"""

from __future__ import annotations

import heapq
import weakref
from itertools import count

from . import backend

_sequence = count()


def next_sequence() -> int:
    """Take a sequence number: every record made after this call has a larger one."""
    return next(_sequence)


class _State:
    """Global recording switches: is recording on, and which tape is open."""

    __slots__ = ("grad_enabled", "tape")

    def __init__(self):
        self.grad_enabled = True
        self.tape = None


STATE = _State()


class Record:
    """One op on the tape, holding what its VJP needs and nothing more."""

    __slots__ = ("op", "seq", "parents", "args", "ans", "kwargs", "shape", "ct")

    def __init__(self, op, parents, args, ans, kwargs, shape):
        self.op = op
        self.seq = next(_sequence)
        self.parents = parents  # per input: None, a Record, or a Leaf
        self.args = args  # per input: the saved array / constant, or None
        self.ans = ans  # the output array if the VJP needs it, else None
        self.kwargs = kwargs
        self.shape = shape
        self.ct = None  # the cotangent, filled in during backward
        tape = STATE.tape
        if tape is not None:
            tape.records.append(self)

    @property
    def freed(self) -> bool:
        return self.parents is None

    def saved_bytes(self) -> int:
        if self.parents is None:
            return 0
        return sum(backend.nbytes(a) for a in self.args) + backend.nbytes(self.ans)

    def release(self) -> None:
        self.parents = self.args = self.ans = None

    def __repr__(self):
        return f"<Record #{self.seq} {self.op.name} {self.shape}>"


class Leaf:
    """Where a leaf tensor's gradient goes: the tensor (held weakly) and its shape.

    A leaf tensor's ``node`` is its Leaf.  The link back is weak, so a leaf
    and its node form no reference cycle: dropping the tensor frees it at once.
    """

    __slots__ = ("tensor", "shape")

    def __init__(self, tensor):
        self.tensor = weakref.ref(tensor)
        self.shape = tensor.data.shape

    def __repr__(self):
        return f"<Leaf {self.shape}>"


class no_grad:
    """Context manager inside which no op is recorded (and nothing is kept for backward)."""

    def __enter__(self):
        self._was = STATE.grad_enabled
        STATE.grad_enabled = False
        return self

    def __exit__(self, *exc):
        STATE.grad_enabled = self._was
        return False


class enable_grad(no_grad):
    """Context manager that turns recording back on (used inside no_grad)."""

    def __enter__(self):
        self._was = STATE.grad_enabled
        STATE.grad_enabled = True
        return self


class Tape:
    """A recording context: ``with rm.Tape() as tape:`` lists what happens inside.

    With ``snapshots`` or ``schedule`` it also carries a snapshot budget for
    :meth:`loop` (see :mod:`remat.loop`): ``Tape(snapshots=s)`` reverses loops
    with the binomial revolve schedule keeping at most ``s`` states.  The
    budget is for revolve, periodic and online; store_all and sqrt size their
    memory themselves and do not use it.  With
    ``trace=True`` each loop records the bytes it holds after every action
    (for :func:`remat.plot.memory_timeline`).  ``snapshot_device="cpu"``
    keeps snapshots in host memory while the loop runs on the GPU.

    A tape keeps every record made on it, and a loop's record keeps its
    snapshots until the loop is reversed: evaluate without gradients under
    ``rm.no_grad()``, or take a new Tape for each iteration of a training loop.
    """

    def __init__(self, snapshots=None, schedule=None, trace=False, snapshot_device=None):
        from .loop import resolve_policy  # the loop layer sits above the tape

        self.records = []
        self.policy = resolve_policy(snapshots, schedule)  # what its loops are reversed with
        self.loops = []  # the LoopStats of each loop run on this tape
        self.trace = trace
        self.snapshot_device = snapshot_device and backend.check_device(snapshot_device)
        self._outer = []

    def __enter__(self):
        self._outer.append(STATE.tape)
        STATE.tape = self
        return self

    def __exit__(self, *exc):
        STATE.tape = self._outer.pop()
        return False

    def loop(self, step, state, steps=None, until=None, max_steps=None):
        """Run ``state = step(state)`` under this tape's snapshot budget.

        See :func:`remat.loop.run_loop` for the full contract.
        """
        from .loop import run_loop

        return run_loop(self, step, state, steps=steps, until=until, max_steps=max_steps)

    @property
    def stats(self):
        """Counts of the loops run on this tape (see :class:`remat.loop.LoopStats`)."""
        from .loop import LoopStats

        return LoopStats.combine(self.loops)

    def saved_bytes(self) -> int:
        """Bytes that the records on this tape hold for backward right now."""
        return sum(record.saved_bytes() for record in self.records)

    def __len__(self):
        return len(self.records)

    def __str__(self):
        lines = [f"Tape: {len(self.records)} records, {self.saved_bytes()} bytes saved"]
        for record in self.records:
            saved = "freed" if record.freed else f"{record.saved_bytes()} B saved"
            shape = "x".join(map(str, record.shape)) or "scalar"
            lines.append(f"  #{record.seq:<6} {record.op.name:<14} {shape:<14} {saved}")
        return "\n".join(lines)

    def __repr__(self):
        return f"<Tape {len(self.records)} records, policy={self.policy!r}>"


# --- the reverse sweep ------------------------------------------------------


class BackwardError(RuntimeError):
    """Backward cannot run: a graph already freed, or a gradient of bad shape."""


def _freed_error(record):
    return BackwardError(
        f"backward through `{record.op.name}` (output shape {record.shape}) a second time: "
        "its saved arrays were freed by the first backward. Pass retain_graph=True to the "
        "first backward() if you need to backpropagate through the same graph twice."
    )


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
    ``grad`` itself and may add into it.
    """

    def __init__(self, ns, retain_graph=False, create_graph=False):
        self.ns = ns
        self.create_graph = create_graph
        self.retain_graph = retain_graph or create_graph
        self.heap = []
        self.leaf_grads = {}
        self.floor = 0  # records below this sequence number belong to an outer sweep

    def add(self, node, g):
        """Add cotangent ``g`` to ``node`` (a Record, or a Leaf)."""
        if type(node) is Record:
            ct = node.ct
            if ct is None:
                node.ct = g
                heapq.heappush(self.heap, (-node.seq, node))
            else:
                node.ct = ct + g
        else:
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
        while heap:
            record = pop(heap)[1]
            g = record.ct
            record.ct = None
            parents = record.parents
            if parents is None:
                raise _freed_error(record)
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
                if type(node) is Record and node.seq >= floor:  # self.add, inlined
                    ct = node.ct
                    if ct is None:
                        node.ct = gi
                        push(heap, (-node.seq, node))
                    else:
                        node.ct = ct + gi
                else:
                    self.add(node, gi)
            g = gi = None  # let this cotangent go before the next record is reversed
            if not retain:
                record.parents = record.args = record.ans = None


def _as_tensors(record):
    """The record's saved values as Tensors linked to their nodes (for create_graph)."""
    from .tensor import Tensor

    args = tuple(
        a if node is None or a is None else Tensor._from_record(a, node)
        for a, node in zip(record.args, record.parents)
    )
    ans = None if record.ans is None else Tensor._from_record(record.ans, record)
    return args, ans


class TargetSweep(Sweep):
    """The sweep of one ``rm.grad`` call: it collects the cotangents of its
    ``targets`` (the arguments being differentiated) and stops there.

    Records older than ``floor`` (values the function closed over) are not
    reversed: what reaches them was not asked for, and their saved arrays stay
    for whoever backpropagates through them later.  Targets are leaves or
    records older than ``floor``, so the inlined path of ``run`` never takes
    them and they always come through ``add``.
    """

    def __init__(self, ns, targets, floor, create_graph=False):
        super().__init__(ns, create_graph=create_graph)
        self.floor = floor
        self.targets = {id(node): k for k, node in enumerate(targets)}
        self.results = [None] * len(targets)

    def add(self, node, g):
        k = self.targets.get(id(node))
        if k is not None:
            self.results[k] = g if self.results[k] is None else self.results[k] + g
        elif type(node) is Record and node.seq >= self.floor:
            super().add(node, g)


def backward_to(root, seed, targets, floor, create_graph=False):
    """The cotangents of ``targets`` (nodes) from ``root`` seeded with ``seed``.

    Only records made at or after ``floor`` are reversed (see TargetSweep).
    """
    if create_graph:
        from .ops import TENSOR_NAMESPACE as ns
    else:
        ns = backend.ARRAY_NAMESPACE
    sweep = TargetSweep(ns, targets, floor, create_graph=create_graph)
    if root.node is not None:
        sweep.add(root.node, seed)
    sweep.run()
    return sweep.results


def backward(roots, cotangents, retain_graph=False):
    """Run a reverse sweep from ``roots`` seeded with ``cotangents``.

    Returns ``leaf_grads``: id(leaf) -> [leaf, gradient, owned] for every leaf reached.
    """
    sweep = Sweep(backend.ARRAY_NAMESPACE, retain_graph=retain_graph)
    for root, ct in zip(roots, cotangents):
        if root.node is not None:
            sweep.add(root.node, ct)
    sweep.run()
    return sweep.leaf_grads
