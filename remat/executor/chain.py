"""The chain op: what the executor runs (:class:`Chain`), and the chain as one record on
the outer tape (:func:`run_chain`), whose backward runs the rest of the schedule.

The chain's backward runs each step's cotangent through that step's own
records; cotangents for tensors the steps closed over (parameters) go straight
into the outer sweep, so their gradients accumulate exactly as without
checkpointing, and those of ``xs`` gather in one buffer per input.  A chain is
reversed once; reversed again (``retain_graph=True``) it runs the schedule
again from x_0, which it keeps only when it may run again (inside ``rm.grad``,
``rm.jvp`` or ``rm.hvp``).
"""

from __future__ import annotations

from .. import schedules
from ..ops.core import Op
from ..pytree import unflatten
from ..tape import GRAD_ENABLED, BackwardError
from ..tensor import Tensor
from .run import ChainRun, KeepingRun
from .state import Spec, leaves_of, outputs_of, refuse_complex_leaves
from .tangents import chain_tangents, recorded_backward


def refuse_twice(what):
    return BackwardError(
        f"{what} was run outside rm.grad, rm.jvp and rm.hvp, so it kept no copy of its "
        "initial state, and it can be reversed only once: its backward releases its "
        "snapshots, and reversing it again (retain_graph=True, or a backward that is itself "
        "differentiated) runs the schedule again from x_0. Run the chain inside the "
        "function you differentiate (rm.hvp(f, ...), rm.grad(rm.grad(f)), or rm.grad(f)(p) "
        "with p requiring grad), where it keeps x_0"
    )


def _chain_backward(record, g, sweep):
    run = record.args[0]
    again = sweep.create_graph or sweep.retain_graph or run.reversed
    if again and run.start is None:  # refuse before anything is released
        raise refuse_twice("this checkpointed tape.loop / chain / scan")
    if sweep.create_graph:  # the backward is itself to be differentiated
        recorded_backward(run, g, sweep)
        return
    if not sweep.retain_graph:
        record.release()
    if run.reversed:  # reversed before: the schedule runs again from x_0
        run = run.again()
        run.run_forward(again=True)
    run.reversed = True
    run.backward(g, sweep)


def _chain_tangent(record, tangents):
    """Forward mode through a chain: its steps run again from x_0, in order, each
    recorded and swept forward with its inputs' tangents (and those of the
    values the steps close over), so memory stays one step's tape."""
    run = record.args[0]
    if run.start is None:
        raise NotImplementedError(
            "rm.jvp: this checkpointed chain was run outside rm.jvp, so it did not keep "
            "its initial state (a thread started inside rm.jvp runs outside it: run the "
            "chain in the thread that called rm.jvp)"
        )
    return chain_tangents(run, record.parents, tangents)


CHAIN = Op("loop", None, (), None, custom_backward=_chain_backward, custom_tangent=_chain_tangent)


class Chain:
    """What the executor runs: ``n`` steps, each ``call(i, state, x)`` -> (state, y).

    ``name(i)`` names step i in messages; ``same_spec`` says every state has
    x_0's spec (loops and scans); ``step`` is a loop's function itself;
    ``xs`` are the per-step inputs' leaf arrays
    (leading axis n) and their nodes; ``has_ys`` says steps give outputs;
    ``inverse`` is a loop's inverse step (``x_i = inverse(x_{i+1})``), for a
    schedule that recomputes states backwards (``Invert``).
    """

    def __init__(
        self,
        owner,
        call,
        name,
        same_spec,
        xs=(),
        xs_nodes=(),
        xs_tree=None,
        has_ys=False,
        step=None,
        inverse=None,
    ):
        self.owner = owner  # "tape.loop", "tape.chain" or "tape.scan"
        self.call = call
        self.step = step  # a loop's step function itself (state -> state), or None
        self.name = name
        self.same_spec = same_spec
        self.xs = xs
        self.xs_nodes = xs_nodes
        self.xs_tree = xs_tree
        self.has_ys = has_ys
        self.inverse = inverse


def run_chain(tape, chain, state, schedule, until=None, max_steps=None, plan_with_tangents=None):
    """Run ``chain`` from ``state`` following ``schedule``; return (final state, ys).

    The chain is one record on the open tape (when gradients are on); its
    backward runs the rest of the schedule.  ``plan_with_tangents`` (under
    ``rm.Tape(memory=)``): a callable that gives the schedule of the chain's
    run with tangents (``rm.hvp``, ``rm.grad`` of ``rm.grad``), which then
    holds no more than the budget either; without it that run follows
    ``schedule`` again.
    """
    x0, x0_nodes, tree0 = leaves_of(state, "the initial state", copy_arrays=True)
    refuse_complex_leaves(x0, f"{chain.owner}: leaf {{}} of the initial state")
    spec0 = Spec.of(tree0, x0)
    # rm.Tape(policy=): the steps keep values for their recomputations (store-all has none;
    # a reversible loop's recomputations start from reconstructed states, which kept values
    # of the exact ones would not match)
    keeps = getattr(tape, "recompute", None) is not None
    if isinstance(schedule, schedules.StoreAll) or getattr(schedule, "reconstructs", False):
        keeps = False
    kind = KeepingRun if keeps else ChainRun
    run = kind(tape, chain, schedule, x0, x0_nodes, spec0, until, max_steps)
    run.plan_with_tangents = plan_with_tangents
    try:
        final, ys = run.run_forward()
    except BaseException:
        run.release()
        raise
    tape.loops.append(run.stats)
    final_spec = run.spec_at(run.stats.steps)
    arrays = tuple(final) + tuple(ys)
    y_tree = run.steps.ys_spec.tree if chain.has_ys else None
    parents = tuple(x0_nodes) + tuple(chain.xs_nodes)
    if not GRAD_ENABLED.get():
        run.release()
        outputs = [Tensor._wrap(a) for a in arrays]
    else:
        # Recorded even when nothing in x_0 needs a gradient: a step may use a
        # parameter in steps that were not taped in the forward sweep.
        # (A recorder open around the tape, a step's say, lists these records too.)
        with tape:
            outputs = outputs_of(CHAIN, (run,), parents, arrays, tuple(a.shape for a in arrays))
    width = len(final)
    new_state = unflatten(final_spec.tree, outputs[:width])
    ys_out = unflatten(y_tree, outputs[width:]) if y_tree is not None else None
    return new_state, ys_out
