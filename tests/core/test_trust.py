"""No silent wrong gradient: each class of input that once gave one, generated where possible.

Threads and contexts, in-place writes through every handle, operands kept by
reference, containers of Tensors, dtypes, numerics at the edges, duplicate
argnums, values escaping a loop step, and reference cycles.
"""

import contextvars
import gc
import threading
import warnings
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from tests.ops.cases import CASES, weighted
from tests.strategies import program_loss, programs

rng = np.random.default_rng(0)


def run_in_threads(functions):
    """Run each function in its own thread, all at once; return their results in order."""
    results, errors = [None] * len(functions), []
    start = threading.Barrier(len(functions))

    def work(k, f):
        try:
            start.wait()
            results[k] = f()
        except BaseException as error:  # reported below, in the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k, f)) for k, f in enumerate(functions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# --- 1. recording state is per thread and per context ---------------------------------


def test_no_grad_in_one_thread_does_not_stop_recording_in_another():
    inside, done = threading.Event(), threading.Event()

    def idle_in_no_grad():
        with rm.no_grad():
            inside.set()
            done.wait(5)
        return rm.grad_enabled()

    def record():
        inside.wait(5)
        x = rm.tensor([1.0, 2.0], requires_grad=True)
        y = (x * x).sum()
        done.set()
        y.backward()
        return x.grad

    still_off, grad = run_in_threads([idle_in_no_grad, record])
    assert still_off is True  # its own no_grad ended; the other thread never turned it off
    assert np.array_equal(grad, [2.0, 4.0])


def test_an_open_tape_and_rm_grad_depth_are_per_thread():
    inside, done = threading.Event(), threading.Event()

    def hold_a_tape_and_a_grad():
        with rm.Tape() as tape:

            def f(x):
                inside.set()
                done.wait(5)
                return (x * x).sum()

            rm.grad(f)(np.ones(2))
        return tape

    def elsewhere():
        inside.wait(5)
        g = rm.grad(lambda x: (x * 3.0).sum())(np.ones(2))  # not nested: gives arrays
        rm.sin(rm.tensor([1.0], requires_grad=True))  # must not land on the other's tape
        done.set()
        return g

    tape, g = run_in_threads([hold_a_tape_and_a_grad, elsewhere])
    assert type(g) is np.ndarray and np.array_equal(g, [3.0, 3.0])
    assert [r.op.name for r in tape.records] == ["multiply", "sum"]


def test_a_context_keeps_the_grad_mode_it_was_copied_with():
    context = contextvars.copy_context()  # taken while recording is on
    with rm.no_grad():
        assert context.run(rm.grad_enabled) is True
        assert rm.grad_enabled() is False


def test_each_thread_has_its_own_random_stream():
    rm.random.seed(3)
    want = rm.random.normal(size=4).numpy()

    def draw(seed):
        rm.random.seed(seed)
        return [rm.random.normal(size=4).numpy() for _ in range(50)]

    rm.random.seed(3)
    a, b = run_in_threads([lambda: draw(1), lambda: draw(2)])
    assert np.array_equal(rm.random.normal(size=4).numpy(), want)  # main stream untouched
    rm.random.seed(1)
    assert all(np.array_equal(x, rm.random.normal(size=4).numpy()) for x in a)


def noisy_loop_gradients(schedule, snapshots, seed, n=23):
    r = np.random.default_rng(seed)
    w = rm.tensor(r.standard_normal((5, 5)) * 0.4, requires_grad=True)
    h0 = rm.tensor(r.standard_normal((2, 5)), requires_grad=True)
    rm.random.seed(seed)

    def step(h):
        noise = rm.random.uniform(size=h.shape)
        return h + 0.5 * rm.tanh(h @ w) * noise

    tape = rm.Tape() if schedule == "store_all" else rm.Tape(snapshots=snapshots, schedule=schedule)
    h = tape.loop(step, h0 * 1.0, steps=n)
    (h * h).sum().backward()
    return w.grad, h0.grad


def test_four_threads_running_loops_each_get_the_single_threaded_gradients():
    jobs = [("revolve", 3, 0), ("periodic", 4, 1), ("sqrt", None, 2), ("revolve", 2, 3)]
    want = [noisy_loop_gradients("store_all", None, seed) for _, _, seed in jobs]
    got = run_in_threads([lambda j=j: noisy_loop_gradients(*j) for j in jobs])
    for g, w in zip(got, want):
        assert all(np.array_equal(a, b) for a, b in zip(g, w))


# --- 2. in-place writes: the update idioms work, a pending value is never silently changed ---

WRITES = {
    "data": lambda t: t.data.__setitem__(0, 5.0),
    "view of data": lambda t: t.data.reshape(-1).__setitem__(0, 5.0),
    "slice of data": lambda t: t.data[:1].__iadd__(1.0),
    "out=": lambda t: np.add(t.data, 1.0, out=t.data),
}
SAVERS = {  # the value x, and something that saves it (or a view of it) for backward
    "op input": lambda x: rm.sin(x),
    "view made after": lambda x: rm.sin(x.reshape(3)),
    "transpose view": lambda x: x @ x.T,
}


@pytest.mark.parametrize("saver", sorted(SAVERS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_to_a_saved_value_is_refused_at_backward(write, saver):
    x = rm.tensor(np.array([[0.1, 0.2, 0.3]]), requires_grad=True)
    y = SAVERS[saver](x).sum()
    WRITES[write](x)
    with pytest.raises(rm.BackwardError, match="changed in place after it was saved"):
        y.backward()


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_through_a_view_made_before_the_save_is_refused(write):
    x = rm.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    r = x.reshape(3)  # the example: the view exists before anything is saved
    y = (x * x).sum()
    WRITES[write](r)
    with pytest.raises(rm.BackwardError, match="`multiply`"):
        y.backward()


@pytest.mark.parametrize("read", [np.asarray, lambda t: t.numpy(), np.array])
def test_reading_through_numpy_gives_a_read_only_view_or_a_copy(read):
    x = rm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = rm.sin(x).sum()
    watched = len(rm.guard.WATCHED)
    value = read(x)
    assert len(rm.guard.WATCHED) == watched  # reading is free: nothing to watch
    if value.flags.writeable:  # np.array copies
        value[0] = 9.0
    else:
        with pytest.raises(ValueError, match="read-only"):
            value[0] = 9.0
    y.backward()
    assert np.array_equal(x.grad, np.cos([1.0, 2.0]))


def test_a_raw_handle_taken_before_the_save_is_still_watched():
    x = rm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    handle = x.data[:]  # a view the tape never sees
    y = rm.exp(x * 1.0).sum() + (x * x).sum()
    handle[1] = -4.0
    with pytest.raises(rm.BackwardError, match="`multiply`"):
        y.backward()


def test_writes_before_the_save_and_after_backward_are_fine():
    x = rm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    x.data[0] = 3.0  # nothing saved yet
    (x * x).sum().backward()
    assert np.array_equal(x.grad, [6.0, 4.0])
    x.data[0] = 1.0  # nothing pending any more
    x.grad = None
    (x * x).sum().backward()
    assert np.array_equal(x.grad, [2.0, 4.0])


def test_the_saved_arrays_need_no_read_only_flag():
    # CuPy has no such flag: the guard is the same on both devices, and here
    # the CPU path stands in for it.
    x = rm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = rm.sin(x).sum()
    assert x.data.flags.writeable
    x.data[1] = 0.0
    with pytest.raises(rm.BackwardError, match="`sin`"):
        y.backward()


def sgd_by_data(p, lr):
    p.data -= lr * p.grad


def sgd_no_grad(p, lr):
    with rm.no_grad():
        p -= lr * p.grad


def sgd_rebind(p, lr):
    p.data = p.data - lr * p.grad


@pytest.mark.parametrize("update", [sgd_by_data, sgd_no_grad, sgd_rebind])
def test_the_standard_updates_work_for_every_parameter(update):
    w0, b0, x0 = rng.standard_normal((3, 3)), rng.standard_normal(3), rng.standard_normal((4, 3))
    w, b = rm.tensor(w0, requires_grad=True), rm.tensor(b0, requires_grad=True)
    x = rm.tensor(x0)
    ws, bs = w0.copy(), b0.copy()
    for _ in range(3):
        loss = (rm.tanh(x @ w + b) ** 2).sum()
        loss.backward()
        t = np.tanh(x0 @ ws + bs)
        dpre = 2 * t * (1 - t * t)
        ws, bs = ws - 0.1 * x0.T @ dpre, bs - 0.1 * dpre.sum(0)
        for p in (w, b):
            update(p, 0.1)
            p.grad = None
    assert w.is_leaf and w.requires_grad and w.dtype == np.float64
    np.testing.assert_allclose(w.data, ws, rtol=1e-12)
    np.testing.assert_allclose(b.data, bs, rtol=1e-12)


def test_an_in_place_operator_never_changes_a_pending_value():
    x = rm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = (x * x).sum()
    with rm.no_grad():
        x -= 1.0  # x gets a new value; the multiply keeps the one it saw
    y.backward()
    assert np.array_equal(x.grad, [2.0, 4.0])
    assert np.array_equal(x.data, [0.0, 1.0]) and x.is_leaf


def test_in_place_operators_on_leaves_and_non_leaves():
    x = rm.tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad.*no_grad"):
        x += 1.0
    h = x * 2.0
    h += x  # recorded, as h = h + x
    h *= x
    h.sum().backward()
    assert np.array_equal(x.grad, 6.0 * np.array([1.0, 2.0]))
    w = rm.tensor(np.ones(2, dtype=np.float32), requires_grad=True)
    with rm.no_grad():
        w -= np.ones(2) * 0.5  # float64 operand: w keeps its dtype
    assert w.dtype == np.float32 and np.array_equal(w.data, [0.5, 0.5])
    with pytest.raises(ValueError, match="cannot change the shape"), rm.no_grad():
        w += np.ones((3, 2))


def test_a_step_writing_into_its_input_state_is_refused():
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)

    def step(h):
        h.data[...] *= 1.5  # a write into the state the executor snapshotted
        return rm.tanh(h @ w)

    h = rm.Tape(snapshots=2).loop(step, rm.tensor(np.ones((1, 3))), steps=6)
    with pytest.raises(rm.LoopError, match="changed in place"):
        h.sum().backward()


def test_data_assignment_keeps_shape_and_dtype_of_a_parameter():
    p = rm.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(ValueError, match="shape \\(3,\\) dtype float64"):
        p.data = np.ones(4)
    new = np.zeros(3)
    p.data = new
    y = (p * p).sum()
    new[0] = 1.0  # the caller kept a handle: watched like any other
    with pytest.raises(rm.BackwardError, match="changed in place"):
        y.backward()


# --- 3. operands are never kept by reference ----------------------------------------------


def test_constant_operands_are_copied():
    x0 = np.array([0.2, 0.6, 1.4])
    lo, cond, index, shape = (
        np.array([0.5]),
        np.array([True, False, True]),
        np.array([2, 0]),
        np.array([3, 1]),
    )
    x = rm.tensor(x0, requires_grad=True)
    outs = [
        rm.clip(x, lo, None),
        rm.where(cond, x, 0.0),
        x[index] * x[index],
        rm.reshape(x, shape),
        rm.ops.scatter_add((4,), index, x[:2]),
    ]
    lo[0], cond[:], index[:], shape[:] = -9.0, False, 1, 9
    sum(o.sum() for o in outs).backward()
    want = (x0 >= 0.5) + np.array([1.0, 0, 1]) + 2 * x0 * np.array([1, 0, 1]) + 1 + [1, 1, 0]
    np.testing.assert_allclose(x.grad, want, rtol=1e-15)


def test_a_tensor_bound_that_requires_grad_gets_its_gradient():
    def f(x, lo, hi):
        return (rm.clip(x, lo, hi) * np.arange(1.0, 5.0)).sum()

    assert rm.gradcheck(f, np.array([-1.0, 0.1, 0.4, 2.0]), np.array(0.0), np.array([0.3]))


def test_random_parameters_that_require_grad_are_refused():
    mu = rm.tensor(0.5, requires_grad=True)
    with pytest.raises(TypeError, match="loc is a Tensor that requires grad"):
        rm.random.normal(loc=mu, size=3)
    assert rm.random.uniform(low=rm.tensor(1.0), high=2.0, size=3).numpy().min() >= 1.0


BINARY_OPS = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum"]
OPERAND_KINDS = {
    "Tensor": lambda v: rm.tensor(v),
    "ndarray": lambda v: np.array(v),
    "list": lambda v: list(v),
    "numpy scalar": lambda v: np.float64(v[0]),
    "Python scalar": lambda v: float(v[0]),
}


@pytest.mark.parametrize("kind", sorted(OPERAND_KINDS))
@pytest.mark.parametrize("name", BINARY_OPS)
def test_every_binary_op_takes_every_operand_kind(name, kind):
    fn = getattr(rm, name)
    x0, c0 = np.array([0.7, 1.3]), np.array([1.1, 1.1])

    def grads(constant):
        x = rm.tensor(x0, requires_grad=True)
        (fn(x, constant) + fn(constant, x)).sum().backward()
        return x.grad

    want = grads(rm.tensor(c0))
    assert np.allclose(grads(OPERAND_KINDS[kind](c0)), want, rtol=1e-15, atol=0)


# --- 4. Python containers of Tensors ----------------------------------------------------------


def test_containers_of_tensors_are_stacked_as_operands():
    a, b = rm.tensor(2.0, requires_grad=True), rm.tensor(3.0, requires_grad=True)
    x = rm.tensor([1.0, 5.0], requires_grad=True)
    (x * [a, a]).sum().backward()
    assert a.grad == 6.0
    rm.concatenate([x, [b]]).sum().backward()
    assert b.grad == 1.0
    (rm.where([True, False], [[a, b]], x) * 2.0).sum().backward()
    assert a.grad == 8.0 and b.grad == 1.0


def test_rm_tensor_of_tensors_is_refused_not_detached():
    a = rm.tensor(2.0, requires_grad=True)
    for make in (lambda: rm.tensor([a, a]), lambda: rm.Tensor([[a], [1.0]])):
        with pytest.raises(TypeError, match="rm.stack"):
            make()
    assert np.array_equal(rm.tensor([a.detach(), 1.0]).numpy(), [2.0, 1.0])


# --- 5. gradient dtypes follow the leaf --------------------------------------------------------


@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_a_float32_leaf_gets_a_float32_gradient(name):
    fn, inputs = CASES[name]
    f = weighted(fn)  # float64 weights: every output is combined with float64
    xs = [rm.tensor(x.astype(np.float32), requires_grad=True) for x in inputs]
    f(*xs).backward()
    grads = rm.grad(f, argnums=tuple(range(len(xs))))(*[x.astype(np.float32) for x in inputs])
    for x, g in zip(xs, grads):
        assert x.grad.dtype == np.float32 and g.dtype == np.float32


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_and_min_do_not_upcast(name):
    x = np.array([[1.0, 3.0, 3.0]], dtype=np.float32)
    ans = getattr(np, name)(x, axis=1)
    g = np.ones(1, dtype=np.float32)
    vjp = rm.OPS[name].vjps[0]
    out = vjp(rm.backend.ARRAY_NAMESPACE, g, ans, x, axis=1, keepdims=False, shape=x.shape)
    assert out.dtype == np.float32


def test_a_complex_gradient_for_a_real_leaf_is_refused():
    x = rm.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(rm.BackwardError, match="complex"):
        (x * (1 + 2j)).sum().backward()


def leaf_backward(f, grad=None):
    x = rm.tensor([1.0, 2.0], requires_grad=True)
    f(x).backward(grad)
    return x.grad


def optimizer_step(kind):
    p = rm.tensor([1.0, 2.0], requires_grad=True)
    p.grad = np.array([1j, 1.0])
    kind([p], lr=0.1).step()


def in_place(t, update):
    update(t)
    return t


def in_place_under_no_grad(t, update):
    with rm.no_grad():
        update(t)


REAL = np.array([1.0, 2.0])
IMAGINARY = np.array([1j, 1.0])
ROTATE = 1.0 + 1.0j


def add_complex(t):
    t += IMAGINARY


def multiply_complex(t):
    t *= 1j


def add_a_fraction(t):
    t += 0.5


# each entry point that cast a complex value to real (dropping its imaginary part with at most
# a ComplexWarning) or carried it as a constant (a zero gradient or tangent), or refused without
# naming its shape
COMPLEX_ENTRY_POINTS = {
    "backward's grad": lambda: leaf_backward(lambda x: x * 3.0, IMAGINARY),
    "backward's grad, a Tensor": lambda: leaf_backward(lambda x: x * 3.0, rm.tensor(IMAGINARY)),
    "rm.jvp's tangent": lambda: rm.jvp(lambda x: x * 2.0, (REAL,), (IMAGINARY,)),
    "rm.jvp's tangent of a primal that requires grad": lambda: rm.jvp(
        lambda x: x * 2.0, (rm.tensor(REAL, requires_grad=True),), (IMAGINARY,)
    ),
    "rm.hvp's tangent": lambda: rm.hvp(lambda x: (x * x).sum(), (REAL,), (IMAGINARY,)),
    "rm.jvp's output tangent": lambda: rm.jvp(lambda x: rm.abs(x * ROTATE), (REAL,), (REAL,)),
    "rm.jvp's output tangent, through a loop": lambda: rm.jvp(
        lambda x: rm.Tape(snapshots=2).loop(lambda h: rm.abs(h * ROTATE), x, steps=3),
        (REAL,),
        (REAL,),
    ),
    "rm.jvp's output tangent, inside rm.grad": lambda: rm.grad(
        lambda x: rm.jvp(lambda u: rm.abs(u * ROTATE), (x,), (REAL,))[1].sum()
    )(REAL),
    "rm.grad of rm.grad": lambda: rm.grad(
        lambda x: rm.grad(lambda u: rm.abs(u * ROTATE).sum())(x).sum()
    )(REAL),
    "gradcheck's input": lambda: rm.gradcheck(lambda x: (x * x).sum(), IMAGINARY),
    "SGD's .grad": lambda: optimizer_step(rm.optim.SGD),
    "Adam's .grad": lambda: optimizer_step(rm.optim.Adam),
    "t += complex": lambda: in_place(rm.tensor(REAL), add_complex),
    "t *= 1j": lambda: in_place(rm.tensor(REAL), multiply_complex),
    "p += complex under no_grad": lambda: in_place_under_no_grad(
        rm.tensor(REAL, requires_grad=True), add_complex
    ),
    "int t += 0.5": lambda: in_place(rm.tensor([1, 2]), add_a_fraction),
    "rm.tensor(requires_grad=True)": lambda: rm.tensor(IMAGINARY, requires_grad=True),
    "rm.zeros(requires_grad=True)": lambda: rm.zeros(2, dtype=complex, requires_grad=True),
    "t.requires_grad = True": lambda: setattr(rm.tensor(IMAGINARY), "requires_grad", True),
    "rm.grad's argument": lambda: rm.grad(lambda x: (x * x).sum())(IMAGINARY),
    "rm.jvp's primal": lambda: rm.jvp(lambda x: x * 2.0, (IMAGINARY,), (REAL,)),
    "tape.loop's initial state": lambda: rm.Tape(snapshots=2).loop(
        lambda h: h * 2.0, rm.tensor(IMAGINARY), steps=3
    ),
    "a chain's state, under rm.jvp": lambda: rm.jvp(
        lambda x: rm.Tape(snapshots=2).chain([lambda h: h * ROTATE, rm.abs], x), (REAL,), (REAL,)
    ),
    "a scan's ys": lambda: leaf_backward(
        lambda x: rm.abs(
            rm.Tape(snapshots=2).scan(lambda c, xi: (c * xi, c * ROTATE), x, rm.ones((3, 2)))[1]
        ).sum()
    ),
    "rm.checkpoint's result": lambda: leaf_backward(
        lambda x: rm.abs(rm.checkpoint(lambda h: h * ROTATE)(x)).sum()
    ),
    "rm.checkpoint's argument": lambda: leaf_backward(
        lambda x: rm.checkpoint(lambda h: rm.abs(h * h))(x * ROTATE).sum()
    ),
}


# a complex value for a real one is refused at once, naming where, its dtype and its shape
@pytest.mark.parametrize("entry", sorted(COMPLEX_ENTRY_POINTS))
def test_a_complex_value_is_never_cast_to_real_silently(entry):
    dtype = "float64" if entry.startswith("int") else "complex128"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's ComplexWarning is no refusal
        with pytest.raises(
            (rm.DTypeError, rm.BackwardError), match=rf"(?s)(?=.*{dtype})(?=.*\(2,\))"
        ):
            COMPLEX_ENTRY_POINTS[entry]()


# complex values the user keeps as constants, where nothing is cast, stay allowed
def test_complex_constants_stay_allowed():
    c = rm.tensor(IMAGINARY)
    assert (rm.sin(c) * 2.0).dtype == np.complex128
    t = rm.tensor(REAL)
    t.data = IMAGINARY  # a constant takes the new dtype: nothing is dropped
    assert t.dtype == np.complex128
    x = rm.tensor(REAL, requires_grad=True)
    rm.checkpoint(lambda h, c: h * rm.abs(c))(x, c).sum().backward()
    np.testing.assert_allclose(x.grad, [1.0, 1.0])


# --- 6. numerics at the edges --------------------------------------------------------------------


def test_power_at_zero_has_pytorchs_finite_gradients():
    x = rm.tensor([0.0, 0.0, 0.0, 2.0], requires_grad=True)
    p = rm.tensor([2.0, 1.0, 0.0, 0.0], requires_grad=True)
    (x**p).sum().backward()
    assert np.array_equal(x.grad, [0.0, 1.0, 0.0, 0.0])  # torch: 0, 1, 0, 0
    assert np.array_equal(p.grad, [0.0, 0.0, 0.0, np.log(2.0)])  # torch: 0, 0, 0, log 2
    y = rm.tensor([1.0, 2.0, 0.0], requires_grad=True)
    (0.0**y).sum().backward()
    assert np.array_equal(y.grad, [0.0, 0.0, 0.0])
    assert rm.gradcheck(lambda y: (2.0**y).sum(), np.array([0.5, -1.0]))


@pytest.mark.parametrize("fn", [rm.softmax, rm.log_softmax])
def test_normalised_exponentials_over_an_empty_axis_are_empty(fn):
    x = rm.tensor(np.ones((3, 0)), requires_grad=True)
    out = fn(x, axis=-1)
    assert out.shape == (3, 0)
    out.sum().backward()
    assert x.grad.shape == (3, 0)
    assert np.array_equal(rm.logsumexp(rm.tensor(np.ones((3, 0))), axis=1).numpy(), [-np.inf] * 3)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: rm.sin(rm.tensor(np.array(["a"]))), TypeError, "sin"),
        (lambda: rm.exp(rm.tensor(np.array([None]))), TypeError, "dtype object"),
        (lambda: rm.sum(rm.tensor(np.ones(3)), axis=2), ValueError, "sum.*shape \\(3,\\)"),
        (lambda: rm.softmax(rm.tensor(np.ones(3)), axis=1), ValueError, "softmax: axis 1"),
        (lambda: rm.tensor(np.ones(3)) + "x", TypeError, "add"),
    ],
)
def test_every_op_names_itself_in_numpys_errors(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_einsum_with_a_broadcast_size_1_axis():
    def f(a, w):
        return (rm.einsum("a,ah->h", a, w) * np.array([1.0, -2.0])).sum()

    assert rm.gradcheck(f, np.array([0.7]), rng.standard_normal((3, 2)))
    assert rm.gradcheck(f, np.array([0.7, 0.1, -0.3]), rng.standard_normal((1, 2)))


# --- 7. rm.grad's argnums -----------------------------------------------------------------------


@pytest.mark.parametrize("argnums", [(0, 0), (0, -2), (1, -1, 0)])
def test_duplicate_argnums_are_refused(argnums):
    with pytest.raises(ValueError, match="more than once"):
        rm.grad(lambda x, y: (x * y).sum(), argnums=argnums)(np.ones(2), np.ones(2))


# --- 8. values escaping a loop step ------------------------------------------------------------


def escaping_loop(schedule, kept):
    w = rm.tensor(np.eye(3) * 0.5, requires_grad=True)

    def step(h):
        out = rm.tanh(h @ w)
        kept.append(out)
        return out

    tape = rm.Tape() if schedule == "store_all" else rm.Tape(snapshots=2, schedule=schedule)
    h0 = rm.tensor(np.ones((1, 3)), requires_grad=True)
    return tape.loop(step, h0, steps=6)


@pytest.mark.parametrize("schedule", ["store_all", "sqrt", "periodic", "revolve", "online"])
def test_a_value_escaping_a_step_is_refused(schedule):
    kept = []
    h = escaping_loop(schedule, kept)
    with pytest.raises(rm.EscapeError, match="Return it .*as part of the state"):
        loss = h.sum() + sum(k.sum() for k in kept)
        loss.backward()


def test_escaped_values_may_be_read_without_gradients():
    kept = []
    h = escaping_loop("revolve", kept)
    with rm.no_grad():
        total = sum(k.sum() for k in kept)
    logged = [float(k.detach().sum()) for k in kept] + list(kept[0].numpy().ravel())
    (h.sum() + total).backward()  # total is a constant: fine
    assert len(logged) == 6 + 3  # six steps ran forward, then three values
    with pytest.raises(rm.EscapeError, match="detach"):
        kept[0].sum()  # an op in grad mode: would the caller want its gradient?


def test_a_value_carried_between_steps_on_the_side_is_refused():
    w = rm.tensor(np.eye(2) * 0.5, requires_grad=True)
    previous = []

    def step(h):
        out = rm.tanh(h @ w) + (previous[-1] if previous else 0.0)
        previous.append(out * 0.1)
        return out

    with pytest.raises(rm.EscapeError):
        h = rm.Tape().loop(step, rm.tensor(np.ones((1, 2)), requires_grad=True), steps=4)
        h.sum().backward()


# --- 9. no reference cycle holds memory -------------------------------------------------------


def test_loops_release_their_memory_without_the_cyclic_collector():
    w = rm.tensor(np.eye(4) * 0.5, requires_grad=True)
    gc.collect()
    gc.disable()
    try:
        for reverse in (False, True):
            h0 = rm.tensor(np.ones((2, 4)))
            h = rm.Tape(snapshots=3).loop(lambda h: rm.tanh(h @ w), h0, steps=20)
            run = weakref.ref(h.record.parents[0].args[0])
            snapshot = weakref.ref(h0.data)  # x_0's snapshot is h0's array
            if reverse:
                h.sum().backward()
            del h, h0
            assert run() is None and snapshot() is None
    finally:
        gc.enable()


def test_training_iterations_release_everything_without_the_cyclic_collector():
    w = rm.tensor(np.eye(4) * 0.5, requires_grad=True)
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        for _ in range(20):
            with rm.Tape(snapshots=2) as tape:
                h = tape.loop(lambda h: rm.tanh(h @ w), rm.tensor(np.ones((2, 4))), steps=10)
                loss = (h * h).sum()
            loss.backward()
            with rm.no_grad():
                w -= 0.01 * w.grad
            w.grad = None
        del tape, h, loss
        assert len(gc.get_objects()) - before < 50  # nothing grows per iteration
    finally:
        gc.enable()


def cycles_left_by(run):
    """The objects that ``run()`` leaves in reference cycles, run with the cyclic
    collector off (after one call that fills the plan caches): [] when reference
    counting alone freed everything it made, and with it every array.  Only the
    youngest generation is searched: with the collector off, it holds what run made."""
    run()
    gc.disable()
    gc.collect(0)  # what came before is older from now on
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect(0)
        left = list(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    return left


def describe(left):
    """The types in ``left`` and the bytes of the arrays they hold (arrays themselves
    are not tracked by the collector: they hang off the objects in the cycle)."""
    kinds = sorted({type(o).__name__ for o in left})
    held = {id(a): a for o in left for a in gc.get_referents(o) if isinstance(a, np.ndarray)}
    nbytes = sum(a.nbytes for a in held.values())
    return f"{len(left)} objects in cycles ({', '.join(kinds)}) holding {nbytes} array bytes"


def cycle_step(h):
    return rm.tanh(h * 0.9)


def a_loop(x, **tape):
    with rm.Tape(**tape) as t:
        h = t.loop(cycle_step, x, steps=6)
    return (h * h).sum()


def a_chain(x):
    with rm.Tape(snapshots=2) as t:
        h = t.chain([cycle_step, rm.sin, cycle_step, rm.cos, cycle_step], x)
    return (h * h).sum()


def a_scan(x):
    with rm.Tape(memory="2 KiB") as t:
        h, ys = t.scan(lambda c, xi: (rm.tanh(c * xi), c * 1.0), x, rm.tensor(np.ones((5, 8))))
    return (h * ys).sum()


def a_reversible_loop(x):
    with rm.Tape(snapshots=2) as t:
        a, b = t.loop(
            lambda s: (s[0], s[1] + rm.tanh(s[0])),
            (x, x * 1.0),
            steps=6,
            inverse=lambda s: (s[0], s[1] - rm.tanh(s[0])),
        )
    return (a * b).sum()


def an_online_loop(x):
    with rm.Tape(snapshots=2) as t:
        h = t.loop(cycle_step, x, until=lambda h: False, max_steps=7)
    return (h * h).sum()


CYCLE_BODIES = {
    "ops": lambda x: (rm.sin(x) * x).sum(),
    "checkpoint": lambda x: rm.checkpoint(lambda h: rm.sin(h) * h)(x).sum(),
    "checkpoint with a policy": lambda x: rm.checkpoint(
        lambda h: rm.sin(h) * h, policy=rm.policies.save_everything
    )(x).sum(),
    "loop under snapshots=": lambda x: a_loop(x, snapshots=3),
    "loop under memory=": lambda x: a_loop(x, memory="2 KiB"),
    "loop under a policy": lambda x: a_loop(x, snapshots=2, policy=rm.policies.save_everything),
    "loop with disk snapshots": lambda x: a_loop(x, snapshots=1, disk_snapshots=2),
    "online loop": an_online_loop,
    "chain": a_chain,
    "scan under memory=": a_scan,
    "reversible loop": a_reversible_loop,
}


def call_backward(f, x, v):
    t = rm.tensor(x, requires_grad=True)
    f(t).backward()
    return t.grad


CYCLE_TRANSFORMS = {
    "grad": lambda f, x, v: rm.grad(f)(x),
    "value_and_grad": lambda f, x, v: rm.value_and_grad(f)(x),
    "backward": call_backward,
    "jvp": lambda f, x, v: rm.jvp(f, (x,), (v * 1.0,)),  # a tangent only the call holds
    "hvp": lambda f, x, v: rm.hvp(f, (x,), (v * 1.0,)),
    "grad of grad": lambda f, x, v: rm.grad(lambda y: (rm.grad(f)(y) ** 2).sum())(x),
    "gradcheck": lambda f, x, v: rm.gradcheck(f, x),
}


# rm.jvp and rm.hvp through anything that reads a Dual's node (rm.checkpoint, a checkpointed
# loop, rm.grad inside) left the trace and its seeded leaves in a cycle holding the tangents
@pytest.mark.parametrize("body", sorted(CYCLE_BODIES))
@pytest.mark.parametrize("transform", sorted(CYCLE_TRANSFORMS))
def test_no_transform_leaves_a_reference_cycle(transform, body, tmp_path):
    x, v = rng.standard_normal(8), rng.standard_normal(8)
    f = CYCLE_BODIES[body]
    if body == "loop with disk snapshots":
        f = lambda x: a_loop(x, snapshots=1, disk_snapshots=2, disk_dir=tmp_path)  # noqa: E731

    def run():
        try:
            CYCLE_TRANSFORMS[transform](f, x, v)
        except NotImplementedError:  # second order through a reversible loop: refused
            assert body == "reversible loop" and transform in ("hvp", "grad of grad")

    left = cycles_left_by(run)
    assert not left, describe(left)


def raise_inside(h):
    raise ValueError("raised inside f")


CYCLE_ERRORS = {
    "rm.grad, f raises": lambda x, v: rm.grad(raise_inside)(x),
    "rm.grad, a loop step raises": lambda x, v: rm.grad(
        lambda y: rm.Tape(snapshots=2).loop(raise_inside, y, steps=4).sum()
    )(x),
    "rm.jvp, a loop step raises": lambda x, v: rm.jvp(
        lambda y: rm.Tape(snapshots=2).loop(raise_inside, y, steps=4), (x,), (v * 1.0,)
    ),
    "rm.jvp, f raises after the switch": lambda x, v: rm.jvp(
        lambda y: raise_inside(rm.checkpoint(rm.sin)(y)), (x,), (v * 1.0,)
    ),
    "rm.hvp, a checkpointed f raises": lambda x, v: rm.hvp(
        lambda y: rm.checkpoint(raise_inside)(y).sum(), (x,), (v * 1.0,)
    ),
    "rm.hvp through a reversible loop": lambda x, v: rm.hvp(a_reversible_loop, (x,), (v * 1.0,)),
    "a budget too small": lambda x, v: rm.grad(lambda y: a_loop(y, memory="10 B"))(x),
    "a complex tangent": lambda x, v: rm.jvp(lambda y: rm.checkpoint(rm.sin)(y), (x,), (v * 1j,)),
}


# the same, where the transform raises (a traceback's frames must not join a cycle)
@pytest.mark.parametrize("case", sorted(CYCLE_ERRORS))
def test_no_failing_transform_leaves_a_reference_cycle(case):
    x, v = rng.standard_normal(8), rng.standard_normal(8)

    def run():
        with pytest.raises((ValueError, TypeError, NotImplementedError)):
            CYCLE_ERRORS[case](x, v)

    left = cycles_left_by(run)
    assert not left, describe(left)


# --- properties ----------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(programs(), st.integers(0, 2**31))
def test_random_programs_give_the_same_gradients_under_grad_and_backward(program, seed):
    r = np.random.default_rng(seed)
    x0, y0 = r.standard_normal((3, 3)) * 0.5, r.standard_normal((3, 3)) * 0.5
    gx, gy = rm.grad(lambda x, y: program_loss(program, x, y), argnums=(0, 1))(x0, y0)
    x, y = rm.tensor(x0, requires_grad=True), rm.tensor(y0, requires_grad=True)
    program_loss(program, x, y).backward()
    for g, leaf in ((gx, x), (gy, y)):
        assert np.array_equal(g, leaf.grad if leaf.grad is not None else np.zeros((3, 3)))


@settings(max_examples=15, deadline=None)
@given(programs(), st.integers(1, 12), st.integers(1, 5))
def test_random_steps_give_store_alls_gradients_under_every_schedule_in_threads(program, n, s):
    r = np.random.default_rng(n * 7 + s)
    w0, h00 = r.standard_normal((3, 3)) * 0.3, r.standard_normal((3, 3)) * 0.3

    def gradients(tape):
        w, h0 = rm.tensor(w0, requires_grad=True), rm.tensor(h00, requires_grad=True)

        def step(h):
            return h + 0.1 * rm.tanh(program_loss(program, h, w)) * h

        h = tape.loop(step, h0 * 1.0, steps=n)
        (h * h).sum().backward()
        return w.grad, h0.grad

    want = gradients(rm.Tape())
    tapes = [
        lambda: rm.Tape(schedule="sqrt"),
        lambda: rm.Tape(snapshots=s, schedule="periodic"),
        lambda: rm.Tape(snapshots=s),
        lambda: rm.Tape(snapshots=s, schedule="online"),
    ]
    for got in run_in_threads([lambda t=t: gradients(t()) for t in tapes]):
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
