"""One step, taped or not: its recording, reversing it, and counting what it keeps alive.

A taped step is recorded on a small tape of its own (:func:`tape_call`, or the
executor's Tape handler, which opens one recorder for a whole action): the
records numbered from the step's ``floor`` to its ``stop`` are its own
(:class:`StepTape`), and :func:`reverse_step` backpropagates through them
alone, handing any cotangent for a value the step closed over (a parameter)
to the outer sweep.  :func:`saved_by` says which arrays the tape keeps alive,
for the byte accounting of :mod:`remat.alive`.
"""

from __future__ import annotations

from .. import backend
from ..alive import keyword_arrays
from ..tape import (
    GRAD_ENABLED,
    OPEN_TAPE,
    ConstantInput,
    Leaf,
    Record,
    Recorder,
    StepRecord,
    Sweep,
    next_sequence,
)


class StepTape:
    """The recording of one step: its inputs' nodes, its outputs, and what it saved.

    The step's records are those numbered from ``floor`` to ``stop``: whichever
    tape or thread made them while the step ran.
    """

    __slots__ = ("inputs", "outputs", "floor", "stop", "saved")

    def __init__(self, inputs, outputs, floor, stop, saved):
        self.inputs = inputs  # the nodes standing for x_i (and xs[i]): StandIns, or markers
        self.outputs = outputs  # Tensors of x_{i+1} (and y_i), leading back to inputs
        self.floor = floor  # first sequence number recorded by this step
        self.stop = stop  # and one past the last
        self.saved = saved  # the arrays its records hold (for byte accounting)


class StepSweep(Sweep):
    """Backpropagate through one step tape inside an outer sweep.

    Records the step made are reversed here; cotangents for the step's input
    leaves are collected (they are the cotangent of the previous state); any
    other tensor (a parameter, or a value made before the chain) is handed to
    the outer sweep, which finishes its gradient.
    """

    RECORD = StepRecord

    def __init__(self, outer, step_tape, create_graph=False, hand_on=None):
        super().__init__(outer.ns, create_graph=create_graph)
        self.outer = outer
        self.hand_on = hand_on  # per input, the outer node its cotangents go to as they come
        self.floor, self.stop = step_tape.floor, step_tape.stop
        if create_graph:  # what the recorded backward splices in (rm.checkpoint's) is the step's
            self.stop = float("inf")
        self.input_ids = {id(node): k for k, node in enumerate(step_tape.inputs)}
        self.input_grads = [None] * len(step_tape.inputs)

    def add(self, node, g):
        if isinstance(node, Record) and self.floor <= node.seq < self.stop:  # the step's own
            self.push(node, g)
            return
        k = self.input_ids.get(id(node))
        if k is None:
            if type(node) is not ConstantInput:  # a constant outside its call: none asked
                self.outer.add(node, g)
        elif self.hand_on is not None:  # each term to the outer sum, in the unchecked order
            if self.hand_on[k]:
                self.outer.add(self.hand_on[k], g)
        elif self.input_grads[k] is None:
            self.input_grads[k] = g
        else:
            self.input_grads[k] = self.input_grads[k] + g


class Recording:
    """``with Recording(recorder, mode):`` records onto ``recorder`` with gradients
    ``mode`` (True, or UNTAPED), for the recorders the executor opens around a
    Tape or Advance action.  It does what ``with recorder, enable_grad():``
    does, by ContextVar tokens in one step (such a recorder forwards nothing,
    so it needs no record of where it started): about half the cost (3.2
    against 7.0 us by timeit on the loaded machine), paid per action."""

    __slots__ = ("recorder", "mode", "tokens")

    def __init__(self, recorder, mode):
        self.recorder = recorder
        self.mode = mode

    def __enter__(self):
        self.tokens = (OPEN_TAPE.set(self.recorder), GRAD_ENABLED.set(self.mode))
        return self.recorder

    def __exit__(self, *exc):
        GRAD_ENABLED.reset(self.tokens[1])
        OPEN_TAPE.reset(self.tokens[0])
        return False


def step_recorder(check_replay):
    """A recorder for one step's (or action's) records, which it keeps to itself."""
    recorder = Recorder(forwards=False)
    recorder.check_replay = check_replay  # what a checkpoint inside the step reads
    return recorder


def tape_call(call, check_replay=True):
    """Run ``call()`` recording on a tape of its own, and mark its records StepRecords
    (a sweep other than this step's refuses them); returns (what it returned, the
    first and one past the last sequence numbers it took, its records)."""
    recorder = step_recorder(check_replay)
    floor = next_sequence()
    with Recording(recorder, True):
        result = call()
    stop = next_sequence()
    retag(recorder.records)
    return result, floor, stop, recorder.records


def retag(records):
    """Mark records made inside a step (or checkpointed function) as its own."""
    for record in records:
        record.__class__ = StepRecord


def saved_by(records, floor, inputs, also=(), outside=frozenset()):
    """The arrays a step tape keeps alive of the step's own values (what it made,
    or its inputs, whose nodes are ``inputs``): what its records hold for their
    VJPs, the arrays an op keeps beside its operands (an index table: ``u[nbr]``),
    and ``also``: the step's input state x_i, which the tape keeps alive whether
    or not a VJP reads it (through the previous tape's outputs, or the slot it
    came from).  Its output state x_{i+1} is a record's output, counted with the
    records (Holdings counts a buffer the next tape or a snapshot also holds
    once); a scan's y_i are in the ys the run holds anyway (a transient of
    :mod:`remat.alive`).  Parameters are not the
    chain's to count, nor is a view of one (``W.T``), nor of a buffer ``outside``
    holds (ids: a scan's ``xs``, whose rows its steps read).  A chain run inside the
    step holds its snapshots, tapes and x_0 until it is reversed: they count too.
    Holdings counts each by the buffer it keeps alive (:mod:`remat.alive`).
    (Tests the cheap conditions first: 3.4 against 5.3 us for the four records of
    bench_overheads' tiny step, by timeit.)"""
    saved = []
    append, is_array = saved.append, backend.is_array
    views = False
    for record in records:
        held = record.args
        if record.op.custom_backward is not None:  # a checkpoint's record holds its Call,
            payload = held[0]  # a chain's its run: what they hold for their backward
            holding = getattr(payload, "holding", None)
            if holding is not None:
                saved.extend(holding())
            held = getattr(payload, "arrays", held)
        for a, node in zip(held, record.parents):
            if a is None:
                continue
            if node is None or (node.seq >= floor if isinstance(node, Record) else node in inputs):
                if is_array(a):
                    append(a)
                    if a.base is not None:
                        views = True
        ans = record.ans
        if ans is not None and is_array(ans):  # not an evicted value of a DTR tape inside
            append(ans)
            if ans.base is not None:
                views = True
        kw = record.kwargs
        if kw:  # arrays an op keeps besides its operands (an integer index table)
            saved.extend(keyword_arrays(kw))
        kept = getattr(record.args[0], "kept", None) if held is not record.args else None
        if kept is not None:  # what a checkpoint's policy kept
            saved.extend(kept.arrays())
    for a in also:
        append(a)
        if a.base is not None:
            views = True
    if views:  # a view of a parameter (W.T) keeps only the parameter alive: the user's
        users = _leaf_buffers(records) | outside
        if users:
            saved = [a for a in saved if id(backend.memory_owner(a)) not in users]
    return saved


def _leaf_buffers(records):
    """The ids of the buffers of the leaf tensors (parameters) ``records`` read."""
    found = set()
    for record in records:
        for node in record.parents or ():
            if type(node) is Leaf:
                t = node.tensor()
                if t is not None:
                    found.add(id(backend.memory_owner(t._data)))
    return found


def reverse_step(outer, step_tape, cotangents, hand_on=None):
    """Backpropagate ``cotangents`` of a step tape's outputs; the inputs' cotangents
    (None where none arrived).  With ``hand_on`` (the outer nodes of the inputs, for
    rm.checkpoint), each term of an input's cotangent goes to its outer node as it
    comes instead, so that the outer sum adds them in the order it would without
    checkpointing (a sum made first would round differently).

    The step tape's list of what its records saved goes first (a caller releases
    its holdings of them before): only the records hold those arrays then, and
    the sweep frees each record's as it passes it, as on an ordinary tape, instead
    of all of them at the end of the step."""
    step_tape.saved = ()
    sweep = StepSweep(outer, step_tape, hand_on=hand_on)
    for t, g in zip(step_tape.outputs, cotangents):
        if t.node and g is not None:
            sweep.add(t.node, g)
    sweep.run()
    return sweep.input_grads
