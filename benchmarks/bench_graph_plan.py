"""Planning a recorded graph optimally: how long HiGHS takes on graphs of 100 and 300 ops.

``python -m benchmarks.bench_graph_plan [--quick]``.  The graphs are joint forward +
backward graphs (:meth:`remat.schedules.GraphCosts.joint`) of chains with skips: a
forward op reads the op before it and, one time in three, one 2 to 5 ops back (a
residual or U-Net-like connection); sizes 1 to 4 units of 1 kB, times 1 to 3, a
VJP twice its op.  Budgets are 50% and 33% of store-all's peak (the graph's own
memory model); a budget below the least peak is reported as infeasible.  Times are
wall-clock seconds of ``plan_graph`` (building the MILP included), ``time_limit=30``;
the method column says whether HiGHS proved the plan optimal, ran out of time with
a plan (its gap then), or fell back to the LP relaxation rounded.
"""

import random
import sys
import time

from remat.schedules import GraphCosts, plan_graph

SIZES = (30, 60, 100, 300)
FRACTIONS = (0.5, 0.33)
TIME_LIMIT = 30.0


def skip_chain(ops, seed=0):
    """The joint graph of a chain of ``ops // 2`` forward ops with skips (``ops`` in all)."""
    rng = random.Random(seed)
    forward = ops // 2
    parents, compute, size = [()], [0], [0]
    for i in range(1, forward + 1):
        reads = {i - 1}
        if i > 2 and rng.random() < 1 / 3:
            reads.add(max(0, i - rng.randint(2, 5)))
        parents.append(tuple(sorted(reads)))
        compute.append(rng.randint(1, 3))
        size.append(1000 * rng.randint(1, 4))
    return GraphCosts.joint(parents, compute, size, {0}, loss=forward)


def run(quick=False):
    sizes = (20, 40) if quick else SIZES
    lines = [
        "## graph plans (`python -m benchmarks.bench_graph_plan`)",
        "",
        "| ops | budget | method | cost / store-all | peak / budget | solve s |",
        "|---|---|---|---|---|---|",
    ]
    for ops in sizes:
        graph = skip_chain(ops)
        store_all = plan_graph(graph, float("inf"))
        for fraction in FRACTIONS:
            memory = fraction * store_all.predicted_peak_bytes
            start = time.perf_counter()
            try:
                plan = plan_graph(graph, memory, time_limit=TIME_LIMIT)
            except ValueError as error:
                took = time.perf_counter() - start
                lines.append(
                    f"| {len(graph.ops)} | {fraction:.0%} | {str(error)[:60]} | | | {took:.1f} |"
                )
                continue
            took = time.perf_counter() - start
            method = plan.method + (f" (gap {plan.gap:.1%})" if plan.method == "time limit" else "")
            lines.append(
                f"| {len(graph.ops)} | {fraction:.0%} | {method} | "
                f"{plan.predicted_cost / store_all.predicted_cost:.3f} | "
                f"{plan.predicted_peak_bytes / memory:.2f} | {took:.1f} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
