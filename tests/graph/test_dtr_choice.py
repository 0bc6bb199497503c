"""Which value a DTR tape evicts: never one whose eviction frees no bytes (a view whose
buffer another saved value holds too, a view of a parameter) while one that frees
some can be evicted (:mod:`remat.graph.choice`), whatever the heuristic; and still
one that frees nothing when nothing else can go, so that the tape keeps its budget
exactly where it did before."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import remat as rm
from remat.graph import DTR, HEURISTICS
from remat.graph import dtr as dtr_module
from remat.graph.choice import SAMPLE

from .test_dtr import programs, run, run_within, store_all_bytes

N = 64  # floats: 512 bytes a value
VIEWS_FIRST = DTR(lambda v, now: -1.0 if v.op.name == "getitem" else 1.0)  # an adversary
NAMES = [*sorted(HEURISTICS), "views_first"]
CHOOSERS = [*map(DTR, sorted(HEURISTICS)), VIEWS_FIRST]


def tensors(k, n=N):
    rng = np.random.default_rng(0)
    return [rm.tensor(rng.standard_normal(n), requires_grad=True) for _ in range(k)]


def gradients(loss_of, tape, params):
    with tape:
        loss = loss_of()
    loss.backward()
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    return grads


def same_gradients_as_store_all(loss_of, memory, chooser, params):
    """The stats of a run under ``memory``, its gradients checked against store-all's."""
    expected = gradients(loss_of, rm.Tape(), params)
    tape = rm.Tape(memory=memory, remat=chooser)
    for g, e in zip(gradients(loss_of, tape, params), expected):
        np.testing.assert_array_equal(g, e)
    assert tape.stats.peak_bytes <= memory
    return tape


# The ops the programs below record, in order (a sum, a + b record one too).
VIEW_AND_BASE = "exp getitem sin sum exp sum add exp sum add".split()
TWO_VIEWS = "sin getitem sin sum getitem sin sum add exp sum add exp sum add".split()


@pytest.mark.parametrize("chooser", CHOOSERS, ids=NAMES)
def test_a_view_whose_base_is_saved_too_is_not_evicted_while_a_value_that_frees_can_be(
    chooser,
):
    # guards: evicting the slice (the cheapest op, sized as its whole base) freed nothing,
    # and its base went next: two evictions, two recomputations, where one frees the bytes
    x, y, z = params = tensors(3)

    def loss_of():
        s = rm.sin(rm.exp(x)[: N // 2]).sum()  # exp saves its output, sin the slice of it
        u = rm.exp(y).sum()  # saves its output: evicting it frees 512 bytes
        return s + u + rm.exp(z).sum()  # three buffers of 512 bytes: one must go

    tape = same_gradients_as_store_all(loss_of, 3 * N * 8 - 1, chooser, params)
    assert [r.op.name for r in tape.records] == VIEW_AND_BASE
    assert tape.stats.evicted_by_op == {4: 1}  # exp(y)'s
    assert tape.stats.recomputed_by_op == tape.stats.evicted_by_op


@pytest.mark.parametrize("chooser", CHOOSERS, ids=NAMES)
def test_two_saved_views_of_one_buffer_are_not_evicted_while_a_value_that_frees_can_be(
    chooser,
):
    # guards: evicting one of two slices of a buffer freed nothing; the other went next
    x, y, z = params = tensors(3)

    def loss_of():
        a = rm.sin(x)  # saves x (a parameter): its output is saved only as the two slices
        s = rm.sin(a[: N // 2]).sum() + rm.sin(a[N // 2 :]).sum()
        del a
        u = rm.exp(y).sum()
        return s + u + rm.exp(z).sum()

    tape = same_gradients_as_store_all(loss_of, 3 * N * 8 - 1, chooser, params)
    assert [r.op.name for r in tape.records] == TWO_VIEWS
    assert tape.stats.evicted_by_op == {8: 1}  # exp(y)'s


@pytest.mark.parametrize("chooser", CHOOSERS, ids=NAMES)
def test_a_view_that_frees_nothing_is_still_evicted_when_nothing_else_can_be(chooser):
    # guards the progress the ranking must keep: ranked last, not excluded (no new
    # MemoryError): the slice goes, then its base, which it no longer holds
    x, z = params = tensors(2)

    def loss_of():
        s = rm.sin(rm.exp(x)[: N // 2]).sum()
        return s + rm.exp(z).sum()  # two buffers of 512 bytes: exp(x)'s must go

    tape = same_gradients_as_store_all(loss_of, 2 * N * 8 - 1, chooser, params)
    assert tape.stats.evicted_by_op == {0: 1, 1: 1}  # exp(x)'s output and its slice


@pytest.mark.parametrize("chooser", CHOOSERS, ids=NAMES)
def test_slices_of_a_parameter_are_not_evicted_among_many_values(chooser, monkeypatch):
    # guards the sampled choice (more resident values than a sample): a slice of a
    # parameter is sized as the parameter, which the tape does not count, so evicting
    # it frees nothing; largest_first and h_dtr evicted all of them first
    k = SAMPLE
    big, *xs = params = [*tensors(1, n=64 * N), *tensors(k)]
    freed = evictions_freeing(monkeypatch)

    def loss_of():
        total = 0.0
        for i, x in enumerate(xs):
            total = total + rm.sin(big[i * N : (i + 1) * N]).sum() + rm.exp(x).sum()
        return total

    stats = same_gradients_as_store_all(loss_of, k * N * 8 // 2, chooser, params).stats
    assert stats.evictions >= k // 2 and len(freed) == stats.evictions
    assert 0 not in freed


def evictions_freeing(monkeypatch):
    """Have each eviction append the bytes it uncounted to the list returned."""
    freed = []
    evict = dtr_module.Cache.evict

    def counting(cache, v):
        before = cache.bytes
        evict(cache, v)
        freed.append(before - cache.bytes)

    monkeypatch.setattr(dtr_module.Cache, "evict", counting)
    return freed


def frees(cache, v):
    """Whether evicting resident ``v`` (nothing else holding its array) would uncount
    its buffer: held by its own slots, once each, and nothing else the tape counts."""
    owner = v.ref()
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    entry = cache.owners.get(id(owner))
    return entry is not None and entry[1] == len(v.slots)


@settings(max_examples=30, deadline=None)
# the transpose of a value its sin saves too was evicted (freeing nothing) before that sin
@example([(False, 0, 0, 0)] * 4 + [(False, 23, 0, 0), (False, 0, 3, 0)], 0.3, "lru", 0)
@given(
    programs(),
    st.floats(0.0, 1.0),
    st.sampled_from(sorted(HEURISTICS)),
    st.integers(0, 2**16),
)
def test_random_programs_evict_nothing_that_frees_nothing_while_something_frees(
    program, fraction, heuristic, seed
):
    # guards: of random programs with views (transposes, reshapes, reversed slices), the
    # evictions that freed no bytes although another value would have
    expected = run(program, rm.Tape(), seed)[0]
    budget = max(1, int(store_all_bytes(program) * fraction))
    wasted = []
    evict = dtr_module.Cache.evict

    def checking(cache, v):
        resident = list(cache.resident.values())
        better = [
            w for w in resident if w is not v and cache._freeable(w) is not None and frees(cache, w)
        ]
        before = cache.bytes
        evict(cache, v)
        if cache.bytes == before and better and len(resident) <= SAMPLE:  # a full scan
            wasted.append((v, better))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dtr_module.Cache, "evict", checking)
        budget, (grads, tape) = run_within(program, budget, heuristic, seed)
    assert not wasted
    for g, e in zip(grads, expected):
        assert (g is None) == (e is None)
        if e is not None:
            np.testing.assert_array_equal(g, e)
    assert tape.stats.peak_bytes <= budget
