"""The joint forward + backward graph of a recorded run, as the planner sees it (:func:`joint`).

The plan must keep what DTR counts (:mod:`remat.graph.dtr`) within ``m``, and DTR
counts the values the records *save*, not the op being evaluated nor what user
code holds between ops.  So the planner's graph has a node per op whose output a
record saves (an *op value*), and none for the others: an op whose output no
record saves is part of the *recipe* of the op values made from it (the unsaved
ops between it and the op values or leaves it reads).  An op value's node:

* reads the op values its recipe starts from (and, for a view, the op value
  owning its buffer: keeping a view keeps that buffer);
* costs what recomputing it takes: the op's own time and its recipe's
  (:meth:`Run.price <remat.graph.recording.Run.price>`: recomputing runs them all;
  the forward ran each once, with the work around it, which :attr:`Joint.forward`
  counts), plus the tape's work per op recomputed (evicting, recomputing: the run's
  ``overhead``);
* holds its buffer's bytes, each buffer once (a view: 0), or, if more, the most
  bytes its recipe's values take at once while they are recomputed (DTR counts
  them then; they are gone before the op runs, whose inputs are released first).

Then a gradient node per run of VJPs whose reads nest (:func:`_groups`), in the
sweep's order: it reads the op values their records save and the gradient nodes
of the ops whose VJPs send them cotangents (``Run.grads``); it costs their
measured VJPs and holds 0 bytes (DTR does not count cotangents).  The last
gradient node is the graph's output; leaves and constants are not nodes.

The bytes the plan counts: every op value from when its op runs until its last
reader (or while kept), which is at least what DTR counts of it (from the record
that saves it until evicted or released, and while a recomputation holds it); within
``m`` less the constants (DTR counts them from the op that reads them to the end).
So a run that follows the plan keeps within ``m`` as DTR counts it, and the forward,
where user code holds what DTR does not count, is not charged for the values no
record saves.  It is charged, as the planner's model has it, for an op value's
inputs while it is computed, which DTR does not count as such (it counts an output
once a record saves it): the plan is conservative there by about a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..schedules import GraphCosts
from .recording import Run


@dataclass(frozen=True)
class Joint:
    """A run's graph for the planner, and how its nodes map to the run's ops (see the module).

    ``ops[c]`` is the op of forward node ``c``; ``node`` maps an op to its node (op
    values only); ``order`` lists the ops reversed, in order, and ``stage`` the
    gradient node of each; ``evaluations[c]`` is how many ops recomputing node ``c``
    evaluates (the op and its recipe); ``forward`` is the forward's ops' time, once,
    and the run's time outside its ops and VJPs (``Run.outside``).
    """

    graph: GraphCosts
    names: list[str]
    ops: tuple[int, ...]
    node: dict[int, int]
    order: tuple[int, ...]
    stage: tuple[int, ...]
    evaluations: tuple[int, ...]
    forward: float
    fixed: int


def joint(run: Run) -> Joint:
    """The planner's graph of ``run`` (recorded through its backward)."""
    n, saved = len(run.values), run.saved
    ops = tuple(sorted(saved))
    node = {k: c for c, k in enumerate(ops)}
    starts: list[set[int]] = []  # op -> the op values its recipe starts from
    recipe: list[set[int]] = []  # op -> the unsaved ops before it, back to op values
    for k in range(n):
        begin, steps = set(), set()
        for j in run.parents[k]:
            if j in saved:
                begin.add(j)
            else:
                begin |= starts[j]
                steps |= recipe[j]
                steps.add(j)
        starts.append(begin)
        recipe.append(steps)

    def reading(nodes: set[int]) -> set[int]:  # a view's reader holds its buffer's owner
        return {node[j] for j in nodes} | {
            node[run.base[j]] for j in nodes if run.base.get(j) in node
        }

    owner = [run.base.get(k, k) for k in range(n)]
    charged: set[int] = set()
    parents, compute, size, names = [], [], [], []
    for k in ops:
        parents.append(tuple(sorted(reading(starts[k]))))
        evaluations = 1 + len(recipe[k])
        compute.append(
            run.price(k) + sum(run.price(j) for j in recipe[k]) + run.overhead * evaluations
        )
        own = 0 if owner[k] in charged else run.bytes[owner[k]]
        size.append(max(own, _holding(run, owner, sorted(recipe[k]), k)))
        charged.add(owner[k])
        names.append(f"{run.values[k].op.name} {k}")
    children: list[list[int]] = [[] for _ in range(n)]
    for k, p in enumerate(run.grads):  # (a value rebound before read: an edge of these only)
        for j in p:
            children[j].append(k)
    groups = _groups(run, node, reading)
    grad = {k: len(ops) + g for g, group in enumerate(groups) for k in group}
    for g, group in enumerate(groups):
        seeds = {grad[c] for k in group for c in children[k] if c in grad} - {len(ops) + g}
        reads = set().union(*(reading(set(run.reads[k])) for k in group))
        parents.append(tuple(sorted(reads | seeds)))
        compute.append(sum(run.vjp[k] for k in group))
        size.append(0)
        name = f"vjp {run.values[group[0]].op.name} {group[0]}"
        names.append(name if len(group) == 1 else f"{name} (+{len(group) - 1})")
    graph = GraphCosts(
        tuple(parents), tuple(compute), tuple(size), frozenset(), frozenset({len(parents) - 1})
    )
    return Joint(
        graph,
        names,
        ops,
        node,
        tuple(run.order),
        tuple(grad[k] for k in run.order),
        tuple(1 + len(recipe[k]) for k in ops),
        float(sum(run.cost)) + run.outside,
        int(sum(run.fixed.values())),
    )


def _groups(run: Run, node: dict[int, int], reading: Any) -> list[tuple[int, ...]]:
    """The VJPs in the sweep's order, in runs whose reads nest (each one's op values a
    subset or a superset of the others'): one gradient node each.  A run needs its
    widest reads at once, as that VJP alone does, and its others allocate nothing
    (cotangents are not counted), so the plan loses nothing, and the solver's
    ``T^2`` binaries shrink (VJPs reading no op value are most of them)."""
    groups: list[list[int]] = []
    widest: set[int] = set()
    for k in run.order:
        reads = reading(set(run.reads[k]))
        if groups and (reads <= widest or widest <= reads):
            groups[-1].append(k)
            widest |= reads
        else:
            groups.append([k])
            widest = reads
    return [tuple(group) for group in groups]


def _holding(run: Run, owner: list[int], steps: list[int], target: int) -> int:
    """The most bytes of ``steps`` (a recipe, in order) a recomputation of ``target``
    holds at once: each held from when it is made to its last reader there, each
    buffer once, those of op values not counted (the plan counts them)."""
    last = {j: max((k for k in (*steps, target) if j in run.parents[k]), default=j) for j in steps}
    live: dict[int, int] = {}  # buffer owner -> the last reader of a value in it
    most = 0
    for k in steps:
        for o in [o for o, end in live.items() if end <= k]:  # read for the last time by k
            del live[o]
        o = owner[k]
        if o not in run.saved:
            live[o] = max(live.get(o, k), last[k])
        most = max(most, sum(run.bytes[o] for o in live))
    return most
