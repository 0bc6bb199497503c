"""What each step of a chain costs in time and in bytes: the input of byte-budget planning.

A chain of ``n`` steps maps ``x_0 -> x_1 -> ... -> x_n``.  :class:`ChainCosts`
describes it with four sequences:

* ``forward_time[i]`` (``n`` entries): evaluating step ``i`` without taping it;
* ``reverse_time[i]`` (``n`` entries): taping step ``i`` *and* later reversing it,
  so that a store-all run costs ``sum(reverse_time)``;
* ``state_bytes[i]`` (``n + 1`` entries): the bytes of state ``x_i``, which is what
  a slot holding ``x_i`` costs;
* ``tape_bytes[i]`` (``n`` entries): the bytes step ``i``'s tape holds from taping
  until reversal, its input state ``x_i`` included (as ``tape.stats`` counts them).

The memory model built on it (used by :func:`.simulate` and :class:`.Optimal`):
at any moment the loop holds the states in its slots and the tapes it keeps,
and the bytes held are ``sum(state_bytes[p] for p in slots) + sum(tape_bytes[i]
for i in tapes)``.  The state being evaluated and the cotangent are not counted,
and an array that a slot and a tape share is counted twice, so the executor,
which counts each array once, never holds more than this model says.

Time units are arbitrary (seconds, step evaluations, ...); sizes are bytes.
Everything must be a finite, non-negative real number.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import isfinite
from numbers import Integral, Real

_FIELDS = ("forward_time", "reverse_time", "state_bytes", "tape_bytes")


@dataclass(frozen=True, repr=False)
class ChainCosts:
    """Per-step times and sizes of a chain of ``n`` steps (pure data, validated).

    ``ChainCosts.uniform(n, ...)`` builds the costs of a loop whose steps are
    all alike.  The sequences are stored as tuples of plain ``int`` (integral
    inputs, NumPy's included) and ``float``; ``len(costs)`` is ``n``.

    >>> from remat.schedules import ChainCosts
    >>> costs = ChainCosts([1.0, 2.0], [2.0, 4.0], [8, 8, 16], [24, 48])
    >>> costs.steps, costs.tape_bytes
    (2, (24, 48))
    >>> ChainCosts.uniform(3, 1.0, 2.0, 8, 24).state_bytes
    (8, 8, 8, 8)
    """

    forward_time: tuple[float, ...]
    reverse_time: tuple[float, ...]
    state_bytes: tuple[float, ...]
    tape_bytes: tuple[float, ...]

    def __post_init__(self) -> None:
        given = {name: getattr(self, name) for name in _FIELDS}
        for name, values in given.items():
            try:
                values = tuple(values)
            except TypeError:
                raise ValueError(
                    f"ChainCosts: {name} must be a sequence of numbers, got {values!r}"
                ) from None
            for i, value in enumerate(values):
                if (
                    isinstance(value, bool)
                    or not isinstance(value, Real)
                    or not isfinite(value)
                    or value < 0
                ):
                    raise ValueError(
                        f"ChainCosts: {name}[{i}] must be a finite number >= 0, got {value!r}"
                    )
            # plain Python numbers: exact integers stay integers (sizes), the rest floats
            given[name] = tuple(int(v) if isinstance(v, Integral) else float(v) for v in values)
        n = len(given["forward_time"])
        if n == 0:
            raise ValueError("ChainCosts: forward_time is empty; a chain has at least one step")
        expected = {"reverse_time": n, "state_bytes": n + 1, "tape_bytes": n}
        for name, length in expected.items():
            if len(given[name]) != length:
                what = "n + 1" if name == "state_bytes" else "n"
                raise ValueError(
                    f"ChainCosts: {name} has {len(given[name])} entries but the chain has "
                    f"n = {n} steps (len(forward_time)), so it needs {what} = {length}"
                )
        for name, values in given.items():
            object.__setattr__(self, name, values)

    @classmethod
    def uniform(
        cls,
        steps: int,
        forward_time: float,
        reverse_time: float,
        state_bytes: float,
        tape_bytes: float,
    ) -> ChainCosts:
        """The costs of ``steps`` identical steps."""
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"ChainCosts.uniform: steps must be an integer >= 1, got {steps!r}")
        return cls(
            (forward_time,) * steps,
            (reverse_time,) * steps,
            (state_bytes,) * (steps + 1),
            (tape_bytes,) * steps,
        )

    def __len__(self) -> int:
        return len(self.forward_time)

    @property
    def steps(self) -> int:
        """The number of steps ``n``."""
        return len(self.forward_time)

    def __repr__(self) -> str:
        n = self.steps
        if n <= 4:
            parts = ", ".join(f"{f}={list(getattr(self, f))!r}" for f in _FIELDS)
            return f"ChainCosts({parts})"
        return (
            f"ChainCosts(steps={n}, forward_time={sum(self.forward_time):g} in all, "
            f"reverse_time={sum(self.reverse_time):g} in all, "
            f"state_bytes up to {max(self.state_bytes):g}, "
            f"tape_bytes up to {max(self.tape_bytes):g})"
        )
