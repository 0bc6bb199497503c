"""The everyday API: creation functions, rm.random's draws, argmax/argmin, astype,
__index__, and the optimizers in rm.optim (issue 16, item 5)."""

import doctest

import numpy as np
import pytest

import remat as rm

# --- creation functions -------------------------------------------------------------


@pytest.mark.parametrize(
    "made, expected",
    [
        (lambda: rm.zeros(3), np.zeros(3)),
        (lambda: rm.zeros((2, 3), dtype="float32"), np.zeros((2, 3), dtype=np.float32)),
        (lambda: rm.zeros([2, 1], dtype=int), np.zeros((2, 1), dtype=int)),
        (lambda: rm.ones((2, 2)), np.ones((2, 2))),
        (lambda: rm.ones(0), np.ones(0)),
        (lambda: rm.full((2, 3), 0.5), np.full((2, 3), 0.5)),
        (lambda: rm.full(4, 7), np.full(4, 7)),
        (lambda: rm.full(2, 7, dtype="float32"), np.full(2, 7, dtype=np.float32)),
        (lambda: rm.arange(5), np.arange(5)),
        (lambda: rm.arange(2, 9, 3), np.arange(2, 9, 3)),
        (lambda: rm.arange(0, 1, 0.125), np.arange(0, 1, 0.125)),
        (lambda: rm.arange(4, dtype="float32"), np.arange(4, dtype=np.float32)),
        (lambda: rm.arange(rm.tensor(3)), np.arange(3)),
        (lambda: rm.eye(3), np.eye(3)),
        (lambda: rm.eye(2, 4, k=1), np.eye(2, 4, k=1)),
        (lambda: rm.eye(3, k=-1, dtype=int), np.eye(3, k=-1, dtype=int)),
        (lambda: rm.zeros(rm.tensor(2)), np.zeros(2)),
        (lambda: rm.ones((rm.tensor(2), np.int64(3))), np.ones((2, 3))),
    ],
)
def test_creation_functions_follow_numpy(made, expected):
    t = made()
    assert isinstance(t, rm.Tensor)
    assert t.dtype == expected.dtype and t.shape == expected.shape
    assert np.array_equal(t.numpy(), expected)
    assert not t.requires_grad and t.device == "cpu"


def test_like_functions_take_shape_dtype_and_device_from_their_argument():
    x = rm.tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    for like, value in ((rm.zeros_like, 0), (rm.ones_like, 1)):
        t = like(x)
        assert t.shape == (2, 3) and t.dtype == np.int32 and t.device == "cpu"
        assert (t.numpy() == value).all()
        assert like(x, dtype="float32").dtype == np.float32
        assert like(np.ones((4,), dtype=np.float16)).dtype == np.float16  # arrays
        assert like([[1.0, 2.0]]).shape == (1, 2)  # and lists
    # the result is a new tensor, not linked to x: requires_grad is its own
    w = rm.tensor([1.0, 2.0], requires_grad=True)
    z = rm.zeros_like(w)
    assert not z.requires_grad and z.is_leaf


def test_creation_with_requires_grad_makes_a_leaf_that_trains():
    w = rm.zeros((2, 3), requires_grad=True)
    b = rm.ones(3, requires_grad=True)
    e = rm.eye(3, requires_grad=True)
    f = rm.full((3,), 2.0, requires_grad=True)
    r = rm.arange(0.0, 3.0, requires_grad=True)
    o = rm.ones_like(b, requires_grad=True)
    loss = ((w + b) @ e * f * r * o).sum()
    loss.backward()
    assert all(t.is_leaf and t.requires_grad for t in (w, b, e, f, r, o))
    assert np.array_equal(w.grad, np.tile([0.0, 2.0, 4.0], (2, 1)))
    assert np.array_equal(b.grad, [0.0, 4.0, 8.0])
    assert e.grad.shape == (3, 3) and f.grad.shape == (3,)


@pytest.mark.parametrize(
    "made",
    [
        lambda: rm.zeros(2, dtype=int, requires_grad=True),
        lambda: rm.arange(3, requires_grad=True),  # an integer range
        lambda: rm.full(2, 7, requires_grad=True),
        lambda: rm.ones_like(rm.tensor([1, 2]), requires_grad=True),
    ],
)
def test_requires_grad_needs_a_float_dtype(made):
    with pytest.raises(rm.DTypeError, match="floating-point"):
        made()


def test_creation_refuses_bad_shapes_and_devices():
    with pytest.raises(TypeError, match="rm.zeros: shape must be an int or a tuple of ints"):
        rm.zeros((2.5, 3))
    with pytest.raises(TypeError, match="rm.ones: shape"):
        rm.ones("3")
    with pytest.raises(rm.DeviceError, match="unknown device"):
        rm.zeros(2, device="tpu")
    if not rm.cuda_available():
        with pytest.raises(rm.DeviceError, match="needs CuPy"):
            rm.eye(2, device="cuda")
    with pytest.raises(TypeError, match="broadcast_to"):
        rm.full(3, rm.tensor(1.0, requires_grad=True))
    assert rm.full(2, rm.tensor(1.5)).numpy().tolist() == [1.5, 1.5]


def test_created_arrays_are_fresh():
    a, b = rm.zeros(3), rm.zeros(3)
    assert not np.shares_memory(a.numpy(), b.numpy())
    a.data[0] = 5.0  # writing into one leaves the other alone
    assert b.numpy()[0] == 0.0


# --- rm.random ---------------------------------------------------------------------


def test_shape_and_size_are_the_same_argument():
    rm.random.seed(5)
    by_size = rm.random.normal(size=(2, 3)).numpy().copy()
    rm.random.seed(5)
    by_shape = rm.random.normal(shape=(2, 3)).numpy()
    assert np.array_equal(by_size, by_shape)
    rm.random.seed(5)
    assert np.array_equal(rm.random.normal(0.0, 1.0, (2, 3)).numpy(), by_size)  # positional
    assert rm.random.uniform(shape=4, dtype="float32").dtype == np.float32
    assert rm.random.uniform(-2, -1, shape=(5,)).numpy().max() < -1
    assert rm.random.normal(size=(2,), shape=[2]).shape == (2,)  # the same: accepted
    with pytest.raises(ValueError, match="not both"):
        rm.random.uniform(size=3, shape=4)


def test_draws_match_numpys_generator():
    """rm.random draws from a PCG64 Generator seeded as given: the same numbers as NumPy."""
    rm.random.seed(9)
    got = [
        rm.random.normal(shape=3).numpy(),
        rm.random.uniform(shape=2).numpy(),
        rm.random.randint(10, shape=4).numpy(),
        rm.random.randint(-3, 3, shape=(2, 2), dtype="int32").numpy(),
        rm.random.permutation(6).numpy(),
    ]
    g = np.random.Generator(np.random.PCG64(9))
    want = [
        g.normal(size=3),
        g.uniform(size=2),
        g.integers(10, size=4),
        g.integers(-3, 3, size=(2, 2), dtype=np.int32),
        g.permutation(6),
    ]
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def test_sampled_parameters_can_require_grad():
    w = rm.random.normal(scale=0.1, shape=(3, 2), requires_grad=True)
    u = rm.random.uniform(shape=2, requires_grad=True)
    (w @ u).sum().backward()
    assert w.is_leaf and w.grad.shape == (3, 2) and u.grad.shape == (2,)
    with pytest.raises(rm.DTypeError):
        rm.random.normal(shape=2, dtype="int64", requires_grad=True)


def test_randint_bounds_and_dtypes():
    rm.random.seed(0)
    x = rm.random.randint(3, 7, shape=1000)
    assert x.dtype == np.int64 and x.numpy().min() == 3 and x.numpy().max() == 6
    assert rm.random.randint(2, shape=(3, 4)).numpy().max() <= 1
    assert rm.random.randint(5).shape == ()
    assert rm.random.randint(0, 5, size=2, dtype=np.uint8).dtype == np.uint8
    with pytest.raises(TypeError, match="integer dtype"):
        rm.random.randint(0, 5, dtype="float64")


def test_permutation_of_a_count_and_of_a_tensor():
    rm.random.seed(1)
    p = rm.random.permutation(10)
    assert p.dtype == np.int64 and sorted(p.numpy().tolist()) == list(range(10))
    assert rm.random.permutation(rm.tensor(4)).shape == (4,)  # a 0-d integer tensor counts
    assert rm.random.permutation(0).shape == (0,)
    # a tensor's slices are shuffled along axis, and its gradient follows them back
    x = rm.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    rm.random.seed(2)
    shuffled = rm.random.permutation(x, axis=1)
    rm.random.seed(2)
    order = np.random.Generator(np.random.PCG64(2)).permutation(4)
    assert np.array_equal(shuffled.numpy(), np.arange(12.0).reshape(3, 4)[:, order])
    weights = rm.tensor(np.arange(12.0).reshape(3, 4))
    (shuffled * weights).sum().backward()
    expected = np.empty((3, 4))
    expected[:, order] = np.arange(12.0).reshape(3, 4)
    assert np.array_equal(x.grad, expected)
    assert rm.random.permutation(np.arange(5)).shape == (5,)
    assert rm.random.permutation([[1, 2], [3, 4]]).shape == (2, 2)
    with pytest.raises(ValueError, match=">= 0"):
        rm.random.permutation(-1)
    with pytest.raises(TypeError, match="an int or a Tensor"):
        rm.random.permutation(2.5)
    with pytest.raises(ValueError, match="0-d"):
        rm.random.permutation(np.array(3.0))
    with pytest.raises(rm.ShapeError, match="out of bounds"):
        rm.random.permutation(x, axis=2)


def test_each_thread_draws_randint_and_permutation_from_its_own_generator():
    from concurrent.futures import ThreadPoolExecutor

    def draws(seed):
        rm.random.seed(seed)
        return rm.random.randint(100, shape=5).numpy(), rm.random.permutation(7).numpy()

    rm.random.seed(0)
    mine = rm.random.randint(100, shape=3).numpy()
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(draws, [4, 4])
    rm.random.seed(0)
    assert np.array_equal(rm.random.randint(100, shape=3).numpy(), mine)  # not moved
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def _shuffling_step(w):
    """A step that draws randint and permutation: which rows mix, and by how much."""

    def step(h):
        order = rm.random.permutation(h.shape[0])
        k = rm.random.randint(1, 4)
        h = h[order] + rm.tanh(h @ w) * (0.1 * float(k))
        return rm.random.permutation(h, axis=1) * 0.9

    return step


@pytest.mark.parametrize("schedule", ["revolve", "sqrt", "online"])
def test_loop_drawing_randint_and_permutation_replays_store_all_bit_for_bit(schedule):
    def gradients(tape):
        rm.random.seed(21)
        rng = np.random.default_rng(0)
        w = rm.tensor(rng.standard_normal((5, 5)) * 0.5, requires_grad=True)
        h0 = rm.tensor(rng.standard_normal((4, 5)), requires_grad=True)
        h = tape.loop(_shuffling_step(w), h0 * 1.0, steps=25)
        (h * h).sum().backward()
        after = rm.random.randint(1 << 30, shape=4).numpy()  # the stream goes on alike
        return w.grad, h0.grad, h.numpy(), after

    want = gradients(rm.Tape())
    tape = rm.Tape(snapshots=3, schedule=None if schedule == "revolve" else schedule)
    got = gradients(tape)
    assert tape.stats.recomputed_steps > 0  # steps were evaluated again, drawing again
    for a, b in zip(got, want):
        assert np.array_equal(a, b)


# --- argmax / argmin, astype, __index__ ---------------------------------------------------


def test_argmax_and_argmin_follow_numpy():
    values = np.array([[1.0, 5.0, 5.0], [7.0, -2.0, 7.0]])
    x = rm.tensor(values, requires_grad=True)
    for ours, theirs in ((rm.argmax, np.argmax), (rm.argmin, np.argmin)):
        for kw in ({}, {"axis": 0}, {"axis": 1}, {"axis": -1, "keepdims": True}):
            got = ours(x, **kw)
            want = theirs(values, **kw)
            assert got.dtype == want.dtype and np.array_equal(got.numpy(), want)
            assert not got.requires_grad and got.record is None
    assert int(x.argmax()) == 3 and int(x.argmin(axis=None)) == 4  # methods too, flattened
    assert rm.argmax([3, 9, 2]).item() == 1  # lists and arrays
    with pytest.raises(rm.ShapeError, match="argmax: axis 2 is out of bounds"):
        rm.argmax(x, axis=2)
    with pytest.raises(rm.ShapeError, match="argmin: .*empty"):
        rm.argmin(rm.zeros(0))


def test_argmax_is_not_recorded_and_indexes_the_tensor():
    x = rm.tensor([[0.2, 0.9], [0.8, 0.1]], requires_grad=True)
    with rm.Tape() as tape:
        best = rm.argmax(x, axis=1)
    assert len(tape) == 0
    picked = x[rm.arange(2), best]  # an integer tensor as an index
    picked.sum().backward()
    assert np.array_equal(x.grad, [[0.0, 1.0], [1.0, 0.0]])


def test_argmax_of_a_step_value_outside_its_step_is_refused():
    kept = []

    def step(h):
        kept.append(h * 2.0)
        return h + 1.0

    rm.Tape(snapshots=2).loop(step, rm.tensor([1.0, 2.0], requires_grad=True), steps=3)
    with pytest.raises(rm.EscapeError):
        rm.argmax(kept[0])


def test_astype_is_differentiable_and_gives_the_gradient_in_the_inputs_dtype():
    x = rm.tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    y = x.astype("float64")
    assert y.dtype == np.float64 and y.record is not None
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32 and np.array_equal(x.grad, [2.0, 4.0])
    assert rm.tensor([1.7, -2.2]).astype(int).numpy().tolist() == [1, -2]  # constants: any dtype
    with pytest.raises(TypeError, match="detach"):
        x.astype("int64")
    assert "astype" in rm.OPS


def test_index_takes_zero_d_integer_tensors_only():
    n = rm.tensor(3)
    assert list(range(n)) == [0, 1, 2]
    assert ["a", "b", "c", "d"][rm.tensor(2)] == "c"
    assert [0, 1, 2, 3, 4][rm.tensor(1) : rm.tensor(np.int32(3))] == [1, 2]
    assert np.arange(10)[rm.tensor(4)] == 4
    assert np.arange(10)[rm.tensor([1, 3])].tolist() == [1, 3]  # arrays still index as arrays
    assert rm.tensor([5, 6, 7])[rm.tensor(1)].item() == 6
    assert rm.tensor(7, dtype="uint8").__index__() == 7
    for bad, why in (
        (rm.tensor(2.0), "dtype float64"),
        (rm.tensor([1, 2]), r"shape \(2,\)"),
        (rm.tensor(True), "dtype bool"),
    ):
        with pytest.raises(TypeError, match=f"only a 0-d integer tensor.*{why}"):
            [1, 2, 3][bad]
    assert int(rm.tensor(2.9)) == 2  # __int__ still converts (truncating) one element


# --- rm.optim ---------------------------------------------------------------------------


def _quadratic_grads(params, targets):
    loss = sum(((p - t) * (p - t)).sum() for p, t in zip(params, targets))
    loss.backward()


def _tree(dtype="float64"):
    rng = np.random.default_rng(4)
    a = rm.tensor(rng.standard_normal((3, 2)).astype(dtype), requires_grad=True)
    b = rm.tensor(rng.standard_normal(4).astype(dtype), requires_grad=True)
    c = rm.tensor(rng.standard_normal(()).astype(dtype), requires_grad=True)
    return {"layer": [a, (b, "static tag")], "scale": c}, [a, b, c]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_sgd_matches_hand_written_numpy_bit_for_bit(dtype, momentum):
    tree, params = _tree(dtype)
    targets = [np.full(p.shape, 0.25, dtype=dtype) for p in params]
    opt = rm.optim.SGD(tree, lr=0.05, momentum=momentum)
    ref = [p.numpy().copy() for p in params]
    buffers = [None] * 3
    for _ in range(6):
        opt.zero_grad()
        _quadratic_grads(params, targets)
        grads = [p.grad.copy() for p in params]
        opt.step()
        for k, g in enumerate(grads):
            if momentum:
                buffers[k] = g.copy() if buffers[k] is None else momentum * buffers[k] + g
                ref[k] = ref[k] - 0.05 * buffers[k]
            else:
                ref[k] = ref[k] - 0.05 * g
    for p, r in zip(params, ref):
        assert p.dtype == np.dtype(dtype) and p.is_leaf and p.requires_grad
        assert np.array_equal(p.numpy(), r)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_adam_matches_hand_written_numpy_bit_for_bit(dtype):
    tree, params = _tree(dtype)
    targets = [np.full(p.shape, -0.5, dtype=dtype) for p in params]
    lr, (b1, b2), eps = 0.01, (0.8, 0.99), 1e-6
    opt = rm.optim.Adam(tree, lr=lr, betas=(b1, b2), eps=eps)
    ref = [p.numpy().copy() for p in params]
    m = [np.zeros_like(r) for r in ref]
    v = [np.zeros_like(r) for r in ref]
    for t in range(1, 8):
        opt.zero_grad()
        _quadratic_grads(params, targets)
        grads = [p.grad.copy() for p in params]
        opt.step()
        for k, g in enumerate(grads):
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * (g * g)
            m_hat, v_hat = m[k] / (1 - b1**t), v[k] / (1 - b2**t)
            ref[k] = ref[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
    for p, r in zip(params, ref):
        assert p.dtype == np.dtype(dtype)
        assert np.array_equal(p.numpy(), r)


def test_adam_agrees_with_pytorchs_formulation():
    """PyTorch divides by sqrt(1 - b2^t) after the square root: the same update to rounding."""
    p = rm.tensor([0.5, -1.5, 3.0], requires_grad=True)
    opt = rm.optim.Adam([p], lr=0.1)
    x, m, v = np.array([0.5, -1.5, 3.0]), np.zeros(3), np.zeros(3)
    for t in range(1, 20):
        opt.zero_grad()
        (p * p * p).sum().backward()
        opt.step()
        g = 3 * x * x
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        denom = np.sqrt(v) / np.sqrt(1 - 0.999**t) + 1e-8
        x = x - (0.1 / (1 - 0.9**t)) * m / denom
    assert np.allclose(p.numpy(), x, rtol=1e-12, atol=1e-14)


def test_step_skips_parameters_without_a_gradient_and_their_state_waits():
    a = rm.tensor([1.0, 2.0], requires_grad=True)
    b = rm.tensor([3.0], requires_grad=True)
    opt = rm.optim.Adam([a, b], lr=0.1)
    (a * a).sum().backward()  # b gets no gradient
    opt.step()
    assert b.numpy().tolist() == [3.0] and b.grad is None
    assert not np.array_equal(a.numpy(), [1.0, 2.0])
    opt.zero_grad()
    assert a.grad is None
    (b * b).sum().backward()
    opt.step()  # b's first step: bias correction with t = 1, a moves by about lr
    assert np.isclose(b.numpy()[0], 2.9, rtol=1e-9)


def test_step_leaves_the_old_array_for_a_pending_backward():
    w = rm.tensor([1.0, 2.0, 3.0], requires_grad=True)
    opt = rm.optim.SGD([w], lr=0.5, momentum=0.9)
    old = w.data  # handed out: the write guard watches it
    before = old.copy()
    pending = (w * w).sum()  # saves w's current array for its backward
    (w * 3.0).sum().backward()
    opt.step()
    assert w.data is not old and np.array_equal(old, before)  # rebound, never written
    assert np.array_equal(w.numpy(), before - 0.5 * 3.0)
    w.grad = None
    pending.backward()  # the gradient of the value it saw: 2 * before
    assert np.array_equal(w.grad, 2 * before)


def test_optimizer_trains_inside_a_checkpointed_loop():
    rng = np.random.default_rng(3)
    w = rm.tensor(rng.standard_normal((4, 4)) * 0.3, requires_grad=True)
    h0 = rm.tensor(rng.standard_normal((2, 4)))
    opt = rm.optim.SGD({"w": w}, lr=0.05, momentum=0.5)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        tape = rm.Tape(snapshots=2)
        h = tape.loop(lambda h: rm.tanh(h @ w), h0, steps=6)
        loss = ((h - 0.5) * (h - 0.5)).sum()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_optimizer_arguments_are_checked():
    p = rm.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="holds no Tensor"):
        rm.optim.SGD({"a": 1.0}, lr=0.1)
    with pytest.raises(ValueError, match="does not require grad"):
        rm.optim.SGD([rm.tensor([1.0])], lr=0.1)
    with pytest.raises(ValueError, match="output of an op"):
        rm.optim.Adam([p * 2.0])
    with pytest.raises(ValueError, match="lr must be a number > 0"):
        rm.optim.SGD([p], lr=0)
    with pytest.raises(ValueError, match="momentum"):
        rm.optim.SGD([p], lr=0.1, momentum=-0.1)
    with pytest.raises(ValueError, match="betas"):
        rm.optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="betas must be a pair"):
        rm.optim.Adam([p], betas=0.9)
    opt = rm.optim.SGD([p, [p]], lr=0.1)  # a tensor named twice is updated once
    assert len(opt.params) == 1
    (p * 1.0).sum().backward()
    opt.step()
    assert p.numpy().tolist() == [0.9]


# --- the docstring examples run ------------------------------------------------------------


@pytest.mark.parametrize(
    "module", [rm.creation, rm.random, rm.optim, rm.ops.reduce], ids=lambda m: m.__name__
)
def test_docstring_examples(module):
    result = doctest.testmod(module)  # as docs/check_examples.py runs them: self-contained
    assert result.attempted > 0 and result.failed == 0
