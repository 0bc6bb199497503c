"""Every device remat can use here: the CPU always, the GPU where CuPy finds one.

CUDA cases skip (with the reason) on machines without CuPy or a GPU, so the
NumPy cases always run; on a GPU machine the same tests check the CuPy backend
against NumPy.
"""

import numpy as np
import pytest

import remat as rm
from remat import backend

from .cases import CASES, weighted

CUDA_REASON = rm.backend.cuda_problem() or ""
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not rm.cuda_available(), reason=CUDA_REASON)),
]


def on(device, array):
    return rm.tensor(array, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-10), (np.float32, 1e-5)])
@pytest.mark.parametrize("name", sorted(rm.OPS))
def test_each_ops_gradient_matches_the_numpy_backend(device, dtype, rtol, name):
    fn, inputs = CASES[name]
    f = weighted(fn)
    inputs = [x.astype(dtype) for x in inputs]
    argnums = tuple(range(len(inputs)))
    want = rm.grad(f, argnums=argnums)(*[rm.tensor(x) for x in inputs])
    got = rm.grad(f, argnums=argnums)(*[on(device, x) for x in inputs])
    for g, w in zip(got, want):
        assert backend.device_of(g) == device
        np.testing.assert_allclose(backend.to_host(g), w, rtol=rtol, atol=rtol)


def residual(w):
    return lambda h: h + rm.tanh(h @ w) * rm.random.uniform(size=h.shape, device=h.device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("snapshot_device", [None, "cpu"])
def test_revolve_is_exact_on_every_device(device, snapshot_device):
    rng = np.random.default_rng(0)
    w0, h00 = rng.standard_normal((8, 8)) * 0.3, rng.standard_normal((4, 8))
    results = []
    for tape in (rm.Tape(), rm.Tape(snapshots=3, snapshot_device=snapshot_device)):
        rm.random.seed(1)
        w = rm.tensor(w0, requires_grad=True, device=device)
        h0 = rm.tensor(h00, requires_grad=True, device=device)
        h = tape.loop(residual(w), h0, steps=25)
        (h * h).sum().backward()
        results.append((w.grad, h0.grad, tape.stats))
    (gw, gh, _), (cw, ch, stats) = results
    assert np.array_equal(backend.to_host(gw), backend.to_host(cw))
    assert np.array_equal(backend.to_host(gh), backend.to_host(ch))
    assert stats.forward_steps == rm.schedules.optimal_forward_steps(25, 3)


@pytest.mark.parametrize("device", DEVICES)
def test_to_moves_values_and_gradients(device):
    x = rm.tensor(np.arange(3.0), requires_grad=True)
    y = x.to(device)
    assert y.device == device and x.device == "cpu"
    (y * y).sum().backward()
    assert np.array_equal(x.grad, [0.0, 2.0, 4.0]) and backend.device_of(x.grad) == "cpu"


@pytest.mark.skipif(rm.cuda_available(), reason="checks the error when no GPU is present")
def test_asking_for_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(rm.DeviceError, match="device 'cuda' needs CuPy and an NVIDIA GPU"):
        rm.tensor([1.0, 2.0], device="cuda")
    with pytest.raises(rm.DeviceError, match="needs CuPy"):
        rm.tensor([1.0]).to("cuda")
    assert np.array_equal(rm.tensor([1.0, 2.0], device="cpu").data, [1.0, 2.0])


def test_unknown_device_is_named():
    with pytest.raises(rm.DeviceError, match="unknown device 'tpu'"):
        rm.tensor([1.0], device="tpu")


@pytest.mark.skipif(not rm.cuda_available(), reason=CUDA_REASON)
def test_mixing_devices_names_both():
    a = rm.tensor(np.ones(3))
    b = rm.tensor(np.ones(3), device="cuda")
    with pytest.raises(rm.DeviceError, match=r"add: operands are on different devices: cpu"):
        a + b


def test_importing_remat_never_imports_cupy():
    import subprocess
    import sys

    code = "import sys, remat; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
