"""Online checkpointing: reverse a loop whose length is learned only at its end.

The forward phase tapes each step as it runs (``Tape(i, i+1)``) and drops the
tape before the next one (``Discard(i, i+1)``), so when the executor learns
that step ``n - 1`` was the last one (``finish(n)``), its tape is at hand.
Meanwhile a placement policy decides, at every state ``x_p``, whether to store
it and which stored state to drop.  After ``finish(n)`` the stored positions
``0 = p_0 < p_1 < ... < p_k`` cut the chain ``[0, n - 1)`` into segments; the
backward phase reverses step ``n - 1`` and then each segment, last first, with
Revolve (segment ``i`` owns ``s - i`` slots: its own and those not held by
earlier segments).  That costs, in step evaluations,

    cost = (2n - 1) + sum_i E(L_i, s - i),          L_i = p_{i+1} - p_i,

where ``E(L, σ) = r*L - C(σ + r, σ + 1)`` is the untaped cost of an optimal
reversal (:mod:`.binomial`) and the last segment ends at ``n - 1``.  The
offline optimum ``T(n, s)`` is the minimum of this expression over all
placements, so the policy's only job is to keep the placement close to an
optimal one without knowing ``n``.  A segment with ``σ`` slots gives its
``m``-th step cost ``r(m, σ)``: a placement is optimal when no step it charges
is dearer than a step some other segment could have taken.

The policy has three phases (``s`` counts the slot of ``x_0``):

1. ``n <= s``: store every state while slots are free; all segments have
   length 1, which is optimal (``T = 2n - 1``).
2. ``n <= beta(s, 2)``: here a segment with ``σ`` slots and length at most
   ``σ + 1`` costs ``length - 1``, so a placement is optimal when the ``s``
   segments are all non-empty and within these capacities.  The policy keeps a
   *growing* segment ``g`` (initially the first): at each state it drops the
   checkpoint that ends segment ``g`` (so ``g`` absorbs the unit segment after
   it) and stores the current state; when ``g`` reaches its capacity
   ``s - g + 1``, the next segment grows.  Every placement is then within
   capacity with one empty segment, the one just started, so
   ``forward_steps <= T(n, s) + 1``; it ends at the optimal placement for
   ``beta(s, 2)``, segments ``s + 1, s, ..., 2``.  (The ``+ 1`` cannot be
   avoided: once all slots are in use, any new checkpoint is useless if the
   loop stops one step later.)
3. Beyond, a greedy rule with the exact cost model: at each state, compare
   "store nothing" with "drop checkpoint ``j`` and store the current state",
   for every ``j``, by the cost of stopping one step later, and take the
   cheapest (O(s log r) work per step).  This is not covered by a proof;
   measured over every ``n <= 10**5`` (see tests/schedules/test_schedules_online.py)
   it stays within 2.2 % of the optimum for ``s = 30``, 2.6 % for
   ``s = 10`` and 7.6 % for ``s = 4`` once ``n > beta(s, 2)``, far inside
   the factor 1.5 the tests demand (for ``(n, s) = (10**4, 4)`` it needs
   168089 evaluations against the optimum 167496).  It is a heuristic: where
   a repetition-number-optimal scheme (Wang, Moin and Iaccarino 2009) bounds
   how often any one step is recomputed, this one minimises the total.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from math import comb

from .actions import Action, Discard, End, EndForward, Free, Reverse, Snapshot, Tape
from .arguments import require_count
from .revolve import reverse_segment


class Online:
    """Checkpointing for a loop of unknown length with ``snapshots`` slots.

    ``iter(Online(s))`` starts a fresh run: an iterator with a ``finish(steps)``
    method that the executor calls right after the ``Tape`` that produced the
    loop's last state.

    >>> from remat.schedules import Online, simulate
    >>> r = simulate(Online(snapshots=3), steps=50)
    >>> r.steps, r.forward_steps, r.peak_snapshots
    (50, 233, 3)
    """

    steps = None  # learned at run time

    def __init__(self, snapshots: int) -> None:
        self.snapshots = require_count("Online", "snapshots", snapshots)

    def __repr__(self) -> str:
        return f"Online(snapshots={self.snapshots})"

    def __iter__(self) -> OnlineRun:
        return OnlineRun(self.snapshots)


class OnlineRun:
    """One run of :class:`Online`: yields actions, learns the length via ``finish``."""

    def __init__(self, snapshots: int) -> None:
        self._placement = Placement(snapshots)
        self._steps: int | None = None
        self._just_taped: int | None = None  # x_{this} was just produced by a Tape
        self._actions = self._generate()

    def __iter__(self) -> OnlineRun:
        return self

    def __next__(self) -> Action:
        return next(self._actions)

    def finish(self, steps: int) -> None:
        """Declare that the loop ended after ``steps`` steps."""
        steps = require_count("Online.finish", "steps", steps)
        if self._steps is not None:
            raise ValueError(f"Online.finish: already finished at steps={self._steps}")
        if self._just_taped != steps:
            where = (
                "no forward Tape is waiting"
                if self._just_taped is None
                else f"the last Tape produced x_{self._just_taped}"
            )
            raise ValueError(
                f"Online.finish: got steps={steps} but {where}; call finish(n) right "
                f"after the Tape(n-1, n) that produced the loop's last state"
            )
        self._steps = steps

    def _generate(self) -> Iterator[Action]:
        placement = self._placement
        yield Snapshot(0, placement.store_initial())
        p = 0
        while True:
            self._just_taped = p + 1
            yield Tape(p, p + 1)
            self._just_taped = None
            if self._steps is not None:
                break
            yield Discard(p, p + 1)
            p += 1
            dropped, stored = placement.decide(p)
            if dropped is not None:
                yield Free(dropped)
            if stored is not None:
                yield Snapshot(p, stored)
        yield EndForward()
        yield from placement.backward(self._steps)
        yield End()


class Placement:
    """Where the stored states are, and the policy that moves them (see module doc)."""

    def __init__(self, snapshots: int) -> None:
        self.snapshots = snapshots
        self.positions: list[int] = []  # stored positions, ascending
        self.slots: list[int] = []  # slots[i] holds x_{positions[i]}
        self.free = list(reversed(range(snapshots)))  # pop() gives the lowest
        self.growing = 0  # phase 2: index of the segment that absorbs the next
        self.phase_three = comb(snapshots + 2, 2) - 1  # first p of phase 3
        self.cost = UntapedCost()

    def store_initial(self) -> int:
        return self._store(0)

    def decide(self, p: int) -> tuple[int | None, int | None]:
        """At state ``x_p`` (the loop has at least ``p + 1`` steps): drop, store."""
        if self.free:
            return None, self._store(p)
        if p < self.phase_three:
            return self._grow_segment(p)
        return self._greedy(p)

    def _store(self, p: int) -> int:
        slot = self.free.pop()
        self.positions.append(p)
        self.slots.append(slot)
        return slot

    def _drop(self, index: int) -> int:
        del self.positions[index]
        slot = self.slots.pop(index)
        self.free.append(slot)
        return slot

    def _grow_segment(self, p: int) -> tuple[int | None, int | None]:
        s, pos = self.snapshots, self.positions
        g = self.growing
        while g < s - 1 and pos[g + 1] - pos[g] == s - g + 1:  # segment g is full
            g += 1
        self.growing = g
        if g == s - 1:  # only the last segment grows now, up to beta(s, 2)
            return None, None
        return self._drop(g + 1), self._store(p)

    def _greedy(self, p: int) -> tuple[int | None, int | None]:
        s, pos, E = self.snapshots, self.positions, self.cost
        k = len(pos) - 1
        lengths = [pos[i + 1] - pos[i] for i in range(k)]
        lengths.append(p - pos[k])
        last = lengths[k]
        best = E(last + 1, s - k) - E(last, s - k)  # extra cost of storing nothing
        best_drop = None
        shift_gain = 0  # what the segments after j gain from one more slot each
        for j in range(k, 0, -1):
            left, right = lengths[j - 1], lengths[j]
            merge = E(left + right, s - j + 1) - E(left, s - j + 1) - E(right, s - j)
            if merge + shift_gain < best:
                best, best_drop = merge + shift_gain, j
            shift_gain += E(right, s - j + 1) - E(right, s - j)
        if best_drop is None:
            return None, None
        return self._drop(best_drop), self._store(p)

    def backward(self, n: int) -> Iterator[Action]:
        """Reverse step ``n - 1`` (still taped), then every segment, last first."""
        pos, slots, free = self.positions, self.slots, self.free
        k = len(pos) - 1
        if pos[k] == n - 1:  # stored at the very last state: never needed
            yield Free(slots[k])
            free.append(slots.pop())
            pos.pop()
            k -= 1
        yield Reverse(n - 1, n)
        end = n - 1
        for i in range(k, -1, -1):
            own = [slots[i], *free]  # the free slots number exactly s - i - 1
            yield from reverse_segment(pos[i], end - pos[i], own, in_forward_sweep=False)
            free.append(slots[i])
            end = pos[i]


class UntapedCost:
    """``E(L, σ)``, the untaped evaluations of an optimal reversal, with caching.

    For each ``σ`` it keeps the thresholds ``beta(σ, t)`` and the values
    ``C(σ + t, σ + 1)``, grown on demand, and finds ``r`` by bisection.
    """

    def __init__(self) -> None:
        self._reach: dict[int, list[int]] = {}
        self._offset: dict[int, list[int]] = {}

    def __call__(self, length: int, slots: int) -> int:
        reach = self._reach.get(slots)
        if reach is None:
            reach = self._reach[slots] = [1]
            self._offset[slots] = [0]
        while reach[-1] < length:
            t = len(reach)
            reach.append(comb(slots + t, slots))
            self._offset[slots].append(comb(slots + t, slots + 1))
        r = bisect_left(reach, length)
        return r * length - self._offset[slots][r]
