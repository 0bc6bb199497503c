"""The graph workloads (issue 26, item 3): U-Net, ResNet, transformer op by op, adaptive ODE.

Each is checked in float64 at a tiny size: its gradients against central
differences along a random direction for every parameter, its determinism (a
seed gives the same loss bit for bit), that its graph is not a chain, and for
the adaptive ODE that the number of steps follows the data.
"""

import numpy as np
import pytest

import remat as rm
from remat import workloads
from remat.graph_workloads import (
    GRAPH_WORKLOADS,
    GraphSize,
    GraphWorkload,
    adaptive_ode,
    make_graph_workload,
    resnet,
    transformer_ops,
    unet,
)

TINY = {
    "unet": lambda seed=0: unet(levels=2, width=3, length=8, batch=2, channels=1, seed=seed),
    "resnet": lambda seed=0: resnet(
        stages=2, blocks=1, width=3, length=8, batch=2, classes=3, seed=seed
    ),
    "transformer_ops": lambda seed=0: transformer_ops(
        blocks=1, width=8, heads=2, context=4, batch=2, seed=seed
    ),
    # 4 steps accepted and 2 rejected at seed 0: both branches are differentiated
    "adaptive_ode": lambda seed=0: adaptive_ode(horizon=0.5, dim=2, batch=2, seed=seed),
}


def test_every_registered_workload_has_a_tiny_size_here():
    assert sorted(TINY) == sorted(GRAPH_WORKLOADS)


def _loss_at(w, i, array):
    params = list(w.params)
    params[i] = rm.tensor(array)
    with rm.no_grad():
        return w.loss(params, w.inputs).item()


@pytest.mark.parametrize("name", sorted(TINY))
def test_gradients_match_central_differences_in_float64(name):
    w = TINY[name]()
    _, grads = w.loss_and_gradients()
    notes = dict(w.notes)
    rng = np.random.default_rng(1)
    eps = 1e-6
    for i, (p, g) in enumerate(zip(w.params, grads)):
        assert g.dtype == np.float64 and g.shape == p.shape
        v = rng.standard_normal(p.shape)
        x = p.numpy()
        difference = (_loss_at(w, i, x + eps * v) - _loss_at(w, i, x - eps * v)) / (2 * eps)
        assert w.notes == notes  # the same steps taken: the differences cross no decision
        assert float(np.sum(g * v)) == pytest.approx(difference, rel=1e-5, abs=1e-9), i


@pytest.mark.parametrize("name", sorted(TINY))
def test_a_seed_gives_the_same_loss_and_gradients_bit_for_bit(name):
    first, second, other = TINY[name](), TINY[name](), TINY[name](seed=1)
    loss, grads = first.loss_and_gradients()
    again, grads_again = second.loss_and_gradients()
    assert loss == again
    assert all(np.array_equal(a, b) for a, b in zip(grads, grads_again))
    assert other.forward().item() != loss


@pytest.mark.parametrize("name", sorted(TINY))
def test_the_graph_is_not_a_chain(name):
    # some value is read by an op at least 8 records after the one that made it
    # (a skip, a shortcut, a step size): no chain schedule covers the graph
    w = TINY[name]()
    with rm.Recorder() as recorder:
        w.forward()
    place = {id(r): k for k, r in enumerate(recorder.records)}
    spans = [
        k - place[id(parent)]
        for k, r in enumerate(recorder.records)
        for parent in r.parents
        if id(parent) in place
    ]
    assert max(spans) >= 8


@pytest.mark.parametrize("name", sorted(TINY))
def test_per_block_checkpoints_give_store_alls_gradients_bit_for_bit_and_keep_less(name):
    w = TINY[name]()
    loss, grads = w.loss_and_gradients()
    notes = dict(w.notes)
    again, grads_again = w.loss_and_gradients(rm.Tape(), wrap=rm.checkpoint)
    assert again == loss and w.notes == notes
    assert all(np.array_equal(a, b) for a, b in zip(grads, grads_again))
    assert w.measure(wrap=rm.checkpoint).saved_bytes < w.measure().saved_bytes


def test_measure_counts_records_and_saved_bytes_without_the_users_buffers():
    p = rm.tensor(np.array([0.1, 0.2, 0.3]), requires_grad=True)
    # sin saves p (the user's: not counted); multiply saves s twice, one buffer of 24
    # bytes; multiply by x saves x (an input: not counted); sum saves nothing
    w = GraphWorkload("tiny", "", [p], [rm.tensor([1.0, 2.0, 3.0])], _sin_squared_times_x)
    assert w.measure() == GraphSize(ops=4, saved_bytes=24)


def _sin_squared_times_x(ps, xs):
    s = rm.sin(ps[0])
    return (s * s * xs[0]).sum()


def test_the_unets_ops_counted_by_hand():
    # level 0: matmul, add (pad, slices and concatenate read only the input), gelu;
    # pool: reshape, mean; bottom: pad, 3 slices, concatenate, matmul, add, gelu;
    # up: repeat, concatenate and a conv with gelu (8); out: matmul, add; loss: 3
    assert unet(levels=1, width=2, length=4, batch=1).measure().ops == 3 + 2 + 8 + 10 + 2 + 3


def test_transformer_ops_is_the_chain_workloads_transformer_bit_for_bit():
    w = transformer_ops(blocks=2, width=8, heads=2, context=4, batch=2)
    chain = workloads.transformer(steps=2, width=8, heads=2, context=4, batch=2)
    loss, grads = w.loss_and_gradients()
    expected, expected_grads = chain.loss_and_gradients(rm.Tape())
    assert loss == expected
    assert all(np.array_equal(a, b) for a, b in zip(grads, expected_grads))


def test_the_odes_step_count_follows_the_data():
    counts = set()
    for seed in range(4):
        w = adaptive_ode(horizon=0.5, dim=2, batch=2, seed=seed)
        size = w.measure()
        counts.add((w.notes["accepted"], w.notes["rejected"], size.ops))
    assert len(counts) >= 3
    # the same parameters, the initial state scaled: other steps, another graph
    w = adaptive_ode(horizon=0.5, dim=2, batch=2)
    y0, target = w.inputs
    taken = set()
    for scale in (0.1, 1.0, 3.0):
        w.loss(w.params, [y0 * scale, target])
        taken.add(w.notes["accepted"] + w.notes["rejected"])
    assert len(taken) == 3


def test_the_ode_says_when_it_takes_too_many_steps():
    w = adaptive_ode(horizon=0.5, dim=2, batch=2, max_steps=3)
    with pytest.raises(RuntimeError, match=r"3 steps \(accepted .*raise max_steps"):
        w.forward()


def test_the_ode_says_when_its_error_estimate_is_not_finite():
    w = adaptive_ode(horizon=0.5, dim=2, batch=2)
    y0, target = w.inputs
    with pytest.raises(FloatingPointError, match=r"step 0 \(t = 0, .* error estimate of nan"):
        w.loss(w.params, [y0 * float("nan"), target])


def test_the_registry_builds_each_workload_by_name_and_size():
    assert make_graph_workload("unet", size=2).description.startswith("1-D U-Net, 2 levels")
    assert make_graph_workload("adaptive_ode", size=0.5, seed=3).name == "adaptive_ode"
    with pytest.raises(ValueError, match="unknown graph workload 'vgg'; choose one of unet"):
        make_graph_workload("vgg")
    with pytest.raises(ValueError, match="length 12 is not divisible by 2\\*\\*levels = 8"):
        unet(levels=3, length=12)
    with pytest.raises(ValueError, match="length 12 is not divisible by 2\\*\\*\\(stages - 1\\)"):
        resnet(stages=4, length=12)
    with pytest.raises(ValueError, match="horizon 0.0 must be positive"):
        adaptive_ode(horizon=0.0)
