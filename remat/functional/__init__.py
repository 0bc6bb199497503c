"""Functional API: grad, value_and_grad, gradcheck, and forward mode (jvp, hvp).

``rm.grad(f)`` turns a function of Tensors returning a scalar Tensor into a
function returning its gradient.  Called on plain arrays it returns arrays;
called on Tensors that are themselves being differentiated (inside another
``rm.grad``) it records its own backward and returns Tensors, so that
``rm.grad(rm.grad(f))`` gives second derivatives.
"""

# Reverse mode (grad, value_and_grad, gradcheck) and forward mode (jvp, hvp, and the
# forward sweep that the executor and rm.checkpoint use) are a module each.
from .forward import forward_sweep, hvp, jvp
from .reverse import GradcheckError, grad, gradcheck, value_and_grad
