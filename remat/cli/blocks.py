"""``remat compare --workload transformer``: ways of checkpointing a chain of blocks.

No checkpointing, ``rm.checkpoint`` around every block, the same with a
policy, and revolve over the blocks (:mod:`remat.blockwise`): memory, time,
blocks and ops evaluated again, and whether the gradients agree bit for bit.
"""

from __future__ import annotations

import sys

from .. import blockwise
from ..workloads import make_workload
from .common import bytes_column, compare_heading, environment, in_unit, write_csv, write_json

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
            **compare_heading(args, description),
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
        write_json(document, out)
    elif args.format == "csv":
        for row in public:
            row["seconds_runs"] = " ".join(f"{s:.6f}" for s in row["seconds_runs"])
            row["recomputed_ops"] = " ".join(f"{k}={v}" for k, v in row["recomputed_ops"].items())
        write_csv(public, out)
    else:
        traced = bytes_column(rows, "traced_peak_bytes")
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
                + f" {sum(ops.values()):>7} {in_unit(row['traced_peak_bytes'], traced):>10} "
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
