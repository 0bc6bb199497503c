"""``remat compare --memory 2MiB``: the budget curve.

For byte budgets from where the curve is worth plotting (the optimal plan
predicted at most :data:`WORTH` times store-all's time) up to the one given: the time
of revolve and of mixed checkpointing with the most slots that fit, and of the
optimal plan (:class:`remat.schedules.Optimal`), each measured (the chain's
own forward and backward, median of the repeats) beside what the plan
predicts from the measured costs, with the bytes held (never above the
budget) and the gradients' difference from store_all's.
"""

from __future__ import annotations

import gc
import statistics
import sys

from .. import memory as M
from .. import schedules as S
from ..budget import Tape
from ..units import format_bytes
from ..workloads import make_workload
from .common import (
    MiB,
    bytes_column,
    compare_heading,
    environment,
    in_unit,
    max_diff,
    plain_log_ticks,
    progress,
    write_csv,
    write_json,
)
from .table import WARN_SECONDS

CURVE = ("revolve", "mixed", "optimal")  # remat compare --memory: one curve each
WORTH = 4.0  # the curve starts where the optimal plan takes at most this x store-all's time


def measured_costs(workload_name, steps, memory):
    """The workload's costs as ``Tape(memory=memory)`` measures them (one run, planned)."""
    M.clear_plans()
    tape = Tape(memory=memory)
    make_workload(workload_name, steps=steps).loss_and_gradients(tape)
    return tape.plans[0][1]


def curve_budgets(least, most, count):
    """``count`` budgets from ``least`` to ``most`` bytes, evenly spaced on a log scale."""
    if count == 1 or most <= least:
        return [most]
    ratio = most / least
    return sorted({int(least * ratio ** (k / (count - 1))) for k in range(count)} | {most})


def plan_for(name, costs, budget):
    """The plan ``Tape(memory=budget)`` runs for schedule ``name`` under ``costs``
    (ValueError: revolve or mixed with not even one slot)."""
    if name == "optimal":
        return M.plan_optimal(costs, budget)
    return M.fitting_slots(name, costs, budget)


def worth_plotting(costs, least, most):
    """The least budget from which the curve is worth drawing: where the optimal
    plan is predicted to take at most :data:`WORTH` times store-all's time (below
    it the time grows like n^2 / slots: one slot over 1000 steps is 500,500 step
    evaluations), found by bisection on a log scale; ``least`` if ``most`` is below."""
    store_all = sum(costs.reverse_time)

    def worth(budget):
        return M.plan_optimal(costs, budget).predicted_time <= WORTH * store_all

    if worth(least) or not worth(most):
        return least
    lo, hi = least, most  # worth(hi) and not worth(lo)
    while hi > lo * 1.02 and hi - lo > 1:
        mid = int((lo * hi) ** 0.5)
        lo, hi = (lo, mid) if worth(mid) else (mid, hi)
    return hi


def warn_if_long(cells, costs, runs, out=None):
    """Say on stderr, before the runs, how many step evaluations the curve makes and
    the time the plans predict for them, when that is over ``table.WARN_SECONDS``."""
    total, seconds = 0, 0.0
    for budget, name in cells:
        try:
            plan = plan_for(name, costs, budget)
        except ValueError:  # not even one slot: not run
            continue
        total += runs * S.simulate(plan).forward_steps
        seconds += runs * M.predicted_time(plan, costs)
    if seconds > WARN_SECONDS:
        print(
            f"remat compare: {total} step evaluations to make ({len(cells)} budget and schedule "
            f"cells, {runs} runs each), about {seconds:.0f} s as planned; a larger least "
            "budget (fewer --budgets, a larger --memory) or fewer --steps take less",
            file=out or sys.stderr,
        )
    return seconds


def _curve_tape(name, budget):
    return Tape(memory=budget, schedule=None if name == "optimal" else name)


def measure_curve(workload_name, steps, memory, count=5, repeats=3):
    """Rows of the budget curve: every budget, every schedule of :data:`CURVE`; the
    measured costs; and the budget the curve starts at (:func:`worth_plotting`).

    Each (budget, schedule) is planned once (it measures the workload), then
    run ``repeats`` times without tracemalloc, budgets and schedules
    interleaved; ``seconds`` is the median of the chain's own time
    (``tape.stats.seconds``).  Gradients are compared with store_all's.
    """
    costs = measured_costs(workload_name, steps, memory)
    least = S.minimum_bytes(costs)
    if least > memory:
        raise ValueError(
            f"--memory {memory} bytes is too small for {workload_name} with {steps} steps: "
            f"the least any plan needs is {least} bytes ({format_bytes(least)})"
        )
    reference = make_workload(workload_name, steps=steps).loss_and_gradients(Tape())[1]
    start = worth_plotting(costs, least, memory)
    budgets = curve_budgets(start, memory, count)
    cells = [(b, name) for b in budgets for name in CURVE]
    rows, seconds = {}, {cell: [] for cell in cells}
    long = warn_if_long(cells, costs, repeats + 1) > WARN_SECONDS
    runs = iter(progress(range(len(cells) * (repeats + 1)), "runs", force=long))
    M.clear_plans()
    for round_ in range(repeats + 1):  # round 0 plans (measures): not timed
        for budget, name in cells:
            next(runs, None)
            cell = (budget, name)
            if rows.get(cell, {}).get("fits") is False:
                continue
            workload = make_workload(workload_name, steps=steps)
            tape = _curve_tape(name, budget)
            gc.collect()
            try:
                grads = workload.loss_and_gradients(tape)[1]
            except ValueError as error:  # revolve or mixed: not even one slot fits
                rows[cell] = dict(budget=budget, schedule=name, fits=False, note=str(error))
                continue
            stats = tape.stats
            if round_ == 0:
                rows[cell] = dict(
                    budget=budget,
                    schedule=name,
                    fits=True,
                    plan=type(tape.plans[0][0]).__name__,
                    snapshots=stats.snapshots,
                    forward_steps=stats.forward_steps,
                    peak_bytes=stats.peak_bytes,
                    predicted_seconds=stats.predicted_seconds,
                    max_grad_diff=max_diff(grads, reference),
                    stats=stats.to_dict(),  # of the planning run (json only)
                )
                continue
            seconds[cell].append(stats.seconds)
            row = rows[cell]
            row["max_grad_diff"] = max(row["max_grad_diff"], max_diff(grads, reference))
            row["peak_bytes"] = max(row["peak_bytes"], stats.peak_bytes)
    out = []
    for cell in cells:
        row = rows[cell]
        if row["fits"]:
            row["seconds"] = statistics.median(seconds[cell])
            row["seconds_runs"] = seconds[cell]
            row["ratio"] = row["seconds"] / row["predicted_seconds"]
        out.append(row)
    return out, costs, start


CURVE_PUBLIC = (
    "budget",
    "schedule",
    "fits",
    "plan",
    "snapshots",
    "forward_steps",
    "peak_bytes",
    "predicted_seconds",
    "seconds",
    "ratio",
    "max_grad_diff",
)


def _check_curve(rows):
    failures = []
    for row in rows:
        if not row["fits"]:
            continue
        where = f"{row['schedule']} at {row['budget']} bytes"
        if row["peak_bytes"] > row["budget"]:
            failures.append(f"{where}: held {row['peak_bytes']} bytes, over the budget")
        if row["max_grad_diff"] != 0.0:
            failures.append(f"{where}: gradients differ from store_all by {row['max_grad_diff']:g}")
    return failures


def compare_memory(args, out):
    count = 5 if args.budgets is None else args.budgets
    rows, costs, start = measure_curve(args.workload, args.steps, args.memory, count, args.repeats)
    failures = _check_curve(rows)
    description = make_workload(args.workload, steps=1).description
    if args.plot:
        _curve_figure(rows, args).savefig(args.plot, dpi=110, bbox_inches="tight")
    public = [{key: row.get(key) for key in CURVE_PUBLIC} for row in rows]
    if args.format == "json":
        write_json(
            dict(
                **compare_heading(args, description),
                memory=args.memory,
                least_bytes=S.minimum_bytes(costs),
                start_bytes=start,
                worth=WORTH,
                store_all_model_bytes=sum(costs.tape_bytes),
                store_all_predicted_seconds=sum(costs.reverse_time),
                method=(
                    "seconds: median over the repeats of tape.stats.seconds (the chain's own "
                    "forward and backward), without tracemalloc, budgets and schedules "
                    "interleaved; predicted_seconds: the plan's time under the costs measured "
                    "by Tape(memory=); peak_bytes: tape.stats.peak_bytes"
                ),
                rows=[dict(p, stats=row.get("stats")) for p, row in zip(public, rows)],
                failures=failures,
                ok=not failures,
                figure=args.plot,
                **environment(),
            ),
            out,
        )
    elif args.format == "csv":
        write_csv(public, out)
    else:
        budget = bytes_column(rows, "budget")
        held = bytes_column([row for row in rows if row["fits"]], "peak_bytes")
        lines = [
            f"workload {args.workload} ({description}), {args.steps} steps; budget curve up "
            f"to {format_bytes(args.memory)}",
            f"measured: one step forward {costs.forward_time[0] * 1e3:.3f} ms, taped and "
            f"reversed {costs.reverse_time[0] * 1e3:.3f} ms, state {costs.state_bytes[0]} B, "
            f"tape {costs.tape_bytes[0]} B (step 0); least budget "
            f"{format_bytes(S.minimum_bytes(costs))}, the curve from {format_bytes(start)} "
            f"(where the optimal plan takes at most {WORTH:g}x store-all's time)",
            "",
            f"{'budget ' + budget[0]:>10} {'schedule':<8} {'slots':>5} {'forward':>7} "
            f"{'held ' + held[0]:>9} "
            f"{'predicted s':>11} {'measured s':>10} {'ratio':>6} {'max |grad diff|':>16}",
        ]
        for row in rows:
            head = f"{in_unit(row['budget'], budget):>10} {row['schedule']:<8}"
            if not row["fits"]:
                lines.append(f"{head} does not fit (not even one slot)")
                continue
            lines.append(
                f"{head} {row['snapshots']:>5} {row['forward_steps']:>7} "
                f"{in_unit(row['peak_bytes'], held):>9} {row['predicted_seconds']:>11.4f} "
                f"{row['seconds']:>10.4f} {row['ratio']:>6.2f} {row['max_grad_diff']:>16.3g}"
            )
        lines += [
            "",
            "revolve, mixed: the most slots that fit in the budget under the measured costs; "
            "optimal: remat.schedules.Optimal; held: tape.stats.peak_bytes; predicted: the "
            f"plan's time from the measured costs; measured: median of {args.repeats} runs of "
            "the chain's forward and backward (tape.stats.seconds); ratio: measured/predicted.",
        ]
        if args.plot:
            lines.append(f"figure written to {args.plot}")
        lines += failures or ["every run within its budget, gradients identical to store_all"]
        print("\n".join(lines), file=out)
    if failures and args.format != "table":
        print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


def _curve_figure(rows, args):
    from ..plot import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors = {"revolve": "tab:red", "mixed": "tab:green", "optimal": "tab:blue"}
    for name in CURVE:
        mine = [r for r in rows if r["schedule"] == name and r["fits"]]
        budgets = [r["budget"] / MiB for r in mine]
        ax.plot(budgets, [r["seconds"] for r in mine], "o-", color=colors[name], label=name)
        ax.plot(
            budgets,
            [r["predicted_seconds"] for r in mine],
            "x--",
            color=colors[name],
            label=f"{name}, predicted",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")  # the least budgets take many times the largest's
    plain_log_ticks(ax)
    ax.set_xlabel("budget (MiB, log)")
    ax.set_ylabel("forward + backward of the chain (s, log)")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"remat compare --memory: {args.workload}, {args.steps} steps", fontsize=10)
    fig.tight_layout()
    return fig
