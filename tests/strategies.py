"""Hypothesis strategies shared by the test folders, and the one random-program generator.

A random program is a list of instructions, each ``(unary, op, a, b)``: apply the
``op``-th function of :data:`UNARY` (or, if not ``unary``, of :data:`BINARY`) to
earlier values ``a`` (and ``b``), all indices taken modulo the table or the values
so far, and append the result.  :func:`run_program` runs one on any starting
values of one square shape; every op keeps that shape, so a program composes
freely.  Binary results are halved, so that long products stay finite.

Its users check different things on the same programs: finite differences
(``core/test_engine.py``), rm.grad against backward and every schedule
(``core/test_trust.py``), eager tangents against recorded ones bit for bit
(``forward/test_dual.py``), the differentiable jvp (``forward/test_nested_jvp.py``),
memory bounds on loop steps (``budgets/test_memory_traced.py``) and DTR's gradients
under random budgets (``graph/test_dtr_random.py``, letting go of values as user code
does: ``run_program(..., release=True)``).  A new op
joins every one of those tests by joining a table here.
"""

import numpy as np
from hypothesis import strategies as st

import remat as rm

UNARY = [
    rm.sin,
    rm.cos,
    rm.tanh,
    rm.exp,
    rm.sigmoid,
    lambda t: t * t,
    lambda t: -t,
    lambda t: rm.log(t * t + 1.0),
    lambda t: rm.sqrt(t * t + 1.0),
    rm.softmax,
    # NumPy's functions (issue 27), each keeping an n x n shape
    rm.arctan,
    rm.sinh,
    lambda t: rm.log1p(t * t),
    lambda t: rm.expm1(t) / 3,
    lambda t: rm.roll(t, (1, -4), axis=(0, 1)),
    lambda t: rm.cumsum(t, axis=0) / 3,
    lambda t: rm.sort(t, axis=1),
    lambda t: rm.pad(t, 1)[1:-1, 2:],
    lambda t: rm.tril(t) + rm.triu(t, 1).T,
    lambda t: rm.rot90(t) * rm.sinc(t),
    lambda t: t - rm.var(t, axis=0, keepdims=True),
]
BINARY = [
    rm.add,
    rm.subtract,
    rm.multiply,
    lambda a, b: a / (b * b + 1.0),
    lambda a, b: a @ b.T,
    lambda a, b: rm.concatenate([a, b], axis=0)[::2],
    rm.logaddexp,
    lambda a, b: rm.arctan2(a, b * b + 1.0),
    lambda a, b: rm.hypot(a, b + 2.0),
    lambda a, b: rm.tensordot(a, b, 1) / 3,
    lambda a, b: rm.kron(a[:1], b[:, :1]),
]


def programs(max_size=12):
    """Random programs of 1 to ``max_size`` instructions ``(unary, op, a, b)``."""
    index = st.integers(0, 63)
    instruction = st.tuples(st.booleans(), index, index, index)
    return st.lists(instruction, min_size=1, max_size=max_size)


def run_program(program, values, release=False):
    """``values`` with the result of each instruction appended, one after another.

    ``release=True`` lets go of each value made by the program once no later
    instruction reads it (None in its place), as user code does: what a rematerializer
    may then evict is what the ops saved, not what the caller holds.  The last value
    is always kept."""
    values = list(values)
    last = {}
    if release:
        for k, (_, _, i, j) in enumerate(program):
            n = len(values) + k
            last[i % n] = last[j % n] = k
    start = len(values)
    for k, (unary, op, i, j) in enumerate(program):
        n = len(values)
        a, b = values[i % n], values[j % n]
        if unary:
            values.append(UNARY[op % len(UNARY)](a))
        else:
            values.append(BINARY[op % len(BINARY)](a, b) * 0.5)
        a = b = None
        if release:
            for v in (i % n, j % n, n):  # what this reads for the last time, or made unread
                if v >= start and last.get(v, k) <= k and v < start + len(program) - 1:
                    values[v] = None
    return values


def program_loss(program, x, y):
    """A scalar of the program run on ``(x, y)``: ``sum(v * v) + sum(v)`` of its last value."""
    v = run_program(program, [x, y])[-1]
    return (v * v).sum() + v.sum()


def program_gradients(program, tape, n=4, dtype=None):
    """The program on two ``n x n`` leaves inside ``tape``, each value let go of after its
    last read (``run_program(release=True)``); backward of ``program_loss``'s scalar; the
    leaves' gradients (float64 unless ``dtype``)."""
    rng, dtype = np.random.default_rng(0), dtype or np.float64
    x = rm.tensor((rng.standard_normal((n, n)) * 0.5).astype(dtype), requires_grad=True)
    y = rm.tensor((rng.standard_normal((n, n)) * 0.5).astype(dtype), requires_grad=True)
    with tape:
        v = run_program(program, [x, y], release=True)[-1]
        loss = (v * v).sum() + v.sum()
        v = None
    loss.backward()
    return [x.grad, y.grad]
