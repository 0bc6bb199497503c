"""Reversible steps: a loop with an inverse (``tape.loop(..., inverse=)``) recomputes its
states backwards, ``x_i = inverse(x_{i+1})``, under a schedule that says ``Invert``
(:class:`~remat.schedules.Reversible`), instead of storing them.

A state so rebuilt differs from the exact one by rounding, which grows along
the chain: where an exact state is restored at a position the inverse has just
reached, the two are compared (:func:`compare_reconstruction`, the largest
difference in ``stats.reconstruction_error``), and drift beyond the dtype's
tolerance is refused.  NaN or inf in a rebuilt state, or in what a step taped
from it returns, is refused at once: no comparison may let it through.
"""

from __future__ import annotations

from .. import backend
from ..pytree import flatten, unflatten
from ..tape import no_grad
from ..tensor import Tensor
from .errors import LoopError, StepOutputError, name_error
from .state import Spec, is_value, relative_difference


def invert(run, action):
    """Recompute x_{stop-1} .. x_start from the current x_stop with the loop's inverse."""
    run.expect_position(action, action.stop)
    inverse = run.chain.inverse
    if inverse is None:
        raise LoopError(
            f"schedule {run.schedule!r} asked for {action}, which needs the loop's "
            "inverse: tape.loop(step, state, steps=n, inverse=...)"
        )
    run.replay.taped_end = None
    arrays, rng = run.current
    spec = run.spec_at(action.stop)
    for i in range(action.stop - 1, action.start - 1, -1):
        run.steps.evaluating = i
        state = unflatten(spec.tree, [Tensor._wrap(a) for a in arrays])
        try:
            with no_grad():
                result = inverse(state)
        except Exception as error:
            name_error(f"{run.chain.name(i)}: inverse(x_{i + 1})", error)
            raise
        rebuilt = inverse_leaves(i, result, spec)
        refuse_nonfinite(i, rebuilt, arrays)
        arrays = rebuilt
    run.current = (arrays, rng)
    run.position = run.inverted = action.start


def inverse_leaves(i, result, spec):
    """The arrays of what ``inverse(x_{i+1})`` returned, checked against x_i's spec."""
    values, tree = flatten(result, is_value)
    arrays = tuple(v._data if isinstance(v, Tensor) else v for v in values)
    wrong = spec.differs(Spec.of(tree, arrays))
    if wrong is not None:
        raise StepOutputError(
            f"tape.loop: inverse(x_{i + 1}) returned a state with {wrong}; the inverse "
            f"must return what step {i} was given, x_{i} (the same structure, shapes and "
            "dtypes as the loop's state)"
        )
    return arrays


def refuse_nonfinite(i, rebuilt, given):
    """Refuse x_i as ``inverse(x_{i+1})`` rebuilt it (``given``: x_{i+1}'s arrays) if a
    value is NaN or inf: no comparison may let it through (``max(0.0, nan)`` is 0.0)."""
    for k, a in enumerate(rebuilt):
        bad = backend.count_nonfinite(a)
        if bad:
            raise LoopError(
                f"tape.loop(inverse=...): inverse(x_{i + 1}) returned x_{i} (the input of "
                f"step {i}) with {bad} of its {a.size} values NaN or inf in state leaf {k} "
                f"(shape {a.shape}, {a.dtype}); x_{i + 1} held "
                f"{backend.count_nonfinite(given[k])} there. A reversible loop's states "
                "must be finite: gradients from such a state would be NaN or wrong. Check "
                "the inverse over its domain (a root or a log of a negative number?), or "
                "run the loop without inverse="
            )


def refuse_nonfinite_output(i, step_tape):
    """Refuse step i's outputs, taped from x_i as the inverse rebuilt it, if one holds
    a NaN or an inf: the rebuilt x_i is finite but off by rounding (a root of -1e-300
    where the exact value was 0), and the gradient would come from those values."""
    for k, t in enumerate(step_tape.outputs):
        bad = backend.count_nonfinite(t._data)
        if bad:
            raise LoopError(
                f"tape.loop(inverse=...): step {i}, taped again in backward from x_{i} as "
                f"the inverse rebuilt it, returned {bad} of {t._data.size} values NaN or "
                f"inf in output leaf {k} (shape {t._data.shape}, {t._data.dtype}). A "
                "reversible loop's states must be finite; a rebuilt state differs from the "
                "exact one by rounding, which the step must tolerate (a root or a log at 0?). "
                "Store exact states with rm.Tape(snapshots=s), or run the loop without "
                "inverse="
            )


def compare_reconstruction(run, step, exact, rng):
    """The state the inverse recomputed (current) against the exact x_step restored."""
    rebuilt, rebuilt_rng = run.current
    if rebuilt_rng is not rng and rebuilt_rng != rng:
        raise LoopError(
            f"tape.loop(inverse=...): step {step} drew random numbers (rm.random), which "
            "the inverse cannot give back; a reversible loop's steps must not draw them"
        )
    error = relative_difference(rebuilt, exact)
    stats = run.stats
    if stats.reconstruction_error is None or error > stats.reconstruction_error:
        stats.reconstruction_error = error
    limit = max((backend.reconstruction_tolerance(a.dtype) for a in exact), default=0.0)
    if error > limit:
        where = (
            "inverse(step(x_0)) is not x_0: the inverse does not undo the step"
            if step == 0 and run.stats.steps == 0  # the forward sweep's check
            else f"the states recomputed backwards have drifted from the exact x_{step}"
        )
        raise LoopError(
            f"tape.loop(inverse=...): {where} (largest difference {error:.3g} relative to "
            f"the state's magnitude, above the tolerance {limit:.3g} of its dtype); "
            "gradients from such states would be wrong. Check the inverse, or store "
            "more exact states along the chain with rm.Tape(snapshots=s)"
        )
    run.inverted = None
