"""Checkpointing schedules: which states to keep, what to recompute, when.

A schedule reverses a loop ``x_0 -> x_1 -> ... -> x_n`` with a budget of slots
for stored states, as a stream of actions (:mod:`.actions`) that the loop
executor carries out.  Schedules are pure data: they hold no arrays and never
touch the backend.  The one exception to "pure Python" is arithmetic:
:class:`Optimal` builds its tables with NumPy on the CPU (:mod:`.planning`).
The folder stands alone: no module in it imports anything of remat outside
it, so that it can be copied into another engine and imported there as a
package of its own (with NumPy installed).

* :class:`StoreAll` - tape everything: ``n`` evaluations, ``n`` tapes.
* :class:`Periodic`, :class:`Sqrt` - store every ``k``-th state, re-tape one
  segment at a time: at most ``2n`` evaluations (Chen et al. 2016).
* :class:`Revolve` - optimal binomial checkpointing (Griewank and Walther):
  ``T(n, s) = n + r*n - C(s + r, s + 1)`` evaluations with ``s`` slots.
* :class:`Online` - for loops whose length is unknown until they end.
* :class:`DiskRevolve`, :class:`TwoLevel` - memory slots plus disk slots
  (``level="disk"``, :data:`DISK`) that cost ``write_cost`` / ``read_cost``
  (Aupy et al. 2016; Herrmann and Pallez 2020), with their optimal costs
  :func:`disk_revolve_cost` and :func:`two_level_cost` (:mod:`.disk`).
* :class:`Reversible` - steps with an inverse: the reverse sweep recomputes
  the states backwards (``Invert``), keeping ``snapshots - 1`` exact ones to
  bound the drift (:mod:`.reversible`).
* :class:`Mixed` - mixed checkpointing (Maddison 2024): a slot holds a state
  or one step's tape; :func:`mixed_forward_steps` is its optimum ``M(n, s)``.
* :class:`Optimal` - the least-time schedule for a heterogeneous chain
  (:class:`ChainCosts`: per-step times and bytes) under a byte budget, by the
  dynamic programme of Beaumont et al. (rotor); :func:`minimum_bytes` is the
  smallest budget it can plan for.

* :func:`plan_graph` - the least-compute plan for a recorded graph
  (:class:`GraphCosts`: the joint forward + backward graph, per-node costs and
  bytes) under a byte budget: Checkmate's MILP, solved by HiGHS through SciPy
  (the ``milp`` extra); :func:`simulate_graph` checks a :class:`GraphPlan`.

:func:`simulate` checks a schedule and counts its cost (and, given a
:class:`ChainCosts`, its time and peak bytes); :mod:`.binomial` holds
the formulas (:func:`beta`, :func:`repetition_number`,
:func:`optimal_forward_steps`).
"""

from .actions import (
    DISK,
    MEMORY,
    Action,
    Advance,
    Discard,
    End,
    EndForward,
    Free,
    Invert,
    Restore,
    Reverse,
    Schedule,
    Snapshot,
    Tape,
)
from .binomial import beta, optimal_forward_steps, repetition_number
from .catalog import SCHEDULE_NAMES, make_schedule
from .costs import ChainCosts
from .disk import DiskRevolve, TwoLevel, disk_revolve_cost, two_level_cost
from .graph_costs import GraphCosts, GraphPlan, GraphPlanError, GraphSimulation, simulate_graph
from .graph_plan import GraphPlanTimeout, plan_graph
from .mixed import Mixed, mixed_forward_steps
from .offline import Periodic, Sqrt, StoreAll
from .online import Online
from .optimal import Optimal, block_minimum_bytes, block_starts, minimum_bytes
from .reversible import Reversible
from .revolve import Revolve
from .simulate import ScheduleError, Simulation, simulate

__all__ = [
    "DISK",
    "MEMORY",
    "SCHEDULE_NAMES",
    "Action",
    "Advance",
    "ChainCosts",
    "Discard",
    "DiskRevolve",
    "End",
    "EndForward",
    "Free",
    "GraphCosts",
    "GraphPlan",
    "GraphPlanError",
    "GraphPlanTimeout",
    "GraphSimulation",
    "Invert",
    "Mixed",
    "Online",
    "Optimal",
    "Periodic",
    "Restore",
    "Reverse",
    "Reversible",
    "Revolve",
    "Schedule",
    "ScheduleError",
    "Simulation",
    "Snapshot",
    "Sqrt",
    "StoreAll",
    "Tape",
    "TwoLevel",
    "beta",
    "disk_revolve_cost",
    "make_schedule",
    "block_minimum_bytes",
    "block_starts",
    "minimum_bytes",
    "mixed_forward_steps",
    "optimal_forward_steps",
    "plan_graph",
    "repetition_number",
    "simulate",
    "simulate_graph",
    "two_level_cost",
]
