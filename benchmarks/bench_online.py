"""Online against offline: how much a loop of unknown length costs remat.

An offline schedule knows ``n`` in advance and Revolve reverses the loop in
the fewest step evaluations possible with ``s`` slots, ``T(n, s)``
(:func:`remat.schedules.optimal_forward_steps`).  ``Online(s)`` learns ``n``
only when the loop ends, so it must place its checkpoints blind; the price is
its ``forward_steps`` over ``T(n, s)``.  Both are counted on paper with
:func:`remat.schedules.simulate`, which also checks every action the online
schedule emits.  For ``n = 1000`` a real loop (``tape.loop(step, h,
until=...)``, a tiny state) confirms that the executor evaluates exactly the
steps the simulation counts.

Beside them: the counts equinox publishes for its online checkpointing
(``checkpointed_while_loop``), as quoted in remat's issue tracker.  equinox
is not run here, and whether it counts ``x_0``'s slot in its budget, or the
evaluations the same way, is not checked, so that column is indicative only.
"""

from benchmarks.common import environment, table  # noqa: I001

import numpy as np

import remat as rm
from remat.schedules import Online, optimal_forward_steps, simulate

EQUINOX = {
    (1000, 4): 18701,
    (1000, 10): 6469,
    (1000, 30): 5703,
    (10**4, 4): 1721553,
    (10**4, 10): 77296,
    (10**4, 30): 61255,
}


def executor_forward_steps(n, s):
    """forward_steps of a real online loop of n steps with s snapshots."""
    rng = np.random.default_rng(0)
    w = rm.tensor(0.3 * rng.standard_normal((4, 4)), requires_grad=True)
    seen = [0]

    def until(h):
        seen[0] += 1
        return seen[0] == n

    tape = rm.Tape(snapshots=s)
    h = tape.loop(lambda h: h + rm.tanh(h @ w), rm.tensor(rng.standard_normal((2, 4))), until=until)
    h.sum().backward()
    return tape.stats.forward_steps


def bench(sizes, budgets, check_n):
    rows = []
    for n in sizes:
        for s in budgets:
            best = optimal_forward_steps(n, s)
            online = simulate(Online(s), steps=n).forward_steps
            if n == check_n:
                real = executor_forward_steps(n, s)
                assert real == online, f"executor counted {real}, simulate {online}"
            eqx = EQUINOX.get((n, s))
            rows.append(
                (
                    n,
                    s,
                    best,
                    online,
                    f"{online / best:.4f}",
                    "yes" if n == check_n else "-",
                    "-" if eqx is None else eqx,
                    "-" if eqx is None else f"{eqx / best:.2f}",
                )
            )
    headers = [
        "n",
        "s",
        "offline optimum T(n, s)",
        "remat Online",
        "Online / optimum",
        "executor agrees",
        "equinox (published)",
        "equinox / optimum",
    ]
    return table(headers, rows), max(float(r[4]) for r in rows)


def run(quick=False):
    sizes = (100, 1000) if quick else (100, 1000, 10**4, 10**5)
    budgets = (4, 10) if quick else (4, 10, 30)
    text, worst = bench(sizes, budgets, check_n=100 if quick else 1000)
    return "\n".join(
        [
            "## Online vs offline checkpointing (`python -m benchmarks online`)",
            "",
            environment(("numpy", "remat")),
            "",
            "Step evaluations to reverse n steps with s slots (x_0's slot included).",
            "",
            text,
            "",
            f"remat Online stays within {worst - 1:.1%} of the offline optimum on this grid.",
            "",
        ]
    )


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv))
