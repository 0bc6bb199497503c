"""What ``rm.Tape(remat=...)`` takes: :class:`DTR` (a heuristic) or :class:`Planned` (the
optimal plan of the recorded graph), checked with the tape's other options; what
``tape.stats`` reports: :class:`DTRStats` under DTR, :class:`PlanStats` under a plan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..schedules import GraphCosts, GraphPlan
from ..units import parse_bytes
from .heuristics import HEURISTICS


class DTR:
    """``rm.Tape(memory=m, remat=DTR(heuristic))``: DTR with a chosen heuristic.

    ``heuristic`` is a name in :data:`remat.graph.heuristics.HEURISTICS`
    ("h_dtr_eq", the default: the DTR paper's own, "h_dtr", "lru", "largest_first") or any
    callable ``score(value, now) -> float`` (lowest evicted first);
    ``remat="dtr"`` is ``DTR()``.

    >>> import remat as rm
    >>> from remat.graph import DTR
    >>> DTR("lru"), DTR()
    (DTR('lru'), DTR('h_dtr_eq'))
    """

    def __init__(self, heuristic: str | Any = "h_dtr_eq") -> None:
        if isinstance(heuristic, str):
            if heuristic not in HEURISTICS:
                raise ValueError(
                    f"DTR: unknown heuristic {heuristic!r}; choose one of "
                    f"{', '.join(HEURISTICS)} or pass a callable score(value, now)"
                )
            heuristic = HEURISTICS[heuristic]
        elif not callable(heuristic):
            raise TypeError(
                f"DTR: heuristic must be a name or a callable score(value, now), got {heuristic!r}"
            )
        self.heuristic = heuristic

    @property
    def name(self) -> str:
        return getattr(self.heuristic, "name", getattr(self.heuristic, "__name__", "custom"))

    def __repr__(self) -> str:
        return f"DTR({self.name!r})"


class Planned:
    """``rm.Tape(memory=m, remat=Planned(time_limit, relaxed))``: the optimal plan of the
    recorded graph (:mod:`remat.graph.planned`); ``remat="optimal"`` is ``Planned()``.

    ``time_limit`` (seconds) and ``relaxed`` go to :func:`remat.schedules.plan_graph`;
    where it finds no plan in time, the runs go on under DTR (``dtr``, whose heuristic
    also keeps the budget wherever a run cannot follow its plan).  Needs SciPy (the
    ``milp`` extra): without it, constructing one raises an ImportError naming the extra.

    >>> from remat.graph import Planned
    >>> Planned(), Planned(time_limit=5, relaxed=True)
    (Planned(time_limit=30.0, relaxed=False), Planned(time_limit=5.0, relaxed=True))
    """

    def __init__(self, time_limit: float = 30.0, relaxed: bool = False) -> None:
        if (
            isinstance(time_limit, bool)
            or not isinstance(time_limit, (int, float))
            or not time_limit > 0
        ):
            raise ValueError(
                f"Planned: time_limit must be a number of seconds > 0, got {time_limit!r}"
            )
        if not isinstance(relaxed, bool):
            raise ValueError(f"Planned: relaxed must be True or False, got {relaxed!r}")
        try:
            import scipy.optimize  # type: ignore[import-untyped]  # noqa: F401, PLC0415
        except ImportError:
            raise ImportError(
                "rm.Tape(remat='optimal') plans the recorded graph with HiGHS through "
                "scipy.optimize.milp: install SciPy (>= 1.10) with the extra: "
                "pip install \"remat[milp]\" (or use remat='dtr', which needs no plan)"
            ) from None
        self.time_limit = float(time_limit)
        self.relaxed = relaxed
        self.dtr = DTR()

    @property
    def name(self) -> str:
        return "optimal"

    def __repr__(self) -> str:
        return f"Planned(time_limit={self.time_limit!r}, relaxed={self.relaxed!r})"


def resolve(remat: Any, memory: Any, **loop_options: Any) -> tuple[DTR | Planned, int]:
    """``(DTR or Planned, budget in bytes)`` for ``rm.Tape(remat=..., memory=...)``, refusing
    what it does not combine with."""
    if remat == "dtr":
        remat = DTR()
    elif remat == "optimal":
        remat = Planned()
    elif not isinstance(remat, (DTR, Planned)):
        raise ValueError(
            "Tape: remat must be 'dtr', 'optimal', a remat.graph.DTR(heuristic) or a "
            f"remat.graph.Planned(time_limit, relaxed) object, got {remat!r}"
        )
    form = "dtr" if isinstance(remat, DTR) else "optimal"
    if memory is None:
        raise ValueError(
            f"Tape: remat={form!r} keeps the saved values within a byte budget: pass memory="
        )
    for name, value in loop_options.items():  # options of loops (None or False: not given)
        if value is not None and value is not False:
            raise ValueError(
                f"Tape: remat={form!r} with {name}={value!r} is not supported: it evicts and "
                f"recomputes single ops under memory= alone; drop {name}= (or drop remat= to "
                "plan loops with it)"
            )
    return remat, parse_bytes(memory)


def refuse(form: str) -> ValueError:
    """The error of a form a DTR tape does not run (tape.loop, chain, scan, rm.checkpoint)."""
    return ValueError(
        f"{form} inside rm.Tape(memory=..., remat='dtr') (or 'optimal') is not supported: DTR "
        "(and a plan) rematerializes "
        "the single ops recorded on the tape, and does not yet evict or recompute a loop's, "
        "chain's, scan's or checkpoint's record. Write the loop as plain Python inside the "
        "tape (DTR then keeps it within the budget), or use rm.Tape(memory=...) without remat="
    )


@dataclass
class DTRStats:
    """What a DTR tape did, counted as it ran (``tape.stats`` of ``Tape(remat="dtr")``).

    ``ops``: records made on the tape; ``evictions``: values evicted;
    ``recomputed_ops`` and ``recompute_seconds``: op evaluations made to
    bring values back, and their time; ``peak_bytes``: the most bytes saved
    at once (by buffer, as :mod:`remat.alive` counts, with the constants its
    ops read and the arrays their keywords keep, such as an index table),
    at most ``memory``.

    Per op, ``evicted_by_op[k]`` and ``recomputed_by_op[k]`` count the
    evictions of op ``k``'s value and the evaluations of op ``k`` made to
    bring values back (only the ops that had any; they sum to ``evictions``
    and ``recomputed_ops``).  Op ``k`` is the ``k``-th op the tape counted
    in ``ops``, from 0: on a tape run once, ``tape.records[k]``.  A map
    ``{node: times}`` of a run's graph, as :func:`remat.plot_graph.value_fates`
    takes, and, grouped by ``tape.records[k].op.name``, the counts per kind of op:

    >>> import remat as rm
    >>> x = rm.tensor([0.5] * 1000, requires_grad=True)
    >>> with rm.Tape(memory=40_000, remat=rm.graph.DTR("lru")) as tape:
    ...     h = x
    ...     for _ in range(10):
    ...         h = rm.sin(h)
    ...     loss = h.sum()
    >>> loss.backward()
    >>> s = tape.stats
    >>> s.evictions, s.evicted_by_op
    (4, {0: 1, 1: 1, 2: 1, 3: 1})
    >>> s.recomputed_ops, s.recomputed_by_op
    (4, {0: 1, 1: 1, 2: 1, 3: 1})
    """

    ops: int = 0
    evictions: int = 0
    recomputed_ops: int = 0
    recompute_seconds: float = 0.0
    peak_bytes: int = 0
    memory: int = 0
    heuristic: str = ""
    evicted_by_op: dict[int, int] = field(default_factory=dict)
    recomputed_by_op: dict[int, int] = field(default_factory=dict)


@dataclass
class PlanStats(DTRStats):
    """What one run of a ``Tape(remat="optimal")`` did (``tape.stats``: the latest run, from
    entering the tape to the end of its backward; see :mod:`remat.graph.planned`).

    Besides :class:`DTRStats`' counts (of this run): ``planned``, whether the run
    followed a plan to its end; ``method``, the plan's (``plan.method``), or ``"dtr"``
    when the run did not follow one, with the reason in ``fallback`` (the first run,
    which records the graph; an op that differed from the plan's, named with its step;
    a plan that could not be made); ``departures``, the places where a planned run
    could not do what its plan says (an eviction the plan asks of a value user code
    still holds, or one DTR made to keep the budget), the first described in
    ``departed``.  ``plan``, ``graph`` (the joint forward + backward
    :class:`~remat.schedules.GraphCosts`, measured), ``names`` (a label per graph
    node), ``columns`` (per graph node, the index ``k`` of its op in the run, as
    ``evicted_by_op`` counts them: an op value's op, or a VJP node's first VJP's
    op), ``solve_seconds``, ``predicted_seconds`` (the compute the plan predicts
    for a run, forward and VJPs as measured, with its recomputations) and
    ``predicted_recomputed_ops`` (the op evaluations it recomputes) are those of the
    plan this run followed, or else of the plan made at its end for the next runs
    (None, 0.0 if none); ``solved`` says whether this run solved one (False when the
    plan came from the cache of plans).  ``replanned``: why the plan was made again at
    the end of this run, from the costs timed in the runs that followed it (their
    prediction was off by more than :data:`remat.graph.plans.REPLAN_TOLERANCE`), or None.
    """

    planned: bool = False
    method: str = "dtr"
    fallback: str | None = None
    solve_seconds: float = 0.0
    predicted_seconds: float = 0.0
    predicted_recomputed_ops: int = 0
    plan: GraphPlan | None = None
    graph: GraphCosts | None = None
    names: list[str] | None = None
    columns: list[int] | None = None
    solved: bool = False
    departures: int = 0
    departed: str | None = None
    replanned: str | None = None
