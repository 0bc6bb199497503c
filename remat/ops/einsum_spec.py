"""``...`` in an einsum spec, written out as letters.

NumPy's ``"...ij,...jk->...ik"`` stands for the leading axes of each operand,
right-aligned and broadcast against each other.  :func:`expand_ellipsis`
replaces each ``...`` with letters the spec does not use (as many as that
operand has leading axes), so that the einsum op and its VJP rules only ever
see letters.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

from .core import ShapeError


def expand_ellipsis(subscripts: str, ndims: Sequence[int]) -> str:
    """``subscripts`` with every ``...`` written out for operands of ``ndims`` axes.

    >>> expand_ellipsis("...ij,jk->...ik", [3, 2])
    'aij,jk->aik'
    >>> expand_ellipsis("i...", [3])
    'iab->abi'
    """
    spec = subscripts.replace(" ", "")
    if "." not in spec:
        return subscripts
    inputs, arrow, output = spec.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ndims) or any(t.count(".") not in (0, 3) for t in terms):
        raise ShapeError(
            f"einsum {subscripts!r}: {len(terms)} terms for {len(ndims)} operands, or a '.' "
            "that is not one '...' per term"
        )
    used = set(spec) - set(".,->")
    free = [c for c in string.ascii_letters if c not in used]
    counts = []
    for term, ndim in zip(terms, ndims):
        named = len(term.replace("...", ""))
        if "..." in term and ndim < named:
            raise ShapeError(
                f"einsum {subscripts!r}: term {term!r} names {named} axes but its operand has "
                f"{ndim}"
            )
        counts.append(ndim - named if "..." in term else 0)
    n = max(counts)
    if n > len(free):
        raise ShapeError(f"einsum {subscripts!r}: too many axes under '...' ({n})")
    letters = free[:n]
    written = [t.replace("...", "".join(letters[n - k :])) for t, k in zip(terms, counts)]
    if arrow:
        out = output.replace("...", "".join(letters))
    else:  # implicit: the '...' axes first, then the letters seen once, alphabetically
        joined = "".join(t.replace("...", "") for t in terms)
        out = "".join(letters) + "".join(sorted(c for c in set(joined) if joined.count(c) == 1))
    return ",".join(written) + "->" + out
