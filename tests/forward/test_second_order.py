"""Second order through checkpointed loops, chains and scans (issue 14).

``rm.hvp`` (forward over reverse) and ``rm.grad(rm.grad(f))`` (reverse over
reverse) through ``tape.loop`` / ``tape.chain`` / ``tape.scan``: the same
arrays under every schedule as under store-all, the unrolled program's values
to rounding, central differences of the gradient, and memory within twice the
first-order run's.
"""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat import schedules
from tests.helpers import tape_for

rng = np.random.default_rng(14)
WIDTH = 4
PRIMALS = (
    rng.standard_normal((WIDTH, WIDTH)) * 0.4,  # w
    rng.standard_normal(WIDTH) * 0.1,  # b
    rng.standard_normal((2, WIDTH)),  # h0
)
DIRECTIONS = tuple(rng.standard_normal(p.shape) for p in PRIMALS)


def step(w, b):
    return lambda h: h + 0.5 * rm.tanh(h @ w + b)


def loop_loss(make_tape, n):
    def loss(w, b, h0):
        h = make_tape().loop(step(w, b), h0 * 1.5, steps=n)  # an op before the loop
        return (h * h).sum() + (w * w * w).sum()  # and a parameter used after it

    return loss


def unrolled_loss(n):
    def loss(w, b, h0):
        h = h0 * 1.5
        for _ in range(n):
            h = step(w, b)(h)
        return (h * h).sum() + (w * w * w).sum()

    return loss


def hvp(loss):
    return rm.hvp(loss, PRIMALS, DIRECTIONS)


def grad_of_grad(loss):
    """d/dp of (grad f(p) . v): the Hessian times v, by reverse over reverse."""
    every = tuple(range(len(PRIMALS)))

    def directional(*p):
        grads = rm.grad(loss, argnums=every)(*p)
        return sum((g * v).sum() for g, v in zip(grads, DIRECTIONS))

    return rm.grad(directional, argnums=every)(*PRIMALS)


def assert_all_equal(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def assert_all_close(got, want, rtol=1e-11):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.integers(1, 5), st.sampled_from(schedules.SCHEDULE_NAMES))
def test_every_schedule_gives_store_alls_second_order_bit_for_bit(n, s, name):
    store_all = loop_loss(rm.Tape, n)
    budgeted = loop_loss(lambda: tape_for(name, s), n)
    got_hvp, got_gg = hvp(budgeted), grad_of_grad(budgeted)
    assert_all_equal(got_hvp, hvp(store_all))
    assert_all_equal(got_gg, grad_of_grad(store_all))
    assert_all_close(got_hvp, hvp(unrolled_loss(n)))  # the program without checkpointing
    assert_all_close(got_gg, got_hvp)  # the two orders agree (the Hessian is symmetric)


def test_hvp_through_revolve_matches_central_differences_of_the_gradient():
    loss = loop_loss(lambda: rm.Tape(snapshots=3), 20)
    every = tuple(range(len(PRIMALS)))
    eps = 1e-5

    def gradient(t):
        return rm.grad(loss, argnums=every)(*(p + t * v for p, v in zip(PRIMALS, DIRECTIONS)))

    numeric = [(up - down) / (2 * eps) for up, down in zip(gradient(eps), gradient(-eps))]
    assert_all_close(hvp(loss), numeric, rtol=1e-6)
    assert_all_close(grad_of_grad(loss), numeric, rtol=1e-6)


@pytest.mark.parametrize("name", schedules.SCHEDULE_NAMES)
def test_scan_chain_pytrees_randomness_and_closed_over_values(name):
    """A loop, a chain whose state changes structure and a scan with xs and ys, all
    closing over w (and a value made from it before the loop), drawing rm.random."""
    h0, w0 = rng.standard_normal((2, 3)), rng.standard_normal((3, 3)) * 0.5
    xs0 = rng.standard_normal((6, 2, 3))
    primals = (h0, w0, xs0)
    directions = tuple(rng.standard_normal(p.shape) for p in primals)

    def layer(h, w):
        return h + rm.tanh(h @ w) * rm.random.uniform(size=h.shape)

    def split(h):
        return {"a": rm.sin(h) * 2.0, "b": h[:, :2]}

    def checkpointed(h, w, xs):
        rm.random.seed(5)
        w2 = w * 1.5
        h = tape_for(name, 2).loop(lambda h: layer(h, w2), h, steps=5)
        h = tape_for(name, 2).chain(
            [lambda h: layer(h, w), split, lambda d: d["a"] * rm.sum(d["b"])], h
        )
        h, ys = tape_for(name, 2).scan(lambda h, x: (layer(h + x, w), rm.cos(h).sum(1)), h, xs)
        return (h**2).sum() + (ys**3).sum()

    def unrolled(h, w, xs):
        rm.random.seed(5)
        w2 = w * 1.5
        for _ in range(5):
            h = layer(h, w2)
        d = split(layer(h, w))
        h, ys = d["a"] * rm.sum(d["b"]), []
        for t in range(xs.shape[0]):
            ys.append(rm.cos(h).sum(1))
            h = layer(h + xs[t], w)
        return (h**2).sum() + (rm.stack(ys) ** 3).sum()

    got = rm.hvp(checkpointed, primals, directions)
    assert_all_close(got, rm.hvp(unrolled, primals, directions))
    every = (0, 1, 2)

    def directional(f):
        return lambda *p: sum(
            (g * v).sum() for g, v in zip(rm.grad(f, argnums=every)(*p), directions)
        )

    gg = rm.grad(directional(checkpointed), argnums=every)(*primals)
    assert_all_close(gg, rm.grad(directional(unrolled), argnums=every)(*primals))


def test_a_loop_of_unknown_length_and_a_gradient_penalty():
    """tape.loop(until=...) under online checkpointing, and rm.grad(f)(w) with w
    requiring grad followed by .backward(): both differentiate the backward."""
    n = 9
    want = hvp(unrolled_loss(n))

    def loss(w, b, h0):
        count = [0]

        def until(h):
            count[0] += 1
            return count[0] >= n

        h = rm.Tape(snapshots=2).loop(step(w, b), h0 * 1.5, until=until)
        return (h * h).sum() + (w * w * w).sum()

    assert_all_close(hvp(loss), want)
    w = rm.tensor(PRIMALS[0], requires_grad=True)
    g = rm.grad(lambda w: loop_loss(lambda: rm.Tape(snapshots=2), n)(w, *PRIMALS[1:]))(w)
    (g * rm.tensor(DIRECTIONS[0])).sum().backward()
    direction_w = (DIRECTIONS[0], np.zeros_like(PRIMALS[1]), np.zeros_like(PRIMALS[2]))
    (want_w, *_) = rm.hvp(unrolled_loss(n), PRIMALS, direction_w)
    np.testing.assert_allclose(w.grad, want_w, rtol=1e-11)


def test_checkpoints_and_loops_inside_loop_steps():
    x0 = rng.standard_normal((2, 3))
    w0, v = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3))

    def inner(h, w):
        return h + 0.5 * rm.tanh(h @ w)

    def outer(step):
        return (rm.Tape(snapshots=2).loop(step, rm.tensor(x0), steps=4) ** 2).sum()

    def nested_checkpoint(w):
        return outer(lambda h: rm.checkpoint(inner)(h, w))

    def nested_loop(w):
        return outer(lambda h: rm.Tape(snapshots=1).loop(lambda g: inner(g, w), h, steps=3))

    def unrolled(steps):
        def f(w):
            h = rm.tensor(x0)
            for _ in range(steps):
                h = inner(h, w)
            return (h**2).sum()

        return f

    def directional(f):
        return lambda w: (rm.grad(f)(w) * v).sum()

    for f, steps in ((nested_checkpoint, 4), (nested_loop, 12)):
        (want,) = rm.hvp(unrolled(steps), (w0,), (v,))
        np.testing.assert_allclose(rm.hvp(f, (w0,), (v,))[0], want, rtol=1e-12)
        np.testing.assert_allclose(rm.grad(directional(f))(w0), want, rtol=1e-12)


def test_third_order_through_a_loop_is_refused_clearly():
    def loss(w):
        h = rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h @ w), rm.tensor(np.ones((1, 2))), steps=3)
        return (h**2).sum()

    def second(w):
        return (rm.grad(loss)(w) ** 2).sum()

    with pytest.raises(rm.BackwardError, match="third derivative"):
        rm.grad(lambda w: (rm.grad(second)(w) ** 2).sum())(np.eye(2) * 0.5)


# --- memory ---------------------------------------------------------------------

N, BIG = 120, 48


def measured(transform, make_tape):
    """(the tape's LoopStats of each run, the tracemalloc peak) of ``transform`` of the
    big loop's loss, without timing anything."""
    big = np.random.default_rng(3)
    w0 = big.standard_normal((BIG, BIG)) / np.sqrt(BIG)
    v, x0 = big.standard_normal((BIG, BIG)), big.standard_normal((8, BIG))
    tapes = []

    def loss(w):
        tapes.append(make_tape())
        return (tapes[-1].loop(lambda h: h + rm.tanh(h @ w), rm.tensor(x0), steps=N) ** 2).sum()

    tracemalloc.start()
    try:
        transform(loss, w0, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return tapes[0].loops, peak


def first_order(loss, w, v):
    return rm.grad(loss)(w)


def forward_over_reverse(loss, w, v):
    return rm.hvp(loss, (w,), (v,))


def reverse_over_reverse(loss, w, v):
    return rm.grad(lambda w: (rm.grad(loss)(w) * rm.tensor(v)).sum())(w)


def test_second_order_holds_twice_the_first_order_runs_bytes():
    def revolve():
        return rm.Tape(snapshots=4)

    (grad_run,), grad_peak = measured(first_order, revolve)
    (first, tangents), hvp_peak = measured(forward_over_reverse, revolve)
    # the first run is the gradient's; the run with tangents holds (state, tangent)
    assert first.peak_bytes == grad_run.peak_bytes
    assert tangents.schedule == "Revolve with tangents"
    assert tangents.forward_steps == first.forward_steps  # the same schedule again
    assert tangents.peak_bytes <= 2 * first.peak_bytes
    assert tangents.peak_bytes > 1.5 * first.peak_bytes  # it does hold the tangents
    # tracemalloc, all the rest included (measured 2.8x here: besides twice the chain's
    # bytes, one reversed step's recorded backward with its tangents, mostly W-sized)
    assert hvp_peak < 4 * grad_peak
    # reverse over reverse: the same run with tangents, and the chain reversed once more
    (_, gg_tangents, again), gg_peak = measured(reverse_over_reverse, revolve)
    assert gg_tangents.peak_bytes == tangents.peak_bytes
    assert again.schedule == "Revolve again" and again.peak_bytes == first.peak_bytes
    assert gg_peak < 4 * grad_peak
    # within the budget: far below store-all's second order
    (_, store_all_tangents), store_all_peak = measured(forward_over_reverse, rm.Tape)
    assert tangents.peak_bytes < store_all_tangents.peak_bytes / 5
    assert hvp_peak < store_all_peak / 3


@pytest.mark.parametrize("name", ["store_all", "revolve"])
def test_the_run_with_tangents_is_replay_checked(name):
    """A step that does not reproduce itself is refused when the loop runs again with
    tangents, also under store-all (which never recomputes for a gradient)."""
    calls = [0]

    def loss(w):
        def drifting(h):
            calls[0] += 1
            return h + rm.tanh(h @ w) * (1 + 1e-3 * calls[0])

        h = tape_for(name, 2).loop(drifting, rm.tensor(np.ones((2, 3))), steps=5)
        return (h**2).sum()

    with pytest.raises(rm.ReplayError, match="recomputed from its stored input"):
        rm.hvp(loss, (np.eye(3) * 0.3,), (np.ones((3, 3)),))


def test_a_parameter_changed_before_the_second_order_backward_is_refused():
    """A gradient penalty: the loop runs again (with tangents) when the penalty is
    reversed; a closed-over parameter written in place since the forward is refused."""
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)
    p = rm.tensor(np.ones((2, 3)), requires_grad=True)

    def f(x):
        return (rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h @ w), x, steps=5) ** 2).sum()

    g = rm.grad(f)(p)
    w.data[0, 0] += 1.0
    with pytest.raises((rm.ReplayError, rm.BackwardError), match="changed in place"):
        (g * g).sum().backward()


def test_second_order_through_checkpoints_in_sequence_and_nested_is_bit_for_bit():
    """The spliced recomputation is numbered where the computation it recomputes stood,
    and the checkpoint hands it its cotangents: the same adds in the same order."""
    x = rm.tensor(rng.standard_normal((2, 3)))
    w0, v = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3))

    def in_sequence(wrap):
        def f(w):
            h = wrap(lambda h, w: rm.sin(h @ w))(x, w)
            return (wrap(lambda h, w: rm.tanh(h @ w))(h, w) ** 2).sum()

        return f

    def nested(wrap):
        def f(w):
            inner = wrap(lambda h: rm.tanh(h @ w) * 2)
            return (wrap(lambda h: inner(inner(h)) + h)(x) ** 2).sum()

        return f

    def grad_of_grad(f):
        return rm.grad(lambda w: (rm.grad(f)(w) ** 2).sum())(w0)

    for program in (in_sequence, nested):
        checkpointed, plain = program(rm.checkpoint), program(lambda f: f)
        np.testing.assert_array_equal(grad_of_grad(checkpointed), grad_of_grad(plain))
        np.testing.assert_array_equal(
            rm.hvp(checkpointed, (w0,), (v,))[0], rm.hvp(plain, (w0,), (v,))[0]
        )


def test_a_gradient_penalty_through_a_loop_can_be_reversed_twice():
    """The loop kept x_0 (it ran inside a recorded rm.grad): with retain_graph=True its
    backward runs the schedule again from x_0, and gives the same gradient again."""
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)
    p = rm.tensor(np.ones((2, 3)), requires_grad=True)

    def f(x):
        return (rm.Tape(snapshots=2).loop(lambda h: rm.tanh(h @ w), x, steps=5) ** 2).sum()

    g = rm.grad(f)(p)
    penalty = (g * g).sum()
    penalty.backward(retain_graph=True)
    once = w.grad.copy()
    penalty.backward()
    np.testing.assert_array_equal(w.grad, once + once)


# --- second order under a byte budget ---------------------------------------------


def budget_loss(memory, schedule, n, tapes):
    """The loop, a chain and a scan, each under rm.Tape(memory=memory, schedule=...);
    every tape made is appended to ``tapes``."""
    xs0 = np.random.default_rng(5).standard_normal((n, 2, WIDTH))

    def make():
        tapes.append(rm.Tape(memory=memory, schedule=schedule))
        return tapes[-1]

    def loss(w, b, h0):
        h = make().loop(step(w, b), h0 * 1.5, steps=n)
        h = make().chain([step(w, b), lambda h: rm.sin(h) * 2.0, step(w * 0.5, b)] * 3, h)
        h, ys = make().scan(lambda h, x: (step(w, b)(h + x), rm.cos(h).sum(1)), h, xs0)
        return (h * h).sum() + (ys**3).sum() + (w * w * w).sum()

    return loss


@pytest.mark.parametrize("schedule", [None, "revolve", "mixed"])
@pytest.mark.parametrize("factor", [0.2, 0.5, 1.0])
def test_second_order_under_a_byte_budget_stays_within_it(schedule, factor):
    n = 12
    want_hvp, want_gg = (
        hvp(budget_loss(None, None, n, [])),
        grad_of_grad(budget_loss(None, None, n, [])),
    )
    rm.memory.clear_plans()
    sizing = []
    hvp(budget_loss(2**40, None, n, sizing))  # every tape fits: the chains' store-all bytes
    store_all = max(s.peak_bytes for t in sizing for s in t.loops)
    memory = int(factor * store_all)
    for transform, want in ((hvp, want_hvp), (grad_of_grad, want_gg)):
        tapes = []
        assert_all_equal(transform(budget_loss(memory, schedule, n, tapes)), want)
        runs = [s for t in tapes for s in t.loops]
        with_tangents = [s for s in runs if s.schedule.endswith("with tangents")]
        assert len(with_tangents) == 3  # the loop's, the chain's and the scan's
        assert all(s.peak_bytes <= memory for s in runs)


def test_a_budget_too_small_for_the_run_with_tangents_says_so():
    rm.memory.clear_plans()
    sizing = []
    hvp(budget_loss(2**40, None, 12, sizing))
    costs = [plan[1] for t in sizing for plan in t.plans]
    least = max(schedules.minimum_bytes(c) for c in costs)  # first order fits in this
    doubled = [
        schedules.ChainCosts(
            c.forward_time,
            c.reverse_time,
            [2 * s for s in c.state_bytes],
            [2 * t for t in c.tape_bytes],
        )
        for c in costs
    ]
    assert max(schedules.minimum_bytes(c) for c in doubled) > least
    rm.grad(budget_loss(least, None, 12, []), argnums=(0, 1, 2))(*PRIMALS)  # first order: fits
    with pytest.raises(ValueError, match="too small for the chain's run with tangents"):
        hvp(budget_loss(least, None, 12, []))
