"""Argument checks shared by the schedules: counts are plain integers >= 1."""

from __future__ import annotations

from numbers import Integral


def require_count(owner: str, name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` as an ``int`` or raise a ``ValueError`` naming the rule.

    ``bool`` is refused although it is an ``int`` subclass: ``Revolve(10, True)``
    is almost certainly a mistake.
    """
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{owner}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
