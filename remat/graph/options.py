"""What ``rm.Tape(remat=...)`` takes: :class:`DTR` (a heuristic), checked with the tape's
other options; what ``tape.stats`` of a DTR tape reports (:class:`DTRStats`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..units import parse_bytes
from .heuristics import HEURISTICS


class DTR:
    """``rm.Tape(memory=m, remat=DTR(heuristic))``: DTR with a chosen heuristic.

    ``heuristic`` is a name in :data:`remat.graph.heuristics.HEURISTICS`
    ("h_dtr", the default, "h_dtr_eq", "lru", "largest_first") or any
    callable ``score(value, now) -> float`` (lowest evicted first);
    ``remat="dtr"`` is ``DTR()``.

    >>> import remat as rm
    >>> from remat.graph import DTR
    >>> DTR("lru"), DTR()
    (DTR('lru'), DTR('h_dtr'))
    """

    def __init__(self, heuristic: str | Any = "h_dtr") -> None:
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


def resolve(remat: Any, memory: Any, **loop_options: Any) -> tuple[DTR, int]:
    """``(DTR, budget in bytes)`` for ``rm.Tape(remat=..., memory=...)``, refusing what it
    does not combine with."""
    if remat == "dtr":
        remat = DTR()
    elif remat == "optimal":
        raise NotImplementedError(
            "Tape: remat='optimal' (the optimal plan of a recorded graph) is not built yet; "
            "use remat='dtr'"
        )
    elif not isinstance(remat, DTR):
        raise ValueError(
            f"Tape: remat must be 'dtr' or a remat.graph.DTR(heuristic) object, got {remat!r}"
        )
    if memory is None:
        raise ValueError(
            "Tape: remat='dtr' keeps the saved values within a byte budget: pass memory="
        )
    for name, value in loop_options.items():  # options of loops (None or False: not given)
        if value is not None and value is not False:
            raise ValueError(
                f"Tape: remat='dtr' with {name}={value!r} is not supported: DTR evicts and "
                f"recomputes single ops under memory= alone; drop {name}= (or drop remat= to "
                "plan loops with it)"
            )
    return remat, parse_bytes(memory)


def refuse(form: str) -> ValueError:
    """The error of a form a DTR tape does not run (tape.loop, chain, scan, rm.checkpoint)."""
    return ValueError(
        f"{form} inside rm.Tape(memory=..., remat='dtr') is not supported: DTR rematerializes "
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
    at once (by buffer, as :mod:`remat.alive` counts), at most ``memory``.
    """

    ops: int = 0
    evictions: int = 0
    recomputed_ops: int = 0
    recompute_seconds: float = 0.0
    peak_bytes: int = 0
    memory: int = 0
    heuristic: str = ""
