"""The command line: ``remat compare`` and ``remat schedule``.

``remat compare`` runs one real workload under store_all, sqrt, revolve and
online checkpointing and prints what each bought and cost, all measured:
step evaluations (checked against the binomial optimum), bytes held by the
tape, the tracemalloc peak, wall time, and the largest difference of each
gradient from store_all's (which must be exactly zero).  Wall time comes from
runs made without tracemalloc (which slows allocation down several times),
repeated with the schedules interleaved, and is their median; memory comes
from separate runs under tracemalloc.

``remat compare --memory 2MiB`` draws the budget curve instead: for byte
budgets from the least any plan needs up to the one given, the time of
revolve with the most slots that fit, of mixed checkpointing with the most
slots that fit and of the optimal plan (:class:`remat.schedules.Optimal`),
each measured (the chain's own forward and backward, median of the repeats)
beside what the plan predicts from the measured costs, with the bytes held
(never above the budget) and the gradients' difference from store_all's.

``remat compare --workload transformer`` compares ways of checkpointing a
chain of blocks instead (:mod:`remat.blockwise`): no checkpointing,
``rm.checkpoint`` around every block, the same with
``policy=rm.policies.save_ops("matmul")``, and revolve over the blocks, with
the memory, time, blocks and ops evaluated again and gradient agreement of
each.

``remat schedule`` prints a schedule's actions and totals and can draw it.

Both take ``--format table|csv|json``; json carries every figure measured plus
the versions of Python, NumPy and remat and a description of the machine.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import re
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from . import __version__, backend, blockwise
from . import memory as M
from . import schedules as S
from .budget import Tape
from .units import binary_unit, format_bytes
from .workloads import WORKLOADS, make_workload

COMPARED = ("store_all", "sqrt", "revolve", "online")
CURVE = ("revolve", "mixed", "optimal")  # remat compare --memory: one curve each
FORMATS = ("table", "csv", "json")
MiB = 2**20
BLOCKWISE = ("transformer",)  # chains of blocks: compared by remat.blockwise
DEFAULTS = dict(steps=200, snapshots=8)  # --steps and --snapshots, unless below
BLOCKWISE_DEFAULTS = dict(steps=8, snapshots=3)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it has none (None) or is a flag."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

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


def _size(text):
    try:
        return M.parse_bytes(text, "--memory")
    except (TypeError, ValueError) as error:
        # argparse says "argument --memory:" already: drop parse_bytes' own prefix.
        message = str(error).removeprefix("--memory: ").removeprefix("memory=")
        raise argparse.ArgumentTypeError(message) from None


NEGATIVE_SIZE = re.compile(r"-[0-9.]")  # "-3MiB": a (refused) value, not an option


def _sizes_as_values(argv):
    """``--memory -3MiB`` as ``--memory=-3MiB``: argparse takes a value that starts
    with "-" for an option unless it is a bare number, and would answer "expected
    one argument" instead of saying what is wrong with the size."""
    argv = list(argv)
    for k in range(len(argv) - 1, 0, -1):
        if argv[k - 1] == "--memory" and NEGATIVE_SIZE.match(argv[k]):
            argv[k - 1 : k + 1] = [f"--memory={argv[k]}"]
    return argv


def _figure_path(text):
    """Where to write a figure, checked before any work is done.

    The folder must exist and be writable, matplotlib must be importable, and
    the extension must be a format matplotlib writes (``.png`` if none is given).
    """
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; give a file name, e.g. x.png")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"the folder of {text!r} is not writable")
    try:
        from .plot import _pyplot

        _pyplot()
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise argparse.ArgumentTypeError(
            "--plot needs matplotlib: pip install 'remat[plot]'"
        ) from None
    if not path.suffix:
        path = path.with_suffix(".png")
    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix[1:].lower() not in formats:
        raise argparse.ArgumentTypeError(
            f"cannot write a {path.suffix!r} figure; use one of "
            + ", ".join(f".{f}" for f in sorted(formats))
        )
    return str(path)


def _output_options(command, figure):
    command.add_argument("--format", default="table", choices=FORMATS, help="output format")
    command.add_argument(
        "--plot",
        metavar="FILE",
        type=_figure_path,
        help=f"also write {figure} (.png if no extension; default: no figure)",
    )


def build_parser():
    parser = _Parser(
        prog="remat",
        description="Reverse-mode autodiff with checkpointing: compare schedules on a real "
        "workload, or print and draw one schedule.",
        epilog="Run 'remat COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    compare = commands.add_parser(
        "compare",
        help="run a workload under each schedule and compare memory, work and time",
        description="Run one workload under store_all, sqrt, revolve and online "
        "checkpointing; time runs without tracemalloc, measure memory in separate runs "
        "under tracemalloc, and check that every gradient equals store_all's exactly.",
    )
    compare.add_argument(
        "--workload", default="resmlp", choices=sorted(WORKLOADS), help="the loop to run"
    )
    compare.add_argument(
        "--steps",
        type=_count("--steps", 1, 10**6),
        help="loop length n, or number of blocks (default: 200; 8 for transformer)",
    )
    compare.add_argument(
        "--snapshots",
        type=_count("--snapshots", 1, 10**4),
        help="snapshot budget of revolve and online (store_all and sqrt take none) "
        "(default: 8; 3 for transformer)",
    )
    compare.add_argument(
        "--repeats",
        type=_count("--repeats", 1, 1000),
        default=3,
        help="timed runs per schedule, interleaved across schedules; time is their median",
    )
    compare.add_argument(
        "--memory",
        metavar="BYTES",
        type=_size,
        help="draw the budget curve up to this many bytes (e.g. 2MiB, 512KiB, 3MB): time "
        "against bytes for revolve, mixed and the optimal plan, measured and predicted "
        "(default: no budget curve)",
    )
    compare.add_argument(
        "--budgets",
        type=_count("--budgets", 1, 100),
        help="with --memory: how many budgets on the curve (spaced evenly on a log scale "
        "from the least a plan needs up to --memory; default 5)",
    )
    _output_options(compare, "a figure of memory, step evaluations and time")
    schedule = commands.add_parser(
        "schedule",
        help="print and draw one schedule",
        description="Print a schedule's actions (for short loops) and what it costs, "
        "counted by schedules.simulate.",
    )
    schedule.add_argument(
        "--steps", type=_count("--steps", 1, 10**7), required=True, help="loop length n (required)"
    )
    schedule.add_argument(
        "--snapshots",
        type=_count("--snapshots", 1, 10**4),
        help="snapshot budget (no default: required by revolve, periodic, online and mixed; "
        "refused by store_all and sqrt)",
    )
    schedule.add_argument(
        "--schedule", default="revolve", choices=S.SCHEDULE_NAMES, help="which schedule"
    )
    schedule.add_argument(
        "--show",
        type=_count("--show", 0, 10**7),
        default=60,
        help="list the actions if the loop has at most this many steps",
    )
    _output_options(schedule, "the schedule diagram")
    return parser


# --- what every machine-readable result carries --------------------------------------


def environment():
    """Versions and machine, for the json output."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        cpus = None
    return dict(
        versions=dict(
            python=platform.python_version(),
            numpy=backend.xp.__version__,
            remat=__version__,
        ),
        machine=dict(
            platform=platform.platform(),
            machine=platform.machine(),
            processor=platform.processor(),
            python_implementation=platform.python_implementation(),
            cpu_count=os.cpu_count(),
            cpus_usable=cpus,
        ),
    )


def _write_csv(rows, out):
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def _write_json(document, out):
    json.dump(document, out, indent=2)
    out.write("\n")


def _bytes_column(rows, key):
    """The unit of a table's column of byte counts: (name, size, decimals), the
    largest binary unit its largest value fills (so small runs print in KiB or B,
    not as a column of 0.000 MiB)."""
    return binary_unit(row[key] for row in rows)


def _in(count, unit):
    """``count`` bytes written in a column's unit (from :func:`_bytes_column`)."""
    _, size, decimals = unit
    return f"{count / size:.{decimals}f}"


# --- compare -------------------------------------------------------------------------


def _progress(items, desc):
    """A progress bar on a terminal (if tqdm is installed), the plain items otherwise."""
    if not sys.stderr.isatty():
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, leave=False)


def _tape_for(name, snapshots, trace=False):
    if name in ("store_all", "sqrt"):
        return Tape(schedule=name, trace=trace)
    return Tape(snapshots=snapshots, schedule=name, trace=trace)


def run_once(workload_name, steps, snapshots, name, memory=False, trace=False):
    """One forward + backward of the workload under schedule ``name``.

    With ``memory=True`` the run is made under tracemalloc and its peak is
    returned as ``traced`` (its time, distorted by tracing, is not returned);
    otherwise it is timed and ``seconds`` is returned.  ``trace=True`` makes
    the tape record bytes held over time (for the figure; it costs memory).
    """
    workload = make_workload(workload_name, steps=steps)
    tape = _tape_for(name, snapshots, trace)
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
    # The binomial optimum assumes one step's tape at a time; sqrt keeps a whole
    # segment's tapes, so it sits outside that model (no optimum to check).
    if name == "store_all":
        return steps  # every step taped once: nothing to recompute
    return None if name == "sqrt" else S.optimal_forward_steps(steps, budget)


def _max_diff(grads, reference):
    return max(float(abs(g - r).max()) for g, r in zip(grads, reference))


def measure(workload_name, steps, snapshots, repeats=3, trace=False):
    """Every schedule of :data:`COMPARED`, measured: a list of rows (dicts).

    First one run per schedule under tracemalloc (memory; it also warms up),
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
    total = len(COMPARED) * (repeats + 1 + bool(trace))
    runs = iter(_progress(range(total), "runs"))

    def run(name, **kwargs):
        next(runs, None)
        return run_once(workload_name, steps, snapshots, name, **kwargs)

    first = {name: run(name, memory=True) for name in COMPARED}
    reference = first["store_all"]["grads"]
    diffs = {name: _max_diff(first[name]["grads"], reference) for name in COMPARED}
    losses = {name: {first[name]["loss"]} for name in COMPARED}
    seconds = {name: [] for name in COMPARED}
    for round_ in range(repeats):
        shift = round_ % len(COMPARED)
        for name in COMPARED[shift:] + COMPARED[:shift]:
            timed = run(name)
            seconds[name].append(timed["seconds"])
            diffs[name] = max(diffs[name], _max_diff(timed["grads"], reference))
            losses[name].add(timed["loss"])
    traced = {name: run(name, trace=True)["tape"] for name in COMPARED} if trace else {}
    rows = []
    for name in COMPARED:
        stats = first[name]["stats"]
        budget = stats.snapshots
        rows.append(
            dict(
                schedule=name,
                snapshots=budget,
                steps=stats.steps,
                forward_steps=stats.forward_steps,
                recomputed_steps=stats.recomputed_steps,
                optimum=_optimum(name, steps, budget),
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
        if name == "revolve" and row["forward_steps"] != row["optimum"]:
            failures.append(
                f"revolve: {row['forward_steps']} step evaluations, the optimum is {row['optimum']}"
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


def _compare_heading(args, description):
    """The fields every ``remat compare`` json document starts with."""
    return dict(
        command="compare",
        workload=args.workload,
        description=description,
        steps=args.steps,
        repeats=args.repeats,
    )


def _resolve_defaults(args):
    defaults = BLOCKWISE_DEFAULTS if args.workload in BLOCKWISE else DEFAULTS
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def compare(args, out=None):
    out = out or sys.stdout
    _resolve_defaults(args)
    if args.memory is not None:
        return compare_memory(args, out)
    if args.budgets is not None:
        print("remat compare: error: --budgets needs --memory", file=sys.stderr)
        return 2
    if args.workload in BLOCKWISE:
        return compare_blocks(args, out)
    rows = measure(args.workload, args.steps, args.snapshots, args.repeats, bool(args.plot))
    failures = _check(rows)
    description = make_workload(args.workload, steps=1).description
    if args.plot:
        _compare_figure(rows, args).savefig(args.plot, dpi=110, bbox_inches="tight")
    public = [{key: row[key] for key in PUBLIC} for row in rows]
    if args.format == "json":
        document = dict(
            **_compare_heading(args, description),
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
        _write_json(document, out)
    elif args.format == "csv":
        for row in public:
            row["seconds_runs"] = " ".join(f"{s:.6f}" for s in row["seconds_runs"])
        _write_csv(public, out)
    else:
        _compare_table(rows, args, description, failures, out)
    if failures and args.format != "table":
        print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


def _compare_table(rows, args, description, failures, out):
    tape = _bytes_column(rows, "tape_peak_bytes")
    traced = _bytes_column(rows, "traced_peak_bytes")
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
            f"{_in(row['tape_peak_bytes'], tape):>9} {_in(row['traced_peak_bytes'], traced):>10} "
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


# --- compare --workload transformer: ways of checkpointing a chain of blocks ----------

BLOCKS_PUBLIC = (
    "mode",
    "label",
    "blocks",
    "block_evaluations",
    "recomputed_blocks",
    "recomputed_ops",
    "optimum",
    "traced_peak_bytes",
    "memory_ratio",
    "tape_peak_bytes",
    "seconds",
    "time_ratio",
    "seconds_runs",
    "max_grad_diff",
    "bit_identical",
    "loss",
)


OP_COLUMNS = (("matmul", 6), ("einsum", 6), ("softmax", 7))  # recomputed ops shown


def compare_blocks(args, out):
    if args.plot:
        print(
            f"remat compare: error: --plot is not drawn for --workload {args.workload}; "
            "notebook 04 draws these figures",
            file=sys.stderr,
        )
        return 2
    workload = make_workload(args.workload, steps=args.steps)
    description = workload.description
    rows = blockwise.measure(workload, args.snapshots, args.repeats)
    failures = blockwise.failures_of(rows)
    public = [{key: row[key] for key in BLOCKS_PUBLIC} for row in rows]
    if args.format == "json":
        document = dict(
            **_compare_heading(args, description),
            snapshots=args.snapshots,
            method=(
                f"seconds: median of {args.repeats} runs per mode without tracemalloc, modes "
                "interleaved; traced_peak_bytes: one separate run per mode under tracemalloc; "
                "block_evaluations: counted by wrapping each block; recomputed_ops: op "
                "evaluations during backward (rm.count_ops); gradients compared bit for bit "
                "with no checkpointing"
            ),
            rows=public,
            failures=failures,
            ok=not failures,
            **environment(),
        )
        _write_json(document, out)
    elif args.format == "csv":
        for row in public:
            row["seconds_runs"] = " ".join(f"{s:.6f}" for s in row["seconds_runs"])
            row["recomputed_ops"] = " ".join(f"{k}={v}" for k, v in row["recomputed_ops"].items())
        _write_csv(public, out)
    else:
        traced = _bytes_column(rows, "traced_peak_bytes")
        lines = [
            f"workload {args.workload} ({description})",
            "",
            f"{'mode':<11} {'block evals':>11} {'matmul':>6} {'einsum':>6} {'softmax':>7} "
            f"{'all ops':>7} {'traced ' + traced[0]:>10} {'memory':>7} {'time s':>7} {'time':>6} "
            f"{'gradients':>13}",
        ]
        for row in rows:
            ops = row["recomputed_ops"]
            lines.append(
                f"{row['mode']:<11} {row['block_evaluations']:>11} "
                + "".join(f" {ops.get(op, 0):>{w}}" for op, w in OP_COLUMNS)
                + f" {sum(ops.values()):>7} {_in(row['traced_peak_bytes'], traced):>10} "
                f"{row['memory_ratio']:>6.3f}x {row['seconds']:>7.3f} {row['time_ratio']:>5.2f}x "
                f"{'bit-identical' if row['bit_identical'] else 'DIFFER':>13}"
            )
        lines += [""] + [f"{row['mode']}: {row['label']}" for row in rows]
        lines += [
            "",
            "block evals: evaluations of the blocks, counted; matmul, einsum, softmax, all ops: "
            "evaluations of those ops during backward (rm.count_ops), what was computed again; "
            "traced: tracemalloc peak of the whole forward + backward, in a separate "
            "run; memory and time: ratios to no checkpointing; time s: median of "
            f"{args.repeats} runs without tracemalloc, modes interleaved; gradients: compared "
            "bit for bit with no checkpointing.",
        ]
        lines += failures or ["gradients bit-identical to no checkpointing in every mode"]
        print("\n".join(lines), file=out)
    if failures and args.format != "table":
        print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


# --- compare --memory: the budget curve ----------------------------------------------


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


def _curve_tape(name, budget):
    return Tape(memory=budget, schedule=None if name == "optimal" else name)


def measure_curve(workload_name, steps, memory, count=5, repeats=3):
    """Rows of the budget curve: every budget, every schedule of :data:`CURVE`.

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
    budgets = curve_budgets(least, memory, count)
    cells = [(b, name) for b in budgets for name in CURVE]
    rows, seconds = {}, {cell: [] for cell in cells}
    total = len(cells) * (repeats + 1)
    runs = iter(_progress(range(total), "runs"))
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
                    max_grad_diff=_max_diff(grads, reference),
                    stats=stats.to_dict(),  # of the planning run (json only)
                )
                continue
            seconds[cell].append(stats.seconds)
            row = rows[cell]
            row["max_grad_diff"] = max(row["max_grad_diff"], _max_diff(grads, reference))
            row["peak_bytes"] = max(row["peak_bytes"], stats.peak_bytes)
    out = []
    for cell in cells:
        row = rows[cell]
        if row["fits"]:
            row["seconds"] = statistics.median(seconds[cell])
            row["seconds_runs"] = seconds[cell]
            row["ratio"] = row["seconds"] / row["predicted_seconds"]
        out.append(row)
    return out, costs


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
    rows, costs = measure_curve(args.workload, args.steps, args.memory, count, args.repeats)
    failures = _check_curve(rows)
    description = make_workload(args.workload, steps=1).description
    if args.plot:
        _curve_figure(rows, args).savefig(args.plot, dpi=110, bbox_inches="tight")
    public = [{key: row.get(key) for key in CURVE_PUBLIC} for row in rows]
    if args.format == "json":
        _write_json(
            dict(
                **_compare_heading(args, description),
                memory=args.memory,
                least_bytes=S.minimum_bytes(costs),
                store_all_model_bytes=sum(costs.tape_bytes),
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
        _write_csv(public, out)
    else:
        budget = _bytes_column(rows, "budget")
        held = _bytes_column([row for row in rows if row["fits"]], "peak_bytes")
        lines = [
            f"workload {args.workload} ({description}), {args.steps} steps; budget curve up "
            f"to {format_bytes(args.memory)}",
            f"measured: one step forward {costs.forward_time[0] * 1e3:.3f} ms, taped and "
            f"reversed {costs.reverse_time[0] * 1e3:.3f} ms, state {costs.state_bytes[0]} B, "
            f"tape {costs.tape_bytes[0]} B (step 0); least budget "
            f"{format_bytes(S.minimum_bytes(costs))}",
            "",
            f"{'budget ' + budget[0]:>10} {'schedule':<8} {'slots':>5} {'forward':>7} "
            f"{'held ' + held[0]:>9} "
            f"{'predicted s':>11} {'measured s':>10} {'ratio':>6} {'max |grad diff|':>16}",
        ]
        for row in rows:
            head = f"{_in(row['budget'], budget):>10} {row['schedule']:<8}"
            if not row["fits"]:
                lines.append(f"{head} does not fit (not even one slot)")
                continue
            lines.append(
                f"{head} {row['snapshots']:>5} {row['forward_steps']:>7} "
                f"{_in(row['peak_bytes'], held):>9} {row['predicted_seconds']:>11.4f} "
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
    from .plot import _pyplot

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
    ax.set_xlabel("budget (MiB, log)")
    ax.set_ylabel("forward + backward of the chain (s)")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title(f"remat compare --memory: {args.workload}, {args.steps} steps", fontsize=10)
    fig.tight_layout()
    return fig


COLORS = {  # one colour per schedule, in every panel
    "store_all": "tab:gray",
    "sqrt": "tab:orange",
    "revolve": "tab:red",
    "online": "tab:purple",
}


def _compare_figure(rows, args):
    from .plot import _pyplot, memory_timeline

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
    held.set_yscale("log")
    held.set_ylabel("peak MiB (log)")
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
    seconds.bar(names, [r["seconds"] for r in rows], color=colors)
    seconds.set_ylabel("wall time (s), forward + backward")
    seconds.set_title(f"median of {args.repeats} runs without tracemalloc", fontsize=9)
    for row in rows:
        memory_timeline(
            row["tape"], ax=timeline, label=row["schedule"], color=COLORS[row["schedule"]]
        )
    timeline.set_yscale("log")
    timeline.set_ylabel("MiB held by the loop (log)")
    timeline.set_title("held over the run (a traced run)", fontsize=9)
    fig.suptitle(f"remat compare: {args.workload}, {args.steps} steps, {args.snapshots} snapshots")
    fig.tight_layout()
    return fig


# --- schedule ------------------------------------------------------------------------


def _actions(sched, steps, online):
    """The schedule's actions, finishing an online schedule after ``steps`` steps."""
    actions = iter(sched)
    for action in actions:
        yield action
        if online and isinstance(action, S.Tape) and action.stop == steps:
            actions.finish(steps)


def _action_dict(action):
    return {"action": type(action).__name__, **dict(zip(action._fields, action))}


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
    sim = S.simulate(sched, steps=args.steps if online else None)
    optimum = None
    if args.schedule in ("revolve", "online"):
        optimum = S.optimal_forward_steps(args.steps, args.snapshots)
    shown = args.steps <= args.show
    if args.plot:  # before the output, so that a reader going away cannot stop it
        from .plot import schedule_diagram

        schedule_diagram(sched, steps=args.steps if online else None).savefig(
            args.plot, dpi=110, bbox_inches="tight"
        )
    if args.format == "table":
        if shown:
            for action in _actions(sched, args.steps, online):
                print(f"  {action!r}", file=out)
        if optimum is not None:
            comparison = f"the binomial optimum with {args.snapshots} slots is {optimum}"
        else:  # these keep several step tapes at once: outside the binomial model
            comparison = f"it keeps up to {sim.peak_tapes} step tapes at once"
        print(
            f"{sched!r}: {sim.forward_steps} step evaluations ({sim.advances} untaped, "
            f"{sim.taped_steps} taped), {sim.reversed_steps} reversed, peak "
            f"{sim.peak_snapshots} snapshots; {comparison}",
            file=out,
        )
        if args.plot:
            print(f"diagram written to {args.plot}", file=out)
        return 0
    totals = dict(
        schedule=args.schedule,
        description=repr(sched),
        steps=sim.steps,
        snapshots=args.snapshots,
        forward_steps=sim.forward_steps,
        advances=sim.advances,
        taped_steps=sim.taped_steps,
        reversed_steps=sim.reversed_steps,
        peak_snapshots=sim.peak_snapshots,
        peak_tapes=sim.peak_tapes,
        actions=sim.actions,
        optimum=optimum,
    )
    if args.format == "csv":
        _write_csv([totals], out)
        return 0
    listed = [_action_dict(a) for a in _actions(sched, args.steps, online)] if shown else None
    _write_json(
        dict(command="schedule", **totals, action_list=listed, figure=args.plot, **environment()),
        out,
    )
    return 0


def _quiet_exit_on_broken_pipe():
    """The reader went away (``remat ... | head``): stop writing, say nothing.

    Python flushes stdout once more at exit, which would fail again and print
    a message; pointing the file descriptor at /dev/null makes that flush
    harmless.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout is not a real file: nothing to flush later
        pass


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(_sizes_as_values(sys.argv[1:] if argv is None else argv))
    if args.command is None:
        parser.print_help()
        return 0
    try:
        status = {"compare": compare, "schedule": schedule}[args.command](args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except BrokenPipeError:  # before OSError, which it is a kind of
        _quiet_exit_on_broken_pipe()
        return 0
    except (ValueError, ImportError, OSError) as error:
        print(f"remat {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
