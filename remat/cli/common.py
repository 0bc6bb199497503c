"""What the commands share: the parser's option types, output formats, units.

Every machine-readable result carries :func:`environment` (versions and
machine); tables print byte counts in one unit per column
(:func:`bytes_column`), the largest binary unit the column's values fill.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import re
import sys
import time
from pathlib import Path

from .. import __version__, backend
from .. import memory as M
from ..units import binary_unit

FORMATS = ("table", "csv", "json")
MiB = 2**20


class Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, unless it has none (None) or is a flag."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and exit status 2)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def count_option(name, minimum, maximum):
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


def names_option(name, allowed):
    """An option's type: names from ``allowed``, separated by commas, each once."""

    def parse(text):
        names = tuple(part.strip() for part in text.split(",") if part.strip())
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"{name} takes names from {','.join(allowed)}, separated by commas; got {text!r}"
            )
        return tuple(dict.fromkeys(names))  # in the order given, each once

    return parse


def cost_option(name):
    """An option's type: a finite time of at least 0 (in step evaluations)."""

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not 0 <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"{name} must be finite and >= 0, got {text!r}")
        return value

    return parse


def size_option(text):
    try:
        return M.parse_bytes(text, "--memory")
    except (TypeError, ValueError) as error:
        # argparse says "argument --memory:" already: drop parse_bytes' own prefix.
        message = str(error).removeprefix("--memory: ").removeprefix("memory=")
        raise argparse.ArgumentTypeError(message) from None


NEGATIVE_SIZE = re.compile(r"-[0-9.]")  # "-3MiB": a (refused) value, not an option


def sizes_as_values(argv):
    """``--memory -3MiB`` as ``--memory=-3MiB`` (and ``--budgets``' first value): argparse
    takes a value that starts with "-" for an option unless it is a bare number, and
    would answer "expected one argument" instead of saying what is wrong with the size."""
    argv = list(argv)
    for k in range(len(argv) - 1, 0, -1):
        if argv[k - 1] in ("--memory", "--budgets") and NEGATIVE_SIZE.match(argv[k]):
            argv[k - 1 : k + 1] = [f"{argv[k - 1]}={argv[k]}"]
    return argv


def figure_path(text):
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
        from ..plot import _pyplot

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


def output_options(command, figure):
    command.add_argument("--format", default="table", choices=FORMATS, help="output format")
    command.add_argument(
        "--plot",
        metavar="FILE",
        type=figure_path,
        help=f"also write {figure} (.png if no extension; default: no figure)",
    )


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


def write_csv(rows, out):
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)


def write_json(document, out):
    json.dump(document, out, indent=2)
    out.write("\n")


def bytes_column(rows, key):
    """The unit of a table's column of byte counts: (name, size, decimals), the
    largest binary unit its largest value fills (so small runs print in KiB or B,
    not as a column of 0.000 MiB)."""
    return binary_unit(row[key] for row in rows)


def in_unit(count, unit):
    """``count`` bytes written in a column's unit (from :func:`bytes_column`)."""
    _, size, decimals = unit
    return f"{count / size:.{decimals}f}"


def progress(items, desc, force=False):
    """A progress bar on a terminal (if tqdm is installed).  Elsewhere the plain
    items, or with ``force`` (a long run) one line on stderr as each item starts."""
    items = list(items)
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return tqdm(items, desc=desc, leave=False)
    return _lines(items, desc) if force else items


def _lines(items, desc):
    start = time.perf_counter()
    for k, item in enumerate(items):
        elapsed = time.perf_counter() - start
        print(f"remat: {desc} {k + 1}/{len(items)} ({elapsed:.0f} s so far)", file=sys.stderr)
        yield item


def max_diff(grads, reference):
    return max(float(abs(g - r).max()) for g, r in zip(grads, reference))


def compare_heading(args, description):
    """The fields every ``remat compare`` json document starts with."""
    return dict(
        command="compare",
        workload=args.workload,
        description=description,
        steps=args.steps,
        repeats=args.repeats,
    )


def plain_log_ticks(ax):
    """Tick labels on an axes' log axes as plain numbers (0.05, 2, 300), not 5x10^-2;
    where an axis spans under two decades, its minor ticks at 2 and 5 are labelled too."""
    from matplotlib.ticker import FuncFormatter

    for axis in (ax.xaxis, ax.yaxis):
        if axis.get_scale() != "log":
            continue

        def minor(value, _, axis=axis):
            low, high = sorted(axis.get_view_interval())
            if low <= 0 or high / low > 100:
                return ""
            mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9), 6)
            return f"{value:g}" if mantissa in (2, 5) else ""

        axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(FuncFormatter(minor))


def plain_symlog_ticks(ax):
    """The y axis of a symlog plot labelled with plain numbers at 0 and the decades."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
