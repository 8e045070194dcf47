"""Shared by the backward bound-rule tests: the fp64 gradients under BoundMode with their bounds,
and a torch.compile backend whose backward rounds chosen gradients to bf16 (a planted wrong)."""

import operator

import torch
from functorch.compile import make_boxed_func
from fusebench import _bounds
from torch._dynamo.backends.common import aot_autograd


def bounded_gradients(f, inputs, grad_out, dtype):
    """The fp64 gradients of f under BoundMode (inputs registered as dtype), their bounds, the mode."""
    mode = _bounds.BoundMode(dtype)
    leaves = [t.double().requires_grad_(True) for t in inputs]
    for t in leaves:
        mode.register(t, dtype)
    with mode:
        grads = torch.autograd.grad(f(*leaves), leaves, grad_out.double())
    return grads, [mode.bound(g) for g in grads], mode


def backward_rounding_to_bf16(chosen, expected):
    """An AOTAutograd backend, the forward as traced, whose backward graph has every result
    `chosen(source_node, index)` picks (output `index` of a multi-output ATen op) rounded to bf16
    and back; the backend fails unless it rounded `expected` of them (the plant must land)."""

    def backward(gm, example_inputs):
        rounded = 0
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target is not operator.getitem:
                continue
            source, index = node.args
            if not chosen(source, index):
                continue
            with gm.graph.inserting_after(node):
                down = gm.graph.call_function(torch.ops.aten._to_copy.default, (node,), {"dtype": torch.bfloat16})
            with gm.graph.inserting_after(down):
                up = gm.graph.call_function(torch.ops.aten._to_copy.default, (down,), {"dtype": torch.float32})
            node.replace_all_uses_with(up, delete_user_cb=lambda user, down=down: user is not down)
            rounded += 1
        assert rounded == expected, f"the plant rounded {rounded} results of the backward, not {expected}"
        gm.recompile()
        return make_boxed_func(gm)

    return aot_autograd(fw_compiler=lambda gm, example_inputs: gm, bw_compiler=backward)
