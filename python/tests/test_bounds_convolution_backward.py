"""The running error bound of the convolution backward (_bounds._rule_convolution_backward):
aten.convolution_backward bounded as the forward's bilinear rule bounds a convolution. Checked: its
fp64 gradients are torch's own, eager's f32 and bf16 gradients stay within its bound (strides,
padding, dilation, groups, transposed), a judged training step through convolutions (a torchvision
MobileNet block's shape) has a bound on every gradient, and a backward that rounds a convolution's
weight gradient to bf16 reads CONTRADICTED."""

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
from backward_planting import backward_rounding_to_bf16, bounded_gradients  # noqa: E402
from fusebench import _bounds  # noqa: E402
from fusebench.decision import Outcome  # noqa: E402

aten = torch.ops.aten
F = torch.nn.functional

# name: (input shape, weight shape, keyword arguments of F.conv2d / F.conv_transpose2d)
CASES = {
    "plain": ((2, 3, 9, 9), (4, 3, 3, 3), {}),
    "stride and padding": ((2, 3, 10, 10), (5, 3, 3, 3), {"stride": 2, "padding": 1}),
    "dilation": ((1, 2, 12, 12), (3, 2, 3, 3), {"dilation": 2}),
    "depthwise (groups)": ((2, 6, 8, 8), (6, 1, 3, 3), {"groups": 6, "padding": 1}),
    "pointwise 1x1": ((2, 16, 5, 5), (8, 16, 1, 1), {}),
    "transposed": ((1, 4, 6, 6), (4, 3, 3, 3), {"stride": 2, "transposed": True}),
    "batch of 16": ((16, 3, 9, 9), (4, 3, 3, 3), {}),
    "batch of 16, transposed": ((16, 4, 6, 6), (4, 3, 3, 3), {"stride": 2, "transposed": True}),
    "batch of 16, dilated": ((16, 2, 12, 12), (3, 2, 3, 3), {"dilation": 2}),
}


def _conv(case):
    shape_x, shape_w, kw = CASES[case]
    kw = dict(kw)
    transposed = kw.pop("transposed", False)

    def f(x, w, b):
        return (F.conv_transpose2d if transposed else F.conv2d)(x, w, b, **kw)

    return shape_x, shape_w, f


def _tensors(case, seed, dtype):
    shape_x, shape_w, f = _conv(case)
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(shape_x, generator=g), torch.randn(shape_w, generator=g)
    bias = torch.randn(shape_w[1] if CASES[case][2].get("transposed") else shape_w[0], generator=g)
    with torch.no_grad():
        grad_out = torch.randn(f(x, w, bias).shape, generator=g)
    return [t.to(dtype) for t in (x, w, bias, grad_out)], f


@pytest.mark.parametrize("case", CASES)
def test_the_rule_gives_torchs_fp64_gradients(case):
    (x, w, bias, grad_out), f = _tensors(case, 0, torch.float64)
    leaves = [t.requires_grad_(True) for t in (x, w, bias)]
    want = torch.autograd.grad(f(*leaves), leaves, grad_out)
    got, bounds, mode = bounded_gradients(f, (x, w, bias), grad_out, torch.float32)
    assert not mode.unknown, mode.unknown
    for name, g, r, b in zip(("input", "weight", "bias"), got, want, bounds):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=0, msg=f"{case}: grad {name}")
        assert torch.isfinite(b).all() and (b > 0).any(), f"{case}: grad {name} has no bound"


def _worst_and_median_ratio(case, dtype):
    """Eager's gradients of the convolution (its own backward kernel in dtype) against the fp64
    ones, over 3 seeds: the largest |eager - fp64| / bound, and the median where eager errs."""
    worst, ratios = 0.0, []
    for seed in range(3):
        (x, w, bias, grad_out), f = _tensors(case, seed, dtype)
        leaves = [t.detach().requires_grad_(True) for t in (x, w, bias)]
        eager = torch.autograd.grad(f(*leaves), leaves, grad_out)
        reference, bounds, mode = bounded_gradients(f, (x, w, bias), grad_out, dtype)
        assert mode.unknown == {}, mode.unknown
        for e, r, b in zip(eager, reference, bounds):
            ratio = (e.double() - r).abs() / b.clamp_min(_bounds.UNDERFLOW[dtype])
            worst = max(worst, float(ratio.max()))
            ratios.append(ratio[ratio > 0])
    median = float(torch.cat(ratios).median())
    print(f"{case} {dtype}: eager's gradients at most {worst:.3g} x the bound, median {median:.3g}")
    return worst, median


@pytest.mark.parametrize("case", CASES)
def test_eager_bf16_gradients_stay_within_the_bound(case):
    """bf16 (accumulated in f32, rounded once to bf16): within the bound elementwise, and the bound
    is not vacuous (median ratio where eager errs above 1 %)."""
    worst, median = _worst_and_median_ratio(case, torch.bfloat16)
    assert worst <= 1.0, f"{case}: eager's bf16 gradient is {worst:.3g} x its bound"
    assert median > 0.01, f"{case}: median ratio {median:.3g}: the bound says little"


def _slow2d_backward(x, w, grad_out, stride, padding, dilation):
    """ATen's Slow2d backward for bf16, step by step: a sample's grad_input columns are one f32 GEMM
    over the output channels rounded to bf16, added into the image window by window in bf16 (col2im,
    its loop order); grad_weight adds each sample's f32 GEMM into itself in bf16 (beta = 1)."""
    (batch, channels, height, width), (kh, kw) = x.shape, w.shape[2:]
    out_h, out_w = grad_out.shape[2:]
    grad_x = torch.zeros_like(x)
    grad_w = torch.zeros(w.shape[0], channels * kh * kw, dtype=x.dtype)
    windows = F.unfold(x.float(), (kh, kw), dilation=dilation, padding=padding, stride=stride)
    for b in range(batch):
        g = grad_out[b].reshape(w.shape[0], -1).float()
        columns = (w.reshape(w.shape[0], -1).float().t() @ g).to(x.dtype).reshape(channels, kh, kw, out_h, out_w)
        for c in range(channels):
            for i in range(kh):
                for j in range(kw):
                    for oh in range(out_h):
                        row = oh * stride - padding + i * dilation
                        cols = [ow * stride - padding + j * dilation for ow in range(out_w)]
                        keep = [k for k, col in enumerate(cols) if 0 <= col < width]
                        if 0 <= row < height and keep:
                            at = torch.tensor([cols[k] for k in keep])
                            grad_x[b, c, row, at] = grad_x[b, c, row, at] + columns[c, i, j, oh, keep]
        grad_w = (grad_w.float() + g @ windows[b].t()).to(x.dtype)
    return grad_x, grad_w.reshape(w.shape)


@pytest.mark.parametrize("case", ["plain", "stride and padding", "batch of 16"])
def test_the_slow_cpu_backward_rounds_as_the_bound_models_it(case):
    """The mechanism the bound's slow-convolution term models, bit for bit: where torch runs a bf16
    convolution on its Slow2d backend (CPUs without AVX-512, where oneDNN does not run bf16), its
    gradients equal _slow2d_backward's. Elsewhere there is nothing of this kind to check."""
    (x, w, _, grad_out), f = _tensors(case, 0, torch.bfloat16)
    kw = CASES[case][2]
    stride, padding = kw.get("stride", 1), kw.get("padding", 0)
    backend = _bounds._convolution_backend(
        x, w, torch.bfloat16, ([stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1)
    )
    if backend != "Slow2d":
        pytest.skip(f"torch runs this bf16 convolution on {backend} here, not Slow2d")
    leaves = [t.detach().requires_grad_(True) for t in (x, w)]
    eager = torch.autograd.grad(f(*leaves, None), leaves, grad_out)
    emulated = _slow2d_backward(x, w, grad_out, stride, padding, 1)
    for name, e, m in zip(("input", "weight"), eager, emulated):
        assert torch.equal(e, m), f"{case}: grad {name} differs from the emulation in {int((e != m).sum())} elements"


@pytest.mark.parametrize("case", ["plain", "transposed"])
def test_eager_f32_gradients_stay_within_the_bound(case):
    """f32 accumulates in its own precision: each gradient's own error counts c(K) u_f32 over its
    own number of terms (_bounds._accumulation)."""
    worst, _ = _worst_and_median_ratio(case, torch.float32)
    assert worst <= 1.0, f"{case}: eager's f32 gradient is {worst:.3g} x its bound"


class Block(torch.nn.Module):
    """A MobileNet block's shape: a 3x3 convolution, batch norm, an in-place ReLU, a depthwise 3x3,
    a pointwise 1x1, pooling and a linear head (eval mode: batch norm on its running statistics)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
        self.norm = torch.nn.BatchNorm2d(8)
        self.act = torch.nn.ReLU(inplace=True)
        self.depthwise = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pointwise = torch.nn.Conv2d(8, 16, 1)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.act(self.norm(self.stem(x)))
        h = self.pointwise(torch.nn.functional.relu(self.depthwise(h)))
        return self.head(h.mean((2, 3)))


def cross_entropy(output, sample):
    return F.cross_entropy(output, torch.arange(output.shape[0]) % 4)


def _sample():
    return torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))


def test_a_judged_training_step_through_convolutions_has_a_bound_on_every_gradient():
    j = fb.judge(Block().eval(), _sample(), loss=cross_entropy, compile="aot_eager", sets=6, speed_rounds=0)
    assert not j.unknown_ops, j.unknown_ops
    for o in j.outputs:
        assert o.measure == "conditioned", (o.name, o.no_bound_reason)
    assert j.outcome is Outcome.SUPPORTED, j.headline()


def _pointwise_grad_weight(source, index):
    """Output 1 (grad_weight) of the convolution_backward whose weight has 16 output channels."""
    if index != 1 or getattr(source, "target", None) is not aten.convolution_backward.default:
        return False
    weight = source.args[2].meta.get("val")
    return weight is not None and weight.shape[0] == 16


rounding_grad_weight = backward_rounding_to_bf16(_pointwise_grad_weight, expected=1)


def test_a_backward_that_rounds_a_weight_gradient_to_bf16_is_contradicted():
    """Planted: the pointwise convolution's weight gradient rounded to bf16 inside the compiled
    backward reads CONTRADICTED there on its conditioned error; the forward stays bit-equal."""
    j = fb.judge(Block().eval(), _sample(), loss=cross_entropy, compile=rounding_grad_weight, sets=6, speed_rounds=0)
    assert j.outcome is Outcome.CONTRADICTED and j.exit_status == 1, str(j)
    by_name = {o.name: o for o in j.outputs}
    planted = by_name["grad:pointwise.weight"]
    assert planted.measure == "conditioned" and planted.outcome is Outcome.CONTRADICTED, str(j)
    assert by_name["loss"].bit_equal and by_name["grad:head.weight"].bit_equal
