"""The transformer workload: its gradient, its causal mask, its corpus, its errors."""

import numpy as np
import pytest

import remat as rm
from remat import workloads


def tiny(**kwargs):
    sizes = dict(steps=2, width=8, heads=2, context=6, batch=2, seed=1)
    return workloads.transformer(**{**sizes, **kwargs})


def test_gradients_of_every_kind_of_parameter_match_finite_differences():
    w = tiny()
    _, grads = w.loss_and_gradients(rm.Tape())
    rng = np.random.default_rng(0)
    eps = 1e-6
    for p, g in zip(w.params, grads):  # every parameter, three elements of each
        for flat in rng.choice(p.size, size=min(3, p.size), replace=False):
            index = np.unravel_index(flat, p.shape)
            original = p._data[index]
            losses = []
            for delta in (eps, -eps):
                p._data[index] = original + delta
                with rm.no_grad():
                    losses.append(w.run_layers().item())
            p._data[index] = original
            numeric = (losses[0] - losses[1]) / (2 * eps)
            assert g[index] == pytest.approx(numeric, rel=1e-5, abs=1e-8), (p.shape, index)


def test_attention_is_causal():
    w = tiny(steps=1)
    with rm.no_grad():
        h = w.start()
        out = w.step[0](h).numpy()
        later = h.numpy().copy()
        later[:, 4:] += 1.0  # change positions 4 and 5 only
        changed = w.step[0](rm.tensor(later)).numpy()
    assert np.array_equal(out[:, :4], changed[:, :4])
    assert not np.allclose(out[:, 4:], changed[:, 4:])


def test_initial_loss_is_near_that_of_guessing_uniformly():
    loss, _ = workloads.transformer(steps=2).loss_and_gradients(rm.Tape())
    assert abs(loss - np.log(len(workloads.ALPHABET))) < 1.0


def test_a_few_sgd_steps_lower_the_loss():
    w = tiny(steps=1, width=16, context=16, batch=4)
    losses = []
    for _ in range(10):
        loss, grads = w.loss_and_gradients(rm.Tape())
        losses.append(loss)
        for p, g in zip(w.params, grads):
            p._data -= 0.3 * g
    assert losses[-1] < losses[0] - 0.2


def test_the_corpus_is_remats_own_text_in_the_alphabet():
    text = workloads.corpus()
    assert len(text) > 5000 and set(text) <= set(workloads.ALPHABET)
    assert "checkpoint" in text and "revolve" in text
    assert len(workloads.ALPHABET) == 32


def test_float32_runs_in_float32():
    w = tiny(dtype="float32")
    _, grads = w.loss_and_gradients(rm.Tape(snapshots=1))
    assert all(g.dtype == np.float32 for g in grads)


def test_bad_sizes_and_forms_are_clear_errors():
    with pytest.raises(ValueError, match="width 10 is not divisible by heads 4"):
        workloads.transformer(width=10, heads=4)
    with pytest.raises(ValueError, match="run_layers: resmlp is a loop, not a chain of layers"):
        workloads.resmlp(steps=2).run_layers()
