"""Which saved value a DTR tape evicts next: :class:`Choice`, a part of
:class:`remat.graph.dtr.Cache`.

Of the resident values (saved in a slot, in memory), only one whose array
nothing else holds can be evicted (``sys.getrefcount`` tells exactly: a Tensor
user code holds, a view, an array handed out all hold it).  The tape scores a
random sample of them with its heuristic (:mod:`remat.graph.heuristics`) and
evicts the lowest, as the DTR paper does; the sample's next lowest are the
next evictions' choices while still fit, so that a sample is scored once per
few evictions.
"""

from __future__ import annotations

import sys
from typing import Any

from .heuristics import Heuristic
from .value import Value

SAMPLE = 32
"""Candidates scored per sample: all of them up to this many, else this many drawn at
random (with replacement; the paper samples about sqrt(n)); a full scan follows when no
value drawn can be freed."""

REUSE = 3
"""How many of a sample's next lowest values the next evictions take (see Cache._choose)."""


class Choice:
    """The eviction choice of a :class:`~remat.graph.dtr.Cache`, whose resident
    values, heuristic, clock and random stream it reads."""

    resident: dict[int, Value]
    heuristic: Any
    clock: int
    rng: Any
    drawn: list[Value]  # what the eviction samples from (see _choose)
    draws: int  # samples left before the list is taken again
    queue: list[Value]  # the next lowest of the last sample, last first
    queued_at: int  # the clock's tick when it was scored

    def _drop_released(self) -> None:
        raise NotImplementedError  # the cache's: uncount the record backward released

    def _choose(self) -> Value | None:
        """The value to evict: of a sample of the resident ones (all when few), the
        freeable one scored lowest; if none drawn is freeable, of all of them.

        The sample is drawn from a list of the resident values taken now and then
        (again once an eighth of them may have changed), not every time: copying
        them all per eviction made a long program's evictions quadratic.  A value
        drawn that is no longer resident is skipped; one made resident since is
        not drawn until the list is taken again (the full scan sees it).  The next
        :data:`REUSE` lowest of a sample are the next evictions' choices, while the
        clock has moved as many ticks at most and they are still freeable: a
        sample is then scored once per few evictions, not per eviction."""
        self._drop_released()
        resident = self.resident
        n = len(resident)
        if n > SAMPLE:
            queue = self.queue
            if queue and self.clock - self.queued_at <= REUSE:
                while queue:
                    v = queue.pop()
                    if resident.get(id(v)) is v and self._freeable(v) is not None:
                        return v
            drawn, self.draws = self.drawn, self.draws - 1
            if self.draws < 0 or not drawn:
                drawn = self.drawn = list(resident.values())
                self.draws = max(SAMPLE, n // 8)
            draw, k = self.rng.random, len(drawn)
            sample = [drawn[int(draw() * k)] for _ in range(SAMPLE)]
            ranked = self._ranked([v for v in sample if resident.get(id(v)) is v])
            if ranked:
                self.queue, self.queued_at = ranked[REUSE:0:-1], self.clock
                return ranked[0]
        ranked = self._ranked(list(resident.values())) if n else []
        return ranked[0] if ranked else None

    def _freeable(self, v: Value) -> Any:
        """v's array if dropping its slots frees it (nothing else holds it), else None."""
        a = v.ref()
        if a is None:
            return None
        # references: its slots, the count's entry if it owns its buffer, `a`, the call's
        expected = len(v.slots) + (a.base is None) + 2
        return a if sys.getrefcount(a) == expected else None

    def _ranked(self, pool: list) -> list:
        """The freeable values of ``pool``, lowest score first (equals in pool order)."""
        refs = sys.getrefcount
        # a freeable array's references: its slots, the count's entry if it owns its
        # buffer, `a` and the call's: nothing else holds it
        free = [
            v
            for v in pool
            if (a := v.ref()) is not None and refs(a) == len(v.slots) + (a.base is None) + 2
        ]
        if len(free) < 2:
            return free
        h = self.heuristic
        scores = h.scores(free, self.clock) if isinstance(h, Heuristic) else None
        if scores is None:  # a callable score of the user's
            score = getattr(h, "score", h)
            scores = [score(v, self.clock) for v in free]
        return [free[i] for i in sorted(range(len(free)), key=scores.__getitem__)]
