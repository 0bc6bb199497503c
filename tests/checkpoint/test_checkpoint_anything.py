"""Checkpoint any computation: rm.checkpoint, tape.chain, tape.scan, pytrees, the replay check.

Every form must give gradients bit-identical to the computation without
checkpointing (store-all), whatever the schedule.
"""

import tracemalloc
import weakref
from collections import namedtuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat import pytree, schedules

rng = np.random.default_rng(0)
SCHEDULES = ["store_all", "sqrt", "periodic", "revolve", "online"]


def tape_for(name, s=3):
    if name == "store_all":
        return rm.Tape()
    if name == "sqrt":
        return rm.Tape(schedule="sqrt")
    return rm.Tape(snapshots=s, schedule=name)


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


# --- pytrees ---------------------------------------------------------------------


def test_pytrees_flatten_and_unflatten_every_container():
    Pair = namedtuple("Pair", "a b")
    tree = {"h": 1.0, "c": [2.0, ("x", 3.0)], "p": Pair(4.0, None)}
    leaves, treedef = pytree.flatten(tree, lambda v: isinstance(v, float))
    assert leaves == [2.0, 3.0, 1.0, 4.0]  # dict keys in sorted order
    back = pytree.unflatten(treedef, [20.0, 30.0, 10.0, 40.0])
    assert back == {"h": 10.0, "c": [20.0, ("x", 30.0)], "p": Pair(40.0, None)}
    assert list(back) == ["h", "c", "p"] and type(back["p"]) is Pair
    other = pytree.flatten(
        {"h": 1.0, "c": [2.0, ("y", 3.0)], "p": Pair(4.0, None)}, lambda v: isinstance(v, float)
    )[1]
    assert other != treedef  # a static value differs
    with pytest.raises(ValueError, match="has 4 leaves, got 3"):
        pytree.unflatten(treedef, [1.0, 2.0, 3.0])


def test_grad_takes_and_returns_pytrees():
    params = {"w": rng.standard_normal((3, 2)), "b": [rng.standard_normal(2), "tag"]}
    x = rng.standard_normal((4, 3))

    def loss(p, x):
        return (rm.tanh(x @ p["w"] + p["b"][0]) ** 2).sum()

    g = rm.grad(loss)(params, x)
    assert set(g) == {"w", "b"} and g["b"][1] == "tag"
    flat = rm.grad(lambda w, b: loss({"w": w, "b": [b, "tag"]}, x), argnums=(0, 1))(
        params["w"], params["b"][0]
    )
    assert np.array_equal(g["w"], flat[0]) and np.array_equal(g["b"][0], flat[1])
    value, (gp, gx) = rm.value_and_grad(loss, argnums=(0, 1))(params, x)
    assert gx.shape == x.shape and np.array_equal(gp["w"], g["w"])


def test_a_loop_state_may_be_a_dict():
    w = rm.tensor(rng.standard_normal((3, 3)) * 0.4, requires_grad=True)

    def step(s):
        h = rm.tanh(s["h"] @ w) + s["c"]
        return {"h": h, "c": s["c"] * 0.9, "t": s["t"] + 1}

    def grads(tape):
        w.grad = None
        s0 = {
            "h": rm.tensor(np.ones((2, 3)), requires_grad=True),
            "c": rm.tensor(np.ones(3)),
            "t": rm.tensor(0),
        }
        out = tape.loop(step, s0, steps=9)
        (out["h"] ** 2).sum().backward()
        assert out["t"].item() == 9
        return w.grad, s0["h"].grad

    want = grads(rm.Tape())
    for name in SCHEDULES[1:]:
        assert same(grads(tape_for(name)), want)


# --- rm.checkpoint -------------------------------------------------------------------


def block(w):
    def f(x):
        return x + rm.tanh(x @ w) * rm.random.uniform(size=x.shape)

    return f


def test_checkpoint_gives_the_same_gradients_bit_for_bit():
    ws = [rm.tensor(rng.standard_normal((4, 4)) * 0.5, requires_grad=True) for _ in range(5)]
    x0 = rng.standard_normal((3, 4))

    def grads(wrap):
        for w in ws:
            w.grad = None
        rm.random.seed(7)
        x = rm.tensor(x0, requires_grad=True)
        h = x
        for w in ws:
            h = wrap(block(w))(h)
        (h * h).sum().backward()
        return [w.grad for w in ws] + [x.grad]

    assert same(grads(rm.checkpoint), grads(lambda f: f))


def test_checkpoint_takes_pytrees_works_as_decorator_and_nests():
    w = rm.tensor(rng.standard_normal((3, 3)) * 0.5, requires_grad=True)

    @rm.checkpoint
    def inner(x):
        return rm.sin(x @ w)

    @rm.checkpoint
    def outer(state, scale=2.0):
        h = inner(state["h"]) * scale
        return {"h": h, "aux": [h.sum(), "static"]}

    def plain(state, scale=2.0):
        h = rm.sin(state["h"] @ w) * scale
        return {"h": h, "aux": [h.sum(), "static"]}

    def grads(fn):
        w.grad = None
        h0 = rm.tensor(np.ones((2, 3)), requires_grad=True)
        out = fn({"h": h0}, scale=3.0)
        assert out["aux"][1] == "static"
        ((out["h"] ** 2).sum() + out["aux"][0]).backward()
        return w.grad, h0.grad

    assert same(grads(outer), grads(plain))
    assert outer.__name__ == "outer"


def test_checkpoint_inside_loop_steps_and_loops_inside_checkpoints():
    w = rm.tensor(rng.standard_normal((3, 3)) * 0.4, requires_grad=True)
    layer = rm.checkpoint(lambda h: h + rm.tanh(h @ w))

    def grads(tape, inner):
        w.grad = None
        h0 = rm.tensor(np.ones((2, 3)), requires_grad=True)
        h = tape.loop(lambda h: inner(inner(h)), h0, steps=6)
        (h * h).sum().backward()
        return w.grad, h0.grad

    plain = lambda h: h + rm.tanh(h @ w)  # noqa: E731
    want = grads(rm.Tape(), plain)
    assert same(grads(rm.Tape(snapshots=2), layer), want)

    @rm.checkpoint
    def looped(h):
        return rm.Tape(snapshots=2).loop(lambda h: plain(plain(h)), h, steps=6)

    w.grad = None
    h0 = rm.tensor(np.ones((2, 3)), requires_grad=True)
    (looped(h0) ** 2).sum().backward()
    assert same((w.grad, h0.grad), want)


def test_checkpoint_can_be_reversed_twice_when_retained():
    w = rm.tensor([[0.5, 0.1], [0.2, 0.3]], requires_grad=True)
    y = (rm.checkpoint(lambda x: rm.tanh(x @ w))(rm.tensor(np.ones((1, 2)))) ** 2).sum()
    y.backward(retain_graph=True)
    first = w.grad.copy()
    y.backward()
    assert np.array_equal(w.grad, 2 * first)


def test_a_chain_of_checkpointed_blocks_keeps_only_block_inputs():
    width, depth = 256, 12
    ws = [
        rm.tensor(rng.standard_normal((width, width)) * 0.05, requires_grad=True)
        for _ in range(depth)
    ]
    x0 = rng.standard_normal((64, width))

    def peak(wrap):
        tracemalloc.start()
        h = rm.tensor(x0)
        for w in ws:
            h = wrap(lambda x, w=w: rm.tanh(rm.tanh(x @ w) @ w))(h)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    plain, checkpointed = peak(lambda f: f), peak(rm.checkpoint)
    state = x0.nbytes
    assert checkpointed < (depth + 6) * state  # the block inputs, and a little
    assert plain > 2 * depth * state  # two tanh outputs a block without checkpointing


def test_checkpoint_refuses_a_policy_that_is_not_one_and_non_tensor_results():
    with pytest.raises(TypeError, match=r"rm\.policies\.save_everything"):
        rm.checkpoint(lambda x: x, policy="save_everything")  # a name, not the policy
    with pytest.raises(rm.StepOutputError, match="not a Tensor"):
        rm.checkpoint(lambda x: x.data * 2)(rm.tensor([1.0], requires_grad=True))


# --- tape.chain ----------------------------------------------------------------------


def make_layers(widths, seed=0):
    r = np.random.default_rng(seed)
    params = [
        rm.tensor(r.standard_normal((a, b)) / a**0.5, requires_grad=True)
        for a, b in zip(widths, widths[1:])
    ]
    layers = [lambda h, w=w: rm.tanh(h @ w) for w in params]
    return params, layers


def chain_grads(tape, widths, seed=0):
    params, layers = make_layers(widths, seed)
    x = rm.tensor(
        np.random.default_rng(seed + 1).standard_normal((2, widths[0])), requires_grad=True
    )
    out = tape.chain(layers, x * 1.0)
    assert out.shape == (2, widths[-1])
    (out * out).sum().backward()
    return [p.grad for p in params] + [x.grad]


@pytest.mark.parametrize("name", SCHEDULES[1:])
def test_a_chain_of_layers_of_different_widths_is_exact_under_every_schedule(name):
    widths = [3, 7, 2, 5, 5, 4, 8, 1, 3]
    assert same(chain_grads(tape_for(name), widths), chain_grads(rm.Tape(), widths))


def test_a_chain_counts_like_a_loop():
    for n, s in [(10, 3), (30, 4), (7, 2)]:
        tape = rm.Tape(snapshots=s)
        chain_grads(tape, [3] * (n + 1))
        assert tape.stats.forward_steps == schedules.optimal_forward_steps(n, s)
        assert tape.stats.steps == n


def test_chain_layers_may_change_structure_and_dtype():
    w = rm.tensor(rng.standard_normal((3, 3)), requires_grad=True)
    layers = [
        lambda h: {"a": h @ w, "b": h},
        lambda s: (s["a"] * s["b"]).astype(np.float32),
        lambda h: [h, h.sum()],
        lambda hs: hs[0] * hs[1],
    ]

    def grads(tape):
        w.grad = None
        x = rm.tensor(np.ones((2, 3)), requires_grad=True)
        out = tape.chain(layers, x)
        assert out.dtype == np.float32
        out.sum().backward()
        return w.grad, x.grad

    assert same(grads(rm.Tape(snapshots=2)), grads(rm.Tape()))


@pytest.mark.parametrize(
    "functions, error, match",
    [
        ([], ValueError, "empty"),
        ([lambda h: h, 3], TypeError, r"functions\[1\] is not callable"),
        (5, TypeError, "sequence of callables"),
    ],
)
def test_bad_chains_are_named(functions, error, match):
    with pytest.raises(error, match=match):
        rm.Tape(snapshots=2).chain(functions, rm.tensor([1.0]))


# --- tape.scan ---------------------------------------------------------------------------


def rnn_grads(tape, n=12, seed=0):
    r = np.random.default_rng(seed)
    wx = rm.tensor(r.standard_normal((4, 5)) * 0.4, requires_grad=True)
    wh = rm.tensor(r.standard_normal((5, 5)) * 0.4, requires_grad=True)
    xs = {
        "x": rm.tensor(r.standard_normal((n, 2, 4)), requires_grad=True),
        "mask": rm.tensor(r.uniform(size=(n, 2, 1)) > 0.2),
    }
    h0 = rm.tensor(np.zeros((2, 5)), requires_grad=True)

    def cell(h, inp):
        h = rm.tanh(inp["x"] @ wx + h @ wh) * inp["mask"]
        return h, {"out": h.sum(axis=1), "copy": h}

    h, ys = tape.scan(cell, h0, xs)
    assert ys["out"].shape == (n, 2) and ys["copy"].shape == (n, 2, 5)
    ((ys["out"] ** 2).sum() + (h * h).sum() + ys["copy"][3].sum()).backward()
    return wx.grad, wh.grad, xs["x"].grad, h0.grad


@pytest.mark.parametrize("name", SCHEDULES[1:])
def test_scan_is_exact_under_every_schedule(name):
    assert same(rnn_grads(tape_for(name, 3)), rnn_grads(rm.Tape()))


def test_scan_matches_an_unrolled_loop():
    r = np.random.default_rng(3)
    w = rm.tensor(r.standard_normal((3, 3)) * 0.5, requires_grad=True)
    xs0 = r.standard_normal((6, 3))

    def cell(h, x):
        h = rm.tanh(h @ w + x)
        return h, h * 2.0

    xs = rm.tensor(xs0, requires_grad=True)
    h, ys = rm.Tape(snapshots=2).scan(cell, rm.tensor(np.ones(3)), xs)
    (ys.sum() + h.sum()).backward()
    got = w.grad, xs.grad
    w.grad = None
    xs2, h2, outs = rm.tensor(xs0, requires_grad=True), rm.tensor(np.ones(3)), []
    for t in range(6):
        h2, y = cell(h2, xs2[t])
        outs.append(y)
    (rm.stack(outs).sum() + h2.sum()).backward()
    np.testing.assert_allclose(got[0], w.grad, rtol=1e-13)
    np.testing.assert_allclose(got[1], xs2.grad, rtol=1e-13)


def test_scan_without_outputs_and_over_stacked_weights():
    r = np.random.default_rng(4)
    ws = rm.tensor(r.standard_normal((8, 3, 3)) * 0.5, requires_grad=True)
    carry, ys = rm.Tape(snapshots=2).scan(
        lambda h, w: (rm.tanh(h @ w), None), rm.tensor(np.ones(3)), ws
    )
    assert ys is None
    carry.sum().backward()
    want = rm.grad(lambda ws: _unrolled(ws))(ws.data.copy())
    np.testing.assert_allclose(ws.grad, want, rtol=1e-13)


def _unrolled(ws):
    h = rm.tensor(np.ones(3))
    for t in range(ws.shape[0]):
        h = rm.tanh(h @ ws[t])
    return h.sum()


@pytest.mark.parametrize(
    "make, error, match",
    [
        (
            lambda: rm.Tape().scan(
                lambda h, x: (h, x),
                rm.tensor(1.0),
                {"a": rm.tensor(np.ones(3)), "b": rm.tensor(np.ones(4))},
            ),
            ValueError,
            "same leading axis",
        ),
        (
            lambda: rm.Tape().scan(lambda h, x: ((h, h), x), rm.tensor(1.0), rm.tensor(np.ones(3))),
            rm.StepOutputError,
            "structure",
        ),
        (
            lambda: rm.Tape().scan(lambda h, x: h, rm.tensor(1.0), rm.tensor(np.ones(3))),
            rm.LoopError,
            "pair",
        ),
        (
            lambda: rm.Tape().scan(lambda h, x: (h, x), rm.tensor(1.0), "abc"),
            ValueError,
            "nothing to scan",
        ),
        (lambda: rm.Tape().scan(3, rm.tensor(1.0), rm.tensor(np.ones(3))), TypeError, "callable"),
    ],
)
def test_bad_scans_are_named(make, error, match):
    with pytest.raises(error, match=match):
        make()


# --- the replay check ---------------------------------------------------------------------


def test_a_step_reading_python_state_is_caught_on_replay():
    counter = {"k": 0}

    def step(h):
        counter["k"] += 1
        return h * (1.0 + 0.01 * counter["k"])

    h = rm.Tape(snapshots=2).loop(step, rm.tensor(np.ones(3), requires_grad=True), steps=8)
    with pytest.raises(
        rm.ReplayError, match=r"(?s)step \d+ was recomputed.*different values.*counter"
    ):
        h.sum().backward()


def test_np_random_inside_a_checkpoint_is_caught_and_the_check_can_be_turned_off():
    gen = np.random.default_rng(0)
    noisy = rm.checkpoint(lambda x: x * gen.standard_normal(3))
    y = noisy(rm.tensor(np.ones(3), requires_grad=True)).sum()
    with pytest.raises(rm.ReplayError, match="np.random instead of rm.random"):
        y.backward()
    with rm.Tape(check_replay=False):
        y = noisy(rm.tensor(np.ones(3), requires_grad=True)).sum()
    y.backward()  # the values differ, and the user said that is expected


def test_shapes_are_checked_on_replay_even_without_value_checks():
    calls = {"n": 0}

    def layer(h):
        calls["n"] += 1
        return h[:2] if calls["n"] > 3 else h * 1.0

    tape = rm.Tape(snapshots=2, check_replay=False)
    out = tape.chain([layer, layer, layer], rm.tensor(np.ones(4), requires_grad=True))
    with pytest.raises(rm.ReplayError, match="shape"):
        out.sum().backward()


# --- properties -------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=2, max_size=14),
    st.integers(1, 5),
    st.sampled_from(SCHEDULES[1:]),
    st.integers(0, 1000),
)
def test_random_chains_are_exact_under_every_schedule(widths, s, name, seed):
    assert same(chain_grads(tape_for(name, s), widths, seed), chain_grads(rm.Tape(), widths, seed))


def _probed(f_tail):
    """A function whose first part is checkpointed again inside it, so that its
    recomputation runs while backward is half-way through the outer step: it notes
    whether the array ``f_tail`` saved (for a record reversed before) is gone."""
    probe, gone = [], []

    def head(x):
        if probe:  # recomputed in backward, after the tail's records were reversed
            gone.append(probe[-1]() is None)
        return rm.sin(x)

    def f(x):
        y = rm.checkpoint(head)(x)
        z = rm.tanh(y * 3.0)  # its record saves its output, z's array
        if z.record is not None:
            probe.append(weakref.ref(z.record.ans))
        return f_tail(z)

    return f, gone


# A step's reverse held every array its records saved until the whole step was
# reversed (the step tape's list of them), where a plain tape frees each as it passes.
@pytest.mark.parametrize("form", ["checkpoint", "chain", "loop"])
def test_a_step_frees_what_it_saved_as_its_reverse_passes(form):
    f, gone = _probed(lambda z: rm.exp(z) * 2.0)
    x = rm.tensor(rng.standard_normal(1000), requires_grad=True)
    if form == "checkpoint":
        y = rm.checkpoint(f)(x)
    else:
        with rm.Tape(snapshots=1) as tape:
            y = tape.chain([f, f], x) if form == "chain" else tape.loop(f, x, steps=2)
    y.sum().backward()
    assert gone and all(gone)
    # and the gradient is the one without checkpointing, bit for bit
    g = x.grad
    x.grad = None
    plain, _ = _probed(lambda z: rm.exp(z) * 2.0)
    (plain(x) if form == "checkpoint" else plain(plain(x))).sum().backward()
    assert np.array_equal(g, x.grad)


# rm.checkpoint with a policy held what the policy kept until the whole call was
# reversed, even the values that served only its recomputation.
def test_what_a_policy_kept_goes_once_the_recomputation_has_used_it():
    probe, gone = [], []

    def head(x):
        if len(probe) > 1:  # recomputed in backward, after cos's record was reversed
            gone.append(probe[-1]() is None)
        return rm.sin(x)

    def f(x):
        s = rm.cos(rm.checkpoint(head)(x) * 3.0)  # kept; cos's record saves its input, not s
        probe.append(weakref.ref(np.asarray(s).base))
        return s * 2.0

    x = rm.tensor(rng.standard_normal(1000), requires_grad=True)
    rm.checkpoint(f, policy=rm.policies.save_ops("cos"))(x).sum().backward()
    assert gone == [True]
    want = -np.sin(np.sin(x.numpy()) * 3.0) * 3.0 * np.cos(x.numpy()) * 2.0
    assert np.allclose(x.grad, want, rtol=1e-12, atol=0)
