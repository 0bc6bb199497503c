"""Rematerialization of a recorded graph (issue 26).

* :mod:`remat.graph.dtr`: dynamic rematerialization on the tape,
  ``rm.Tape(memory=m, remat="dtr")`` (or ``remat=DTR(heuristic)``): saved
  values are evicted when the budget would be passed and recomputed from
  their inputs when needed;
* :mod:`remat.graph.heuristics`: which value goes first;
* :mod:`remat.graph.planned`: the optimal plan of the recorded graph on the tape,
  ``rm.Tape(memory=m, remat="optimal")`` (or ``remat=Planned(time_limit, relaxed)``):
  the first run is recorded (:mod:`remat.graph.recording`) and planned, the later
  ones follow the plan;
* :mod:`remat.graph.options`: what ``remat=`` takes (:class:`DTR`, :class:`Planned`),
  and ``tape.stats`` of a DTR tape (:class:`DTRStats`) or a planned one
  (:class:`PlanStats`).
"""

from .heuristics import HEURISTICS, Heuristic
from .options import DTR, DTRStats, Planned, PlanStats

__all__ = ["DTR", "DTRStats", "HEURISTICS", "Heuristic", "PlanStats", "Planned"]
