"""The budgeted Tape: ``rm.Tape(snapshots=s, schedule=...)`` and its three loop forms.

A :class:`Tape` is a recording tape (:class:`remat.tape.Recorder`) that also
says how the chains run on it are reversed: which schedule, and with how
many snapshot slots.  Its three forms all become one chain for the executor
(:mod:`remat.executor`):

* ``tape.loop(step, state, steps=n)``: ``state = step(state)`` n times (or
  ``until=predicate``, for a loop of unknown length: online checkpointing);
* ``tape.chain(functions, state)``: ``state = f(state)`` for each f, whose
  shapes, dtypes and structure may change from one to the next;
* ``tape.scan(f, init, xs)``: ``carry, y = f(carry, x)`` over the leading
  axis of ``xs``, as ``jax.lax.scan``; returns ``(carry, ys)``.

States, carries, inputs and outputs are pytrees of Tensors (or arrays).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import backend, policies, schedules
from . import disk as _disk
from . import memory as _memory
from .executor import Chain, LoopError, LoopStats, run_chain
from .graph import dtr as _dtr
from .graph import options as _dtr_options
from .graph import planned as _planned
from .pytree import flatten
from .schedules.arguments import require_count
from .tape import Recorder
from .tape_options import check_disk_dir, reversal_of
from .tensor import Tensor

if TYPE_CHECKING:
    from .typing import PyTree


class Tape(Recorder):
    """A recording tape with a budget: ``with rm.Tape(snapshots=8) as tape:``.

    ``Tape(snapshots=s)`` reverses its loops, chains and scans with the
    binomial revolve schedule keeping at most ``s`` states; ``schedule=``
    picks another ("store_all", "sqrt", "periodic", "online", "mixed", or a
    schedule object from :mod:`remat.schedules`).  The budget is for revolve,
    periodic, online and mixed; store_all and sqrt size their memory
    themselves and do not use it.  ``Tape()`` alone stores everything.

    ``check_replay`` checks that recomputed steps give what they gave the first
    time: always the structure, shapes and dtypes of their outputs, and the values
    where taped runs meet (each taped step must return the state the next step was
    taped at, the last one the forward's x_n, a scan's y_i its first run's), so the
    gradient follows one trajectory from x_0 to x_n (:mod:`remat.executor.replay`;
    its memory does not grow with n).  Values are compared by a CRC-32 of about 64
    elements of each array, at any state size; ``"full"`` reads every element,
    ``False`` checks no values.  ``trace=True`` records the bytes held
    after every action (for :func:`remat.plot.memory_timeline`);
    ``snapshot_device="cpu"`` keeps snapshots in host memory while the steps
    run on the GPU.  ``policy`` (:mod:`remat.policies`, any callable
    ``policy(op_name, value_name) -> bool`` called positionally) is selective
    recomputation inside the steps: a step's first run keeps the op outputs it
    chooses, held (and counted in ``tape.stats.peak_bytes``) until the step is
    reversed, and every recomputation of that step reuses them (store_all keeps
    nothing); None or ``save_nothing`` keeps nothing.  With ``memory=``, the plan is
    made in what is left of the budget once the policy's kept values are counted.
    (``tape.recompute`` is the policy given; ``tape.policy`` the schedule and slots.)

    ``memory=`` is a budget in bytes (an int, or ``"512 KiB"``, ``"64 MiB"``,
    ``"2 GB"``): each loop, chain and scan is measured, planned with
    :class:`remat.schedules.Optimal` (``schedule=None`` or ``"optimal"``) and
    run within it (:mod:`remat.memory`); ``tape.stats.peak_bytes`` never
    exceeds it (nor does the run with tangents of ``rm.hvp`` or ``rm.grad``
    of ``rm.grad``, which has a plan of its own for its doubled sizes), and
    ``tape.plans`` lists each chain's (schedule, measured costs).
    With ``snapshots=s`` (and ``schedule="revolve"``, the default then, or
    ``"mixed"``) the two must agree: ``s`` slots must fit in the
    budget under the measured costs; ``"revolve"`` or ``"mixed"`` without
    ``snapshots=`` take the most slots that fit.  Other schedules are refused.

    ``disk_snapshots=d`` adds ``d`` disk slots to the ``s`` memory slots of
    ``snapshots=s`` (which may then be 0): its chains run the optimal two-level
    schedule (:class:`remat.schedules.TwoLevel`) with write and read costs measured
    on the first chain (:mod:`remat.disk`).  Snapshots are files in a fresh folder
    inside ``disk_dir`` (an existing folder; None: the system's temporary folder),
    removed after backward, on any error and at exit, each checked by size once
    written (:mod:`remat.storage`, :class:`remat.DiskError`); ``tape.stats`` counts
    the disk writes, reads and bytes.  ``disk_dir`` also serves a schedule object
    that writes to disk (``schedule=DiskRevolve(...)``).

    ``tape.loop(..., inverse=inv)`` reverses a loop of invertible steps by
    recomputing its states backwards, on any tape (see :meth:`loop`).

    ``remat="dtr"`` (or ``remat=remat.graph.DTR(heuristic)``) with ``memory=m`` keeps
    any code run inside within ``m`` bytes of saved values, evicting and recomputing
    them (:mod:`remat.graph.dtr`; ``"optimal"``: by a plan, :mod:`remat.graph.planned`).

    A tape keeps every record made on it, and a chain's record keeps its
    snapshots until the chain is reversed: evaluate without gradients under
    ``rm.no_grad()``, or take a new Tape for each iteration of a training loop.

    >>> import remat as rm
    >>> w = rm.tensor([0.5], requires_grad=True)
    >>> with rm.Tape(snapshots=3) as tape:
    ...     h = tape.loop(lambda h: rm.tanh(h * w), rm.ones(1), steps=20)
    ...     loss = h.sum()
    >>> loss.backward()
    >>> tape.stats.steps, tape.stats.forward_steps, tape.stats.peak_snapshots  # revolve
    (20, 65, 3)
    """

    def __init__(
        self,
        snapshots: int | None = None,
        schedule: str | schedules.Schedule | None = None,
        trace: bool = False,
        snapshot_device: str | None = None,
        check_replay: bool | str = True,
        policy: policies.Policy | Callable[[str, str | None], bool] | None = None,
        memory: int | str | None = None,
        disk_snapshots: int | None = None,
        disk_dir: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
        remat: str | _dtr_options.DTR | _dtr_options.Planned | None = None,
    ) -> None:
        super().__init__()
        dtr = None  # remat="dtr": memory= is DTR's budget, not the loops'
        if remat is not None:
            dtr, dtr_budget = _dtr_options.resolve(
                remat,
                memory,
                snapshots=snapshots,
                schedule=schedule,
                policy=policy,
                disk_snapshots=disk_snapshots,
                trace=trace,
                snapshot_device=snapshot_device,
            )
            memory = None
        self.disk_dir = check_disk_dir(disk_dir, disk_snapshots, schedule)
        # what its chains are reversed with; the byte budget; the disk slots
        self.policy, self.byte_limit, self.memory_schedule, self.disk_snapshots = reversal_of(
            snapshots, schedule, memory, disk_snapshots
        )
        # rm.policies: what the first run of each step keeps for its recomputations
        self.recompute = policies.resolve(policy, "Tape")
        self.loops: list[LoopStats] = []  # the LoopStats of each chain run on this tape
        # under memory=: (schedule, measured ChainCosts) of each chain
        self.plans: list[tuple[Any, Any]] = []
        self.trace = trace
        if check_replay not in (True, False, "full"):
            raise ValueError(
                f"Tape: check_replay must be True, False or 'full', got {check_replay!r}"
            )
        self.check_replay = check_replay
        self.snapshot_device = snapshot_device and backend.check_device(snapshot_device)
        self.dtr_cache = None if dtr is None else _planned.cache(dtr_budget, dtr, check_replay)
        if dtr is not None:
            self.records = _dtr.Records()  # refuses a loop's or checkpoint's record

    @property
    def stats(self) -> Any:
        """Counts of the chains run on this tape, added up (see :class:`LoopStats`); under
        ``remat=``: :class:`remat.graph.DTRStats` (a PlanStats of the latest run if planned)."""
        if self.dtr_cache is not None:
            return self.dtr_cache.stats
        return LoopStats.combine(self.loops)

    def __enter__(self) -> Tape:
        if self.dtr_cache is not None:
            _planned.entered(self)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> bool:
        if self.dtr_cache is not None:
            _dtr.exited()
        return super().__exit__(*exc)

    def __repr__(self) -> str:
        kept = "" if self.recompute is None else f", policy={self.recompute!r}"
        return f"<Tape {len(self.records)} records, {self.policy!r}{kept}>"

    # --- the three forms ------------------------------------------------------------
    def loop(
        self,
        step: Callable[[PyTree], PyTree],
        state: PyTree,
        steps: int | None = None,
        until: Callable[[PyTree], Any] | None = None,
        max_steps: int | None = None,
        inverse: Callable[[PyTree], PyTree] | None = None,
    ) -> PyTree:
        """Run ``state = step(state)`` under this tape's budget; return the final state.

        ``step`` maps a state (a Tensor, or a pytree of Tensors: tuples, lists,
        dicts) to a new state of the same structure, shapes and dtypes; it may
        close over Tensors that require gradients (parameters), and gradients
        reach them and the initial state.  Pass ``steps=n`` for a loop of known
        length (an offline schedule), or ``until=predicate`` (checked after
        each step, with optional ``max_steps``) for a loop of unknown length
        (online checkpointing).

        ``inverse`` (with ``steps=``) is the step's inverse, ``inverse(x_{i+1})
        == x_i``, called under ``rm.no_grad()`` on a state of Tensors: the loop
        is then reversed by recomputing its states backwards
        (:class:`remat.schedules.Reversible`), whatever the tape's schedule,
        holding the state under reversal, ``x_0`` and one step's tape.  With
        ``rm.Tape(snapshots=s)`` (``s`` memory slots, of a disk tape too)
        ``s - 1`` exact states, ``x_0`` first, are stored evenly spaced, to
        bound the drift of the floating-point inverse (``s=1`` stores none:
        the drift is then not seen); ``tape.stats.reconstruction_error`` is
        the largest relative difference seen where a recomputed state meets
        an exact one (and ``inverse(step(x_0))`` against ``x_0``, checked
        first).  One above the square root of the dtype's epsilon raises a
        LoopError, as does an inverse that returns a NaN or an inf.  Under
        ``rm.Tape(memory=)`` the slots are those that fit the budget
        (:func:`remat.memory.plan_reversible`).  The steps must not draw
        random numbers.  The replay check compares structure, shapes and
        dtypes only: the states a reversible loop tapes from are recomputed,
        so their values differ by rounding.

        >>> import remat as rm
        >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
        >>> with rm.Tape(snapshots=2, schedule="online") as tape:
        ...     h = tape.loop(lambda h: h * 0.5, x, until=lambda h: h.sum().item() < 0.1)
        >>> h.sum().backward(); tape.stats.steps, x.grad
        (5, array([0.03125, 0.03125]))
        """
        if self.dtr_cache is not None:
            raise _dtr_options.refuse("tape.loop")
        steps, max_steps = _check_loop_args(step, steps, until, max_steps, inverse)
        _check_state("tape.loop", state)
        if steps == 0:
            return state
        chain = Chain(
            "tape.loop",
            lambda i, s, x: (step(s), None),
            _step_name,
            same_spec=True,
            step=step,
            inverse=inverse,
        )
        if inverse is not None and steps is not None:  # (until= was refused with inverse=)
            return _reversible(self, chain, state, steps)
        if self.disk_snapshots is not None:
            if until is not None:
                raise ValueError(
                    "tape.loop(until=...): a disk tape plans a loop of known length (the "
                    "two-level schedule is offline); give steps="
                )
            return _on_disk(self, chain, state, steps, (step,))[0]
        if self.byte_limit is not None:
            if until is not None:
                raise ValueError(
                    "tape.loop(until=...): a loop of unknown length cannot be planned for "
                    "a byte budget (Tape(memory=)); give steps=, or use "
                    "Tape(snapshots=s, schedule='online')"
                )
            return _budgeted(self, chain, state, steps, (step,), alike=True)[0]
        schedule = self.policy.online() if until is not None else self.policy.offline(steps)
        if steps is not None and schedule.steps is None:  # an online schedule, known length
            max_steps = steps
        return run_chain(self, chain, state, schedule, until, max_steps)[0]

    def chain(self, functions: Sequence[Callable[[PyTree], PyTree]], state: PyTree) -> PyTree:
        """Run ``state = f(state)`` for each ``f`` in ``functions``, reversed under the budget.

        The functions may change the state's shapes, dtypes and structure from
        one to the next (a network whose layers differ).  With
        ``Tape(snapshots=s)`` it is revolve over the chain, with the same step
        counts as :meth:`loop`.

        >>> import remat as rm
        >>> x = rm.ones(4, requires_grad=True)
        >>> layers = [lambda h: h * 2.0, lambda h: h.reshape(2, 2), lambda h: h.sum(axis=1)]
        >>> with rm.Tape(snapshots=1) as tape:
        ...     out = tape.chain(layers, x)
        >>> out
        tensor([4., 4.], op=loop_output)
        >>> out.sum().backward(); x.grad
        array([2., 2., 2., 2.])
        """
        if self.dtr_cache is not None:
            raise _dtr_options.refuse("tape.chain")
        functions = _check_functions(functions)
        _check_state("tape.chain", state)
        n = len(functions)
        name = _chain_step_name(functions)
        chain = Chain("tape.chain", lambda i, s, x: (functions[i](s), None), name, same_spec=False)
        if self.disk_snapshots is not None:
            return _on_disk(self, chain, state, n, functions)[0]
        if self.byte_limit is not None:
            return _budgeted(self, chain, state, n, functions, alike=False)[0]
        schedule = self.policy.offline(n, "tape.chain")
        return run_chain(self, chain, state, schedule, max_steps=_online_end(schedule, n))[0]

    def scan(
        self, f: Callable[[PyTree, PyTree], tuple[PyTree, PyTree]], init: PyTree, xs: PyTree
    ) -> tuple[PyTree, PyTree]:
        """``jax.lax.scan``: ``carry, y = f(carry, x)`` for each leading-axis slice x of xs.

        Returns ``(carry, ys)`` where ``ys`` stacks the ``y``s along a new
        leading axis (or is None when f returns None for y).  ``xs`` is a
        Tensor or pytree of Tensors whose leaves share their leading axis; the
        carry keeps its structure, shapes and dtypes, and may hold no Tensor
        (``init=None`` maps f over xs).  Gradients reach ``xs``
        (gathered in one buffer), ``init`` and the parameters f closes over.

        >>> import remat as rm
        >>> xs = rm.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> with rm.Tape(snapshots=1) as tape:
        ...     total, partial = tape.scan(lambda c, x: (c + x, c * x), rm.zeros(()), xs)
        >>> total, partial
        (tensor(6., op=loop_output), tensor([0., 2., 9.], op=loop_output))
        >>> (total + partial.sum()).backward(); xs.grad
        array([6., 5., 4.])
        """
        if self.dtr_cache is not None:
            raise _dtr_options.refuse("tape.scan")
        if not callable(f):
            raise TypeError(f"tape.scan: f must be callable, got {f!r}")
        tensors, xs_tree, n = _scan_inputs(xs)
        nodes = tuple(t.node or None for t in tensors)
        chain = Chain(
            "tape.scan",
            _scan_step(f),
            lambda i: f"tape.scan: step {i}",
            same_spec=True,
            xs=tuple(t._data for t in tensors),
            xs_nodes=nodes,
            xs_tree=xs_tree,
            has_ys=True,
        )
        if self.disk_snapshots is not None:
            return _on_disk(self, chain, init, n, (f,))
        if self.byte_limit is not None:
            return _budgeted(self, chain, init, n, (f,), alike=True)
        schedule = self.policy.offline(n, "tape.scan")
        # ys is None when every y is
        return run_chain(self, chain, init, schedule, max_steps=_online_end(schedule, n))


def _chain_step_name(functions):
    return lambda i: f"tape.chain: step {i} ({getattr(functions[i], '__name__', 'function')})"


def _scan_step(f):
    """A scan's step as the executor calls it, refusing an f that returns no pair."""

    def call(i, carry, x):
        out = f(carry, x)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise LoopError(
                f"tape.scan: step {i}: f must return a pair (carry, y), got {type(out).__name__}"
            )
        return out

    return call


def _check_functions(functions):
    """tape.chain's functions as a list, refused unless a non-empty sequence of callables."""
    try:
        functions = list(functions)
    except TypeError:
        raise TypeError(
            f"tape.chain: functions must be a sequence of callables, got {functions!r}"
        ) from None
    if not functions:
        raise ValueError("tape.chain: the chain is empty; give at least one function")
    for k, f in enumerate(functions):
        if not callable(f):
            raise TypeError(f"tape.chain: functions[{k}] is not callable: {f!r}")
    return functions


def _reversible(tape, chain, state, steps):
    """Run a loop of invertible steps, recomputing its states backwards."""
    if tape.byte_limit is not None:  # as many exact states as fit (2 at most)
        schedule, costs = _memory.plan_reversible(tape, chain, state, steps)
        result = run_chain(tape, chain, state, schedule)[0]
        tape.plans.append((schedule, costs))
        tape.loops[-1].memory, tape.loops[-1].plan = tape.byte_limit, "measured"
        return result
    slots = tape.policy.snapshots or 2  # no slot count: x_0 and the working slot
    return run_chain(tape, chain, state, schedules.Reversible(steps, slots))[0]


def _budgeted(tape, chain, state, steps, functions, alike):
    """Run ``chain`` under the byte budget: plan it (or reuse the plan), run, report."""
    plan = _memory.plan_chain(tape, chain, state, steps, functions, alike)
    schedule, costs, predicted, how, with_tangents = plan
    result = run_chain(tape, chain, state, schedule, plan_with_tangents=with_tangents)
    tape.plans.append((schedule, costs))
    stats = tape.loops[-1]
    stats.memory, stats.plan, stats.predicted_seconds = tape.byte_limit, how, predicted
    return result


def _on_disk(tape, chain, state, steps, functions):
    """Run ``chain`` with memory and disk slots: TwoLevel at measured costs."""
    schedule, costs, how = _disk.plan_chain(tape, chain, state, steps, functions)
    result = run_chain(tape, chain, state, schedule)
    tape.plans.append((schedule, costs))
    tape.loops[-1].plan = how
    return result


def _check_loop_args(step, steps, until, max_steps, inverse):
    """tape.loop's arguments checked: ``(steps, max_steps)`` as counts, or a clear error."""
    if not callable(step):
        raise TypeError(f"tape.loop: step must be callable, got {step!r}")
    if (steps is None) == (until is None):
        raise ValueError("tape.loop: pass exactly one of steps= (a known length) or until=")
    if steps is not None:
        steps = require_count("tape.loop", "steps", steps, minimum=0)
    if max_steps is not None:
        if until is None:
            raise ValueError("tape.loop: max_steps= caps a loop run with until=; not with steps=")
        max_steps = require_count("tape.loop", "max_steps", max_steps)
    if until is not None and not callable(until):
        raise TypeError(f"tape.loop: until must be a predicate state -> bool, got {until!r}")
    if inverse is not None:
        if not callable(inverse):
            raise TypeError(
                f"tape.loop: inverse must be a function x_(i+1) -> x_i, got {inverse!r}"
            )
        if until is not None:
            raise ValueError(
                "tape.loop: inverse= needs a loop of known length (steps=); not until="
            )
    return steps, max_steps


def _scan_inputs(xs):
    """The leaves of a scan's ``xs`` as Tensors, its tree and their common length."""
    leaves, xs_tree = flatten(xs, lambda v: isinstance(v, Tensor) or backend.is_array(v))
    if not leaves:
        raise ValueError("tape.scan: xs has no Tensor or array in it; nothing to scan over")
    tensors = [v if isinstance(v, Tensor) else Tensor(v) for v in leaves]
    lengths = {t.shape[0] if t.ndim else None for t in tensors}
    if None in lengths or len(lengths) != 1:
        raise ValueError(
            "tape.scan: every leaf of xs needs the same leading axis to scan over; got "
            f"shapes {', '.join(str(t.shape) for t in tensors)}"
        )
    n = lengths.pop()
    if n == 0:
        raise ValueError("tape.scan: xs has a leading axis of length 0; nothing to scan")
    return tensors, xs_tree, n


def _online_end(schedule, n):
    """An online schedule learns the length at the end: here, after n steps."""
    return n if schedule.steps is None else None


def _step_name(i):
    return f"tape.loop: step {i}"


def _check_state(form, state):
    leaves = flatten(state, lambda v: isinstance(v, Tensor) or backend.is_array(v))[0]
    if not leaves:
        raise TypeError(
            f"{form}: the state must be a Tensor or a pytree (tuples, lists, dicts) holding "
            f"Tensors, got {type(state).__name__}"
        )
