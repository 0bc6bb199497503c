"""Pictures of schedules and runs (matplotlib, imported only when a plot is drawn).

* :func:`schedule_diagram` - the classic picture of a checkpointing schedule:
  step index against time (counted in step evaluations), with advances,
  taped steps, reversals, snapshots and restores drawn differently, and
  disk snapshots and restores (``level="disk"``) in colours of their own.
* :func:`memory_timeline` - bytes held by a real run of ``tape.loop`` over
  its step evaluations (``rm.Tape(..., trace=True)`` records them).
* :func:`budget_curve` - forward steps and memory against the snapshot budget,
  with the binomial optimum drawn.

Install with ``pip install "remat[plot]"``.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def trace_schedule(
    schedule: S.Schedule, steps: int | None = None
) -> list[tuple[str, int, int, int, int]]:
    """The schedule as drawable segments: a list of (kind, time0, time1, pos0, pos1).

    ``time`` counts step evaluations and reversals, one unit each; ``kind`` is
    advance, tape, reverse, snapshot, restore, disk snapshot or disk restore.
    Online schedules need ``steps``.

    >>> from remat.schedules import Revolve
    >>> from remat.plot import trace_schedule
    >>> trace_schedule(Revolve(steps=3, snapshots=2))[:3]
    [('snapshot', 0, 0, 0, 0), ('advance', 0, 1, 0, 1), ('snapshot', 1, 1, 1, 1)]
    """
    actions = iter(schedule)
    online = hasattr(actions, "finish")
    n = steps if steps is not None else schedule.steps
    segments: list[tuple[str, int, int, int, int]] = []
    time = position = 0
    for action in actions:
        kind = type(action).__name__.lower()
        if isinstance(action, (S.Advance, S.Tape)):
            width = action.stop - action.start
            segments.append((kind, time, time + width, action.start, action.stop))
            time += width
            position = action.stop
            if online and position == n and isinstance(action, S.Tape):
                getattr(actions, "finish")(n)  # an online run learns its length here
        elif isinstance(action, S.Reverse):
            width = action.stop - action.start
            segments.append((kind, time, time + width, action.stop, action.start))
            time += width
        elif isinstance(action, (S.Snapshot, S.Restore)):
            if action.level == S.DISK:
                kind = f"disk {kind}"
            segments.append((kind, time, time, action.step, action.step))
        elif isinstance(action, S.End):
            break
    return segments


STYLE: dict[str, dict[str, Any]] = {
    "advance": dict(color="tab:blue", lw=1.2),
    "tape": dict(color="tab:green", lw=3),
    "reverse": dict(color="tab:red", lw=3),
    "snapshot": dict(color="black", marker="s", ms=5, ls="none"),
    "restore": dict(color="tab:orange", marker="o", ms=4, ls="none"),
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
