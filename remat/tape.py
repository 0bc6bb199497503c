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

Tapes: ``with rm.Tape() as tape:`` (a :class:`Recorder`) lists every record
made inside it, so that ``print(tape)`` shows the computation.  Outside any
``with``, records go to the
default tape, which keeps no list: a record lives exactly as long as a tensor
that can still reach it, so computations never differentiated do not pile up.
"""

from __future__ import annotations

import heapq
import weakref
from contextvars import ContextVar
from itertools import count
from typing import Any, TypeVar

from . import backend, guard

_sequence = count()  # shared by all threads: numbers only ever grow


def next_sequence() -> int:
    """Take a sequence number: every record made after this call has a larger one."""
    return next(_sequence)


# Recording state, per thread and per context (each thread, and each asyncio
# task, sees its own values): whether ops are recorded, which Tape is open,
# how deep inside rm.grad the code runs, and which loop step is running.
GRAD_ENABLED = ContextVar("remat_grad_enabled", default=True)
OPEN_TAPE = ContextVar("remat_open_tape", default=None)
GRAD_DEPTH = ContextVar("remat_grad_depth", default=0)
STEP = ContextVar("remat_step", default=None)
FORWARD_MODE = ContextVar("remat_forward_mode", default=False)  # inside rm.jvp's recording
# inside an rm.grad whose backward is itself recorded (to be differentiated again)
RECORDED_BACKWARD = ContextVar("remat_recorded_backward", default=False)
_TAPE_START = ContextVar("remat_tape_start", default=0)  # records an open tape had before


class _Untaped:
    """GRAD_ENABLED's value while the executor evaluates a step (or a checkpointed
    function) without taping it: falsy, so ops record nothing, yet
    :func:`grad_enabled` says True, as it does when the same code is taped, so that
    code branching on it computes the same thing in both runs."""

    __slots__ = ()

    def __bool__(self):
        return False

    def __repr__(self):
        return "UNTAPED"


UNTAPED = _Untaped()


def grad_enabled() -> bool:
    """Whether gradients are on here and now (False inside ``rm.no_grad()``).

    Inside ``rm.checkpoint(f)``'s first run, and a checkpointed loop's steps,
    it is True, as outside: those runs record nothing only because their steps
    are recomputed (and recorded) in backward.

    >>> import remat as rm
    >>> with rm.no_grad():
    ...     inside = rm.grad_enabled()
    >>> rm.grad_enabled(), inside
    (True, False)
    """
    return GRAD_ENABLED.get() is not False


class StepValue:
    """The ``node`` of a value computed inside one evaluation of a loop step (or a
    checkpointed function) without a gradient of its own (untaped steps,
    constants): it behaves as ``None`` (it is falsy) but remembers where the
    value was made, so that using it outside is refused (see :class:`EscapeError`).
    ``parent`` is the step (or function) that was running around this one: its
    values may be used here too."""

    __slots__ = ("owner", "step", "parent")

    def __init__(self, owner, step=None, parent=None):
        self.owner = owner  # what runs the code: "tape.loop", "rm.checkpoint(block)", ...
        self.step = step
        self.parent = parent  # the marker of the step around the chain or call, or None

    def __bool__(self):
        return False

    def __str__(self):
        return self.owner if self.step is None else f"step {self.step} of {self.owner}"

    __repr__ = __str__


class EscapeError(RuntimeError):
    """A value computed inside a loop step (or checkpointed function) was used outside it.

    >>> import remat as rm
    >>> seen = []
    >>> def step(h):
    ...     seen.append(h * 2.0)  # kept past the step: it would be recomputed, then lost
    ...     return h + 1.0
    >>> with rm.Tape(snapshots=2) as tape:
    ...     h = tape.loop(step, rm.ones(1, requires_grad=True), steps=3)
    >>> try:
    ...     (h + seen[0]).sum()
    ... except rm.EscapeError as error:
    ...     print(str(error)[:42])
    add: a value computed inside step 0 of tap
    """


def escape_error(where, node):
    return EscapeError(
        f"{where}: a value computed inside {node} is used outside it. Steps and checkpointed "
        "functions are recomputed and their values dropped, so such a value would give a "
        "wrong gradient. Return it (as part of the state, or as a scan's y) instead, or "
        ".detach() it (or compute under rm.no_grad()) if you only need its value."
    )


def check_step_value(where, node):
    """Refuse ``node`` (a falsy, non-None node) unless it belongs to the running step,
    or to a step running around it."""
    running = STEP.get()
    while running is not None:
        if running is node:
            return
        running = running.parent
    raise escape_error(where, node)


# Context managers keep what they replaced on a per-context stack (a ContextVar
# too), so that one manager object entered by several threads or interleaved
# asyncio tasks restores each its own value.
_SAVED = ContextVar("remat_saved_values", default=())


def push_value(var, value):
    """Set ``var`` to ``value`` here, remembering what it was (see pop_value)."""
    _SAVED.set((*_SAVED.get(), (var, var.get())))
    var.set(value)


def pop_value(var):
    """Give ``var`` back the value the matching push_value replaced."""
    saved = _SAVED.get()
    if not saved or saved[-1][0] is not var:
        raise RuntimeError(
            "remat: recording contexts (no_grad, enable_grad, Tape) were exited in another "
            "order than they were entered"
        )
    _SAVED.set(saved[:-1])
    var.set(saved[-1][1])


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

    __slots__ = (
        "op",
        "seq",
        "parents",
        "args",
        "ans",
        "kwargs",
        "shape",
        "ct",
        "checks",
        "rebound",
    )
    rebound: int  # set only when a non-leaf tensor it made gets a new value (Tensor.data); getattr

    def __init__(
        self,
        op: Any,
        parents: Any,
        args: Any,
        ans: Any,
        kwargs: dict | None,
        shape: Any,
    ) -> None:
        self.op = op
        self.seq = next(_sequence)
        self.parents = parents  # per input: None, a Record, or a Leaf
        self.args = args  # per input: the saved array / constant, or None
        self.ans = ans  # the output array if the VJP needs it, else None
        self.kwargs = kwargs
        self.shape = shape
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
        arrays = (*self.args, self.ans)
        i = guard.changed(arrays, self.checks, self.seq, cache)
        if i is not None:
            what = "its output" if i == len(self.args) else f"its input {i}"
            a = arrays[i]
            raise BackwardError(
                f"{sweep} through `{self.op.name}` (output shape {self.shape}): {what}, an "
                f"array of shape {a.shape} and dtype {a.dtype} saved for this {sweep}, was "
                "changed in place after it was saved (through .data, np.asarray(t), .numpy() or "
                "a view of them). Change values only when no backward still needs them (after "
                "backward), or out of place: `with rm.no_grad(): p -= lr * p.grad` rebinds p."
            )

    def __repr__(self):
        return f"<Record #{self.seq} {self.op.name} {self.shape}>"


class StepRecord(Record):
    """A record made inside one taped step of a checkpointed loop.

    The loop's executor retags the records of each step it tapes, so that a
    sweep other than that step's own can tell when a value escaped the step.
    """

    __slots__ = ()


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


class StandIn(Leaf):
    """The leaf of an input remat itself makes to differentiate with respect to: a
    loop step's state, ``rm.grad``'s argument, a checkpointed function's input.

    Unlike a user's leaf it may be updated in place (``x *= 2`` is recorded, as
    on any value), and reaching it from outside the computation it stands in
    for means a value escaped (see :class:`EscapeError`).
    """

    __slots__ = ()


class ConstantInput(StandIn):
    """The leaf of an input that is not itself recorded (an array, a Tensor that needs
    no gradient) of an rm.grad whose backward is recorded or of an rm.jvp that gives
    Tensors on the tape (inside rm.grad or another rm.jvp, or beside values that
    require grad).  The call itself collects its gradient, or seeds its tangent
    there; outside the call it is a constant, so every other backward that reaches
    it stops there: a StandIn would be an escaped input, and a leaf would collect a
    gradient, which a loop step's rerun (making a new one) would not.
    """

    __slots__ = ()


class no_grad:
    """Context manager inside which no op is recorded (and nothing is kept for backward).

    It affects only the thread (and context) that enters it.  Values computed
    inside are plain constants, also inside a loop step: reading them later,
    outside the step, is fine.

    >>> import remat as rm
    >>> p = rm.tensor([1.0], requires_grad=True)
    >>> with rm.no_grad():
    ...     q = p * 2.0
    >>> q.requires_grad
    False
    """

    enabled = False

    def __enter__(self):
        push_value(GRAD_ENABLED, self.enabled)
        push_value(STEP, None)
        return self

    def __exit__(self, *exc):
        pop_value(STEP)
        pop_value(GRAD_ENABLED)
        return False


class enable_grad(no_grad):
    """Context manager that turns recording back on (used inside no_grad).

    >>> import remat as rm
    >>> p = rm.tensor([1.0], requires_grad=True)
    >>> with rm.no_grad():
    ...     with rm.enable_grad():
    ...         q = p * 2.0
    >>> q.requires_grad
    True
    """

    enabled = True

    def __enter__(self):
        push_value(GRAD_ENABLED, True)
        return self

    def __exit__(self, *exc):
        pop_value(GRAD_ENABLED)
        return False


class untaped(enable_grad):
    """Recording off for a step the executor evaluates without taping it; unlike
    no_grad, the step's values keep their marker (internal)."""

    def __enter__(self):
        push_value(GRAD_ENABLED, UNTAPED)
        return self


_R = TypeVar("_R", bound="Recorder")


class Recorder:
    """A recording context: ``with Recorder() as r:`` lists every record made inside,
    in order, so that ``print(r)`` shows the computation.

    :class:`remat.Tape` is a Recorder that also carries a budget for
    checkpointed loops, chains and scans (see :mod:`remat.budget`); the
    executor takes a plain Recorder for each step it tapes.  A recorder is
    open only in the thread (and context) that entered it.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> with rm.Recorder() as recorder:
    ...     y = rm.exp(x).sum()
    >>> [record.op.name for record in recorder.records]
    ['exp', 'sum']
    """

    def __init__(self, forwards: bool = True) -> None:
        self.records: list[Record] = []
        # A tape opened inside another lists its records there too (so that rm.jvp
        # sees what a `with rm.Tape()` inside f records); the executor's own
        # per-step recorders do not (the records of steps stay the steps').
        self.forwards = forwards

    def __enter__(self: _R) -> _R:
        push_value(_TAPE_START, len(self.records))
        push_value(OPEN_TAPE, self)
        return self

    def __exit__(self, *exc):
        outer = _SAVED.get()[-1][1]  # the tape that was open around this one
        pop_value(OPEN_TAPE)
        start = _TAPE_START.get()
        pop_value(_TAPE_START)
        if self.forwards and outer is not None and outer is not self:
            outer.records.extend(self.records[start:])
        return False

    def saved_bytes(self) -> int:
        """Bytes that the records on this tape hold for backward right now."""
        return sum(record.saved_bytes() for record in self.records)

    def __len__(self):
        return len(self.records)

    def __str__(self):
        return self.describe()

    def describe(self, expand_loops: bool = False, max_actions: int = 20) -> str:
        """The records as text, one line each: ``print(tape)`` is ``describe()``.

        Records are numbered 1, 2, 3 ... in the order they were made on this
        tape; each line gives the op, the output shape, the bytes it saves for
        backward ("freed" once backward has passed), and its inputs: the number
        of the record that made each one, ``leaf`` (a tensor made with
        requires_grad=True), ``constant`` (no gradient wanted), ``input`` (an
        input remat made for a loop step or rm.grad) or ``outside`` (a record
        made before this tape was opened).  ``expand_loops=True`` lists under
        each loop, chain or scan record the actions of its schedule (at most
        ``max_actions`` of them), while the record still holds its run.

        >>> import remat as rm
        >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
        >>> with rm.Tape() as tape:
        ...     y = (rm.sin(x) * x).sum()
        >>> print(tape)  # doctest: +NORMALIZE_WHITESPACE
        Tape: 3 records, 48 bytes saved
          #1  sin       2       16 B saved  inputs: leaf 2
          #2  multiply  2       32 B saved  inputs: #1, leaf 2
          #3  sum       scalar  0 B saved   inputs: #2
        """
        number = {id(r): k for k, r in enumerate(self.records, 1)}
        rows: list[tuple[str, ...]] = []
        for k, record in enumerate(self.records, 1):
            saved = "freed" if record.freed else f"{record.saved_bytes()} B saved"
            if record.freed:
                inputs = "inputs freed by backward"
            else:
                inputs = "inputs: " + ", ".join(_input_name(p, number) for p in record.parents)
            rows.append((f"#{k}", record.op.name, _shape_text(record.shape), saved, inputs))
            if expand_loops and record.op.name == "loop":
                rows.extend(("", f"    {line}") for line in _loop_lines(record, max_actions))
        widths = [max((len(row[c]) for row in rows if len(row) > 2), default=0) for c in range(4)]
        lines = [
            f"{type(self).__name__}: {len(self.records)} records, {self.saved_bytes()} bytes saved"
        ]
        for row in rows:
            if len(row) == 2:
                lines.append(f"  {row[1]}")
            else:
                cells = [cell.ljust(w) for cell, w in zip(row[:4], widths)]
                lines.append("  " + "  ".join(cells) + "  " + row[4])
        return "\n".join(lines)

    def to_dot(self, expand_loops: bool = False, max_actions: int = 12) -> str:
        """The recorded graph as Graphviz DOT text (render it with ``dot -Tsvg``, or
        :meth:`draw`).

        A box per record (its number on this tape, op, output shape and bytes
        saved), an ellipse per leaf tensor (and per input remat made, or record
        made outside this tape), and an arrow from each input to the record that
        used it; constants are not drawn.  ``expand_loops=True`` adds a loop's
        schedule actions to its box (see :meth:`describe`).

        >>> import remat as rm
        >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
        >>> with rm.Tape() as tape:
        ...     y = (x * x).sum()
        >>> print(tape.to_dot())  # doctest: +NORMALIZE_WHITESPACE
        digraph tape {
          rankdir=LR;
          node [fontname="Helvetica", fontsize=11];
          n1 [shape=ellipse, label="leaf 2"];
          r1 [shape=box, label="#1 multiply\\n2\\n32 B saved"];
          r2 [shape=box, label="#2 sum\\nscalar\\n0 B saved"];
          n1 -> r1;
          n1 -> r1;
          r1 -> r2;
        }
        <BLANKLINE>
        """
        number = {id(r): k for k, r in enumerate(self.records, 1)}
        # id(node) -> (DOT name, its label) for nodes that are not our records
        sources: dict[int, tuple[str, str]] = {}
        boxes, edges = [], []
        for k, record in enumerate(self.records, 1):
            saved = "freed" if record.freed else f"{record.saved_bytes()} B saved"
            label = [f"#{k} {record.op.name}", _shape_text(record.shape), saved]
            if expand_loops and record.op.name == "loop":
                label.extend(_loop_lines(record, max_actions))
            boxes.append(f"  r{k} [shape=box, label={_dot_label(label)}];")
            for parent in record.parents or ():
                if parent is None:
                    continue
                j = number.get(id(parent))
                if j is None:
                    name, text = sources.setdefault(
                        id(parent), (f"n{len(sources) + 1}", _input_name(parent, number))
                    )
                else:
                    name = f"r{j}"
                edges.append(f"  {name} -> r{k};")
        ellipses = [
            f"  {name} [shape=ellipse, label={_dot_label([text])}];"
            for name, text in sources.values()
        ]
        head = ["digraph tape {", "  rankdir=LR;", '  node [fontname="Helvetica", fontsize=11];']
        return "\n".join(head + ellipses + boxes + edges + ["}"]) + "\n"

    def draw(self, expand_loops: bool = False, max_actions: int = 12) -> Any:
        """:meth:`to_dot` as a ``graphviz.Source`` (shown as a picture in Jupyter; call
        ``.render()`` to write a file).  Needs the optional ``graphviz`` package
        (``pip install "remat[graph]"``) and the Graphviz programs (``apt install graphviz``,
        ``brew install graphviz``, ...)."""
        try:
            import graphviz
        except ImportError:
            raise ImportError(
                "tape.draw() needs the graphviz package (pip install 'remat[graph]', and the "
                "Graphviz programs); tape.to_dot() gives the DOT text without it"
            ) from None
        return graphviz.Source(self.to_dot(expand_loops, max_actions))

    def __repr__(self):
        return f"<{type(self).__name__} {len(self.records)} records>"


def _shape_text(shape):
    if not isinstance(shape, tuple):  # a multi-output record (a loop) has a tuple of shapes
        return ""
    if shape and all(isinstance(n, tuple) for n in shape):
        return ", ".join(_shape_text(s) for s in shape)
    return "x".join(map(str, shape)) or "scalar"


def _input_name(node, number):
    """How a record's input is named in describe() and to_dot()."""
    if node is None:
        return "constant"
    if type(node) is StandIn:
        return f"input {_shape_text(node.shape)}"
    if isinstance(node, Leaf):
        name = getattr(node.tensor(), "_name", None)  # rm.tensor(..., name=)
        return (
            f"{name}: leaf {_shape_text(node.shape)}" if name else f"leaf {_shape_text(node.shape)}"
        )
    k = number.get(id(node))
    return f"#{k}" if k is not None else f"outside: {node.op.name} {_shape_text(node.shape)}"


def _loop_lines(record, max_actions):
    """The schedule and (the first ``max_actions`` of) its actions, for a loop record."""
    run = record.args[0] if record.args else None
    schedule = getattr(run, "schedule", None)
    if schedule is None:
        return ["schedule: released by backward (expand before backward)"]
    steps = run.stats.steps
    actions, shown, total = iter(schedule), [], 0  # a fresh run of the same schedule
    finish = getattr(actions, "finish", None)  # online: told the length after its last step
    for action in actions:
        total += 1
        if len(shown) < max_actions:
            shown.append(repr(action))
        kind = type(action).__name__
        if finish is not None and kind == "Tape" and action.stop == steps:
            finish(steps)
            finish = None
        if kind == "End":
            break
    more = [f"... {total - len(shown)} more"] if total > len(shown) else []
    owner = run.chain.owner
    return [f"{owner}: {schedule!r}, {steps} steps, {total} actions"] + shown + more


def _dot_label(lines):
    """A DOT label: the first line centred, the rest (a loop's actions) left-aligned."""
    escaped = [line.replace("\\", "\\\\").replace('"', '\\"') for line in lines]
    if len(escaped) <= 3:
        return '"' + "\\n".join(escaped) + '"'
    return '"' + "\\n".join(escaped[:3]) + "\\n" + "\\l".join(escaped[3:]) + '\\l"'


# --- the reverse sweep ------------------------------------------------------


class BackwardError(RuntimeError):
    """Backward cannot run: a graph already freed, or a gradient of bad shape.

    >>> import remat as rm
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> y = (x * x).sum()
    >>> y.backward()
    >>> try:
    ...     y.backward()  # the first backward freed what the second needs
    ... except rm.BackwardError as error:
    ...     print(str(error)[:38])
    backward through `sum` (output shape (
    """


def _freed_error(record):
    return BackwardError(
        f"backward through `{record.op.name}` (output shape {record.shape}) a second time: "
        "its saved arrays were freed by the first backward. Pass retain_graph=True to the "
        "first backward() if you need to backpropagate through the same graph twice."
    )


# HOOK (issue 26, remat.graph.dtr): called as BEFORE_VJP(record) by every reverse sweep
# before it reads a record's saved values (args, ans) for its VJP, so that values a
# Tape(remat="dtr") evicted are put back.  None (the default) costs one test per
# record reversed; set only while a DTR tape's cache is alive.
BEFORE_VJP = None


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

    ``RECORD`` is the kind of record this sweep reverses itself: the records
    of the ordinary tape.  (A loop step's own sweep reverses that step's
    :class:`StepRecord` s; such a record reaching any other sweep is a value
    that escaped its step, and is refused.)

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

    RECORD = Record

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
        """Add cotangent ``g`` to ``node`` (a Record, or a Leaf)."""
        if self.owns(node):
            self.push(node, g)
        elif type(node) is ConstantInput:
            return  # a constant's leaf (rm.jvp's): no gradient asked outside its call
        elif type(node) is StandIn:
            raise EscapeError(
                f"backward reached an input (shape {node.shape}) that remat made for a loop "
                "step, a checkpointed function or rm.grad, from outside it: a step's (or "
                "function's) input was kept and used elsewhere. Return it as part of the state "
                "instead, or .detach() it if you only need its value."
            )
        elif isinstance(node, Record):
            raise EscapeError(
                f"backward reached `{node.op.name}` (output shape {node.shape}), which was "
                "recorded inside a step of a checkpointed loop (or a checkpointed function), from "
                "outside it: a value computed inside was kept and used elsewhere. Return it (as "
                "part of the state, or as a scan's y) instead, or .detach() it if you only need "
                "its value."
            )
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
        own, oldest, verified = self.RECORD, guard.OLDEST, {}
        before_vjp = BEFORE_VJP  # the DTR hook (above)
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
                    raise _freed_error(record)
                if before_vjp is not None:
                    before_vjp(record)
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
        elif isinstance(node, Record) and node.seq >= self.floor:
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
    if root.node:
        sweep.add(root.node, seed)
    elif root.node is not None:
        check_step_value("rm.grad", root.node)
    sweep.run()
    return sweep.results


def backward(roots, cotangents, retain_graph=False):
    """Run a reverse sweep from ``roots`` seeded with ``cotangents``.

    Returns ``leaf_grads``: id(leaf) -> [leaf, gradient, owned] for every leaf reached.
    """
    sweep = Sweep(backend.ARRAY_NAMESPACE, retain_graph=retain_graph)
    for root, ct in zip(roots, cotangents):
        if root.node:
            sweep.add(root.node, ct)
    sweep.run()
    return sweep.leaf_grads
