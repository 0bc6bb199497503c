"""``remat compare``: one workload under each schedule, every figure measured.

Step evaluations (checked against the binomial optimum), the bytes the tape
held, the tracemalloc peak of separate runs, wall time of runs without
tracemalloc (schedules interleaved, the median of the repeats), and each
gradient's largest difference from store_all's, which must be exactly zero.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
import tracemalloc

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
    plain_symlog_ticks,
    progress,
    write_csv,
    write_json,
)

COMPARED = ("store_all", "sqrt", "revolve", "online")  # what compare runs by default
# What --schedules takes.  "optimal" is the least-time plan of Tape(memory=) in the bytes
# revolve held with --snapshots slots: the fastest way to reverse in revolve's memory.
COMPARABLE = ("store_all", "sqrt", "periodic", "revolve", "online", "mixed", "optimal")
WARN_SECONDS = 10.0  # a comparison predicted to take longer says so first, on stderr


def _tape_for(name, snapshots, trace=False, memory=None):
    if name in ("store_all", "sqrt"):
        return Tape(schedule=name, trace=trace)
    if name == "optimal":
        return Tape(memory=memory, schedule="optimal", trace=trace)
    return Tape(snapshots=snapshots, schedule=name, trace=trace)


def run_once(
    workload_name, steps, snapshots, name, memory=False, trace=False, budget=None, workload=None
):
    """One forward + backward of the workload under schedule ``name``.

    With ``memory=True`` the run is made under tracemalloc and its peak is
    returned as ``traced`` (its time, distorted by tracing, is not returned);
    otherwise it is timed and ``seconds`` is returned.  ``trace=True`` makes
    the tape record bytes held over time (for the figure; it costs memory).
    ``budget``: the optimal plan's bytes.  ``workload``: one made before, whose
    functions a cached plan was made for (a new one would be measured again).
    """
    workload = workload or make_workload(workload_name, steps=steps)
    tape = _tape_for(name, snapshots, trace, budget)
    online = name == "online"
    gc.collect()
    result = dict(schedule=name, tape=tape, state_bytes=workload.state_bytes)
    if memory:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            loss, grads = workload.loss_and_gradients(tape, online=online)
            result["traced"] = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
    else:
        start = time.perf_counter()
        loss, grads = workload.loss_and_gradients(tape, online=online)
        result["seconds"] = time.perf_counter() - start
    result.update(loss=loss, grads=grads, stats=tape.stats)
    return result


def _optimum(name, steps, budget):
    # The binomial optimum assumes one step's tape at a time; sqrt and periodic keep a
    # whole segment's tapes, so they sit outside that model (no optimum to check), and
    # the optimal plan minimises time in bytes, not evaluations in slots.
    if name == "store_all":
        return steps  # every step taped once: nothing to recompute
    if name == "mixed":
        return S.mixed_forward_steps(steps, budget)
    if name in ("revolve", "online"):
        return S.optimal_forward_steps(steps, budget)
    return None


def predicted_evaluations(name, steps, snapshots):
    """The step evaluations one run of schedule ``name`` makes (simulated; online's
    and the optimal plan's are taken as revolve's, which they do not pass by much)."""
    if name == "store_all":
        return steps
    if name in ("online", "optimal"):
        name = "revolve"
    sched = S.make_schedule(name, steps, None if name == "sqrt" else snapshots)
    return S.simulate(sched).forward_steps


def warn_if_long(names, steps, snapshots, runs, seconds_per_step, out=None):
    """Say on stderr, before the work starts, how much there is when it is predicted
    to take over :data:`WARN_SECONDS`: the step evaluations of each schedule and the
    time they take at ``seconds_per_step`` (a store_all run's time per step)."""
    each = {name: predicted_evaluations(name, steps, snapshots) for name in names}
    total = runs * sum(each.values())
    predicted = total * seconds_per_step
    if predicted > WARN_SECONDS:
        listed = ", ".join(f"{name} {count}" for name, count in each.items())
        print(
            f"remat compare: {total} step evaluations to make ({runs} runs of each schedule; "
            f"one run: {listed}), about {predicted:.0f} s at {seconds_per_step * 1e6:.0f} us "
            "a step; fewer --steps or --repeats, or more --snapshots, take less",
            file=out or sys.stderr,
        )
    return predicted


def measure(workload_name, steps, snapshots, repeats=3, trace=False, names=COMPARED):
    """Every schedule of ``names`` (store_all, the reference, is always run
    first), measured: a list of rows (dicts).

    A store_all run first times a step, to warn of a long comparison
    (:func:`warn_if_long`); with "optimal", a revolve run measures the bytes
    it holds with ``snapshots`` slots, the optimal plan's budget, and the plan
    is made (measured and cached) before anything is timed or traced.
    Then one run per schedule under tracemalloc (memory; it also warms up),
    then ``repeats`` timed rounds without tracemalloc, each running every
    schedule once in a rotated order; a row's ``seconds`` is the median.
    Every run's gradients are compared with store_all's.  ``trace`` adds one
    more run per schedule with ``trace=True``, whose tape is kept for the
    figure.
    """
    if tracemalloc.is_tracing():
        raise ValueError(
            "tracemalloc is already tracing (PYTHONTRACEMALLOC or -X tracemalloc?): "
            "run without it, so that the timed runs are not slowed down by tracing"
        )
    names = ("store_all", *(name for name in names if name != "store_all"))
    workload = make_workload(workload_name, steps=steps)  # one for all runs: plans cache
    probe = run_once(workload_name, steps, snapshots, "store_all", workload=workload)
    runs_each = repeats + 1 + bool(trace)
    long = warn_if_long(names, steps, snapshots, runs_each, probe["seconds"] / steps)
    budget = None
    if "optimal" in names:  # revolve's bytes; the plan made here is reused below
        revolve = run_once(workload_name, steps, snapshots, "revolve", workload=workload)
        budget = revolve["stats"].peak_bytes
        run_once(workload_name, steps, snapshots, "optimal", budget=budget, workload=workload)
    runs = iter(progress(range(len(names) * runs_each), "runs", force=long > WARN_SECONDS))

    def run(name, **kwargs):
        next(runs, None)
        return run_once(
            workload_name, steps, snapshots, name, budget=budget, workload=workload, **kwargs
        )

    first = {name: run(name, memory=True) for name in names}
    reference = first["store_all"]["grads"]
    diffs = {name: max_diff(first[name]["grads"], reference) for name in names}
    losses = {name: {first[name]["loss"]} for name in names}
    seconds = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            timed = run(name)
            seconds[name].append(timed["seconds"])
            diffs[name] = max(diffs[name], max_diff(timed["grads"], reference))
            losses[name].add(timed["loss"])
    traced = {name: run(name, trace=True)["tape"] for name in names} if trace else {}
    rows = []
    for name in names:
        stats = first[name]["stats"]
        rows.append(
            dict(
                schedule=name,
                snapshots=stats.snapshots,
                steps=stats.steps,
                forward_steps=stats.forward_steps,
                recomputed_steps=stats.recomputed_steps,
                optimum=_optimum(name, steps, stats.snapshots),
                factor=stats.forward_steps / steps,
                peak_snapshots=stats.peak_snapshots,
                tape_peak_bytes=stats.peak_bytes,
                traced_peak_bytes=first[name]["traced"],
                seconds=statistics.median(seconds[name]),
                seconds_min=min(seconds[name]),
                seconds_max=max(seconds[name]),
                seconds_runs=seconds[name],
                max_grad_diff=diffs[name],
                loss=first[name]["loss"],
                losses_agree=len(losses[name]) == 1 and losses[name] == losses["store_all"],
                state_bytes=first[name]["state_bytes"],
                stats=stats,
                tape=traced.get(name),
            )
        )
    return rows


def _check(rows):
    failures = []
    for row in rows:
        name = row["schedule"]
        if row["max_grad_diff"] != 0.0:
            failures.append(f"{name}: gradients differ from store_all by {row['max_grad_diff']:g}")
        if not row["losses_agree"]:
            failures.append(f"{name}: the loss differs between runs or from store_all's")
        if name in ("revolve", "mixed") and row["forward_steps"] != row["optimum"]:
            failures.append(
                f"{name}: {row['forward_steps']} step evaluations, the optimum is {row['optimum']}"
            )
        if name == "optimal" and row["stats"].peak_bytes > row["stats"].memory:
            failures.append(
                f"optimal: held {row['stats'].peak_bytes} bytes, over its budget of "
                f"{row['stats'].memory} (revolve's)"
            )
    return failures


PUBLIC = (  # the fields of a row that csv and json print
    "schedule",
    "snapshots",
    "steps",
    "forward_steps",
    "recomputed_steps",
    "optimum",
    "factor",
    "peak_snapshots",
    "tape_peak_bytes",
    "traced_peak_bytes",
    "seconds",
    "seconds_min",
    "seconds_max",
    "seconds_runs",
    "max_grad_diff",
    "loss",
)


def compare_schedules(args, out):
    """``remat compare``: the table (or csv, json, figure) of every schedule."""
    names = args.schedules or COMPARED
    rows = measure(args.workload, args.steps, args.snapshots, args.repeats, bool(args.plot), names)
    failures = _check(rows)
    description = make_workload(args.workload, steps=1).description
    if args.plot:
        _compare_figure(rows, args).savefig(args.plot, dpi=110, bbox_inches="tight")
    public = [{key: row[key] for key in PUBLIC} for row in rows]
    if args.format == "json":
        document = dict(
            **compare_heading(args, description),
            snapshots=args.snapshots,
            state_bytes=rows[0]["state_bytes"],
            method=(
                f"seconds: median of {args.repeats} runs per schedule without tracemalloc, "
                "schedules interleaved; traced_peak_bytes: one separate run per schedule "
                "under tracemalloc; tape_peak_bytes: the loop's own byte accounting"
            ),
            rows=[dict(p, stats=row["stats"].to_dict()) for p, row in zip(public, rows)],
            failures=failures,
            ok=not failures,
            figure=args.plot,
            **environment(),
        )
        write_json(document, out)
    elif args.format == "csv":
        for row in public:
            row["seconds_runs"] = " ".join(f"{s:.6f}" for s in row["seconds_runs"])
        write_csv(public, out)
    else:
        _compare_table(rows, args, description, failures, out)
    if failures and args.format != "table":
        print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


# The tables here, in curve.py and in blocks.py are f-strings, not tabulate or rich:
# the `remat` command comes with the core install, whose one dependency is NumPy, so
# a table library could only be an optional extra, with these same f-strings kept
# for the install without it: two ways to print one table, to save about ten lines.
def _compare_table(rows, args, description, failures, out):
    tape = bytes_column(rows, "tape_peak_bytes")
    traced = bytes_column(rows, "traced_peak_bytes")
    lines = [
        f"workload {args.workload} ({description}), {args.steps} steps, "
        f"one state = {format_bytes(rows[0]['state_bytes'])}",
        "",
        f"{'schedule':<10} {'slots':>5} {'forward':>8} {'optimum':>8} {'factor':>6} "
        f"{'tape ' + tape[0]:>9} {'traced ' + traced[0]:>10} {'time s':>7} "
        f"{'max |grad diff|':>16}",
    ]
    for row in rows:
        lines.append(
            f"{row['schedule']:<10} {row['snapshots']:>5} {row['forward_steps']:>8} "
            f"{row['optimum'] or '-':>8} {row['factor']:>6.2f} "
            f"{in_unit(row['tape_peak_bytes'], tape):>9} "
            f"{in_unit(row['traced_peak_bytes'], traced):>10} "
            f"{row['seconds']:>7.3f} {row['max_grad_diff']:>16.3g}"
        )
    lines += [
        "",
        "slots: snapshot budget; forward: step evaluations counted by the executor; optimum: "
        "the binomial minimum for that budget (sqrt keeps a whole segment of step tapes, "
        "outside that model); tape: most bytes the loop held; traced: "
        "tracemalloc peak of the whole forward + backward, in a separate run; time s: "
        f"median of {args.repeats} runs without tracemalloc, schedules interleaved.",
    ]
    if args.plot:
        lines.append(f"figure written to {args.plot}")
    lines += failures or ["gradients identical under every schedule"]
    print("\n".join(lines), file=out)


COLORS = {  # one colour per schedule, in every panel
    "store_all": "tab:gray",
    "sqrt": "tab:orange",
    "revolve": "tab:red",
    "online": "tab:purple",
    "periodic": "tab:brown",
    "mixed": "tab:green",
    "optimal": "tab:blue",
}


def _compare_figure(rows, args):
    from ..plot import _pyplot, memory_timeline

    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    (held, evaluations), (seconds, timeline) = axes
    names = [r["schedule"] for r in rows]
    colors = [COLORS[name] for name in names]
    held.bar(names, [r["tape_peak_bytes"] / MiB for r in rows], color=colors)
    held.plot(
        names,
        [r["traced_peak_bytes"] / MiB for r in rows],
        "kD",
        label="tracemalloc peak of the run",
    )
    held.set_ylim(
        0, 1.15 * max(max(r["tape_peak_bytes"], r["traced_peak_bytes"]) for r in rows) / MiB
    )
    held.set_ylabel("peak MiB")
    held.legend(fontsize=8, frameon=False, loc="upper right")
    held.set_title("bars: held by the loop (tape.stats.peak_bytes)", fontsize=9)
    evaluations.bar(names, [r["forward_steps"] for r in rows], color=colors)
    labelled = False
    for i, row in enumerate(rows):
        if row["optimum"]:
            evaluations.hlines(
                row["optimum"],
                i - 0.4,
                i + 0.4,
                color="black",
                lw=2,
                label=None if labelled else "optimum for the memory model",
            )
            labelled = True
    evaluations.set_ylabel("step evaluations")
    evaluations.set_ylim(0, 1.2 * max(r["forward_steps"] for r in rows))
    evaluations.legend(fontsize=8, frameon=False, loc="upper left")
    medians = [r["seconds"] for r in rows]
    spread = [
        [m - r["seconds_min"] for m, r in zip(medians, rows)],
        [r["seconds_max"] - m for m, r in zip(medians, rows)],
    ]  # fastest to slowest run: bars whose ranges overlap differ by no more than noise
    seconds.bar(names, medians, color=colors, yerr=spread, capsize=4, ecolor="black")
    seconds.set_ylabel("wall time (s), forward + backward")
    seconds.set_title(
        f"median of {args.repeats} runs without tracemalloc; whiskers: fastest to slowest",
        fontsize=9,
    )
    for row in rows:
        memory_timeline(
            row["tape"], ax=timeline, label=row["schedule"], color=COLORS[row["schedule"]]
        )
    # log above one state, linear below it: a loop that holds nothing stays on the axis
    timeline.set_yscale("symlog", linthresh=rows[0]["state_bytes"] / MiB)
    plain_symlog_ticks(timeline)
    timeline.set_ylabel("MiB held by the loop (log above one state)")
    timeline.set_title("held over the run (a traced run)", fontsize=9)
    fig.suptitle(f"remat compare: {args.workload}, {args.steps} steps, {args.snapshots} snapshots")
    fig.tight_layout()
    return fig
