"""Ops on operands of several float dtypes differentiate in the promoted dtype.

NumPy computes ``x32 ** y64`` in float64 (the operands' common dtype); its
derivatives must be taken there too, and only the cotangent reaching the
float32 operand is rounded to float32 at the end.  So, for every op of the
table with two or more float operands and every float32/float64 mix, the
value, the gradient and the tangent equal, bit for bit, what the same op gives
on the operands first promoted to float64 (exactly: float32 -> float64 is exact),
then rounded to each operand's dtype.
"""

from itertools import product

import numpy as np
import pytest

import remat as rm

from .cases import CASES, weighted

MULTI = sorted(name for name, (_, inputs) in CASES.items() if len(inputs) >= 2)
DTYPES = (np.float32, np.float64)


def _mixes(n):
    """Every assignment of float32/float64 to n operands with both dtypes present."""
    return [m for m in product(DTYPES, repeat=n) if len(set(m)) == 2]


def test_the_table_has_ops_of_several_operands():
    assert set(MULTI) >= {"add", "divide", "power", "maximum", "matmul", "where", "layer_norm"}
    assert set(MULTI) <= set(rm.OPS)


@pytest.mark.parametrize("name", MULTI)
def test_mixed_dtypes_differentiate_in_the_promoted_dtype(name):
    # x32 ** y64 took log(x) in float32 for y's gradient and tangent (1.5e-7 off);
    # layer_norm(x32, w64) normalised in float32: every op, every mix
    fn, inputs = CASES[name]
    if name == "power":  # bases whose float32 log rounds visibly
        inputs = [np.linspace(0.3, 7.9, 12).reshape(3, 4), inputs[1] + 1e-3]
    f = weighted(fn)
    argnums = tuple(range(len(inputs)))
    vs = [np.random.default_rng(5 + i).standard_normal(x.shape) for i, x in enumerate(inputs)]
    for mix in _mixes(len(inputs)):
        xs = [x.astype(d) for x, d in zip(inputs, mix)]
        ts = [v.astype(d) for v, d in zip(vs, mix)]
        wide = [x.astype(np.float64) for x in xs]  # exact: the promoted operands
        wide_ts = [t.astype(np.float64) for t in ts]
        with rm.no_grad():
            value, want_value = fn(*xs).numpy(), fn(*wide).numpy()
        assert np.array_equal(value, want_value.astype(value.dtype)), (name, mix, "value")
        grads = rm.grad(f, argnums)(*xs)
        want = rm.grad(f, argnums)(*wide)
        for i, (g, w, d) in enumerate(zip(grads, want, mix)):
            assert g.dtype == d, (name, mix, i)
            assert np.array_equal(g, w.astype(d)), (name, mix, f"gradient {i}")
        _, tangent = rm.jvp(fn, tuple(xs), tuple(ts))
        _, want_tangent = rm.jvp(fn, tuple(wide), tuple(wide_ts))
        assert np.array_equal(tangent, want_tangent.astype(tangent.dtype)), (name, mix, "tangent")


def test_a_float32_base_to_a_float64_power_gives_the_exponent_float64s_gradient():
    # the case: y.grad was 1.5e-7 off relative (log(x) taken in float32)
    x = rm.tensor(np.float32([0.3, 3.7, 7.9]))
    y = rm.tensor([1.5, -0.5, 2.0], requires_grad=True)
    (x**y).sum().backward()
    x64 = x.numpy().astype(np.float64)
    want = x64 ** y.numpy() * np.log(x64)
    np.testing.assert_allclose(y.grad, want, rtol=1e-15)


def test_a_float64_base_to_a_float32_power_gives_the_base_float64s_gradient():
    # its sibling: x64 ** y32 took y - 1 in float32 for x's gradient (5.6e-8 off)
    x = rm.tensor([0.3, 3.7, 7.9], requires_grad=True)
    y = np.float32([0.3001, -0.2999, 1.7003])
    (x**y).sum().backward()
    y64 = y.astype(np.float64)
    np.testing.assert_allclose(x.grad, y64 * x.numpy() ** (y64 - 1), rtol=1e-15)
