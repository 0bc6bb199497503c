"""Random numbers that replay exactly when a step is recomputed.

remat draws from one generator.  Its state is part of every snapshot a
checkpointed loop takes, and the executor puts it back before recomputing from
a snapshot, so a step that draws (dropout, noise injection) sees the same
numbers every time it is evaluated: gradients stay bit-for-bit those of
store-all.  Samples are drawn on the host and copied to the GPU for
``device="cuda"``, so a seed gives the same numbers on either device.
"""

from . import backend
from .tensor import Tensor, holds_tensors


def seed(n: int) -> None:
    """Restart the calling thread's generator from seed ``n`` (each thread has its own)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"rm.random.seed: n must be an integer >= 0, got {n!r}")
    backend.seed(n)


def _constants(name, **params):
    """Distribution parameters as plain values; a Tensor that requires grad is refused
    (its gradient would be lost: reparametrize instead)."""
    from .ops import stack  # the ops sit above the random stream's module
    from .ops.core import constant_of

    for key, value in params.items():
        if isinstance(value, (list, tuple)) and holds_tensors(value, needing_grad=True):
            value = stack(value)  # refused just below, as any Tensor that requires grad
        if isinstance(value, Tensor) and value.requires_grad:
            raise TypeError(
                f"rm.random.{name}: {key} is a Tensor that requires grad, and samples carry no "
                f"gradient; draw standard samples and transform them instead (for example "
                "loc + scale * rm.random.normal(size=...))"
            )
    return [constant_of(f"rm.random.{name}", v) for v in params.values()]


def uniform(low=0.0, high=1.0, size=None, dtype=backend.float64, device="cpu") -> Tensor:
    """Samples from U[low, high) as a constant Tensor."""
    low, high = _constants("uniform", low=low, high=high)
    return Tensor._wrap(backend.uniform(low, high, size, dtype, device))


def normal(loc=0.0, scale=1.0, size=None, dtype=backend.float64, device="cpu") -> Tensor:
    """Samples from N(loc, scale^2) as a constant Tensor."""
    loc, scale = _constants("normal", loc=loc, scale=scale)
    return Tensor._wrap(backend.normal(loc, scale, size, dtype, device))
