"""The executor: one chain of steps, reversed under a budget by following a schedule.

A *chain* is ``x_0 -> x_1 -> ... -> x_n``: step ``i`` maps state ``x_i`` to
``x_{i+1}``, and may also read a per-step input ``xs[i]`` and give a per-step
output ``y_i`` (a scan).  ``tape.loop`` (one step function), ``tape.chain``
(a function per step, shapes may change) and ``tape.scan`` (JAX's
``lax.scan``) are all chains (see :mod:`remat.budget`).  What the executor
keeps is decided by a schedule from :mod:`remat.schedules`, an iterator of
actions that this package carries out one by one and never second-guesses:

* ``Advance(a, b)``: run steps a..b-1 without recording (``no_grad``);
* ``Tape(a, b)``: run steps a..b-1 recording each on a small tape of its own;
* ``Snapshot / Restore / Free``: keep, reload or drop the state in a slot;
* ``Reverse(a, b)``: backpropagate through the taped steps b-1..a;
* ``Discard(a, b)``: drop step tapes unreversed (online checkpointing);
* ``EndForward``: the forward sweep is over; the rest runs in ``backward``.

The chain appears on the outer tape as one record.  Its backward runs the
rest of the schedule: each step's cotangent flows through that step's own
records; cotangents for tensors the step closed over (parameters) go straight
into the outer sweep, so their gradients accumulate exactly as without
checkpointing, and those of ``xs`` gather in one buffer per input.

A state is a pytree of arrays (:mod:`remat.pytree`) plus the random-number
generator's state, so a step that draws random numbers replays them exactly
when it is recomputed.  The *replay check* verifies that recomputed steps
reproduce their first run: the structure, shapes and dtypes of every
recomputed step's outputs; their values (unless ``check_replay=False``) by
fingerprints compared where taped runs meet, in memory that does not grow
with n (:mod:`remat.executor.replay` says what it guarantees).  Everything is counted
as it happens: ``stats`` reports step evaluations, snapshots and bytes held.

Second order (``rm.hvp``, ``rm.grad`` of ``rm.grad``): a backward that is
itself differentiated gives the chain's gradient as one ``loop_adjoint``
record, whose tangent and VJP run the chain again from x_0 under the same
schedule with every state paired with its tangent (:class:`TangentRun`).

The package, in reading order (each module imports only those above it):

* ``errors``, ``stats``: its errors, and what it counts (``tape.stats``);
* ``state``: states as pytrees, their specs, the chain's outputs on the tape;
* ``steps``: one step taped, reversed, and what its tape keeps alive;
* ``replay``: the replay check;
* ``evaluate``: evaluating a step and checking what it returned (and a policy's
  kept values);
* ``slots``: snapshots in memory, on another device, or on disk;
* ``reversible``: states recomputed backwards by a loop's inverse;
* ``interpreter``: one handler per action;
* ``run``: one run of a chain (:class:`ChainRun`) and the interface that
  :mod:`remat.memory` and :mod:`remat.disk` drive it through;
* ``tangents``: second order, and forward mode through a chain;
* ``chain``: the chain op, :func:`run_chain`.
"""

from .chain import CHAIN, Chain, run_chain
from .errors import (
    NAMED_ERRORS,
    REPLAY_CAUSES,
    LoopError,
    ReplayError,
    StepOutputError,
    name_error,
)
from .evaluate import KeepingStepper, Stepper
from .interpreter import HANDLERS
from .replay import Forward, ReplayCheck, fingerprint_all
from .run import ChainRun, KeepingRun
from .slots import Slots
from .state import (
    CARRY_REAL,
    Spec,
    StateCotangent,
    arrays_of,
    is_value,
    leaves_of,
    outputs_of,
    refuse_complex_leaves,
    relative_difference,
)
from .stats import LoopStats
from .steps import StepSweep, StepTape, reverse_step, saved_by, tape_call
from .tangents import TangentRun

__all__ = [
    "CARRY_REAL",
    "CHAIN",
    "HANDLERS",
    "NAMED_ERRORS",
    "REPLAY_CAUSES",
    "Chain",
    "ChainRun",
    "Forward",
    "KeepingRun",
    "KeepingStepper",
    "LoopError",
    "LoopStats",
    "ReplayCheck",
    "ReplayError",
    "Slots",
    "Spec",
    "StateCotangent",
    "StepOutputError",
    "StepSweep",
    "StepTape",
    "Stepper",
    "TangentRun",
    "arrays_of",
    "fingerprint_all",
    "is_value",
    "leaves_of",
    "name_error",
    "outputs_of",
    "refuse_complex_leaves",
    "relative_difference",
    "reverse_step",
    "run_chain",
    "saved_by",
    "tape_call",
]
