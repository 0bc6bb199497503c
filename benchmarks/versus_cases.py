"""The workloads ``python -m benchmarks.versus`` times in each checkout.

This file is run as a script by path, with ``PYTHONPATH`` set to the checkout
under test, so it imports nothing but NumPy and remat's public names (``rm.*``,
``rm.schedules``): the same code runs against an old and a new remat.  It prints
one JSON object, ``{case: [CPU seconds of each repeat]}``.

The cases are the rows of ``core``, ``overheads`` and ``loop`` that measure
remat's own cost per op, per step and per action:

* ``chain``: 1000 small ops (x * 1.0001, sin, + 0.1) on 16 floats, forward and
  backward (``core``'s per-op overhead);
* ``mlp``: a 4-layer tanh MLP, batch 256, width 1024, float32 (``core``);
* ``loop <schedule>``: the tiny residual chain of ``overheads`` (width 16,
  batch 4, 1000 steps) through ``tape.loop`` under store_all, revolve and sqrt,
  ``tape.chain``, ``tape.scan``, and ``Tape(memory=)`` at a quarter of store-all;
* ``wide revolve``: the same at width 256, batch 64, 200 steps (``loop``'s kind
  of step, where the arithmetic dominates);
* ``heat``: ``overheads``' heat-equation stencil, 10 steps on 200 points;
* ``dtr <program> <tape>``: ``dtr``'s MLP and 1000-op chain on a plain tape, a DTR
  tape whose budget is never reached, and DTR (lru) at 33% of store-all's saved bytes.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import gc  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import remat as rm  # noqa: E402


def chain_case():
    x0 = np.random.default_rng(0).standard_normal(16)

    def run():
        x = rm.tensor(x0, requires_grad=True)
        y = x
        for i in range(1000):
            k = i % 3
            y = y * 1.0001 if k == 0 else rm.sin(y) if k == 1 else y + 0.1
        y.sum().backward()
        return x.grad

    return run


def mlp_case():
    rng = np.random.default_rng(0)
    ws = [
        rm.tensor((rng.standard_normal((1024, 1024)) / 32).astype(np.float32), requires_grad=True)
        for _ in range(4)
    ]
    x = rm.tensor(rng.standard_normal((256, 1024)).astype(np.float32))

    def run():
        for w in ws:
            w.grad = None
        h = x
        for w in ws:
            h = rm.tanh(h @ w)
        h.sum().backward()
        return ws[0].grad

    return run


def residual(width, batch):
    rng = np.random.default_rng(0)
    w = rm.tensor(0.5 * rng.standard_normal((width, width)) / np.sqrt(width), requires_grad=True)
    b = rm.tensor(0.1 * rng.standard_normal(width), requires_grad=True)
    x = rng.standard_normal((batch, width))

    def step(h):
        return h + rm.tanh(h @ w + b)

    return step, x, (w, b)


def loop_case(form, width=16, batch=4, steps=1000):
    step, x, params = residual(width, batch)
    state_bytes = x.nbytes

    def forward():
        if form == "chain":
            return rm.Tape().chain([step] * steps, rm.tensor(x))
        if form == "scan":
            carry, _ = rm.Tape().scan(lambda h, i: (step(h), None), rm.tensor(x), np.arange(steps))
            return carry
        if form == "memory":
            # a quarter of what storing every step's tape would hold (about 4 states a step)
            budget = steps * 4 * state_bytes // 4
            return rm.Tape(memory=budget).loop(step, rm.tensor(x), steps=steps)
        schedule = form if form in ("store_all", "sqrt") else rm.schedules.Revolve(steps, 10)
        return rm.Tape(schedule=schedule).loop(step, rm.tensor(x), steps=steps)

    def run():
        for p in params:
            p.grad = None
        forward().sum().backward()
        return params[0].grad

    return run


def heat_case():
    x = np.linspace(0.0, np.pi, 200)
    u0 = np.sin(x) + 0.1 * np.random.default_rng(0).standard_normal(200)

    def step(u):
        return rm.concatenate([u[:1], u[1:-1] + 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:]), u[-1:]])

    def run():
        u = rm.tensor(u0, requires_grad=True)
        x = u
        for _ in range(10):
            x = step(x)
        (x * x).sum().backward()
        return u.grad

    return run


def dtr_case(program, budget):
    """``benchmarks/bench_dtr.py``'s programs on a plain tape (``budget=None``), a DTR
    tape whose budget is never reached (``"never"``) or DTR under a share of what
    store-all saves (lru: its choices, so its work, are the same in both checkouts)."""
    rng = np.random.default_rng(0)
    if program == "mlp":  # 8 layers of 256, batch 256
        params = [
            rm.tensor(rng.standard_normal((256, 256)) / 16, requires_grad=True) for _ in range(8)
        ]
        x = rm.tensor(rng.standard_normal((256, 256)))

        def forward():
            h = x
            for w in params:
                h = rm.tanh(h @ w) + h * 0.5
            return (h * h).sum()

    else:  # 1000 ops of sin on 1000 floats
        params = [rm.tensor(np.linspace(-1.0, 1.0, 1000), requires_grad=True)]

        def forward():
            h = params[0]
            for _ in range(1000):
                h = rm.sin(h)
            return h.sum()

    def tape():
        if budget is None:
            return rm.Tape()
        if budget == "never":
            return rm.Tape(memory=2**40, remat="dtr")
        return rm.Tape(memory=int(full * budget), remat=rm.graph.DTR("lru"))

    def run():
        for p in params:
            p.grad = None
        with tape():
            loss = forward()
        loss.backward()
        return params[0].grad

    if budget not in (None, "never"):
        with rm.Tape(memory=2**40, remat="dtr") as t:
            loss = forward()
        loss.backward()
        full = t.stats.peak_bytes  # what store-all saves, counted by buffer
    return run


CASES = {
    "chain": chain_case,
    "mlp": mlp_case,
    "loop store_all": lambda: loop_case("store_all"),
    "loop revolve": lambda: loop_case("revolve"),
    "loop sqrt": lambda: loop_case("sqrt"),
    "chain store_all": lambda: loop_case("chain"),
    "scan store_all": lambda: loop_case("scan"),
    "loop memory=": lambda: loop_case("memory"),
    "wide revolve": lambda: loop_case("revolve", width=256, batch=64, steps=200),
    "heat": heat_case,
    "dtr chain store-all": lambda: dtr_case("chain", None),
    "dtr chain not reached": lambda: dtr_case("chain", "never"),
    "dtr chain 33%": lambda: dtr_case("chain", 0.33),
    "dtr mlp store-all": lambda: dtr_case("mlp", None),
    "dtr mlp not reached": lambda: dtr_case("mlp", "never"),
    "dtr mlp 33%": lambda: dtr_case("mlp", 0.33),
}


def main(names, repeats):
    out = {}
    for name in names:
        run = CASES[name]()
        reference = run()  # warm-up, and the gradient every repeat must reproduce
        times = []
        for _ in range(repeats):
            gc.collect()
            start = time.process_time()
            got = run()
            times.append(time.process_time() - start)
            assert np.array_equal(got, reference), f"{name}: the gradient changed between runs"
        digest = hashlib.sha256(np.ascontiguousarray(reference).tobytes()).hexdigest()[:16]
        out[name] = {"times": times, "grad": digest}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[2:] or list(CASES), int(sys.argv[1]))
