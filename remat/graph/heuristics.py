"""Which saved value a DTR tape evicts first: the heuristics, each a score (lowest goes first).

A heuristic is any callable ``score(value, now) -> float``.  ``value`` is a
:class:`remat.graph.value.Value` (what the heuristic may read: ``cost``, the
seconds its op took when last evaluated; ``size``, the bytes of the buffer
it lives in; ``last``, the tick of the tape's clock at which it was last made,
read or restored; ``evicted_neighbourhood_cost()``) and ``now`` is the clock's
tick (one tick per recorded op and per record reversed).  The tape evicts, of
the values it may free, the one with the lowest score.

The four shipped here are those of Kirisame et al., *Dynamic Tensor
Rematerialization* (ICLR 2021), so that they can be compared on one program:

* :data:`h_dtr`: ``cost / (bytes * staleness)``, cheap to recompute, large and
  long unused goes first;
* :data:`h_dtr_eq` (the default of ``remat="dtr"``): the same with the cost of the
  evicted neighbourhood added
  (evicting a value next to evicted ones makes their recomputation dearer), read
  from the classes of values out of memory the tape keeps, as the paper's
  ``h_DTR^eq`` does: a few look-ups a score (:mod:`remat.graph.value`);
* :data:`lru`: the least recently used first;
* :data:`largest_first`: the largest first.

``h_dtr`` and ``h_dtr_eq`` read measured times, so their choices may differ between
runs (the least budget that works hardly does: :mod:`remat.graph.room`); ``lru`` and
``largest_first`` choose alike every run.

>>> from remat.graph import heuristics
>>> sorted(heuristics.HEURISTICS)
['h_dtr', 'h_dtr_eq', 'largest_first', 'lru']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Heuristic:
    """A named score: ``Heuristic("name", score)`` with ``score(value, now) -> float``.

    ``scores(values, now) -> list`` scores many at once (the tape scores a sample of
    candidates per eviction); by default it calls ``score`` on each, and the ones
    shipped here compute it in one comprehension, which is several times faster.

    ``neighbourhood``: whether it reads ``value.evicted_neighbourhood_cost()``.  The
    tape keeps the classes that reads at each eviction only for one that does (as
    for any callable that is not a Heuristic).  One that reads it and says it does
    not still gets a sum: the classes are then made when first read, without the
    merges an eviction would have made (values no score has reached yet are left
    out), so say so.
    """

    def __init__(
        self,
        name: str,
        score: Callable[[Any, int], float],
        scores: Callable[[list, int], list] | None = None,
        neighbourhood: bool = True,
    ) -> None:
        self.name = name
        self.score = score
        self.scores = scores or (lambda values, now: [score(v, now) for v in values])
        self.neighbourhood = neighbourhood

    def __call__(self, value: Any, now: int) -> float:
        return self.score(value, now)

    def __repr__(self) -> str:
        return self.name


def _staleness(value, now):
    return now - value.last + 1


h_dtr = Heuristic(
    "h_dtr",
    lambda v, now: v.cost / (max(v.size, 1) * _staleness(v, now)),
    lambda vs, now: [v.cost / ((v.size or 1) * (now - v.last + 1)) for v in vs],
    neighbourhood=False,
)
h_dtr_eq = Heuristic(
    "h_dtr_eq",
    lambda v, now: (
        (v.cost + v.evicted_neighbourhood_cost()) / (max(v.size, 1) * _staleness(v, now))
    ),
    lambda vs, now: [
        (v.cost + v.evicted_neighbourhood_cost()) / ((v.size or 1) * (now - v.last + 1)) for v in vs
    ],
)
lru = Heuristic(
    "lru", lambda v, now: v.last, lambda vs, now: [v.last for v in vs], neighbourhood=False
)
largest_first = Heuristic(
    "largest_first",
    lambda v, now: -v.size,
    lambda vs, now: [-v.size for v in vs],
    neighbourhood=False,
)

HEURISTICS = {h.name: h for h in (h_dtr, h_dtr_eq, lru, largest_first)}
"""name -> Heuristic: those ``rm.graph.DTR(heuristic=name)`` accepts by name."""
