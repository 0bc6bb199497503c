"""rm.jvp on dual numbers, exact or refused: no silent wrong tangent.

Each test guards a bug found in the review of 4f1518c ("Finding N"), said in the
comment at its top.  Every rm.jvp / rm.hvp result equals, bit for bit, what
the recorded path gives (forced by reading every input's node at the top of f),
and matches central differences in float64; or the call raises a clear error.
"""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import remat as rm
from remat.dual import Dual
from remat.tape import BackwardError

rng = np.random.default_rng(11)
X, V = rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((3, 4))
W, VW = rng.standard_normal((4, 4)) * 0.5, rng.standard_normal((4, 4))


def recorded(f):
    """``f``, made to take the recorded path: reading an input's node switches rm.jvp."""

    def g(*args):
        for a in args:
            assert type(a) is Dual and a.node
        return f(*args)

    return g


def central(f, primals, tangents, eps=1e-6):
    up = rm.jvp(f, tuple(p + eps * t for p, t in zip(primals, tangents)), tangents)[0]
    down = rm.jvp(f, tuple(p - eps * t for p, t in zip(primals, tangents)), tangents)[0]
    return (up - down) / (2 * eps)


@pytest.mark.parametrize("path", ["eager", "recorded"])
@pytest.mark.parametrize("params", ["neither", "weight", "both"])
def test_layer_norm_without_weight_or_bias_runs_in_forward_mode(path, params):
    # Finding 1 (medium; fixed): dual_apply made a Tensor of every operand that is
    # not a Tensor, an array or a number, so layer_norm's None (no weight, no bias)
    # became an object array: rm.jvp(lambda x: rm.layer_norm(x), ...) raised a
    # TypeError about Tensors inside an array, eagerly only.
    w0, b0 = W[0], W[1]

    def f(x):
        if params == "neither":
            return rm.layer_norm(x)
        if params == "weight":
            return rm.layer_norm(x, w0)
        return rm.layer_norm(x, w0, b0)

    g = recorded(f) if path == "recorded" else f
    tangent = rm.jvp(g, (X,), (V,))[1]
    np.testing.assert_array_equal(tangent, rm.jvp(recorded(f), (X,), (V,))[1])
    np.testing.assert_allclose(tangent, central(f, (X,), (V,)), rtol=1e-5, atol=1e-8)


def test_a_saved_array_changed_in_place_is_refused_by_the_forward_sweep():
    # Finding 2 (high; fixed): the forward sweep over the records read the arrays
    # they saved without the check backward makes (remat.guard): an array written
    # in place after it was saved gave a wrong tangent silently on the recorded
    # path (here 0 for z = y * y once y's memory is zeroed), while the eager path,
    # which computed the tangent before the write, gave the right one.
    def f(x):
        y = x * 2.0
        z = y * y
        y.data[...] = 0.0  # the memory z's record saved
        return z

    tangent = rm.jvp(f, (X,), (V,))[1]  # eager: computed before the write
    np.testing.assert_allclose(tangent, 8 * X * V, rtol=1e-12)
    with pytest.raises(BackwardError, match=r"rm.jvp's forward sweep through `multiply`"):
        rm.jvp(recorded(f), (X,), (V,))


def test_records_made_in_another_thread_carry_their_tangents():
    # Finding 3 (high; fixed): once a jvp records, its forward sweep walked the
    # records its Recorder listed, and a Recorder is open only in the thread that
    # entered it: what a worker thread recorded from the jvp's values was missing,
    # and its tangent silently dropped (zero), as soon as the ops met a tensor
    # that requires grad (or the inputs' nodes were read).
    w = rm.tensor(W, requires_grad=True)

    def f(x):
        out = {}
        worker = threading.Thread(target=lambda: out.setdefault("y", rm.tanh(x @ w)))
        worker.start()
        worker.join()
        return out["y"] * x

    tangent = rm.jvp(f, (X,), (V,))[1]
    want = (1 - np.tanh(X @ W) ** 2) * (V @ W) * X + np.tanh(X @ W) * V
    np.testing.assert_allclose(tangent, want, rtol=1e-12)
    np.testing.assert_array_equal(rm.jvp(recorded(f), (X,), (V,))[1], tangent)

    def made_there(x):  # the output itself recorded in the worker
        out = {}
        worker = threading.Thread(target=lambda: out.setdefault("y", rm.tanh(x @ w)))
        worker.start()
        worker.join()
        return out["y"]

    tangent = rm.jvp(made_there, (X,), (V,))[1]
    np.testing.assert_allclose(tangent, (1 - np.tanh(X @ W) ** 2) * (V @ W), rtol=1e-12)

    def loop_there(x):  # a checkpointed loop in the worker is refused, saying why
        out = {}
        step = lambda h: rm.tanh(h @ w)  # noqa: E731
        worker = threading.Thread(
            target=lambda: out.setdefault("y", rm.Tape(snapshots=1).loop(step, x, steps=3))
        )
        worker.start()
        worker.join()
        return out["y"]

    with pytest.raises(NotImplementedError, match="a thread started inside rm.jvp"):
        rm.jvp(loop_there, (X,), (V,))


def test_float_primals_and_number_outputs_get_true_tangents():
    # Finding 4 (high; fixed): numbers were static pytree leaves.  A float primal
    # was handed to f as the float itself, and a number f returned was handed
    # back as its own "tangent": rm.jvp(lambda x: x * x, (2.0,), (2.0,)) gave
    # (4.0, 4.0), and a float(x) among the outputs had the value as tangent.
    value, tangent = rm.jvp(lambda x: x * x, (2.0,), (2.0,))
    assert float(value) == 4.0 and float(tangent) == 8.0
    value, tangent = rm.jvp(lambda x: x * x, (np.float64(3.0),), (np.float64(1.0),))
    assert float(value) == 9.0 and float(tangent) == 6.0
    # a number computed from a Dual's value is a constant, as .numpy() makes one
    values, tangents = rm.jvp(lambda x: (x * 2.0, float(x), 3), (np.array(1.5),), (np.array(1.0),))
    assert [float(v) for v in values] == [3.0, 1.5, 3.0]
    assert [float(t) for t in tangents] == [2.0, 0.0, 0.0]


def test_returned_tangents_are_arrays_of_their_own():
    # Finding 5 (low; fixed): a tangent came back as it was computed: a NumPy
    # scalar for a 0-d output (np.float64, where the value is an array), one array
    # shared by two outputs ((x, x)), a read-only broadcast view, or in another
    # dtype than its value (float32 tangent of a float32 input + a float64 array).
    _, t = rm.jvp(lambda x: x.sum(), (X,), (V,))
    assert type(t) is np.ndarray and t.shape == ()
    _, (t1, t2) = rm.jvp(lambda x: (x, x), (X,), (V,))
    assert t1 is not t2 and not np.shares_memory(t1, t2)
    _, t = rm.jvp(lambda x: x[0] + rm.zeros((3, 4)), (X,), (V,))
    assert t.flags.writeable
    t += 1.0  # the caller's own
    x32, v32 = X.astype(np.float32), V.astype(np.float32)
    for f in (lambda x: x + np.ones(4), lambda x: rm.where(x > 0, x, np.float64(1.0))):
        value, t = rm.jvp(f, (x32,), (v32,))
        assert value.dtype == t.dtype == np.float64


def test_an_in_place_update_that_must_record_evaluates_its_op_once():
    # Finding 6 (low; fixed): `d += w` on a Dual, with w a tensor that requires
    # grad, evaluated the op eagerly-or-recorded, found it recorded, and evaluated
    # it again through Tensor._update: rm.count_ops counted two adds (the
    # recorded path one), and a second record was made.
    w = rm.tensor(W[:3], requires_grad=True)

    def f(x):
        h = x * 1.0
        h += w
        return h

    counts = []
    for g in (f, recorded(f)):
        with rm.count_ops() as counted:
            tangent = rm.jvp(g, (X,), (V,))[1]
        counts.append(dict(counted))
        np.testing.assert_array_equal(tangent, V)
    assert counts[0] == counts[1] == {"multiply": 1, "add": 1}


def test_a_jvp_inside_a_jvp_whose_result_depends_on_the_outer_tangent_is_differentiated():
    # Finding 7 (high): rm.jvp returned arrays, so a jvp (or an rm.hvp) inside another
    # one, whose result depends on a Dual of the outer call, cut the outer tangent
    # silently: forward over forward gave a zero second derivative.  First refused;
    # now (the contract) the inner call returns Tensors on the tape, which the
    # outer one differentiates.
    def inner_closes(x):
        return rm.jvp(lambda y: rm.sin(y) * x, (X,), (V,))[1]

    def inner_takes(x):
        return rm.jvp(rm.sin, (x,), (V,))[1]

    def inner_returns_it(x):
        return rm.jvp(lambda y: x * 2.0, (X,), (V,))[0]

    def hvp_inside(x):
        return rm.hvp(lambda w: (rm.tanh(x @ w) ** 2).sum(), (W,), (VW,))[0]

    wants = {
        inner_closes: np.cos(X) * V * V,
        inner_takes: -np.sin(X) * V * V,
        inner_returns_it: 2.0 * V,
    }
    for f in (inner_closes, inner_takes, inner_returns_it, hvp_inside):
        eps = 1e-6
        with rm.no_grad():
            numeric = (
                (
                    rm.hvp(lambda w: (rm.tanh((X + eps * V) @ w) ** 2).sum(), (W,), (VW,))[0]
                    - rm.hvp(lambda w: (rm.tanh((X - eps * V) @ w) ** 2).sum(), (W,), (VW,))[0]
                )
                / (2 * eps)
                if f is hvp_inside
                else wants[f]
            )
        for g in (f, recorded(f)):
            got = rm.jvp(g, (X,), (V,))[1]
            np.testing.assert_allclose(got, numeric, rtol=1e-6, atol=1e-8)
    # one that the user cuts from the outer call (rm.tensor copies) is a constant
    inner = rm.jvp(lambda x: rm.tensor(rm.jvp(rm.sin, (X,), (V,))[1]) * x, (X,), (V,))[1]
    np.testing.assert_array_equal(inner, np.cos(X) * V * V)


def test_a_jvp_inside_rm_grad_that_depends_on_its_argument_is_differentiated():
    # Finding 8 (high): reverse over forward, rm.grad of a function that uses rm.jvp
    # of its argument, silently dropped the dependence through the jvp (its results
    # were arrays): a wrong gradient.  Now the inner jvp gives Tensors on the tape.
    def loss(w):
        t = rm.jvp(lambda x: x @ w, (X,), (V,))[1]
        return (w[:3] * t[:, :1]).sum()

    def direct(w):  # the same function: the tangent of x @ w along V is V @ w
        return (w[:3] * (rm.tensor(V) @ w)[:, :1]).sum()

    np.testing.assert_allclose(rm.grad(loss)(W), rm.grad(direct)(W), rtol=1e-12)


def test_a_jvp_inside_a_jvp_through_a_checkpoint_closure_raises():
    # Finding 9 (medium; fixed): as finding 7, with the outer Dual reached only
    # through what a checkpointed function inside the inner jvp closes over: its
    # record does not list it, so the walk of finding 7's check does not see it; the
    # inner sweep meets the outer Dual's leaf when it recomputes the function, and
    # raises there.
    def through_checkpoint(x):
        inner = rm.jvp(lambda y: rm.checkpoint(lambda h: h * x)(y), (X,), (V,))[1]
        return rm.tensor(inner)

    def through_loop(x):
        step = lambda h: rm.tanh(h) * x  # noqa: E731
        inner = rm.jvp(lambda y: rm.Tape(snapshots=1).loop(step, y, steps=3), (X,), (V,))[1]
        return rm.tensor(inner)

    for f in (through_checkpoint, through_loop):
        for g in (f, recorded(f)):
            with pytest.raises(NotImplementedError, match="rm.jvp inside"):
                rm.jvp(g, (X,), (V,))


def test_setting_requires_grad_on_what_is_differentiated_keeps_it_differentiated():
    # Finding 10 (high; fixed): `x.requires_grad = True` (a PyTorch habit) on an
    # input being differentiated replaced its node by a new user leaf: rm.grad's
    # argument lost its gradient (zeros) and rm.jvp's Dual its tangent (zeros),
    # silently.  On a tensor that already requires grad it now changes nothing.
    def f(x):
        x.requires_grad = True
        return (rm.sin(x) * 2.0).sum()

    np.testing.assert_allclose(rm.grad(f)(X), 2 * np.cos(X), rtol=1e-12)
    tangent = rm.jvp(f, (X,), (V,))[1]
    np.testing.assert_allclose(tangent, (2 * np.cos(X) * V).sum(), rtol=1e-12)
    np.testing.assert_array_equal(rm.jvp(recorded(f), (X,), (V,))[1], tangent)
    w = rm.tensor(W, requires_grad=True)
    (w * w).sum().backward()
    w.requires_grad = True  # a user's leaf keeps its gradient and its node
    assert w.grad is not None and w.requires_grad


def test_requires_grad_false_on_an_input_makes_it_a_constant_in_both_modes():
    # Finding 11 (low; fixed): in reverse mode `x.requires_grad = False` makes rm.grad's
    # argument a constant (zero gradient); inside rm.jvp the Dual emptied its node and
    # became a seeded leaf again, with its tangent, when next read: the two modes
    # disagreed on one function.  On what an op made, the recorded path refused it
    # (not a leaf) and the eager path let it pass.  Now as in reverse mode, both paths.
    def f(x):
        y = rm.sin(x) * 2.0  # made before: keeps its tangent
        x.requires_grad = False
        return (y + rm.sin(x) * 2.0).sum()

    np.testing.assert_allclose(rm.grad(f)(X), 2 * np.cos(X), rtol=1e-12)
    tangent = rm.jvp(f, (X,), (V,))[1]
    np.testing.assert_allclose(tangent, (2 * np.cos(X) * V).sum(), rtol=1e-12)
    np.testing.assert_array_equal(rm.jvp(recorded(f), (X,), (V,))[1], tangent)

    def not_a_leaf(x):
        y = x * 2.0
        y.requires_grad = False
        return y

    def updated(x):
        x += 1.0
        x.requires_grad = False
        return x

    for g in (not_a_leaf, updated):
        for h in (g, recorded(g)):
            with pytest.raises(ValueError, match="requires_grad can only be changed on a leaf"):
                rm.jvp(h, (X,), (V,))
        with pytest.raises(ValueError, match="requires_grad can only be changed on a leaf"):
            rm.grad(lambda x, g=g: g(x).sum())(X)


def test_a_dual_that_outlives_its_jvp_is_a_constant_even_after_the_switch():
    # Finding 12 (low; fixed): a Dual kept past its rm.jvp was a constant only if
    # its call never switched to recording; one that had become a seeded leaf kept
    # that node: it still required grad, and rm.grad of it recorded its backward
    # and returned a Tensor (as for a tensor differentiated in an outer call).
    w, kept = rm.tensor(W, requires_grad=True), []

    def f(x):
        y = x * 2.0  # eager
        kept.extend([x, y])
        return (x @ w) * y  # switches: x and y become seeded leaves

    rm.jvp(f, (X,), (V,))
    for d in kept:
        assert type(d) is Dual and not d.requires_grad and d.node is None
        g = rm.grad(lambda y: (y * y).sum())(d)
        assert type(g) is np.ndarray
        np.testing.assert_array_equal(g, 2 * d.numpy())


# What held: over random programs of the ops below (indexing, concatenate, stack,
# where, einsum, softmax, layer_norm, reductions with keywords, astype, in-place
# updates, rm.no_grad, a parameter, a checkpoint, a checkpointed loop), reading
# every value's node at a random step (the switch to recording) changes no bit of
# the tangents, and the tangents match central differences.
_P = rm.tensor(np.random.default_rng(3).standard_normal((4, 4)) * 0.3, requires_grad=True)


def _in_place(a, b):
    h = a * 1.0
    h += b
    h *= 0.5
    return h


def _constant_part(a, b):
    with rm.no_grad():
        c = rm.exp(a)
    return c * b


PROGRAM_OPS = [
    lambda a, b: rm.sin(a) * b,
    lambda a, b: a[1:, ::-1].sum(axis=0) + b,
    lambda a, b: rm.concatenate([a, b], axis=0)[:3],
    lambda a, b: rm.stack([a, b]).mean(axis=0),
    lambda a, b: rm.where(a > b, a, b * 2.0),
    lambda a, b: rm.einsum("ij,kj->ik", a, b) @ a,
    lambda a, b: rm.softmax(a, axis=1) * b,
    lambda a, b: rm.layer_norm(a + b),
    lambda a, b: rm.gelu(a) - rm.logsumexp(b, axis=1, keepdims=True),
    lambda a, b: (a**2 + 1.0) ** 0.5 / (b * b + 1.0),
    lambda a, b: a @ _P + b,
    lambda a, b: rm.checkpoint(lambda u, v: rm.tanh(u @ _P) * v)(a, b),
    lambda a, b: rm.Tape(snapshots=1).loop(lambda h: rm.tanh(h) * 0.9 + b * 0.1, a, steps=3),
    _in_place,
    lambda a, b: rm.tanh(a).T.reshape(3, 4) * b.astype(np.float32),  # no FD: float32
    _constant_part,  # no FD: a constant by design
]


# guards the class of findings 2, 3 and 7 to 12: a switch to recording that changes tangents
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(PROGRAM_OPS) - 1), st.integers(0, 9), st.integers(0, 9)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 6),
    st.integers(0, 2**31),
)
def test_switching_at_any_step_changes_no_bit_of_the_tangents(program, switch_at, seed):
    r = np.random.default_rng(seed)
    x0, y0, vx, vy = (r.standard_normal((3, 4)) * 0.5 for _ in range(4))

    def make(switch):
        def f(x, y):
            values = [x, y]
            for k, (op, i, j) in enumerate(program):
                if k == switch:
                    for v in values:
                        v.node  # noqa: B018  (the read is the switch)
                a, b = values[i % len(values)], values[j % len(values)]
                values.append(PROGRAM_OPS[op](a, b) * 0.5)
            return values[-1].sum() + values[-1]

        return f

    value, tangent = rm.jvp(make(None), (x0, y0), (vx, vy))
    for switch in (switch_at, 0):
        value_s, tangent_s = rm.jvp(make(switch), (x0, y0), (vx, vy))
        assert np.array_equal(value, value_s) and tangent.dtype == tangent_s.dtype
        assert np.array_equal(tangent, tangent_s)
    if all(op < len(PROGRAM_OPS) - 2 for op, _, _ in program):
        eps = 1e-6
        up = rm.jvp(make(None), (x0 + eps * vx, y0 + eps * vy), (vx, vy))[0]
        down = rm.jvp(make(None), (x0 - eps * vx, y0 - eps * vy), (vx, vy))[0]
        np.testing.assert_allclose(tangent, (up - down) / (2 * eps), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("where", ["loop", "checkpoint", "primal"])
def test_a_jvp_whose_primal_will_be_differentiated_by_backward_is_exact_or_raises(where):
    # Finding 13 (high; older than dual numbers): a jvp of a value that requires grad,
    # inside a checkpointed step or called directly, detached it; a later backward()
    # through the step got no gradient through the jvp's result: x.grad was 1 where
    # it is 1 - 0.1 sin(x) v.  Fixed: on a primal that requires grad (a taped step's
    # input is one) rm.jvp returns Tensors on the tape.
    x = rm.tensor(X, requires_grad=True)

    def step(h):
        return h + rm.jvp(rm.sin, (h,), (V,))[1] * 0.1

    try:
        if where == "loop":
            with rm.Tape(snapshots=2) as tape:
                y = tape.loop(step, x, steps=1)
        elif where == "checkpoint":
            y = rm.checkpoint(step)(x)
        else:
            y = step(x)
        y.sum().backward()
    except NotImplementedError:
        return  # a clear refusal would do
    np.testing.assert_allclose(x.grad, 1 - 0.1 * np.sin(X) * V, rtol=1e-12)


def test_deepcopy_keeps_gradients_where_they_belong_or_refuses():
    # Finding 14 (high; fixed; reverse mode too): copy.deepcopy copied a Tensor's
    # slots, node included.  A user's leaf's copy kept a Leaf pointing back at the
    # original (a weak reference copies as itself): backward through the copy added
    # its gradient into the original's .grad and left the copy's None.  Inside rm.grad
    # the copy of the argument got a copied StandIn (zero gradient, silently), and
    # inside rm.jvp a Dual's copy got a copied Trace that nobody swept (zero tangent).
    import copy

    p = rm.tensor(X, requires_grad=True)
    q = copy.deepcopy(p)
    (q * 2.0).sum().backward()
    assert p.grad is None and q.requires_grad
    np.testing.assert_array_equal(q.grad, np.full_like(X, 2.0))
    c = copy.deepcopy({"a": rm.tensor(X), "p": q})  # constants stay constants; .grad copied
    assert not c["a"].requires_grad and not np.shares_memory(c["a"].numpy(), X)
    np.testing.assert_array_equal(c["p"].grad, q.grad)
    for f in (
        lambda x: copy.deepcopy(x) * 2.0,
        lambda x: copy.deepcopy(x * 1.0) * 2.0,
        lambda x: copy.deepcopy(rm.sin(x @ rm.tensor(W, requires_grad=True))),
    ):
        for g in (f, recorded(f)):
            with pytest.raises(RuntimeError, match="copy.deepcopy of a"):
                rm.jvp(g, (X,), (V,))
        with pytest.raises(RuntimeError, match="copy.deepcopy of a"):
            rm.grad(lambda x, f=f: f(x).sum())(X)
    kept = []
    rm.jvp(lambda x: kept.append(x) or x * 1.0, (X,), (V,))
    later = copy.deepcopy(kept[0])  # a Dual past its call: a constant copy
    assert type(later) is rm.Tensor and not later.requires_grad
    np.testing.assert_array_equal(later.numpy(), X)
