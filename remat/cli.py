"""The command line: ``remat compare`` and ``remat schedule``.

``remat compare`` runs one real workload under store_all, sqrt, revolve and
online checkpointing and prints what each bought and cost, all measured in
that run: step evaluations (checked against the binomial optimum), bytes held
by the tape, the tracemalloc peak, wall time, and the largest difference of
each gradient from store_all's (which must be exactly zero).

``remat schedule`` prints a schedule's actions and totals and can draw it.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from pathlib import Path

from . import schedules as S
from .tape import Tape
from .workloads import WORKLOADS, make_workload

COMPARED = ("store_all", "sqrt", "revolve", "online")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _count(name, minimum, maximum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{name} must be between {minimum} and {maximum}, got {value}"
            )
        return value

    return parse


def _figure_path(text):
    """Where to write a figure: a file in an existing folder (.png if no extension given)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name, e.g. x.png")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    return str(path if path.suffix else path.with_suffix(".png"))


def build_parser():
    parser = _Parser(prog="remat", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    compare = commands.add_parser(
        "compare", help="run a workload under each schedule and compare memory, work and time"
    )
    compare.add_argument("--workload", default="resmlp", choices=sorted(WORKLOADS))
    compare.add_argument("--steps", type=_count("--steps", 1, 10**6), default=200)
    compare.add_argument("--snapshots", type=_count("--snapshots", 1, 10**4), default=8)
    compare.add_argument(
        "--plot", metavar="FILE", type=_figure_path, help="write a figure of memory and time"
    )
    schedule = commands.add_parser("schedule", help="print and draw one schedule")
    schedule.add_argument("--steps", type=_count("--steps", 1, 10**7), required=True)
    schedule.add_argument("--snapshots", type=_count("--snapshots", 1, 10**4))
    schedule.add_argument("--schedule", default="revolve", choices=S.SCHEDULE_NAMES)
    schedule.add_argument(
        "--plot", metavar="FILE", type=_figure_path, help="write the schedule diagram"
    )
    schedule.add_argument(
        "--show", type=int, default=60, help="print actions if at most this many steps"
    )
    return parser


def _progress(items, desc):
    """A progress bar on a terminal (if tqdm is installed), the plain items otherwise."""
    if not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, leave=False)


def _tape_for(name, snapshots, trace):
    if name in ("store_all", "sqrt"):
        return Tape(schedule=name, trace=trace)
    return Tape(snapshots=snapshots, schedule=name, trace=trace)


def measure(workload_name, steps, snapshots, name, trace=False):
    """One run of the workload under schedule ``name``: a dict of measured figures."""
    workload = make_workload(workload_name, steps=steps)
    tape = _tape_for(name, snapshots, trace)  # a trace costs memory: only for --plot
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    start = time.perf_counter()
    loss, grads = workload.loss_and_gradients(tape, online=name == "online")
    seconds = time.perf_counter() - start
    traced = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    budget = tape.stats.snapshots
    # The binomial optimum assumes one step's tape at a time; sqrt keeps a whole
    # segment's tapes, so it sits outside that model (no optimum to check).
    if name == "store_all":
        optimum = steps  # every step taped once: nothing to recompute
    else:
        optimum = None if name == "sqrt" else S.optimal_forward_steps(steps, budget)
    return dict(
        schedule=name,
        snapshots=budget,
        stats=tape.stats,
        optimum=optimum,
        traced=traced,
        seconds=seconds,
        loss=loss,
        grads=grads,
        tape=tape,
        state_bytes=workload.state_bytes,
    )


def compare(args, out=None):
    out = out or sys.stdout
    if args.plot:
        from .plot import _pyplot

        _pyplot()  # fail now, not after the runs, if matplotlib is missing
    rows = [
        measure(args.workload, args.steps, args.snapshots, name, trace=bool(args.plot))
        for name in _progress(COMPARED, "schedules")
    ]
    reference = rows[0]["grads"]
    failures = []
    lines = [
        f"workload {args.workload} ({make_workload(args.workload, args.steps).description}), "
        f"{args.steps} steps, one state = {rows[0]['state_bytes'] / 1024:.1f} KiB",
        "",
        f"{'schedule':<10} {'slots':>5} {'forward':>8} {'optimum':>8} {'factor':>6} "
        f"{'tape MiB':>9} {'traced MiB':>10} {'time s':>7} {'max |grad diff|':>16}",
    ]
    for row in rows:
        stats = row["stats"]
        diff = max(float(abs(g - r).max()) for g, r in zip(row["grads"], reference))
        if diff != 0.0:
            failures.append(f"{row['schedule']}: gradients differ from store_all by {diff:g}")
        if row["schedule"] == "revolve" and stats.forward_steps != row["optimum"]:
            failures.append(
                f"revolve: {stats.forward_steps} step evaluations, the optimum is {row['optimum']}"
            )
        lines.append(
            f"{row['schedule']:<10} {row['snapshots']:>5} {stats.forward_steps:>8} "
            f"{row['optimum'] or '-':>8} {stats.forward_steps / args.steps:>6.2f} "
            f"{stats.peak_bytes / 2**20:>9.3f} {row['traced'] / 2**20:>10.3f} "
            f"{row['seconds']:>7.3f} {diff:>16.3g}"
        )
    lines += [
        "",
        "slots: snapshot budget; forward: step evaluations counted by the executor; optimum: "
        "the binomial minimum for that budget (sqrt keeps a whole segment of step tapes, "
        "outside that model); tape MiB: most bytes the loop held; traced MiB: "
        "tracemalloc peak of the whole forward + backward.",
    ]
    if args.plot:
        _compare_figure(rows, args).savefig(args.plot, dpi=110, bbox_inches="tight")
        lines.append(f"figure written to {args.plot}")
    lines += failures or ["gradients identical under every schedule"]
    print("\n".join(lines), file=out)
    return 1 if failures else 0


def _compare_figure(rows, args):
    from .plot import _pyplot, memory_timeline

    plt = _pyplot()
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(14, 4))
    names = [r["schedule"] for r in rows]
    left.bar(names, [r["stats"].peak_bytes / 2**20 for r in rows], color="tab:blue")
    left.set_ylabel("peak MiB held by the loop")
    middle.bar(names, [r["seconds"] for r in rows], color="tab:red")
    middle.set_ylabel("wall time (s), forward + backward")
    for r in rows:
        memory_timeline(r["tape"], ax=right, label=r["schedule"])
    right.set_yscale("log")
    fig.suptitle(f"remat compare: {args.workload}, {args.steps} steps, {args.snapshots} snapshots")
    return fig


def schedule(args, out=None):
    out = out or sys.stdout
    if args.schedule in ("revolve", "online", "periodic") and args.snapshots is None:
        print(
            f"remat schedule: error: --schedule {args.schedule} needs --snapshots", file=sys.stderr
        )
        return 2
    if args.schedule in ("store_all", "sqrt") and args.snapshots is not None:
        print(
            f"remat schedule: error: --schedule {args.schedule} takes no --snapshots",
            file=sys.stderr,
        )
        return 2
    online = args.schedule == "online"
    sched = S.make_schedule(
        args.schedule, steps=None if online else args.steps, snapshots=args.snapshots
    )
    if args.steps <= args.show:
        actions = iter(sched)
        position = 0
        for action in actions:
            print(f"  {action!r}", file=out)
            if isinstance(action, (S.Advance, S.Tape)):
                position = action.stop
                if online and position == args.steps and isinstance(action, S.Tape):
                    actions.finish(args.steps)
    sim = S.simulate(sched, steps=args.steps if online else None)
    if args.schedule in ("revolve", "online"):
        optimum = S.optimal_forward_steps(args.steps, args.snapshots)
        comparison = f"the binomial optimum with {args.snapshots} slots is {optimum}"
    else:  # these keep several step tapes at once: outside the binomial model
        comparison = f"it keeps up to {sim.peak_tapes} step tapes at once"
    print(
        f"{sched!r}: {sim.forward_steps} step evaluations ({sim.advances} untaped, "
        f"{sim.taped_steps} taped), {sim.reversed_steps} reversed, peak {sim.peak_snapshots} "
        f"snapshots; {comparison}",
        file=out,
    )
    if args.plot:
        from .plot import schedule_diagram

        schedule_diagram(sched, steps=args.steps if online else None).savefig(
            args.plot, dpi=110, bbox_inches="tight"
        )
        print(f"diagram written to {args.plot}", file=out)
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return {"compare": compare, "schedule": schedule}[args.command](args)
    except (ValueError, ImportError, OSError) as error:
        print(f"remat {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (remat ... | head): not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so the exit flush cannot fail
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
