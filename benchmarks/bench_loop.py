"""Checkpointed loops: what the executor costs, and remat next to PyTorch's checkpointing.

Both parts reverse a residual MLP chain ``h <- h + tanh(h @ W + b)``, one ``W``
and ``b`` shared by every step (a loop reuses one step function), and take the
gradient of ``sum(h_n)`` with respect to them.

1. **Executor cost** (float64, width 256, batch 64, 200 steps; s = 5, 10, 20;
   then the same at width 16, batch 4, where a step is so cheap that the
   executor's own per-step cost shows).  A schedule's cost model counts step
   evaluations (``forward_steps``), so the naive prediction of revolve's time
   over store-all's is the ratio of their forward steps.  That ratio
   overstates the cost: an untaped *advance* is cheaper than a *taped* step,
   which records, keeps its values and is later reversed.  So we also predict

       t(schedule) = t_adv * advances + t_taped * n,

   with ``t_adv`` from an untaped run of the loop and ``t_taped * n`` the time
   of store-all (which tapes and reverses every step once), both measured in
   the same process, interleaved with the schedules.  What the executor adds
   beyond the recomputation it was asked for shows up as the gap between the
   measured time and this refined prediction.

2. **Side by side with PyTorch** (float32, width 256, batch 512, 200 blocks):
   remat store-all, sqrt and revolve (s = 5, 10, 20) against torch without
   checkpointing and torch's ``checkpoint_sequential`` with about ``sqrt(n)``
   segments (non-reentrant; it never checkpoints its last segment).  torch's
   block is one ``nn.Module`` applied 200 times, with remat's weights, so the
   two compute and keep the same values.  Times and memory are given as
   ratios to the library's own run without checkpointing.  Memory is measured
   two ways: tracemalloc (remat only; NumPy reports its buffers to it) and,
   for both libraries alike, the peak resident set size of a fresh process
   (glibc told to give freed blocks above 64 KiB back to the system with
   ``MALLOC_MMAP_THRESHOLD_=65536``) minus that of a matched process that
   does everything but the measured forward + backward (imports, parameters,
   and a tiny warm-up call, which for torch imports ~80 MiB of checkpointing
   modules).  The peak is read from ``VmHWM`` in /proc/self/status: the
   ``ru_maxrss`` of ``getrusage`` survives fork and exec on Linux, so a child
   of this (large) process would report the parent's peak instead of its own.

Times are medians of interleaved repeats on one BLAS thread (torch: one
thread too).  Gradients are checked before anything is timed: every schedule
against store-all, and torch against remat (float64, a short chain).
"""

from benchmarks.common import environment, side_by_side, skip, table, traced_peak  # noqa: I001

import json
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import remat as rm
from remat import schedules

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


# --- the problem ----------------------------------------------------------------
@dataclass(frozen=True)
class Chain:
    """A residual MLP chain: its sizes and dtype (parameters come from a fixed seed)."""

    width: int
    batch: int
    steps: int
    dtype: str

    def arrays(self):
        """(W, b, x) as NumPy arrays; W is scaled so that the chain stays tame."""
        rng = np.random.default_rng(0)
        w = 0.5 * rng.standard_normal((self.width, self.width)) / np.sqrt(self.width)
        b = 0.1 * rng.standard_normal(self.width)
        x = rng.standard_normal((self.batch, self.width))
        return tuple(a.astype(self.dtype) for a in (w, b, x))


@dataclass(frozen=True)
class Contender:
    """One way to run the chain: a library and its checkpointing option.

    ``option`` is, for remat, the keyword arguments of ``rm.Tape`` (empty:
    store-all); for torch, the number of ``checkpoint_sequential`` segments
    (None: no checkpointing).
    """

    library: str
    option: object = None

    @property
    def label(self):
        if self.library == "remat":
            if not self.option:
                return "remat store_all"
            if "snapshots" in self.option:
                return f"remat revolve s={self.option['snapshots']}"
            return f"remat {self.option['schedule']}"
        if self.option is None:
            return "torch, no checkpointing"
        return f"torch checkpoint_sequential, {self.option} segments"


def remat_runner(chain, option):
    """A function doing one forward + backward; it returns (dL/dW, tape.stats)."""
    w, b, x = chain.arrays()
    tw, tb = rm.tensor(w, requires_grad=True), rm.tensor(b, requires_grad=True)

    def step(h):
        return h + rm.tanh(h @ tw + tb)

    def run():
        tw.grad = tb.grad = None
        tape = rm.Tape(**(option or {}))
        h = tape.loop(step, rm.tensor(x), steps=chain.steps)
        h.sum().backward()
        return tw.grad, tape.stats

    def untaped():
        with rm.no_grad():
            h = rm.tensor(x)
            for _ in range(chain.steps):
                h = step(h)
        return h

    return run, untaped


def torch_runner(chain, segments):
    """The same chain in torch: one block module applied ``chain.steps`` times."""
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    torch.set_num_threads(1)
    w, b, x = chain.arrays()

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            dtype = getattr(torch, chain.dtype)
            self.linear = torch.nn.Linear(chain.width, chain.width, dtype=dtype)
            with torch.no_grad():
                self.linear.weight.copy_(torch.from_numpy(w.T.copy()))
                self.linear.bias.copy_(torch.from_numpy(b))

        def forward(self, h):
            return h + torch.tanh(self.linear(h))

    block, tx = Block(), torch.from_numpy(x)

    def run():
        block.zero_grad(set_to_none=True)
        if segments is None:
            h = tx
            for _ in range(chain.steps):
                h = block(h)
        else:
            h = checkpoint_sequential([block] * chain.steps, segments, tx, use_reentrant=False)
        h.sum().backward()
        return block.linear.weight.grad.numpy().T, None

    def warm_up():
        """Tiny calls that load what the first real call would (autograd, checkpointing)."""
        tiny = tx[:1]
        block(tiny).sum().backward()
        checkpoint_sequential([block] * 2, 2, tiny, use_reentrant=False).sum().backward()
        block.zero_grad(set_to_none=True)

    return run, warm_up


def runner(contender, chain):
    """The contender's forward + backward, returning (dL/dW, tape.stats or None)."""
    if contender.library == "remat":
        return remat_runner(chain, contender.option)[0]
    return torch_runner(chain, contender.option)[0]


def check_gradients(contenders, chain):
    """Every contender's dL/dW on a short float64 chain agrees with remat store-all's."""
    small = Chain(chain.width, 8, 12, "float64")
    want = remat_runner(small, {})[0]()[0]
    for c in contenders:
        checkpointed_torch = c.library == "torch" and c.option is not None
        option = 3 if checkpointed_torch else c.option  # 3 segments of the 12 steps
        got = runner(Contender(c.library, option), small)()[0]
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12), f"{c.label}: wrong gradient"


# --- 1. executor cost -----------------------------------------------------------
def bench_executor(chain, budgets, repeats):
    """Revolve's time over store-all's, against the two predictions (a table and verdicts)."""
    run_store_all, untaped = remat_runner(chain, {})
    runs = {"store_all": run_store_all}
    runs.update({s: remat_runner(chain, {"snapshots": s})[0] for s in budgets})
    want = run_store_all()[0]
    stats = {}
    for key, run in runs.items():
        grad, stats[key] = run()
        assert np.array_equal(grad, want), f"revolve s={key}: gradient differs from store-all"
    times = side_by_side({**runs, "untaped": untaped}, repeats)
    t_all, t_adv = times["store_all"], times["untaped"] / chain.steps
    rows, worst = [], {"naive": 0.0, "refined": 0.0}
    for key, st in stats.items():
        sim = schedules.simulate(
            schedules.StoreAll(chain.steps)
            if key == "store_all"
            else schedules.Revolve(chain.steps, key)
        )
        assert sim.forward_steps == st.forward_steps, "executor and simulate disagree"
        naive = st.forward_steps / chain.steps
        predicted = t_adv * sim.advances + t_all * sim.taped_steps / chain.steps
        refined, measured = predicted / t_all, times[key] / t_all
        worst["naive"] = max(worst["naive"], abs(measured / naive - 1))
        worst["refined"] = max(worst["refined"], abs(measured / refined - 1))
        extra = (times[key] - predicted) / sim.advances * 1e6 if sim.advances else 0.0
        rows.append(
            (
                "-" if key == "store_all" else key,
                st.forward_steps,
                f"{naive:.2f}",
                f"{refined:.2f}",
                f"{measured:.2f}",
                f"{measured / naive:.2f}",
                f"{measured / refined:.2f}",
                f"{extra:+.1f}",
                f"{times[key] * 1e3:.1f}",
            )
        )
    headers = [
        "s",
        "forward_steps",
        "predicted ratio (forward steps)",
        "refined prediction",
        "measured ratio",
        "measured / predicted",
        "measured / refined",
        "unpredicted us per advance",
        "ms",
    ]
    t_taped = t_all / chain.steps
    verdicts = [
        f"Calibration: an untaped advance takes {t_adv * 1e6:.0f} us, a taped step with its "
        f"backward {t_taped * 1e6:.0f} us (an advance costs {t_adv / t_taped:.2f} of it).",
        "",
        f"- {_within('the forward-step ratio', worst['naive'])}: advances are cheaper than "
        "taped steps, so counting evaluations alike overstates the cost.",
        f"- {_within('the refined prediction', worst['refined'])}: what the executor adds "
        "beyond the recomputation is the gap, per advance in the column before last.",
    ]
    return table(headers, rows) + "\n\n" + "\n".join(verdicts)


def _within(what, deviation):
    holds = "holds" if deviation <= 0.10 else "does NOT hold"
    return f"**Within 10% of {what}: {holds}** (worst deviation {deviation:.0%})"


# --- 2. against torch -------------------------------------------------------------
def peak_rss_kib(contender, chain, measure):
    """Peak RSS (KiB) of a fresh process that sets ``contender`` up and, if asked, runs it."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_loop",
        "--peak-rss",
        json.dumps([contender.library, contender.option]),
        json.dumps([chain.width, chain.batch, chain.steps, chain.dtype]),
        "run" if measure else "setup",
    ]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=path)
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"peak RSS of {contender.label} failed:\n{done.stderr}")
    return int(done.stdout.split()[-1])


def peak_rss_child(contender_json, chain_json, what):
    """In the child: set up (with a warm-up call), run once if asked, print VmHWM in KiB."""
    library, option = json.loads(contender_json)
    chain = Chain(*json.loads(chain_json))
    if library == "remat":
        run, _ = remat_runner(chain, option)
        remat_runner(Chain(chain.width, 1, 2, chain.dtype), option)[0]()  # warm-up
    else:
        run, warm_up = torch_runner(chain, option)
        warm_up()
    if what == "run":
        run()
    status = Path("/proc/self/status").read_text()
    print(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def rss_memory(contenders, chain, repeats):
    """{label: MiB} above a setup-only process of the same library (medians of repeats)."""
    baselines = {c.library: c for c in contenders if not c.option}
    jobs = [(c, True) for c in contenders] + [(b, False) for b in baselines.values()]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            (c.label, measure): [
                pool.submit(peak_rss_kib, c, chain, measure) for _ in range(repeats)
            ]
            for c, measure in jobs
        }
        kib = {key: statistics.median(f.result() for f in fs) for key, fs in futures.items()}
    return {
        c.label: (kib[(c.label, True)] - kib[(baselines[c.library].label, False)]) / 1024
        for c in contenders
    }


def torch_contenders(steps):
    """torch's two contenders, or none (with the reason printed) if it does not import."""
    try:
        import torch
    except ImportError as error:
        skip("torch", error)
        return [], f"torch skipped: {error}"
    segments = round(math.sqrt(steps))
    note = f"torch {torch.__version__}, {torch.get_num_threads()} thread"
    return [Contender("torch"), Contender("torch", segments)], note


@dataclass
class Measured:
    """One contender's figures; ratios are to its library's run without checkpointing."""

    seconds: float
    time_ratio: float
    rss_mib: float = math.nan
    rss_ratio: float = math.nan
    # remat only: tape.stats, tracemalloc's peak and its ratio, the refined time prediction
    stats: object = None
    traced_mib: float = math.nan
    traced_ratio: float = math.nan
    predicted: float = math.nan


def measure_all(contenders, chain, repeats, rss_repeats, rss_libraries):
    """Time everything interleaved, then memory: tracemalloc in-process, RSS in children."""
    check_gradients(contenders, chain)
    runs = {c.label: runner(c, chain) for c in contenders}
    stats = {c.label: runs[c.label]()[1] for c in contenders if c.library == "remat"}
    times = side_by_side({**runs, "untaped": remat_runner(chain, {})[1]}, repeats)
    traced = {label: traced_peak(runs[label]) / MIB for label in stats}
    rss = rss_memory([c for c in contenders if c.library in rss_libraries], chain, rss_repeats)
    t_adv = times["untaped"] / chain.steps
    base = {c.library: c.label for c in contenders if not c.option}
    out = {}
    for c in contenders:
        b = base[c.library]
        m = Measured(times[c.label], times[c.label] / times[b])
        if c.label in rss and rss[b] > 0:  # tiny --quick runs stay below RSS resolution
            m.rss_mib, m.rss_ratio = rss[c.label], rss[c.label] / rss[b]
        if c.label in stats:
            m.stats = stats[c.label]
            m.traced_mib, m.traced_ratio = traced[c.label], traced[c.label] / traced[b]
            advances = m.stats.forward_steps - m.stats.steps  # each step is taped once
            m.predicted = (t_adv * advances + times[b]) / times[b]
        out[c.label] = m
    return out


def torch_table(measured):
    def cell(value, fmt):
        return "-" if value is None or math.isnan(value) else format(value, fmt)

    rows = [
        (
            label,
            f"{m.seconds:.2f}",
            f"{m.time_ratio:.2f}",
            cell(m.stats and m.stats.forward_steps, "d"),
            cell(m.predicted, ".2f"),
            cell(m.rss_mib, ".1f"),
            cell(m.rss_ratio, ".3f"),
            cell(m.traced_mib, ".1f"),
            cell(m.traced_ratio, ".3f"),
            cell(m.stats and m.stats.peak_bytes / MIB, ".1f"),
        )
        for label, m in measured.items()
    ]
    headers = [
        "contender",
        "s (fwd+bwd)",
        "time ratio",
        "forward_steps",
        "refined time prediction",
        "peak RSS MiB",
        "memory ratio (RSS)",
        "tracemalloc MiB",
        "memory ratio (tracemalloc)",
        "tape.stats.peak_bytes MiB",
    ]
    return table(headers, rows)


def torch_verdicts(measured, torch_side):
    """Plain statements: remat sqrt against torch's checkpointing, and each revolve budget."""

    def memory(m):
        return "unmeasured memory" if math.isnan(m.rss_ratio) else f"{m.rss_ratio:.3f}x the memory"

    sq = measured["remat sqrt"]
    line = f"- remat sqrt: {memory(sq)} (RSS) at {sq.time_ratio:.2f}x the time."
    ck = measured[torch_side[1].label] if torch_side else None
    if ck is not None and not math.isnan(ck.rss_ratio):
        reach = "reaches" if sq.rss_ratio <= ck.rss_ratio else "does NOT reach"
        if abs(sq.time_ratio / ck.time_ratio - 1) < 0.03:  # below this machine's noise
            cost = "about the same"
        else:
            cost = "less" if sq.time_ratio < ck.time_ratio else "MORE"
        line += (
            f" torch checkpoint_sequential: {ck.rss_ratio:.3f}x at {ck.time_ratio:.2f}x."
            f" **remat sqrt {reach} torch's memory reduction, at {cost} time overhead**"
            f" ({sq.seconds:.2f} s against torch's {ck.seconds:.2f} s)."
        )
    lines = [line]
    for label, m in measured.items():
        if "revolve" in label:
            lines.append(
                f"- {label}: {memory(m)} (RSS) at {m.time_ratio:.2f}x the time; the "
                f"forward-step count predicted {m.predicted:.2f}x (advances at untaped cost, "
                f"off by {m.time_ratio / m.predicted - 1:+.0%})."
            )
    return "\n".join(lines)


def bench_torch(chain, budgets, repeats, rss_repeats, rss_libraries):
    remat_side = [Contender("remat"), Contender("remat", {"schedule": "sqrt"})] + [
        Contender("remat", {"snapshots": s}) for s in budgets
    ]
    torch_side, torch_note = torch_contenders(chain.steps)
    measured = measure_all(remat_side + torch_side, chain, repeats, rss_repeats, rss_libraries)
    return torch_table(measured) + "\n\n" + torch_verdicts(measured, torch_side), torch_note


@dataclass(frozen=True)
class Sizes:
    """What one run measures: part 1's chains and budgets, part 2's, and how often."""

    executor_chains: tuple
    executor_budgets: tuple
    executor_repeats: int
    torch_chain: Chain
    torch_budgets: tuple
    repeats: int
    rss_repeats: int
    rss_libraries: tuple  # whose peak RSS is measured (a fresh torch process takes seconds)


FULL = Sizes(
    # the chain, and a tiny one where the executor's own cost shows
    executor_chains=(Chain(256, 64, 200, "float64"), Chain(16, 4, 200, "float64")),
    executor_budgets=(5, 10, 20),
    executor_repeats=11,
    torch_chain=Chain(256, 512, 200, "float32"),
    torch_budgets=(5, 10, 20),
    repeats=7,
    rss_repeats=3,
    rss_libraries=("remat", "torch"),
)
QUICK = Sizes(
    executor_chains=(Chain(32, 4, 20, "float64"),),
    executor_budgets=(3, 5),
    executor_repeats=2,
    torch_chain=Chain(32, 8, 16, "float32"),
    torch_budgets=(3,),
    repeats=2,
    rss_repeats=1,
    rss_libraries=("remat",),  # tiny, and a fresh process importing torch takes seconds
)


def run(quick=False):
    z = QUICK if quick else FULL
    out = [
        "## Checkpointed loops (`python -m benchmarks loop`)",
        "",
        environment(("numpy", "remat", "torch")),
        "",
    ]
    for k, a in enumerate(z.executor_chains, 1):
        out += [
            f"### 1.{k} Executor cost: residual MLP chain, width {a.width}, batch {a.batch}, "
            f"{a.steps} steps, {a.dtype}",
            "",
            f"Medians of {z.executor_repeats} interleaved repeats; ratios are to store-all.",
            "",
            bench_executor(a, z.executor_budgets, z.executor_repeats),
            "",
        ]
    b = z.torch_chain
    text, torch_note = bench_torch(b, z.torch_budgets, z.repeats, z.rss_repeats, z.rss_libraries)
    out += [
        f"### 2. Side by side with PyTorch: {b.steps} residual blocks, width {b.width}, "
        f"batch {b.batch}, {b.dtype}",
        "",
        f"{torch_note}. Time ratio and memory ratio are to the same library without "
        f"checkpointing; times are medians of {z.repeats} interleaved repeats, peak RSS the "
        f"median of {z.rss_repeats} fresh processes each"
        + ("" if "torch" in z.rss_libraries else " (remat only)")
        + ".",
        "",
        text,
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peak-rss"]:
        peak_rss_child(*sys.argv[2:5])
    else:
        print(run(quick="--quick" in sys.argv))
