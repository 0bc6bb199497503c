"""The short paths taken for speed (issue 17) give what the general paths give.

* ``x[index]`` with a basic index (slices, integers, None, ``...``) skips the
  general op path: its values, gradients, escape checks and errors must be
  those of the general path (compared with an integer-array index, which
  takes it, and with finite differences).
* The executor records a Tape action's steps on one recorder, opened by
  ContextVar tokens, reverses a Reverse action's steps with one sweep, and
  checks a step's spec in place: contexts must come back after a failing
  step, and a scan's y changing shape must still be named.
"""

import numpy as np
import pytest

import remat as rm
from remat import backend
from remat.tape import GRAD_ENABLED, OPEN_TAPE

BASIC = [
    np.s_[1:-1],
    np.s_[::2],
    np.s_[3],
    np.s_[-1],
    np.s_[1:4, 2],
    np.s_[..., 1:3],
    np.s_[None, 2:],
    np.s_[:, None, 0],
]


@pytest.mark.parametrize("index", BASIC, ids=repr)
def test_basic_getitem_matches_numpy_and_finite_differences(index):
    a = np.random.default_rng(0).standard_normal((5, 4))
    x = rm.tensor(a, requires_grad=True)
    y = x[index]
    assert type(y.data) is np.ndarray and np.array_equal(y.data, a[index])
    weights = np.random.default_rng(1).standard_normal(np.shape(a[index]))
    (y * weights).sum().backward()
    want = np.zeros_like(a)
    want[index] += weights if np.ndim(weights) else float(weights)
    assert np.array_equal(x.grad, want)
    assert rm.gradcheck(lambda t: (t[index] * weights).sum(), a)


def test_basic_and_integer_array_indices_give_the_same_gradient():
    a = np.random.default_rng(2).standard_normal(8)
    x = rm.tensor(a, requires_grad=True)
    (x[2:6] * x[2:6]).sum().backward()
    basic = x.grad
    x.grad = None
    (x[np.arange(2, 6)] * x[np.arange(2, 6)]).sum().backward()
    assert np.array_equal(basic, x.grad)


def test_an_integer_index_gives_a_zero_d_array():
    x = rm.tensor(np.arange(3.0), requires_grad=True)
    y = x[1]
    assert type(y.data) is np.ndarray and y.shape == ()
    y.backward()
    assert np.array_equal(x.grad, [0.0, 1.0, 0.0])


def test_basic_getitem_names_the_op_and_shape_when_out_of_bounds():
    with pytest.raises(IndexError, match=r"getitem: .*\(tensor of shape \(3,\)\)"):
        rm.tensor(np.ones(3))[5]


def test_basic_getitem_records_nothing_without_grad():
    x = rm.tensor(np.ones(4), requires_grad=True)
    with rm.no_grad():
        y = x[1:]
    assert y.node is None


@pytest.mark.parametrize("index", [np.s_[1:], np.array([1, 2])], ids=["basic", "integers"])
def test_getitem_of_a_value_escaping_a_step_is_refused(index):
    kept = []

    def step(h):
        kept.append(h * 2.0)
        return h + 1.0

    h0 = rm.tensor(np.ones(3), requires_grad=True)
    rm.Tape(snapshots=1).loop(step, h0, steps=3)  # revolve: step 0 runs untaped
    with pytest.raises(rm.EscapeError, match="getitem: a value computed inside step 0"):
        kept[0][index]


def test_scatter_into_assigns_for_basic_and_adds_for_repeated_integers():
    values = np.array([1.0, 2.0])
    assert np.array_equal(backend.scatter_into((4,), np.s_[1:3], values), [0, 1, 2, 0])
    assert np.array_equal(backend.scatter_into((4,), (np.array([1, 1]),), values), [0, 3, 0, 0])


def heat(u, steps=3, r=0.25):
    for _ in range(steps):
        u = rm.concatenate([u[:1], u[1:-1] + r * (u[:-2] - 2 * u[1:-1] + u[2:]), u[-1:]])
    return (u * u).sum()


def test_the_heat_benchmark_gradient_is_right():
    from benchmarks.bench_overheads import heat_numpy, heat_remat, heat_u0

    u0 = heat_u0(30)
    assert np.allclose(heat_remat(u0), heat_numpy(u0), rtol=1e-12, atol=1e-12)
    assert rm.gradcheck(heat, u0)


def test_concatenate_with_some_inputs_constant_keeps_the_right_masks():
    a = rm.tensor(np.ones(2), requires_grad=True)
    b = rm.tensor(np.full(2, 3.0))
    for first, second in ((a, b), (b, a), (a, a)):
        a.grad = None
        (rm.concatenate([first, second]) ** 2).sum().backward()
        want = 2 * a.data * ((first is a) + (second is a))
        assert np.array_equal(a.grad, want)


@pytest.mark.parametrize("schedule, fail_at", [("store_all", 3), ("revolve", 3), ("revolve", 6)])
def test_a_failing_step_gives_the_recording_contexts_back(schedule, fail_at):
    calls = {"n": 0}

    def step(h):
        calls["n"] += 1
        if calls["n"] == fail_at:  # in the forward sweep, or (revolve, 6) recomputed in backward
            raise RuntimeError("boom")
        return h * 2.0

    h0 = rm.tensor(np.ones(2), requires_grad=True)
    tape = rm.Tape(schedule=schedule, snapshots=2 if schedule == "revolve" else None)
    with pytest.raises((RuntimeError, rm.LoopError), match="boom"):
        h = tape.loop(step, h0, steps=4)
        h.sum().backward()
    assert GRAD_ENABLED.get() is True and OPEN_TAPE.get() is None
    y = (h0 * 3.0).sum()  # recording works as before
    y.backward()
    assert np.array_equal(h0.grad, [3.0, 3.0])


def test_a_tape_opened_inside_a_step_lists_the_taped_steps_records():
    seen = []

    def step(h):
        with rm.Tape() as inner:
            out = rm.sin(h)
        seen.append(len(inner))
        return out

    h0 = rm.tensor(np.ones(2), requires_grad=True)
    rm.Tape(snapshots=2).loop(step, h0, steps=3).sum().backward()
    assert seen == [0, 0, 1, 1, 1]  # revolve: two untaped advances, then three taped steps
    assert np.allclose(h0.grad, np.cos(np.sin(np.sin(1.0))) * np.cos(np.sin(1.0)) * np.cos(1.0))


def test_a_scan_whose_y_changes_shape_is_named():
    def f(carry, x):
        y = carry[:1] if float(x.data) == 2 else carry
        return carry * 1.0, y

    with pytest.raises(rm.LoopError, match=r"step 2.*returned y with leaf 0 of shape \(1,\)"):
        rm.Tape().scan(f, rm.tensor(np.ones(3), requires_grad=True), np.arange(4.0))


@pytest.mark.parametrize("a_first", [True, False])
def test_backward_takes_the_latest_record_first_when_one_waits_outside_the_heap(a_first):
    # c = a + b with b = 3a: one parent of c waits outside the heap, the other in it;
    # b is later and adds to a's cotangent, so it must be reversed first.
    x = rm.tensor(np.array([1.0, -2.0]), requires_grad=True)
    a = x * 2.0
    b = a * 3.0
    ((a + b) if a_first else (b + a)).sum().backward()
    assert np.array_equal(x.grad, [8.0, 8.0])


def test_a_failing_vjp_leaves_no_cotangent_behind():
    from remat.ops.core import Op, apply

    def refuse(ns, g, ans, x, y):
        raise RuntimeError("this VJP fails")

    op = Op("first_passes_second_fails", np.add, (lambda ns, g, ans, x, y: g, refuse), ("", ""))
    x = rm.tensor(np.ones(2), requires_grad=True)
    a = x * 2.0  # its record waits outside the heap when the second VJP fails
    c = apply(op, (a, x * 5.0))
    with pytest.raises(RuntimeError, match="this VJP fails"):
        c.sum().backward()
    assert a.node.ct is None
    a.sum().backward()
    assert np.array_equal(x.grad, [2.0, 2.0])


def test_basic_getitem_is_counted_and_kept_like_any_op():
    x = rm.tensor(np.arange(6.0), requires_grad=True)
    with rm.count_ops() as counts:
        x[1:4]
        x[np.array([0, 2])]
    assert counts["getitem"] == 2

    def f(t):
        return (rm.sin(t[1:-1]) * t[2:]).sum()

    want = rm.grad(f)(x.data)
    for policy in (rm.policies.save_nothing, rm.policies.save_ops("getitem")):
        assert np.array_equal(rm.grad(rm.checkpoint(f, policy=policy))(x.data), want)
