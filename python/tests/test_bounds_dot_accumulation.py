"""The bilinear rules count a dot product's accumulation in the kernel's precision
(_bounds._accumulation, docs/conditioned-error.md "Dot products"): eager's and Inductor's f32
products (mm, linear, and a product Inductor sums in loops of its own) stay within the bound from
K = 4 to 16384 on positive and signed data, the bound is not vacuous on positive data (median
ratio where eager errs above 1 %), and a bf16 product's bound barely moves (u_bf16 dominates)."""

import pytest

torch = pytest.importorskip("torch")
from fusebench import _bounds  # noqa: E402

F = torch.nn.functional


def _data(kind, shape, g):
    return torch.rand(shape, generator=g) if kind == "positive" else torch.randn(shape, generator=g)


def _operands(kind, length, rows=64):
    g = torch.Generator().manual_seed(0)
    return _data(kind, (rows, length), g), _data(kind, (length, 32), g), _data(kind, (32,), g)


def _linear(a, b, bias):
    return F.linear(a, b.t(), bias)


def _mm(a, b, bias):
    return torch.mm(a, b)


def _mul_sum(a, b, bias):
    """The product as a broadcast multiply and a sum: Inductor writes the reduction loop itself."""
    return (a[:, :, None] * b[None]).sum(1)


def _bounded(fn, tensors, dtype):
    """fn's fp64 value under BoundMode (operands registered as dtype) and its bound."""
    mode = _bounds.BoundMode(dtype)
    leaves = [t.double() for t in tensors]
    for t in leaves:
        mode.register(t, dtype)
    with mode:
        out = fn(*leaves)
    assert not mode.unknown, mode.unknown
    return out, mode.bound(out)


def _worst_and_median(got, fn, tensors):
    reference, bound = _bounded(fn, tensors, torch.float32)
    ratio = (got.double() - reference).abs() / bound
    erring = ratio[ratio > 0]
    return float(ratio.max()), float(erring.median()) if erring.numel() else 0.0


@pytest.mark.parametrize("kind", ["positive", "signed"])
@pytest.mark.parametrize("length", [4, 64, 1024, 16384])
def test_eager_f32_products_stay_within_the_bound(length, kind):
    tensors = _operands(kind, length)
    for name, fn in (("mm", _mm), ("linear", _linear)):
        worst, median = _worst_and_median(fn(*tensors), fn, tensors)
        print(f"eager {name} K={length} {kind}: at most {worst:.3g} x the bound, median {median:.3g}")
        assert worst <= 1.0, f"eager f32 {name}, K = {length}, {kind}: {worst:.3g} x its bound"
        if kind == "positive" and length <= 1024:
            assert median > 0.01, f"eager f32 {name}, K = {length}: median ratio {median:.3g}, the bound says little"


@pytest.mark.parametrize("kind", ["positive", "signed"])
@pytest.mark.parametrize("length", [16, 1024])
def test_inductor_f32_products_stay_within_the_bound(length, kind):
    tensors = _operands(kind, length, rows=16)
    for name, fn in (("mm", _mm), ("linear", _linear), ("mul-sum", _mul_sum)):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="inductor", dynamic=False)(*tensors)
        worst, median = _worst_and_median(compiled, _mm if fn is _mul_sum else fn, tensors)
        print(f"inductor {name} K={length} {kind}: at most {worst:.3g} x the bound, median {median:.3g}")
        assert worst <= 1.0, f"Inductor f32 {name}, K = {length}, {kind}: {worst:.3g} x its bound"


def test_a_bf16_products_bound_is_its_one_rounding_within_one_percent():
    """A 16-bit result accumulated in f32: the accumulation adds c(K) u_f32 to u_bf16, under 1 %
    even at K = 16384."""
    a, b, _ = _operands("positive", 16384)
    a, b = a.bfloat16(), b.bfloat16()
    _, bound = _bounded(torch.mm, (a, b), torch.bfloat16)
    one_rounding = _bounds.unit_roundoff(torch.bfloat16) * (a.double().abs() @ b.double().abs())
    ratio = bound / one_rounding
    assert float(ratio.min()) >= 1.0 and float(ratio.max()) <= 1.01, (float(ratio.min()), float(ratio.max()))
