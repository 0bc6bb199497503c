"""Binomial checkpointing arithmetic (Griewank 1992; Griewank and Walther 2000).

With ``s`` slots for states (one of them holds ``x_0``) and a rule of ``r``
*repetitions* (no step is evaluated untaped more than ``r`` times), the longest
chain that can be reversed is

    beta(s, r) = C(s + r, s).

The *repetition number* of a chain of ``n`` steps is the smallest ``r`` with
``beta(s, r) >= n``; it is the ``r`` of every optimal schedule.  The fewest step
evaluations needed to reverse ``n`` steps with ``s`` slots, counting the taped
evaluation of every step once, are

    T(n, s) = n + r*n - C(s + r, s + 1)        (r = repetition_number(n, s)).

Read it as ``n`` taped evaluations plus ``E(n, s) = r*n - C(s+r, s+1)`` untaped
ones.  ``E`` satisfies the recursion of the optimal split

    E(n, s) = min over 1 <= j < n of  j + E(n - j, s - 1) + E(j, s),
    E(1, s) = 0,   E(n, 1) = n (n - 1) / 2,

(advance ``j`` steps, store ``x_j``, reverse the right part with one slot
less, then the left part with all of them) and it grows by ``r(m, s)`` when
the chain grows from ``m - 1`` to ``m`` steps: the ``m``-th step costs its
repetition number.

Degenerate budgets: ``s = 1`` (only ``x_0``) gives ``T = n + n(n-1)/2``.  With
``s >= n - 1`` the repetition number is 1 and ``T = 2n - 1``: slots hold states,
not tapes, so every step but the last is still evaluated twice (once in the
forward sweep, once taped right before its reversal).  Only store-all, which
keeps ``n`` tapes instead of states, reaches ``T = n``.
"""

from __future__ import annotations

from math import comb

from .arguments import require_count


def beta(s: int, t: int) -> int:
    """``C(s + t, s)``: the longest chain ``s`` slots reverse with ``t`` repetitions.

    >>> from remat.schedules import beta
    >>> beta(2, 3)  # C(5, 2) steps: the most 2 slots reverse with 3 sweeps
    10
    """
    s = require_count("beta", "s", s, minimum=0)
    t = require_count("beta", "t", t, minimum=0)
    return comb(s + t, s)


def repetition_number(steps: int, snapshots: int) -> int:
    """The smallest ``r`` with ``beta(snapshots, r) >= steps``.

    >>> from remat.schedules import repetition_number
    >>> repetition_number(10, 2), repetition_number(11, 2)
    (3, 4)
    """
    n = require_count("repetition_number", "steps", steps)
    s = require_count("repetition_number", "snapshots", snapshots)
    r, reach = 0, 1  # reach == beta(s, r)
    while reach < n:
        r += 1
        reach = reach * (s + r) // r
    return r


def optimal_forward_steps(steps: int, snapshots: int) -> int:
    """``T(n, s) = n + r*n - C(s + r, s + 1)``: the Griewank-Walther minimum.

    >>> from remat.schedules import optimal_forward_steps
    >>> optimal_forward_steps(10, 2), optimal_forward_steps(10, 10)
    (30, 19)
    """
    n = require_count("optimal_forward_steps", "steps", steps)
    s = require_count("optimal_forward_steps", "snapshots", snapshots)
    r = repetition_number(n, s)
    return n + r * n - comb(s + r, s + 1)
