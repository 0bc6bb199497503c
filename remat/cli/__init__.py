"""The command line: ``remat compare`` and ``remat schedule``.

``remat compare`` runs one real workload under store_all, sqrt, revolve and
online checkpointing (or the ``--schedules`` given, mixed, periodic and the
optimal plan among them) and prints what each bought and cost, all measured:
step evaluations (checked against the binomial optimum), bytes held by the
tape, the tracemalloc peak, wall time, and the largest difference of each
gradient from store_all's (which must be exactly zero).  Wall time comes from
runs made without tracemalloc (which slows allocation down several times),
repeated with the schedules interleaved, and is their median; memory comes
from separate runs under tracemalloc.

A comparison predicted to take over ten seconds says so before it starts,
with its step evaluations, and shows its progress on stderr.

``remat compare --memory 2MiB`` draws the budget curve instead: for byte
budgets from where it is worth plotting (:func:`.curve.worth_plotting`) up to
the one given, the time of
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

``remat compare --graph unet`` compares ways of rematerializing a graph
workload (:mod:`remat.graph_workloads`: a U-Net, a ResNet, a transformer op by
op, an adaptive ODE solver) at byte budgets instead (:mod:`.graph`): store-all,
``rm.checkpoint`` around each block, DTR with each heuristic and the optimal
plan, measured by :func:`remat.graph_compare.compare_graph`.

``remat schedule`` prints a schedule's actions and totals and can draw it:
any named schedule, the optimal plan under unit costs, and the disk schedules.

Both take ``--format table|csv|json``; json carries every figure measured plus
the versions of Python, NumPy and remat and a description of the machine.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import __version__
from .. import schedules as S
from ..workloads import WORKLOADS
from .blocks import compare_blocks
from .common import (
    Parser,
    cost_option,
    count_option,
    names_option,
    output_options,
    size_option,
    sizes_as_values,
)
from .curve import compare_memory
from .graph import add_graph_options, compare_graph_workload, refused_with_graph
from .listing import DISK_COST, LISTED, schedule
from .table import COMPARABLE, COMPARED, compare_schedules

__all__ = ["build_parser", "compare", "main", "schedule"]

BLOCKWISE = ("transformer",)  # chains of blocks: compared by remat.blockwise
DEFAULTS = dict(steps=200, snapshots=8)  # --steps and --snapshots, unless below
BLOCKWISE_DEFAULTS = dict(steps=8, snapshots=3)


def _usage_error(message):
    print(f"remat compare: error: {message}", file=sys.stderr)
    return 2


def compare(args, out=None):
    """``remat compare``: the graph methods, the budget curve, the blocks or the schedules,
    by the options."""
    out = out or sys.stdout
    if args.graph is not None:
        refused = refused_with_graph(args)
        if refused:
            return _usage_error(
                "--graph compares a graph workload, not the loops and chains of --workload: "
                f"drop {', '.join(refused)}"
            )
        return compare_graph_workload(args, out)
    for name in ("size", "methods", "time_limit"):
        if getattr(args, name) is not None:
            return _usage_error(f"--{name.replace('_', '-')} needs --graph")
    args.workload = args.workload or "resmlp"
    if args.budgets is not None:
        if args.memory is None:
            return _usage_error("--budgets needs --memory or --graph")
        try:
            (args.budgets,) = map(count_option("--budgets", 1, 100), args.budgets)
        except ValueError:  # several values
            return _usage_error("--budgets with --memory is one count, the budgets on the curve")
        except argparse.ArgumentTypeError as error:
            return _usage_error(error)
    defaults = BLOCKWISE_DEFAULTS if args.workload in BLOCKWISE else DEFAULTS
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.memory is not None:
        return compare_memory(args, out)
    if args.workload in BLOCKWISE:
        return compare_blocks(args, out)
    return compare_schedules(args, out)


def build_parser():
    parser = Parser(
        prog="remat",
        description="Reverse-mode autodiff with checkpointing: compare schedules on a real "
        "workload, or print and draw one schedule.",
        epilog="Run 'remat COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    compare = commands.add_parser(
        "compare",
        help="run a workload under each schedule and compare memory, work and time",
        description="Run one workload under store_all, sqrt, revolve and online "
        "checkpointing (or, with --graph, a graph workload under store-all, rm.checkpoint per "
        "block, DTR and the optimal plan at byte budgets); time runs without tracemalloc, "
        "measure memory in separate runs under tracemalloc, and check that every gradient "
        "equals store_all's exactly.",
    )
    compare.add_argument(
        "--workload", choices=sorted(WORKLOADS), help="the loop to run (default: resmlp)"
    )
    add_graph_options(compare)
    compare.add_argument(
        "--steps",
        type=count_option("--steps", 1, 10**6),
        help="loop length n, or number of blocks (default: 200; 8 for transformer)",
    )
    compare.add_argument(
        "--snapshots",
        type=count_option("--snapshots", 1, 10**4),
        help="snapshot budget of revolve, online, periodic and mixed (store_all and sqrt take "
        "none; optimal takes the bytes revolve held with it) (default: 8; 3 for transformer)",
    )
    compare.add_argument(
        "--schedules",
        type=names_option("--schedules", COMPARABLE),
        metavar="NAMES",
        help="the schedules to compare, separated by commas, from "
        f"{','.join(COMPARABLE)}; store_all always runs, as the reference; optimal is "
        f"Tape(memory=) in the bytes revolve held (default: {','.join(COMPARED)})",
    )
    compare.add_argument(
        "--repeats",
        type=count_option("--repeats", 1, 1000),
        default=3,
        help="timed runs per schedule, interleaved across schedules; time is their median",
    )
    compare.add_argument(
        "--memory",
        metavar="BYTES",
        type=size_option,
        help="draw the budget curve up to this many bytes (e.g. 2MiB, 512KiB, 3MB): time "
        "against bytes for revolve, mixed and the optimal plan, measured and predicted "
        "(default: no budget curve)",
    )
    compare.add_argument(
        "--budgets",
        nargs="+",
        metavar="B",
        help="with --graph: the budgets, each a share of store-all's saved bytes in (0, 1] "
        "or a number of bytes (e.g. 0.5 0.33 256KiB; default: 0.5 0.33); with --memory: how "
        "many budgets on the curve, one count (spaced evenly on a log scale from where the "
        "curve is worth plotting up to --memory; default 5)",
    )
    output_options(compare, "a figure of memory, step evaluations and time")
    schedule = commands.add_parser(
        "schedule",
        help="print and draw one schedule",
        description="Print a schedule's actions (for short loops) and what it costs, "
        "counted by schedules.simulate.",
    )
    schedule.add_argument(
        "--steps",
        type=count_option("--steps", 1, 10**7),
        required=True,
        help="loop length n (required)",
    )
    schedule.add_argument(
        "--snapshots",
        type=count_option("--snapshots", 1, 10**4),
        help="snapshot budget (no default: required by revolve, periodic, online, mixed, "
        "optimal, two_level and disk_revolve; refused by store_all and sqrt)",
    )
    schedule.add_argument(
        "--schedule",
        default="revolve",
        choices=LISTED,
        help="which schedule; optimal: the least-time plan, under unit costs, in the memory "
        "revolve holds with --snapshots; two_level, disk_revolve: memory slots and disk",
    )
    schedule.add_argument(
        "--disk-snapshots",
        type=count_option("--disk-snapshots", 0, 10**4),
        help="disk slots besides the --snapshots memory slots (required by two_level, refused "
        "by the others)",
    )
    for side in ("write", "read"):
        schedule.add_argument(
            f"--{side}-cost",
            type=cost_option(f"--{side}-cost"),
            help=f"two_level, disk_revolve: the time of a disk {side}, in step evaluations "
            f"(default: {DISK_COST:g})",
        )
    schedule.add_argument(
        "--show",
        type=count_option("--show", 0, 10**7),
        default=60,
        help="list the actions if the loop has at most this many steps",
    )
    output_options(schedule, "the schedule diagram")
    return parser


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
    args = parser.parse_args(sizes_as_values(sys.argv[1:] if argv is None else argv))
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
