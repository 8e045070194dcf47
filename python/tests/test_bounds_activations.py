"""The running error bound of the activations and their backward ops (_bounds._OWN_ERRORS): eager's
CPU results stay within it (conditioned error <= 1) at f32, bf16 and f16, on random inputs and on
the inputs where the functions' terms cancel (gelu's negative tail, gelu_backward near x = -0.75,
silu_backward near x = -1.28, tanh / sigmoid saturated, x near 0), and the bound is not vacuous
(the median conditioned error over random inputs stays above 0.01)."""

import pytest

torch = pytest.importorskip("torch")
from fusebench import _bounds  # noqa: E402

aten = torch.ops.aten
F64 = torch.float64
DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# name: (root of the function's cancelling sum, builder of (op, args, kwargs) from x and dy)
OPS = {
    "gelu": (-0.75, lambda x, dy: (aten.gelu.default, (x,), {})),
    "gelu tanh": (-0.75, lambda x, dy: (aten.gelu.default, (x,), {"approximate": "tanh"})),
    "gelu_backward": (-0.7518, lambda x, dy: (aten.gelu_backward.default, (dy, x), {})),
    "gelu_backward tanh": (-0.7518, lambda x, dy: (aten.gelu_backward.default, (dy, x), {"approximate": "tanh"})),
    "silu_backward": (-1.2785, lambda x, dy: (aten.silu_backward.default, (dy, x), {})),
    "sigmoid_backward": (0.0, lambda x, dy: (aten.sigmoid_backward.default, (dy, torch.sigmoid(x)), {})),
    "tanh_backward": (0.0, lambda x, dy: (aten.tanh_backward.default, (dy, torch.tanh(x)), {})),
    "threshold_backward": (0.0, lambda x, dy: (aten.threshold_backward.default, (dy, x, 0.0), {})),
}
KINDS = ["random", "near zero", "negative tail", "positive tail", "root", "saturated"]


def _x(kind, root, n=20000, seed=0):
    g = torch.Generator().manual_seed(seed)
    normal = torch.randn(n, generator=g, dtype=F64)
    uniform = torch.rand(n, generator=g, dtype=F64)
    dy = torch.randn(n, generator=g, dtype=F64)
    x = {
        "random": 2 * normal,
        "near zero": (uniform - 0.5) * 2e-3,
        "negative tail": -1 - 9 * uniform,
        "positive tail": 1 + 9 * uniform,
        "root": root + (uniform - 0.5) * 0.02,
        "saturated": (uniform - 0.5) * 40,
    }[kind]
    return x, dy


def conditioned_errors(func, args, kwargs, dtype):
    """|eager - fp64| / max(bound, eta) per element, the arguments exact in dtype."""
    args = tuple(a.to(dtype).to(F64) if isinstance(a, torch.Tensor) else a for a in args)
    eager = func(*(a.to(dtype) if isinstance(a, torch.Tensor) else a for a in args), **kwargs).to(F64)
    mode = _bounds.BoundMode(dtype)
    with mode:
        for a in args:
            if isinstance(a, torch.Tensor):
                mode.register(a, dtype)
        reference = func(*args, **kwargs)
    assert not mode.unknown, mode.unknown
    error = (eager - reference).abs()
    return error, error / mode.bound(reference).clamp_min(_bounds.UNDERFLOW[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", OPS)
def test_eager_is_within_the_bound(name, kind, dtype):
    root, build = OPS[name]
    x, dy = _x(kind, root)
    _, ratio = conditioned_errors(*build(x, dy), dtype)
    assert ratio.max().item() <= 1.0, f"{name} {kind} {dtype}: eager's conditioned error {ratio.max().item():.3g}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", [n for n in OPS if n != "threshold_backward"])
def test_the_bound_is_not_vacuous(name, dtype):
    root, build = OPS[name]
    x, dy = _x("random", root)
    error, ratio = conditioned_errors(*build(x, dy), dtype)
    median = ratio[error > 0].median().item()
    assert 0.01 <= median <= 1.0, f"{name} {dtype}: median conditioned error {median:.3g}"


def test_threshold_backward_is_an_exact_selection():
    x, dy = _x("random", 0.0)
    mode = _bounds.BoundMode(torch.float32)
    with mode:
        mode.register(x, torch.float32)
        mode.register(dy, torch.float32)
        z = aten.threshold_backward.default(dy, x, 0.0)
    assert torch.count_nonzero(mode.bound(z)).item() == 0


def _mlp_gelu_backward_operands():
    """The gelu's input and incoming gradient in test_judge_training's MLP (linear, GELU, layer
    norm, linear, cross entropy; f32), from eager's backward."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    captured = {}
    net[1].register_forward_hook(lambda m, inputs, out: captured.update(x=inputs[0].detach()))
    net[1].register_full_backward_hook(lambda m, grad_in, grad_out: captured.update(dy=grad_out[0].detach()))
    g = torch.Generator().manual_seed(0)
    total = []
    for _ in range(32):  # the judge's sets: fresh inputs each
        captured.clear()
        net.zero_grad()
        x, labels = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        torch.nn.functional.cross_entropy(net(x), labels).backward()
        total.append((captured["x"].to(F64), captured["dy"].to(F64)))
    return total


def test_the_mlps_gelu_backward_is_within_its_bound():
    """Before the activation rules its conditioned error read up to 15.8 (u |z| alone)."""
    worst = 0.0
    for x, dy in _mlp_gelu_backward_operands():
        _, ratio = conditioned_errors(aten.gelu_backward.default, (dy, x), {}, torch.float32)
        worst = max(worst, ratio.max().item())
        _, ratio = conditioned_errors(aten.gelu.default, (x,), {}, torch.float32)
        worst = max(worst, ratio.max().item())
    assert worst <= 1.0, f"the MLP's gelu / gelu_backward: eager's conditioned error {worst:.3g}"
