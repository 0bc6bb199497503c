"""Sizes in bytes written the way people read them.

``format_bytes`` writes a count of bytes in the largest binary unit it fills,
so that 300 bytes read as ``300 B`` and not as ``0.000 MiB``
(:func:`remat.memory.parse_bytes` reads them).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["binary_unit", "format_bytes"]

BINARY = (("GiB", 2**30, 3), ("MiB", 2**20, 3), ("KiB", 2**10, 1))  # name, size, decimals


def format_bytes(count: float) -> str:
    """``count`` bytes in the largest binary unit it fills (GiB, MiB, KiB, else B).

    >>> from remat.units import format_bytes
    >>> format_bytes(300), format_bytes(4096), format_bytes(3 * 2**20 + 2**19)
    ('300 B', '4.0 KiB', '3.500 MiB')
    """
    for name, size, decimals in BINARY:
        if abs(count) >= size:
            return f"{count / size:.{decimals}f} {name}"
    return f"{count:.0f} B"


def binary_unit(counts: Iterable[float]) -> tuple[str, int, int]:
    """One unit for a column of byte counts: (name, size, decimals) of the largest
    binary unit the column's largest value fills, so that a table of small
    figures is not a column of ``0.000`` (``("B", 1, 0)`` below a KiB)."""
    largest = max((abs(c) for c in counts), default=0)
    return next((unit for unit in BINARY if largest >= unit[1]), ("B", 1, 0))
