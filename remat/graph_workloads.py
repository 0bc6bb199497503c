"""Workloads whose graphs are not chains: for rematerializing a recorded graph (issue 26).

:mod:`remat.workloads` holds loops and chains, written for ``tape.loop``,
``tape.chain`` and ``tape.scan``.  The four programs here are ordinary remat
code with no loop API: each op is recorded one by one, and values made early
are read again much later (skip connections, residual shortcuts, an ODE's
step sizes), so the recorded graph is a DAG that no chain schedule covers.
They are what a graph rematerializer (DTR, an optimal plan) is measured on.

* ``unet``: a 1-D U-Net denoising a signal; each level's features skip over
  the levels below it to the decoder (:func:`unet`).
* ``resnet``: a 1-D pre-activation ResNet classifying signals, whose stages
  halve the length and double the width, with projection shortcuts
  (:func:`resnet`).
* ``transformer_ops``: :func:`remat.workloads.transformer`'s GPT blocks
  recorded op by op, no ``tape.chain`` (:func:`transformer_ops`).
* ``adaptive_ode``: an ODE integrated with an adaptive Bogacki-Shampine
  (RK23) method, steps accepted or rejected by Python control flow on the
  error estimate, so the number of steps, and the graph, depend on the data
  (:func:`adaptive_ode`).

Each builder is a deterministic function of its sizes and ``seed`` and returns
a :class:`GraphWorkload`: the parameters, the inputs and a loss function
``loss(params, inputs) -> Tensor`` (it unpacks as that triple).  Each loss
is made of blocks (a U-Net level, a residual block, a transformer block, an
attempted ODE step), and ``loss(params, inputs, wrap=rm.checkpoint)`` calls
each block as ``wrap(block)(...)``: checkpointing placed by hand, block by
block, the baseline a graph rematerializer is compared with.  A "convolution"
is remat ops: zero padding, three shifted slices side by side
(``concatenate``) and a ``matmul`` with a ``(3 c_in, c_out)`` kernel.  Pooling
is a ``reshape`` and a ``mean`` over pairs, upsampling a ``repeat``.
:data:`GRAPH_WORKLOADS` names them for the CLI, the notebooks and the
benchmarks; :meth:`GraphWorkload.measure` counts the ops recorded and the
bytes they save.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from . import alive, backend, workloads
from .ops import (
    abs as absolute,
)
from .ops import (
    clip,
    concatenate,
    cross_entropy,
    gelu,
    layer_norm,
    maximum,
    mean,
    pad,
    relu,
    repeat,
    reshape,
    sin,
    sqrt,
    tanh,
    transpose,
)
from .tape import Recorder
from .tensor import Tensor, tensor

Loss = Callable[..., Tensor]
"""``loss(params, inputs, wrap=None) -> Tensor``."""
Wrap = Callable[[Callable[..., Any]], Callable[..., Any]] | None


def _wrapped(wrap: Wrap, block: Callable[..., Any]) -> Callable[..., Any]:
    return block if wrap is None else wrap(block)


class GraphSize(NamedTuple):
    """What one forward records: ``ops`` records, which save ``saved_bytes`` for
    backward (each buffer once, the parameters' and inputs' own buffers not counted:
    they are the user's, as in :mod:`remat.alive`).

    >>> from remat.graph_workloads import GraphSize
    >>> GraphSize(ops=3, saved_bytes=48).ops
    3
    """

    ops: int
    saved_bytes: int


@dataclass
class GraphWorkload:
    """A program to differentiate: ``loss(params, inputs)``, plain remat code.

    ``params`` are leaf Tensors that require gradients, ``inputs`` the data
    (Tensors that do not); ``notes`` is what the last run of ``loss`` said of
    itself (the adaptive ODE's step counts).  It unpacks as
    ``params, inputs, loss``.  ``loss(params, inputs, wrap)`` calls each of its
    blocks as ``wrap(block)``: ``wrap=rm.checkpoint`` checkpoints block by block.

    >>> import remat as rm
    >>> from remat.graph_workloads import unet
    >>> params, inputs, loss = unet(levels=2, width=4, length=8, batch=2)
    >>> with rm.Tape() as tape:
    ...     value = loss(params, inputs)
    >>> value.backward(); all(p.grad is not None for p in params)
    True
    """

    name: str
    description: str
    params: list[Tensor]
    inputs: list[Tensor]
    loss: Loss
    notes: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        """``params, inputs, loss = workload``."""
        return iter((self.params, self.inputs, self.loss))

    def forward(self, wrap: Wrap = None) -> Tensor:
        """The loss of the workload's own parameters and inputs (each block called as
        ``wrap(block)`` if ``wrap`` is given: ``rm.checkpoint``).

        >>> from remat.graph_workloads import resnet
        >>> w = resnet(stages=1, blocks=1, width=4, length=4, batch=2)
        >>> w.forward().item() == w.loss(w.params, w.inputs).item()
        True
        """
        if wrap is None:  # a loss of the user's may not take wrap
            return self.loss(self.params, self.inputs)
        return self.loss(self.params, self.inputs, wrap)

    def loss_and_gradients(
        self, tape: Recorder | None = None, wrap: Wrap = None
    ) -> tuple[float, list[Any]]:
        """Forward (inside ``tape`` if given: ``rm.Tape(...)``, a Recorder; each block
        wrapped by ``wrap`` if given) and backward; returns (loss value, [gradient of
        each parameter]).

        >>> import remat as rm
        >>> from remat.graph_workloads import adaptive_ode
        >>> w = adaptive_ode(horizon=1.0, dim=2, batch=1)
        >>> value, grads = w.loss_and_gradients(rm.Tape())
        >>> value == w.loss_and_gradients()[0], [g.shape for g in grads]
        (True, [(2, 4), (4,), (4, 2)])
        """
        for p in self.params:
            p.grad = None
        if tape is None:
            loss = self.forward(wrap)
        else:
            with tape:
                loss = self.forward(wrap)
        loss.backward()
        return loss.item(), [p.grad for p in self.params]

    def measure(self, wrap: Wrap = None) -> GraphSize:
        """Run the forward on a Recorder and count its records and saved bytes: what a
        store-all tape holds when backward starts, the reference a graph budget is a
        share of (``wrap``: as :meth:`forward`; ``wrap=rm.checkpoint`` measures what
        per-block checkpointing keeps).

        >>> from remat.graph_workloads import unet
        >>> unet(levels=1, width=2, length=4, batch=1).measure()
        GraphSize(ops=28, saved_bytes=1184)
        """
        with Recorder() as recorder:
            loss = self.forward(wrap)
        users = alive.buffers(t._data for t in (*self.params, *self.inputs))
        saved = alive.buffers(
            a for r in recorder.records for a in (*(r.args or ()), r.ans) if a is not None
        )
        kept = sum(getattr(a, "nbytes", 0) for k, a in saved.items() if k not in users)
        del loss
        return GraphSize(len(recorder.records), kept)


def _maker(rng: Any, dtype: str) -> Callable[..., Tensor]:
    def param(*shape: int, scale: float) -> Tensor:
        return tensor((rng.standard_normal(shape) * scale).astype(dtype), requires_grad=True)

    return param


def _conv(h: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """A 1-D convolution of width 3 with zero padding: ``h`` (batch, length, c_in),
    ``w`` (3 c_in, c_out): the three shifted copies side by side, times ``w``."""
    length = h.shape[1]
    padded = pad(h, ((0, 0), (1, 1), (0, 0)))
    taps = [padded[:, k : k + length] for k in range(3)]
    return concatenate(taps, axis=-1) @ w + b


def _pool(h: Tensor) -> Tensor:
    """Average pooling over pairs along the length: (b, n, c) -> (b, n / 2, c)."""
    b, n, c = h.shape
    return mean(reshape(h, (b, n // 2, 2, c)), axis=2)


def _signals(rng: Any, batch: int, length: int, channels: int, frequencies: Any) -> Any:
    """Sines of the given frequencies (per batch row, in cycles per signal) with random
    phases, one per channel: (batch, length, channels)."""
    t = backend.asarray([i / length for i in range(length)])
    phase = rng.uniform(0, 2 * math.pi, size=(batch, 1, channels))
    angle = 2 * math.pi * frequencies.reshape(batch, 1, 1) * t.reshape(1, -1, 1) + phase
    return sin(tensor(angle))._data


def unet(
    levels: int = 4,
    width: int = 8,
    length: int = 64,
    batch: int = 4,
    channels: int = 2,
    seed: int = 0,
    dtype: str = "float64",
) -> GraphWorkload:
    """A 1-D U-Net denoising sines: ``levels`` levels down and up, skips across.

    The encoder runs, at each level ``i``, a convolution of width 3 and GELU to
    ``width * 2**i`` channels, keeps the result for the skip, and pools pairs
    (the length halves); a convolution at the bottom doubles the width once
    more.  The decoder repeats each position twice, concatenates the skip of
    that level along the channels and convolves back to ``width * 2**i``.  A
    last ``matmul`` maps to ``channels``; the loss is the mean squared error to
    the clean signal.  The blocks (for ``wrap``) are each level's convolution
    and GELU, the decoder's with its repeat and concatenation.  Level 0's
    features are made first and read last: every skip is a long edge of the
    graph.

    Measured at the default size (``unet().measure()``): 88 ops, 868 kB saved.

    >>> from remat.graph_workloads import unet
    >>> unet().measure()
    GraphSize(ops=88, saved_bytes=868352)
    """
    if length % 2**levels:
        raise ValueError(f"unet: length {length} is not divisible by 2**levels = {2**levels}")
    rng = backend.default_rng(seed)
    param = _maker(rng, dtype)
    widths = [width * 2**i for i in range(levels + 1)]

    def conv(c_in: int, c_out: int) -> list[Tensor]:
        return [param(3 * c_in, c_out, scale=1 / math.sqrt(3 * c_in)), param(c_out, scale=0.1)]

    params: list[Tensor] = []
    c_in = channels
    for c in widths:  # the encoder's levels, then the bottom
        params += conv(c_in, c)
        c_in = c
    for i in reversed(range(levels)):
        params += conv(widths[i + 1] + widths[i], widths[i])
    params += [param(width, channels, scale=1 / math.sqrt(width)), param(channels, scale=0.1)]

    clean = _signals(rng, batch, length, channels, rng.integers(1, 4, size=batch))
    noisy = clean + 0.3 * rng.standard_normal(clean.shape)
    inputs = [tensor(noisy.astype(dtype)), tensor(clean.astype(dtype))]

    def down(w: Tensor, b: Tensor) -> Callable[[Tensor], Tensor]:
        return lambda h: gelu(_conv(h, w, b))

    def up(w: Tensor, b: Tensor) -> Callable[[Tensor, Tensor], Tensor]:
        return lambda h, skip: gelu(_conv(concatenate([repeat(h, 2, axis=1), skip], axis=-1), w, b))

    def loss(params: Sequence[Tensor], inputs: Sequence[Tensor], wrap: Wrap = None) -> Tensor:
        it = iter(params)
        h, target = inputs
        skips = []
        for i in range(levels):
            h = _wrapped(wrap, down(next(it), next(it)))(h)
            skips.append(h)
            h = _pool(h)
        h = _wrapped(wrap, down(next(it), next(it)))(h)
        for skip in reversed(skips):
            h = _wrapped(wrap, up(next(it), next(it)))(h, skip)
        out = h @ next(it) + next(it)
        return ((out - target) ** 2).mean()

    return GraphWorkload(
        "unet",
        f"1-D U-Net, {levels} levels from width {width}, length {length}, batch {batch}",
        params,
        inputs,
        loss,
    )


def resnet(
    stages: int = 3,
    blocks: int = 2,
    width: int = 8,
    length: int = 32,
    batch: int = 4,
    classes: int = 4,
    seed: int = 0,
    dtype: str = "float64",
) -> GraphWorkload:
    """A 1-D pre-activation ResNet classifying sines by frequency.

    A stem convolution maps the signal to ``width`` channels; then ``stages``
    stages of ``blocks`` residual blocks each, ``h + conv(relu(conv(relu(
    layer_norm(h)))))``.  Every stage after the first opens with a
    downsampling block: its first convolution has kernel 2 and stride 2 (a
    ``reshape`` of pairs side by side and a ``matmul``), the length halves and
    the width doubles, and the shortcut is a projection, the pooled ``h`` times
    a ``(c, 2 c)`` matrix.  The head averages over the length; the loss is the
    cross-entropy of ``classes`` classes (each signal's frequency).  The
    blocks (for ``wrap``) are the residual blocks.

    Measured at the default size (``resnet().measure()``): 115 ops, 406 kB saved.

    >>> from remat.graph_workloads import resnet
    >>> resnet().measure()
    GraphSize(ops=115, saved_bytes=405632)
    """
    if length % 2 ** (stages - 1):
        raise ValueError(f"resnet: length {length} is not divisible by 2**(stages - 1)")
    rng = backend.default_rng(seed)
    param = _maker(rng, dtype)

    def conv(c_in: int, c_out: int, taps: int = 3) -> list[Tensor]:
        scale = 1 / math.sqrt(taps * c_in)
        return [param(taps * c_in, c_out, scale=scale), param(c_out, scale=0.1)]

    params = conv(1, width)
    for s in range(stages):
        c = width * 2**s
        for k in range(blocks):
            if s > 0 and k == 0:  # downsampling: stride-2 kernel-2 conv, projection
                params += [*conv(c // 2, c, taps=2), *conv(c, c)]
                params.append(param(c // 2, c, scale=1 / math.sqrt(c // 2)))
            else:
                params += [*conv(c, c), *conv(c, c)]
    c = width * 2 ** (stages - 1)
    params += [param(c, classes, scale=1 / math.sqrt(c)), param(classes, scale=0.1)]

    labels = rng.integers(0, classes, size=batch)
    signal = _signals(rng, batch, length, 1, labels + 1) + 0.2 * rng.standard_normal(
        (batch, length, 1)
    )
    inputs = [tensor(signal.astype(dtype)), tensor(labels)]

    def downsampling(
        w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor, projection: Tensor
    ) -> Callable[[Tensor], Tensor]:
        def block(h: Tensor) -> Tensor:
            y = relu(layer_norm(h))
            b, n, c = y.shape
            y = relu(reshape(y, (b, n // 2, 2 * c)) @ w1 + b1)
            return _pool(h) @ projection + _conv(y, w2, b2)

        return block

    def residual(w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Callable[[Tensor], Tensor]:
        return lambda h: h + _conv(relu(_conv(relu(layer_norm(h)), w1, b1)), w2, b2)

    def loss(params: Sequence[Tensor], inputs: Sequence[Tensor], wrap: Wrap = None) -> Tensor:
        it = iter(params)
        h, labels = inputs
        h = _conv(h, next(it), next(it))
        for s in range(stages):
            for k in range(blocks):
                if s > 0 and k == 0:
                    block = downsampling(*(next(it) for _ in range(5)))
                else:
                    block = residual(*(next(it) for _ in range(4)))
                h = _wrapped(wrap, block)(h)
        logits = mean(h, axis=1) @ next(it) + next(it)
        return cross_entropy(logits, labels)

    return GraphWorkload(
        "resnet",
        f"1-D ResNet, {stages} stages of {blocks} blocks from width {width}, length {length}, "
        f"batch {batch}, {classes} classes",
        params,
        inputs,
        loss,
    )


_BLOCK_KEYS = (
    "ln1_w",
    "ln1_b",
    "w_qkv",
    "w_o",
    "b_o",
    "ln2_w",
    "ln2_b",
    "w_1",
    "b_1",
    "w_2",
    "b_2",
)
"""The parameters of one of :func:`remat.workloads.transformer`'s blocks, in its order."""


def transformer_ops(
    blocks: int = 4,
    width: int = 32,
    heads: int = 4,
    context: int = 32,
    batch: int = 4,
    seed: int = 0,
    dtype: str = "float64",
) -> GraphWorkload:
    """:func:`remat.workloads.transformer`, its ops recorded one by one (no ``tape.chain``).

    The same parameters, data and blocks (pre-norm causal attention and a
    GELU MLP, tied embeddings, the next character's cross-entropy): its loss
    is bit for bit that workload's ``run_layers()``.  Each block reads the
    residual stream twice and the layer norms' and projections' outputs
    several times (queries, keys and values are slices of one product), so the
    graph branches inside every block.  With ``wrap=rm.checkpoint`` it is
    that workload's ``run_layers(rm.checkpoint)``.

    Measured at the default size (``transformer_ops().measure()``): 113 ops,
    2.72 MB saved.

    >>> from remat.graph_workloads import transformer_ops
    >>> transformer_ops().measure()
    GraphSize(ops=113, saved_bytes=2719744)
    """
    chain = workloads.transformer(blocks, width, heads, context, batch, seed, dtype)
    tokens, targets = chain.data
    causal = backend.causal_mask(context, dtype)
    per_block = len(_BLOCK_KEYS)

    def loss(params: Sequence[Tensor], inputs: Sequence[Tensor], wrap: Wrap = None) -> Tensor:
        table, position, *rest = params
        tokens, targets = inputs
        h = table[tokens] + position
        for i in range(blocks):
            p = dict(zip(_BLOCK_KEYS, rest[i * per_block : (i + 1) * per_block]))
            block = workloads._block(p, batch, context, heads, width // heads, causal)
            h = _wrapped(wrap, block)(h)
        ln_w, ln_b = rest[blocks * per_block :]
        return cross_entropy(layer_norm(h, ln_w, ln_b) @ transpose(table), targets)

    return GraphWorkload(
        "transformer_ops",
        chain.description + ", op by op",
        chain.params,
        [tensor(tokens), tensor(targets)],
        loss,
    )


def _rk23(
    f: Callable[[Tensor], Tensor],
    y: Tensor,
    horizon: float,
    rtol: float,
    atol: float,
    notes: dict[str, Any],
    max_steps: int,
    wrap: Wrap,
) -> Tensor:
    """Integrate ``dy/dt = f(y)`` from 0 to ``horizon`` with Bogacki-Shampine's adaptive
    RK23 (first-same-as-last); steps are accepted while the error estimate's RMS, scaled
    by ``atol + rtol |y|``, is at most 1.  The step sizes are Tensors: the gradient
    follows them through the error estimates, as it follows every value computed.
    An attempted step's stages and error estimate are one block (for ``wrap``)."""

    def attempt(y: Tensor, k1: Tensor, h: Any) -> tuple[Tensor, Tensor, Tensor]:
        k2 = f(y + (0.5 * h) * k1)
        k3 = f(y + (0.75 * h) * k2)
        y_new = y + h * ((2 / 9) * k1 + (1 / 3) * k2 + (4 / 9) * k3)
        k4 = f(y_new)
        error = h * ((-5 / 72) * k1 + (1 / 12) * k2 + (1 / 9) * k3 - 0.125 * k4)
        scale = atol + rtol * maximum(absolute(y), absolute(y_new))
        return y_new, k4, sqrt(mean((error / scale) ** 2))

    step = _wrapped(wrap, attempt)
    t: Any = 0.0
    h: Any = 0.1 * horizon
    k1 = f(y)
    accepted = rejected = 0
    while True:
        if accepted + rejected == max_steps:
            raise RuntimeError(
                f"adaptive_ode: {max_steps} steps (accepted {accepted}, rejected "
                f"{rejected}) reached t = {float(t):.6g} of {horizon}, step size "
                f"{float(h):.3g}; raise max_steps or the tolerances"
            )
        last = float(t) + float(h) >= horizon
        if last:
            h = horizon - t
        y_new, k4, norm = step(y, k1, h)
        if not math.isfinite(float(norm)):
            raise FloatingPointError(
                f"adaptive_ode: step {accepted + rejected} (t = {float(t):.6g}, step size "
                f"{float(h):.3g}) has an error estimate of {float(norm)}; it must be finite"
            )
        if float(norm) <= 1.0:
            accepted += 1
            t, y, k1 = t + h, y_new, k4
            if last:
                notes.update(accepted=accepted, rejected=rejected)
                return y
        else:
            rejected += 1
        h = h * clip(0.9 * maximum(norm, 1e-10) ** (-1 / 3), 0.2, 5.0)


def adaptive_ode(
    horizon: float = 1.0,
    dim: int = 4,
    batch: int = 64,
    rtol: float = 1e-3,
    atol: float = 1e-6,
    seed: int = 0,
    dtype: str = "float64",
    max_steps: int = 1000,
) -> GraphWorkload:
    """An ODE ``dy/dt = tanh(y W + b) V`` integrated by adaptive RK23 to ``horizon``.

    The number of steps depends on the data: each step's error estimate is
    computed from the values, and Python decides on ``float(norm)`` whether to
    accept the step; either way the next step size is the last one times
    ``clip(0.9 norm**(-1/3), 0.2, 5)``.  Step sizes are Tensors, so a rejected
    step still reaches the loss through the step size it chose, and the graph
    links every step to all later ones.  The loss is the mean squared distance
    of ``y(horizon)`` to a target; ``notes`` holds the last run's
    ``accepted`` and ``rejected`` step counts.  More than ``max_steps``
    attempts raise RuntimeError, an error estimate that is not finite
    (the solution blew up) FloatingPointError.

    Measured at the default size (``adaptive_ode().measure()``): 383 ops,
    277 kB saved, in 8 steps, none rejected (seed 1: 526 ops, 10 steps and 1 rejected).

    >>> from remat.graph_workloads import adaptive_ode
    >>> w = adaptive_ode()
    >>> w.measure(), w.notes
    (GraphSize(ops=383, saved_bytes=276872), {'accepted': 8, 'rejected': 0})
    """
    if not horizon > 0:
        raise ValueError(f"adaptive_ode: horizon {horizon} must be positive")
    rng = backend.default_rng(seed)
    param = _maker(rng, dtype)
    hidden = 2 * dim
    params = [
        param(dim, hidden, scale=2 / math.sqrt(dim)),
        param(hidden, scale=0.5),
        param(hidden, dim, scale=2 / math.sqrt(hidden)),
    ]
    y0 = rng.standard_normal((batch, dim)).astype(dtype)
    target = (0.5 * rng.standard_normal((batch, dim))).astype(dtype)
    notes: dict[str, Any] = {}

    def loss(params: Sequence[Tensor], inputs: Sequence[Tensor], wrap: Wrap = None) -> Tensor:
        w, b, v = params
        y0, target = inputs
        f = lambda y: tanh(y @ w + b) @ v  # noqa: E731
        y = _rk23(f, y0, horizon, rtol, atol, notes, max_steps, wrap)
        return ((y - target) ** 2).mean()

    return GraphWorkload(
        "adaptive_ode",
        f"ODE dy/dt = tanh(y W + b) V in {dim} dimensions to t = {horizon}, adaptive RK23 "
        f"(rtol {rtol}, atol {atol}), batch {batch}",
        params,
        [tensor(y0), tensor(target)],
        loss,
        notes,
    )


GRAPH_WORKLOADS: dict[str, Callable[..., GraphWorkload]] = {
    "unet": unet,
    "resnet": resnet,
    "transformer_ops": transformer_ops,
    "adaptive_ode": adaptive_ode,
}
"""Name -> builder of each workload here.  A builder's first parameter is its size (the
U-Net's levels, the ResNet's stages, the transformer's blocks, the ODE's horizon, which
sets its number of steps); every parameter has a default, and ``seed=`` picks the data
and the initial parameters."""


def make_graph_workload(name: str, size: float | None = None, seed: int = 0) -> GraphWorkload:
    """The workload called ``name`` (one of :data:`GRAPH_WORKLOADS`), of ``size`` (the
    builder's first parameter; None: its default).

    >>> from remat.graph_workloads import GRAPH_WORKLOADS, make_graph_workload
    >>> sorted(GRAPH_WORKLOADS)
    ['adaptive_ode', 'resnet', 'transformer_ops', 'unet']
    >>> make_graph_workload("resnet", size=2).description
    '1-D ResNet, 2 stages of 2 blocks from width 8, length 32, batch 4, 4 classes'
    """
    if name not in GRAPH_WORKLOADS:
        raise ValueError(
            f"unknown graph workload {name!r}; choose one of {', '.join(GRAPH_WORKLOADS)}"
        )
    builder = GRAPH_WORKLOADS[name]
    return builder(seed=seed) if size is None else builder(size, seed=seed)
