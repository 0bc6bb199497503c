"""The engine's fast paths against the core's generic apply, bit for bit.

``remat.engine.generic_only()`` routes every op through
``remat.core.apply.apply``, the code the teaching core shows.  Each op of the
table (the cases of tests/ops/cases.py), and a small program using them, must
give the same values, records, gradients, second derivatives and tangents
either way, to the last bit (float64).
"""

import numpy as np
import pytest

import remat as rm
from remat.core import apply as core_apply
from remat.engine import generic_only
from tests.ops.cases import CASES, weighted


def bits(a):
    a = np.asarray(a)
    return a.dtype, a.shape, a.tobytes()


def tangents_for(inputs):
    return tuple(
        np.random.default_rng(3 + i).standard_normal(np.shape(x)) for i, x in enumerate(inputs)
    )


def run(fn, inputs):
    """The output, its record's shape and saved bytes, the gradients, a second
    derivative (grad of grad . v) and the tangent, for one op case."""
    f = weighted(fn)
    argnums = tuple(range(len(inputs)))
    xs = [rm.tensor(x, requires_grad=True) for x in inputs]
    out = fn(*xs)
    record = out.record
    saved = None if record is None else (record.op.name, record.saved_bytes(), record.shape)
    grads = rm.grad(f, argnums=argnums)(*inputs)
    vs = tangents_for(inputs)

    def directional(*args):
        gs = rm.grad(f, argnums=argnums)(*args)
        return sum((g * v).sum() for g, v in zip(gs, vs))

    second = rm.grad(directional, argnums=argnums)(*inputs)
    _, tangent = rm.jvp(fn, tuple(inputs), vs)
    return (
        bits(out.numpy()),
        saved,
        [bits(g) for g in grads],
        [bits(g) for g in second],
        bits(tangent),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_op_gives_the_generic_paths_results_bit_for_bit(name, monkeypatch):
    fn, inputs = CASES[name]
    fast = run(fn, inputs)
    seen = []
    evaluate = core_apply.evaluate

    def watched(op, args, kw):  # the generic apply evaluates through this hook
        seen.append(op.name)
        return evaluate(op, args, kw)

    monkeypatch.setattr(core_apply, "evaluate", watched)
    with generic_only():
        generic = run(fn, inputs)
    assert name in seen, f"{name} did not go through the generic apply"
    assert generic == fast


def test_a_program_of_fast_path_ops_agrees_with_the_generic_path():
    rng = np.random.default_rng(0)
    w0, x0 = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((3, 4))

    def loss(w, x):
        h = x
        for _ in range(3):
            h = rm.tanh(h @ w) * 0.5 + h[:, ::-1] - 1.0 / (1.0 + rm.exp(-h))
        return rm.log_softmax(h, axis=1)[0, 1] + (h * h).sum() ** 0.5

    fast = rm.value_and_grad(loss, argnums=(0, 1))(w0, x0)
    hvp_fast = rm.hvp(lambda w: loss(w, x0), (w0,), (x0[:1].repeat(4, 0),))
    with generic_only():
        generic = rm.value_and_grad(loss, argnums=(0, 1))(w0, x0)
        hvp_generic = rm.hvp(lambda w: loss(w, x0), (w0,), (x0[:1].repeat(4, 0),))
    assert bits(generic[0].numpy()) == bits(fast[0].numpy())
    assert [bits(g) for g in generic[1]] == [bits(g) for g in fast[1]]
    assert bits(hvp_generic[0]) == bits(hvp_fast[0])


def test_generic_only_is_left_on_an_error():
    with pytest.raises(RuntimeError):
        with generic_only():
            raise RuntimeError("inside")
    assert "generic_only" not in core_apply.WATCHING
