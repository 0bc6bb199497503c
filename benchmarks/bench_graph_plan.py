"""Planning a recorded graph optimally: how long plan_graph takes on graphs of 100 to 300 ops.

``python -m benchmarks.bench_graph_plan [--quick] [--shapes skips,unet,...]``.  The graphs
are joint forward + backward graphs (:meth:`remat.schedules.GraphCosts.joint`) of four
shapes, each grown until the joint graph has about the number of ops asked:

* ``skips``: a chain whose op reads the op before it and, one time in three, one 2 to
  5 ops back; sizes 1 to 4 units of 1 kB, times 1 to 3;
* ``unet``: four levels of convolutions going down (each level half the bytes of the
  one above), then up, each up level reading the down level's output (the long skips);
* ``resnet``: residual blocks (conv, norm, relu, conv, norm, add), a projection
  convolution on the skip where a stage begins (bytes halve there);
* ``transformer``: layers of norm, q, k, v, scores, softmax (scores and softmax 4x
  the bytes of the others), attention, projection, add, norm, MLP up (4x), gelu,
  MLP down, add.

Convolutions and matmuls cost 3 units, the elementwise ops 1; a VJP costs twice its
op.  Budgets are 50% and 33% of store-all's peak (the graph's own memory model).
Times are wall-clock seconds of ``plan_graph`` (building the model included),
``time_limit=30``.  ``cost`` is the plan's predicted compute over store-all's (which
is a lower bound on every plan's: each op runs at least once); ``heuristic`` is the
greedy plan alone (:func:`remat.schedules.graph_greedy.greedy_plan`), over store-all's.
"""

import random
import sys
import time

from remat.schedules import GraphCosts, plan_graph
from remat.schedules.graph_greedy import OpGraph, greedy_plan, plan_cost

SIZES = (100, 200, 300)
FRACTIONS = (0.5, 0.33)
TIME_LIMIT = 30.0


def skips(blocks, seed=0):
    """A chain of ``blocks`` ops with skips (forward graph: parents, compute, bytes)."""
    rng = random.Random(seed)
    parents, compute, size = [()], [0], [0]
    for i in range(1, blocks + 1):
        reads = {i - 1}
        if i > 2 and rng.random() < 1 / 3:
            reads.add(max(0, i - rng.randint(2, 5)))
        parents.append(tuple(sorted(reads)))
        compute.append(rng.randint(1, 3))
        size.append(1000 * rng.randint(1, 4))
    return parents, compute, size


class _Builder:
    def __init__(self):
        self.parents, self.compute, self.size = [()], [0], [0]

    def op(self, reads, compute, size):
        self.parents.append(tuple(sorted(set(reads))))
        self.compute.append(compute)
        self.size.append(size)
        return len(self.parents) - 1

    def graph(self):
        return self.parents, self.compute, self.size


def unet(blocks):
    """A U-Net of four levels down and up, ``blocks`` convolutions a level."""
    b, x, down = _Builder(), 0, []
    for level in range(4):
        unit = 4096 >> level
        for _ in range(blocks):
            x = b.op([x], 3, unit)
        down.append(x)
        x = b.op([x], 1, unit // 2)  # pool
    for level in reversed(range(4)):
        unit = 4096 >> level
        x = b.op([x, down[level]], 1, 2 * unit)  # upsample and concatenate the skip
        for _ in range(blocks):
            x = b.op([x], 3, unit)
    return b.graph()


def resnet(blocks):
    """``blocks`` residual blocks, a new stage (and a projection) every four."""
    b, x, unit = _Builder(), 0, 4096
    for block in range(blocks):
        skip = x
        if block % 4 == 0 and block:
            unit //= 2
            skip = b.op([x], 3, unit)  # projection
        y = b.op([b.op([x], 3, unit)], 1, unit)
        y = b.op([b.op([b.op([y], 1, unit)], 3, unit)], 1, unit)
        x = b.op([y, skip], 1, unit)
    return b.graph()


def transformer(blocks):
    """``blocks`` transformer layers, op by op."""
    b, x, unit = _Builder(), 0, 1024
    for _ in range(blocks):
        h = b.op([x], 1, unit)
        q, k, v = (b.op([h], 3, unit) for _ in range(3))
        p = b.op([b.op([q, k], 3, 4 * unit)], 1, 4 * unit)
        x = b.op([x, b.op([b.op([p, v], 3, unit)], 3, unit)], 1, unit)
        h = b.op([b.op([x], 1, unit)], 3, 4 * unit)
        x = b.op([x, b.op([b.op([h], 1, 4 * unit)], 3, unit)], 1, unit)
    return b.graph()


SHAPES = {"skips": skips, "unet": unet, "resnet": resnet, "transformer": transformer}


def joint_graph(shape, ops):
    """The joint graph of ``shape`` with the fewest blocks giving at least ``ops`` ops."""
    blocks = max(1, ops // 2) if shape == "skips" else 1  # a chain's op adds two
    while True:
        parents, compute, size = SHAPES[shape](blocks)
        graph = GraphCosts.joint(parents, compute, size, {0}, loss=len(parents) - 1)
        if len(graph.ops) >= ops:
            return graph
        blocks += 1


def run(quick=False, shapes=tuple(SHAPES)):
    sizes = (16, 30) if quick else SIZES
    lines = [
        "## graph plans (`python -m benchmarks.bench_graph_plan`)",
        "",
        "| shape | ops | budget | method | cost | heuristic | solve s |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape in shapes:
        for ops in sizes:
            graph = joint_graph(shape, ops)
            store_all = plan_graph(graph, float("inf"))
            for fraction in FRACTIONS:
                memory = fraction * store_all.predicted_peak_bytes
                limit = 1.0 if quick else TIME_LIMIT
                lines.append(_row(shape, graph, memory, fraction, store_all.predicted_cost, limit))
    return "\n".join(lines) + "\n"


def _row(shape, graph, memory, fraction, store_all, limit):
    where = f"| {shape} | {len(graph.ops)} | {fraction:.0%} |"
    heuristic = greedy_plan(OpGraph(graph), memory)
    greedy = (
        "none" if heuristic is None else f"{plan_cost(OpGraph(graph), heuristic) / store_all:.3f}"
    )
    try:
        start = time.perf_counter()
        plan = plan_graph(graph, memory, time_limit=limit)
    except ValueError as error:
        return f"{where} {str(error)[:60]} | | {greedy} | {time.perf_counter() - start:.1f} |"
    took = time.perf_counter() - start
    method = plan.method + (f" (gap {plan.gap:.1%})" if "time limit" in plan.method else "")
    return f"{where} {method} | {plan.predicted_cost / store_all:.3f} | {greedy} | {took:.1f} |"


if __name__ == "__main__":
    chosen = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--shapes=")]
    print(
        run(
            quick="--quick" in sys.argv,
            shapes=tuple(chosen[0].split(",")) if chosen else tuple(SHAPES),
        )
    )
