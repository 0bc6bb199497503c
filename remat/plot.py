"""Pictures of schedules and runs (matplotlib, imported only when a plot is drawn).

* :func:`schedule_diagram` - the classic picture of a checkpointing schedule:
  step index against time (counted in step evaluations), with advances,
  taped steps, reversals, snapshots and restores drawn differently, and
  disk snapshots and restores (``level="disk"``) in colours of their own,
  and states recomputed backwards by an inverse (``Invert``) dashed.
* :func:`storage_lanes` - which state each memory and disk slot holds over
  the same time axis, one lane per slot; :func:`two_level_diagram` draws the
  schedule above its lanes (for :class:`~remat.schedules.TwoLevel`).
* :func:`memory_timeline` - bytes held by a real run of ``tape.loop`` over
  its step evaluations (``rm.Tape(..., trace=True)`` records them).
* :func:`budget_curve` - forward steps and memory against the snapshot budget,
  with the binomial optimum drawn.
* :func:`graph_plan_diagram` - a graph plan (:func:`remat.schedules.plan_graph`):
  what each stage computes, recomputes and holds;
  :func:`remat.plot_graph.graph_diagram` draws the graph itself, each value
  coloured by what the plan does with it.

Install with ``pip install "remat[plot]"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import schedules as S

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .budget import Tape


def _pyplot():
    try:
        import matplotlib

        if matplotlib.get_backend().lower() not in (
            "agg",
            "module://matplotlib_inline.backend_inline",
        ):
            import os

            if not os.environ.get("DISPLAY"):
                matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("remat.plot needs matplotlib: pip install 'remat[plot]'") from error
    return plt


def _axes(ax, figsize=(8, 4.5)):
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
    return ax.figure, ax


def _timed(schedule: S.Schedule, steps: int | None = None) -> Iterator[tuple[S.Action, int, int]]:
    """Each action with the time before and after it (one unit per step evaluated,
    reversed or inverted), up to End()."""
    actions = iter(schedule)
    online = hasattr(actions, "finish")
    n = steps if steps is not None else schedule.steps
    time = 0
    for action in actions:
        width = 0
        if isinstance(action, (S.Advance, S.Tape, S.Reverse, S.Invert)):
            width = action.stop - action.start
        yield action, time, time + width
        time += width
        if online and isinstance(action, S.Tape) and action.stop == n:
            getattr(actions, "finish")(n)  # an online run learns its length here
        if isinstance(action, S.End):
            return


def trace_schedule(
    schedule: S.Schedule, steps: int | None = None
) -> list[tuple[str, int, int, int, int]]:
    """The schedule as drawable segments: a list of (kind, time0, time1, pos0, pos1).

    ``time`` counts step evaluations, reversals and inversions, one unit each;
    ``kind`` is advance, tape, reverse, invert, snapshot, restore, disk
    snapshot or disk restore.  Online schedules need ``steps``.

    >>> from remat.schedules import Revolve
    >>> from remat.plot import trace_schedule
    >>> trace_schedule(Revolve(steps=3, snapshots=2))[:3]
    [('snapshot', 0, 0, 0, 0), ('advance', 0, 1, 0, 1), ('snapshot', 1, 1, 1, 1)]
    """
    segments: list[tuple[str, int, int, int, int]] = []
    for action, t0, t1 in _timed(schedule, steps):
        kind = type(action).__name__.lower()
        if isinstance(action, (S.Advance, S.Tape)):
            segments.append((kind, t0, t1, action.start, action.stop))
        elif isinstance(action, (S.Reverse, S.Invert)):
            segments.append((kind, t0, t1, action.stop, action.start))
        elif isinstance(action, (S.Snapshot, S.Restore)):
            if action.level == S.DISK:
                kind = f"disk {kind}"
            segments.append((kind, t0, t0, action.step, action.step))
    return segments


def slot_spans(
    schedule: S.Schedule, steps: int | None = None
) -> list[tuple[str, int, int, int, int]]:
    """What each slot holds and when: a list of (level, slot, step, time0, time1),
    from the Snapshot that stored ``x_step`` to the Free (or Snapshot) that ended it.

    >>> from remat.schedules import TwoLevel
    >>> from remat.plot import slot_spans
    >>> sorted(span for span in slot_spans(TwoLevel(21, 2, 2, 2, 2)) if span[0] == "disk")
    [('disk', 0, 0, 0, 67), ('disk', 1, 6, 6, 47)]
    """
    spans: list[tuple[str, int, int, int, int]] = []
    held: dict[tuple[str, int], tuple[int, int]] = {}
    time = 0
    for action, t0, time in _timed(schedule, steps):
        if isinstance(action, (S.Snapshot, S.Free)):
            key = (action.level, action.slot)
            if key in held:
                step, start = held.pop(key)
                spans.append((*key, step, start, t0))
            if isinstance(action, S.Snapshot):
                held[key] = (action.step, t0)
    for (level, slot), (step, start) in held.items():
        spans.append((level, slot, step, start, time))
    return spans


STYLE: dict[str, dict[str, Any]] = {
    "advance": dict(color="tab:blue", lw=1.2),
    "tape": dict(color="tab:green", lw=3),
    "reverse": dict(color="tab:red", lw=3),
    "snapshot": dict(color="black", marker="s", ms=5, ls="none"),
    "restore": dict(color="tab:orange", marker="o", ms=4, ls="none"),
    "invert": dict(color="tab:cyan", lw=1.2, ls="--"),
    # disk markers: larger, hollow and on top, so that a memory snapshot taken
    # right after a disk restore (same time, same step) shows through
    "disk snapshot": dict(
        color="tab:purple", marker="D", ms=9, mfc="none", mew=1.6, ls="none", zorder=4
    ),
    "disk restore": dict(
        color="tab:purple", marker="v", ms=10, mfc="none", mew=1.6, ls="none", zorder=4
    ),
}


def schedule_diagram(
    schedule: S.Schedule,
    steps: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
) -> Figure:
    """Draw a schedule: time (step evaluations) across, step index up.

    >>> from remat.schedules import Revolve
    >>> from remat.plot import schedule_diagram
    >>> fig = schedule_diagram(Revolve(steps=20, snapshots=3))
    >>> fig.axes[0].get_title()
    'Revolve(steps=20, snapshots=3): 65 evaluations, 3 snapshots at most'
    >>> fig.savefig('revolve.png')  # doctest: +SKIP
    """
    fig, ax = _axes(ax)
    seen = set()
    for kind, t0, t1, p0, p1 in trace_schedule(schedule, steps):
        if kind not in STYLE:
            continue
        label = None if kind in seen else kind
        seen.add(kind)
        ax.plot([t0, t1], [p0, p1], label=label, **STYLE[kind])
    sim = S.simulate(schedule, steps=steps)
    ax.set_xlabel("time (step evaluations and reversals)")
    ax.set_ylabel("step index")
    # the y axis has a MaxNLocator, whose set_params takes integer= (Locator's does not)
    ax.yaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]
    disk = sim.writes[S.DISK] + sim.reads[S.DISK]
    counts = f"{sim.forward_steps} evaluations, {sim.peak_snapshots} snapshots at most"
    if disk:  # a second line: the disk I/O
        counts = (
            f"{counts}\n{sim.peak_disk_snapshots} disk slots at most, "
            f"{sim.writes[S.DISK]} disk writes, {sim.reads[S.DISK]} disk reads"
        )
    ax.set_title(title or f"{schedule!r}: {counts}", fontsize=9 if disk else None)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    return fig


def memory_timeline(
    tape: Tape, ax: Axes | None = None, label: str | None = None, color: Any = None
) -> Figure:
    """Bytes the tape's loops held, over their step evaluations (needs ``trace=True``).

    ``color`` (any matplotlib colour) draws every loop of the tape in it.

    >>> import remat as rm
    >>> from remat.plot import memory_timeline
    >>> with rm.Tape(snapshots=3, trace=True) as tape:
    ...     h = tape.loop(lambda h: rm.tanh(h), rm.ones(100, requires_grad=True), steps=20)
    >>> h.sum().backward()
    >>> memory_timeline(tape).axes[0].get_ylabel()
    'MiB held by the loop'
    """
    fig, ax = _axes(ax)
    for stats in tape.loops:
        if not stats.timeline:
            raise ValueError("memory_timeline needs a tape made with rm.Tape(..., trace=True)")
        xs = [t for t, _ in stats.timeline]
        ys = [b / 2**20 for _, b in stats.timeline]
        ax.step(xs, ys, where="post", label=label or stats.schedule, color=color)
    ax.set_xlabel("time (step evaluations)")
    ax.set_ylabel("MiB held by the loop")
    ax.legend(fontsize=8, frameon=False)
    return fig


def budget_curve(
    steps: int, budgets: Iterable[int], state_bytes: int | None = None, ax: Axes | None = None
) -> Figure:
    """Revolve's forward steps (and memory) against the snapshot budget.

    Each point is simulated; the line is the binomial optimum
    ``optimal_forward_steps(steps, s)``, so the two coincide.

    >>> from remat.plot import budget_curve
    >>> fig = budget_curve(100, range(1, 11), state_bytes=8 * 2**20)
    >>> len(fig.axes)  # forward steps, and memory on a twin axis
    2
    """
    fig, ax = _axes(ax)
    budgets = list(budgets)
    simulated = [S.simulate(S.Revolve(steps, s)).forward_steps / steps for s in budgets]
    optimum = [S.optimal_forward_steps(steps, s) / steps for s in budgets]
    ax.plot(budgets, optimum, "-", color="tab:gray", label="binomial optimum")
    ax.plot(budgets, simulated, "o", color="tab:red", label="Revolve (simulated)")
    ax.set_xlabel("snapshot budget s")
    ax.set_ylabel("forward steps / n")
    ax.set_title(f"n = {steps}: recomputation against memory")
    if state_bytes:
        twin = ax.twinx()
        twin.plot(budgets, [s * state_bytes / 2**20 for s in budgets], "--", color="tab:blue")
        twin.set_ylabel("snapshot memory (MiB)", color="tab:blue")
    ax.legend(fontsize=8, frameon=False)
    return fig


LANE_COLORS = {S.MEMORY: "tab:blue", S.DISK: "tab:purple"}


def storage_lanes(
    schedule: S.Schedule,
    steps: int | None = None,
    ax: Axes | None = None,
    labels: bool = True,
) -> Figure:
    """One lane per memory slot and per disk slot: a bar for each state a slot holds,
    from its Snapshot to its Free, marked with the step index when there is room.

    >>> from remat.schedules import TwoLevel
    >>> from remat.plot import storage_lanes
    >>> fig = storage_lanes(TwoLevel(21, 2, 2, 2, 2))
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['disk 0', 'disk 1', 'memory 0', 'memory 1']
    """
    fig, ax = _axes(ax, figsize=(8, 2.5))
    spans = slot_spans(schedule, steps)
    lanes = sorted(
        {(level, slot) for level, slot, *_ in spans}, key=lambda k: (k[0] != S.DISK, k[1])
    )
    row = {key: k for k, key in enumerate(lanes)}
    total = max((t1 for *_, t1 in spans), default=1) or 1
    for level, slot, step, t0, t1 in spans:
        y = row[(level, slot)]
        ax.barh(
            y,
            max(t1 - t0, total / 400),
            left=t0,
            height=0.7,
            color=LANE_COLORS[level],
            alpha=0.35 if level == S.MEMORY else 0.55,
            edgecolor=LANE_COLORS[level],
        )
        if labels and t1 - t0 > total / 40:
            ax.text((t0 + t1) / 2, y, f"x{step}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{level} {slot}" for level, slot in lanes], fontsize=8)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_xlabel("time (step evaluations and reversals)")
    ax.set_title("what each slot holds", fontsize=9)
    return fig


def two_level_diagram(
    schedule: S.Schedule, steps: int | None = None, figsize: tuple[float, float] = (9, 7)
) -> Figure:
    """The schedule diagram above its storage lanes (memory and disk), one time axis.

    >>> from remat.schedules import TwoLevel
    >>> from remat.plot import two_level_diagram
    >>> fig = two_level_diagram(TwoLevel(21, 2, 2, 2, 2))
    >>> len(fig.axes), fig.axes[1].get_title()
    (2, 'what each slot holds')
    >>> fig.savefig('two_level.png')  # doctest: +SKIP
    """
    plt = _pyplot()
    spans = slot_spans(schedule, steps)
    lanes = len({(level, slot) for level, slot, *_ in spans}) or 1
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=figsize, sharex=True, gridspec_kw={"height_ratios": [3, max(1, lanes / 4)]}
    )
    schedule_diagram(schedule, steps=steps, ax=top)
    top.set_xlabel("")
    storage_lanes(schedule, steps=steps, ax=bottom)
    fig.tight_layout()
    return fig


GRAPH_COLOURS = {
    "computed": "#1f3b73",
    "recomputed": "#e8871e",
    "held": "#c6d4ea",
    "kept": "#1f3b73",
    "freed": "#c6d4ea",
    "input": "#9a9a9a",
}
"""The colours of a graph's values: :func:`graph_plan_diagram` draws a stage's values
computed, recomputed or held; :func:`remat.plot_graph.graph_diagram` each value kept
from its stage to its last use (as computed), recomputed, or freed at once (as held)."""


def graph_plan_diagram(
    plan: S.GraphPlan, costs: S.GraphCosts, ax: Axes | None = None, title: str | None = None
) -> Figure:
    """Draw a graph plan: stage across, node up; each cell says what the stage does with the node.

    Dark: computed at its own stage; orange: recomputed; light: held through
    the stage (kept from the one before).  The title gives the plan's method,
    cost and peak (:func:`remat.schedules.simulate_graph`).

    >>> from remat.schedules import GraphCosts, plan_graph
    >>> from remat.plot import graph_plan_diagram
    >>> g = GraphCosts.joint([(), (0,), (1,), (2,), (3,)], [0, 1, 1, 1, 1],
    ...                      [0, 4, 4, 4, 0], inputs={0}, loss=4)
    >>> fig = graph_plan_diagram(plan_graph(g, 12), g)
    >>> fig.axes[0].get_title()
    'optimal plan: cost 13, peak 12 bytes (budget 12)'
    """
    fig, ax = _axes(ax, figsize=(8, 5))
    result = S.simulate_graph(plan, costs)
    held: frozenset[int] = frozenset()
    colours = {kind: GRAPH_COLOURS[kind] for kind in ("computed", "recomputed", "held")}
    for t, (run, keep) in enumerate(zip(plan.compute, plan.keep)):
        for node in held:
            ax.add_patch(_cell(t, node, colours["held"]))
        for node in run:
            kind = "computed" if node == costs.ops[t] else "recomputed"
            ax.add_patch(_cell(t, node, colours[kind]))
        held = keep
    plt = _pyplot()
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    ax.legend(handles, list(colours), fontsize=8, frameon=False, loc="upper left")
    ax.set_xlim(0, len(plan.compute))
    ax.set_ylim(0, costs.nodes)
    ax.set_xlabel("stage (the op it computes)")
    ax.set_ylabel("node")
    ax.set_title(
        title
        or f"{plan.method} plan: cost {result.cost:g}, peak {result.peak_bytes:g} bytes "
        f"(budget {plan.memory:g})"
    )
    return fig


def _cell(x: int, y: int, colour: str) -> Any:
    return _pyplot().Rectangle((x, y), 1, 1, color=colour, linewidth=0)
