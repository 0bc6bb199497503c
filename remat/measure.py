"""Measuring a chain for a byte budget (:mod:`remat.memory`): its steps' times and the
bytes of its states and step tapes, with the executor itself.

Under ``rm.Tape(memory=)`` each chain is measured the first time a chain of its
kind runs (:func:`measure_costs`), one step at a time: step ``i`` is evaluated
untaped (``forward_time[i]``, and ``x_{i+1}``'s bytes), then taped from ``x_i``
and reversed with a cotangent of ones, the gradients thrown away
(``reverse_time[i]``, and the bytes its tape holds).  A loop's steps are all
alike: the first steps are measured (step 0 taped once to learn its tape's
bytes, then runs of up to :data:`SPAN` steps, as many tapes as fit in the
budget, timed five times: the least per step; a run as long as the plan's
runs of tapes prices the caches as the plan will meet them) and taken for
every step; so are a scan's (its inputs ``xs[i]`` all have one shape).  A
chain is measured step by step, once, one tape at a time; steps that are one
layer repeated (the same code on captured values of the same shapes,
:func:`step_kind`, between states of the same shapes, with tapes of the same
bytes) then each take the median of their times (:func:`pool_times`).
Measuring holds no snapshot and never more tapes than fit in the budget; if
step 0's tape (a chain's step i) alone is over it, measuring stops there
(:class:`Refused`).  The random-number stream is put back as it was.

Measuring sums the parameters' gradients as backward does (and throws them
away), so that those additions are in ``reverse_time`` (2-3% of it on remat's
residual MLP at widths 16 and 256, measured in CPU time).  Under a policy
(``rm.Tape(policy=)``) the bytes the policy keeps over the chain are measured
too (:func:`measure_kept`).

The run that measures is the executor's own
(:meth:`ChainRun.measuring <remat.executor.ChainRun.measuring>`), driven
through its public interface: its state and position, ``carry_out`` of an
action, the tape of a step, the seed of a Reverse.
"""

from __future__ import annotations

import time

from . import alive, backend, schedules
from .alive import Holdings
from .executor import ChainRun, KeepingRun


class _DropSweep:
    """An outer sweep that sums what reaches it as backward sums a parameter's
    gradient (the first kept, the second added into a new array, the rest added in
    place), so that measuring times those additions too, and throws the sums away
    with the run: measuring must not add to ``.grad``."""

    def __init__(self):
        self.ns = backend.ARRAY_NAMESPACE
        self.create_graph = self.retain_graph = False
        self.sums = {}  # id(node) -> [node, sum, made here]

    def add(self, node, g):
        entry = self.sums.get(id(node))
        if entry is None:
            self.sums[id(node)] = [node, g, False]
        elif entry[2]:
            entry[1] += g
        else:
            entry[1] = entry[1] + g
            entry[2] = True


class _Rows:
    """Stands for a (steps, ...) array whose every row is ``row``: a scan's cotangents of
    ys, or the buffer gathering those of xs, without n rows held."""

    def __init__(self, row, steps):
        self.row = row
        self.shape = (steps, *row.shape)

    def __getitem__(self, i):
        return self.row

    def __setitem__(self, i, value):
        pass


def _ones_for(arrays):
    return [backend.ones_like(a) if backend.is_floating(a.dtype) else None for a in arrays]


def _nbytes(arrays):
    return alive.nbytes(arrays)  # each buffer once, a view as its whole base


SPAN = 64  # a loop's (or scan's) step is timed over runs of up to this many steps


class _OverBudget(Exception):
    """A tape that would take the measuring run over its budget (refused, not held)."""

    def __init__(self, held):
        super().__init__(held)
        self.held = held


class Refused(Exception):
    """Measuring stopped before holding step ``step``'s tape, which would have taken
    what it holds to ``held`` bytes, over the budget.  ``state_bytes`` and
    ``tape_bytes``: the sizes known then (a chain's other steps sized without being
    held; ``alike``: every step taken to be step 0)."""

    def __init__(self, step, held, state_bytes, tape_bytes, alike=False):
        super().__init__(step, held)
        self.step, self.held, self.alike = step, held, alike
        self.state_bytes, self.tape_bytes = state_bytes, tape_bytes


class _Refusing:
    """The measuring run's holdings: a tape that would take ``inner`` (Holdings) over
    ``budget`` is refused before it is held, so that measuring never holds more."""

    def __init__(self, budget, inner):
        self.inner = inner
        self.budget = budget

    @property
    def bytes(self):
        return self.inner.bytes

    @property
    def peak(self):
        return self.inner.peak

    def hold(self, arrays):
        held = self.inner.bytes + self.inner.adding(arrays)
        if held > self.budget:
            raise _OverBudget(held)
        self.inner.hold(arrays)

    def release(self, arrays):
        self.inner.release(arrays)


class Sizing:
    """Holdings that hold nothing and note the bytes of the last tape offered."""

    bytes = peak = last = 0

    def hold(self, arrays):
        self.last = _nbytes(arrays)

    def release(self, arrays):
        pass


def _size_the_rest(run, start, steps, state_bytes, tape_bytes):
    """From x_start (current), tape each remaining step only to learn its tape's bytes
    and drop it at once (nothing held), appending to the two lists."""
    sizing = Sizing()
    run.hold_with(sizing)
    for i in range(start, steps):
        run.move_to(i)
        run.carry_out(schedules.Tape(i, i + 1))
        run.carry_out(schedules.Discard(i, i + 1))
        tape_bytes.append(sizing.last)
        state_bytes.append(_nbytes(run.state[0]))


def _time_steps(run, held, chain, start, advance_stop, tape_stop, steps):
    """From x_start (current): advance untaped to ``advance_stop``, then from x_start
    again tape to ``tape_stop`` and reverse with cotangents of ones.  Returns
    (seconds advancing, seconds taping and reversing, bytes the tapes held (in
    ``held``, the run's holdings), the state at ``advance_stop``)."""
    here = run.state
    run.move_to(start)
    begin = time.perf_counter()
    run.carry_out(schedules.Advance(start, advance_stop))
    advanced = time.perf_counter() - begin
    after = run.state
    run.move_to(start, here)
    begin = time.perf_counter()
    run.carry_out(schedules.Tape(start, tape_stop))
    taped = time.perf_counter() - begin
    held_bytes = held.bytes
    last = run.tape_of(tape_stop - 1)
    width = len(run.spec_at(tape_stop).shapes)
    ys_cotangent = None
    if chain.has_ys:
        ys_cotangent = [
            None if g is None else _Rows(g, steps)
            for g in _ones_for(y._data for y in last.outputs[width:])
        ]
    run.seed(_ones_for(t._data for t in last.outputs[:width]), ys_cotangent)
    begin = time.perf_counter()
    run.carry_out(schedules.Reverse(start, tape_stop))
    reversed_ = taped + time.perf_counter() - begin
    run.move_to(advance_stop, after)
    return advanced, reversed_, held_bytes, after


def _time_slots(run, state_bytes, memory, repeats):
    """The least seconds of a Snapshot, a Restore and a Free of the current state, by
    kind (none if the state alone is over the budget: no plan stores it)."""
    kinds = (schedules.Snapshot, schedules.Restore, schedules.Free)
    if state_bytes > memory:
        return {}
    here, position = run.state, run.position
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeats):
        for action in (
            schedules.Snapshot(position, 0),
            schedules.Restore(position, 0),
            schedules.Free(0),
        ):
            begin = time.perf_counter()
            run.carry_out(action)
            best[type(action)] = min(best[type(action)], time.perf_counter() - begin)
    run.move_to(position, here)
    return best


def measure_costs(tape, chain, state, steps, memory, alike, holdings, repeats=5, kinds=None):
    """``(costs, peak, overhead)``: the :class:`ChainCosts` of ``chain`` from ``state``, the
    most bytes held measuring, and the seconds an action costs besides its steps
    (a dict by kind of action, for :func:`remat.memory.predicted_time`).

    Measured with the executor's own actions on a run of its own, whose
    gradients go nowhere.  ``alike`` (a loop, a scan): every step costs what the
    first do; step 0 is taped once (a warm-up, and its tape's bytes), then
    ``repeats`` times the first ``min(steps, SPAN)`` steps are advanced over
    and the first ``k`` taped and reversed, ``k`` as many tapes as fit in the
    budget (at most ``SPAN``), and each time divided by its steps (the
    least of the repeats: what another process running on the machine adds
    is noise that only ever lengthens a run).  Otherwise each step is measured once, one tape
    at a time, and the whole chain advanced over once more: what n one-step
    Advances cost beyond it is the overhead of n - 1 actions, taken out of the
    steps' times and charged per action.

    Measuring holds no more than ``memory`` (counted by ``holdings``, a
    :class:`~remat.alive.Holdings`): a tape that would take what it holds over
    the budget is refused before it is held, and :class:`Refused` raised with
    the sizes known (for a chain, the remaining steps are then taped one by
    one only to learn their tapes' bytes, each dropped at once).
    A step's tape counts what a chain run inside the step holds for its
    backward (its snapshots, tapes and kept x_0: ``executor.saved_by``).

    ``kinds`` (a chain's: one hashable key a step, :func:`step_kind`): steps
    of one kind whose states and tapes have the same shapes and bytes are the
    same layer measured again, and each takes the median of their times
    (:func:`pool_times`).
    """
    rng = backend.random_state()
    refusing = _Refusing(memory, holdings)
    xs_grads = [_Rows(backend.zeros(a.shape[1:], a.dtype, like=a), steps) for a in chain.xs]
    run = ChainRun.measuring(
        tape,
        chain,
        state,
        steps,
        refusing,
        check_values=tape.check_replay,  # the plan's re-taped steps will be checked: time it
        sink=_DropSweep(),
        xs_grads=xs_grads or None,
    )
    peak = 0
    start = run.state
    x0 = start[0]
    try:
        if alike:
            try:
                _, _, tape_bytes, after = _time_steps(run, refusing, chain, 0, 1, 1, steps)
                if steps > 1:  # x_1 may keep a larger buffer than x_0 (a view of its base),
                    # and so may every later step's tape: the loop's tape is the larger
                    tape_bytes = max(
                        tape_bytes, _time_steps(run, refusing, chain, 1, 2, 2, steps)[2]
                    )
            except _OverBudget as refused:
                sizes = [_nbytes(x0)] * (steps + 1), [refused.held] * steps
                raise Refused(0, refused.held, *sizes, alike=True) from None
            peak = tape_bytes
            fit = memory // tape_bytes if tape_bytes else SPAN  # a step may save nothing
            span, taped_span = min(steps, SPAN), max(1, min(steps, SPAN, fit))
            f_times, r_times, f_one, r_one = [], [], [], []
            for _ in range(repeats):
                run.move_to(0, start)
                f, r, held, _ = _time_steps(run, refusing, chain, 0, span, taped_span, steps)
                peak = max(peak, held)
                f_times.append(f / span)
                r_times.append(r / taped_span)
                run.move_to(0, start)
                f, r, _, _ = _time_steps(run, refusing, chain, 0, 1, 1, steps)
                f_one.append(f)
                r_one.append(r)
            f, r = min(f_times), min(r_times)
            # x_0 may be smaller than the states the step makes (a view of a larger
            # buffer: tanh(h * s)[-1]): every state is taken at the larger
            state_bytes = max(_nbytes(x0), _nbytes(after[0]))
            costs = schedules.ChainCosts.uniform(steps, f, r, state_bytes, tape_bytes)
            # what an action that runs steps costs besides them: a one-step Advance, and a
            # one-step Tape and its Reverse (two actions), less their steps' share of the runs
            each = (max(0.0, min(f_one) - f) + max(0.0, min(r_one) - r) / 2) / 2
            overhead = dict.fromkeys((schedules.Advance, schedules.Tape, schedules.Reverse), each)
            run.move_to(0, start)
            overhead.update(_time_slots(run, state_bytes, memory, repeats))
            return costs, peak, overhead
        forward, reverse, state_bytes, tape_bytes = [], [], [_nbytes(x0)], []
        for i in range(steps):
            try:
                f, r, held, after = _time_steps(run, refusing, chain, i, i + 1, i + 1, steps)
            except _OverBudget as refused:
                _size_the_rest(run, i, steps, state_bytes, tape_bytes)
                raise Refused(i, refused.held, state_bytes, tape_bytes) from None
            peak = max(peak, held)
            forward.append(f)
            reverse.append(r)
            state_bytes.append(_nbytes(after[0]))
            tape_bytes.append(held)
        overhead = {}
        if steps > 1:  # each step was timed in actions of its own: their overhead is in its
            # times; one untaped run of the whole chain tells it (what n one-step Advances
            # cost beyond one Advance of n steps), and it is charged per action instead
            run.move_to(0, start)
            begin = time.perf_counter()
            run.carry_out(schedules.Advance(0, steps))
            whole = time.perf_counter() - begin
            each = min(max(0.0, (sum(forward) - whole) / (steps - 1)), min(forward))
            forward = [f - each for f in forward]
            overhead = {schedules.Advance: each}  # a step's records are made one by one
            # whether taped in one action or many: its Tape/Reverse times keep their share
        if kinds is not None:
            specs = [run.spec_at(i) for i in range(steps + 1)]
            specs = [(s.tree, s.shapes, tuple(map(str, s.dtypes))) for s in specs]
            layers = [
                (kinds[i], specs[i], specs[i + 1], state_bytes[i + 1], tape_bytes[i])
                for i in range(steps)
            ]
            forward, reverse = pool_times(forward, layers), pool_times(reverse, layers)
        run.move_to(0, start)
        overhead.update(_time_slots(run, state_bytes[0], memory, repeats))
        return schedules.ChainCosts(forward, reverse, state_bytes, tape_bytes), peak, overhead
    finally:
        run.release()
        backend.set_random_state(rng)


def step_kind(function):
    """A key that two steps share when they run the same code on the same captured
    values: the function's code object and what it captures (defaults, closure
    cells, a bound method's instance attributes), arrays and Tensors by shape,
    dtype and device (and whether a Tensor requires grad: a step reverses into a
    parameter, not into a constant), numbers and strings by value, anything else
    by identity.  A callable
    object is its class's ``__call__`` on its attributes.  Steps of one kind, on
    states of one shape, are one layer measured again (:func:`pool_times`):
    ``[lambda h, w=w: rm.tanh(h @ w) for w in weights]`` with weights of one shape
    are all one kind.  Any other callable (a builtin, a ``functools.partial``) is
    a kind of its own."""
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    if code is None:  # a callable object: its class's __call__, on its attributes
        call = getattr(type(function), "__call__", None)
        if getattr(call, "__code__", None) is None or not hasattr(function, "__dict__"):
            return ("object", id(function))
        return (call.__code__, _attributes_kind(function))
    cells = []
    for cell in getattr(function, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            cells.append(None)
    defaults = getattr(function, "__defaults__", None) or ()
    keywords = getattr(function, "__kwdefaults__", None) or {}
    instance = getattr(function, "__self__", None)  # a bound method's
    return (
        code,
        tuple(_captured_kind(v) for v in (*defaults, *cells)),
        tuple((k, _captured_kind(v)) for k, v in keywords.items()),
        None if instance is None else _attributes_kind(instance),
    )


def _attributes_kind(instance):
    attributes = getattr(instance, "__dict__", None)
    if not isinstance(attributes, dict):
        return ("object", id(instance))
    return (type(instance), tuple((k, _captured_kind(v)) for k, v in attributes.items()))


def _captured_kind(value):
    data = getattr(value, "_data", value)  # a Tensor's array
    if backend.is_array(data):  # a parameter's step also reverses into it: not a constant's kind
        grads = bool(getattr(value, "requires_grad", False))
        return ("array", tuple(data.shape), str(data.dtype), backend.device_of(data), grads)
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return ("value", type(value), value)
    return ("object", id(value))


def pool_times(times, kinds):
    """Each time replaced by the median of the times of its kind's steps (the lower
    median, a time one of them took): the same layer, measured at several steps,
    costs the same at each, so the plan's programme sees equal steps, whose
    segments share rows (:mod:`remat.schedules.planning`), and a chain of one layer repeated
    is a loop to it.

    >>> pool_times([1.0, 5.0, 2.0, 3.0, 9.0], ["a", "b", "a", "a", "c"])
    [2.0, 5.0, 2.0, 2.0, 9.0]
    """
    members = {}
    for i, kind in enumerate(kinds):
        members.setdefault(kind, []).append(times[i])
    median = {kind: sorted(ts)[(len(ts) - 1) // 2] for kind, ts in members.items()}
    return [median[kind] for kind in kinds]


def measure_kept(tape, chain, state, steps, alike):
    """The bytes ``tape``'s policy (``rm.Tape(policy=)``) keeps over the whole chain.

    Each step's first run keeps its values until the step is reversed, and every
    step runs once in the forward sweep before the first is reversed: at that
    moment all are held, beside the plan's slots and tapes.  Measured by running
    the steps untaped once under the policy (``alike``: step 0, taken for all).
    """
    rng = backend.random_state()
    held = Holdings()
    run = KeepingRun.measuring(tape, chain, state, steps, held)  # keeps as when recomputing
    try:
        run.carry_out(schedules.Advance(0, 1 if alike else steps))
        return held.bytes * (steps if alike else 1)
    finally:
        run.release()
        backend.set_random_state(rng)
