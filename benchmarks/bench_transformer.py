"""A transformer under checkpointing, against PyTorch; and Chen et al. 2016 scaled down.

``python -m benchmarks transformer``.

1. **Side by side with PyTorch.**  remat's transformer workload
   (:func:`remat.workloads.transformer`: pre-norm GPT blocks, multi-head causal
   attention, GELU MLP, tied embedding, cross-entropy; float32) and the same
   model written in torch with remat's weights, so that both compute the
   same values.  Each library runs without checkpointing, with every block
   checkpointed (``rm.checkpoint``; ``torch.utils.checkpoint.checkpoint``,
   non-reentrant) and selectively, twice: keeping every matrix product
   (remat ``policy=rm.policies.save_ops("matmul", "einsum")``, torch's
   ``create_selective_checkpoint_contexts`` saving ``aten.mm``, ``aten.addmm``
   and ``aten.bmm``), and keeping only the projections, so that the attention
   scores are recomputed (remat ``save_ops("matmul")``; torch saving ``aten.mm``
   and ``aten.addmm``: its ``einsum`` runs as ``bmm``).  Times are medians of
   interleaved repeats on one thread; memory is the peak RSS of a fresh
   process minus that of a matched process that does everything but the
   measured forward + backward (see benchmarks/README.md), as
   ``bench_loop`` measures it.  Ratios are to each library's own run without
   checkpointing.  Gradients are checked first: torch's against remat's in
   float64 on a small configuration, every remat mode bit for bit against
   remat without checkpointing.

2. **Chen et al. 2016, scaled down.**  Their 1000-layer residual network went
   from 48 GB to 7 GB (0.146x) with sqrt(n) checkpointing for about 30% more
   time.  Here: 1000 residual blocks ``h + tanh(h W_i + b_i)``, each with its
   own weights (``tape.chain``), batch 256, width 32, float32, so that the
   activations outweigh the parameters as in a convolutional network.
   remat's store-all, sqrt and revolve with ``s = ceil(log2 n)``: memory as
   the tracemalloc peak of the forward + backward (gradients included, the
   parameters themselves not), time as interleaved medians.
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
from remat.blockwise import POLICIES
from remat.workloads import transformer

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20


@dataclass(frozen=True)
class Config:
    """The transformer's sizes (``steps`` blocks)."""

    steps: int
    width: int
    heads: int
    context: int
    batch: int
    dtype: str = "float32"

    def workload(self):
        return transformer(
            steps=self.steps,
            width=self.width,
            heads=self.heads,
            context=self.context,
            batch=self.batch,
            dtype=self.dtype,
        )


TINY = Config(1, 8, 2, 4, 1)  # the warm-up call of a fresh process

# --- the contenders -------------------------------------------------------------------
REMAT_MODES = {  # label -> how each block is wrapped (None: not at all; see remat.blockwise)
    "remat, no checkpointing": None,
    "remat rm.checkpoint per block": "checkpoint",
    'remat per block, save_ops("matmul", "einsum")': "dots",
    'remat per block, save_ops("matmul")': "selective",
}
TORCH_MODES = {  # label -> the aten ops a selective checkpoint saves ("all": a plain one)
    "torch, no checkpointing": None,
    "torch checkpoint per block": "all",
    "torch selective (save mm, addmm, bmm)": ("mm", "addmm", "bmm"),
    "torch selective (save mm, addmm)": ("mm", "addmm"),
}


def remat_runner(config, mode):
    """One forward + backward: returns the parameters' gradients."""
    workload = config.workload()
    wrap = None if mode is None else (lambda f: rm.checkpoint(f, policy=POLICIES[mode]))

    def run():
        for p in workload.params:
            p.grad = None
        workload.run_layers(wrap).backward()
        return [p.grad for p in workload.params]

    return run


def torch_runner(config, mode):
    """The same model in torch with remat's weights: returns (run, warm_up)."""
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    torch.set_num_threads(1)
    workload = config.workload()
    params = [torch.tensor(p.numpy(), requires_grad=True) for p in workload.params]
    tokens, targets = (torch.tensor(a) for a in workload.data)
    b, t, d, heads = config.batch, config.context, config.width, config.heads
    head = d // heads
    causal = torch.triu(torch.full((t, t), -math.inf, dtype=params[0].dtype), diagonal=1)
    table, position, ln_w, ln_b = params[0], params[1], params[-2], params[-1]
    blocks = [params[2 + 11 * k : 13 + 11 * k] for k in range(config.steps)]
    if isinstance(mode, tuple):
        saved = [getattr(torch.ops.aten, name).default for name in mode]

    def block(h, p):
        ln1_w, ln1_b, w_qkv, w_o, b_o, ln2_w, ln2_b, w_1, b_1, w_2, b_2 = p
        x = F.layer_norm(h, (d,), ln1_w, ln1_b, eps=1e-5)
        qkv = (x @ w_qkv).reshape(b, t, 3, heads, head).permute(2, 0, 3, 1, 4)
        scores = torch.einsum("bhqd,bhkd->bhqk", qkv[0], qkv[1]) * (1 / math.sqrt(head))
        mixed = torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores + causal, -1), qkv[2])
        h = h + mixed.permute(0, 2, 1, 3).reshape(b, t, d) @ w_o + b_o
        x = F.layer_norm(h, (d,), ln2_w, ln2_b, eps=1e-5)
        return h + F.gelu(x @ w_1 + b_1, approximate="tanh") @ w_2 + b_2

    def apply(h, p):
        if mode is None:
            return block(h, p)
        if mode == "all":
            return checkpoint(block, h, p, use_reentrant=False)
        return checkpoint(
            block,
            h,
            p,
            use_reentrant=False,
            context_fn=lambda: create_selective_checkpoint_contexts(saved),
        )

    def loss():
        h = table[tokens] + position
        for p in blocks:
            h = apply(h, p)
        logits = F.layer_norm(h, (d,), ln_w, ln_b, eps=1e-5) @ table.T
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def run():
        for p in params:
            p.grad = None
        loss().backward()
        return [p.grad.numpy() for p in params]

    return run


def runner(label, config):
    if label in REMAT_MODES:
        return remat_runner(config, REMAT_MODES[label])
    return torch_runner(config, TORCH_MODES[label])


def check_gradients(labels):
    """torch against remat in float64, every remat mode bit for bit against remat's own."""
    small = Config(2, 16, 2, 8, 2, "float64")
    want = remat_runner(small, None)()
    for label in labels:
        got = runner(label, small)()
        for g, w in zip(got, want):
            if label in REMAT_MODES:
                assert np.array_equal(g, w), f"{label}: gradient differs from no checkpointing"
            else:
                assert np.allclose(g, w, rtol=1e-9, atol=1e-12), f"{label}: wrong gradient"


# --- peak RSS in fresh processes --------------------------------------------------------
def peak_rss_kib(label, config, measure):
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench_transformer",
        "--peak-rss",
        label,
        json.dumps(list(config.__dict__.values())),
        "run" if measure else "setup",
    ]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=path)
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"peak RSS of {label} failed:\n{done.stderr}")
    return int(done.stdout.split()[-1])


def peak_rss_child(label, config_json, what):
    """In the child: set up, warm up on a tiny model, run once if asked, print VmHWM (KiB)."""
    config = Config(*json.loads(config_json))
    run = runner(label, config)
    for other in REMAT_MODES if label in REMAT_MODES else TORCH_MODES:
        runner(other, TINY)()  # what a first call loads (autograd, checkpointing), in every mode
    if what == "run":
        run()
    status = Path("/proc/self/status").read_text()
    print(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


def rss_memory(labels, config, repeats):
    """{label: MiB above a setup-only process of the same library} (medians of repeats)."""
    baseline = {"remat": next(iter(REMAT_MODES)), "torch": next(iter(TORCH_MODES))}
    library = {label: "remat" if label in REMAT_MODES else "torch" for label in labels}
    jobs = [(label, True) for label in labels]
    jobs += [(baseline[lib], False) for lib in sorted(set(library.values()))]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            job: [pool.submit(peak_rss_kib, job[0], config, job[1]) for _ in range(repeats)]
            for job in jobs
        }
        kib = {job: statistics.median(f.result() for f in fs) for job, fs in futures.items()}
    return {
        label: (kib[(label, True)] - kib[(baseline[library[label]], False)]) / 1024
        for label in labels
    }


def torch_labels():
    try:
        import torch
    except ImportError as error:
        skip("torch", error)
        return [], f"torch skipped: {error}"
    return list(TORCH_MODES), f"torch {torch.__version__}, {torch.get_num_threads()} thread"


def bench_torch(config, repeats, rss_repeats, rss_torch):
    t_labels, note = torch_labels()
    labels = list(REMAT_MODES) + t_labels
    check_gradients(labels)
    times = side_by_side({label: runner(label, config) for label in labels}, repeats)
    measured = list(REMAT_MODES) + (t_labels if rss_torch else [])
    rss = dict.fromkeys(labels, math.nan) | rss_memory(measured, config, rss_repeats)
    rows, figures = [], {}
    for label in labels:
        base = next(iter(REMAT_MODES if label in REMAT_MODES else TORCH_MODES))
        memory = rss[label] / rss[base] if rss[base] > 0 else math.nan
        figures[label] = (memory, times[label] / times[base])
        rows.append(
            (
                label,
                f"{times[label]:.3f}",
                f"{times[label] / times[base]:.2f}",
                "-" if math.isnan(rss[label]) else f"{rss[label]:.1f}",
                "-" if math.isnan(memory) else f"{memory:.3f}",
            )
        )
    headers = ["contender", "s (fwd+bwd)", "time ratio", "peak RSS MiB", "memory ratio (RSS)"]
    return table(headers, rows) + "\n\n" + verdicts(figures), note


PAIRS = (  # (remat's label, torch's label) compared in the verdicts
    ("remat rm.checkpoint per block", "torch checkpoint per block"),
    ('remat per block, save_ops("matmul", "einsum")', "torch selective (save mm, addmm, bmm)"),
    ('remat per block, save_ops("matmul")', "torch selective (save mm, addmm)"),
)


def verdicts(figures):
    lines = []
    for mine, theirs in PAIRS:
        if mine not in figures or theirs not in figures:
            continue
        (m_mem, m_time), (t_mem, t_time) = figures[mine], figures[theirs]
        if math.isnan(m_mem) or math.isnan(t_mem):  # tiny --quick runs: below RSS resolution
            continue
        reach = "reaches" if m_mem <= t_mem else "does NOT reach"
        if abs(m_time / t_time - 1) < 0.03:
            cost = "about the same"
        else:
            cost = "less" if m_time < t_time else "MORE"
        lines.append(
            f"- {mine}: {m_mem:.3f}x the memory at {m_time:.2f}x the time; {theirs}: "
            f"{t_mem:.3f}x at {t_time:.2f}x. **remat {reach} torch's memory ratio, at {cost} "
            "time overhead.**"
        )
    return "\n".join(lines)


# --- 2. Chen et al. 2016, scaled down -----------------------------------------------------
def chen_runner(blocks, width, batch, option):
    """The residual network's forward + backward on ``rm.Tape(**option)``."""
    rng = np.random.default_rng(0)

    def param(*shape, scale):
        array = (rng.standard_normal(shape) * scale).astype(np.float32)
        return rm.tensor(array, requires_grad=True)

    weights = [param(width, width, scale=0.5 / math.sqrt(width)) for _ in range(blocks)]
    biases = [param(width, scale=0.1) for _ in range(blocks)]
    x = rm.tensor(rng.standard_normal((batch, width)).astype(np.float32))
    layers = [lambda h, w=w, b=b: h + rm.tanh(h @ w + b) for w, b in zip(weights, biases)]
    params = weights + biases

    def run():
        for p in params:
            p.grad = None
        tape = rm.Tape(**option)
        h = tape.chain(layers, x)
        (h * h).mean().backward()
        return [p.grad for p in params], tape.stats

    return run


def bench_chen(blocks, width, batch, repeats):
    log_s = math.ceil(math.log2(blocks))
    options = {
        "store_all": {},
        "sqrt": {"schedule": "sqrt"},
        f"revolve s={log_s}": {"snapshots": log_s},
    }
    runs = {name: chen_runner(blocks, width, batch, option) for name, option in options.items()}
    results = {name: run() for name, run in runs.items()}
    want = results["store_all"][0]
    for name, (grads, _) in results.items():
        assert all(np.array_equal(g, w) for g, w in zip(grads, want)), f"{name}: gradient"
    traced = {name: traced_peak(run) / MIB for name, run in runs.items()}
    times = side_by_side(runs, repeats)
    rows, lines = [], []
    for name in options:
        stats = results[name][1]
        memory, slower = traced[name] / traced["store_all"], times[name] / times["store_all"]
        rows.append(
            (
                name,
                stats.forward_steps,
                f"{stats.peak_bytes / MIB:.2f}",
                f"{traced[name]:.2f}",
                f"{memory:.3f}",
                f"{times[name]:.3f}",
                f"{slower:.2f}",
            )
        )
        if name != "store_all":
            lines.append(f"- {name}: {memory:.3f}x the memory at {slower:.2f}x the time.")
    lines.append("- Chen et al. 2016 (sqrt(n), 1000-layer ResNet): 0.146x at about 1.3x.")
    headers = [
        "schedule",
        "forward_steps",
        "tape.stats.peak_bytes MiB",
        "tracemalloc MiB",
        "memory ratio",
        "s (fwd+bwd)",
        "time ratio",
    ]
    return table(headers, rows) + "\n\n" + "\n".join(lines)


@dataclass(frozen=True)
class Sizes:
    config: Config
    repeats: int
    rss_repeats: int
    rss_torch: bool  # whether torch's peak RSS is measured (a fresh torch process takes seconds)
    chen: tuple  # blocks, width, batch
    chen_repeats: int


FULL = Sizes(Config(8, 256, 4, 256, 4), 5, 2, True, (1000, 32, 256), 5)
QUICK = Sizes(Config(2, 16, 2, 8, 2), 1, 1, False, (16, 8, 4), 1)


def run(quick=False):
    z = QUICK if quick else FULL
    c = z.config
    text, note = bench_torch(c, z.repeats, z.rss_repeats, z.rss_torch)
    blocks, width, batch = z.chen
    return "\n".join(
        [
            "## A transformer under checkpointing (`python -m benchmarks transformer`)",
            "",
            environment(("numpy", "remat", "torch")),
            "",
            f"### 1. Side by side with PyTorch: {c.steps} blocks, width {c.width}, {c.heads} "
            f"heads, context {c.context}, batch {c.batch}, {c.dtype}",
            "",
            f"{note}. Ratios are to the same library without checkpointing; times are "
            f"medians of {z.repeats} interleaved repeats, peak RSS the median of "
            f"{z.rss_repeats} fresh processes each" + ("." if z.rss_torch else " (remat only)."),
            "",
            text,
            "",
            f"### 2. Chen et al. 2016 scaled down: {blocks} residual blocks, width {width}, "
            f"batch {batch}, float32",
            "",
            f"Medians of {z.chen_repeats} interleaved repeats; memory is the tracemalloc peak "
            "of the forward + backward; ratios are to store-all.",
            "",
            bench_chen(blocks, width, batch, z.chen_repeats),
            "",
        ]
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--peak-rss"]:
        peak_rss_child(*sys.argv[2:5])
    else:
        print(run(quick="--quick" in sys.argv))
