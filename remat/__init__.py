"""remat: a tape-based reverse-mode autodiff engine with rematerialization built in.

>>> import numpy as np, remat as rm
>>> x = rm.tensor(np.arange(3.0), requires_grad=True)
>>> (rm.sin(x) * x).sum().backward()
>>> x.grad  # sin(x) + x cos(x)
array([0.        , 1.38177329, 0.07700375])

This module only re-exports; see the submodules for the ideas.
"""

from . import guard, optim, policies, pytree, random, schedules
from .backend import DeviceError, cuda_available
from .budget import Tape
from .checkpoint import checkpoint
from .creation import arange, eye, full, one_hot, ones, ones_like, zeros, zeros_like
from .executor import LoopError, LoopStats, ReplayError, StepOutputError
from .functional import GradcheckError, grad, gradcheck, hvp, jvp, value_and_grad
from .ops import (
    OPS,
    ShapeError,
    abs,
    add,
    argmax,
    argmin,
    astype,
    broadcast_to,
    clip,
    concatenate,
    cos,
    cross_entropy,
    divide,
    einsum,
    exp,
    gelu,
    layer_norm,
    log,
    log_softmax,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    power,
    relu,
    reshape,
    sigmoid,
    sign,  # issue 27: rm.sign beside the NumPy functions
    sin,
    softmax,
    sqrt,
    stack,
    subtract,
    sum,
    swapaxes,
    tanh,
    to_device,
    transpose,
    where,
)
from .ops.numpy_coverage import *  # noqa: F403  (NumPy's functions, issue 27)
from .selective import checkpoint_name, count_ops
from .storage import DiskError
from .tape import BackwardError, EscapeError, Record, Recorder, enable_grad, grad_enabled, no_grad
from .tensor import DTypeError, Tensor, tensor

__version__ = "0.1.0"
