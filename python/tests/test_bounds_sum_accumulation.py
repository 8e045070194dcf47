"""Reductions count their accumulation in the kernel's precision as the products do
(_bounds._accumulation, docs/conditioned-error.md "Sums"): eager's and Inductor's f32 sum, mean,
cumsum, var, softmax, log_softmax and layer_norm stay within the bound from K = 4 to 16384 terms
per element on positive and signed data, where u sum|x| alone did not (eager 2.5 units of it,
Inductor's strided loop 27); equal terms that Inductor adds one by one stay within the
deterministic gamma_K (docs, Limits: not within the probabilistic bound); a bf16 sum's bound
barely moves (u_bf16 dominates)."""

import math

import pytest

torch = pytest.importorskip("torch")
from fusebench import _bounds  # noqa: E402

LENGTHS = [4, 16, 1024, 16384]


def _data(kind, length, dim):
    """Rows of `length` terms, laid out so that the reduction runs along dim (0: strided, the
    layout Inductor sums one term at a time per output element; -1: contiguous)."""
    g = torch.Generator().manual_seed(length)
    rows = max(8, min(64, 2**20 // length))
    shape = (rows, length) if dim == -1 else (length, rows)
    return torch.rand(shape, generator=g) if kind == "positive" else torch.randn(shape, generator=g)


def _bounded(fn, x, dtype=torch.float32):
    """fn's fp64 value under BoundMode (x registered as dtype) and its bound."""
    mode = _bounds.BoundMode(dtype)
    leaf = x.double()
    mode.register(leaf, dtype)
    with mode:
        out = fn(leaf)
    assert not mode.unknown, mode.unknown
    return out, mode.bound(out)


def _worst(got, fn, x):
    reference, bound = _bounded(fn, x)
    return float(((got.double() - reference).abs() / bound).max())


def _reductions(dim):
    return {
        "sum": lambda t: t.sum(dim),
        "mean": lambda t: t.mean(dim),
        "cumsum": lambda t: t.cumsum(dim),
        "var": lambda t: t.var(dim),
        "softmax": lambda t: t.softmax(dim),
        "log_softmax": lambda t: t.log_softmax(dim),
    }


@pytest.mark.parametrize("kind", ["positive", "signed"])
@pytest.mark.parametrize("length", LENGTHS)
def test_eager_f32_reductions_stay_within_the_bound(length, kind):
    for dim in (-1, 0):
        x = _data(kind, length, dim)
        for name, fn in _reductions(dim).items():
            worst = _worst(fn(x), fn, x)
            print(f"eager {name} K={length} dim={dim} {kind}: at most {worst:.3g} x the bound")
            assert worst <= 1.0, f"eager f32 {name}, K = {length}, dim {dim}, {kind}: {worst:.3g} x its bound"
    x = _data(kind, length, -1)
    layer_norm = lambda t: torch.nn.functional.layer_norm(t, (length,))
    worst = _worst(layer_norm(x), layer_norm, x)
    assert worst <= 1.0, f"eager f32 layer_norm, K = {length}, {kind}: {worst:.3g} x its bound"


@pytest.mark.parametrize("kind", ["positive", "signed"])
@pytest.mark.parametrize("length", LENGTHS)
def test_inductor_f32_sums_stay_within_the_bound(length, kind):
    for dim in (-1, 0):
        x = _data(kind, length, dim)
        for name in ("sum", "mean"):
            fn = _reductions(dim)[name]
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend="inductor", dynamic=False)(x)
            worst = _worst(compiled, fn, x)
            print(f"inductor {name} K={length} dim={dim} {kind}: at most {worst:.3g} x the bound")
            assert worst <= 1.0, f"Inductor f32 {name}, K = {length}, dim {dim}, {kind}: {worst:.3g} x its bound"


@pytest.mark.parametrize("length", [4096, 16384])
def test_inductor_equal_terms_stay_within_gamma_k(length):
    """K copies of 0.1 added one at a time (a strided reduction) round alike: the order-free
    deterministic (u + gamma_K) sum|x| holds, the probabilistic 3 sqrt(K) u_acc does not
    (docs/conditioned-error.md, Limits; the ratio is printed)."""
    x = torch.full((length, 8), 0.1)
    fn = lambda t: t.sum(0)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="inductor", dynamic=False)(x).double()
    exact = x.double().sum(0)
    u = _bounds.unit_roundoff(torch.float32)
    gamma = length * u / (1 - length * u)
    error = float((got - exact).abs().max())
    deterministic = (u + gamma) * float(x.double().abs().sum(0).max())
    _, bound = _bounded(fn, x)
    print(f"inductor sum of {length} equal terms: {error / deterministic:.3g} x (u + gamma_K) sum|x|, "
          f"{error / float(bound.min()):.3g} x the probabilistic bound")  # fmt: skip
    assert 0 < error <= deterministic


def test_a_bf16_sums_bound_is_its_one_rounding_within_one_percent():
    """A bf16 sum accumulated in f32: c(K) u_f32 adds 0.6 % to u_bf16 at K = 16384."""
    x = _data("positive", 16384, -1).bfloat16()
    _, bound = _bounded(lambda t: t.sum(-1), x, torch.bfloat16)
    one_rounding = _bounds.unit_roundoff(torch.bfloat16) * x.double().abs().sum(-1)
    ratio = bound / one_rounding
    assert float(ratio.min()) >= 1.0 and float(ratio.max()) <= 1.01, (float(ratio.min()), float(ratio.max()))
    assert math.isclose(float(ratio.max()), 1 + 3 * 128 * 2.0**-24 / 2.0**-8, rel_tol=1e-9)
