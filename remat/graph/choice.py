"""Which saved value a DTR tape evicts next: :class:`Choice`, a part of
:class:`remat.graph.dtr.Cache`.

Of the resident values (saved in a slot, in memory), only one whose array
nothing else holds can be evicted (``sys.getrefcount`` tells exactly: a Tensor
user code holds, a view, an array handed out all hold it).  The tape scores a
random sample of them with its heuristic (:mod:`remat.graph.heuristics`) and
evicts the lowest, as the DTR paper does; the sample's next lowest are the
next evictions' choices while still fit, so that a sample is scored once per
few evictions.

Evictions that free nothing go last.  Bytes are counted by buffer, and a view
is sized as its whole base (:mod:`remat.graph.dtr`), so evicting a view frees
its buffer only if no other saved value lives in it.  A slice of a saved
value, or two slices of one buffer both saved, free nothing when one of them
is evicted alone; so does a view of a parameter (the user's buffer, not
counted).  Yet such a view looks like the best choice to a heuristic: its
``size`` is the whole buffer's, its ``cost`` the view op's, next to nothing.
``h_dtr`` evicted them first, and in the reverse sweep remade and evicted the
same view again and again (on the transformer workload, one eviction in four
or five freed no byte).  So, whatever the heuristic, a value whose eviction
frees no bytes now (its buffer has other holders than its own slots, or is not
counted) is ranked after every value whose eviction frees some.  It is still
evicted when nothing else can be: the tape may need it gone to reach the
buffer's last holder (the base a slice keeps alive), as before; the order never
leaves the tape without a choice where it had one.  It is never evicted while
a value that frees bytes is at hand: in the sample (drawn again from a fresh
list once, if none of it frees bytes), or in all of them when they are at most
:data:`SAMPLE`.  The heuristics' scores are unchanged: only this order on top
of them.
"""

from __future__ import annotations

import sys
from typing import Any

from ..backend import memory_owner
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
    values, holder counts, heuristic, clock and random stream it reads."""

    resident: dict[int, Value]
    owners: dict[int, list]  # id(buffer) -> [buffer, holders]: the count's
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
        freeable one first in :meth:`_ranked`'s order; if none drawn is freeable, of
        all of them.

        The sample is drawn from a list of the resident values taken now and then
        (again once an eighth of them may have changed), not every time: copying
        them all per eviction made a long program's evictions quadratic.  A value
        drawn that is no longer resident is skipped; one made resident since is
        not drawn until the list is taken again (the full scan sees it), or at
        once when the sample has no value that frees bytes (those made since may).
        The next :data:`REUSE` of a sample are the next evictions' choices, while
        the clock has moved as many ticks at most and they are still freeable and
        free bytes: a sample is then scored once per few evictions, not per one."""
        self._drop_released()
        resident = self.resident
        n = len(resident)
        if n > SAMPLE:
            queue = self.queue
            if queue and self.clock - self.queued_at <= REUSE:
                while queue:
                    v = queue.pop()
                    if resident.get(id(v)) is v and (a := self._freeable(v)) is not None:
                        if self._frees(v, a):
                            return v
            taken = self.drawn
            ranked, frees = self._sample(False)
            if ranked and not frees and self.drawn is taken:  # drawn again, from a new list
                ranked = self._sample(True)[0] or ranked
            if ranked:
                self.queue, self.queued_at = ranked[REUSE:0:-1], self.clock
                return ranked[0]
        ranked = self._ranked(list(resident.values()))[0] if n else []
        return ranked[0] if ranked else None

    def _sample(self, again: bool) -> tuple[list, bool]:
        """:meth:`_ranked` of :data:`SAMPLE` values drawn from the list of resident
        values, which is taken anew if ``again``, or when due."""
        resident = self.resident
        drawn, self.draws = self.drawn, self.draws - 1
        if again or self.draws < 0 or not drawn:
            drawn = self.drawn = list(resident.values())
            self.draws = max(SAMPLE, len(resident) // 8)
        draw, k = self.rng.random, len(drawn)
        sample = [drawn[int(draw() * k)] for _ in range(SAMPLE)]
        return self._ranked([v for v in sample if resident.get(id(v)) is v])

    def _freeable(self, v: Value) -> Any:
        """v's array if dropping its slots frees it (nothing else holds it), else None."""
        a = v.ref()
        if a is None:
            return None
        # references: its slots, the count's entry if it owns its buffer, `a`, the call's
        expected = len(v.slots) + (a.base is None) + 2
        return a if sys.getrefcount(a) == expected else None

    def _frees(self, v: Value, a: Any) -> bool:
        """Whether evicting ``v`` (its array ``a``) frees bytes: its buffer is counted
        and held by ``v``'s slots only (each slot holds it once), not by another
        saved value's, a constant, or a recomputation reading it."""
        entry = self.owners.get(id(a if a.base is None else memory_owner(a)))
        return entry is not None and entry[1] <= len(v.slots)

    def _ranked(self, pool: list) -> tuple[list, bool]:
        """The freeable values of ``pool`` in the order to evict them, and whether the
        first frees bytes: the lowest scored of those whose eviction frees bytes first
        (see the module), then the others, lowest score first (equals in pool order).
        Whether the others free bytes is not asked here: the queue asks at its turn."""
        refs = sys.getrefcount
        # a freeable array's references: its slots, the count's entry if it owns its
        # buffer, `a` and the call's: nothing else holds it
        free = [
            v
            for v in pool
            if (a := v.ref()) is not None and refs(a) == len(v.slots) + (a.base is None) + 2
        ]
        if len(free) > 1:
            h = self.heuristic
            scores = h.scores(free, self.clock) if isinstance(h, Heuristic) else None
            if scores is None:  # a callable score of the user's
                score = getattr(h, "score", h)
                scores = [score(v, self.clock) for v in free]
            free = [free[i] for i in sorted(range(len(free)), key=scores.__getitem__)]
        frees = self._frees
        for j, v in enumerate(free):  # lowest first: usually the first frees bytes
            if frees(v, v.ref()):
                if j:
                    free.insert(0, free.pop(j))
                return free, True
        return free, False
