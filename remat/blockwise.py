"""A chain of blocks under each way of checkpointing it, measured side by side.

This is what ``remat compare --workload transformer`` prints.  A workload
that is a chain of blocks (a transformer: one block per layer) is run as

* ``none``: the blocks called one after the other, nothing checkpointed;
* ``checkpoint``: every block wrapped in ``rm.checkpoint``, so that only the
  blocks' inputs are kept and each block runs again in backward;
* ``selective``: every block wrapped in
  ``rm.checkpoint(f, policy=rm.policies.save_ops("matmul"))``, so that the
  outputs of its matrix products are kept too, and backward evaluates only
  the rest of the block again (the attention scores, softmax, layer norms and
  GELU of the transformer);
* ``dots`` (not in the default :data:`MODES`): the same with
  ``save_ops("matmul", "einsum")``, keeping every product, as JAX's
  ``dots_saveable``;
* ``revolve``: the blocks as ``tape.chain`` on ``rm.Tape(snapshots=s)``, so
  that at most ``s`` block inputs are kept and the binomial schedule decides
  what runs again.

Each run counts how often the blocks were evaluated (by wrapping them, so it
is measured, not taken from a model) and which ops backward evaluated again
(``rm.count_ops``), its memory is the tracemalloc peak of
a separate run, its time the median of runs without tracemalloc with the
modes interleaved, and its gradients must equal those of ``none`` bit for
bit.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc

from . import schedules
from .budget import Tape
from .checkpoint import checkpoint
from .policies import save_ops
from .selective import count_ops

MODES = ("none", "checkpoint", "selective", "revolve")

POLICIES = {  # the modes that checkpoint every block, and their policies
    "checkpoint": None,
    "selective": save_ops("matmul"),
    "dots": save_ops("matmul", "einsum"),
}

LABELS = {
    "none": "no checkpointing",
    "checkpoint": "rm.checkpoint per block",
    "selective": 'per block, policy=save_ops("matmul")',
    "dots": 'per block, policy=save_ops("matmul", "einsum")',
    "revolve": "revolve over the blocks",
}


class _Counted:
    """A block that counts its evaluations."""

    def __init__(self, f, counter):
        self.f, self.counter = f, counter
        self.__name__ = getattr(f, "__name__", "block")

    def __call__(self, h):
        self.counter[0] += 1
        return self.f(h)


def _wrapper(policy):
    return lambda f: checkpoint(f, policy=policy)


def run_mode(workload, mode, snapshots, count=False):
    """One forward + backward of ``workload`` in ``mode``: a dict of what it gave
    (loss, grads, block evaluations, tape.stats for revolve, and with ``count``
    the ops evaluated during backward, ``rm.count_ops``)."""
    counter = [0]
    layers = workload.step
    workload.step = [_Counted(f, counter) for f in layers]
    try:
        for p in workload.params:
            p.grad = None
        stats = None
        if mode == "revolve":
            tape = Tape(snapshots=snapshots)
            loss = workload.run(tape)
        else:
            loss = workload.run_layers(_wrapper(POLICIES[mode]) if mode in POLICIES else None)
        ops = None
        if count:
            with count_ops() as counted:
                loss.backward()
            ops = dict(counted)
        else:
            loss.backward()
        if mode == "revolve":
            stats = tape.stats
    finally:
        workload.step = layers
    return dict(
        loss=loss.item(),
        grads=[p.grad for p in workload.params],
        block_evaluations=counter[0],
        stats=stats,
        recomputed_ops=ops,
    )


def _max_diff(grads, reference):
    return max(float(abs(g - r).max()) for g, r in zip(grads, reference))


def _bit_identical(grads, reference):
    return all(g.dtype == r.dtype and (g == r).all() for g, r in zip(grads, reference))


def measure(workload, snapshots, repeats=3, modes=MODES):
    """Every mode of ``modes`` (``"none"`` first) on ``workload`` (a chain, e.g.
    ``remat.workloads.transformer()``): a list of rows (dicts).

    One run per mode under tracemalloc first (memory; it also warms up), then
    ``repeats`` rounds of timed runs, the modes in a rotated order each round.
    """
    if tracemalloc.is_tracing():
        raise ValueError(
            "tracemalloc is already tracing (PYTHONTRACEMALLOC or -X tracemalloc?): "
            "run without it, so that the timed runs are not slowed down by tracing"
        )
    if workload.form != "chain":
        raise ValueError(f"{workload.name} is a {workload.form}, not a chain of blocks")
    if modes[0] != "none" or not set(modes) <= set(LABELS):
        raise ValueError(f"modes {modes!r}: start with 'none', then any of {', '.join(LABELS)}")
    steps = workload.steps
    first, traced = {}, {}
    for mode in modes:
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            first[mode] = run_mode(workload, mode, snapshots, count=True)
            traced[mode] = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    reference = first["none"]["grads"]
    identical = {m: _bit_identical(first[m]["grads"], reference) for m in modes}
    diffs = {m: _max_diff(first[m]["grads"], reference) for m in modes}
    seconds = {m: [] for m in modes}
    modes = tuple(modes)
    for round_ in range(repeats):
        shift = round_ % len(modes)
        for mode in modes[shift:] + modes[:shift]:
            gc.collect()
            start = time.perf_counter()
            done = run_mode(workload, mode, snapshots)
            seconds[mode].append(time.perf_counter() - start)
            identical[mode] &= _bit_identical(done["grads"], reference)
            diffs[mode] = max(diffs[mode], _max_diff(done["grads"], reference))
    base_seconds = statistics.median(seconds["none"])
    rows = []
    for mode in modes:
        row = first[mode]
        stats = row["stats"]
        rows.append(
            dict(
                mode=mode,
                label=LABELS[mode] + (f", s={snapshots}" if mode == "revolve" else ""),
                blocks=steps,
                block_evaluations=row["block_evaluations"],
                recomputed_blocks=row["block_evaluations"] - steps,
                recomputed_ops=row["recomputed_ops"],
                optimum=(
                    schedules.optimal_forward_steps(steps, snapshots) if mode == "revolve" else None
                ),
                traced_peak_bytes=traced[mode],
                memory_ratio=traced[mode] / traced["none"],
                tape_peak_bytes=None if stats is None else stats.peak_bytes,
                seconds=statistics.median(seconds[mode]),
                time_ratio=statistics.median(seconds[mode]) / base_seconds,
                seconds_runs=seconds[mode],
                max_grad_diff=diffs[mode],
                bit_identical=identical[mode],
                loss=row["loss"],
            )
        )
    return rows


def failures_of(rows):
    """What went wrong: a gradient that is not bit for bit that of ``none``, or revolve
    evaluating the blocks more often than the binomial optimum."""
    failures = [
        f"{row['label']}: gradients differ from no checkpointing (max |diff| "
        f"{row['max_grad_diff']:g})"
        for row in rows
        if not row["bit_identical"]
    ]
    for row in rows:
        if row["optimum"] is not None and row["block_evaluations"] != row["optimum"]:
            failures.append(
                f"{row['label']}: {row['block_evaluations']} block evaluations, the optimum "
                f"is {row['optimum']}"
            )
    return failures
