"""Optimal's dynamic programme on integer memory levels: the sizes in units, and its plans.

:class:`.Optimal` (whose docstring states the programme and why it is optimal)
runs over whole memory levels, not bytes.  :func:`units` puts the chain's sizes
on those levels: exactly, at the sizes' greatest common divisor, when that gives
few enough levels, else rounded up to a unit of ``memory / levels`` (so a plan
that fits the rounded sizes fits the true ones).  A plan then holds the tables
of the programme and answers one question, :meth:`choose`: the first move for
the segment ``[a, b)`` at level ``k`` (``a`` to tape step ``a``, or the split
``j`` where ``x_a`` is kept and the loop advances to ``x_j``).  Three plans
answer it, the arithmetic being :mod:`.planning`'s in each:

* :class:`ExactPlan` - a row per segment (or per distinct segment), every
  split of every segment searched: ``O(n^3 levels / 6)``;
* :class:`UniformPlan` - identical steps, where a segment is its length:
  ``O(n^2 levels / 2)``;
* :class:`BlockPlan` - a programme over blocks of consecutive steps, each block
  reversed by its own exact table.

All three have the same small interface, which :func:`.splits.split_actions`
drives: ``budget`` (the levels), ``exact``, ``feasible``, ``after_tape`` and
``after_store`` (the levels left after keeping a tape or a state), ``choose``,
and ``release`` (drop the tables once the choices are recorded).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from fractions import Fraction
from math import ceil, gcd
from numbers import Integral
from typing import Any

from .costs import ChainCosts
from .planning import LengthTable, SplitTable


def units(costs: ChainCosts, memory: float, levels: int) -> tuple[bool, int, list[int], list[int]]:
    """``(exact, budget, state units, tape units)``: the sizes on the programme's levels.

    Exact when every size is an integer and their gcd ``g`` gives at most
    ``levels`` levels; otherwise the unit is ``memory / levels`` and sizes are
    rounded up (exact rational arithmetic, so the rounding never goes down).
    """
    sizes = (*costs.state_bytes, *costs.tape_bytes)
    unit = 0
    if all(isinstance(x, Integral) for x in (*sizes, memory)):
        for x in sizes:
            unit = gcd(unit, int(x))
        if unit and memory // unit <= levels:
            su = [int(x) // unit for x in costs.state_bytes]
            tu = [int(x) // unit for x in costs.tape_bytes]
            return True, int(memory) // unit, su, tu
    scale = Fraction(levels) / Fraction(memory) if memory else Fraction(0)
    su = [ceil(Fraction(x) * scale) for x in costs.state_bytes]
    tu = [ceil(Fraction(x) * scale) for x in costs.tape_bytes]
    return not any(sizes), levels, su, tu  # all sizes zero: nothing was rounded


def sums(values: Sequence[Any], starts: Sequence[int]) -> list[Any]:
    """Each block's total of ``values`` (block ``k`` is ``starts[k] .. starts[k+1] - 1``):
    a block's times and sizes, as a step of the chain of blocks."""
    return [sum(values[a:b]) for a, b in zip(starts, starts[1:])]


class ExactPlan:
    """The dynamic programme's table over integer memory levels, a row for each segment
    or for each distinct one (built by :class:`.planning.SplitTable`), and the choices
    it implies."""

    def __init__(self, costs: ChainCosts, memory: float, levels: int) -> None:
        self.exact, budget, su, tu = units(costs, memory, levels)
        self.budget, self.su, self.tu = budget, su, tu
        self.table: SplitTable | None = SplitTable(
            su, tu, budget, costs.forward_time, costs.reverse_time
        )
        self.feasible = self.table.feasible

    def release(self) -> None:
        """Drop the table once the plan's choices are recorded."""
        self.table = None

    def after_tape(self, a: int, budget: int) -> int:
        return budget - self.tu[a]

    def after_store(self, a: int, budget: int) -> int:
        return budget - self.su[a]

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move the table says is best for ``[a, b)`` at level ``k``."""
        assert self.table is not None, "choose() after release()"
        return self.table.choose(a, b, k)


class UniformPlan:
    """The same programme for a chain of identical steps, where segments differ only by length.

    ``D_L[k]`` stands for ``D(a, a + L, k)`` whatever ``a``, the splits are
    ``D_L = min(r + D_{L-1}[k - t], min over i of (i f + D_i[k]) + D_{L-i}[k - s])``,
    and the work is ``O(n^2 levels / 2)`` additions instead of ``O(n^3 levels / 6)``
    (:class:`.planning.LengthTable`).
    """

    def __init__(self, costs: ChainCosts, memory: float, levels: int) -> None:
        self.exact, budget, su, tu = units(costs, memory, levels)
        self.budget = budget
        self.s, self.t = su[0], tu[0]
        self.table: LengthTable | None = LengthTable(
            costs.steps, su[0], tu[0], budget, costs.forward_time[0], costs.reverse_time[0]
        )
        self.feasible = self.table.feasible

    def release(self) -> None:
        """Drop the table once the plan's choices are recorded."""
        self.table = None

    def after_tape(self, a: int, budget: int) -> int:
        return budget - self.t

    def after_store(self, a: int, budget: int) -> int:
        return budget - self.s

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move the table says is best for ``b - a`` steps at level ``k``."""
        assert self.table is not None, "choose() after release()"
        return a + self.table.choose(b - a, k)


class BlockPlan:
    """The programme over blocks of consecutive steps, each block reversed by its own
    exact plan.

    The outer table is the programme of a chain whose steps are the blocks (a
    block's times and tape units are its steps' sums), except that a one-block
    segment costs what the block's own table (every split inside it) says.  So
    states are stored at block starts, or inside the block being reversed.  A
    block "taped" by the outer plan is taped step by step, as the exact plan
    does when it tapes consecutive steps.
    """

    def __init__(
        self, costs: ChainCosts, memory: float, levels: int, starts: Sequence[int]
    ) -> None:
        self.exact, budget, su, tu = units(costs, memory, levels)
        self.budget, self.su, self.tu = budget, su, tu
        self.starts = starts
        self.index = {a: k for k, a in enumerate(starts)}
        f, r = costs.forward_time, costs.reverse_time
        pairs = list(zip(starts, starts[1:]))
        made = {}  # blocks whose costs are the same share one table (a loop's blocks)
        for a, b in pairs:
            key = (tuple(su[a : b + 1]), tuple(tu[a:b]), f[a:b], r[a:b])
            if key not in made:
                made[key] = SplitTable(su[a : b + 1], tu[a:b], budget, f[a:b], r[a:b])
        inner = [made[tuple(su[a : b + 1]), tuple(tu[a:b]), f[a:b], r[a:b]] for a, b in pairs]
        self.inner: list[SplitTable] | None = inner
        self.outer: SplitTable | None = SplitTable(
            [su[a] for a in starts],
            sums(tu, starts),
            budget,
            sums(f, starts),
            sums(r, starts),
            leaves=[table.row(0, table.n) for table in inner],
        )
        self.feasible = self.outer.feasible

    def release(self) -> None:
        """Drop the tables once the plan's choices are recorded."""
        self.inner = self.outer = None

    def after_tape(self, a: int, budget: int) -> int:
        return budget - self.tu[a]

    def after_store(self, a: int, budget: int) -> int:
        return budget - self.su[a]

    def choose(self, a: int, b: int, k: int) -> int:
        """The first move for ``[a, b)`` at level ``k``: from the block's own table inside
        one block, else from the outer table (``a`` a block start), else (``a`` inside
        a block the outer plan tapes) tape."""
        assert self.inner is not None and self.outer is not None, "choose() after release()"
        block = bisect_right(self.starts, a) - 1
        first, last = self.starts[block], self.starts[block + 1]
        if b <= last:
            return first + self.inner[block].choose(a - first, b - first, k)
        if a != first:
            return a
        return self.starts[self.outer.choose(block, self.index[b], k)]
