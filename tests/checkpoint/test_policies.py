"""Selective recomputation: rm.policies, policy= on rm.checkpoint and rm.Tape,
rm.checkpoint_name and rm.count_ops.

Under every policy the gradients must be those without checkpointing, bit for
bit; the op counts say which ops the backward evaluated again; a recomputation
that drifts from its first run is refused; what a policy keeps is counted.
"""

import re
import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat import policies

D, T = 8, 5

POLICIES = {
    "None": None,
    "save_nothing": policies.save_nothing,
    "save_everything": policies.save_everything,
    "save_ops(matmul)": policies.save_ops("matmul"),
    "save_ops(softmax, tanh)": policies.save_ops("softmax", "tanh"),
    "save_names(scores)": policies.save_names("scores"),
    "callable": lambda op_name, value_name: op_name == "add" or value_name is not None,
}


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# --- an attention block ------------------------------------------------------------


def attention_params(seed=0, d=D):
    r = np.random.default_rng(seed)
    return [rm.tensor(r.standard_normal((d, d)) / d**0.5, requires_grad=True) for _ in range(4)]


def attention(x, wq, wk, wv, wo):
    """q, k, v projections, scores = q k^T / sqrt(d), softmax, @ v, output projection:
    six matmuls and one softmax."""
    q, k, v = x @ wq, x @ wk, x @ wv
    scores = rm.checkpoint_name(q @ rm.swapaxes(k, -1, -2) * (1 / q.shape[-1] ** 0.5), "scores")
    return (rm.softmax(scores, axis=-1) @ v) @ wo


def attention_grads(block, x0, params):
    for p in params:
        p.grad = None
    x = rm.tensor(x0, requires_grad=True)
    y = block(x, *params)
    loss = (y * y).sum()
    with rm.count_ops() as counts:
        loss.backward()
    return [x.grad] + [p.grad for p in params], counts


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_gives_the_gradients_of_no_checkpointing_bit_for_bit(name):
    params = attention_params()
    x0 = np.random.default_rng(1).standard_normal((T, D))
    want, plain = attention_grads(attention, x0, params)
    assert sum(plain.values()) == 0  # an ordinary backward evaluates no op
    got, _ = attention_grads(rm.checkpoint(attention, policy=POLICIES[name]), x0, params)
    assert same(got, want)


def test_the_op_counts_of_a_backward_through_a_checkpointed_attention_block():
    params = attention_params()
    x0 = np.random.default_rng(2).standard_normal((2, T, D))
    _, counts = attention_grads(
        rm.checkpoint(attention, policy=policies.save_ops("matmul")), x0, params
    )
    assert counts["matmul"] == 0 and counts["softmax"] == 1
    _, counts = attention_grads(rm.checkpoint(attention), x0, params)
    assert counts["matmul"] == 6 and counts["softmax"] == 1  # all of the block's matmuls
    _, counts = attention_grads(rm.checkpoint(attention, policy=policies.save_nothing), x0, params)
    assert counts["matmul"] == 6
    _, counts = attention_grads(
        rm.checkpoint(attention, policy=policies.save_everything), x0, params
    )
    assert sum(counts.values()) == 0
    _, counts = attention_grads(
        rm.checkpoint(attention, policy=policies.save_names("scores")), x0, params
    )
    # the named (scaled) scores are reused: the op that made them, the scaling, is not
    # evaluated again; q @ k^T still is (an eager recomputation does not prune an op
    # whose result only feeds kept ones), and so is the softmax on the kept scores
    assert counts["matmul"] == 6 and counts["softmax"] == 1 and counts["multiply"] == 0


def test_count_ops_counts_the_forward_in_its_own_thread_only():
    x = rm.tensor(np.ones(3), requires_grad=True)
    with rm.count_ops() as outer:
        rm.sin(x)
        with rm.count_ops() as inner:
            (rm.sin(x) * 2.0).sum()
        other = []
        thread = threading.Thread(target=lambda: other.append(rm.cos(x)))
        thread.start()
        thread.join()
    assert dict(inner) == {"sin": 1, "multiply": 1, "sum": 1}
    assert dict(outer) == {"sin": 2, "multiply": 1, "sum": 1}  # no cos: another thread
    assert outer["tanh"] == 0
    rm.sin(x)
    assert outer["sin"] == 2  # nothing counted after the block


def test_a_policy_is_asked_positionally_for_every_op_and_again_for_each_name():
    asked = []

    def policy(op_name, value_name):
        asked.append((op_name, value_name))
        return False

    w = rm.tensor(np.eye(2), requires_grad=True)

    def f(x):
        h = rm.checkpoint_name(x @ w, "h")
        return rm.tanh(h)

    rm.checkpoint(f, policy=policy)(rm.tensor(np.ones((1, 2)))).sum().backward()
    assert asked == [("matmul", None), ("matmul", "h"), ("tanh", None)]


def test_checkpoint_name_returns_its_argument_and_names_only_values_made_inside():
    x = rm.tensor(np.ones(2), requires_grad=True)
    assert rm.checkpoint_name(x, "x") is x  # outside any checkpoint: nothing to do
    with pytest.raises(TypeError, match="name must be a str"):
        rm.checkpoint_name(x, 3)
    w = rm.tensor(np.full(2, 0.5), requires_grad=True)

    def f(x):  # naming the input keeps nothing more: it is kept anyway
        return rm.sin(rm.checkpoint_name(x, "x") * w)

    g = rm.checkpoint(f, policy=policies.save_names("x"))
    with rm.count_ops() as counts:
        g(x).sum().backward()
    assert counts["multiply"] == 2 and counts["sin"] == 2
    assert np.array_equal(x.grad, np.cos(0.5) * 0.5 * np.ones(2))


def test_gradients_under_a_policy_match_finite_differences_in_float64():
    w = np.random.default_rng(3).standard_normal((3, 3))

    def f(x, w):
        block = rm.checkpoint(
            lambda x: rm.tanh(rm.checkpoint_name(x @ w, "h")) @ w,
            policy=policies.save_names("h"),
        )
        return (block(x) ** 2).sum()

    assert rm.gradcheck(f, np.random.default_rng(4).standard_normal((2, 3)), w)


def test_second_order_through_a_policy_checkpoint_matches_no_checkpointing():
    w = np.random.default_rng(5).standard_normal((3, 3))

    def plain(x):
        return (rm.tanh(x @ w) ** 2).sum()

    def kept(x):
        f = rm.checkpoint(lambda x: rm.tanh(x @ w), policy=policies.save_ops("matmul"))
        return (f(x) ** 2).sum()

    x, v = np.random.default_rng(6).standard_normal((2, 3, 3))
    assert np.allclose(rm.hvp(kept, (x,), (v,)), rm.hvp(plain, (x,), (v,)), rtol=0, atol=1e-12)


def test_nested_checkpoints_with_policies_give_the_same_gradients():
    params = attention_params(7)
    x0 = np.random.default_rng(8).standard_normal((T, D))

    def two_blocks(x, *params):
        inner = rm.checkpoint(attention, policy=policies.save_ops("softmax"))
        return attention(inner(x, *params), *params)

    want, _ = attention_grads(two_blocks, x0, params)
    outer = rm.checkpoint(two_blocks, policy=policies.save_ops("matmul"))
    got, counts = attention_grads(outer, x0, params)
    assert same(got, want)
    # backward: the outer recomputation reuses its twelve matmuls (the inner block's
    # too, which run inside it) and evaluates both softmaxes; the inner recomputation
    # then evaluates its six matmuls and reuses its softmax
    assert counts["softmax"] == 2 and counts["matmul"] == 6


# --- loops, chains and scans under a schedule ---------------------------------------


def make_loop_params(seed):
    r = np.random.default_rng(seed)
    return rm.tensor(r.standard_normal((D, D)) * 0.4, requires_grad=True)


def loop_step(w):
    def step(h):
        return h + rm.tanh(rm.checkpoint_name(h @ w, "pre"))

    return step


def run_form(form, w, h, n, tape):
    step = loop_step(w)
    if form == "loop":
        return tape.loop(step, h, steps=n)
    if form == "chain":
        return tape.chain([step] * n, h)
    xs = rm.tensor(np.linspace(0.0, 1.0, n * D).reshape(n, D))
    carry, ys = tape.scan(lambda c, x: (step(c) * x, rm.sin(c)), h, xs)
    return carry + ys.sum()


def run_plain(form, w, h, n):
    step = loop_step(w)
    for _ in range(n):
        h = step(h)
    return h


def loop_grads(form, n, tape=None, seed=0):
    w = make_loop_params(seed)
    h = rm.tensor(np.random.default_rng(seed + 1).standard_normal((2, D)), requires_grad=True)
    if tape is None:
        out = run_plain(form, w, h, n)
    else:
        with tape:
            out = run_form(form, w, h, n, tape)
    (out * out).sum().backward()
    return [h.grad, w.grad]


@settings(max_examples=40, deadline=None)
@given(
    form=st.sampled_from(["loop", "chain", "scan"]),
    n=st.integers(1, 9),
    s=st.integers(1, 4),
    schedule=st.sampled_from(["revolve", "sqrt", "periodic", "online", "store_all"]),
    name=st.sampled_from(list(POLICIES)),
    seed=st.integers(0, 3),
)
def test_loops_chains_and_scans_under_any_policy_match_no_checkpointing(
    form, n, s, schedule, name, seed
):
    # no checkpointing: the Python loop itself; for a scan, tape.scan storing every step
    # (its xs' gradient gathers by step, so a Python loop would add in another order)
    want = loop_grads(form, n, rm.Tape() if form == "scan" else None, seed=seed)
    if schedule in ("store_all", "sqrt"):
        tape = rm.Tape(schedule=schedule, policy=POLICIES[name])
    else:
        tape = rm.Tape(snapshots=s, schedule=schedule, policy=POLICIES[name])
    assert same(loop_grads(form, n, tape, seed=seed), want)


def test_a_loop_under_revolve_reuses_what_each_step_kept():
    counts = {}
    for name in ("None", "save_ops(matmul)", "save_everything"):
        with rm.count_ops() as counts[name]:
            loop_grads("loop", 20, rm.Tape(snapshots=3, policy=POLICIES[name]))
    evaluations = counts["None"]["matmul"]
    assert evaluations > 20  # revolve evaluates steps again
    assert counts["save_ops(matmul)"]["matmul"] == 20  # each step's product, once
    assert counts["save_ops(matmul)"]["tanh"] == evaluations
    assert counts["save_everything"]["tanh"] == counts["save_everything"]["add"] == 20


def test_kept_values_count_as_held_bytes():
    n, state = 20, 2 * D * 8  # each step's matmul output: one state's bytes
    peaks = {}
    for name in ("None", "save_ops(matmul)"):
        tape = rm.Tape(snapshots=3, policy=POLICIES[name], trace=True)
        loop_grads("loop", n, tape)
        peaks[name] = tape.stats.peak_bytes
    assert peaks["None"] < n * state
    # at the end of the forward sweep every step's product is held, besides the snapshots
    assert peaks["save_ops(matmul)"] >= n * state + peaks["None"] - 2 * state
    # a checkpoint's record holds what its policy kept
    params = attention_params()
    x = rm.tensor(np.ones((T, D)), requires_grad=True)
    with rm.Tape() as plain:
        rm.checkpoint(attention)(x, *params)
    with rm.Tape() as kept:
        rm.checkpoint(attention, policy=policies.save_ops("matmul"))(x, *params)
    # six products: q, k, v, q k^T, (softmax) v, and the output
    assert kept.saved_bytes() - plain.saved_bytes() == (4 * T * D + T * T) * 8 + T * D * 8


def test_save_nothing_holds_less_than_save_everything_measured_by_tracemalloc():
    d, t = 32, 96
    params = attention_params(9, d)
    x = rm.tensor(np.random.default_rng(10).standard_normal((t, d)), requires_grad=True)
    held = {}
    for name in ("save_nothing", "save_everything"):
        f = rm.checkpoint(attention, policy=POLICIES[name])
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        y = f(x, *params)
        held[name] = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        (y * y).sum().backward()
        del y
    # save_everything holds every intermediate: q, k, v, the scores (twice: before
    # and after scaling), the softmax, its product with v, and the output
    intermediates = (5 * t * d + 3 * t * t) * 8
    assert held["save_everything"] > 0.8 * intermediates
    assert held["save_nothing"] < held["save_everything"] / 4


# --- recomputations that drift are refused ---------------------------------------------


def test_a_recomputation_that_evaluates_another_op_is_refused():
    calls = []
    w = rm.tensor(np.eye(2), requires_grad=True)

    def drifting(x):
        calls.append(1)
        h = x @ w
        return rm.sin(h) if len(calls) == 1 else rm.cos(h)

    y = rm.checkpoint(drifting, policy=policies.save_ops("matmul"))(rm.tensor(np.ones((1, 2))))
    with pytest.raises(rm.ReplayError) as error:
        y.sum().backward()
    text = str(error.value)
    assert "rm.checkpoint(drifting)" in text and "op position 1" in text
    assert "`cos`" in text and "`sin`" in text and "shape (1, 2) float64" in text


def test_a_recomputation_feeding_a_kept_op_other_values_is_refused():
    scale = [1.0]
    w = rm.tensor(np.eye(2), requires_grad=True)

    def f(x):  # the kept product's output would hide that its operand changed
        return rm.tanh((x * scale[0]) @ w)

    y = rm.checkpoint(f, policy=policies.save_ops("matmul", "tanh"))(rm.tensor(np.ones((1, 2))))
    scale[0] = 2.0
    with pytest.raises(rm.ReplayError, match="op position 1.*same shapes and dtypes but other"):
        y.sum().backward()


def test_a_recomputation_with_other_shapes_or_fewer_ops_is_refused():
    calls = []

    def reshaping(x):
        calls.append(1)
        return rm.sin(x.reshape((4,) if len(calls) == 1 else (2, 2)))

    x = rm.tensor(np.ones((2, 2)), requires_grad=True)
    y = rm.checkpoint(reshaping, policy=policies.save_ops("sin"))(x)
    with pytest.raises(rm.ReplayError, match=r"`reshape`.*gave shape \(4,\).*shape \(2, 2\)"):
        y.sum().backward()

    calls.clear()

    def casting(x):
        calls.append(1)
        return rm.sin(x.astype("float64" if len(calls) == 1 else "float32"))

    y = rm.checkpoint(casting, policy=policies.save_ops("sin"))(x)
    with pytest.raises(rm.ReplayError, match=r"`astype`.*dtype float64, this one .* dtype float32"):
        y.sum().backward()
    calls.clear()

    def shrinking(x):
        calls.append(1)
        h = rm.sin(x)
        return rm.sin(h) if len(calls) == 1 else h

    y = rm.checkpoint(shrinking, policy=policies.save_ops("sin"))(x)
    with pytest.raises(rm.ReplayError, match="evaluated 1 ops, where its first run evaluated 2"):
        y.sum().backward()


def test_a_loop_step_that_drifts_is_named():
    w = make_loop_params(0)
    calls = []

    def step(h):
        calls.append(1)
        return h + (rm.tanh(h @ w) if len(calls) <= 4 else rm.sin(h @ w))

    with rm.Tape(snapshots=2, policy=policies.save_ops("matmul")) as tape:
        h = tape.loop(step, rm.tensor(np.ones((2, D)), requires_grad=True), steps=4)
    with pytest.raises(rm.ReplayError, match=r"tape\.loop: step \d.*`sin`.*`tanh`"):
        (h * h).sum().backward()


# --- what a policy may be ---------------------------------------------------------------


def test_policies_are_checked():
    with pytest.raises(ValueError, match="unknown op 'matmull'.*matmul"):
        policies.save_ops("matmull")
    with pytest.raises(ValueError, match="at least one"):
        policies.save_names()
    with pytest.raises(TypeError, match="names must be str"):
        policies.save_names(3)
    with pytest.raises(TypeError, match="policy must be None"):
        rm.Tape(policy=3)
    assert policies.save_ops("matmul") == policies.save_ops("matmul")  # one cached plan
    assert policies.save_ops("matmul") != policies.save_ops("tanh")
    f = rm.checkpoint(lambda x: rm.sin(x), policy=lambda op, name: None)
    with pytest.raises(policies.PolicyError, match="returned None for op 'sin'.*True .* or F"):
        f(rm.tensor([1.0], requires_grad=True))

    def failing(op_name, value_name):
        raise ValueError("no such rule")

    with pytest.raises(policies.PolicyError, match="failing raised ValueError for op 'sin'"):
        rm.checkpoint(lambda x: rm.sin(x), policy=failing)(rm.tensor([1.0]))
    assert repr(policies.save_ops("matmul", "einsum")) == "save_ops('matmul', 'einsum')"
    assert policies.save_names("a")("add", "a") is True
    assert policies.save_everything("add", None) is True
    assert policies.save_nothing("add", None) is False


def test_the_decorator_form_takes_a_policy():
    w = rm.tensor(np.eye(2) * 2.0, requires_grad=True)

    @rm.checkpoint(policy=policies.save_ops("matmul"))
    def f(x):
        return rm.tanh(x @ w)

    f(rm.tensor(np.ones((1, 2)))).sum().backward()
    assert np.array_equal(w.grad, np.ones((2, 1)) @ (1 - np.tanh(np.ones((1, 2)) * 2.0) ** 2))


def test_forward_mode_through_a_policy_checkpoint_matches_no_checkpointing():
    w = np.random.default_rng(11).standard_normal((3, 3))

    def plain(x):
        return rm.tanh(x @ w) @ w

    kept = rm.checkpoint(plain, policy=policies.save_ops("matmul"))
    x, v = np.random.default_rng(12).standard_normal((2, 2, 3))
    assert np.array_equal(rm.jvp(kept, (x,), (v,))[1], rm.jvp(plain, (x,), (v,))[1])


def test_a_function_calling_rm_grad_inside_is_refused_under_a_policy_and_says_why():
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)

    def penalised(x):  # its first run does not record rm.grad's backward; its recomputation does
        g = rm.grad(lambda x: (rm.tanh(x @ w) ** 2).sum())(x)
        return rm.sin(x) * g

    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    rm.checkpoint(penalised)(x).sum().backward()  # without a policy: fine
    with pytest.raises(NotImplementedError, match="inside a function checkpointed with a policy"):
        rm.checkpoint(penalised, policy=policies.save_ops("matmul"))(x)  # at once, not in backward


def test_a_byte_budget_plans_around_what_the_policy_keeps():
    n, state = 30, 2 * D * 8
    want = loop_grads("loop", n)
    rm.memory.clear_plans()
    plain = rm.Tape(memory=12 * state)
    got = loop_grads("loop", n, plain)
    assert same(got, want)
    kept = rm.Tape(memory=n * state + 12 * state, policy=POLICIES["save_ops(matmul)"])
    assert same(loop_grads("loop", n, kept), want)
    # the policy's n products are held beside the plan, and the budget holds
    assert n * state < kept.stats.peak_bytes <= kept.stats.memory
    assert plain.stats.peak_bytes <= plain.stats.memory
    step = loop_step(make_loop_params(0))
    plans = []
    for policy in (policies.save_ops("matmul"), policies.save_ops("matmul"), None):
        with rm.Tape(memory=n * state + 12 * state, policy=policy) as tape:
            tape.loop(step, rm.tensor(np.ones((2, D)), requires_grad=True), steps=n)
        plans.append(tape.stats.plan)
    assert plans == ["measured", "reused", "measured"]  # an equal policy: the same plan
    with pytest.raises(
        ValueError, match=rf"too small with policy save_ops\('matmul'\): it keeps {n * state} bytes"
    ):
        loop_grads("loop", n, rm.Tape(memory=n * state + state, policy=policies.save_ops("matmul")))


# guards: a policy whose kept values alone exceed the budget said "leaves -1064960 bytes" and
# not the least budget that would work (also when step 0's tape alone was over the budget)
@pytest.mark.parametrize("budget", [5, 2000])
@pytest.mark.parametrize("schedule, snapshots", [(None, None), ("revolve", 3), ("mixed", None)])
def test_a_budget_too_small_for_what_a_policy_keeps_gives_the_least_that_works(
    budget, schedule, snapshots
):
    n, state = 30, 2 * D * 8

    def run(memory):
        rm.memory.clear_plans()
        tape = rm.Tape(
            memory=memory,
            schedule=schedule,
            snapshots=snapshots,
            policy=POLICIES["save_ops(matmul)"],
        )
        return loop_grads("loop", n, tape), tape

    with pytest.raises(ValueError, match=r"it keeps \d+ bytes") as caught:
        run(budget)
    assert "leaves -" not in str(caught.value)
    least = int(
        re.search(r"the least budget that works is memory=(\d+) bytes", str(caught.value))[1]
    )
    assert least > n * state
    grads, tape = run(least)  # it works, and one byte less does not
    assert same(grads, loop_grads("loop", n)) and tape.stats.peak_bytes <= least
    with pytest.raises(ValueError, match=f"memory={least - 1} bytes is too small"):
        run(least - 1)


def test_a_policy_checkpoint_inside_a_loop_step_counts_what_it_keeps():
    w = make_loop_params(3)
    peaks = []
    for policy in (None, policies.save_ops("matmul")):
        block = rm.checkpoint(lambda h: h + rm.tanh(h @ w), policy=policy)
        with rm.Tape(snapshots=2) as tape:
            tape.loop(block, rm.tensor(np.ones((2, D)), requires_grad=True), steps=10)
        peaks.append(tape.stats.peak_bytes)
    assert peaks[1] - peaks[0] == 2 * D * 8  # the taped step's checkpoint keeps one product


def test_forward_mode_through_a_loop_under_a_policy_matches_no_policy():
    w = make_loop_params(4)

    def f(x, policy):
        with rm.Tape(snapshots=2, policy=policy) as tape:
            return tape.loop(loop_step(w), x, steps=7)

    x, v = np.random.default_rng(13).standard_normal((2, 2, D))
    want = rm.jvp(lambda x: f(x, None), (x,), (v,))[1]
    assert np.array_equal(rm.jvp(lambda x: f(x, policies.save_everything), (x,), (v,))[1], want)


def test_a_kept_value_changed_in_place_is_computed_again_not_reused():
    w = rm.tensor(np.eye(2) * 0.5, requires_grad=True)
    f = rm.checkpoint(lambda x: rm.tanh(x @ w), policy=policies.save_everything)
    y = f(rm.tensor(np.ones((1, 2))))
    y.data[0, 0] = 5.0  # y's array is the kept output of tanh: tanh runs again, as without
    with rm.count_ops() as counts:  # a policy (whose gradient is that of the first run)
        y.sum().backward()
    assert counts["tanh"] == 1 and counts["matmul"] == 0
    want = np.ones((2, 1)) @ (1 - np.tanh(np.full((1, 2), 0.5)) ** 2)
    assert np.array_equal(w.grad, want)
    w.grad = None
    z = f(rm.tensor(np.ones((1, 2))))
    np.asarray(z.data).copy()  # handed out, not written: fine
    z.sum().backward()
    assert np.array_equal(w.grad, np.ones((2, 1)) @ (1 - np.tanh(np.full((1, 2), 0.5)) ** 2))


def test_with_no_frame_open_an_op_never_reaches_the_selective_machinery(monkeypatch):
    from remat import selective
    from remat.core import apply as core  # the hook the ops call evaluate through

    def refuse(*args):
        raise AssertionError("evaluate was called")

    monkeypatch.setattr(core, "evaluate", refuse)
    assert selective.OPEN == []
    x = rm.tensor(np.ones((2, 2)), requires_grad=True)
    y = rm.softmax(rm.sin(x) @ x + 1.0).sum()  # make_unary, make_binary, unary and apply
    y.backward()
    with pytest.raises(AssertionError, match="evaluate was called"):
        with rm.count_ops():
            rm.sin(x)
    assert selective.OPEN == []  # the counter closed on the way out


def test_a_parameter_updated_between_forward_and_backward_is_named_as_the_cause():
    w = rm.tensor(np.eye(2) * 0.5, requires_grad=True)
    f = rm.checkpoint(lambda x: rm.tanh(x @ w), policy=policies.save_ops("matmul"))
    y = f(rm.tensor(np.ones((1, 2))))
    with rm.no_grad():
        w -= 0.1  # the kept product was made with the old value
    with pytest.raises(rm.ReplayError, match="op position 0.*given a new value after the forward"):
        y.sum().backward()


BLOCK_OPS = ["matmul", "swapaxes", "multiply", "softmax"]


@settings(max_examples=25, deadline=None)
@given(
    kept=st.sets(st.sampled_from(BLOCK_OPS)),
    named=st.booleans(),
    batch=st.sampled_from([(), (2,)]),
)
def test_any_set_of_kept_ops_skips_exactly_those_and_keeps_the_gradients(kept, named, batch):
    params = attention_params(14)
    x0 = np.random.default_rng(15).standard_normal((*batch, T, D))
    want, _ = attention_grads(attention, x0, params)
    _, everything = attention_grads(rm.checkpoint(attention), x0, params)

    def policy(op_name, value_name):
        return op_name in kept or (named and value_name == "scores")

    got, counts = attention_grads(rm.checkpoint(attention, policy=policy), x0, params)
    assert same(got, want)
    for op in BLOCK_OPS:
        skipped = op in kept or (named and op == "multiply")  # the scores' scaling
        assert counts[op] == (0 if skipped else everything[op])


def test_a_checkpoint_inside_a_stored_step_counts_its_inputs_as_held():
    w = make_loop_params(5)
    peaks = {}
    for kind in ("plain", "checkpointed"):
        f = loop_step(w)
        step = f if kind == "plain" else rm.checkpoint(f)
        with rm.Tape() as tape:  # store-all: every step's tape is held at the end
            tape.loop(step, rm.tensor(np.ones((2, D)), requires_grad=True), steps=10)
        peaks[kind] = tape.stats.peak_bytes
    state = 2 * D * 8
    assert peaks["checkpointed"] == 10 * state  # each step's checkpoint holds its input
    assert peaks["plain"] > peaks["checkpointed"]  # the plain tapes hold more
