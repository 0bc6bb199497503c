"""A recorded graph drawn with what a plan (or a DTR run) does with each value.

:func:`graph_diagram` draws the joint forward + backward graph of a
:class:`remat.schedules.GraphCosts` (the graph a plan is made for: see
``docs/guide/graph_plan.md``) as an *arc diagram*:

* the forward ops in one row, left to right in the order they ran; an edge
  between neighbours is a straight line, an edge that skips ahead (a U-Net's
  skip connection, a residual shortcut) an arc above the row, the higher the
  longer it is;
* the gradient nodes in a row below, each under the forward op whose VJP it is
  (so the backward pass reads right to left), their edges as arcs below;
* a line from a forward value down to each gradient node that reads it: what
  the backward pass needs of the forward pass, and so what must be kept or
  recomputed.

Each value is coloured by what the plan does with it (:func:`value_fates`):
*kept* from the stage that computes it to its last use, *recomputed* (the
number beside it says how many times), or *freed* at once (nothing reads it
later); the edges leaving a value take its colour.  The inputs (leaves and
parameters) are always resident and not counted: they are not drawn.  The
colours are :data:`remat.plot.GRAPH_COLOURS`, those of
:func:`remat.plot.graph_plan_diagram` (which draws the same plan stage by
stage).

A DTR run has no plan: it is drawn from how many times it recomputed each
value (``recomputed=``).  A graph that :meth:`GraphCosts.joint
<remat.schedules.GraphCosts.joint>` did not make (a planned tape's
``tape.stats.graph``, whose VJP nodes follow its op values) says where its
gradient nodes start (``forward=``) and where each node goes across
(``columns=``, say the index of the op it stands for): see
:func:`graph_layout` and notebook 06.

Install with ``pip install "remat[plot]"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import schedules as S
from .plot import GRAPH_COLOURS, _axes, _pyplot

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROWS = (0.0, -3.2)
"""The heights of the forward row and of the gradient row."""

LEGEND = {
    "kept": "kept to its last use",
    "recomputed": "recomputed (n: times)",
    "freed": "freed at once (no later reader)",
}


def value_fates(
    graph: S.GraphCosts,
    plan: S.GraphPlan | None = None,
    recomputed: Mapping[int, int] | None = None,
) -> list[tuple[str, int]]:
    """What happens to each node's value: ``(kind, recomputations)``, one per node.

    ``kind`` is ``"input"`` (always resident, never computed), ``"recomputed"``
    (computed again ``recomputations`` times after its own stage), ``"freed"``
    (computed once and read by no later node: dropped at once; an output is
    never freed) or ``"kept"`` (computed once and held to its last reader).
    The recomputations are the plan's (how many stages compute the node, less
    one), or, for a run that was not planned (DTR), ``recomputed[node]``; with
    neither, the graph is stored whole and nothing is recomputed.

    >>> from remat.schedules import GraphCosts, GraphPlan
    >>> from remat.plot_graph import value_fates
    >>> g = GraphCosts([(), (0,), (1,), (1, 2)], [0, 1, 1, 1], [8, 8, 8, 8], {0}, {3})
    >>> plan = GraphPlan(((1,), (2,), (1, 3)), (frozenset(), frozenset({2}), frozenset({3})), 16)
    >>> value_fates(g, plan)
    [('input', 0), ('recomputed', 1), ('kept', 0), ('kept', 0)]
    """
    if plan is not None and recomputed is not None:
        raise ValueError("value_fates: give a plan or a run's recomputed counts, not both")
    counts = dict(recomputed or {})
    if plan is not None:
        if len(plan.compute) != len(graph.ops):
            raise ValueError(
                f"value_fates: the plan has {len(plan.compute)} stages but the graph has "
                f"{len(graph.ops)} ops (one stage per op): it was made for another graph"
            )
        for run in plan.compute:
            for node in run:
                counts[node] = counts.get(node, -1) + 1
    bad = {k: v for k, v in counts.items() if not 0 <= k < graph.nodes or v < 0}
    if bad:
        raise ValueError(
            f"value_fates: recomputed must map node ids in 0..{graph.nodes - 1} to counts "
            f">= 0, got {bad!r}"
        )
    children = graph.children
    fates = []
    for node in range(graph.nodes):
        times = counts.get(node, 0)
        if node in graph.inputs:
            kind = "input"
        elif times:
            kind = "recomputed"
        elif not children[node] and node not in graph.outputs:
            kind = "freed"
        else:
            kind = "kept"
        fates.append((kind, times))
    return fates


def _backward(graph: S.GraphCosts) -> list[int]:
    """The gradient nodes: those that depend on an output (the loss) and are none."""
    later = set(graph.outputs)
    for node in range(graph.nodes):
        if any(p in later for p in graph.parents[node]):
            later.add(node)
    return sorted(later - graph.outputs)


def _mirror(graph: S.GraphCosts, backward: list[int]) -> list[int] | None:
    """For a graph made by :meth:`GraphCosts.joint`, the forward op of each gradient node
    (in ``backward``'s order); None when the graph is not laid out that way."""
    if len(graph.outputs) != 1:
        return None
    (loss,) = graph.outputs
    needed = {loss}
    for k in range(loss, -1, -1):
        if k in needed:
            needed.update(graph.parents[k])
    order = [k for k in range(loss, -1, -1) if k in needed and k not in graph.inputs]
    if len(order) != len(backward):
        return None
    for k, v in zip(order, backward):
        if not set(graph.parents[k]) <= set(graph.parents[v]):  # a VJP reads its op's inputs
            return None
    return order


def graph_layout(
    graph: S.GraphCosts, forward: int | None = None, columns: Sequence[float] | None = None
) -> dict[int, tuple[float, float]]:
    """Where :func:`graph_diagram` puts each node that is not an input: ``{node: (x, y)}``.

    Forward ops at ``y = 0``, gradient nodes at ``y = -3.2``.  Which nodes are
    gradient nodes: those from ``forward`` on (``forward`` counts the forward
    nodes), or by default, for a graph made by
    :meth:`~remat.schedules.GraphCosts.joint`, those that follow from the loss.
    ``x``: ``columns[node]`` if given (say, the index of the op a node stands
    for, so that a gradient node goes under its op); else the forward ops are
    counted in order, and each gradient node goes under its op in a
    :meth:`~remat.schedules.GraphCosts.joint` graph, or else the gradient nodes
    are spread over the same width from right to left, in their order (under
    their ops when the backward pass reverses every op, as a tape's sweep does).

    >>> from remat.schedules import GraphCosts
    >>> from remat.plot_graph import graph_layout
    >>> g = GraphCosts.joint([(), (0,), (1,)], [0, 1, 1], [0, 4, 4], {0}, loss=2)
    >>> graph_layout(g)
    {1: (0.0, 0.0), 2: (1.0, 0.0), 3: (1.0, -3.2), 4: (0.0, -3.2)}
    """
    if forward is None:
        backward = _backward(graph)
        mirror = _mirror(graph, backward)
    elif 0 < forward <= graph.nodes:
        backward, mirror = list(range(forward, graph.nodes)), None
    else:
        raise ValueError(
            f"graph_layout: forward={forward!r} must count the forward nodes, 1..{graph.nodes}"
        )
    later = set(backward)
    ahead = [i for i in graph.ops if i not in later]
    if columns is not None:
        if len(columns) != graph.nodes:
            raise ValueError(
                f"graph_layout: columns has {len(columns)} entries for {graph.nodes} nodes"
            )
        where = {i: (float(columns[i]), ROWS[0]) for i in ahead}
        return where | {v: (float(columns[v]), ROWS[1]) for v in backward}
    where = {node: (float(x), ROWS[0]) for x, node in enumerate(ahead)}
    if mirror is not None:
        where.update({v: (where[k][0], ROWS[1]) for k, v in zip(mirror, backward)})
    else:
        width = max(len(where) - 1, 1)
        step = width / max(len(backward) - 1, 1)
        where.update({v: (width - i * step, ROWS[1]) for i, v in enumerate(backward)})
    return where


def _edge(a: tuple[float, float], b: tuple[float, float], span: float) -> Any:
    """A straight line between rows or neighbours, else an arc away from the other row."""
    from matplotlib.path import Path

    (x0, y0), (x1, y1) = a, b
    if y0 != y1 or abs(x1 - x0) <= 1:
        return Path([a, b])
    rise = 0.3 + 1.6 * abs(x1 - x0) / span
    peak = y0 + (rise if y0 == ROWS[0] else -rise)
    # a quadratic Bezier's midpoint is halfway between its control point and its chord
    return Path([a, ((x0 + x1) / 2, 2 * peak - y0), b], [Path.MOVETO, Path.CURVE3, Path.CURVE3])


def graph_diagram(
    graph: S.GraphCosts,
    plan: S.GraphPlan | None = None,
    names: Sequence[str] | None = None,
    ax: Axes | None = None,
    recomputed: Mapping[int, int] | None = None,
    title: str | None = None,
    forward: int | None = None,
    columns: Sequence[float] | None = None,
) -> Figure:
    """Draw ``graph`` (forward ops above, gradient nodes below) coloured by ``plan``.

    ``plan`` is a :class:`~remat.schedules.GraphPlan` for ``graph``; for a run
    that was not planned (DTR), pass ``recomputed``, a ``{node: times}``
    mapping, instead; with neither, the graph is drawn stored whole.
    ``names`` labels each node (``names[node]``: its op's name), by default its
    id (a gradient node is labelled where no forward op is above it);
    ``forward`` counts the forward nodes where the graph does not tell, and
    ``columns`` places each node across (:func:`graph_layout`).  See the
    module for what the picture shows.

    >>> from remat.schedules import GraphCosts, plan_graph
    >>> from remat.plot_graph import graph_diagram
    >>> g = GraphCosts.joint([(), (0,), (1,), (2,), (1, 3), (4,)], [0, 1, 1, 1, 1, 1],
    ...                      [0, 4, 4, 4, 4, 0], inputs={0}, loss=5)
    >>> fig = graph_diagram(g, plan_graph(g, 20))
    >>> fig.axes[0].get_title()
    'optimal plan: 8 kept, 1 recomputed once; cost 16, peak 20 bytes (budget 20 bytes)'
    """
    fates = value_fates(graph, plan, recomputed)
    where = graph_layout(graph, forward, columns)
    left = min(x for x, _ in where.values())
    width = max(x for x, _ in where.values()) - left + 1
    fig, ax = _axes(ax, figsize=(min(max(8.0, 0.22 * width), 30.0), 5.0))
    paths, colours = [], []
    for node, (x, y) in where.items():
        for parent in graph.parents[node]:
            if parent in where:
                paths.append(_edge(where[parent], (x, y), width))
                colours.append(GRAPH_COLOURS[fates[parent][0]])
    from matplotlib.collections import PathCollection

    edges = PathCollection(paths, facecolors="none", edgecolors=colours, linewidths=0.8)
    edges.set_alpha(0.45)
    edges.set_zorder(1)
    ax.add_collection(edges)
    nodes = list(where)
    ax.scatter(
        [where[i][0] for i in nodes],
        [where[i][1] for i in nodes],
        s=36,
        c=[GRAPH_COLOURS[fates[i][0]] for i in nodes],
        edgecolors="white",
        linewidths=0.5,
        zorder=3,
    )
    above = {x for x, y in where.values() if y == ROWS[0]}
    labelled = {i for i in nodes if where[i][1] == ROWS[0] or where[i][0] not in above}
    for i in nodes:
        x, y = where[i]
        top = y == ROWS[0]
        if i in labelled:
            label = str(i) if names is None else str(names[i])
            ax.text(x, y + (-0.25 if top else 0.25), label, rotation=90, fontsize=6,
                    ha="center", va="top" if top else "bottom")  # fmt: skip
        if fates[i][1]:
            ax.text(x, y + (0.2 if top else -0.2), str(fates[i][1]), fontsize=7, ha="center",
                    va="bottom" if top else "top", color=GRAPH_COLOURS["recomputed"])  # fmt: skip
    for y, row in zip(ROWS, ("forward", "backward")):
        ax.text(left - 1.0, y, row, ha="right", va="center", fontsize=8, style="italic")
    plt = _pyplot()
    kinds = [k for k in LEGEND if any(fates[i][0] == k for i in nodes)]
    handles = [plt.Line2D([], [], ls="none", marker="o", color=GRAPH_COLOURS[k]) for k in kinds]
    ax.legend(handles, [LEGEND[k] for k in kinds], fontsize=8, frameon=False, loc="lower left",
              bbox_to_anchor=(0, 1.06), ncol=len(kinds))  # fmt: skip
    ax.set_xlim(left - 1.5 - 0.02 * width, left + width + 0.5)
    ax.set_ylim(ROWS[1] - 2.2, ROWS[0] + 2.2)
    ax.axis("off")
    ax.set_title(title or _title(graph, fates, plan, recomputed is not None), fontsize=9)
    return fig


def _size(nbytes: float) -> str:
    """``20 bytes``, ``3.5 KiB``, ``2.35 MiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:g} bytes"


def _title(
    graph: S.GraphCosts, fates: list[tuple[str, int]], plan: S.GraphPlan | None, run: bool
) -> str:
    kept = sum(kind == "kept" for kind, _ in fates)
    again = [times for kind, times in fates if kind == "recomputed"]
    total = sum(again)
    if not again:
        what = f"{kept} kept, nothing recomputed"
    elif total == 1:
        what = f"{kept} kept, 1 recomputed once"
    else:
        what = f"{kept} kept, {len(again)} recomputed {total} times in all"
    if plan is not None:
        result = S.simulate_graph(plan, graph)
        return (
            f"{plan.method} plan: {what}; cost {result.cost:.4g}, peak "
            f"{_size(result.peak_bytes)} (budget {_size(plan.memory)})"
        )
    return f"a run: {what}" if run else f"stored whole: {what}"
