"""Depth scaling: per-layer weights stacked in one Tensor, indexed in a loop or scanned.

A network of L layers whose weights sit in one ``(L, D, D)`` Tensor ``Ws``:

* **indexing**: ``tape.loop`` over a state ``(h, t)`` that reads ``Ws[t]``.
  Every step's indexing VJP scatters its cotangent into a dense
  ``zeros(L, D, D)``, so backward costs O(L^2 D^2);
* **scan**: ``tape.scan(layer, h, Ws)`` hands each step its slice and gathers
  the slices' cotangents in one ``(L, D, D)`` buffer: O(L D^2).

Both store every step (``rm.Tape()``), so that the time measures the
backward's cost per layer and not a schedule's recomputation (which grows
faster than L under a fixed budget); they must give the same gradient.
Times are forward + backward, medians of 5 interleaved repeats, one BLAS thread; the last
column is each time over the time at the smallest depth, against the depth
ratio (linear would be 1, 2, 4, 8).
"""

from benchmarks.common import environment, side_by_side, table  # noqa: I001

import numpy as np

import remat as rm

D, BATCH = 16, 4


def weights(depth):
    r = np.random.default_rng(depth)
    return r.standard_normal((depth, D, D)) / D**0.5, r.standard_normal((BATCH, D))


def by_indexing(ws0, h0):
    ws = rm.tensor(ws0, requires_grad=True)

    def step(state):
        h, t = state
        return rm.tanh(h @ ws[t]), t + 1

    h, _ = rm.Tape().loop(step, (rm.tensor(h0), rm.tensor(0)), steps=len(ws0))
    (h * h).sum().backward()
    return ws.grad


def by_scan(ws0, h0):
    ws = rm.tensor(ws0, requires_grad=True)
    h, _ = rm.Tape().scan(lambda h, w: (rm.tanh(h @ w), None), rm.tensor(h0), ws)
    (h * h).sum().backward()
    return ws.grad


def run(quick=False):
    depths = (20, 40, 80) if quick else (250, 500, 1000, 2000)
    rows, base = [], {}
    for depth in depths:
        ws0, h0 = weights(depth)
        assert np.array_equal(by_indexing(ws0, h0), by_scan(ws0, h0))
        medians = side_by_side(  # interleaved, so drift hits both alike
            {
                "indexing ws[t]": lambda: by_indexing(ws0, h0),
                "tape.scan": lambda: by_scan(ws0, h0),
            },
            repeats=5,
        )
        for name, seconds in medians.items():
            base.setdefault(name, (depth, seconds))
            d0, t0 = base[name]
            rows.append(
                (name, depth, f"{seconds:.3f}", f"{seconds / t0:.1f}x for {depth / d0:.0f}x")
            )
    return "\n".join(
        [
            "## Depth scaling: stacked per-layer weights (`python -m benchmarks depth`)",
            "",
            environment(("numpy", "remat")),
            "",
            f"Width {D}, batch {BATCH}, every step stored; the two gradients are checked equal.",
            "",
            table(["contender", "depth L", "s (fwd+bwd)", "time vs smallest depth"], rows),
            "",
        ]
    )


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
