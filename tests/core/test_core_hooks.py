"""The teaching core's hooks for an evicting engine (remat.graph's DTR):
``remat.core.tape.on_record`` sees every op's record as it is made, with what
the op read and returned (enough to run it again), and
``remat.core.tape.before_vjp`` runs before the sweep reads a record's saved
values, so that values dropped in between can be put back."""

import numpy as np
import pytest

import remat as rm
from remat.core import tape as core_tape


@pytest.fixture
def hooks(monkeypatch):
    def install(on_record=None, before_vjp=None):
        monkeypatch.setattr(core_tape, "on_record", on_record)
        monkeypatch.setattr(core_tape, "before_vjp", before_vjp)

    return install


def loss(x):
    return (rm.sin(x) * rm.exp(x) + x[1:].sum() * rm.tanh(x)).sum()


def test_on_record_sees_every_record_as_it_is_made(hooks):
    made = []
    hooks(on_record=lambda record, inputs, kw, out: made.append((record, inputs, kw, out)))
    x = rm.tensor([0.5, -1.0, 2.0], requires_grad=True)
    with rm.Recorder() as recorder:
        loss(x)
    records = [record for record, *_ in made]
    assert records == recorder.records  # fast paths and the generic apply alike
    assert all(a.seq < b.seq for a, b in zip(records, records[1:]))
    for record, inputs, kw, out in made:  # what the hook is given runs the op again
        np.testing.assert_array_equal(record.op.forward(*inputs, **(kw or {})), out)
        assert out.shape == record.shape


def test_values_evicted_after_recording_and_restored_before_vjp_give_the_same_gradient(hooks):
    x0 = np.array([0.5, -1.0, 2.0])
    expected = rm.grad(loss)(x0)
    evicted = {}

    def evict(record, inputs, kw, out):  # what DTR would drop, and remember how to rebuild
        if any(a is not None for a in record.args) or record.ans is not None:
            evicted[id(record)] = (record.args, record.ans)
            record.args = tuple(None for _ in record.args)
            record.ans = None

    reversed_ = []

    def restore(record):
        reversed_.append(record.op.name)
        if id(record) in evicted:
            record.args, record.ans = evicted.pop(id(record))

    hooks(on_record=evict, before_vjp=restore)
    got = rm.grad(loss)(x0)
    assert not evicted  # every evicted record was reversed, and restored first
    assert reversed_[0] == "sum" and "sin" in reversed_
    np.testing.assert_array_equal(got, expected)
