"""DTR on the tape (issue 26): ``rm.Tape(memory=m, remat="dtr")`` against storing everything.

Two programs, written as plain Python on the tape (no loop API):

* an **MLP**, ``h <- tanh(h @ W_k) + 0.5 h`` for 8 layers of width 256, batch 256;
* a **1000-op chain**, ``h <- sin(h)`` on 1000 floats: many small ops, where what DTR
  does per op shows.

For each: a plain ``rm.Tape()`` (store-all, the baseline), a DTR tape whose budget is
never reached (its overhead when not needed), and DTR under 50% and 33% of store-all's
saved bytes (as DTR counts them: its peak under an unbounded budget) with each
heuristic.  Reported: the median wall time of forward + backward over store-all's,
the ops recomputed, evictions, and the peak counted.  The time over store-all's is
split in two: "recomputing", the recomputations' own time (``recompute_seconds``)
over store-all's, and "bookkeeping", the rest (what DTR does per op, per eviction and
per recomputation besides the op itself).  Contenders are interleaved; the gradients
are checked equal to store-all's bit for bit before anything is timed.
"""

from benchmarks.common import environment, side_by_side, table  # noqa: I001

from statistics import median

import numpy as np

import remat as rm
from remat.graph import DTR, HEURISTICS


def mlp(layers=8, width=256, batch=256):
    rng = np.random.default_rng(0)
    ws = [
        rm.tensor(rng.standard_normal((width, width)) / width**0.5, requires_grad=True)
        for _ in range(layers)
    ]
    x = rm.tensor(rng.standard_normal((batch, width)))

    def forward():
        h = x
        for w in ws:
            h = rm.tanh(h @ w) + h * 0.5
        return (h * h).sum()

    return ws, forward


def chain(n=1000, width=1000):
    x = rm.tensor(np.linspace(-1.0, 1.0, width), requires_grad=True)

    def forward():
        h = x
        for _ in range(n):
            h = rm.sin(h)
        return h.sum()

    return [x], forward


def step(make_tape, params, forward):
    tape = make_tape()
    with tape:
        loss = forward()
    loss.backward()
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    return grads, tape


def bench(name, params, forward, repeats):
    expected, _ = step(rm.Tape, params, forward)
    full = step(lambda: rm.Tape(memory=2**40, remat="dtr"), params, forward)[1].stats.peak_bytes
    makers = {
        "store-all": rm.Tape,
        "DTR, budget not reached": lambda: rm.Tape(memory=2**40, remat="dtr"),
    }
    for share in (0.5, 0.33):
        for h in HEURISTICS:
            budget = int(full * share)
            makers[f"DTR {h}, {share:.0%}"] = lambda b=budget, h=h: rm.Tape(memory=b, remat=DTR(h))
    stats, rows, too_small, failed = {}, [], [], {}

    def least(error):
        return str(error).split("at least ")[1].split(" bytes")[0]

    for label, make in list(makers.items()):
        try:
            grads, tape = step(make, params, forward)
        except MemoryError as error:  # too tight for this program: say so, time the others
            too_small.append([label, f"too small: needs {least(error)} B", "", "", "", ""])
            del makers[label]
            continue
        for g, e in zip(grads, expected):
            assert np.array_equal(g, e), label
        stats[label] = tape.stats

    redone = {label: [] for label in makers}  # recompute_seconds of each timed run

    def timed(label, make):
        def run():
            try:
                tape = step(make, params, forward)[1]
            except MemoryError as error:  # h_dtr's choices follow the times measured
                failed[label] = error
                return
            redone[label].append(getattr(tape.stats, "recompute_seconds", 0.0))

        return run

    times = side_by_side({label: timed(label, make) for label, make in makers.items()}, repeats)
    base = times["store-all"]
    for label in makers:
        if label in failed:
            message = f"too small in some runs: needs {least(failed[label])} B"
            too_small.append([label, message, "", "", "", ""])
            continue
        s = stats[label]
        dtr = getattr(s, "heuristic", None) is not None
        # the time over store-all's, split: the recomputations' own (the median of
        # the timed runs') and the rest, DTR's bookkeeping (counting, scoring, ...)
        over = times[label] / base - 1
        redo = median(redone[label]) / base
        rows.append(
            [
                label,
                f"{times[label] * 1e3:.1f}",
                f"{times[label] / base:.2f}x",
                f"{redo:+.0%}",
                f"{over - redo:+.0%}",
                s.recomputed_ops if dtr else 0,
                s.evictions if dtr else 0,
                f"{s.peak_bytes / full:.0%}" if dtr else "100%",
            ]
        )
    rows += [[*row[:3], "", "", *row[3:]] for row in too_small]
    head = f"### {name} (store-all saves {full / 2**20:.2f} MiB, counted by buffer)\n\n"
    headers = ["tape", "ms", "vs store-all", "recomputing", "bookkeeping"]
    headers += ["recomputed ops", "evictions", "peak / store-all"]
    return head + table(headers, rows)


def run(quick=False):
    repeats = 3 if quick else 9
    parts = [
        "## dtr (`python -m benchmarks dtr`)\n",
        environment(),
        "",
        bench("MLP, 8 layers of 256, batch 256", *mlp(*((4, 16, 8) if quick else ())), repeats),
        "",
        bench("1000-op chain of sin on 1000 floats", *chain(*((50, 10) if quick else ())), repeats),
    ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(run())
