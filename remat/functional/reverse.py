"""Reverse mode as functions: ``rm.grad``, ``rm.value_and_grad``, ``rm.gradcheck``.

``value_and_grad`` is the one that does the work: it puts a stand-in Tensor in
place of each leaf of the arguments differentiated (:func:`target`), runs
``f`` with recording on, checks that the output is a scalar, and sweeps
backward from it to the stand-ins (:func:`remat.tape.backward_to`).  At top
level the gradients are arrays and nothing stays recorded; inside another
``rm.grad`` or ``rm.jvp`` (or on Tensors that require grad) the backward is
itself recorded, so that its results can be differentiated again.
:func:`grad` keeps the gradient, and :func:`gradcheck` compares it with
central differences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import backend, selective
from ..ops import astype, identity
from ..pytree import flatten, unflatten
from ..tape import (
    FORWARD_MODE,
    GRAD_DEPTH,
    GRAD_ENABLED,
    RECORDED_BACKWARD,
    STEP,
    BackwardError,
    ConstantInput,
    backward_to,
    enable_grad,
    next_sequence,
    no_grad,
)
from ..tensor import (
    DTypeError,
    Tensor,
    as_leaf_dtype,
    own_gradients,
    refuse_complex,
    refuse_complex_gradient,
)

if TYPE_CHECKING:
    from ..typing import TensorLike


class GradcheckError(AssertionError):
    """An analytic gradient disagrees with central finite differences.

    >>> import numpy as np, remat as rm
    >>> try:  # x.detach() hides half of the dependence from the gradient
    ...     rm.gradcheck(lambda x: (x.detach() * x).sum(), np.array([1.0, 2.0]))
    ... except rm.GradcheckError as error:
    ...     print("caught:", str(error).split(":")[0])
    caught: gradcheck of <lambda>
    """


def _check_scalar(out, f):
    if not isinstance(out, Tensor):
        raise TypeError(
            f"{getattr(f, '__name__', f)!r} must return a Tensor; got {type(out).__name__}"
        )
    if out.size != 1:
        raise BackwardError(
            f"rm.grad needs a function with a single-element output; "
            f"{getattr(f, '__name__', 'f')} returned shape {out.shape}"
        )


def value_and_grad(
    f: Callable[..., Tensor], argnums: int | Sequence[int] = 0
) -> Callable[..., tuple[Tensor, Any]]:
    """``g(*args) -> (f(*args), gradient)``; the gradient is a tuple if ``argnums`` is.

    An argument differentiated may be a pytree (nested tuples, lists, dicts) of
    arrays or Tensors; its gradient has the same structure, so
    ``rm.grad(loss)(params_dict)`` returns a dict.  Non-array leaves are static.

    Called on arrays (or Tensors that need no gradient) at top level, the
    gradients are arrays and nothing is left recorded.  Called inside another
    ``rm.grad``, or on Tensors that require gradients, the backward is itself
    recorded and the gradients are Tensors, so they can be differentiated in
    turn (``rm.grad(rm.grad(f))``, gradient penalties).

    >>> import numpy as np, remat as rm
    >>> value, g = rm.value_and_grad(lambda x: (x * x).sum())(np.array([1.0, 2.0]))
    >>> float(value), g
    (5.0, array([2., 4.]))
    """
    single = isinstance(argnums, int)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def value_and_grad_f(*args):
        for n in nums:
            if not -len(args) <= n < len(args):
                raise IndexError(f"argnums={argnums} but the function got {len(args)} arguments")
        positions = [n % len(args) for n in nums]
        if len(set(positions)) < len(positions):
            raise ValueError(
                f"rm.grad: argnums={argnums} names argument(s) "
                f"{sorted({p for p in positions if positions.count(p) > 1})} more than once "
                f"(the function got {len(args)} arguments); name each argument once"
            )
        if selective.OPEN and any(isinstance(f, selective.Saving) for f in selective.FRAMES.get()):
            raise NotImplementedError(_GRAD_UNDER_A_POLICY)
        depth = GRAD_DEPTH.get()
        # Under no_grad nothing is recorded: a plain gradient (never zeros from
        # unrecorded inputs), also inside an untaped loop step (GRAD_ENABLED is
        # UNTAPED there, which grad_enabled() reports as on).
        # Inside rm.jvp the backward is recorded too: its tangent may be wanted, also
        # when only what f closes over carries one.
        nested = bool(GRAD_ENABLED.get()) and (
            depth > 0 or FORWARD_MODE.get() or any(_requires_grad(a) for a in args)
        )
        inputs = [  # arrays are copied: the caller's array stays theirs
            Tensor(a) if i not in positions and backend.is_array(a) else a
            for i, a in enumerate(args)
        ]
        targets, trees = [], []  # the leaves differentiated, and each argument's pytree
        for n in nums:
            leaves, tree = flatten(args[n], is_value)
            if not leaves:
                raise TypeError(
                    f"rm.grad: argument {n} holds no array or Tensor to differentiate "
                    f"(got {type(args[n]).__name__})"
                )
            stand_ins = [target(n, a, nested) for a in leaves]
            inputs[n] = unflatten(tree, stand_ins)
            targets += stand_ins
            trees.append((tree, len(stand_ins)))
        target_nodes = [t.node for t in targets]  # now: f may rebind its arguments (x *= 2)
        floor = next_sequence()  # records made from here on are this call's own
        token = GRAD_DEPTH.set(depth + 1)
        # A recorded backward may be differentiated again: checkpointed chains keep x_0
        recorded = RECORDED_BACKWARD.set(nested)
        try:
            with enable_grad():  # rm.grad differentiates even inside rm.no_grad()
                out = f(*inputs)
        finally:
            RECORDED_BACKWARD.reset(recorded)
            GRAD_DEPTH.reset(token)
        _check_scalar(out, f)
        seed = backend.ones_like(out._data)
        grads = backward_to(
            out, Tensor._wrap(seed) if nested else seed, target_nodes, floor, nested
        )
        results = []
        for t, node, g in zip(targets, target_nodes, grads):
            if g is None:  # f does not depend on this input
                g = backend.zeros(t.shape, t.dtype, like=t._data)
                g = Tensor._wrap(g) if nested else g
            elif not nested:
                g = as_leaf_dtype(g, node)
            elif g.dtype != t.dtype:  # float32 stays float32, differentiably
                refuse_complex_gradient(g, t)
                g = astype(g, t.dtype)
            results.append(g)
        if not nested:
            results = [g for _, g in own_gradients(enumerate(results), seed)]
            marker = STEP.get()
            if marker is not None:  # inside a loop step: the results are the step's values
                results = [Tensor._from_record(g, marker) for g in results]
        per_argument, start = [], 0
        for tree, count in trees:  # each gradient in its argument's shape (dicts stay dicts)
            per_argument.append(unflatten(tree, results[start : start + count]))
            start += count
        value = out if nested else out.detach()
        return value, (per_argument[0] if single else tuple(per_argument))

    value_and_grad_f.__name__ = f"value_and_grad({getattr(f, '__name__', 'f')})"
    return value_and_grad_f


_GRAD_UNDER_A_POLICY = (
    "rm.grad (or rm.value_and_grad) inside a function checkpointed with a policy "
    "(rm.checkpoint(f, policy=...), or a step of rm.Tape(policy=...)) is not supported: "
    "its recomputation records the inner backward's ops, which this first run does not "
    "evaluate, so the values the policy keeps could not be matched to their ops by position. "
    "Checkpoint this function with policy=None (it is then recomputed whole, and checked)"
)


def is_value(v):
    """A leaf differentiated: a Tensor or an array (anything else in a pytree is static)."""
    return isinstance(v, Tensor) or backend.is_array(v)


def _requires_grad(tree):
    return any(isinstance(v, Tensor) and v.node for v in flatten(tree, is_value)[0])


def target(n, a, nested, where="rm.grad"):
    """The Tensor that stands for leaf ``a`` of argument ``n`` while f runs."""
    if nested and isinstance(a, Tensor) and a.node:
        return identity(a)  # stands for a, and stays connected to a's graph
    data = backend.asarray(a._data if isinstance(a, Tensor) else a)
    if not backend.is_floating(data.dtype):
        if where == "rm.grad":
            raise DTypeError(
                f"rm.grad: argument {n} has dtype {data.dtype}; gradients need floats (it "
                f"has shape {data.shape})"
            )
        raise DTypeError(  # n counts the leaves of the primals' pytrees
            f"{where}: primal leaf {n} (in flattened order) has dtype {data.dtype}; "
            f"tangents need floats (it has shape {data.shape})"
        )
    t = Tensor._stand_in(data)
    if nested:  # a constant outside this call: no backward asks for its gradient
        t.node = ConstantInput(t)
    return t


def grad(f: Callable[..., Tensor], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """The gradient of scalar-valued ``f`` with respect to argument(s) ``argnums``.

    The result has the structure of those arguments: an array for an array, a
    dict for a dict of parameters, a tuple when ``argnums`` is a tuple.

    >>> import numpy as np, remat as rm
    >>> df = rm.grad(lambda x, y: (x * y).sum(), argnums=(0, 1))
    >>> df(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    (array([3., 4.]), array([1., 2.]))
    >>> rm.grad(lambda p: (p["w"] * 2.0).sum())({"w": np.ones(2)})
    {'w': array([2., 2.])}
    """
    vg = value_and_grad(f, argnums)

    def grad_f(*args):
        return vg(*args)[1]

    grad_f.__name__ = f"grad({getattr(f, '__name__', 'f')})"
    return grad_f


def gradcheck(
    f: Callable[..., Tensor],
    *inputs: TensorLike,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
) -> bool:
    """Compare rm.grad(f) with central differences, in float64, for every input.

    Returns True, or raises :class:`GradcheckError` naming the input, the worst
    element and both values.

    >>> import numpy as np, remat as rm
    >>> rm.gradcheck(lambda x: rm.sin(x).sum(), np.array([0.5, 1.0]))
    True
    """
    arrays = []
    for i, a in enumerate(inputs):
        a = backend.asarray(a.data if isinstance(a, Tensor) else a)
        refuse_complex(a, f"gradcheck: input {i}", "float64")
        arrays.append(backend.asarray(a, dtype=backend.float64))
    if not arrays:
        raise ValueError("gradcheck needs at least one input")
    analytic = grad(f, argnums=tuple(range(len(arrays))))(*arrays)
    for i, (x, a) in enumerate(zip(arrays, analytic)):
        numeric = backend.zeros(x.shape, x.dtype, like=x)
        flat, num = x.reshape(-1), numeric.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            up = _value(f, arrays)
            flat[j] = old - eps
            down = _value(f, arrays)
            flat[j] = old
            num[j] = (up - down) / (2 * eps)
        a = backend.to_host(a)
        numeric = backend.to_host(numeric)
        excess = (abs(a - numeric) - (atol + rtol * abs(numeric))).reshape(-1)
        excess[excess != excess] = float("inf")  # a NaN (or inf - inf) is never within tolerance
        if excess.size and excess.max() > 0:
            worst = tuple(int(k) for k in divmod_index(excess.argmax(), x.shape))
            raise GradcheckError(
                f"gradcheck of {getattr(f, '__name__', 'f')}: input {i} (shape {x.shape}), "
                f"element {worst}: analytic {a[worst]!r} vs numeric {numeric[worst]!r} "
                f"(allowed |difference| <= {atol} + {rtol}*|numeric|)"
            )
    return True


def divmod_index(flat_index, shape):
    """The multi-index of ``flat_index`` in an array of ``shape`` (C order)."""
    index = []
    for n in reversed(shape):
        flat_index, k = divmod(int(flat_index), n)
        index.append(k)
    return tuple(reversed(index))


def _value(f, arrays):
    with no_grad():  # copies: the arrays are perturbed next
        out = f(*[Tensor(a) for a in arrays])
    value = out._data if isinstance(out, Tensor) else backend.asarray(out)
    return float(backend.to_host(value).reshape(-1)[0])
