"""rm.grad at its edges: under rm.no_grad, inside loop steps, of a tensor that
requires grad (nested), in float32; and containers of Tensors given where a
constant is allowed.  A gradient is exact or refused; each test guards a bug,
said in the comment above it.
"""

import numpy as np
import pytest

import remat as rm

X0 = np.array([0.5, 1.0])


W0 = np.array([0.7, -0.3])


# --- rm.grad of a tensor that requires grad, under no_grad -----------------------------------


def test_rm_grad_under_no_grad_of_a_tensor_requiring_grad_is_not_zero():
    # identity(w) ran unrecorded, so the target had no node and the gradient came out zeros
    w = rm.tensor(W0, requires_grad=True)
    with rm.no_grad():
        g = rm.grad(lambda w: (w * w * w).sum())(w)
    np.testing.assert_allclose(getattr(g, "_data", g), 3 * W0**2)


def test_rm_grad_of_a_parameter_inside_a_loop_step_matches_store_all():
    # same cause: in steps run untaped (Advance, under no_grad) the inner gradient was zero,
    # so revolve computed another trajectory than store_all and a wrong gradient
    def gradients(tape):
        x, w = rm.tensor(X0, requires_grad=True), rm.tensor(W0, requires_grad=True)

        def step(s):
            return s - 0.1 * rm.grad(lambda w: rm.sin(w * s).sum())(w)

        tape.loop(step, x, steps=4).sum().backward()
        return x.grad, w.grad

    for got, want in zip(gradients(rm.Tape(snapshots=2)), gradients(rm.Tape())):
        np.testing.assert_allclose(got, want)


def test_a_complex_loop_state_that_depends_on_a_real_parameter_is_refused():
    # a complex state component is treated as an integer counter (no gradient): the loop
    # drops w's complex path silently, where the unrolled program refuses the complex gradient
    w = rm.tensor([0.5, 0.2], requires_grad=True)
    z = rm.tensor(np.array([1 + 1j, 2 - 1j]))
    with pytest.raises((rm.BackwardError, rm.LoopError, TypeError), match="complex"):
        out = rm.Tape(snapshots=2).loop(lambda z: z * w, z, steps=3)
        (abs(out).sum() + (w * w).sum()).backward()


def test_rm_grad_of_a_loop_at_a_parameter_that_requires_grad_is_differentiable():
    # rm.grad(f)(p) with p requiring grad records its backward (for gradient penalties); through
    # a loop that backward is now differentiable (issue 14): its value is the plain gradient's,
    # and the penalty's gradient is the unrolled program's
    def f(x):
        return rm.Tape(snapshots=2).loop(rm.sin, x, steps=4).sum()

    def unrolled(x):
        for _ in range(4):
            x = rm.sin(x)
        return x.sum()

    p = rm.tensor(X0, requires_grad=True)
    g = rm.grad(f)(p)
    np.testing.assert_array_equal(g.data, rm.grad(f)(X0))
    (g * g).sum().backward()
    q = rm.tensor(X0, requires_grad=True)
    g2 = rm.grad(unrolled)(q)
    (g2 * g2).sum().backward()
    np.testing.assert_allclose(p.grad, q.grad, rtol=1e-12)


def test_rm_grad_of_a_float32_tensor_that_requires_grad_is_float32():
    # the nested (create_graph) path skips as_leaf_dtype: a float64 gradient for a float32 leaf
    x = rm.tensor(np.array([1.0, 2.0], dtype=np.float32), requires_grad=True)
    c = rm.tensor([3.0, 4.0])
    g = rm.grad(lambda x: (x * c).sum())(x)
    assert g.dtype == np.float32


# --- containers of Tensors given where a constant is allowed ---------------------------------


def test_a_clip_bound_given_as_a_list_of_tensors_gets_its_gradient_or_is_refused():
    # rm.clip(x, [b, b]) turns the list into an array of values: b's gradient silently lost
    x = rm.tensor([1.0, 2.0], requires_grad=True)
    b = rm.tensor(1.5, requires_grad=True)
    try:
        rm.clip(x, [b, b], None).sum().backward()
    except (TypeError, ValueError):
        return
    assert b.grad is not None and float(b.grad) == 1.0


def test_a_numpy_object_array_of_tensors_as_an_operand_is_differentiated_or_refused():
    # x * np.array([a, a], dtype=object) runs, and a's gradient is silently lost (a.grad None)
    x = rm.tensor([1.0, 2.0], requires_grad=True)
    a = rm.tensor(3.0, requires_grad=True)
    pair = np.empty(2, dtype=object)
    pair[0] = pair[1] = a
    try:
        (x * pair).sum().backward()
    except (TypeError, ValueError):
        return
    assert a.grad is not None and float(a.grad) == 3.0


def test_random_parameters_in_a_list_that_require_grad_are_refused():
    # rm.random.normal(loc=[a, a]) is refused for loc=a but silently detaches a list of a
    a = rm.tensor(0.5, requires_grad=True)
    with pytest.raises(TypeError):
        rm.random.normal(loc=[a, a], size=2)
