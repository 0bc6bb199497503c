"""User code that mypy checks against remat's hints (``mypy`` reads this file too,
see [tool.mypy] in pyproject.toml): the operators and methods attached to Tensor
at import time, the Tape's forms and the transforms all type-check as a user
writes them.  pytest does not collect it (no test_ prefix); importing it runs it.
"""

from __future__ import annotations

import numpy as np

import remat as rm
from remat.typing import PyTree, TensorLike


def mse(w: rm.Tensor, x: TensorLike, y: TensorLike) -> rm.Tensor:
    return ((x @ w - y) ** 2).mean()


def step(h: rm.Tensor) -> rm.Tensor:
    return h + rm.tanh(h @ W) * 0.5 - h.T.T / 2


W = rm.random.normal(scale=0.1, shape=(4, 4), requires_grad=True)
with rm.Tape(snapshots=3) as tape:
    h = tape.loop(step, rm.ones((2, 4)), steps=10)
    loss: rm.Tensor = (h * h).sum()
loss.backward()
grads: PyTree = rm.grad(mse)(np.eye(4), np.ones((3, 4)), np.zeros((3, 4)))
stats: rm.LoopStats = tape.stats
forward: int = stats.forward_steps
assert isinstance(W.grad, np.ndarray) and forward >= 10
opt = rm.optim.Adam([W], lr=1e-2)
opt.step()
label: int = int(rm.argmax(h.sum(axis=0)))
