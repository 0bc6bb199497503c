"""The tape and the reverse sweep: behaviour a user relies on."""

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from tests.strategies import program_loss, programs


def test_backward_fills_leaf_gradients():
    x = rm.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    (rm.sin(x) * x).sum().backward()
    assert np.allclose(x.grad, np.sin(x.data) + x.data * np.cos(x.data))
    assert isinstance(x.grad, np.ndarray)


def test_gradients_accumulate_across_backward_calls():
    x = rm.tensor(np.ones(3), requires_grad=True)
    (x * 2.0).sum().backward()
    (x * 3.0).sum().backward()
    assert np.array_equal(x.grad, [5.0, 5.0, 5.0])


def test_leaves_never_share_a_gradient_array():
    x = rm.tensor(np.ones(3), requires_grad=True)
    y = rm.tensor(np.ones(3), requires_grad=True)
    seed = np.ones(3)
    (x + y).backward(seed)
    x.grad[0] = 7.0
    assert y.grad[0] == 1.0 and seed[0] == 1.0


def test_second_backward_is_a_clear_error_unless_retained():
    x = rm.tensor(np.ones(3), requires_grad=True)
    y = rm.tanh(x).sum()
    y.backward()
    with pytest.raises(rm.BackwardError, match=r"second time.*retain_graph=True"):
        y.backward()
    z = rm.tanh(x).sum()
    z.backward(retain_graph=True)
    z.backward()
    assert np.allclose(x.grad, (1 + 2) * (1 - np.tanh(1.0) ** 2))


def test_a_chain_of_100000_ops_backpropagates_without_recursion():
    x = rm.tensor(np.array([1.0]), requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.sum().backward()
    assert x.grad[0] == 1.0
    z = x
    for _ in range(100_000):
        z = z + 0.0
    del z  # freeing a long unreleased chain must not overflow the stack either
    gc.collect()


def test_changing_a_saved_array_in_place_is_refused_at_backward():
    x = rm.tensor(np.array([0.1, 0.2]), requires_grad=True)
    y = rm.sin(x)  # saves x for cos(x)
    x.data[0] = 5.0
    with pytest.raises(rm.BackwardError, match=r"(?s)`sin`.*input 0.*changed in place"):
        y.sum().backward()
    x = rm.tensor(np.array([0.1, 0.2]), requires_grad=True)
    z = rm.exp(x)  # saves its output
    z.data += 1.0
    with pytest.raises(rm.BackwardError, match=r"(?s)`exp`.*its output.*changed in place"):
        z.sum().backward()


def test_rebinding_data_after_backward_is_the_update_pattern():
    w = rm.tensor(np.ones(2), requires_grad=True)
    (rm.sin(w)).sum().backward()
    w.data = w.data - 0.1 * w.grad
    assert np.allclose(w.data, 1 - 0.1 * np.cos(1.0))


def test_shape_errors_name_the_op_and_both_shapes():
    with pytest.raises(rm.ShapeError, match=r"add.*\(3,\).*\(4,\)"):
        rm.tensor(np.ones(3)) + rm.tensor(np.ones(4))
    with pytest.raises(rm.ShapeError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        rm.tensor(np.ones((2, 3))) @ rm.tensor(np.ones((4, 5)))


def test_requires_grad_on_integers_is_a_clear_error():
    with pytest.raises(TypeError, match="floating-point.*int64"):
        rm.tensor(np.arange(3), requires_grad=True)
    with pytest.raises(ValueError, match="gradients need floats"):  # both kinds, by design
        rm.grad(lambda x: (x * 2).sum())(np.arange(3))


def test_tensor_copies_its_input():
    a = np.ones(3)
    x = rm.tensor(a, requires_grad=True)
    rm.sin(x)
    a[0] = 2.0  # the user's array stays theirs, and writeable
    assert x.data[0] == 1.0


def test_no_grad_records_nothing():
    x = rm.tensor(np.ones(3), requires_grad=True)
    with rm.no_grad():
        y = rm.sin(x) * 2
    assert not y.requires_grad and y.record is None
    assert rm.sin(x).requires_grad


def test_comparisons_are_not_differentiable():
    x = rm.tensor(np.array([1.0, -1.0]), requires_grad=True)
    mask = x > 0
    assert mask.dtype == bool and not mask.requires_grad


def test_print_tape_lists_records_in_order():
    x = rm.tensor(np.ones((2, 3)), requires_grad=True)
    w = rm.tensor(np.ones((3, 4)), requires_grad=True)
    with rm.Tape() as tape:
        y = rm.tanh(x @ w).sum()
    text = str(tape)
    lines = text.splitlines()[1:]
    assert [line.split()[1] for line in lines] == ["matmul", "tanh", "sum"]
    assert "2x4" in lines[0] and "B saved" in lines[0]
    y.backward()
    assert "freed" in str(tape) and tape.saved_bytes() == 0


def _grad_twice(n):
    x = rm.tensor(np.ones((256, 256)), requires_grad=True)
    w = rm.tensor(np.ones((256, 256)) * 0.01, requires_grad=True)
    h = x
    for _ in range(n):
        h = rm.tanh(h @ w)
    h.sum().backward()
    return x, w


def test_backward_releases_what_the_tape_saved():
    _grad_twice(2)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    x, w = _grad_twice(5)
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    # x, w, and their two gradients: 4 arrays of 512 KiB, nothing of the 5 layers
    assert held < 4 * x.data.nbytes + 64 * 1024


def test_undifferentiated_computations_do_not_pile_up():
    x = rm.tensor(np.ones(10_000), requires_grad=True)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(200):
        rm.sin(x).sum()  # recorded, never differentiated, then dropped
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert held < 2 * x.data.nbytes


def test_grad_and_value_and_grad():
    f = lambda x, y: (x * y + rm.sin(x)).sum()  # noqa: E731
    x, y = np.array([0.3, 0.4]), np.array([2.0, -1.0])
    gx = rm.grad(f)(x, y)
    assert np.allclose(gx, y + np.cos(x))
    gx, gy = rm.grad(f, argnums=(0, 1))(x, y)
    assert np.allclose(gy, x)
    value, g = rm.value_and_grad(f, argnums=1)(x, y)
    assert np.isclose(value.item(), (x * y + np.sin(x)).sum()) and np.allclose(g, x)


def test_grad_of_grad_gives_second_derivatives():
    f = lambda x: x**3 + rm.sin(x)  # noqa: E731
    x = np.array(0.7)
    assert np.isclose(rm.grad(rm.grad(f))(x), 6 * 0.7 - np.sin(0.7))
    assert np.isclose(rm.grad(rm.grad(rm.grad(f)))(x), 6 - np.cos(0.7))


def test_hessian_vector_product():
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    f = lambda x: 0.5 * (x @ (a @ x)) + rm.exp(x).sum()  # noqa: E731
    x, v = np.array([0.1, -0.2]), np.array([1.0, 2.0])
    hvp = rm.grad(lambda x: (rm.grad(f)(x) * v).sum())(x)
    assert np.allclose(hvp, a @ v + np.exp(x) * v)


def test_grad_leaves_the_callers_arrays_writeable():
    w, x = np.ones(3), np.arange(3.0)
    rm.grad(lambda w, x: (w * x).sum())(w, x)  # multiply saves x for w's gradient
    assert x.flags.writeable and w.flags.writeable


def test_grad_does_not_touch_dot_grad_of_parameters():
    w = rm.tensor(np.ones(2), requires_grad=True)
    rm.grad(lambda x: (x * w).sum())(np.ones(2))
    assert w.grad is None


def test_grad_of_a_function_independent_of_its_input_is_zero():
    assert np.array_equal(rm.grad(lambda x, y: (y * 2).sum())(np.ones(2), np.ones(2)), [0, 0])


def test_backward_needs_a_scalar_or_a_gradient():
    x = rm.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(rm.BackwardError, match=r"shape \(3,\)"):
        (x * 2).backward()
    with pytest.raises(rm.BackwardError, match="does not require grad"):
        rm.tensor(np.ones(1)).backward()


@settings(max_examples=40, deadline=None)
@given(programs(), st.integers(0, 2**31))
def test_random_compositions_match_finite_differences(program, seed):
    rng = np.random.default_rng(seed)
    x0, y0 = rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3)) * 0.5
    # Central differences lose |f| * 2.2e-16 / eps to rounding (eps = 1e-6): a program
    # like exp(exp(exp(x))) makes f ~ 1e10, an absolute error of ~1e-3 in every element.
    scale = abs(float(program_loss(program, rm.tensor(x0), rm.tensor(y0)).data))
    atol = 1e-4 + scale * 1e-9
    assert rm.gradcheck(lambda x, y: program_loss(program, x, y), x0, y0, atol=atol, rtol=1e-3)


def test_grad_with_respect_to_a_value_made_by_an_op():
    x = rm.tensor([0.3, 0.8], requires_grad=True)
    g = rm.grad(lambda z: (z**2).sum())(x * 2)
    assert np.allclose(g.data, [1.2, 3.2])
    outer = rm.grad(lambda x: rm.grad(lambda y: (y**3).sum())(rm.sin(x)).sum())
    x0 = np.array([0.3, 0.8])
    assert np.allclose(outer(x0), 6 * np.sin(x0) * np.cos(x0))


def test_an_inner_grad_sees_the_outer_variable_it_closes_over():
    x0 = np.array([0.3, -0.2])

    def penalty(w):
        g = rm.grad(lambda x: rm.tanh(x @ w).sum())(x0)
        return (g * g).sum()

    assert rm.gradcheck(penalty, np.array([[0.5, -0.3], [0.2, 0.8]]))


def test_grad_leaves_the_graph_it_closes_over_for_later():
    w = rm.tensor([1.0, 2.0], requires_grad=True)
    pre = rm.sin(w)
    assert np.allclose(rm.grad(lambda x: (x * pre).sum())(np.array([3.0, 4.0])), np.sin([1, 2]))
    (pre * pre).sum().backward()  # the records of `pre` are still there
    assert np.allclose(w.grad, 2 * np.sin([1.0, 2.0]) * np.cos([1.0, 2.0]))


def test_a_failed_backward_leaves_no_stale_cotangent():
    x = rm.tensor([0.3, 0.7], requires_grad=True)
    a = rm.sin(x)
    h = rm.Tape(snapshots=2).loop(lambda h: h * 1.5, a, steps=3)
    with pytest.raises(rm.BackwardError, match="retain_graph"):
        (h.sum() + (a * a).sum()).backward(retain_graph=True)
    # Nothing half-done remains: no stale cotangent, and the loop is still whole.
    (h.sum() + (a * a).sum()).backward()
    x0 = np.array([0.3, 0.7])
    assert np.allclose(x.grad, (1.5**3 + 2 * np.sin(x0)) * np.cos(x0))


def test_changing_the_base_of_a_saved_view_is_refused():
    w = rm.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    v = rm.tensor([1.0, 1.0], requires_grad=True)
    out = rm.sin(v @ w.T).sum()  # matmul saves the view w.T
    w.data[0, 0] = 100.0
    with pytest.raises(rm.BackwardError, match="`matmul`.*changed in place"):
        out.backward()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda x: rm.concatenate([x, x], axis=2), "concatenate: axis 2 is out of bounds"),
        (lambda x: rm.stack([x, x], axis=-4), "stack: axis -4 is out of bounds"),
        (lambda x: x.transpose(0, 5), "transpose: axis 5 is out of bounds"),
        (lambda x: x.transpose(0, 0), r"not a permutation"),
        (lambda x: rm.concatenate([x[0, 0], x[0, 0]]), "0-d tensors"),
        (lambda x: x @ 2.0, r"matmul: shapes \(2, 3\) and \(\)"),
    ],
)
def test_bad_axes_and_operands_are_named(make, match):
    with pytest.raises(rm.ShapeError, match=match):
        make(rm.tensor(np.ones((2, 3))))


def test_power_keeps_float32_and_is_flat_at_exponent_zero():
    x = rm.tensor(np.ones(3, np.float32), requires_grad=True)
    (2**x).sum().backward()
    assert x.grad.dtype == np.float32
    z = rm.tensor([0.0, 1.0], requires_grad=True)
    (z**0).sum().backward()
    assert np.array_equal(z.grad, [0.0, 0.0])


def test_a_0d_tensor_is_not_iterable_and_leaves_need_floats():
    with pytest.raises(TypeError, match="0-d"):
        list(rm.tensor(1.0))
    with pytest.raises(TypeError, match="floating-point"):
        rm.Tensor(np.arange(3), requires_grad=True)


# A tape reused for each step of a training loop listed every step's records, without end,
# and kept the arrays of forwards never differentiated (an evaluation) as long as it lived.
def test_a_tape_entered_again_drops_the_records_no_backward_can_reach():
    x = rm.tensor(np.linspace(-1.0, 1.0, 8), requires_grad=True)
    tape = rm.Tape()
    for _ in range(50):
        with tape:
            loss = rm.exp(rm.sin(x)).sum()
        loss.backward()
        x.grad = None
    assert [r.op.name for r in tape.records] == ["sin", "exp", "sum"]  # the last run's
    with tape:
        kept = rm.sin(x).sum()  # not reversed yet: its records stay listed
    with tape:
        loss = rm.exp(x).sum()
        rm.tanh(x * 2.0)  # nothing holds it: no backward can reach it
    assert [r.op.name for r in tape.records] == ["sin", "sum", "exp", "sum", "multiply", "tanh"]
    del loss  # an evaluation, say: never differentiated
    with tape:
        pass
    assert [r.op.name for r in tape.records] == ["sin", "sum"]
    kept.backward()
    np.testing.assert_array_equal(x.grad, np.cos(x.data))
    with tape:
        pass
    assert tape.records == [] and tape.saved_bytes() == 0
