"""Rematerialization of a recorded graph (issue 26).

* :mod:`remat.graph.dtr`: dynamic rematerialization on the tape,
  ``rm.Tape(memory=m, remat="dtr")`` (or ``remat=DTR(heuristic)``): saved
  values are evicted when the budget would be passed and recomputed from
  their inputs when needed;
* :mod:`remat.graph.heuristics`: which value goes first.
"""

from .dtr import DTR, DTRStats
from .heuristics import HEURISTICS, Heuristic

__all__ = ["DTR", "DTRStats", "HEURISTICS", "Heuristic"]
