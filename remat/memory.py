"""Byte budgets: ``rm.Tape(memory="64 MiB")`` measures a chain, plans it and runs the plan.

The memory model (that of :mod:`remat.schedules.costs`): at any moment a
chain holds the states in its slots and the step tapes it keeps.
``state_bytes[i]`` is the bytes of state ``x_i`` (every leaf);
``tape_bytes[i]`` is the bytes step ``i``'s tape keeps alive of the step's own
values (what its records hold, its output ``x_{i+1}`` among them, and its input
``x_i``, kept alive whether or not a VJP reads it), exactly as
:func:`remat.executor.saved_by` gives them to the Holdings that count
``tape.stats.peak_bytes``: by buffer, each once, a view as its whole base
(:mod:`remat.alive`).  A loop's states are all taken at the
larger of ``x_0``'s and ``x_1``'s bytes (``x_1`` may be a view of a larger
buffer than ``x_0`` is).  The budget bounds their sum.  The state being
evaluated, the cotangents, the parameters' gradients and a scan's ``ys`` are
not counted: :mod:`remat.alive` bounds them (``tracemalloc peak <= budget + X``).

Under a budget each ``tape.loop`` / ``tape.chain`` / ``tape.scan``:

1. **measures** the costs (:func:`measure_costs`) with the executor itself,
   one step at a time: step ``i`` is evaluated untaped (``forward_time[i]``,
   and ``x_{i+1}``'s bytes), then taped from ``x_i`` and reversed with a
   cotangent of ones, the gradients thrown away (``reverse_time[i]``, and
   the bytes its tape holds).  A loop's steps are all alike: the first steps
   are measured (step 0 taped once to learn its tape's bytes, then runs of up
   to :data:`SPAN` steps, as many tapes as fit in the budget, timed five
   times: the least per step; a run as long as the plan's runs of tapes
   prices the caches as the plan will meet them) and taken for every step; so are a scan's
   (its inputs ``xs[i]`` all have one shape).  A chain is measured step by
   step, once, one tape at a time; steps that are one layer repeated (the same
   code on captured values of the same shapes, :func:`step_kind`, between
   states of the same shapes, with tapes of the same bytes) then each take the
   median of their times (:func:`pool_times`).  Measuring holds no snapshot and never
   more tapes than fit in the budget; if step 0's tape (a chain's step i)
   alone is over it, measuring stops there with the ValueError of a budget
   too small.  The random-number stream is put back as it was.
2. **plans** with :class:`~remat.schedules.Optimal` (or, asked for, revolve or
   mixed with the most slots that fit).
3. **runs** the plan with the executor, which refuses to hold more than the
   budget (a LoopError, should the chain have changed since it was measured).
   ``tape.stats.predicted_seconds`` is the plan's time under the costs, plus
   the measured overhead of each Advance, Tape and Reverse action (a one-step
   action's time beyond a step's share of a long run) and of each Snapshot,
   Restore and Free (timed on ``x_0``).  Measuring sums the parameters'
   gradients as backward does (and throws them away), so that those additions
   are in ``reverse_time`` (2-3% of it on remat's residual MLP at widths 16
   and 256, measured in CPU time).

Second order (``rm.hvp``, ``rm.grad`` of ``rm.grad``) runs each chain again
with tangents: every state with its tangent, every taped step with the
tangents of the values it saves, at most twice the first-order bytes.  That
run is planned on its own (:func:`plan_with_tangents`: the measured costs
with doubled sizes, the same planner, the same budget, the first-order run's
``snapshots=`` where they fit), when it is first needed, and the plan is cached
beside the first-order one; the executor holds it to the budget too.  A step
that runs an ``rm.checkpoint`` holds the tangents of all it outputs, which may
be more than twice its tape: a tight plan for that run may then be stopped
with a LoopError (a known limit).

A reversible loop (``tape.loop(..., inverse=)``) is not planned this way: its
schedule is :class:`~remat.schedules.Reversible`, and only how many exact
states it keeps is chosen for the budget (:func:`plan_reversible`).

Under ``rm.Tape(memory=..., policy=...)`` the chain's steps keep what the
policy chooses (:mod:`remat.selective`), each from its first run until it is
reversed: all of it is held at the end of the forward sweep.  Those bytes
are measured (:func:`measure_kept`) and the plan made in what is left of the
budget, so the peak stays within it.  The measured times are those of steps
without reuse, so the prediction overestimates what recomputations cost.

The plan is cached, keyed by the functions (the objects themselves), the policy, the
shapes and dtypes of the state (and of ``xs``), the length and the budget, so
that a training loop taking a new Tape each iteration measures once.
``tape.stats.plan`` says "measured" or "reused"; ``clear_plans()`` empties the
cache (which keeps the last :data:`CACHE_SIZE` plans, and the functions of
their keys alive).

Heterogeneous chains.  :class:`Optimal`'s programme is cubic in the length
for a chain whose steps differ (measured times always differ a little), so a
chain of more than :data:`BLOCK_LIMIT` steps is planned with
``Optimal(costs, memory, blocks=BLOCK_LIMIT)``: consecutive steps are grouped
into blocks, each block has its own exact table, and the programme over the
blocks stores states at block starts (and anywhere inside the block being
reversed); the blocks start at small states (:func:`schedules.block_starts`).
A 1000-step chain plans in about 0.5 s.  The plan is optimal in that class,
not overall: on a 300-step chain of the ``widths`` kind, where the exact
programme is affordable, blocks of 5 steps gave plans 0.4% slower than the
exact ones at ten times the least memory, 3% at three times and 0.2% at 1.5
times; blocks of 2 steps 0.1%, 0.1% and 0.7% (with blocks of even lengths it
was 2%, 10% and 60%, and 0.3%, 3% and 23%; ``python -m benchmarks memory``
measures it, ``python -m benchmarks planning`` on more chains).  Measured
times always differ a little, even from one layer to an identical one; but a
chain that repeats a few layers (a transformer's blocks, a stack of one
residual block with weights of its own at each step) has its times pooled by
kind of layer, so its costs repeat exactly, its alike segments share rows
(:mod:`remat.schedules.planning`), and it is planned exactly wherever that search is
no larger than that of :data:`EXACT_LIMIT` steps that all differ (a chain
cycling through up to about 10 kinds of layer, at 1000 steps); one layer
repeated is planned as a loop.  A budget too
small for the blocks is planned over :data:`EXACT_LIMIT` blocks, then exactly
(a chain of at most EXACT_LIMIT steps), and failing that with revolve and the
most slots that fit.  A loop's steps are all alike and its programme is only
quadratic in the length (0.1 s for 1000 steps, 4-20 s for 10000), so a loop
is planned over blocks only beyond :data:`UNIFORM_LIMIT` steps (10000 steps
over 200 blocks: about 1-2 s, 0.7-3% slower than the exact plan at 3 and 30
times the least memory).
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from fractions import Fraction
from numbers import Integral

from . import alive, backend, schedules
from .alive import Holdings
from .executor import HANDLERS, ChainRun, KeepingRun, Spec, leaves_of
from .schedules import planning
from .selective import Unobserved
from .units import format_bytes

# The public names: what a user of Tape(memory=) may call.  The rest serve
# remat.budget (measure, plan, run) and are documented for readers of the code.
__all__ = ["CACHE_SIZE", "clear_plans", "parse_bytes"]

CACHE_SIZE = 32
BLOCK_LIMIT = 200  # heterogeneous chains longer than this are planned over this many blocks
EXACT_LIMIT = 320  # ... or, the budget too tight for them, this many (tables of 2 x 320^2 x 129)
UNIFORM_LIMIT = 2000  # loops (all steps alike) longer than this are planned over blocks too
SERVED = (None, "optimal", "revolve", "mixed")  # what Tape(memory=) can plan


_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# A number and a unit; signed, so that "-3 MiB" is read, then refused as under one byte.
_SIZE = re.compile(r"\s*(-?[0-9]+(?:\.[0-9]*)?|-?\.[0-9]+)\s*([A-Za-z]*)\s*")


def parse_bytes(value: int | str, where: str = "Tape") -> int:
    """A budget in bytes: an int, or a string such as ``"512 KiB"``, ``"64 MiB"``, ``"2 GB"``.

    Units: ``B``; ``kB``, ``MB``, ``GB``, ``TB`` (powers of 1000); ``KiB``,
    ``MiB``, ``GiB``, ``TiB`` (powers of 1024); case is ignored.  A number
    without a unit is bytes.  A fraction of a byte is dropped (``"1.5 kB"``
    is 1500; ``"0.5 B"`` is refused: a budget is at least one byte).
    ``where`` starts every error message (who was given the value).

    >>> from remat.memory import parse_bytes
    >>> parse_bytes('64 MiB'), parse_bytes('1.5 kB'), parse_bytes(4096)
    (67108864, 1500, 4096)
    """
    if isinstance(value, bool) or not isinstance(value, (Integral, str)):
        raise TypeError(
            f"{where}: memory must be an int number of bytes or a string such as '64 MiB', "
            f"got {value!r}"
        )
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        unit = match and _UNITS.get(match.group(2).lower() or "b")
        if not match or not unit:
            raise ValueError(
                f"{where}: memory={value!r} is not a size; write a number and a unit, "
                "e.g. '512 KiB', '64 MiB', '2 GB' (units: B, kB, MB, GB, TB, KiB, MiB, "
                "GiB, TiB)"
            )
        number = int(Fraction(match.group(1)) * unit)
    else:
        number = int(value)
    if number < 1:
        raise ValueError(f"{where}: memory must be at least 1 byte, got {value!r}")
    return number


def check_schedule(memory, snapshots, schedule):
    """Refuse what ``Tape(memory=)`` cannot serve; the schedule name it plans with.

    ``snapshots=s`` beside ``memory=`` agrees with it when ``s`` slots fit in the
    budget: it is then revolve (or ``schedule="mixed"``) with ``s`` slots, checked
    against the measured costs before it runs.  The optimal plan picks its own
    slots, so ``schedule="optimal"`` takes no ``snapshots=``.
    """
    if schedule is not None and not isinstance(schedule, str):
        raise ValueError(
            f"Tape: memory= plans the schedule from measured costs; it cannot serve the "
            f"schedule object {schedule!r} (give one or the other)"
        )
    if schedule not in SERVED:
        raise ValueError(
            f"Tape: memory= cannot serve schedule={schedule!r}, which does not plan for a "
            "byte budget; use the optimal plan (no schedule=), 'revolve' or 'mixed' (the "
            "most slots that fit), or drop memory="
        )
    if schedule is None:
        schedule = "optimal" if snapshots is None else "revolve"
    if schedule == "optimal" and snapshots is not None:
        raise ValueError(
            f"Tape: memory= with snapshots={snapshots}: the optimal plan chooses its own "
            "slots from the budget; give snapshots= only with schedule='revolve' or 'mixed' "
            "(which then check that the slots fit in the budget)"
        )
    return schedule


# --- measuring ------------------------------------------------------------------


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


class _Refusing:
    """The measuring run's holdings: a tape that would take them over ``budget`` is
    refused before it is held, so that measuring never holds more than the budget."""

    def __init__(self, budget):
        self.inner = Holdings()
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


class _Sizing:
    """Holdings that hold nothing and note the bytes of the last tape offered."""

    bytes = peak = last = 0

    def hold(self, arrays):
        self.last = _nbytes(arrays)

    def release(self, arrays):
        pass


def _size_the_rest(run, start, steps, state_bytes, tape_bytes):
    """From x_start (current), tape each remaining step only to learn its tape's bytes
    and drop it at once (nothing held), appending to the two lists."""
    run.held = _Sizing()
    run.tapes.clear()
    for i in range(start, steps):
        run.position = i
        run.tape_steps(schedules.Tape(i, i + 1))
        run.tapes.pop(i)
        tape_bytes.append(run.held.last)
        state_bytes.append(_nbytes(run.current[0]))


def _refused(tape, chain, memory, step, held, state_bytes, tape_bytes, alike=False):
    n = len(tape_bytes)
    costs = schedules.ChainCosts([0] * n, [0] * n, state_bytes, tape_bytes)
    name, snapshots = getattr(tape, "memory_schedule", None), tape.policy.snapshots
    if name in (None, "optimal"):
        name, plan = "optimal", "a valid schedule"
    else:
        plan = f"{name} with {snapshots or 1} slot{'s' if (snapshots or 1) > 1 else ''}"
    need = least_plan_bytes(name, costs, snapshots)
    how = (
        "every step is taken to be alike"
        if alike
        else "the other steps' tapes were sized without being held"
    )
    return _TooSmall(
        need,
        f"{chain.owner}: memory={memory} bytes is too small: step {step}'s tape alone would "
        f"hold {held} bytes, and {plan} needs at least {need} bytes "
        f"({format_bytes(need)}) under the measured sizes (measuring refused that tape "
        f"before holding it; {how})",
    )


def _time_steps(run, chain, start, advance_stop, tape_stop, steps, memory):
    """From x_start (current): advance untaped to ``advance_stop``, then from x_start
    again tape to ``tape_stop`` and reverse with cotangents of ones.  Returns
    (seconds advancing, seconds taping and reversing, bytes the tapes held, the
    state at ``advance_stop``)."""
    here = run.current
    run.position = start
    begin = time.perf_counter()
    run.advance(schedules.Advance(start, advance_stop))
    advanced = time.perf_counter() - begin
    after = run.current
    run.current, run.position = here, start
    begin = time.perf_counter()
    run.tape_steps(schedules.Tape(start, tape_stop))
    taped = time.perf_counter() - begin
    held = run.held.bytes
    last = run.tapes[tape_stop - 1]
    width = len(run.spec_at(tape_stop).shapes)
    run.cotangent = _ones_for(t._data for t in last.outputs[:width])
    if chain.has_ys:
        run.ys_cotangent = [
            None if g is None else _Rows(g, steps)
            for g in _ones_for(y._data for y in last.outputs[width:])
        ]
    begin = time.perf_counter()
    run.reverse(schedules.Reverse(start, tape_stop))
    reversed_ = taped + time.perf_counter() - begin
    run.current = after
    return advanced, reversed_, held, after


def _time_slots(run, state_bytes, memory, repeats):
    """The least seconds of a Snapshot, a Restore and a Free of the current state, by
    kind (none if the state alone is over the budget: no plan stores it)."""
    kinds = (schedules.Snapshot, schedules.Restore, schedules.Free)
    if state_bytes > memory:
        return {}
    here, position = run.current, run.position
    best = dict.fromkeys(kinds, float("inf"))
    for _ in range(repeats):
        for action in (schedules.Snapshot(position, 0), schedules.Restore(position, 0)):
            begin = time.perf_counter()
            HANDLERS[type(action)](run, action)
            best[type(action)] = min(best[type(action)], time.perf_counter() - begin)
        begin = time.perf_counter()
        run.free(schedules.Free(0))
        best[schedules.Free] = min(best[schedules.Free], time.perf_counter() - begin)
    run.current, run.position = here, position
    return best


def measure_costs(tape, chain, state, steps, memory, alike, repeats=5, kinds=None):
    """``(costs, peak, overhead)``: the :class:`ChainCosts` of ``chain`` from ``state``, the
    most bytes held measuring, and the seconds an action costs besides its steps
    (a dict by kind of action, for :func:`predicted_time`).

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

    Measuring holds no more than ``memory``: a tape that would take what it
    holds over the budget is refused before it is held, and a ValueError
    says the least any plan needs (for a chain, the remaining steps are then
    taped one by one only to learn their tapes' bytes, each dropped at once).
    A step's tape counts what a chain run inside the step holds for its
    backward (its snapshots, tapes and kept x_0: ``executor.saved_by``).

    ``kinds`` (a chain's: one hashable key a step, :func:`step_kind`): steps
    of one kind whose states and tapes have the same shapes and bytes are the
    same layer measured again, and each takes the median of their times
    (:func:`pool_times`).
    """
    x0, x0_nodes, tree = leaves_of(state, "the initial state")
    rng = backend.random_state()
    run = ChainRun(
        tape, chain, schedules.StoreAll(steps), x0, x0_nodes, Spec.of(tree, x0), None, None
    )
    run.held = _Refusing(memory)
    run.check_values = tape.check_replay  # the plan's re-taped steps will be checked: time it
    run.outer_sweep = _DropSweep()
    if chain.xs:
        run.xs_grads = [_Rows(backend.zeros(a.shape[1:], a.dtype, like=a), steps) for a in chain.xs]
    peak = 0
    start = run.current
    try:
        if alike:
            try:
                _, _, tape_bytes, after = _time_steps(run, chain, 0, 1, 1, steps, memory)
                if steps > 1:  # x_1 may keep a larger buffer than x_0 (a view of its base),
                    # and so may every later step's tape: the loop's tape is the larger
                    tape_bytes = max(tape_bytes, _time_steps(run, chain, 1, 2, 2, steps, memory)[2])
            except _OverBudget as refused:
                sizes = [_nbytes(x0)] * (steps + 1), [refused.held] * steps
                raise _refused(tape, chain, memory, 0, refused.held, *sizes, alike=True) from None
            peak = tape_bytes
            fit = memory // tape_bytes if tape_bytes else SPAN  # a step may save nothing
            span, taped_span = min(steps, SPAN), max(1, min(steps, SPAN, fit))
            f_times, r_times, f_one, r_one = [], [], [], []
            for _ in range(repeats):
                run.current = start
                f, r, held, _ = _time_steps(run, chain, 0, span, taped_span, steps, memory)
                peak = max(peak, held)
                f_times.append(f / span)
                r_times.append(r / taped_span)
                run.current = start
                f, r, _, _ = _time_steps(run, chain, 0, 1, 1, steps, memory)
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
            run.current, run.position = start, 0
            overhead.update(_time_slots(run, state_bytes, memory, repeats))
            return costs, peak, overhead
        forward, reverse, state_bytes, tape_bytes = [], [], [_nbytes(x0)], []
        for i in range(steps):
            try:
                f, r, held, after = _time_steps(run, chain, i, i + 1, i + 1, steps, memory)
            except _OverBudget as refused:
                _size_the_rest(run, i, steps, state_bytes, tape_bytes)
                raise _refused(
                    tape, chain, memory, i, refused.held, state_bytes, tape_bytes
                ) from None
            peak = max(peak, held)
            forward.append(f)
            reverse.append(r)
            state_bytes.append(_nbytes(after[0]))
            tape_bytes.append(held)
        overhead = {}
        if steps > 1:  # each step was timed in actions of its own: their overhead is in its
            # times; one untaped run of the whole chain tells it (what n one-step Advances
            # cost beyond one Advance of n steps), and it is charged per action instead
            run.current, run.position = start, 0
            begin = time.perf_counter()
            run.advance(schedules.Advance(0, steps))
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
        run.current, run.position = start, 0
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
    x0, x0_nodes, tree = leaves_of(state, "the initial state")
    rng = backend.random_state()
    run = KeepingRun(  # keeping as under a schedule that recomputes
        tape, chain, schedules.StoreAll(steps), x0, x0_nodes, Spec.of(tree, x0), None, None
    )
    run.held = Holdings()
    try:
        run.advance(schedules.Advance(0, 1 if alike else steps))
        return run.held.bytes * (steps if alike else 1)
    finally:
        run.release()
        backend.set_random_state(rng)


# --- planning -------------------------------------------------------------------


class _TooSmall(ValueError):
    """A budget too small for a chain; ``least``: the fewest bytes that would do."""

    def __init__(self, least, message):
        super().__init__(message)
        self.least = least


def _too_small(form, memory, need):
    return _TooSmall(
        need,
        f"{form}: memory={memory} bytes is too small for this chain: a valid schedule "
        f"needs at least {need} bytes ({format_bytes(need)}) under the measured costs",
    )


def plan_optimal(costs, memory, form="Tape", block_limit=None):
    """The Optimal plan for ``costs`` in ``memory`` bytes: exact for a loop of at most
    :data:`UNIFORM_LIMIT` steps or a chain of at most ``block_limit``
    (:data:`BLOCK_LIMIT`) steps, otherwise over that many blocks,
    then (a budget too tight for them) over :data:`EXACT_LIMIT` blocks, then revolve with
    the most slots that fit (see the module docstring)."""
    limit = BLOCK_LIMIT if block_limit is None else block_limit
    n = costs.steps
    if n > (UNIFORM_LIMIT if _alike(costs) else limit) and not _shares_enough(costs):
        for blocks in dict.fromkeys((limit, max(limit, min(n - 1, EXACT_LIMIT)))):
            try:
                return schedules.Optimal(costs, memory, blocks=blocks)
            except ValueError as error:
                if "too small" not in str(error):
                    raise
        if n > EXACT_LIMIT:
            need = schedules.minimum_bytes(costs)
            if memory < need:
                raise _too_small(form, memory, need)
            return fitting_slots("revolve", costs, memory, form=form)
    try:
        return schedules.Optimal(costs, memory)
    except ValueError as error:
        if "too small" in str(error):
            raise _too_small(form, memory, schedules.minimum_bytes(costs)) from None
        raise


def _shares_enough(costs):
    """Whether a heterogeneous chain's exact programme, its alike segments sharing rows
    (a chain of a few layers repeated, their times pooled), searches no more splits
    than that of a chain of :data:`EXACT_LIMIT` steps that all differ (about 1-2 s)."""
    n = costs.steps
    most = (EXACT_LIMIT - 1) * EXACT_LIMIT * (EXACT_LIMIT + 1) // 6
    # every length of segment has one class at least, so the search visits n (n - 1) / 2
    # cells or more: a longer chain cannot share enough, and its classes go unsought
    # (finding them costs seconds at 10^4 steps)
    if _alike(costs) or n * (n - 1) // 2 > most:
        return False
    args = costs.state_bytes, costs.tape_bytes, costs.forward_time, costs.reverse_time
    shared, cells = planning.split_cells(*args)
    return shared and cells <= most


def _alike(costs):
    n = costs.steps
    return (
        len(set(costs.tape_bytes)) == len(set(costs.forward_time)) == 1
        and len(set(costs.reverse_time)) == len(set(costs.state_bytes[:n])) == 1
    )


def fitting_slots(name, costs, memory, snapshots=None, form="Tape"):
    """Revolve or Mixed with ``snapshots`` slots (checked to fit in ``memory`` under
    ``costs``), or with the most slots that fit."""
    n = costs.steps

    def make(s):
        return schedules.make_schedule(name, steps=n, snapshots=s)

    def peak(s):
        return schedules.simulate(make(s), costs).peak_bytes

    if snapshots is not None:
        need = peak(snapshots)
        if need > memory:
            raise ValueError(
                f"{form}: snapshots={snapshots} and memory={memory} bytes disagree: {name} with "
                f"{snapshots} slots holds up to {need} bytes under the measured costs"
            )
        return make(snapshots)
    if peak(1) > memory:
        raise ValueError(
            f"{form}: memory={memory} bytes is too small for {name}: with one slot it holds "
            f"{peak(1)} bytes under the measured costs"
        )
    lo, hi = 1, n  # the most slots that fit, by bisection (the peak grows with the slots)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if peak(mid) <= memory:
            lo = mid
        else:
            hi = mid - 1
    return make(lo)


# --- the cache ------------------------------------------------------------------

_PLANS: OrderedDict = OrderedDict()


def clear_plans() -> None:
    """Forget every cached plan (the next chain under a budget is measured again).

    >>> import remat as rm
    >>> from remat.memory import clear_plans
    >>> step = lambda h: rm.tanh(h)
    >>> def run():
    ...     with rm.Tape(memory='1 MiB') as tape:
    ...         tape.loop(step, rm.ones(64, requires_grad=True), steps=10)
    ...     return tape.stats.plan
    >>> run(), run()
    ('measured', 'reused')
    >>> clear_plans()
    >>> run()
    'measured'
    """
    _PLANS.clear()


def _spec_key(tree_and_arrays):
    tree, arrays = tree_and_arrays
    return tree, tuple((a.shape, str(a.dtype)) for a in arrays)


def plan_chain(tape, chain, state, steps, functions, alike):
    """``(schedule, costs, predicted seconds, how, with tangents)`` for ``chain`` under
    ``tape``'s budget: from the cache ("reused") or measured and planned now
    ("measured"); the last is a callable that gives the plan of the chain's run
    with tangents (planned when first called, then cached)."""
    memory, name, snapshots = tape.byte_limit, tape.memory_schedule, tape.policy.snapshots
    x0, _, tree = leaves_of(state, "the initial state")
    key = (
        chain.owner,
        tuple(functions),
        _spec_key((tree, x0)),
        _spec_key((chain.xs_tree, chain.xs)),
        steps,
        memory,
        name,
        snapshots,
        tape.recompute,
    )
    try:
        entry = _PLANS.get(key)
    except TypeError:  # an unhashable function (or tree): plan every time
        key, entry = None, None
    if entry is not None:
        _PLANS.move_to_end(key)
        planner = _tangent_planner(entry, memory, name, snapshots, chain.owner)
        return (*entry[:3], "reused", planner)
    with Unobserved():  # a policy around this chain sees the chain's run, not these
        kinds = None if alike else [step_kind(f) for f in functions]
        try:
            costs, _, overhead = measure_costs(
                tape, chain, state, steps, memory, alike, kinds=kinds
            )
        except _TooSmall as error:  # (step 0's tape alone is over the budget)
            if tape.recompute is None:
                raise
            kept = measure_kept(tape, chain, state, steps, alike)
            raise _kept_too_much(chain.owner, memory, tape.recompute, kept, error.least) from None
        kept = 0 if tape.recompute is None else measure_kept(tape, chain, state, steps, alike)
    room = memory - kept  # what the slots and tapes may hold beside the policy's values
    try:
        if room < 1:
            raise ValueError("nothing is left for the plan")
        if name == "optimal":
            schedule = plan_optimal(costs, room, chain.owner)
        else:
            schedule = fitting_slots(name, costs, room, snapshots, chain.owner)
    except ValueError:
        if not kept:
            raise
        need = least_plan_bytes(name, costs, snapshots)
        raise _kept_too_much(chain.owner, memory, tape.recompute, kept, need) from None
    predicted = predicted_time(schedule, costs, overhead)
    entry = [schedule, costs, predicted, None]  # the last: the plan with tangents, once made
    if key is not None:
        _PLANS[key] = entry
        while len(_PLANS) > CACHE_SIZE:
            _PLANS.popitem(last=False)
    with_tangents = _tangent_planner(entry, memory, name, snapshots, chain.owner)
    return schedule, costs, predicted, "measured", with_tangents


def _kept_too_much(form, memory, policy, kept, need):
    least = kept + need
    return _TooSmall(
        least,
        f"{form}: memory={memory} bytes is too small with policy {policy!r}: it keeps "
        f"{kept} bytes over the chain's steps (each step's values from its first run until "
        f"it is reversed), and the plan's slots and tapes need {need} bytes at least beside "
        f"them: the least budget that works is memory={least} bytes ({format_bytes(least)})",
    )


def least_plan_bytes(name, costs, snapshots=None):
    """The fewest bytes a plan named ``name`` (``"optimal"``, or revolve or mixed with
    ``snapshots`` slots, or one) holds for ``costs``: the least budget it fits in."""
    if name == "optimal":
        return schedules.minimum_bytes(costs)
    plan = schedules.make_schedule(name, steps=costs.steps, snapshots=snapshots or 1)
    return schedules.simulate(plan, costs).peak_bytes


def plan_reversible(tape, chain, state, steps):
    """``(Reversible schedule, costs)`` for a loop with an inverse under ``tape``'s budget.

    A reversible loop holds the state under reversal, one step's tape and its
    ``s - 1`` exact states (``x_0`` first): step 0 is taped once, only to learn
    its tape's bytes, and ``s`` is ``snapshots=`` if given (checked to fit), else
    2 (``x_0`` kept, so that the drift is checked) where that fits, else 1.  A
    budget below one slot's peak raises a ValueError giving that least budget.
    """
    x0, x0_nodes, tree = leaves_of(state, "the initial state")
    rng = backend.random_state()
    run = ChainRun(
        tape, chain, schedules.StoreAll(steps), x0, x0_nodes, Spec.of(tree, x0), None, None
    )
    run.held = sizing = _Sizing()
    try:
        with Unobserved():
            run.tape_steps(schedules.Tape(0, 1))
    finally:
        run.release()
        backend.set_random_state(rng)
    costs = schedules.ChainCosts.uniform(steps, 0.0, 0.0, _nbytes(x0), sizing.last)

    def peak(s):
        return schedules.simulate(schedules.Reversible(steps, s), costs).peak_bytes

    memory, wanted = tape.byte_limit, tape.policy.snapshots
    s = wanted or (2 if peak(2) <= memory else 1)
    if peak(s) > memory:
        what = f"snapshots={s}" + ("" if wanted else " (the fewest: no exact state kept)")
        raise _TooSmall(
            peak(s),
            f"tape.loop(inverse=...): memory={memory} bytes is too small for this reversible "
            f"loop with {what}: it holds the state under reversal ({costs.state_bytes[0]} "
            f"bytes a state), its exact states and one step's tape ({costs.tape_bytes[0]} "
            f"bytes), {peak(s)} bytes at least: the least budget that works is memory="
            f"{peak(s)} bytes ({format_bytes(peak(s))})",
        )
    return schedules.Reversible(steps, s), costs


def _tangent_planner(entry, memory, name, snapshots, form):
    """A callable that gives (and keeps in the cache ``entry``) the plan of the chain's
    run with tangents: :func:`plan_with_tangents` for the entry's costs."""

    def plan():
        if entry[3] is None:
            entry[3] = plan_with_tangents(entry[1], memory, name, form, snapshots)
        return entry[3]

    return plan


def plan_with_tangents(costs, memory, name="optimal", form="Tape", snapshots=None):
    """The plan of a chain's run with tangents (``rm.hvp``, ``rm.grad`` of ``rm.grad``)
    within ``memory`` bytes: that run holds each state with its tangent, and each
    taped step's tape with the tangents of the step's own values it saves (one a
    saved array), so at most twice the first-order bytes, and it is planned as the
    chain whose sizes are doubled, by the same planner (``name``: ``"optimal"``, or
    revolve or mixed: with ``snapshots`` slots, the first-order run's, where they
    fit, else the most that fit).  The times are the first-order ones (a step with
    tangents costs more, alike at every step).

    >>> from remat import schedules
    >>> costs = schedules.ChainCosts.uniform(20, 1.0, 2.0, 100, 300)
    >>> plan_with_tangents(costs, 1500).predicted_peak_bytes <= 1500
    True
    """
    doubled = schedules.ChainCosts(
        costs.forward_time,
        costs.reverse_time,
        [2 * s for s in costs.state_bytes],
        [2 * t for t in costs.tape_bytes],
    )
    try:
        if name == "optimal":
            return plan_optimal(doubled, memory, form)
        if snapshots is not None:
            try:
                return fitting_slots(name, doubled, memory, snapshots, form)
            except ValueError:  # s slots of doubled sizes are over the budget: fewer
                pass
        return fitting_slots(name, doubled, memory, None, form)
    except ValueError as error:
        raise ValueError(
            f"{form}: memory={memory} bytes is too small for the chain's run with tangents "
            "(rm.hvp, rm.grad of rm.grad), which holds each state with its tangent and each "
            f"step's tape with the tangents it saves, twice the bytes: "
            f"{str(error).removeprefix(f'{form}: ')}"
        ) from None


def predicted_time(schedule, costs, overhead=None):
    """The schedule's time under ``costs`` (its steps: an Optimal plan knows it), plus
    ``overhead[kind]`` seconds for each action of that kind (a dict; by the
    measurement, Advance, Tape and Reverse for a loop or scan, Advance for a chain,
    whose steps' taped times were measured one action each)."""
    known = getattr(schedule, "predicted_time", None)
    if known is None:
        known = schedules.simulate(schedule, costs).time
    if not overhead:
        return known
    return known + sum(overhead.get(type(action), 0.0) for action in schedule)
