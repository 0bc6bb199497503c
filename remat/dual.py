"""Eager forward mode: values that carry their tangents (dual numbers).

At the top level (outside ``rm.grad`` and other ``rm.jvp`` calls, on values
that do not require grad; elsewhere it records ``f`` and returns Tensors, see
:func:`remat.functional.jvp`), ``rm.jvp(f, primals, tangents)`` takes the
cheapest forward mode there is: each input becomes a :class:`Dual`, a Tensor
that also holds its tangent, and every op applied to a Dual computes its
output's tangent at once, with the op's tangent rule (``jvps`` in the op
table), beside its value.  Nothing is recorded, so a chain of small ops
costs what its NumPy value and tangent cost plus one wrapper per op
(``python -m benchmarks forward``).

Some computations need the tape after all: a checkpointed loop, chain or scan
and ``rm.checkpoint`` run their steps again with tangents, ``rm.grad`` inside
``f`` (``rm.hvp``) records a backward whose tangent is wanted, and an op may
meet a tensor that is itself recorded (a parameter that requires grad).  All
of them read the Dual's ``node``, the link to the tape that every
differentiable path reads.  That read *switches* the jvp to recording: from
then on ops record as in reverse mode, and each Dual becomes, when it is
first read, a leaf seeded with its tangent (:class:`Seeded`), so that
:func:`remat.functional.forward_sweep` carries the tangents on from there.
Tangents depend only on the values and tangents of what a computation reads,
so where the switch happens does not change them: both paths apply the same
rules to the same arrays in the same order, and agree bit for bit.

A path that reads a Dual's value without its node makes a constant of it
(``rm.tensor(d)``, ``d.detach()``, ``d.numpy()``), exactly as it would of a
recorded tensor: its tangent is zero in both modes.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from . import backend
from .core import apply as _core_apply
from .core.apply import EAGER, evaluated
from .core.tape import GRAD_ENABLED, STEP, Record
from .core.tensor import Tensor
from .tape import StandIn

_get_node = Tensor.__dict__["node"].__get__  # Tensor's own slot, under Dual's property
_set_node = Tensor.__dict__["node"].__set__

# EAGER (remat.core.apply's hook) lists the traces of the rm.jvp calls now running
# eagerly (any thread).  The generic apply looks for Duals only while it is not
# empty, and hands them to dual_apply below; the fast paths find them by their type.


class Trace:
    """One ``rm.jvp`` call's forward mode: eager until something reads a Dual's node.

    ``eager`` is True while ops compute tangents at once, ``open`` until the
    call returns (a Dual that outlives it is a constant).  ``untaped``: the call
    runs inside a loop step or checkpointed function evaluated untaped, whose
    tangents an outer rm.jvp takes from the taped rerun; the values of another
    jvp's Duals are then constants to this one (:func:`seeded_tangent`).
    """

    __slots__ = ("eager", "open", "untaped", "leaves", "inputs")

    def __init__(self) -> None:
        self.eager = True
        self.open = True
        recording = GRAD_ENABLED.get()
        self.untaped = not recording and recording is not False  # UNTAPED (falsy, not False)
        self.leaves: list[Seeded] = []  # what its Duals became, in order
        self.inputs: set[int] = set()  # ids of its inputs that are leaves still (no x += ...)
        EAGER.append(self)

    def switch(self) -> None:
        """From now on, record: ops on this trace's Duals take the taped path."""
        if self.eager:
            self.eager = False
            EAGER.remove(self)

    def close(self) -> None:
        """The call has returned: its Duals are constants from now on.  Each seeded
        leaf points back at this trace, so the list of them would make a reference
        cycle holding every tangent until the cyclic collector ran: let them go, and
        their tangents with them (no sweep of a closed trace reads one)."""
        self.switch()
        self.open = False
        for leaf in self.leaves:
            leaf.tangent = None
        self.leaves.clear()
        self.inputs.clear()

    def leaf_for(self, dual: Dual) -> Seeded | None:
        """The seeded leaf ``dual`` becomes when its node is read (None once closed)."""
        if not self.open:
            return None
        self.switch()
        leaf = Seeded(dual, self)
        self.leaves.append(leaf)
        return leaf

    def seeds(self) -> dict[int, Any]:
        """id(leaf) -> tangent for every Dual that became a leaf: a sweep's table."""
        return {id(leaf): leaf.tangent for leaf in self.leaves}


class Seeded(StandIn):
    """The leaf a Dual becomes: it carries the Dual's tangent for its jvp's sweeps.

    A forward sweep that finds no tangent for a node in its own table takes a
    Seeded leaf's, if the leaf is of the jvp being swept (:data:`SWEEPING`): a
    value first read while the sweep runs (a checkpointed function that reads
    what it closes over only when recomputed) still carries its tangent, and
    one jvp inside another never takes the outer one's tangents for its own.
    """

    __slots__ = ("tangent", "trace")

    def __init__(self, dual: Dual, trace: Trace) -> None:
        super().__init__(dual)
        self.tangent = dual.tangent
        self.trace = trace

    def reached(self, sweep: Any, g: Any) -> None:
        """A sweep collects its gradient as a leaf's."""
        sweep.collect(self, g)


SWEEPING: ContextVar[Trace | None] = ContextVar("remat_sweeping", default=None)
"""The trace whose recorded part is being swept forward now (in this thread)."""


class Dual(Tensor):
    """A Tensor of an eager ``rm.jvp`` that carries its ``tangent`` (a backend array).

    >>> import numpy as np, remat as rm
    >>> rm.jvp(lambda x: print(x) or x * x, (np.array([3.0]),), (np.array([1.0]),))
    dual(array([3.]), tangent=array([1.]))
    (array([9.]), array([6.]))
    """

    __slots__ = ("tangent", "trace")
    tangent: Any
    trace: Trace

    @property
    def node(self) -> Any:
        """Reading the node switches the trace to recording (the module docstring);
        once its jvp has returned, a Dual is a constant (None)."""
        if not self.trace.open:
            return None
        try:
            node = _get_node(self)
        except AttributeError:  # made by an eager op: no node yet
            node = None
        if node is None:
            node = self.trace.leaf_for(self)
            _set_node(self, node)
        return node

    @node.setter
    def node(self, value: Any) -> None:
        _set_node(self, value)

    @property
    def requires_grad(self) -> bool:
        """True while its jvp runs (it carries a tangent), read without switching."""
        return self.trace.open

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        """As on rm.grad's argument, while its jvp runs: True changes nothing (it carries
        its tangent), False makes an input a constant from here on (a zero tangent), and
        is refused on what an op made (not a leaf)."""
        trace = self.trace
        if not trace.open:
            Tensor.requires_grad.fset(self, flag)  # type: ignore[attr-defined]
        elif not flag:
            node = node_of(self)
            if id(self) not in trace.inputs or type(node) is Record:
                made_by = f"`{node.op.name}`" if type(node) is Record else "an op"
                raise ValueError(
                    f"requires_grad can only be changed on a leaf tensor; this one is the "
                    f"output of {made_by} (inside rm.jvp). Use .detach() to make a new leaf."
                )
            trace.inputs.discard(id(self))
            self.tangent = backend.zeros(self.shape, self.tangent.dtype, like=self.tangent)
            _set_node(self, None)  # read again, it becomes a leaf with the zero tangent

    def _update(self, op: Any, other: Any, symbol: str) -> Tensor:
        """``d += x`` and the like: a new value and tangent, eagerly if they stay a Dual's."""
        if self.trace.eager and node_of(self) is None:
            result = op(self, other)
            if (
                type(result) is Dual
                and result.trace is self.trace
                and result.shape == self.shape
                and result.dtype == self.dtype
            ):
                self._data, self.tangent = result._data, result.tangent
                self.trace.inputs.discard(id(self))  # an op's result now, as when recorded
                return self
            # its checks and errors, with the result made (the op is evaluated once)
            return Tensor._update(self, lambda *_: result, other, symbol)
        return Tensor._update(self, op, other, symbol)  # recorded

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        """Refused while its jvp runs, as on a value rm.grad differentiates (the copy,
        a Dual of a copied trace, carried a tangent nobody swept: zero); a constant
        copy once the call has returned."""
        if self.trace.open:
            raise RuntimeError(
                f"copy.deepcopy of a value inside rm.jvp (shape {self.shape}, it carries a "
                "tangent): the copy would be cut from it. Use `x * 1.0` for a copy that "
                "keeps it, or x.detach() (rm.tensor(x)) for a constant one"
            )
        copied = Tensor._wrap(backend.copy(self._data))
        memo[id(self)] = copied
        return copied

    def __repr__(self) -> str:
        value, tangent = (repr(backend.to_host(a)) for a in (self._data, self.tangent))
        return f"dual({value}, tangent={tangent})"


def dual(value: Any, tangent: Any, trace: Trace) -> Dual:
    """A new Dual (its node unset: read, it becomes a seeded leaf)."""
    d = Dual.__new__(Dual)
    d._data = value
    d.grad = None
    d.tangent = tangent
    d.trace = trace
    return d


def tangent_in(tangents: dict[int, Any], node: Any) -> Any:
    """The tangent of ``node`` in a sweep's table (None where none flows), or, for a
    Dual's leaf that the table lacks, :func:`seeded_tangent`."""
    if not node:
        return None
    t = tangents.get(id(node))
    if t is None and type(node) is Seeded:
        return seeded_tangent(node)
    return t


def seeded_tangent(leaf: Seeded) -> Any:
    """The tangent a sweep takes for a Dual's ``leaf`` its table lacks: the Dual's, if
    the leaf is of the jvp being swept; None for one of a jvp that has returned (a
    constant).  A leaf of another jvp still running, met while a jvp inside it is
    swept, raises: the inner jvp's arrays would cut the outer one's tangent; except
    in an untaped run, whose results carry no tangent of the outer jvp's (its
    rerun, taped, does)."""
    sweeping = SWEEPING.get()
    if leaf.trace is sweeping:
        return leaf.tangent
    if sweeping is not None and leaf.trace.open and not sweeping.untaped:
        raise nested_error("rm.jvp")
    return None


def nested_error(within: str) -> NotImplementedError:
    """The refusal of an eager rm.jvp whose sweep meets a value of another rm.jvp still
    running: the inner one was run outside the outer one's context (in a thread it
    started), where it cannot know to give Tensors, and its arrays would cut the
    outer tangent."""
    return NotImplementedError(
        f"rm.jvp: a value of another {within} still running reached this call, which "
        "runs outside that call's context (a thread started inside it), so it returns "
        "arrays, which would cut the outer derivative. Run it in the outer call's "
        "context (contextvars.copy_context().run in the thread), where rm.jvp returns "
        "Tensors the outer call differentiates, or give it .detach()ed values"
    )


def node_of(t: Tensor) -> Any:
    """``t.node``, except that a Dual's is read without making it a leaf."""
    if type(t) is not Dual:
        return t.node
    if not t.trace.open:
        return None
    try:
        return _get_node(t)
    except AttributeError:
        return None


def no_tangent_rule(op: Any) -> NotImplementedError:
    return NotImplementedError(
        f"rm.jvp: forward mode through `{op.name}` is not supported: the op has no "
        "tangent rule (jvps=) in the op table"
    )


def dual_apply(op, inputs, forward_kw=None, rule_kw=None):
    """Apply ``op`` to operands among which a Dual (:mod:`remat.dual`): its value and,
    at once, its tangent, the sum over the Duals of each one's tangent rule.

    The rules read what the op's VJP rules read (its output and operands), and
    the terms are summed in the order of the operands, as the forward sweep
    over a recording sums them.  Returns None where the recorded path must
    take over: a Dual of a jvp that is no longer eager, Duals of two jvps, or
    an operand that is recorded itself (reading the Duals' nodes there
    switches their jvp to recording), and so does a step or checkpointed
    function that the executor runs untaped (it reads what the function closes
    over then, to carry its tangent later).  Under ``rm.no_grad`` the result is
    a constant, as a recording would make it.
    """
    trace = None
    datas = []
    recording = GRAD_ENABLED.get()
    if not recording and recording is not False:
        return None  # a step run untaped (UNTAPED): the taped path reads the nodes
    for v in inputs:
        if type(v) is Dual:
            if trace is None:
                trace = v.trace
            elif v.trace is not trace:
                return None
            datas.append(v._data)
        elif isinstance(v, Tensor):
            if recording and v.node is not None:
                return None
            datas.append(v._data)
        else:  # a constant the op takes as it is: a number, an array, None (layer_norm's)
            datas.append(v)
    if trace is None or not trace.eager:
        return None
    out = evaluated(op, datas, forward_kw)  # the generic apply's forward
    if not recording:
        return Tensor._from_record(out, STEP.get())
    rules, kw = op.jvps, rule_kw if rule_kw is not None else forward_kw
    ns, total = backend.ARRAY_NAMESPACE, None
    for i, v in enumerate(inputs):
        if type(v) is Dual:
            if rules is None:
                raise no_tangent_rule(op)
            rule = rules[i]
            part = (
                rule(ns, v.tangent, out, *datas, **kw) if kw else rule(ns, v.tangent, out, *datas)
            )
            total = part if total is None else total + part
    if total.shape != out.shape:
        total = ns.broadcast_to(total, out.shape)
    return dual(out, total, trace)


_core_apply.dual_apply = dual_apply  # the core's hook (remat.core.apply.EAGER)
