"""DTR on random graphs from the op table (tests/strategies.py), random budgets and
random heuristics, custom scores among them (issue 26, "Done when").

A random program reads earlier values at random (skips and reuse, not only a
chain) and lets go of each value after its last reader, as user code does.  Under
any budget, DTR either gives store-all's gradients bit for bit, counting at most
the budget, or raises the documented MemoryError, which names the op, the budget
and a larger number of bytes; following those numbers up always ends in a budget
that works.  (``test_dtr.py``'s random test draws views, random masks and layer
norms; this one the shared table's ops and scores of the user's own.)
"""

import random
import re

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

import remat as rm
from remat.graph import DTR, HEURISTICS

from ..strategies import program_gradients, programs, run_program

N = 4
NEVER = 2**40


def _random_score(seed):
    draw = random.Random(seed)
    return lambda value, now: draw.random()


SCORES = {
    "newest_first": lambda value, now: -value.last,
    "smallest_first": lambda value, now: value.size,
    "all_equal": lambda value, now: 0,
    "numpy_float": lambda value, now: np.float32(value.cost * value.size),
    "random": _random_score(0),
}
HEURISTIC_NAMES = sorted(HEURISTICS) + sorted(SCORES)


def heuristic_of(name):
    return DTR(name) if name in HEURISTICS else DTR(SCORES[name])


def least_that_works(message):
    return int(re.search(r"Give memory= at least (\d+) bytes", message).group(1))


@settings(max_examples=25, deadline=None)
# a chain of softmax, sort and products read again further on (reuse and skips)
@example(
    [(True, 9, 0, 0), (True, 16, 2, 0), (False, 4, 3, 2), (False, 2, 4, 0)], 0.0, "lru", "float64"
)
@given(
    programs(max_size=14),
    st.floats(0.0, 1.0),
    st.sampled_from(HEURISTIC_NAMES),
    st.sampled_from(["float32", "float64"]),
)
def test_random_graphs_give_store_alls_gradients_or_say_the_least_that_works(
    program, fraction, name, dtype
):
    expected = program_gradients(program, rm.Tape(), dtype=dtype)
    full = rm.Tape(memory=NEVER, remat="dtr")
    got = program_gradients(program, full, dtype=dtype)
    for g, e in zip(got, expected):
        assert (g is None) == (e is None)
        if e is not None:
            np.testing.assert_array_equal(g, e)
    saved = full.stats.peak_bytes
    assert full.stats.evictions == 0
    with rm.Recorder() as recorder:  # the ops a refusal may name
        run_program(program, [rm.ones((N, N), requires_grad=True)] * 2)
    names = {r.op.name for r in recorder.records} | {"multiply", "add", "sum"}
    budget = max(1, int(saved * fraction))
    for _ in range(40):
        tape = rm.Tape(memory=budget, remat=heuristic_of(name))
        try:
            got = program_gradients(program, tape, dtype=dtype)
        except MemoryError as error:
            message = str(error)
            assert message.startswith(f"rm.Tape(memory={budget}, remat='dtr'): at op `")
            assert message.split("`")[1] in names and "(output shape (" in message
            least = least_that_works(message)
            # more than the budget (maybe more than store-all saves: a recomputation
            # holds the values it is made from, which no record may save)
            assert least > budget, message
            budget = least
            continue
        for g, e in zip(got, expected):
            if e is not None:
                assert g.dtype == e.dtype
                np.testing.assert_array_equal(g, e)
        assert tape.stats.peak_bytes <= budget
        assert tape.stats.heuristic == (name if name in HEURISTICS else "<lambda>")
        break
    else:
        raise AssertionError("no budget that works")
