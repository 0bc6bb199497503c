"""The op table's cases, keyed by op name: the function under test and its float64 inputs.

``ops/test_ops.py`` fails if an op of ``rm.OPS`` has no case here, so no op can be
forgotten; the tests of devices, mixed dtypes and trust run the same cases.
:func:`weighted` makes the checked scalar ``sum(out * w)`` for a fixed random ``w``,
so every output element's cotangent differs.
"""

import numpy as np

import remat as rm

from .test_numpy_functions import CASES as NUMPY_CASES

rng = np.random.default_rng(0)


def r(*shape):
    return rng.standard_normal(shape)


def pos(*shape):
    return rng.uniform(0.5, 2.0, shape)


def distinct(*shape):
    """Values far apart, so max/min/maximum have no near-ties for differences."""
    n = int(np.prod(shape))
    return rng.permutation(np.linspace(-2, 2, n)).reshape(shape)


MASK = np.array([[True, False, True, True], [False, True, False, True], [True, True, False, False]])

CASES = {
    "negative": (rm.negative, [r(3, 4)]),
    "exp": (rm.exp, [r(3, 4)]),
    "log": (rm.log, [pos(3, 4)]),
    "sin": (rm.sin, [r(3, 4)]),
    "cos": (rm.cos, [r(3, 4)]),
    "tanh": (rm.tanh, [r(3, 4)]),
    "sqrt": (rm.sqrt, [pos(3, 4)]),
    "abs": (rm.abs, [distinct(3, 4)]),
    "add": (rm.add, [r(3, 4), r(4)]),
    "subtract": (rm.subtract, [r(2, 1, 4), r(3, 4)]),
    "multiply": (rm.multiply, [r(3, 1), r(1, 4)]),
    "divide": (rm.divide, [r(3, 4), pos(3, 1)]),
    "power": (rm.power, [pos(3, 4), r(4)]),
    "maximum": (rm.maximum, [distinct(3, 4), distinct(4) + 0.01]),
    "minimum": (rm.minimum, [distinct(3, 4), distinct(3, 1) + 0.01]),
    "where": (lambda x, y: rm.where(MASK, x, y), [r(3, 4), r(4)]),
    "clip": (lambda x: rm.clip(x, -0.5, 0.7), [distinct(3, 4)]),
    "sum": (lambda x: rm.sum(x, axis=1, keepdims=True), [r(3, 4, 2)]),
    "mean": (lambda x: rm.mean(x, axis=(0, 2)), [r(3, 4, 2)]),
    "max": (lambda x: rm.max(x, axis=-1), [distinct(3, 4)]),
    "min": (lambda x: rm.min(x), [distinct(3, 4)]),
    "logsumexp": (lambda x: rm.logsumexp(x, axis=0), [r(3, 4) * 10]),
    "sigmoid": (rm.sigmoid, [r(3, 4) * 3]),
    "relu": (rm.relu, [distinct(3, 4)]),
    "softmax": (lambda x: rm.softmax(x, axis=0), [r(3, 4)]),
    "log_softmax": (rm.log_softmax, [r(3, 4) * 5]),
    "gelu": (rm.gelu, [r(3, 4) * 2]),
    "layer_norm": (lambda x, w, b: rm.layer_norm(x, w, b), [r(3, 4), r(4), r(4)]),
    "matmul": (rm.matmul, [r(2, 3, 4), r(4, 5)]),
    "einsum": (lambda a, b: rm.einsum("ij,jk->ki", a, b), [r(3, 4), r(4, 2)]),
    "reshape": (lambda x: rm.reshape(x, (2, 6)), [r(3, 4)]),
    "transpose": (lambda x: rm.transpose(x, (2, 0, 1)), [r(2, 3, 4)]),
    "swapaxes": (lambda x: rm.swapaxes(x, 0, 2), [r(2, 3, 4)]),
    "broadcast_to": (lambda x: rm.broadcast_to(x, (2, 3, 4)), [r(3, 1)]),
    "concatenate": (lambda a, b: rm.concatenate([a, b], axis=1), [r(2, 3), r(2, 4)]),
    "stack": (lambda a, b: rm.stack([a, b], axis=1), [r(2, 3), r(2, 3)]),
    "getitem": (lambda x: x[np.array([0, 2, 0, 0]), 1:3], [r(3, 4)]),
    "identity": (rm.ops.identity, [r(3, 4)]),
    "to_device": (lambda x: rm.to_device(x, "cpu"), [r(3, 4)]),
    "astype": (lambda x: rm.astype(x, np.float64), [r(3, 4)]),
    "scatter_add": (lambda v: rm.ops.scatter_add((5, 2), np.array([1, 3, 1]), v), [r(3, 2)]),
    **NUMPY_CASES,  # NumPy's functions (issue 27)
}


def weighted(fn, out_shape_seed=1):
    """sum(fn(*xs) * w) with a fixed random w of the output's shape."""
    weights = {}

    def f(*xs):
        out = fn(*xs)
        if out.shape not in weights:
            weights[out.shape] = np.random.default_rng(out_shape_seed).standard_normal(out.shape)
        return (out * weights[out.shape]).sum()

    return f
