"""Second order through a chain: a recorded backward, and the chain run with tangents.

When the backward through a chain is itself to be differentiated (rm.hvp is
rm.jvp of rm.grad; rm.grad of rm.grad), the gradient is computed as always (the
same schedule on the same arrays) and handed on as the outputs of one
`loop_adjoint` record.  For a tangent of that record (forward over reverse)
the chain runs again from x_0 under the same schedule carrying tangents
(:class:`TangentRun`): the state is (x_i, its tangent) wherever it goes,
snapshots included, and each reversed step's backward is recorded and swept
forward (the tangent of its VJP).  The record's own VJP (reverse over reverse)
is that same run, by the symmetry of second derivatives: for A(z, g) = J(z)^T g
(z the chain's inputs and the values its steps close over), the VJP of A at w
is J w for g, and d/dz (g . J(z) w) = the tangent of A along z' = w for z.
Either way memory stays that of the schedule, with states and step tapes twice
as large.  Forward mode through a chain (``rm.jvp``, :func:`chain_tangents`)
runs its steps again from x_0, in order, each taped and swept forward.
"""

from __future__ import annotations

from .. import backend, schedules
from ..dual import tangent_in
from ..functional import forward_sweep
from ..ops import TENSOR_NAMESPACE
from ..ops.core import Op
from ..tape import FORWARD_MODE, RECORDED_BACKWARD, BackwardError, Record, Recorder, enable_grad
from ..tensor import Tensor
from .errors import LoopError
from .interpreter import HANDLERS, gather, seeds, stop_online
from .run import ChainRun
from .state import StateCotangent, outputs_of
from .steps import StepSweep, StepTape, saved_by, tape_call


class Totals:
    """Where a chain's backward hands its cotangents (instead of an outer sweep): their
    sums by node, in the order the nodes were first reached."""

    def __init__(self, ns):
        self.ns = ns
        self.sums = {}  # id(node) -> [node, sum]

    def add(self, node, g):
        entry = self.sums.get(id(node))
        if entry is None:
            self.sums[id(node)] = [node, g]
        else:
            entry[1] = entry[1] + g

    def get(self, node):
        entry = self.sums.get(id(node))
        return None if entry is None else entry[1]


class Arrivals:
    """What a recorded step backward hands outside the step, (node, Tensor) in order."""

    def __init__(self):
        self.ns = TENSOR_NAMESPACE
        self.items = []

    def add(self, node, g):
        self.items.append((node, g))


def tangent_of(t, tangents):
    """The tangent of Tensor ``t`` in ``tangents`` (id(node) -> tangent), or zeros."""
    found = tangent_in(tangents, t.node)
    return found if found is not None else backend.zeros(t.shape, t.dtype, like=t._data)


def zeros_for(parts, spec, like):
    """``parts`` with zeros (of ``spec``'s shapes and dtypes) where one is None."""
    return [
        p if p is not None else backend.zeros(s, d, like=like)
        for p, s, d in zip(parts, spec.shapes, spec.dtypes)
    ]


def tangents_read(records, tangents, step_tape):
    """The tangents a recorded backward of a step's ``records`` reads: those of the
    values their VJPs read (the inputs and outputs they saved), so a taped step
    holds one tangent per array it saves; all of ``tangents`` when a record is a
    chain or a checkpoint, whose rules read what their functions close over.
    Returns (id(node) -> tangent, the tangents of the step's own values)."""
    inputs = {id(node) for node in step_tape.inputs}

    def own(node):
        return node.seq >= step_tape.floor if isinstance(node, Record) else id(node) in inputs

    if any(record.op.custom_tangent is not None for record in records):
        kept = tangents
        nodes = [*records, *step_tape.inputs]
    else:
        kept = {}
        nodes = []
        for record in records:
            for node, a in zip(record.parents, record.args):
                if node and a is not None:
                    nodes.append(node)
            if record.ans is not None:
                nodes.append(record)
        for node in nodes:
            t = tangents.get(id(node))
            if t is not None:
                kept[id(node)] = t
    held = []
    for node in nodes:
        t = kept.get(id(node)) if node and own(node) else None
        if isinstance(t, list):  # a chain's or checkpoint's: its outputs' tangents
            held.extend(t)
        elif t is not None:
            held.append(t)
    return kept, held


class TangentStepTape(StepTape):
    """A step tape that also holds the tangents of the step's records."""

    __slots__ = ("tangents",)


class TangentRun(ChainRun):
    """The chain run again from x_0 under its schedule, every state with its tangent.

    ``current`` and every snapshot hold x_i's leaves then their tangents' (so
    Snapshot, Restore and Free are the first-order actions).  Advance and Tape
    run each step taped and swept forward; a taped step keeps the tangents of
    its records; Reverse records each step's backward and sweeps it forward
    from those tangents and the tangent of the cotangent.  ``outer`` holds the
    tangents of the values the steps close over; ``y_tangents`` collects the
    tangents of the ys when ``collect_ys``.
    """

    def begin(self, tangents, collect_ys):
        """Start from x_0 with the tangents of its leaves (and xs') in ``tangents``."""
        self.outer = tangents
        self.collect_ys = collect_ys and self.chain.has_ys
        self.y_tangents = {}
        x0, rng = self.start
        t0 = [tangent_in(tangents, node) for node in self.x0_nodes]
        self.t_xs = [tangent_in(tangents, node) for node in self.chain.xs_nodes]
        self.current = (tuple(x0) + tuple(zeros_for(t0, self.spec_at(0), self.like)), rng)
        self.slots.devices = self.slots.devices * 2  # a tangent lives where its leaf does

    def step_forward(self, i, state):
        """Step i on (x_i, its tangent): (x_{i+1}, its tangent), the step tape, its records."""
        width = len(self.spec_at(i).shapes)
        t_in = state[width:]
        arrays, out, step_tape, records, inner = step_with_tangents(
            self, i, state[:width], t_in, self.t_xs, self.outer
        )
        width = len(arrays)
        if self.collect_ys and i not in self.y_tangents:
            self.y_tangents[i] = out[width:]
        kept, own = tangents_read(records, inner, step_tape)
        step_tape = TangentStepTape(
            step_tape.inputs,
            step_tape.outputs,
            step_tape.floor,
            step_tape.stop,
            step_tape.saved + own,
        )
        step_tape.tangents = kept
        return tuple(arrays) + tuple(out[:width]), step_tape

    def reverse_step(self, step_tape, seeds, seed_tangents):
        """Backpropagate ``seeds`` through the step, recording the backward (as a
        nested rm.grad does), then sweep that recording forward from the tangents
        of the step's records and of the seeds.  Returns the cotangents of the
        step's inputs and their tangents; the tangents of the cotangents it
        hands outside (to closed-over values) go to the outer sweep, in order."""
        arrivals = Arrivals()
        recorder = Recorder(forwards=False)
        tangents = dict(self.outer)
        tangents.update(step_tape.tangents)
        with recorder, enable_grad():
            sweep = StepSweep(arrivals, step_tape, create_graph=True)
            for t, g, dg in zip(step_tape.outputs, seeds, seed_tangents):
                if t.node and g is not None:
                    seed = Tensor._stand_in(g)
                    tangents[id(seed.node)] = (
                        dg if dg is not None else backend.zeros(g.shape, g.dtype, like=g)
                    )
                    sweep.add(t.node, seed)
            sweep.run()
        tangents = forward_sweep(recorder.records, tangents)
        for node, g in arrivals.items:
            self.outer_sweep.add(node, tangent_of(g, tangents))
        grads = [None if g is None else g._data for g in sweep.input_grads]
        return grads, [None if g is None else tangent_of(g, tangents) for g in sweep.input_grads]

    def reverse_from(self, cotangent, tangent, sink):
        """The reverse sweep from the cotangent of the outputs and its tangent."""
        final = self.spec_at(self.stats.steps)
        width = len(final.shapes)
        self.cotangent_tangent = zeros_for(tangent[:width], final, self.like)
        self.ys_cotangent_tangent = [
            t if t is not None or g is None else backend.zeros(g.shape, g.dtype, like=g)
            for t, g in zip(tangent[width:], cotangent.parts[width:])
        ]
        self.xs_tangents = [None] * len(self.chain.xs)
        self.backward(cotangent, sink)

    def deliver(self, sweep, state, xs_grads):
        super().deliver(sweep, self.cotangent_tangent, self.xs_tangents)

    def release(self):
        super().release()
        self.outer = self.y_tangents = self.cotangent_tangent = None
        self.ys_cotangent_tangent = self.xs_tangents = None


def _invert_with_tangents(run, action):
    raise NotImplementedError(
        "second order (rm.hvp, rm.grad of rm.grad) through a reversible loop "
        "(tape.loop(..., inverse=)) is not supported: the inverse recomputes the states, "
        "not their tangents. Run the loop without inverse= (under any schedule) for second "
        "order"
    )


def advance_with_tangents(run, action):
    run.expect_position(action, action.start)
    run.replay.taped_end = None
    state, rng = run.current
    backend.set_random_state(rng)
    for i in range(action.start, action.stop):
        state = run.step_forward(i, state)[0]
        run.mark()
    run.current = (state, backend.random_state())
    run.position = action.stop


def tape_with_tangents(run, action):
    run.expect_position(action, action.start)
    state, rng = run.current
    backend.set_random_state(rng)
    at = run.replay.fingerprint(state, len(state) // 2)  # x_i's leaves, then their tangents
    for i in range(action.start, action.stop):
        state, step_tape = run.step_forward(i, state)
        run.tapes[i] = step_tape
        run.held.hold(step_tape.saved)
        if at is not None:  # every step of a run again is a recomputation
            at = run.replay.taped(i, at, state[: len(state) // 2], True)
        run.mark()
        if run.online_forward and stop_online(run, i + 1, state):
            break
    run.current = (state, backend.random_state())
    run.position = i + 1
    run.replay.taped_end = None if at is None else (state, at)


def reverse_with_tangents(run, action):
    for i in range(action.stop - 1, action.start - 1, -1):
        run.replay.meet(i, run.chain, run.stats.steps)
        step_tape = run.tapes.pop(i)
        grads, grad_tangents = run.reverse_step(
            step_tape,
            seeds(run, i, run.cotangent),
            seeds(run, i, run.cotangent_tangent, run.ys_cotangent_tangent),
        )
        run.cotangent = gather(run, i, grads, run.xs_grads, step_tape)
        run.cotangent_tangent = gather(run, i, grad_tangents, run.xs_tangents, step_tape)
        run.held.release(step_tape.saved)
    run.position = None


TangentRun.HANDLERS = {
    **HANDLERS,
    schedules.Advance: advance_with_tangents,
    schedules.Tape: tape_with_tangents,
    schedules.Reverse: reverse_with_tangents,
    schedules.Invert: _invert_with_tangents,
}


class Adjoint:
    """What a `loop_adjoint` record keeps: the chain's run, the cotangent of its
    outputs it was reversed with, and the nodes whose cotangents it gave."""

    __slots__ = ("run", "cotangent", "nodes")

    def __init__(self, run, cotangent, nodes):
        self.run, self.cotangent, self.nodes = run, cotangent, nodes

    def with_tangents(self, tangents, cotangent_tangents, collect_outputs=False):
        """Run the chain again with tangents: ``tangents`` (id(node) -> tangent) for
        x_0, xs and what the steps close over, ``cotangent_tangents`` for the
        cotangent.  Returns (the tangents of the chain's outputs when
        ``collect_outputs``, else None; those of the gradient, per node)."""
        run = self.run.again(TangentRun)
        outer_rng = backend.random_state()
        try:
            run.begin(tangents, collect_outputs)
            final, _ = run.run_forward(again=True)
            outputs = None
            if collect_outputs:
                width = len(run.spec_at(run.stats.steps).shapes)
                outputs = list(final[width:])
                if run.chain.has_ys:
                    n = run.stats.steps
                    outputs += [
                        backend.xp.stack([run.y_tangents[i][k] for i in range(n)])
                        for k in range(len(run.steps.ys_spec.shapes))
                    ]
            sums = Totals(backend.ARRAY_NAMESPACE)
            run.reverse_from(StateCotangent(list(self.cotangent), None), cotangent_tangents, sums)
        finally:
            backend.set_random_state(outer_rng)
            run.release()
        gradient = []
        for node in self.nodes:
            t = sums.get(node)
            if t is None:
                raise LoopError(
                    f"{run.chain.owner}: run again with tangents, its backward reached no "
                    f"cotangent for a {node!r} that the first backward reached"
                )
            gradient.append(t)
        return outputs, gradient


def recorded_backward(run, g, sweep):
    """The chain's backward for a sweep that records its own: the gradient as in a
    first-order backward, given to ``sweep`` as outputs of one `loop_adjoint` record."""
    parts = [None if p is None else p._data for p in g.parts]
    first = run
    if run.reversed:
        first = run.again()
        first.run_forward(again=True)
    run.reversed = True
    sums = Totals(backend.ARRAY_NAMESPACE)
    first.backward(StateCotangent(parts, g.shape), sums)
    nodes = [node for node, _ in sums.sums.values()]
    values = [total for _, total in sums.sums.values()]
    cotangent_nodes = tuple(None if p is None else p.node or None for p in g.parts)
    adjoint = Adjoint(run, parts, nodes)
    outputs = outputs_of(
        ADJOINT, (adjoint,), cotangent_nodes + tuple(nodes), values, tuple(v.shape for v in values)
    )
    for node, t in zip(nodes, outputs):
        sweep.add(node, t)


def _adjoint_tangent(record, tangents):
    """Forward over reverse (rm.hvp): the tangent of the chain's gradient."""
    adjoint = record.args[0]
    width = len(adjoint.cotangent)
    cotangent_tangents = [tangent_in(tangents, node) for node in record.parents[:width]]
    return adjoint.with_tangents(tangents, cotangent_tangents)[1]


def _adjoint_backward(record, g, sweep):
    """Reverse over reverse (rm.grad of rm.grad): the VJP of the gradient at ``g``."""
    if sweep.create_graph:
        raise BackwardError(
            "a third derivative through a checkpointed tape.loop / chain / scan is not "
            "supported: the backward of its gradient (reverse over reverse) is computed, "
            "not recorded. Second order (rm.hvp, rm.grad of rm.grad) works"
        )
    adjoint = record.args[0]
    width = len(adjoint.cotangent)
    direction = {id(node): w for node, w in zip(adjoint.nodes, g.parts) if w is not None}
    outputs, gradient = adjoint.with_tangents(direction, [None] * width, collect_outputs=True)
    cotangent_nodes = record.parents[:width]
    if not sweep.retain_graph:
        record.release()
    for node, t in zip(cotangent_nodes, outputs):
        if node is not None:
            sweep.add(node, t)
    for node, t in zip(adjoint.nodes, gradient):
        sweep.add(node, t)


ADJOINT = Op(
    "loop_adjoint",
    None,
    (),
    None,
    custom_backward=_adjoint_backward,
    custom_tangent=_adjoint_tangent,
)


def chain_tangents(run, nodes, tangents):
    """The tangents of the chain's outputs (x_n's leaves, then the stacked ys),
    from those of its inputs (``nodes``: x_0's, then xs'), by running the steps
    again from x_0 (for rm.jvp; see _chain_tangent)."""
    arrays, rng = run.start
    width0, n = len(run.x0_nodes), run.stats.steps
    t_state = [tangent_in(tangents, node) for node in nodes[:width0]]
    t_xs = [tangent_in(tangents, node) for node in nodes[width0:]]
    counted, outer_rng = run.stats.forward_steps, backend.random_state()
    backend.set_random_state(rng)
    y_tangents = []
    try:
        for i in range(n):
            arrays, out, *_ = step_with_tangents(run, i, arrays, t_state, t_xs, tangents)
            t_state = out[: len(arrays)]
            y_tangents.append(out[len(arrays) :])
    finally:
        backend.set_random_state(outer_rng)
        run.stats.forward_steps = counted  # these evaluations are jvp's, not the loop's
    replay = run.replay
    if n and replay.check_values and replay.fingerprint(arrays) != replay.first_run.final:
        raise replay.error(  # one taped run from x_0: where it ends is checked
            f"{run.chain.name(n - 1)} was recomputed from its stored input (the chain "
            "run again from x_0 for its tangents) and returned different values (the same "
            "structure, shapes and dtypes) than its first run (the x_n the forward returned)."
        )
    stacked = [backend.xp.stack(column) for column in zip(*y_tangents)] if y_tangents else []
    return t_state + (stacked if run.chain.has_ys else [])


def step_with_tangents(run, i, arrays, t_state, t_xs, tangents):
    """Tape step i on x_i's ``arrays`` and sweep its records forward from the
    tangents of x_i (``t_state``), of xs (``t_xs``, whole) and of the values
    it closes over (``tangents``: id(node) -> tangent).  Returns x_{i+1}'s
    arrays, the tangents of x_{i+1}'s and y_i's leaves (zeros where none
    flows), the step's StepTape, and the tangents of its records."""
    # chains inside the step keep x_0: they are swept forward (and maybe reversed
    # with a recorded backward) in turn
    forward, recorded = FORWARD_MODE.set(True), RECORDED_BACKWARD.set(True)
    try:
        (arrays_next, inputs, outputs), floor, stop, records = tape_call(
            lambda: run.steps.call(i, arrays, True), run.check_replay
        )
    finally:
        RECORDED_BACKWARD.reset(recorded)
        FORWARD_MODE.reset(forward)
    run.replay.forward.refuse_changed(records, run.chain.name(i))  # every step here is a rerun
    seeds = dict(tangents)
    step_tangents = list(t_state) + [None if t is None else t[i] for t in t_xs]
    for node, t in zip(inputs, step_tangents):
        if node and t is not None:
            seeds[id(node)] = t
    inner = forward_sweep(records, seeds)
    out = [tangent_of(o, inner) for o in outputs]
    saved = saved_by(records, floor, inputs, arrays, run.xs_buffers)
    step_tape = StepTape(inputs, outputs, floor, stop, saved)
    return arrays_next, out, step_tape, records, inner
