"""Helpers shared by test files in several folders (hypothesis strategies are in
tests/strategies.py, fixtures in tests/conftest.py).

* a tape by schedule name, as the loop and second-order tests sweep them;
* rm.grad's edges: remat's refusals, a gradient that is right or refused, and the
  gradients of a loop written out without one;
* measuring memory apart from remat's own accounting: tracemalloc's peak of a
  call, and the bytes of the buffers arrays keep alive (NumPy's ``.base`` links).
"""

import gc
import tracemalloc

import numpy as np

import remat as rm


def tape_for(name, s):
    """The tape of schedule ``name`` with ``s`` snapshots (store_all and sqrt take none)."""
    if name == "store_all":
        return rm.Tape()
    if name == "sqrt":
        return rm.Tape(schedule="sqrt")
    return rm.Tape(snapshots=s, schedule=name)


def traced(fn):
    """(fn(), the peak bytes newly allocated while it ran, as tracemalloc saw them)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, peak


def buffer_bytes(arrays):
    """Bytes of the buffers ``arrays`` keep alive, each base once (NumPy's .base)."""
    owners = {}
    for a in arrays:
        while isinstance(a.base, np.ndarray):
            a = a.base
        owners[id(a)] = a.nbytes
    return sum(owners.values())


# One of these, or the exact gradient: what a path that may refuse must give.
REFUSALS = (rm.BackwardError, rm.EscapeError, rm.LoopError, RuntimeError, ValueError)


def right_or_refused(compute, want):
    """``compute()`` either raises one of remat's refusals or returns ``want``."""
    try:
        got = compute()
    except REFUSALS:
        return
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15)


def unrolled(step, n, *leaves):
    """Gradients of sum(state) after n steps of ``step(state, *params)``, without a loop."""
    x, *params = (rm.tensor(a, requires_grad=True) for a in leaves)
    s = x
    for _ in range(n):
        s = step(s, *params)
    s.sum().backward()
    return [x.grad, *(p.grad for p in params)]
