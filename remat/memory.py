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

1. **measures** the costs with the executor itself (:mod:`remat.measure`):
   each step's time untaped and taped and reversed, and the bytes of its state
   and tape (a loop's and a scan's steps taken alike from their first steps,
   a chain's one layer repeated pooled by kind), holding no more than the
   budget; if one step's tape alone is over it, measuring stops there with the
   ValueError of a budget too small, which gives the least budget that works.
2. **plans** with :class:`~remat.schedules.Optimal` (or, asked for, revolve or
   mixed with the most slots that fit).
3. **runs** the plan with the executor, which refuses to hold more than the
   budget (a LoopError, should the chain have changed since it was measured).
   ``tape.stats.predicted_seconds`` is the plan's time under the costs, plus
   the measured overhead of each Advance, Tape and Reverse action (a one-step
   action's time beyond a step's share of a long run) and of each Snapshot,
   Restore and Free (timed on ``x_0``).

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
are measured (:func:`remat.measure.measure_kept`) and the plan made in what is left of the
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

from collections import OrderedDict

from . import backend, schedules
from .alive import Holdings, nbytes
from .executor import ChainRun, leaves_of
from .measure import Refused, Sizing, measure_costs, measure_kept, step_kind
from .measure import pool_times as pool_times  # (read here by tests and benchmarks)
from .schedules import planning
from .selective import Unobserved
from .units import format_bytes, parse_bytes

# The public names: what a user of Tape(memory=) may call.  The rest serve
# remat.budget (measure, plan, run) and are documented for readers of the code.
__all__ = ["CACHE_SIZE", "clear_plans", "parse_bytes"]

CACHE_SIZE = 32
BLOCK_LIMIT = 200  # heterogeneous chains longer than this are planned over this many blocks
EXACT_LIMIT = 320  # ... or, the budget too tight for them, this many (tables of 2 x 320^2 x 129)
UNIFORM_LIMIT = 2000  # loops (all steps alike) longer than this are planned over blocks too
SERVED = (None, "optimal", "revolve", "mixed")  # what Tape(memory=) can plan


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
                tape, chain, state, steps, memory, alike, Holdings(), kinds=kinds
            )
        except Refused as refused:  # (a step's tape alone is over the budget)
            if tape.recompute is None:
                raise _refused(tape, chain, memory, refused) from None
            kept = measure_kept(tape, chain, state, steps, alike)
            least = _refused(tape, chain, memory, refused).least
            raise _kept_too_much(chain.owner, memory, tape.recompute, kept, least) from None
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


def _refused(tape, chain, memory, refused):
    """The _TooSmall of a budget under which measuring refused a step's tape (the
    least bytes a plan needs, under the sizes measuring knew)."""
    step, held, state_bytes, tape_bytes = (
        refused.step,
        refused.held,
        refused.state_bytes,
        refused.tape_bytes,
    )
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
        if refused.alike
        else "the other steps' tapes were sized without being held"
    )
    return _TooSmall(
        need,
        f"{chain.owner}: memory={memory} bytes is too small: step {step}'s tape alone would "
        f"hold {held} bytes, and {plan} needs at least {need} bytes "
        f"({format_bytes(need)}) under the measured sizes (measuring refused that tape "
        f"before holding it; {how})",
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
    rng = backend.random_state()
    sizing = Sizing()
    run = ChainRun.measuring(tape, chain, state, steps, sizing)
    x0 = run.state[0]
    try:
        with Unobserved():
            run.carry_out(schedules.Tape(0, 1))
    finally:
        run.release()
        backend.set_random_state(rng)
    costs = schedules.ChainCosts.uniform(steps, 0.0, 0.0, nbytes(x0), sizing.last)

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
