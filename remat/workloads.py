"""Small real workloads, shared by the CLI, the notebooks and the benchmarks.

Each is a loop (or a chain, or a scan): a state, a step function closing over
parameters, and a loss on the final state.  ``Workload.loss_and_gradients(tape)`` runs it on a tape
(so under that tape's snapshot budget) and returns the loss and the
parameters' gradients.

* ``resmlp``: a residual MLP, ``h <- h + tanh(h W + b) V`` (one block reused
  at every step, as in a weight-tied deep network or a discretised ODE).
* ``rnn``: a character-level recurrent network over a long sequence; the
  state carries the hidden vector, the position and the running loss.
* ``ode``: a nonlinear ODE integrated with classical Runge-Kutta (RK4).
* ``widths``: a chain of tanh layers whose widths change from layer to layer
  (``tape.chain``).
* ``scan_rnn``: the character RNN written with ``tape.scan``: the inputs are
  scanned over and the logits come out as per-step outputs.
* ``transformer``: a small GPT-style causal transformer over remat's own
  docstrings, one chain step per block (:func:`transformer`); ``steps`` is
  the number of blocks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import backend
from .ops import (
    cross_entropy,
    einsum,
    gelu,
    getitem,
    layer_norm,
    log_softmax,
    reshape,
    softmax,
    tanh,
    transpose,
)
from .tape import no_grad
from .tensor import Tensor, tensor

if TYPE_CHECKING:
    from .budget import Tape


@dataclass
class Workload:
    """A loop to differentiate: ``state = step(state)`` ``steps`` times, then ``loss``.

    >>> import remat as rm
    >>> w = rm.workloads.resmlp(steps=20, width=8, batch=2)
    >>> with rm.Tape(snapshots=2) as tape:
    ...     loss = w.run(tape)
    >>> loss.backward(); tape.stats.steps, [p.grad is not None for p in w.params]
    (20, [True, True, True])
    """

    name: str
    description: str
    params: list[Tensor]
    state: Any
    step: Any  # a function, or (form "chain") the list of layers
    steps: int
    loss: Callable[..., Tensor]
    form: str = "loop"  # "loop": step(state); "chain": step is the list of layers;
    xs: Any = None  # "scan": step(carry, x) over xs, and loss(carry, ys)
    embed: Callable[[], Any] | None = None  # if given, makes the first state for every run
    data: tuple[Any, ...] = ()  # the arrays it reads (a peer library rebuilds it from them)

    def start(self) -> Any:
        """The first state: ``embed()`` (recorded, so that its parameters get gradients)
        if the workload has one, else ``state``.

        >>> from remat.workloads import transformer
        >>> transformer(steps=1, width=8, heads=2, context=4, batch=1).start().shape
        (1, 4, 8)
        """
        return self.state if self.embed is None else self.embed()

    def run(self, tape: Tape, online: bool = False) -> Tensor:
        """The loss Tensor, with the loop run on ``tape`` (``until=`` if ``online``;
        a chain or scan has a known length, and an online tape serves it too)."""
        if self.form == "chain":
            return self.loss(tape.chain(self.step, self.start()))
        if self.form == "scan":
            return self.loss(*tape.scan(self.step, self.state, self.xs))
        if online:
            count = iter(range(1, self.steps + 1))
            final = tape.loop(self.step, self.state, until=lambda _: next(count) >= self.steps)
        else:
            final = tape.loop(self.step, self.state, steps=self.steps)
        return self.loss(final)

    def loss_and_gradients(self, tape: Tape, online: bool = False) -> tuple[float, list[Any]]:
        """Run forward and backward; return (loss value, [gradient of each parameter])."""
        for p in self.params:
            p.grad = None
        loss = self.run(tape, online=online)
        loss.backward()
        return loss.item(), [p.grad for p in self.params]

    def run_layers(self, wrap: Callable[[Any], Any] | None = None) -> Tensor:
        """The loss Tensor of a chain with its layers called one after the other, no
        tape: each layer ``f`` as ``wrap(f)`` if given (``wrap=rm.checkpoint``
        checkpoints every layer).

        >>> import remat as rm
        >>> from remat.workloads import transformer
        >>> w = transformer(steps=2, width=8, heads=2, context=4, batch=1)
        >>> w.run_layers().item() == w.run_layers(rm.checkpoint).item()
        True
        """
        if self.form != "chain":
            raise ValueError(f"run_layers: {self.name} is a {self.form}, not a chain of layers")
        h = self.start()
        for f in self.step:
            h = (f if wrap is None else wrap(f))(h)
        return self.loss(h)

    @property
    def state_bytes(self) -> int:
        """Bytes of one state: what each snapshot holds."""
        parts = self.state if isinstance(self.state, tuple) else (self.state,)
        return sum(backend.nbytes(t._data) for t in parts)


def _randn(rng, *shape, scale=1.0):
    return tensor(rng.standard_normal(shape) * scale, requires_grad=True)


def resmlp(steps: int = 200, width: int = 64, batch: int = 32, seed: int = 0) -> Workload:
    """A residual MLP, ``h <- h + tanh(h W + b) V``, one block reused at every step.

    >>> import remat as rm
    >>> w = rm.workloads.resmlp(steps=10, width=8, batch=2)
    >>> with rm.Tape(snapshots=3) as tape:
    ...     loss, grads = w.loss_and_gradients(tape)
    >>> w.state_bytes, [g.shape for g in grads]
    (128, [(8, 8), (8,), (8, 8)])
    """
    rng = backend.default_rng(seed)
    w = _randn(rng, width, width, scale=1 / width**0.5)
    b = _randn(rng, width, scale=0.1)
    v = _randn(rng, width, width, scale=0.1 / width**0.5)
    h0 = tensor(rng.standard_normal((batch, width)))

    def step(h):
        return h + tanh(h @ w + b) @ v

    return Workload(
        "resmlp",
        f"residual MLP, width {width}, batch {batch}",
        [w, b, v],
        h0,
        step,
        steps,
        lambda h: (h * h).mean(),
    )


def rnn(
    steps: int = 200, hidden: int = 64, vocab: int = 32, batch: int = 16, seed: int = 0
) -> Workload:
    """A character-level recurrent network over a sequence of ``steps`` characters; the
    state carries the hidden vector, the position and the running loss.

    >>> import remat as rm
    >>> w = rm.workloads.rnn(steps=12, hidden=8, vocab=5, batch=2)
    >>> with rm.Tape(snapshots=3) as tape:
    ...     loss, grads = w.loss_and_gradients(tape)
    >>> len(grads), tape.stats.steps
    (4, 12)
    """
    rng = backend.default_rng(seed)
    text = rng.integers(0, vocab, size=(steps + 1, batch))
    onehot = backend.one_hot(text, vocab)  # (steps + 1, batch, vocab)
    inputs, targets = Tensor._wrap(onehot[:-1]), Tensor._wrap(onehot[1:])
    wx = _randn(rng, vocab, hidden, scale=1 / vocab**0.5)
    wh = _randn(rng, hidden, hidden, scale=1 / hidden**0.5)
    wy = _randn(rng, hidden, vocab, scale=1 / hidden**0.5)
    b = _randn(rng, hidden, scale=0.1)

    def step(state):
        h, t, total = state
        h = tanh(inputs[t] @ wx + h @ wh + b)
        total = total - (log_softmax(h @ wy) * targets[t]).sum()
        return h, t + 1, total

    state = (
        tensor(backend.zeros((batch, hidden), backend.float64)),
        tensor(0),
        tensor(0.0),
    )
    return Workload(
        "rnn",
        f"character-level RNN, hidden {hidden}, vocabulary {vocab}, batch {batch}",
        [wx, wh, wy, b],
        state,
        step,
        steps,
        lambda state: state[2] / (steps * batch),
    )


def ode(
    steps: int = 200, dim: int = 32, batch: int = 8, dt: float = 0.05, seed: int = 0
) -> Workload:
    """A nonlinear ODE ``dx/dt = tanh(x W) - x / 2`` integrated with classical Runge-Kutta (RK4).

    >>> import remat as rm
    >>> w = rm.workloads.ode(steps=10, dim=4, batch=2)
    >>> with rm.Tape(snapshots=2) as tape:
    ...     loss, grads = w.loss_and_gradients(tape)
    >>> tape.stats.forward_steps > 10, w.form
    (True, 'loop')
    """
    rng = backend.default_rng(seed)
    w = _randn(rng, dim, dim, scale=1.5 / dim**0.5)
    x0 = tensor(rng.standard_normal((batch, dim)))
    target = tensor(rng.standard_normal((batch, dim)) * 0.5)

    def f(x):
        return tanh(x @ w) - 0.5 * x

    def step(x):  # one classical Runge-Kutta step
        k1 = f(x)
        k2 = f(x + (0.5 * dt) * k1)
        k3 = f(x + (0.5 * dt) * k2)
        k4 = f(x + dt * k3)
        return x + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)

    return Workload(
        "ode",
        f"ODE dx/dt = tanh(W x) - x/2 in {dim} dimensions, RK4 with dt={dt}",
        [w],
        x0,
        step,
        steps,
        lambda x: ((x - target) ** 2).mean(),
    )


def widths(
    steps: int = 200, batch: int = 16, seed: int = 0, cycle: tuple[int, ...] = (64, 96, 32, 128, 48)
) -> Workload:
    """A chain of tanh layers whose widths cycle through ``cycle`` (for ``tape.chain``).

    >>> import remat as rm
    >>> w = rm.workloads.widths(steps=4, batch=2, cycle=(3, 5))
    >>> [p.shape for p in w.params], w.form
    ([(3, 5), (5, 3), (3, 5), (5, 3)], 'chain')
    """
    rng = backend.default_rng(seed)
    sizes = [cycle[i % len(cycle)] for i in range(steps + 1)]
    weights = [_randn(rng, a, b, scale=1 / a**0.5) for a, b in zip(sizes, sizes[1:])]
    layers = [lambda h, w=w: tanh(h @ w) for w in weights]
    return Workload(
        "widths",
        f"a chain of tanh layers of widths {', '.join(map(str, cycle))}, ..., batch {batch}",
        weights,
        tensor(rng.standard_normal((batch, sizes[0]))),
        layers,
        steps,
        lambda h: (h * h).mean(),
        form="chain",
    )


def scan_rnn(
    steps: int = 200, hidden: int = 64, vocab: int = 32, batch: int = 16, seed: int = 0
) -> Workload:
    """The character RNN as a ``tape.scan``: the inputs are scanned over and the
    log-probabilities come out as per-step outputs.

    >>> import remat as rm
    >>> w = rm.workloads.scan_rnn(steps=6, hidden=4, vocab=3, batch=2)
    >>> with rm.Tape(snapshots=2) as tape:
    ...     loss, grads = w.loss_and_gradients(tape)
    >>> w.form, tape.stats.steps
    ('scan', 6)
    """
    rng = backend.default_rng(seed)
    text = rng.integers(0, vocab, size=(steps + 1, batch))
    onehot = backend.one_hot(text, vocab)  # (steps + 1, batch, vocab)
    targets = Tensor._wrap(onehot[1:])
    wx = _randn(rng, vocab, hidden, scale=1 / vocab**0.5)
    wh = _randn(rng, hidden, hidden, scale=1 / hidden**0.5)
    wy = _randn(rng, hidden, vocab, scale=1 / hidden**0.5)
    b = _randn(rng, hidden, scale=0.1)

    def cell(h, x):
        h = tanh(x @ wx + h @ wh + b)
        return h, log_softmax(h @ wy)

    return Workload(
        "scan_rnn",
        f"character-level RNN as a scan, hidden {hidden}, vocabulary {vocab}, batch {batch}",
        [wx, wh, wy, b],
        tensor(backend.zeros((batch, hidden), backend.float64)),
        cell,
        steps,
        lambda h, logp: -(logp * targets).sum() / (steps * batch),
        form="scan",
        xs=Tensor._wrap(onehot[:-1]),
    )


def corpus() -> str:
    """A small text of remat's own making: the docstrings of its modules, lower-cased,
    with every character outside :data:`ALPHABET` written as a space.

    >>> from remat.workloads import ALPHABET, corpus
    >>> text = corpus()
    >>> len(text) > 5000, set(text) <= set(ALPHABET)
    (True, True)

    It changes whenever those docstrings do, and with it the transformer's data.
    """
    from . import budget, checkpoint, executor, functional, memory, schedules, tape

    modules = (tape, executor, functional, checkpoint, budget, memory, schedules)
    text = " ".join(" ".join((module.__doc__ or "").split()) for module in modules).lower()
    return "".join(c if c in ALPHABET else " " for c in text)


ALPHABET = " abcdefghijklmnopqrstuvwxyz.,()'"
"""The transformer's vocabulary: 32 characters."""


def transformer(
    steps: int = 4,
    width: int = 32,
    heads: int = 4,
    context: int = 32,
    batch: int = 4,
    seed: int = 0,
    dtype: str = "float64",
    vocab: int | None = None,
) -> Workload:
    """A GPT-style causal transformer: ``steps`` blocks of width ``width``.

    Characters of :func:`corpus` (``batch`` windows of ``context + 1`` at
    fixed random offsets) are embedded by indexing a table, plus a learned
    position embedding; each block is pre-norm, ``h + attention(layer_norm(h))``
    then ``h + mlp(layer_norm(h))``: multi-head causal self-attention (``heads``
    heads, softmax over the earlier positions) and an MLP of width
    ``4 * width`` with GELU.  The loss is the cross-entropy of the next
    character, through a final layer norm and the embedding table again
    (tied weights).  ``vocab`` (default 32, :data:`ALPHABET`) may be larger;
    the extra symbols never occur.

    The projections are ``matmul`` (``@``) and the attention scores and
    their weighted sum ``einsum``: ``rm.policies.save_ops("matmul")`` keeps
    the projections and recomputes the (context x context) attention of
    every head, as selective recomputation does (Korthikanti et al. 2022),
    while ``save_ops("matmul", "einsum")`` keeps every product (JAX's
    ``dots_saveable``).

    >>> import remat as rm
    >>> from remat.workloads import transformer
    >>> model = transformer(steps=2, width=16, heads=2, context=8, batch=2)
    >>> loss, grads = model.loss_and_gradients(rm.Tape(snapshots=1))
    >>> loss == model.loss_and_gradients(rm.Tape())[0], len(grads)  # store-all's; 26 tensors
    (True, 26)
    """
    if width % heads:
        raise ValueError(f"transformer: width {width} is not divisible by heads {heads}")
    vocab = len(ALPHABET) if vocab is None else vocab
    rng = backend.default_rng(seed)
    codes = {c: i for i, c in enumerate(ALPHABET)}
    text = [codes[c] for c in corpus()]
    offsets = rng.integers(0, len(text) - context - 1, size=batch)
    windows = backend.asarray([text[o : o + context + 1] for o in offsets])
    tokens, targets = windows[:, :-1], windows[:, 1:]
    head = width // heads
    causal = backend.causal_mask(context, dtype)  # 0 on and below the diagonal, -inf above

    def param(*shape, scale):
        return tensor((rng.standard_normal(shape) * scale).astype(dtype), requires_grad=True)

    def ones(n):
        return tensor(backend.asarray([1.0] * n, dtype=dtype), requires_grad=True)

    def zeros(n):
        return tensor(backend.asarray([0.0] * n, dtype=dtype), requires_grad=True)

    table = param(vocab, width, scale=1 / math.sqrt(width))
    position = param(context, width, scale=0.1)
    params = [table, position]
    layers = []
    for _ in range(steps):
        p = dict(
            ln1_w=ones(width),
            ln1_b=zeros(width),
            w_qkv=param(width, 3 * width, scale=1 / math.sqrt(width)),
            w_o=param(width, width, scale=1 / math.sqrt(width * steps)),
            b_o=zeros(width),
            ln2_w=ones(width),
            ln2_b=zeros(width),
            w_1=param(width, 4 * width, scale=1 / math.sqrt(width)),
            b_1=zeros(4 * width),
            w_2=param(4 * width, width, scale=1 / math.sqrt(4 * width * steps)),
            b_2=zeros(width),
        )
        params += p.values()
        layers.append(_block(p, batch, context, heads, head, causal))
    ln_w, ln_b = ones(width), zeros(width)
    params += [ln_w, ln_b]

    def embed():
        return getitem(table, tokens) + position

    def loss(h):
        logits = layer_norm(h, ln_w, ln_b) @ transpose(table)
        return cross_entropy(logits, targets)

    with no_grad():
        first = embed()  # for state_bytes; every run embeds anew
    return Workload(
        "transformer",
        f"GPT-style transformer, {steps} blocks of width {width}, {heads} heads, context "
        f"{context}, batch {batch}, vocabulary {vocab}, {dtype}",
        params,
        first,
        layers,
        steps,
        loss,
        form="chain",
        embed=embed,
        data=(tokens, targets),
    )


def _block(
    p: dict[str, Tensor], batch: int, context: int, heads: int, head: int, causal: Any
) -> Callable[[Tensor], Tensor]:
    """One pre-norm transformer block as a function of the residual stream h."""
    width = heads * head
    scale = 1 / math.sqrt(head)

    def attention(x):
        qkv = reshape(x @ p["w_qkv"], (batch, context, 3, heads, head))
        q, k, v = (getitem(transpose(qkv, (2, 0, 3, 1, 4)), i) for i in range(3))
        scores = einsum("bhqd,bhkd->bhqk", q, k) * scale + causal
        mixed = einsum("bhqk,bhkd->bhqd", softmax(scores, axis=-1), v)
        return reshape(transpose(mixed, (0, 2, 1, 3)), (batch, context, width)) @ p["w_o"]

    def block(h):
        h = h + attention(layer_norm(h, p["ln1_w"], p["ln1_b"])) + p["b_o"]
        mlp = gelu(layer_norm(h, p["ln2_w"], p["ln2_b"]) @ p["w_1"] + p["b_1"]) @ p["w_2"]
        return h + mlp + p["b_2"]

    return block


WORKLOADS: dict[str, Callable[..., Workload]] = {
    "resmlp": resmlp,
    "rnn": rnn,
    "ode": ode,
    "widths": widths,
    "scan_rnn": scan_rnn,
    "transformer": transformer,
}


def make_workload(name: str, steps: int = 200, seed: int = 0) -> Workload:
    """The workload called ``name`` (one of :data:`WORKLOADS`) with ``steps`` steps.

    >>> import remat as rm
    >>> sorted(rm.workloads.WORKLOADS)
    ['ode', 'resmlp', 'rnn', 'scan_rnn', 'transformer', 'widths']
    >>> rm.workloads.make_workload("ode", steps=5).description
    'ODE dx/dt = tanh(W x) - x/2 in 32 dimensions, RK4 with dt=0.05'
    """
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
    return WORKLOADS[name](steps=steps, seed=seed)
