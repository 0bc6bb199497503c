"""The write guard: a value that backward needs is never changed behind its back.

Backward reads the arrays its ops saved (and a checkpointed loop the states
it snapshotted), so they must still hold the values they held when saved.
remat's own code never writes into an array after making it.  The only way
to change one in place is through a handle given to the user: ``t.data``,
``np.asarray(t)``, ``t.numpy()``, an array assigned to ``t.data``, and every
view made of those (``t.data[:2]``, ``t.data.reshape(...)``, ``out=``
arguments).  So the guard watches exactly the memory it has handed out:

* :func:`expose` marks the memory behind a handle as *watched*.  If that
  memory was saved before, a fingerprint taken now stands for the value those
  earlier saves saw (nobody could have written it until now).
* When an op or a snapshot saves an array whose memory is watched,
  :func:`checks` fingerprints it there and then.
* Backward (and a loop restoring a snapshot) asks :func:`changed` before it
  uses saved arrays, and refuses with an error naming the op if one differs.

Memory nobody was handed costs nothing: one test of an empty dict per op.
The same mechanism serves NumPy and CuPy (which has no read-only flag).
A fingerprint is a CRC-32 of the bytes (:func:`remat.backend.fingerprint`),
so watched arrays cost one pass over their bytes at each save and check.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import backend

WATCHED: dict[int, Watch] = {}
"""id(memory owner) -> Watch, for every array handed out that is still alive."""

OLDEST = [-1]
"""[s]: saves made before sequence number s may rely on a Watch's first fingerprint."""

REBOUND = [-1]
"""[s]: the sequence number of the latest new value given to a user's leaf tensor
(``with rm.no_grad(): p -= ...``, ``p.data = a``); each Leaf keeps its own."""


class Watch:
    """A watched memory owner, and (if it was handed out after being saved) the
    fingerprint of its value at that moment, with the sequence number then."""

    __slots__ = ("owner", "seq", "fingerprint")

    def __init__(self, owner, seq, fingerprint):
        key = id(owner)
        self.owner = weakref.ref(owner, lambda _: WATCHED.pop(key, None))
        self.seq = seq
        self.fingerprint = fingerprint


_lock = threading.Lock()


def expose(array: Any, next_sequence: Callable[[], int]) -> None:
    """Note that the user now holds a writable handle to ``array``'s memory."""
    owner = backend.memory_owner(array)
    watch = WATCHED.get(id(owner))
    if watch is not None and watch.owner() is owner:
        return
    fingerprint = backend.fingerprint(owner)  # first: saves made before this number
    seq = next_sequence()  # saw the value fingerprinted (no one could write it yet)
    with _lock:  # several threads may expose at once: OLDEST only grows
        WATCHED[id(owner)] = Watch(owner, seq, fingerprint)
        OLDEST[0] = max(OLDEST[0], seq)


def rebound(next_sequence: Callable[[], int]) -> int:
    """Note that a leaf tensor gets a new array now; returns the sequence number."""
    seq = next_sequence()
    with _lock:
        REBOUND[0] = max(REBOUND[0], seq)
    return seq


def remember():
    """Fingerprints of all watched memory now, ``{id(owner): (ref, fingerprint)}``,
    or None when nothing is watched (the common case: free).

    A computation that will be recomputed in backward (``rm.checkpoint``, a
    checkpointed chain) saves nothing in its forward sweep, so the saves'
    fingerprints cannot tell it what the memory held then.  It keeps this
    instead, and :func:`changed_since` compares when it is recomputed.
    """
    if not WATCHED:
        return None
    with _lock:
        watches = list(WATCHED.values())
    remembered = {}
    for watch in watches:
        owner = watch.owner()
        if owner is not None:
            remembered[id(owner)] = (watch.owner, backend.fingerprint(owner))
    return remembered


def changed_since(arrays, seq, remembered, cache):
    """The index of the first of ``arrays`` whose memory was written after sequence
    number ``seq`` (when ``remember()`` gave ``remembered``), or None.

    Memory watched then is compared with its fingerprint then; memory handed out
    later, with the fingerprint taken when it was handed out (nobody could write
    it before).  ``cache`` remembers owners found intact.
    """
    for i, a in enumerate(arrays):
        if not backend.is_array(a):
            continue
        owner = backend.memory_owner(a)
        key = id(owner)
        watch = WATCHED.get(key)
        if watch is None or watch.owner() is not owner or cache.get(key) is owner:
            continue
        expected = _fingerprint_at(seq, remembered, watch, owner)
        if expected is not None and backend.fingerprint(owner) != expected:
            return i
        cache[key] = owner
    return None


def _fingerprint_at(seq, remembered, watch, owner):
    """What ``owner`` held at sequence number ``seq``: its fingerprint then if it was
    watched (``remember()`` saw every owner watched then), else the one taken when
    it was handed out later (nobody could write it before)."""
    then = remembered.get(id(owner)) if remembered is not None else None
    if then is not None and then[0]() is owner:
        return then[1]
    return watch.fingerprint if watch.seq > seq else None


def changed_since_remembered(seq, remembered):
    """One watched owner whose value changed since ``remember()`` gave ``remembered``
    at sequence number ``seq`` (or was handed out after it and changed since), or None."""
    with _lock:
        watches = list(WATCHED.values())
    for watch in watches:
        owner = watch.owner()
        if owner is None:
            continue
        expected = _fingerprint_at(seq, remembered, watch, owner)
        if expected is not None and backend.fingerprint(owner) != expected:
            return owner
    return None


def checks(arrays):
    """Fingerprints of the watched arrays among ``arrays``, as ((index, fp), ...), or None.

    Called for every save while anything is watched, so the common case (an
    array that owns its memory and was never handed out) is one dict test.
    """
    found = None
    for i, a in enumerate(arrays):
        base = getattr(a, "base", False)  # False: not an array (None, a Python number)
        if base is False:
            continue
        owner = a if base is None else backend.memory_owner(a)
        if id(owner) in WATCHED:
            found = (*(found or ()), (i, backend.fingerprint(a)))
    return found


def changed(arrays, found, seq, cache=None):
    """The index of the first of ``arrays`` (saved at ``seq`` with ``checks`` ``found``)
    whose value is not what was saved, or None when all are intact.  ``cache`` (a
    dict a sweep keeps) remembers owners already found intact, so that one
    parameter used by many records is hashed once per sweep."""
    if found is not None:
        for i, fp in found:
            if backend.fingerprint(arrays[i]) != fp:
                return i
    if seq < OLDEST[0]:  # saved before some memory was handed out: was it this one's?
        for i, a in enumerate(arrays):
            if not backend.is_array(a):
                continue
            owner = backend.memory_owner(a)
            watch = WATCHED.get(id(owner))
            if watch is None or seq >= watch.seq:
                continue
            if cache is not None and cache.get(id(owner)) is owner:
                continue
            if backend.fingerprint(owner) != watch.fingerprint:
                return i
            if cache is not None:
                cache[id(owner)] = owner
    return None
