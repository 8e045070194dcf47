"""The running error bound of the attention backward (_bounds._rule_attention_backward): every
backward kernel of torch's scaled dot-product attention family decomposed under BoundMode. Checked:
its fp64 gradients are torch's own (the math path's autograd), eager's f32 and bf16 gradients stay
within its bound, a judged training step through attention has a bound on every gradient, and a
backward that rounds the query's gradient to bf16 reads CONTRADICTED."""

import math

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
from backward_planting import backward_rounding_to_bf16, bounded_gradients  # noqa: E402
from fusebench import _bounds  # noqa: E402
from fusebench.decision import Outcome  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

aten = torch.ops.aten
F = torch.nn.functional
HEADS, KEY_HEADS, LENGTH, WIDTH = 4, 2, 8, 16


def _tensors(seed, dtype=torch.float64):
    """query, key, value (batch, heads, sequence, width), the key and value with KEY_HEADS heads
    for grouped-query attention, a kept-keys mask and the gradient of the output."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, HEADS, LENGTH, WIDTH, generator=g)
    k, v = (torch.randn(2, HEADS, LENGTH, WIDTH, generator=g) for _ in range(2))
    keep = torch.rand(2, 1, LENGTH, LENGTH, generator=g) > 0.3
    keep[..., 0] = True
    grad_out = torch.randn(2, HEADS, LENGTH, WIDTH, generator=g)
    return [t.to(dtype) for t in (q, k, v)], keep, grad_out.to(dtype)


# (is_causal, mask kind, grouped-query attention)
CASES = {
    "plain": (False, None, False),
    "causal": (True, None, False),
    "boolean mask": (False, "bool", False),
    "float mask": (False, "float", False),
    "float mask (-1e9)": (False, "finite", False),
    "gqa": (False, None, True),
    "gqa causal": (True, None, True),
}


def _mask(kind, keep, dtype):
    if kind == "bool":
        return keep
    if kind == "float":
        return torch.where(keep, 0.0, -math.inf).to(dtype)
    if kind == "finite":
        return torch.where(keep, 0.0, -1e9).to(dtype)
    return None


def _math_gradients(q, k, v, grad_out, is_causal, mask, gqa):
    """torch's own fp64 backward of the math path (autograd through its decomposition)."""
    leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
    float_mask = mask is not None and mask.is_floating_point()
    if float_mask:
        mask = mask.detach().requires_grad_(True)
        leaves.append(mask)
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=mask, is_causal=is_causal, enable_gqa=gqa)
    grads = torch.autograd.grad(out, leaves, grad_out)
    return out.detach(), grads


def _kernel_arguments(func, q, k, v, grad_out, out, is_causal, mask, sequence_major):
    """The backward kernel's arguments by its schema: the rule never calls the kernel, so the CUDA
    kernels' schemas are checked on fp64 CPU tensors too."""
    if sequence_major:
        q, k, v, grad_out, out = (t.transpose(1, 2) for t in (q, k, v, grad_out, out))
    named = {
        "grad_out": grad_out, "grad_out_": grad_out, "query": q, "key": k, "value": v, "out": out,
        "logsumexp": torch.empty(0, dtype=torch.float64), "attn_mask": mask, "attn_bias": mask, "bias": mask,
        "dropout_p": 0.0, "is_causal": is_causal, "max_q": LENGTH, "max_k": LENGTH, "max_seqlen_q": LENGTH,
        "max_seqlen_k": LENGTH, "grad_input_mask": [True] * 4, "custom_mask_type": int(is_causal),
        "bias_requires_grad": True,
    }  # fmt: skip
    args, kwargs = [], {}
    for argument in func._schema.arguments:  # sequence offsets, RNG state: None
        if argument.kwarg_only:
            kwargs[argument.name] = named.get(argument.name)
        else:
            args.append(named.get(argument.name))
    return tuple(args), kwargs


KERNELS = {
    # kernel: (sequence-major, takes a mask)
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default: (False, True),
    aten._scaled_dot_product_flash_attention_backward.default: (False, False),
    aten._scaled_dot_product_efficient_attention_backward.default: (False, True),
    aten._scaled_dot_product_cudnn_attention_backward.default: (False, True),
    aten._flash_attention_backward.default: (True, False),
    aten._efficient_attention_backward.default: (True, True),
}


@pytest.mark.parametrize("func", list(KERNELS), ids=lambda f: f.overloadpacket.__name__)
@pytest.mark.parametrize("case", list(CASES))
def test_the_rule_gives_torchs_fp64_gradients_for_every_kernel(func, case):
    """(a) The rule's fp64 gradients are the math path's, for each kernel's schema and layout (the
    sequence-major kernels take (batch, sequence, heads, width)); the efficient kernels' fourth
    result is the float mask's gradient."""
    is_causal, mask_kind, gqa = CASES[case]
    sequence_major, takes_mask = KERNELS[func]
    if mask_kind and not takes_mask:
        pytest.skip(f"{func} takes no mask")
    (q, k, v), keep, grad_out = _tensors(11)
    mask = _mask(mask_kind, keep, torch.float64)
    if gqa:
        k, v = k[:, :KEY_HEADS].contiguous(), v[:, :KEY_HEADS].contiguous()
    if mask is not None and mask.dtype == torch.bool and func.overloadpacket.__name__.startswith("_efficient"):
        mask = torch.where(mask, 0.0, -math.inf).to(torch.float64)  # a bias is a float mask
    out, expected = _math_gradients(q, k, v, grad_out, is_causal, mask, gqa)
    args, kwargs = _kernel_arguments(func, q, k, v, grad_out, out, is_causal, mask, sequence_major)
    mode = _bounds.BoundMode(torch.float32)
    with torch.no_grad():
        got = _bounds._rule_attention_backward(mode, func, args, kwargs, None)
    assert len(got) == len(func._schema.returns)
    grads = [g.transpose(1, 2) for g in got[:3]] if sequence_major else list(got[:3])
    for name, g, e in zip(("query", "key", "value"), grads, expected):
        assert g.shape == e.shape, (name, g.shape, e.shape)
        assert float((g - e).abs().max() / e.abs().max()) <= 1e-12, name
        assert torch.isfinite(mode.bound(g)).all(), name
    if len(got) == 4:
        if mask is not None and mask.is_floating_point():
            assert float((got[3] - expected[3]).abs().max() / expected[3].abs().max()) <= 1e-12
        else:
            assert got[3] is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", [*CASES, "sequence-major", "scale"])
def test_eager_gradients_stay_within_the_bound(case, dtype):
    """(b) eager's gradient of SDPA (the CPU's flash backward) differs from the fp64 one by at most
    the bound, elementwise, on random inputs."""
    is_causal, mask_kind, gqa = CASES.get(case, (False, None, False))
    worst = 0.0
    for seed in range(3):
        (q, k, v), keep, grad_out = _tensors(seed, dtype)
        if gqa:
            k, v = k[:, :KEY_HEADS].contiguous(), v[:, :KEY_HEADS].contiguous()
        mask64 = _mask(mask_kind, keep, torch.float64)

        def f(a, b, c, mask64=mask64):
            mask = None if mask64 is None else (mask64 if mask64.dtype == torch.bool else mask64.to(a.dtype))
            if case == "sequence-major":  # the model keeps (batch, sequence, heads, width) and transposes
                a = a.transpose(1, 2).contiguous().transpose(1, 2)
            return F.scaled_dot_product_attention(
                a, b, c, attn_mask=mask, is_causal=is_causal, enable_gqa=gqa, scale=0.3 if case == "scale" else None
            )

        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        eager = torch.autograd.grad(f(*leaves), leaves, grad_out)
        reference, bounds, mode = bounded_gradients(f, (q, k, v), grad_out, dtype)
        assert not mode.unknown, mode.unknown
        for e, r, b in zip(eager, reference, bounds):
            assert torch.isfinite(b).all()
            ratio = (e.double() - r).abs() / b.clamp_min(_bounds.UNDERFLOW[dtype])
            worst = max(worst, float(ratio.max()))
    print(f"{case} {dtype}: eager's gradient is at most {worst:.3g} x its bound")
    assert worst <= 1.0, f"{case} {dtype}: eager's gradient is {worst:.3g} x its bound"


def test_the_rule_bounds_the_cpu_flash_backward_kernel(monkeypatch):
    """The fp64 run of a causal SDPA's backward dispatches the CPU's flash backward kernel, and the
    rule bounds it: without the rule the gradients fall back to ULP error."""
    calls = []
    rule = _bounds._RULES[aten._scaled_dot_product_flash_attention_for_cpu_backward]

    def counted(mode, func, *rest):
        calls.append(str(func))
        return rule(mode, func, *rest)

    monkeypatch.setitem(_bounds._RULES, aten._scaled_dot_product_flash_attention_for_cpu_backward, counted)
    (q, k, v), _, grad_out = _tensors(3, torch.float32)
    _, bounds, mode = bounded_gradients(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), (q, k, v), grad_out, torch.float32
    )
    assert calls == ["aten._scaled_dot_product_flash_attention_for_cpu_backward.default"]
    assert not mode.unknown and all(torch.isfinite(b).all() for b in bounds)


def test_dropout_and_a_sliding_window_in_the_backward():
    """Dropout is refused as in the forward; a sliding window (no rule) raises NoRule naming it."""
    (q, k, v), _, grad_out = _tensors(4)
    mode = _bounds.BoundMode(torch.float32)
    func = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    with pytest.raises(RuntimeError, match="fusebench: .*dropout_p=0.1"):
        _bounds._rule_attention_backward(mode, func, (grad_out, q, k, v, q, None, 0.1, False), {}, None)
    func = aten._flash_attention_backward.default
    args, kwargs = _kernel_arguments(func, q, k, v, grad_out, q, False, None, True)
    with pytest.raises(_bounds.NoRule, match="window_size_left=4"):
        _bounds._rule_attention_backward(mode, func, args, kwargs | {"window_size_left": 4}, None)


class Attention(torch.nn.Module):
    """A pre-norm causal self-attention block: a layer norm, projections, SDPA with grouped key/value
    heads, an output projection and the residual (a mean square of a layer norm's output would not
    depend on its input: its gradients would be rounding noise)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.query = torch.nn.Linear(32, 32)
        self.key_value = torch.nn.Linear(32, 32)
        self.out = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        b, n, _ = x.shape
        h = self.norm(x)
        q = self.query(h).view(b, n, 4, 8).transpose(1, 2)
        k, v = self.key_value(h).view(b, n, 4, 8).transpose(1, 2).chunk(2, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return x + self.out(y.transpose(1, 2).reshape(b, n, 32))


def mean_square(output, sample):
    return (output * output).mean()


def _sample():
    return (torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(2)),)


def test_a_judged_training_step_through_attention_has_a_bound_on_every_gradient():
    """(c) Every gradient of the attention block is judged on its conditioned error."""
    j = fb.judge(Attention(), _sample(), loss=mean_square, compile="aot_eager", sets=6, speed_rounds=0)
    assert not j.unknown_ops, j.unknown_ops
    for o in j.outputs:
        assert o.measure == "conditioned", (o.name, o.no_bound_reason)
    assert "no error bound" not in str(j)
    assert j.outcome is Outcome.SUPPORTED, j.headline()


# every attention backward's grad_query rounded to bf16 and back (the block has one attention)
_ATTENTION_BACKWARDS = {p.default for p, rule in _bounds._RULES.items() if rule is _bounds._rule_attention_backward}
rounding_grad_query = backward_rounding_to_bf16(
    lambda source, index: index == 0 and getattr(source, "target", None) in _ATTENTION_BACKWARDS, expected=1
)


def test_a_backward_that_rounds_grad_query_to_bf16_is_contradicted():
    """(d) Planted: the query's gradient rounded to bf16 inside the compiled backward; the gradients
    upstream of the query read CONTRADICTED on their conditioned error, the forward stays bit-equal."""
    j = fb.judge(Attention(), _sample(), loss=mean_square, compile=rounding_grad_query, sets=6, speed_rounds=0)
    assert j.outcome is Outcome.CONTRADICTED and j.exit_status == 1, str(j)
    by_name = {o.name: o for o in j.outputs}
    for name in ("grad:query.weight", "grad:query.bias"):
        assert by_name[name].measure == "conditioned", by_name[name].no_bound_reason
        assert by_name[name].outcome is Outcome.CONTRADICTED, str(j)
    assert by_name["out"].bit_equal and by_name["loss"].bit_equal
