"""Engine overhead: a chain of small ops, and a 4-layer tanh MLP, against the peers.

1. Per-op overhead: 1000 ops cycling x*1.0001, sin(x), x+0.1 on 16 float64
   values, then sum, forward + backward.  Baseline: NumPy with a hand-written
   backward.
2. A 4-layer tanh MLP (batch 256, width 1024, float32), forward + backward of
   sum(output): time, and peak memory above the parameters (tracemalloc, for
   the NumPy-based contenders).

Every contender runs in this one process, interleaved, on one BLAS thread;
times are medians, and each contender's gradient is checked against the
hand-written one before it is timed.
"""

from benchmarks.common import environment, side_by_side, skip, table, traced_peak  # noqa: I001

import numpy as np

import remat as rm

N_OPS = 1000


# --- 1. the chain ---------------------------------------------------------------
def chain_numpy(x0):
    x, saved = x0, []
    for i in range(N_OPS):
        k = i % 3
        if k == 0:
            x = x * 1.0001
        elif k == 1:
            saved.append(x)
            x = np.sin(x)
        else:
            x = x + 0.1
    g = np.ones_like(x)
    for i in reversed(range(N_OPS)):
        k = i % 3
        if k == 0:
            g = g * 1.0001
        elif k == 1:
            g = g * np.cos(saved.pop())
    return g


def chain_ops(x, sin):
    for i in range(N_OPS):
        k = i % 3
        if k == 0:
            x = x * 1.0001
        elif k == 1:
            x = sin(x)
        else:
            x = x + 0.1
    return x


def chain_remat(x0):
    x = rm.tensor(x0, requires_grad=True)
    chain_ops(x, rm.sin).sum().backward()
    return x.grad


class ClosureTape:
    """A reference point: the smallest tape one can write (a value, its parents, a
    closure for the VJP), with none of remat's care for memory, in-place changes,
    broadcasting or devices.  Its ratio shows what 'thin overhead' can mean."""

    __slots__ = ("data", "parents", "vjp", "grad")

    def __init__(self, data, parents=(), vjp=None):
        self.data, self.parents, self.vjp, self.grad = data, parents, vjp, None

    def __mul__(self, c):
        return ClosureTape(self.data * c, (self,), lambda g: (g * c,))

    def __add__(self, c):
        return ClosureTape(self.data + c, (self,), lambda g: (g,))

    def sin(self):
        x = self.data
        return ClosureTape(np.sin(x), (self,), lambda g: (g * np.cos(x),))

    def backward(self):
        order, seen, stack = [], set(), [self]
        while stack:  # from the output back: for a chain, a reverse topological order
            v = stack.pop()
            if id(v) not in seen:
                seen.add(id(v))
                order.append(v)
                stack.extend(v.parents)
        self.grad = np.ones_like(self.data)
        for v in order:
            if v.vjp is not None:
                for p, g in zip(v.parents, v.vjp(v.grad)):
                    p.grad = g if p.grad is None else p.grad + g


def chain_closure_tape(x0):
    x = ClosureTape(x0)
    chain_ops(x, ClosureTape.sin).backward()
    return x.grad


def chain_contenders():
    contenders = {
        "numpy (hand-written backward)": chain_numpy,
        "remat": chain_remat,
        "a minimal closure tape (reference)": chain_closure_tape,
    }
    try:
        import torch

        torch.set_num_threads(1)

        def chain_torch(x0):
            x = torch.tensor(x0, requires_grad=True)
            chain_ops(x, torch.sin).sum().backward()
            return x.grad.numpy()

        contenders[f"torch {torch.__version__} eager"] = chain_torch
    except ImportError as error:
        skip("torch", error)
    try:
        import autograd
        import autograd.numpy as anp

        contenders["HIPS autograd"] = autograd.grad(lambda x: chain_ops(x, anp.sin).sum())
    except ImportError as error:
        skip("autograd", error)
    try:
        import mygrad as mg

        def chain_mygrad(x0):
            x = mg.tensor(x0)
            chain_ops(x, mg.sin).sum().backward()
            return x.grad

        contenders["mygrad"] = chain_mygrad
    except ImportError as error:
        skip("mygrad", error)
    return contenders


def bench_chain(repeats):
    x0 = np.random.default_rng(0).standard_normal(16)
    contenders = chain_contenders()
    want = chain_numpy(x0)
    for name, fn in contenders.items():
        assert np.allclose(fn(x0), want), f"{name} computed a different gradient"
    times = side_by_side({k: (lambda f=f: f(x0)) for k, f in contenders.items()}, repeats)
    base = times["numpy (hand-written backward)"]
    rows = [(name, f"{t / N_OPS * 1e6:.2f}", f"{t / base:.2f}x") for name, t in times.items()]
    return table(["contender", "us per op (fwd+bwd)", "vs hand-written"], rows), times


# --- 2. the MLP -----------------------------------------------------------------
def mlp_params(width, layers, seed=0):
    rng = np.random.default_rng(seed)
    ws = [
        (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        for _ in range(layers)
    ]
    bs = [np.zeros(width, np.float32) for _ in range(layers)]
    return ws, bs


# Each MLP contender is set up once (parameters in its own types, outside the
# measurement) and returns a function doing one forward + backward.


def mlp_numpy(x, ws, bs, xp=np):
    """The hand-written forward + backward (``xp``: numpy, or cupy on a GPU)."""

    def run():
        acts = [x]
        for w, b in zip(ws, bs):
            acts.append(xp.tanh(acts[-1] @ w + b))
        g = xp.ones_like(acts[-1])
        grads = []
        for layer in reversed(range(len(ws))):
            a = acts.pop()
            g = g * (1 - a * a)  # now the cotangent of the pre-activation
            del a
            grads.append((acts[-1].T @ g, g.sum(0)))
            g = g @ ws[layer].T if layer else None
        return grads[::-1]

    return run


def mlp_remat(x, ws, bs):
    tw = [rm.tensor(w, requires_grad=True) for w in ws]
    tb = [rm.tensor(b, requires_grad=True) for b in bs]
    tx = rm.tensor(x)

    def run():
        h = tx
        for w, b in zip(tw, tb):
            w.grad = b.grad = None
            h = rm.tanh(h @ w + b)
        loss = h.sum()
        del h  # as the hand-written version drops each activation once used
        loss.backward()
        return [(w.grad, b.grad) for w, b in zip(tw, tb)]

    return run


def mlp_contenders():
    contenders = {"numpy (hand-written backward)": mlp_numpy, "remat": mlp_remat}
    try:
        import torch

        def mlp_torch(x, ws, bs):
            tw = [torch.tensor(w, requires_grad=True) for w in ws]
            tb = [torch.tensor(b, requires_grad=True) for b in bs]
            tx = torch.from_numpy(x)

            def run():
                h = tx
                for w, b in zip(tw, tb):
                    w.grad = b.grad = None
                    h = torch.tanh(h @ w + b)
                h.sum().backward()
                return [(w.grad.numpy(), b.grad.numpy()) for w, b in zip(tw, tb)]

            return run

        contenders["torch eager"] = mlp_torch
    except ImportError as error:
        skip("torch", error)
    try:
        import autograd
        import autograd.numpy as anp

        def mlp_autograd(x, ws, bs):
            def loss(params):
                h = x
                for w, b in params:
                    h = anp.tanh(h @ w + b)
                return anp.sum(h)

            params = list(zip(ws, bs))
            return lambda: autograd.grad(loss)(params)

        contenders["HIPS autograd"] = mlp_autograd
    except ImportError as error:
        skip("autograd", error)
    try:
        import mygrad as mg

        def mlp_mygrad(x, ws, bs):
            tw = [mg.tensor(w) for w in ws]
            tb = [mg.tensor(b) for b in bs]

            def run():
                h = x
                for w, b in zip(tw, tb):
                    h = mg.tanh(mg.matmul(h, w) + b)
                h.sum().backward()
                return [(w.grad, b.grad) for w, b in zip(tw, tb)]

            return run

        contenders["mygrad"] = mlp_mygrad
    except ImportError as error:
        skip("mygrad", error)
    return contenders


def bench_mlp(repeats, batch=256, width=1024, layers=4):
    ws, bs = mlp_params(width, layers)
    x = np.random.default_rng(1).standard_normal((batch, width)).astype(np.float32)
    runs = {name: make(x, ws, bs) for name, make in mlp_contenders().items()}
    want = runs["numpy (hand-written backward)"]()
    for name, run in runs.items():
        for (gw, gb), (ww, wb) in zip(run(), want):
            assert np.allclose(np.asarray(gw), ww, rtol=1e-3, atol=1e-3), name
            assert np.allclose(np.asarray(gb), wb, rtol=1e-3, atol=1e-3), name
    times = side_by_side(runs, repeats)
    base = times["numpy (hand-written backward)"]
    rows = []
    for name, t in times.items():
        peak = (
            "n/a (not NumPy)"
            if name.startswith("torch")
            else f"{traced_peak(runs[name]) / 2**20:.1f}"
        )
        rows.append((name, f"{t * 1e3:.1f}", f"{t / base:.2f}x", peak))
    headers = ["contender", "ms (fwd+bwd)", "vs hand-written", "peak MiB above parameters"]
    return table(headers, rows), times


def run(quick=False):
    repeats = 3 if quick else 15
    out = [
        "## Engine overhead (`python -m benchmarks core`)",
        "",
        environment(("numpy", "remat", "torch", "autograd", "mygrad")),
        "",
    ]
    text, _ = bench_chain(repeats)
    out += [f"### 1. Chain of {N_OPS} small ops (16 float64), forward + backward", "", text, ""]
    batch, width = (32, 128) if quick else (256, 1024)
    text, _ = bench_mlp(repeats, batch=batch, width=width)
    out += [f"### 2. 4-layer tanh MLP, batch {batch}, width {width}, float32", "", text, ""]
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
