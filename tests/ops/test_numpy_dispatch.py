"""NumPy's own functions on Tensors (issue 27, remat.ops.dispatch): ``np.tanh(t)``,
``np.sum(t)``, ``np.concatenate([t, u])`` are recorded as remat's functions; what remat
lacks refuses only where a gradient would be lost; ``out=`` follows ``t.data[...] = ...``.
"""

import numpy as np
import pytest

import remat as rm

rng = np.random.default_rng(28)


def r(*shape):
    return rng.standard_normal(shape)


def weighted(fn):
    def f(*xs):
        out = fn(*xs)
        return (out * np.random.default_rng(1).standard_normal(out.shape)).sum()

    return f


def test_numpy_functions_on_tensors_are_recorded_as_remats():
    # `np.tanh(t)` raised "operand 'Tensor' does not support ufuncs (__array_ufunc__=None)"
    x = r(3, 4)

    def with_numpy(t):
        u = np.concatenate([np.tanh(t), np.roll(t, 1, axis=0)], axis=1)
        return np.sum(np.var(u, axis=0) + np.exp(t).mean() * np.ones(8) @ u.T @ np.ones(3))

    def with_remat(t):
        u = rm.concatenate([rm.tanh(t), rm.roll(t, 1, axis=0)], axis=1)
        return rm.sum(rm.var(u, axis=0) + rm.exp(t).mean() * np.ones(8) @ u.T @ np.ones(3))

    got, want = rm.value_and_grad(with_numpy)(x), rm.value_and_grad(with_remat)(x)
    assert isinstance(with_numpy(rm.tensor(x)), rm.Tensor)
    assert got[0].item() == want[0].item() and np.array_equal(got[1], want[1])
    assert rm.gradcheck(with_numpy, x)


def test_numpy_reductions_and_methods_of_ufuncs():
    x = r(3, 4)
    for call, want in [
        (lambda t: np.add.reduce(t, axis=1), np.add.reduce(x, axis=1)),
        (lambda t: np.add.accumulate(t), np.add.accumulate(x)),
        (lambda t: np.maximum.reduce(t), np.maximum.reduce(x)),
        (lambda t: np.amax(t, axis=0), np.amax(x, axis=0)),
    ]:
        np.testing.assert_allclose(call(rm.tensor(x)).numpy(), want, rtol=1e-15)
        assert rm.gradcheck(weighted(call), x)


def test_numpy_functions_remat_lacks_refuse_only_where_a_gradient_would_be_lost():
    x = rm.tensor(r(3), requires_grad=True)
    with pytest.raises(TypeError, match=r"numpy.linalg.norm on a remat Tensor: .* no gradient"):
        np.linalg.norm(x)
    with pytest.raises(TypeError, match=r"numpy.logaddexp.reduce .*; use rm.logaddexp"):
        np.logaddexp.reduce(x)
    assert np.linalg.norm(x.detach()) == np.linalg.norm(x.numpy())  # a constant: no gradient
    with rm.no_grad():
        assert np.linalg.norm(x) == np.linalg.norm(x.numpy())
    assert np.allclose(x, x.numpy()) and np.argsort(x).dtype.kind == "i"  # no gradient to lose
    with pytest.raises(TypeError, match=r"numpy.sum .* argument dtype=.* not supported by rm.sum"):
        np.sum(x, dtype=np.float32)
    with pytest.raises(TypeError, match=r"numpy.exp .* argument dtype=.* not supported"):
        np.exp(x, dtype=np.float32)


def test_out_follows_the_rules_of_writing_data():
    x = rm.tensor(r(3), requires_grad=True)
    target = rm.zeros(3)
    with pytest.raises(TypeError, match=r"numpy.sin\(..., out=a\) .* would lose"):
        np.sin(x, out=target)
    array = np.zeros(3)
    with pytest.raises(TypeError, match=r"`a \+= t`"):
        array += x
    with rm.no_grad():
        assert np.sin(x, out=target) is target
        array += x
    np.testing.assert_array_equal(target.numpy(), np.sin(x.numpy()))
    np.testing.assert_array_equal(array, x.numpy())
    # a tensor whose array a record saved, written through out=: the backward refuses to
    # read the changed value, as after w.data[...] = ...
    w = rm.tensor(r(3), requires_grad=True)
    y = (w * w).sum()
    with rm.no_grad():
        np.sin(w, out=w)
    with pytest.raises(rm.BackwardError):
        y.backward()


def test_a_numpy_reduction_of_a_tensor_still_formats_as_a_number():
    # np.mean(t) returned a NumPy float before dispatch; f"{np.mean(t):.3f}" must still work
    t = rm.tensor([1.0, 2.0])
    assert f"{np.mean(t):.3f}" == "1.500" and f"{rm.sum(t):.1e}" == "3.0e+00"
    assert f"{t}" == str(t)
