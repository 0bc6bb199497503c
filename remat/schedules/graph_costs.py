"""A recorded graph with its costs, a plan for it, and the simulator that checks a plan.

This is the data side of optimal graph rematerialization (Checkmate: Jain et
al., MLSys 2020); :mod:`.graph_plan` finds the plans.  Everything here is
pure Python and imports nothing outside :mod:`remat.schedules`.

The graph (:class:`GraphCosts`).  Nodes ``0 .. N-1`` in topological order;
node ``i`` has ``parents[i]`` (all ``< i``), a ``compute`` cost (seconds, or
any additive unit) and the ``bytes`` of its output.  ``inputs`` are the
leaves and parameters: always resident, never computed, not counted against
the budget (the user holds them).  ``outputs`` are the values the caller
holds after the run (the loss, the parameters' gradients): once computed they
are held to the end, and counted.

The backward pass is part of the graph.  The planner takes the *joint*
forward + backward graph, as Checkmate does: a gradient node is an ordinary
node whose parents are the gradients flowing into it and the forward values
its VJP reads.  So "what the backward pass needs" is just parents, and one
formulation covers both passes.  :meth:`GraphCosts.chain` builds the joint
graph of a chain.

The plan (:class:`GraphPlan`).  The ``T`` non-input nodes, in order, are the
*stages*: stage ``t`` computes op ``t`` (``ops[t]``, a node id), possibly
after recomputing earlier nodes, each at most once and in increasing order
(``compute[t]``, ending with ``ops[t]``); ``keep[t]`` is what is held when
stage ``t`` ends, which is what stage ``t + 1`` starts with.  (Checkmate's
``R[t, i]`` is ``i in compute[t]``, its ``S[t + 1, i]`` is ``i in keep[t]``.)

The memory model (what :func:`simulate_graph` counts, and what the MILP
bounds).  A stage starts holding ``keep[t - 1]``.  Computing node ``k``
allocates ``bytes[k]``; every parent must be resident then (an input, held,
or computed earlier in this stage).  Right after computing ``k``, each of
``k`` and its parents that is not kept and has no later child computed in
this stage is freed.  The bytes resident at the start of each stage and just
after each allocation are the stage's moments; the peak is their maximum.
The value being computed, its inputs and the gradients flowing are all
counted (everything but ``inputs``), so the peak is what an executor holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import isfinite
from numbers import Integral, Real

from .costs import ChainCosts


class GraphPlanError(ValueError):
    """A graph plan breaks a rule: a value used before it is computed, a budget passed.

    >>> from remat.schedules import GraphCosts, GraphPlan, GraphPlanError, simulate_graph
    >>> g = GraphCosts([(), (0,), (1,)], [0, 1, 1], [8, 8, 8], inputs={0})
    >>> forgets = GraphPlan(((1,), (2,)), (frozenset(), frozenset()), memory=16)
    >>> try:
    ...     simulate_graph(forgets, g)
    ... except GraphPlanError as error:
    ...     print(str(error)[:54])
    stage 1 (computing node 2): node 2 reads node 1, which
    """


def _numbers(name: str, values: Iterable[float], length: int) -> tuple[float, ...]:
    try:
        items = tuple(values)
    except TypeError:
        raise ValueError(
            f"GraphCosts: {name} must be a sequence of numbers, got {values!r}"
        ) from None
    if len(items) != length:
        raise ValueError(
            f"GraphCosts: {name} has {len(items)} entries but the graph has {length} nodes "
            "(len(parents))"
        )
    for i, value in enumerate(items):
        if (
            isinstance(value, bool)
            or not isinstance(value, Real)
            or not isfinite(value)
            or value < 0
        ):
            raise ValueError(f"GraphCosts: {name}[{i}] must be a finite number >= 0, got {value!r}")
    return tuple(int(v) if isinstance(v, Integral) else float(v) for v in items)


@dataclass(frozen=True)
class GraphCosts:
    """A joint forward + backward graph in topological order, with costs (validated data).

    >>> from remat.schedules import GraphCosts
    >>> g = GraphCosts(parents=[(), (0,), (1,), (1, 2)], compute=[0, 1, 1, 2],
    ...                bytes=[8, 8, 8, 8], inputs={0}, outputs={3})
    >>> g.ops, g.children[1]
    ((1, 2, 3), (2, 3))
    """

    parents: tuple[tuple[int, ...], ...]
    compute: tuple[float, ...]
    bytes: tuple[float, ...]
    inputs: frozenset[int] = frozenset()
    outputs: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        try:
            parents = tuple(tuple(int(j) for j in p) for p in self.parents)
        except (TypeError, ValueError):
            raise ValueError(
                f"GraphCosts: parents must be a sequence of sequences of node ids, "
                f"got {self.parents!r}"
            ) from None
        n = len(parents)
        for i, p in enumerate(parents):
            if len(set(p)) != len(p) or any(not 0 <= j < i for j in p):
                raise ValueError(
                    f"GraphCosts: parents[{i}] = {p!r}: node {i}'s parents must be distinct "
                    f"ids in 0..{i - 1} (nodes come in topological order)"
                )
        sets = {}
        for name in ("inputs", "outputs"):
            given = frozenset(getattr(self, name))
            bad = [i for i in given if not isinstance(i, Integral) or not 0 <= int(i) < n]
            if bad:
                raise ValueError(f"GraphCosts: {name} must be node ids in 0..{n - 1}, got {bad!r}")
            sets[name] = frozenset(int(i) for i in given)
        for i in sets["inputs"]:
            if parents[i]:
                raise ValueError(
                    f"GraphCosts: input {i} has parents {parents[i]!r}; inputs have none"
                )
        if sets["inputs"] & sets["outputs"]:
            raise ValueError(
                f"GraphCosts: nodes {sorted(sets['inputs'] & sets['outputs'])} are both inputs "
                "and outputs; an output is computed by the graph"
            )
        if len(sets["inputs"]) == n:
            raise ValueError(
                "GraphCosts: the graph has no node to compute (every node is an input)"
            )
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "compute", _numbers("compute", self.compute, n))
        object.__setattr__(self, "bytes", _numbers("bytes", self.bytes, n))
        object.__setattr__(self, "inputs", sets["inputs"])
        object.__setattr__(self, "outputs", sets["outputs"])

    @property
    def nodes(self) -> int:
        """The number of nodes, inputs included."""
        return len(self.parents)

    @property
    def ops(self) -> tuple[int, ...]:
        """The nodes that are computed (not inputs), in order: stage ``t`` computes ``ops[t]``."""
        return tuple(i for i in range(self.nodes) if i not in self.inputs)

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """``children[i]``: the nodes that read node ``i``, in order."""
        out: list[list[int]] = [[] for _ in self.parents]
        for k, p in enumerate(self.parents):
            for i in p:
                out[i].append(k)
        return tuple(tuple(c) for c in out)

    @classmethod
    def joint(
        cls,
        parents: Sequence[Sequence[int]],
        compute: Sequence[float],
        bytes: Sequence[float],
        inputs: Iterable[int],
        loss: int,
        backward: Sequence[float] | None = None,
    ) -> GraphCosts:
        """The joint graph of a forward graph (nodes as in :class:`GraphCosts`) and its backward.

        Every op ``k`` that ``loss`` depends on (``loss`` included) gets a
        gradient node ``v_k``, placed after the forward nodes in reverse order:
        the VJP of op ``k``, which reads the gradient of ``k``'s output (the
        ``v_c`` of ``k``'s children ``c`` on the way to the loss) and ``k``'s
        parents (the forward values a VJP reads), and holds the gradients it
        sends to ``k``'s non-input parents (their bytes).  It costs
        ``backward[k]`` (default: twice ``compute[k]``).  Gradients reaching
        inputs are accumulated outside the budget, as a tape does.  The loss
        is the output.  ``v_k`` is node ``N + position`` of ``k`` in that order.

        >>> from remat.schedules import GraphCosts
        >>> g = GraphCosts.joint([(), (0,), (1,)], [0, 1, 1], [4, 4, 4], {0}, loss=2)
        >>> g.parents[3:], g.compute[3:], g.bytes[3:]
        (((1, 2), (0, 3)), (2, 2), (4, 0))
        """
        forward = cls(
            tuple(tuple(p) for p in parents),
            tuple(compute),
            tuple(bytes),
            frozenset(inputs),
            frozenset({loss}),
        )
        n = forward.nodes
        if backward is None:
            backward = [2 * c for c in forward.compute]
        backward = _numbers("backward", backward, n)
        needed = {loss}
        for k in range(loss, -1, -1):
            if k in needed:
                needed.update(forward.parents[k])
        order = [k for k in range(loss, -1, -1) if k in needed and k not in forward.inputs]
        grad = {k: n + position for position, k in enumerate(order)}
        new_parents = list(forward.parents)
        for k in order:
            seeds = [grad[c] for c in forward.children[k] if c in grad]
            reads = {*forward.parents[k], *seeds} if k != loss else {*forward.parents[k], k}
            new_parents.append(tuple(sorted(reads)))
        sizes = [
            sum(forward.bytes[p] for p in forward.parents[k] if p not in forward.inputs)
            for k in order
        ]
        return cls(
            tuple(new_parents),
            (*forward.compute, *(backward[k] for k in order)),
            (*forward.bytes, *sizes),
            forward.inputs,
            frozenset({loss}),
        )

    @classmethod
    def chain(cls, costs: ChainCosts) -> GraphCosts:
        """The joint graph of a chain: ``x_0`` (input), ``x_1 .. x_n``, then ``g_{n-1} .. g_0``.

        ``x_{i+1}`` reads ``x_i`` and costs ``forward_time[i]``, with
        ``state_bytes[i + 1]`` bytes; the cotangent ``g_i`` (of ``x_i``) reads
        ``x_i`` and ``g_{i+1}`` and costs ``reverse_time[i] - forward_time[i]``
        (a store-all run costs ``sum(reverse_time)``, as in :mod:`.costs`), with
        0 bytes (:class:`~.optimal.Optimal` does not count cotangents).  ``g_0`` is
        the output.  Node ids: ``x_i`` is ``i``, ``g_i`` is ``2 n - i``.
        ``tape_bytes`` is not used: a step's tape is its input state here.

        >>> from remat.schedules import ChainCosts, GraphCosts
        >>> GraphCosts.chain(ChainCosts.uniform(2, 1, 3, 8, 8)).parents
        ((), (0,), (1,), (1, 2), (0, 3))
        """
        n = costs.steps
        if any(r < f for f, r in zip(costs.forward_time, costs.reverse_time)):
            raise ValueError(
                "GraphCosts.chain: every reverse_time must be >= its forward_time (it includes "
                f"the taped evaluation), got {costs.forward_time!r} and {costs.reverse_time!r}"
            )
        parents: list[tuple[int, ...]] = [()] + [(i,) for i in range(n)]
        parents.append((n - 1, n))  # g_{n-1} reads x_{n-1} and (the seed of) x_n
        parents += [(i, 2 * n - i - 1) for i in range(n - 2, -1, -1)]
        backward = [costs.reverse_time[i] - costs.forward_time[i] for i in range(n - 1, -1, -1)]
        return cls(
            tuple(parents),
            (0, *costs.forward_time, *backward),
            (*costs.state_bytes, *([0] * n)),
            inputs=frozenset({0}),
            outputs=frozenset({2 * n}),
        )


@dataclass(frozen=True)
class GraphPlan:
    """Which nodes each stage computes and which values it keeps (data; see the module).

    ``compute[t]`` lists the nodes stage ``t`` computes, in increasing order,
    ending with ``ops[t]``; ``keep[t]`` the values held when it ends.
    ``memory`` is the budget planned for; ``method`` says how the plan was found
    (``"store all"``, ``"optimal"``, ``"time limit"``: the best plan HiGHS found
    in the time given, within ``gap`` of the optimum, or ``"lp rounding"``: the
    LP relaxation rounded, no bound on its distance from the optimum);
    ``predicted_cost`` and ``predicted_peak_bytes`` are :func:`simulate_graph`'s.

    >>> from remat.schedules import GraphPlan
    >>> plan = GraphPlan(((1,), (1, 2)), (frozenset(), frozenset({2})), memory=16)
    >>> plan.recomputed  # node 1 is computed twice
    1
    """

    compute: tuple[tuple[int, ...], ...]
    keep: tuple[frozenset[int], ...]
    memory: float
    method: str = "given"
    predicted_cost: float = 0.0
    predicted_peak_bytes: float = 0.0
    gap: float = 0.0
    solve_seconds: float = 0.0

    @property
    def recomputed(self) -> int:
        """How many node evaluations the plan adds to one per op."""
        return sum(len(c) - 1 for c in self.compute)


@dataclass(frozen=True)
class GraphSimulation:
    """What a plan costs: total ``cost``, ``peak_bytes``, and each stage's peak.

    >>> from remat.schedules import GraphCosts, GraphPlan, simulate_graph
    >>> g = GraphCosts([(), (0,), (1,)], [0, 1, 1], [8, 8, 8], inputs={0})
    >>> plan = GraphPlan(((1,), (1, 2)), (frozenset(), frozenset()), memory=16)
    >>> simulate_graph(plan, g).stage_peaks
    (8, 16)
    """

    cost: float
    peak_bytes: float
    stage_peaks: tuple[float, ...]


def simulate_graph(
    plan: GraphPlan, costs: GraphCosts, memory: float | None = None
) -> GraphSimulation:
    """Run ``plan`` on paper over ``costs``: check every rule, count cost and peak bytes.

    Raises :class:`GraphPlanError` at the first broken rule, naming the stage
    and the node; a moment above ``memory`` (by default the plan's own budget,
    ``plan.memory``) is one.

    >>> from remat.schedules import GraphCosts, GraphPlan, simulate_graph
    >>> g = GraphCosts([(), (0,), (1,), (1, 2)], [0, 1, 1, 2], [8, 8, 8, 8], {0}, {3})
    >>> keep_all = GraphPlan(((1,), (2,), (3,)), (frozenset({1}), frozenset({1, 2}),
    ...                      frozenset({3})), memory=24)
    >>> simulate_graph(keep_all, g)
    GraphSimulation(cost=4, peak_bytes=24, stage_peaks=(8, 16, 24))
    """
    ops, size = costs.ops, costs.bytes
    if len(plan.compute) != len(ops) or len(plan.keep) != len(ops):
        raise GraphPlanError(
            f"plan has {len(plan.compute)} compute and {len(plan.keep)} keep entries; the graph "
            f"has {len(ops)} stages (one per non-input node)"
        )
    if memory is None:
        memory = plan.memory
    held: frozenset[int] = frozenset()
    total: float = 0
    peaks: list[float] = []
    for t, (run, keep) in enumerate(zip(plan.compute, plan.keep)):
        where = f"stage {t} (computing node {ops[t]})"
        if not run or run[-1] != ops[t] or list(run) != sorted(set(run)):
            raise GraphPlanError(
                f"{where}: compute must list distinct nodes in increasing order ending with "
                f"{ops[t]}, got {run!r}"
            )
        for k in run:
            if k in costs.inputs:
                raise GraphPlanError(f"{where}: node {k} is an input; inputs are never computed")
            if k in held:
                raise GraphPlanError(f"{where}: node {k} is held already; it is not recomputed")
        later: dict[int, list[int]] = {}  # the readers of each value in this stage
        for k in run:
            for i in costs.parents[k]:
                later.setdefault(i, []).append(k)
        resident = set(held)
        used: float = sum(size[i] for i in resident)
        peak = used
        if used > memory:
            raise GraphPlanError(
                f"{where}: the {used!r} bytes held entering it are above the budget of "
                f"{memory!r} bytes"
            )
        for k in run:
            for i in costs.parents[k]:
                if i not in resident and i not in costs.inputs:
                    raise GraphPlanError(
                        f"{where}: node {k} reads node {i}, which is neither held nor "
                        "computed earlier in this stage"
                    )
            resident.add(k)
            used += size[k]
            total += costs.compute[k]
            peak = max(peak, used)
            if used > memory:
                raise GraphPlanError(
                    f"{where}: {used!r} bytes resident after computing node {k}, above the "
                    f"budget of {memory!r} bytes"
                )
            for i in (*costs.parents[k], k):
                if i in resident and i not in keep and all(j <= k for j in later.get(i, ())):
                    resident.discard(i)
                    used -= size[i]
        missing = keep - resident
        if missing or keep & costs.inputs:
            raise GraphPlanError(
                f"{where}: keeps {sorted(missing or keep & costs.inputs)}, which are not "
                "resident at its end (or are inputs, always resident)"
            )
        lost = {o for o in costs.outputs if o <= ops[t]} - keep
        if lost:
            raise GraphPlanError(f"{where}: outputs {sorted(lost)} must be kept to the end")
        peaks.append(peak)
        held = frozenset(keep)
    return GraphSimulation(total, max(peaks), tuple(peaks))
