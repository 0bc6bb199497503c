"""The teaching core: reverse mode on a tape, run by the engine as it is written.

Read in this order:

1. :mod:`remat.core.tape` -- Record and Leaf, the nodes of the tape, and the
   reverse sweep that walks them back (a heap by sequence number);
2. :mod:`remat.core.tensor` -- the Tensor: a value, a link to its node, backward();
3. :mod:`remat.core.apply` -- ``defop``, the one generic ``apply`` every op can go
   through, and ``recorded``, where every op (fast paths too) leaves its Record.

:mod:`remat.core.values` is the Tensor's face as an array (shape, dtype,
``requires_grad``, conversions, in-place updates, the seed of ``backward()``) and
:mod:`remat.core.errors` the refusals of bad dtypes and operands: neither is
needed to follow reverse mode.  Each module lists the hooks through which the engine
(loop steps, stand-ins, the guard, dual numbers, selective replay, eviction)
enters it; unused, each costs one test.
"""
