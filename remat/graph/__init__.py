"""Rematerialization of a recorded graph (issue 26).

* :mod:`remat.graph.dtr`: dynamic rematerialization on the tape,
  ``rm.Tape(memory=m, remat="dtr")`` (or ``remat=DTR(heuristic)``): saved
  values are evicted when the budget would be passed and recomputed from
  their inputs when needed;
* :mod:`remat.graph.heuristics`: which value goes first, and
  :mod:`remat.graph.choice`: how the tape samples and scores its candidates;
* :mod:`remat.graph.options`: what ``remat=`` takes (:class:`DTR`), and
  ``tape.stats`` of a DTR tape (:class:`DTRStats`).
"""

from .heuristics import HEURISTICS, Heuristic
from .options import DTR, DTRStats

__all__ = ["DTR", "DTRStats", "HEURISTICS", "Heuristic"]
