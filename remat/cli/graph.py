"""``remat compare --graph WORKLOAD``: a graph workload under every way of rematerializing it.

Store-all, ``rm.checkpoint`` placed by hand around each block, DTR with each
heuristic and the optimal plan, at each budget of ``--budgets`` (shares of
store-all's saved bytes, or bytes), measured by :func:`remat.graph_compare.compare_graph`:
time over store-all's, the bytes the tape counted and the tracemalloc peak,
the ops recomputed, the optimal plan's solve time, and whether the gradients
are store-all's bit for bit.  ``--plot`` draws time against memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from .. import graph_compare
from ..graph_workloads import GRAPH_WORKLOADS, make_graph_workload
from ..units import binary_unit, format_bytes
from .common import (
    MiB,
    compare_heading,
    cost_option,
    environment,
    in_unit,
    names_option,
    write_csv,
    write_json,
)

DEFAULT_BUDGETS = ("0.5", "0.33")
CHAIN_ONLY = ("steps", "snapshots", "schedules", "memory")  # options --graph refuses
PUBLIC = [f.name for f in dataclasses.fields(graph_compare.GraphRow)] + ["label"]


def graph_option(text):
    """``--graph``'s type: the name of a graph workload."""
    if text not in GRAPH_WORKLOADS:
        raise argparse.ArgumentTypeError(
            f"unknown graph workload {text!r}; choose one of {', '.join(GRAPH_WORKLOADS)}"
        )
    return text


def positive_option(name):
    """An option's type: a positive finite number (an int if it is whole)."""
    number = cost_option(name)

    def parse(text):
        value = number(text)
        if value == 0:
            raise argparse.ArgumentTypeError(f"{name} must be positive, got {text!r}")
        return int(value) if value.is_integer() else value

    return parse


def add_graph_options(compare):
    """``remat compare``'s options of ``--graph``."""
    methods = ",".join(graph_compare.METHODS)
    compare.add_argument(
        "--graph",
        metavar="WORKLOAD",
        type=graph_option,
        help="compare store-all, rm.checkpoint per block, DTR with each heuristic and the "
        f"optimal plan on a graph workload instead: one of {', '.join(GRAPH_WORKLOADS)} "
        "(default: none: the loops of --workload)",
    )
    size_help = (
        "with --graph: the workload's size, its builder's first parameter (unet's levels, "
        "resnet's stages, transformer_ops' blocks, adaptive_ode's horizon; default: the "
        "builder's)"
    )
    compare.add_argument("--size", type=positive_option("--size"), help=size_help)
    methods_help = (
        f"with --graph: the methods to compare, separated by commas, from {methods}; "
        "store_all always runs, as the reference (default: all)"
    )
    compare.add_argument(
        "--time-limit",
        type=positive_option("--time-limit"),
        metavar="SECONDS",
        help="with --graph: the optimal plan's solve time limit per budget (past it, the LP "
        "relaxation rounded, or DTR, as the row says; default: 30)",
    )
    methods_type = names_option("--methods", graph_compare.METHODS)
    compare.add_argument("--methods", metavar="NAMES", type=methods_type, help=methods_help)


def refused_with_graph(args):
    """The chain options given beside ``--graph`` (they mean nothing to a graph)."""
    given = [f"--{name}" for name in CHAIN_ONLY if getattr(args, name) is not None]
    if args.workload is not None:
        given.insert(0, "--workload")
    return given


def compare_graph_workload(args, out):
    """``remat compare --graph``: the table (or csv, json, figure) of every method."""
    workload = make_graph_workload(args.graph, args.size)
    budgets = args.budgets or DEFAULT_BUDGETS
    methods = args.methods or graph_compare.METHODS
    limit = 30.0 if args.time_limit is None else args.time_limit
    rows = graph_compare.compare_graph(workload, budgets, args.repeats, methods, limit)
    failures = graph_compare.failures_of(rows)
    if args.plot:
        graph_figure(rows, f"remat compare --graph {args.graph}").savefig(
            args.plot, dpi=110, bbox_inches="tight"
        )
    public = [{key: getattr(row, key) for key in PUBLIC} for row in rows]
    saved = rows[0].tape_peak_bytes
    if args.format == "json":
        heading = compare_heading(args, workload.description)
        del heading["steps"]  # a graph has no steps
        write_json(
            dict(
                **{**heading, "workload": args.graph},
                size=args.size,
                store_all_saved_bytes=saved,
                method=(
                    f"seconds: median of {args.repeats} runs per method without tracemalloc, "
                    "methods interleaved; time_ratio: over store_all's; tape_peak_bytes: "
                    "tape.stats.peak_bytes (store_all: the bytes it saves); "
                    "traced_peak_bytes: one separate run per method under tracemalloc; "
                    "gradients compared bit for bit with store_all's"
                ),
                rows=public,
                failures=failures,
                ok=not failures,
                figure=args.plot,
                **environment(),
            ),
            out,
        )
    elif args.format == "csv":
        for row in public:
            row["seconds_runs"] = " ".join(f"{s:.6f}" for s in row["seconds_runs"])
        write_csv(public, out)
    else:
        _table(rows, args, workload.description, saved, failures, out)
    if failures and args.format != "table":
        print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


def _cell(value, spec, width):
    return f"{'-' if value is None else format(value, spec):>{width}}"


def _table(rows, args, description, saved, failures, out):
    held = binary_unit(r.tape_peak_bytes or 0 for r in rows)
    traced = binary_unit(r.traced_peak_bytes or 0 for r in rows)
    lines = [
        f"graph workload {args.graph} ({description}); store-all saves {format_bytes(saved)}",
        "",
        f"{'method':<24} {'budget':>10} {'time s':>8} {'time':>6} {'tape ' + held[0]:>10} "
        f"{'traced ' + traced[0]:>11} {'recomputed':>10} {'solve s':>8} {'predicted':>9} "
        f"{'gradients':>13}",
    ]
    for row in rows:
        head = f"{row.label:<24} {'-' if row.budget is None else format_bytes(row.budget):>10}"
        if not row.available:
            lines.append(f"{head} not available: {row.reason}")
            continue
        lines.append(
            f"{head} {row.seconds:>8.4f} {row.time_ratio:>5.2f}x "
            f"{'-' if row.tape_peak_bytes is None else in_unit(row.tape_peak_bytes, held):>10} "
            f"{in_unit(row.traced_peak_bytes, traced):>11} {row.recomputed_ops:>10} "
            f"{_cell(row.solve_seconds, '.3f', 8)} {_cell(row.predicted_seconds, '.4f', 9)} "
            f"{'bit-identical' if row.bit_identical else 'DIFFER':>13}"
        )
        notes = [f"plan: {row.plan_method}"] if row.plan_method else []
        if row.reason:
            notes.append(row.reason)
        if notes:
            lines.append(f"{'':<24} {'; '.join(notes)}")
    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    lines += [
        "",
        "budget: of saved values, @ the share of store-all's; time: median of "
        f"{args.repeats} runs without tracemalloc, methods interleaved, over store-all's; "
        "tape: tape.stats.peak_bytes (store-all: the bytes it saves; rm.checkpoint counts "
        "none); traced: tracemalloc peak of one forward + backward, in a separate run; "
        "recomputed: ops evaluated again (tape.stats; rm.count_ops for rm.checkpoint); "
        "solve s, predicted: the optimal plan's solve time and predicted compute (s).",
        f"BLAS threads: OPENBLAS_NUM_THREADS={blas}"
        if blas
        else "BLAS threads: as NumPy chose (OPENBLAS_NUM_THREADS=1 gives steadier times)",
    ]
    if args.plot:
        lines.append(f"figure written to {args.plot}")
    lines += failures or ["gradients bit-identical to store-all's under every method"]
    print("\n".join(lines), file=out)


def _colors(methods):
    import matplotlib

    cycle = matplotlib.colormaps["tab10"]
    return {m: cycle(k % 10) for k, m in enumerate(methods)}


def graph_figure(rows, title):
    """Time (over store-all's) against memory, a line per method through its budgets:
    the bytes the tape counted (left) and the tracemalloc peak (right).  ``rows``: of
    :func:`remat.graph_compare.compare_graph`; the rows that did not run are left out."""
    from ..plot import _pyplot

    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    shown = [r for r in rows if r.available]
    colors = _colors(dict.fromkeys(r.method for r in rows))
    for ax, key, what in (
        (axes[0], "tape_peak_bytes", "peak counted by the tape (MiB)"),
        (axes[1], "traced_peak_bytes", "tracemalloc peak of forward + backward (MiB)"),
    ):
        for method in dict.fromkeys(r.method for r in shown):
            mine = [r for r in shown if r.method == method and getattr(r, key) is not None]
            ax.plot(
                [getattr(r, key) / MiB for r in mine],
                [r.time_ratio for r in mine],
                "o-",
                color=colors[method],
                label=method,
            )
        planned = [r for r in shown if r.predicted_seconds and getattr(r, key) is not None]
        if planned:  # the optimal plan's prediction beside its measured time
            base = shown[0].seconds  # store-all's
            ax.plot(
                [getattr(r, key) / MiB for r in planned],
                [r.predicted_seconds / base for r in planned],
                "x--",
                color=colors["optimal"],
                label="optimal, predicted",
            )
        ax.axhline(1.0, color="gray", lw=0.8, ls=":")
        ax.set_xlabel(what)
    axes[0].set_ylabel("time over store-all's (median of the runs)")
    axes[0].legend(fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
