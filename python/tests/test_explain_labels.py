"""explain's label for a lowering:off switch says what the switch does at its node: "scalar
lowering" only where a pointwise op takes a Python number (x * 0.7); at another op, such as a
convolution's backward whose integer groups is no operand, the lowering of that op left out for
ATen's kernel. The nodes are built by hand: nothing is compiled."""

import pytest

torch = pytest.importorskip("torch")
from fusebench._explain import _lowering_label  # noqa: E402

aten = torch.ops.aten


def _call(target, args, kwargs=None):
    graph = torch.fx.Graph()
    placeholders = {name: graph.placeholder(name) for name in ("g", "x", "w")}
    resolved = tuple(placeholders.get(a, a) if isinstance(a, str) else a for a in args)
    return graph.call_function(target, resolved, kwargs or {})


def test_a_convolution_backward_with_integer_attributes_is_no_scalar_lowering():
    node = _call(
        aten.convolution_backward.default,
        ("g", "x", "w", [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True]),
    )
    label = _lowering_label(node, aten.convolution_backward.default, torch)
    assert label == "lowering of aten.convolution_backward.default (ATen's kernel instead)"


def test_a_reduction_over_an_integer_dim_is_no_scalar_lowering():
    node = _call(aten.sum.dim_IntList, ("x", [1]), {"keepdim": False})
    assert (
        _lowering_label(node, aten.sum.dim_IntList, torch) == "lowering of aten.sum.dim_IntList (ATen's kernel instead)"
    )


@pytest.mark.parametrize("scalar", [0.7, 2])
def test_a_pointwise_op_with_a_python_number_is_the_scalar_lowering(scalar):
    import operator

    node = _call(operator.mul, ("x", scalar))
    assert _lowering_label(node, aten.mul.Tensor, torch) == "scalar lowering"


def test_a_pointwise_op_on_tensors_alone_is_its_lowering():
    node = _call(aten.mul.Tensor, ("x", "w"))
    assert _lowering_label(node, aten.mul.Tensor, torch) == "lowering of aten.mul.Tensor (ATen's kernel instead)"
