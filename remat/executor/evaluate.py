"""Evaluating a chain's steps: one step on a state, taped or not, and what it returned
checked against what the steps gave before (:class:`Stepper`); under
``rm.Tape(policy=)`` each step's first run keeps what the policy chooses and its
later runs reuse it (:class:`KeepingStepper`, :mod:`remat.selective`)."""

from __future__ import annotations

import copy

from .. import backend
from ..pytree import flatten, unflatten
from ..selective import Reusing, Saving
from ..tape import GRAD_DEPTH, STEP, StepValue
from ..tensor import Tensor
from .errors import ReplayError, StepOutputError, name_error
from .replay import fingerprint_all
from .state import Spec, arrays_of, is_value, refuse_complex_leaves


class Stepper:
    """Evaluates step i of ``chain`` on x_i's arrays, for one run of it.

    It learns what the steps return on their first run, in order (``reached``:
    how many steps have run at least once; ``specs``: position -> Spec of
    x_position; ``ys_spec`` and the stacked ``ys`` of a scan), and checks every
    later run against that: the structure, shapes and dtypes always, a scan's
    y_i by value when taped again (``replay``: the run's :class:`ReplayCheck`).
    It counts every evaluation in ``stats.forward_steps``; ``evaluating`` is the
    step being evaluated (or reversed), for error messages.
    """

    keeping = None  # a KeepingStepper's: step index -> what its first run kept

    def __init__(self, chain, spec0, stats, replay, held):
        self.chain = chain
        self.stats = stats
        self.replay = replay
        self.held = held  # the run's holdings (what a KeepingStepper's kept values count in)
        self.context = STEP.get()  # the step this chain runs inside, if any: its values may be used
        # how deep inside rm.grad the chain runs: its steps taped again in backward (after
        # that rm.grad's f returned) run as deep, so that rm.jvp and rm.grad inside a step
        # take the path they take when store-all tapes it in the first run (untaped, both
        # take theirs whatever the depth)
        self.grad_depth = GRAD_DEPTH.get()
        self.specs = [spec0]  # position -> Spec of x_position, learned going forward
        # a loop over one Tensor: call takes a short path (bench_loop's tiny steps)
        self.short = chain.step is not None and spec0.tree.kind == "leaf"
        self.floating = self.short and backend.is_floating(spec0.dtypes[0])
        self.reached = 0  # how many steps have been evaluated at least once
        self.evaluating = None  # the step being evaluated, for error messages
        self.ys = []  # the stacked ys, a buffer per leaf: row i is y_i, from the forward sweep
        self.ys_spec = None

    def again(self, stats, replay, held):
        """The stepper of a run again: what was learned, shared; its own counts."""
        steps = copy.copy(self)
        steps.__class__ = Stepper  # a policy's kept values went with the first backward:
        steps.keeping = None  # its steps recompute them
        steps.stats, steps.replay, steps.held = stats, replay, held
        steps.ys = []
        return steps

    def release(self):
        """Drop what the steps keep for their later runs (after backward, or on an error)."""

    def as_deep(self):
        """Inside rm.grad as deep as the chain was run (a token to reset), or None where
        the step runs so deep already (the first run)."""
        if GRAD_DEPTH.get() == self.grad_depth:
            return None
        return GRAD_DEPTH.set(self.grad_depth)

    def call(self, i, arrays, taped):
        """Evaluate step i on x_i's ``arrays``; returns (x_{i+1}'s arrays, inputs, outputs).

        Taped, the inputs are leaves (for the float components) so that the
        step's ops are recorded; untaped, they are constants.  The outputs are
        x_{i+1}'s leaf Tensors, then y_i's; ``inputs`` are the inputs' nodes.
        """
        self.evaluating = i
        self.stats.forward_steps += 1
        chain = self.chain
        marker = StepValue(chain.owner, i, self.context)  # what it makes without a gradient
        if self.short:  # one Tensor in, one Tensor out: tape.loop's common case, kept short
            a = arrays[0]
            t = Tensor._stand_in(a) if taped and self.floating else Tensor._from_record(a, marker)
            token = STEP.set(marker)
            depth = self.as_deep() if taped and self.grad_depth else None
            try:
                out = chain.step(t)
            except Exception as error:
                name_error(chain.name(i), error)
                raise
            finally:
                if depth is not None:
                    GRAD_DEPTH.reset(depth)
                STEP.reset(token)
            if type(out) is Tensor and (out.node or out.node is None or out.node is marker):
                data = out._data
                spec = self.specs[0]
                if data.shape == spec.shapes[0] and data.dtype == spec.dtypes[0]:
                    if i == self.reached:  # the values: where taped runs meet (tape_steps)
                        self.reached += 1
                    return (data,), [t.node], [out]
            return self.finish(i, marker, out, None, [t.node], taped)  # explains what is off

        def stand_in(a, wanted):  # a leaf to differentiate with respect to, or a constant
            return Tensor._stand_in(a) if wanted else Tensor._from_record(a, marker)

        state_in = [stand_in(a, taped and backend.is_floating(a.dtype)) for a in arrays]
        x_in = [  # a[i, ...]: a 0-d array, not a NumPy scalar, for 1-D xs
            stand_in(a[i, ...], taped and node is not None)
            for a, node in zip(chain.xs, chain.xs_nodes)
        ]
        nodes = [t.node for t in state_in + x_in]  # now: the step may rebind its inputs (x += 1)
        token = STEP.set(marker)
        depth = self.as_deep() if taped and self.grad_depth else None
        try:
            state = unflatten(self.spec_at(i).tree, state_in)
            x = unflatten(chain.xs_tree, x_in) if chain.xs_tree is not None else None
            new_state, y = chain.call(i, state, x)
        except Exception as error:
            name_error(chain.name(i), error)
            raise
        finally:
            if depth is not None:
                GRAD_DEPTH.reset(depth)
            STEP.reset(token)
        return self.finish(i, marker, new_state, y, nodes, taped)

    def finish(self, i, marker, new_state, y, nodes, taped):
        """The general case of call: flatten what step i returned, and check it."""
        chain = self.chain
        token = STEP.set(marker)  # its own values may be among what it returns
        try:
            outputs, tree = flatten(new_state, is_value)
            out_arrays = arrays_of(outputs, f"{chain.name(i)}: its new state", True)[0]
            if chain.has_ys:
                y_values, y_tree = flatten(y, is_value)
                y_arrays = arrays_of(y_values, f"{chain.name(i)}: its output y", True)[0]
                outputs = outputs + y_values
            else:
                y_arrays, y_tree = (), None
        finally:
            STEP.reset(token)
        self.check(i, tree, out_arrays, y_tree, y_arrays, taped)
        return out_arrays, nodes, outputs

    def spec_at(self, i):
        """The Spec of x_i (a loop's and a scan's states all have x_0's)."""
        return self.specs[0] if self.chain.same_spec else self.specs[i]

    def check(self, i, tree, arrays, y_tree, y_arrays, taped):
        """Spec of x_{i+1} (and y_i) as expected; when step i is taped again, y_i's values.

        The forward sweep evaluates the steps in order, so step i runs for the
        first time when ``i == self.reached``: what it gives then is learned.
        The values of x_{i+1} are checked where taped runs meet (:mod:`remat.executor.replay`);
        those of y_i here, when step i is taped again (a CRC-32 a step, kept from its
        first run), since the gradient is made of the taped steps alone.
        """
        if i == self.reached:
            self.reached += 1
            if not self.chain.same_spec:
                refuse_complex_leaves(arrays, f"{self.chain.name(i)}: leaf {{}} of its state")
                last = self.specs[i]  # shared when equal: a chain's layers mostly keep it
                self.specs.append(last if last.fits(tree, arrays) else Spec.of(tree, arrays))
            elif not self.specs[0].fits(tree, arrays):
                raise StepOutputError(
                    f"{self.chain.name(i)} returned a state with "
                    f"{self.specs[0].differs(Spec.of(tree, arrays))}; a loop's (or scan's) "
                    "state must keep its structure, shapes and dtypes from step to step (use "
                    "tape.chain for layers that change them)"
                )
            if y_tree is not None:
                if self.ys_spec is None:
                    refuse_complex_leaves(y_arrays, f"{self.chain.name(i)}: leaf {{}} of its y")
                    self.ys_spec = Spec.of(y_tree, y_arrays)
                elif not self.ys_spec.fits(y_tree, y_arrays):
                    raise StepOutputError(
                        f"{self.chain.name(i)} returned y with "
                        f"{self.ys_spec.differs(Spec.of(y_tree, y_arrays))}; every step's y "
                        "must agree, so that they stack"
                    )
                if i == 0:  # a scan: as long as its xs
                    n = self.chain.xs[0].shape[0]
                    self.ys = [backend.zeros((n, *a.shape), a.dtype, like=a) for a in y_arrays]
                for buffer, a in zip(self.ys, y_arrays):
                    buffer[i] = a
            if self.replay.check_values and y_tree is not None:
                self.replay.first_run.ys.append(fingerprint_all(y_arrays, self.replay.full))
            return
        wrong = None
        if not self.spec_at(i + 1).fits(tree, arrays):
            wrong = f"a state with {self.spec_at(i + 1).differs(Spec.of(tree, arrays))}"
        elif y_tree is not None and not self.ys_spec.fits(y_tree, y_arrays):
            wrong = f"y with {self.ys_spec.differs(Spec.of(y_tree, y_arrays))}"
        elif (
            taped
            and self.replay.check_values
            and y_tree is not None
            and fingerprint_all(y_arrays, self.replay.full) != self.replay.first_run.ys[i]
        ):
            wrong = "y with different values (the same structure, shapes and dtypes)"
        if wrong is not None:
            raise self.replay.error(
                f"{self.chain.name(i)} was recomputed from its stored input and returned "
                f"{wrong} than its first run."
            )


class KeepingStepper(Stepper):
    """A Stepper under ``rm.Tape(policy=)`` (:mod:`remat.selective`): the first run of
    each step keeps what the policy chooses, held (and counted) until the step is
    reversed (the Reverse handler releases it), and every later run of the step reuses it."""

    def __init__(self, chain, spec0, stats, replay, held, policy):
        super().__init__(chain, spec0, stats, replay, held)
        self.policy = policy
        self.keeping = {}
        self.notes = {}  # what the steps' first runs note, each distinct note once

    def call(self, i, arrays, taped):
        first = i == self.reached
        kept = self.keeping.get(i)
        if first:
            frame = Saving(self.policy, self.replay.check_values, self.replay.full, self.notes)
        elif kept is not None:
            why = self.replay.forward.what_changed
            frame = Reusing(kept, self.chain.name(i), ReplayError, self.replay.full, why)
        else:  # reversed already (a jvp after backward): nothing kept to reuse
            return super().call(i, arrays, taped)
        with frame:
            result = super().call(i, arrays, taped)
        if first:
            kept = self.keeping[i] = frame.kept()  # released when step i is reversed
            self.held.hold(kept.arrays())
        else:
            frame.finish()
        return result

    def release(self):
        self.keeping.clear()
        self.notes = {}
