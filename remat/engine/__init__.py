"""The engine: what makes the teaching core (:mod:`remat.core`) fast and safe.

* :mod:`remat.engine.fast` -- hand-inlined paths for one- and two-input ops and
  basic indexing, each giving the generic ``apply``'s results bit for bit;
* :mod:`remat.engine.views` -- ``print(tape)`` and ``tape.to_dot()``;
* beside it in :mod:`remat`: loop steps' markers and stand-ins (:mod:`remat.tape`),
  dual numbers (:mod:`remat.dual`), selective replay (:mod:`remat.selective`) and
  the guard on saved arrays (:mod:`remat.guard`).

:func:`generic_only` turns the fast paths off: inside it every op goes through
:func:`remat.core.apply.apply`, the code the core teaches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..core.apply import WATCHING

_GENERIC = "generic_only"  # the entry generic_only() puts in the core's WATCHING list


@contextmanager
def generic_only() -> Iterator[None]:
    """Route every op through the generic :func:`remat.core.apply.apply` (all threads),
    for as long as the ``with`` lasts: the fast paths hand each op over, as they
    do while a selective frame watches evaluations.  Results, records and
    gradients are the same bit for bit (``tests/core/test_generic_path.py``); only
    the per-op cost grows.

    >>> import remat as rm
    >>> from remat.engine import generic_only
    >>> x = rm.tensor([1.0, 2.0], requires_grad=True)
    >>> with generic_only():
    ...     y = (rm.sin(x) * x).sum()
    >>> y.backward(); x.grad.round(6)
    array([1.381773, 0.077004])
    """
    WATCHING.append(_GENERIC)
    try:
        yield
    finally:
        WATCHING.remove(_GENERIC)
