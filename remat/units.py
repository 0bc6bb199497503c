"""Sizes in bytes written the way people read them.

``format_bytes`` writes a count of bytes in the largest binary unit it fills,
so that 300 bytes read as ``300 B`` and not as ``0.000 MiB``
and ``parse_bytes`` reads them back (a budget given as ``"64 MiB"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction
from numbers import Integral

__all__ = ["binary_unit", "format_bytes", "parse_bytes"]

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
    figures is not a column of ``0.000`` (``("B", 1, 0)`` below a KiB).

    >>> from remat.units import binary_unit
    >>> binary_unit([300, 2048]), binary_unit([12])
    (('KiB', 1024, 1), ('B', 1, 0))
    """
    largest = max((abs(c) for c in counts), default=0)
    return next((unit for unit in BINARY if largest >= unit[1]), ("B", 1, 0))


_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# A number and a unit; signed, so that "-3 MiB" is read, then refused as under one byte.
_SIZE = re.compile(r"\s*(-?[0-9]+(?:\.[0-9]*)?|-?\.[0-9]+)\s*([A-Za-z]*)\s*")


def parse_bytes(value: int | str, where: str = "Tape") -> int:
    """A budget in bytes: an int, or a string such as ``"512 KiB"``, ``"64 MiB"``, ``"2 GB"``.

    Units: ``B``; ``kB``, ``MB``, ``GB``, ``TB`` (powers of 1000); ``KiB``,
    ``MiB``, ``GiB``, ``TiB`` (powers of 1024); case is ignored.  A number
    without a unit is bytes.  A fraction of a byte is dropped (``"1.5 kB"``
    is 1500; ``"0.5 B"`` is refused: a budget is at least one byte).
    ``where`` starts every error message (who was given the value).

    >>> from remat.units import parse_bytes
    >>> parse_bytes('64 MiB'), parse_bytes('1.5 kB'), parse_bytes(4096)
    (67108864, 1500, 4096)
    """
    if isinstance(value, bool) or not isinstance(value, (Integral, str)):
        raise TypeError(
            f"{where}: memory must be an int number of bytes or a string such as '64 MiB', "
            f"got {value!r}"
        )
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        unit = match and _UNITS.get(match.group(2).lower() or "b")
        if not match or not unit:
            raise ValueError(
                f"{where}: memory={value!r} is not a size; write a number and a unit, "
                "e.g. '512 KiB', '64 MiB', '2 GB' (units: B, kB, MB, GB, TB, KiB, MiB, "
                "GiB, TiB)"
            )
        number = int(Fraction(match.group(1)) * unit)
    else:
        number = int(value)
    if number < 1:
        raise ValueError(f"{where}: memory must be at least 1 byte, got {value!r}")
    return number
