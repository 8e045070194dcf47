"""fusebench.judge / explain / apply_switches, the command line and the fixture, on small synthetic
models (the third-party models are in test_judge_models.py)."""

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import fusebench as fb
import numpy as np
import pytest

torch = pytest.importorskip("torch")
from fusebench import _bounds  # noqa: E402
from fusebench._explain import SwitchedInductor  # noqa: E402
from fusebench._judge import perturb, set_generator  # noqa: E402


class Chain(torch.nn.Module):
    """exp(a * b) * 0.5: in bf16 Inductor keeps a * b in fp32 (the fp32-kept boundary)."""

    def forward(self, a, b):
        return torch.exp(a * b) * 0.5


class FMA(torch.nn.Module):
    def forward(self, a, b, c):
        return a * b + c


class Scalar(torch.nn.Module):
    def forward(self, a, b):
        return a * 0.7 + b


def _inputs(k, dtype=torch.bfloat16, n=2048, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(n, generator=g).to(dtype) for _ in range(k))


def worse_compiler(fn):
    """A 'compiler' whose result is the function's, with the exp's result rounded to bf16 first."""
    return lambda a, b: (torch.exp(a * b).to(torch.bfloat16).to(a.dtype)) * 0.5


def identity_compiler(fn):
    return fn


# ---- the running error bound
@pytest.mark.parametrize("dtype,factor", [(torch.bfloat16, 1.0), (torch.float32, 10.0)])
def test_eager_stays_within_the_bound_op_by_op(dtype, factor):
    """Known-answer check of the rules (docs/conditioned-error.md "Checked"): eager, which rounds
    every op's result, measures |eager - fp64| <= factor * E on every element of every op kind."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(16, 64, generator=g), torch.randn(16, 64, generator=g)
    w, b = torch.randn(32, 64, generator=g), torch.randn(32, generator=g)
    pos = torch.rand(16, 64, generator=g) * 3.9 + 0.1
    cases = {
        "add": (lambda p, q: p + q, (x, y)),
        "mul_scalar": (lambda p: p * 0.3, (x,)),
        "div": (lambda p, q: p / q, (x, pos)),
        "exp": (torch.exp, (x,)),
        "log": (torch.log, (pos,)),
        "rsqrt": (torch.rsqrt, (pos,)),
        "gelu": (torch.nn.functional.gelu, (x,)),
        "tanh_gelu": (lambda p: torch.nn.functional.gelu(p, approximate="tanh"), (x,)),
        "linear": (torch.nn.functional.linear, (x, w, b)),
        "sum": (lambda p: p.sum(-1), (x,)),
        "mean": (lambda p: p.mean(-1), (x,)),
        "softmax": (lambda p: torch.softmax(p, -1), (x,)),
        "layer_norm": (lambda p: torch.nn.functional.layer_norm(p, (64,)), (x,)),
        "attention": (
            lambda q, k: torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True),
            (x.view(2, 2, 4, 64), y.view(2, 2, 4, 64)),
        ),
        "chain": (lambda p, q: torch.nn.functional.gelu(p * q + 0.25) * 1.5 - p, (x, y)),
        "cancellation": (lambda p: p - p * (1 + 2**-6), (x,)),
    }
    if dtype == torch.float32:
        # eager's fp32 gelu computes 0.5 x (1 + erf(x / sqrt 2)), which cancels for x << 0: up to
        # 1,150 x the bound here, a finding about the kernel that docs/conditioned-error.md "Limits"
        # names (the bound counts one rounding of the op, not its implementation's own error)
        for name in ("gelu", "tanh_gelu", "chain"):
            del cases[name]
    for name, (f, args) in cases.items():
        args = tuple(a.to(dtype) for a in args)
        eager = f(*args)
        mode = _bounds.BoundMode(dtype)
        up = tuple(a.double() for a in args)
        for a, o in zip(up, args):
            mode.register(a, o.dtype)
        with torch.no_grad(), mode:
            ref = f(*up)
        bound = mode.bound(ref)
        assert not mode.unknown, name
        assert torch.isfinite(bound).all(), name
        error = (eager.double() - ref).abs()
        worst = float((error / bound.clamp_min(_bounds.UNDERFLOW[dtype])).max())
        assert worst <= factor, f"{name} {dtype}: eager is {worst:.3g} x its bound"


def _attention_configurations():
    """scaled_dot_product_attention as current LLM code writes it: heads, GQA, masks, causal, layouts."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(5)
    keep = torch.rand(2, 1, 8, 8, generator=g) > 0.3
    keep[..., 0] = True
    starved = keep.clone()
    starved[1, 0, :3] = False  # rows with no key kept (left padding under a causal mask): torch gives 0
    additive = torch.where(keep, 0.0, float("-inf"))
    return {
        "multi-head": lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
        "causal": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "gqa (enable_gqa)": lambda q, k, v: F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True),
        "gqa causal": lambda q, k, v: F.scaled_dot_product_attention(
            q, k[:, :2], v[:, :2], enable_gqa=True, is_causal=True
        ),
        "gqa (repeat_kv)": lambda q, k, v: F.scaled_dot_product_attention(
            q, k[:, :2].repeat_interleave(2, 1), v[:, :2].repeat_interleave(2, 1)
        ),
        "boolean mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
        "boolean mask, rows with nothing kept": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=starved
        ),
        "float mask (-inf)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
        "float mask (-1e9)": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=additive.clamp_min(-1e9)
        ),
        "gqa with a mask": lambda q, k, v: F.scaled_dot_product_attention(
            q, k[:, :2], v[:, :2], attn_mask=keep, enable_gqa=True
        ),
        "scale": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
        "3-d (no batch)": lambda q, k, v: F.scaled_dot_product_attention(q[0], k[0], v[0]),
        "sequence-major transposed": lambda q, k, v: F.scaled_dot_product_attention(
            q.transpose(1, 2).contiguous().transpose(1, 2), k, v
        ),
        "fewer queries, causal": lambda q, k, v: F.scaled_dot_product_attention(q[:, :, :3], k, v, is_causal=True),
        "value width differs": lambda q, k, v: F.scaled_dot_product_attention(q, k, v[..., :8]),
        "2-d mask": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=keep[0, 0]),
    }


@pytest.mark.parametrize("dtype,factor", [(torch.bfloat16, 1.0), (torch.float32, 10.0)])
def test_attention_configurations_are_bounded(dtype, factor):
    """Every configuration gets a bound (no unknown op, no crash), and eager stays within it (in
    f32 within 10 x, as the op-by-op check above: the CPU's flash kernel evaluates exp its own way,
    up to 1.3 x here)."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 4, 8, 16, generator=g).to(dtype) for _ in range(3))
    for name, f in _attention_configurations().items():
        eager = f(q, k, v)
        mode = _bounds.BoundMode(dtype)
        up = tuple(t.double() for t in (q, k, v))
        for t in up:
            mode.register(t, dtype)
        with torch.no_grad(), mode:
            ref = f(*up)
        bound = mode.bound(ref)
        assert not mode.unknown, (name, mode.unknown)
        assert torch.isfinite(bound).all() and torch.isfinite(ref).all(), name
        worst = float(((eager.double() - ref).abs() / bound.clamp_min(_bounds.UNDERFLOW[dtype])).max())
        assert worst <= factor, f"{name} {dtype}: eager is {worst:.3g} x its bound"


def test_an_attention_form_without_a_rule_is_named_not_a_crash():
    """A sliding window (an argument the rule does not cover) on the sequence-major kernel: the op
    is named, its output falls back to ULP error."""
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 8, 2, 16, generator=g, dtype=torch.float64) for _ in range(3))
    mode = _bounds.BoundMode(torch.float32)
    with torch.no_grad(), mode:
        out = mode.__torch_dispatch__(
            torch.ops.aten.add.Tensor, (), (q, k), {}
        )  # any op runs; now one form the attention rule refuses
        from fusebench._bounds import NoRule, _rule_attention

        with pytest.raises(NoRule, match="sliding window"):
            _rule_attention(
                mode, torch.ops.aten._flash_attention_forward.default,
                (q, k, v, None, None, 8, 8, 0.0, True, False), {"window_size_left": 4}, None,
            )  # fmt: skip
    assert torch.isfinite(mode.bound(out)).all()

    def qr_then_attention(x):
        r = torch.linalg.qr(x)[0]
        return torch.nn.functional.scaled_dot_product_attention(r[None, None], r[None, None], r[None, None])

    j = fb.judge(qr_then_attention, torch.randn(8, 8), sets=3, compile=identity_compiler, speed_rounds=0)
    assert j.outputs[0].measure == "ulp" and "linalg_qr" in j.outputs[0].no_bound_reason


def test_unknown_op_is_named_and_its_output_falls_back_to_ulp():
    def f(x):
        return torch.linalg.qr(x)[0] * 2  # no rule, no decomposition

    j = fb.judge(f, torch.randn(16, 16), sets=4, compile=identity_compiler, speed_rounds=0)
    assert any("linalg_qr" in op for op in j.unknown_ops)
    assert j.outputs[0].measure == "ulp" and "linalg_qr" in j.outputs[0].no_bound_reason
    assert "linalg_qr" in str(j)


# ---- judge
def test_identity_is_bit_equal_and_supported():
    j = fb.judge(Chain().eval(), _inputs(2), sets=6, compile=identity_compiler, speed_rounds=2)
    assert j.bit_equal and j.outcome.value == "supported" and bool(j) and j.exit_status == 0
    assert "compiled = eager, bit-equal" in j.headline()
    assert "compiled = eager, bit-equal" in str(j)


def test_a_worse_compiler_is_contradicted_with_the_interval():
    j = fb.judge(Chain().eval(), _inputs(2, torch.float32), sets=12, compile=worse_compiler, speed_rounds=0)
    assert j.outcome.value == "contradicted" and j.exit_status == 1 and not j
    out = j.outputs[0]
    assert out.measure == "conditioned" and out.outcome.value == "contradicted"
    assert all(p.interval.low > p.tolerance for p in out.parts if p.final.value == "contradicted")
    text = str(j)
    for label in (
        "per-set P99 conditioned error",
        "ULP error",
        "the plan's literal rule",
        "torch._dynamo.utils.same",
        "msprobe",
        "eager run twice: bit-equal",
    ):
        assert label in text


class DeepLinear(torch.nn.Module):
    """24 fixed random linear maps: the first-order bound compounds |W| where the values compound W,
    so the output's bound ends up about 1e18 times its own rounding (as a deep network's gradients)."""

    def __init__(self, n=64, layers=24):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.w = torch.nn.ParameterList(
            torch.nn.Parameter(torch.randn(n, n, generator=g) / n**0.5) for _ in range(layers)
        )

    def forward(self, x):
        for w in self.w:
            x = x @ w
        return x


def rounds_output_to_bf16(fn):
    return lambda x: fn(x).to(torch.bfloat16).to(x.dtype)


def test_a_planted_loss_where_the_bound_cannot_resolve_is_decided_by_the_ulp_error():
    """The conditioned error of both paths lies ~1e-14 of this output's bound, within the fp64
    reference's resolution: its +1,000 % reads unresolved, and the ULP error decides the output."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2))
    j = fb.judge(DeepLinear().eval(), x, sets=8, compile=rounds_output_to_bf16, speed_rounds=0)
    assert j.outcome.value == "contradicted", str(j)
    out = j.outputs[0]
    assert out.measure == "ulp" and "the bound cannot resolve compiled against eager" in out.no_bound_reason
    assert all(p.unresolved for p in out.other_parts if p.statistic.startswith("cond"))
    assert "(unresolved" in str(j)


def test_inductor_chain_bf16_supported_and_better(tmp_path):
    """The real Inductor on the fp32-kept boundary: compiled is more accurate than eager."""
    j = fb.judge(Chain().eval(), _inputs(2), sets=12, speed_rounds=3)
    assert j.outcome.value == "supported"
    assert not j.bit_equal and j.outputs[0].ulp_diff_max > 0
    assert j.parts[0].interval.high < 0  # compiled's conditioned P99 is lower
    assert j.speed is not None and j.speed.rounds == 3 and j.speed.compile_s > 0
    d = j.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["outcome"] == "supported" and d["outputs"][0]["per_set"]["compiled"]["cond_p99"]
    html = j.report(tmp_path)
    assert os.path.exists(html) and (tmp_path / "judgment.md").exists()
    assert json.loads((tmp_path / "judgment.json").read_text())["schema"] == "fusebench.judgment/1"
    assert "SUPPORTED" in (tmp_path / "judgment.md").read_text()


def test_sets_are_reproducible_and_counter_based():
    base = fb.Inputs((torch.randn(64), torch.randint(0, 100, (8,)), torch.ones(4, dtype=torch.long)), {})
    a = perturb(base, set_generator(7, 3), 0.5)
    b = perturb(base, set_generator(7, 3), 0.5)  # set 3 alone, without making sets 1 and 2
    c = perturb(base, set_generator(7, 4), 0.5)
    assert all(torch.equal(x, y) for x, y in zip(a.args, b.args))
    assert not torch.equal(a.args[0], c.args[0])
    assert torch.equal(a.args[2], base.args[2])  # a constant tensor (an attention mask) is kept
    assert int(a.args[1].min()) >= int(base.args[1].min()) and int(a.args[1].max()) <= int(base.args[1].max())


def test_sampler_and_kwargs():
    def sampler(index, generator):
        return {"a": torch.randn(512, generator=generator), "b": torch.randn(512, generator=generator)}

    j = fb.judge(Chain().eval(), sampler, sets=4, compile=identity_compiler, speed_rounds=0, dtype="bf16")
    assert j.bit_equal and j.dtype == "bf16"


def test_train_mode_is_refused_with_the_reason():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Dropout(0.1))
    with pytest.raises(fb.JudgeError, match="dropout.*model.eval"):
        fb.judge(model.train(), torch.randn(4, 16), sets=4, compile=identity_compiler)
    norm = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16)).train()
    j = fb.judge(norm, torch.randn(8, 16), sets=3, compile=identity_compiler, speed_rounds=0)
    assert any("batch norm" in n for n in j.notes)


def test_bad_input():
    with pytest.raises(fb.JudgeError, match="at least 2 input sets"):
        fb.judge(Chain(), _inputs(2), sets=1)
    with pytest.raises(fb.JudgeError, match="unknown torch.compile backend"):
        fb.judge(Chain(), _inputs(2), sets=2, compile="no-such-backend")
    with pytest.raises(fb.JudgeError, match="sample is a"):
        fb.judge(Chain(), 3.0, sets=2)


# ---- explain: planted mechanisms
PLANTED = [
    # (model, inputs, user's Inductor options, node, mechanism, switch)
    (Chain, lambda: _inputs(2), None, "exp", "per-op rounding", "compiler:emulate_precision_casts=True"),
    (
        FMA,
        lambda: _inputs(3, torch.float32),
        {"cpp.enable_floating_point_contract_flag": "fast"},
        "add",
        "FMA contraction",
        "compiler:cpp.enable_floating_point_contract_flag='off'",
    ),
    (
        Scalar,
        lambda: _inputs(2),
        {"emulate_precision_casts": True},
        "mul",
        "scalar lowering",
        "lowering:off=aten.mul.Tensor",
    ),
]


@pytest.mark.parametrize("case", range(len(PLANTED)), ids=["fp32-kept boundary", "FMA", "scalar cast"])
def test_explain_names_the_planted_mechanism_and_the_switch_removes_it(case):
    cls, make, options, node, mechanism, switch = PLANTED[case]
    model, inputs = cls().eval(), make()
    view = torch.int16 if inputs[0].dtype == torch.bfloat16 else torch.int32
    eager = model(*inputs).view(view)
    torch._dynamo.reset()
    plain = torch.compile(model, backend=SwitchedInductor([], options), dynamic=False)
    if torch.equal(plain(*inputs).view(view), eager):  # e.g. a CPU without FMA: nothing planted
        pytest.skip(f"Inductor on this machine computes {cls.__name__} bit-equal to eager")
    e = fb.explain(model, inputs, criterion="differs", options=options, sets=3, cost_rounds=3)
    assert e.status == "explained", str(e)
    assert e.localisation is not None and e.localisation.node == node, str(e)
    assert e.mechanism == mechanism and e.minimal == [switch], str(e)
    assert e.switch_list[0].cost is not None and e.switch_list[0].cost["rounds"] == 3
    assert len(e.tried) <= e.budget and "budget" in str(e)
    json.dumps(e.to_dict(), allow_nan=False)
    assert e.removes_at_outputs is True
    torch._dynamo.reset()
    switched = fb.apply_switches(model, e, options=options)
    assert torch.equal(switched(*inputs).view(view), eager)  # the switch list removes the difference


class Two(torch.nn.Module):
    """Two mechanisms in a row: the fp32-kept boundary at exp, then (under per-op rounding) the
    scalar 0.7 cast to bf16 at the second mul."""

    def forward(self, a, b, c):
        return torch.exp(a * b) * 0.7 + c


def test_explain_searches_on_from_a_first_explanation():
    model, inputs = Two().eval(), _inputs(3)
    first = fb.explain(model, inputs, criterion="differs", sets=2, cost_rounds=0)
    if first.status == "nothing to explain":
        pytest.skip("Inductor on this machine computes Two bit-equal to eager")
    assert first.localisation.node == "exp" and first.minimal == ["compiler:emulate_precision_casts=True"]
    assert first.removes_at_outputs is False and "searches on" in str(first)
    second = fb.explain(model, inputs, criterion="differs", sets=2, cost_rounds=0, switches=first)
    assert second.localisation.node == "mul_1" and second.mechanism == "scalar lowering", str(second)
    assert second.minimal == ["lowering:off=aten.mul.Tensor"] and second.removes_at_outputs is True
    torch._dynamo.reset()
    both = fb.apply_switches(model, [*first.minimal, *second.minimal])
    assert torch.equal(both(*inputs).view(torch.int16), model(*inputs).view(torch.int16))


def test_apply_switches_parses_tokens():
    with pytest.raises(fb.JudgeError, match="not a switch"):
        fb.apply_switches(Chain(), ["bogus"])
    compiled = fb.apply_switches(Chain(), ["compiler:emulate_precision_casts=True", "split:after=mul"])
    a, b = _inputs(2)
    torch.testing.assert_close(compiled(a, b), Chain()(a, b), rtol=0, atol=0)
    pytest.importorskip("triton")
    torch._dynamo.reset()  # Triton's switch (CUDA's FMA contraction): on CPU the patch is inert
    compiled = fb.apply_switches(Chain(), ["triton:enable_fp_fusion=False", "compiler:emulate_precision_casts=True"])
    torch.testing.assert_close(compiled(a, b), Chain()(a, b), rtol=0, atol=0)


# ---- the command line
FACTORIES = textwrap.dedent(
    """
    import torch

    class Chain(torch.nn.Module):
        def forward(self, a, b):
            return torch.exp(a * b) * 0.5

    def _x():
        g = torch.Generator().manual_seed(0)
        return (torch.randn(1024, generator=g), torch.randn(1024, generator=g))

    def chain():
        return Chain().eval(), _x()

    def broken():
        return Chain()

    def worse():
        def compiled_worse(a, b):
            return (torch.exp(a * b).to(torch.bfloat16).to(a.dtype)) * 0.5
        class Worse(torch.nn.Module):
            def forward(self, a, b):
                if torch.compiler.is_compiling():
                    return compiled_worse(a, b)
                return torch.exp(a * b) * 0.5
        return Worse().eval(), _x()

    def raises():
        class Raises(torch.nn.Module):
            def forward(self, a, b):
                raise RuntimeError("planted failure in forward")
        return Raises().eval(), _x()

    def float64():
        return Chain().eval(), tuple(t.double() for t in _x())

    def straddle():
        # compiled rounds to bf16 where b[0] > 0: set 0 (b[0] = 0.1) is far worse, set 1 (seed 0:
        # b[0] perturbed to -0.237) equal, so two sets cannot tell
        class Straddle(torch.nn.Module):
            def forward(self, a, b):
                y = torch.exp(a * b) * 0.5
                if torch.compiler.is_compiling():
                    y = torch.where(b[0] > 0, y.to(torch.bfloat16).to(y.dtype), y)
                return y
        g = torch.Generator().manual_seed(4)
        a, b = torch.randn(1024, generator=g), torch.randn(1024, generator=g)
        b[0] = 0.1
        return Straddle().eval(), (a, b)
    """
)


def _cli(tmp_path, *args):
    """python -m fusebench judge ARGS in a process of its own (the entry point, a module imported by name)."""
    (tmp_path / "factories.py").write_text(FACTORIES)
    return subprocess.run(
        [sys.executable, "-m", "fusebench", "judge", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def judge_cli(tmp_path, monkeypatch, capsys):
    """fusebench judge ARGS through the command line's main() in this process (no interpreter start
    and torch import per call): (exit status, stdout, stderr)."""
    from fusebench.__main__ import main

    (tmp_path / "factories.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)

    def run(*args):
        status = main(["judge", *args])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_cli_exit_status_and_report(tmp_path, judge_cli):
    status, out, err = judge_cli("factories.py:chain", "--dtype", "bf16", "--sets", "6", "--speed-rounds", "2",
                                 "--out", "r")  # fmt: skip
    assert status == 0, err
    assert "verdict: SUPPORTED" in out and (tmp_path / "r" / "judgment.html").exists()
    worse = _cli(tmp_path, "factories:worse", "--sets", "8", "--backend", "aot_eager",
                 "--speed-rounds", "0")  # fmt: skip
    assert worse.returncode == 1, worse.stdout + worse.stderr
    assert "CONTRADICTED" in worse.stdout


def test_cli_bad_input_exit_status_2(judge_cli):
    for args, reason in (
        (["factories.py:broken"], "expected (model, sample)"),
        (["factories.py:nothing"], "no callable 'nothing'"),
        (["nomodule:chain"], "cannot import nomodule"),
        (["factories.py:chain", "--dtype", "f8"], "dtype='f8'"),
        (["factories.py:chain", "--sets", "1"], "at least 2 input sets"),
        (["factories.py:chain", "--backend", "aot_eager", "--explain"], "--explain attributes Inductor"),
        (["factories.py:chain", "--backend", "no-such-backend"], "unknown torch.compile backend"),
        (["factories.py:chain", "--sets", "many"], "invalid int value"),
    ):
        status, _, err = judge_cli(*args)
        assert status == 2 and reason in err, (args, err)


def test_cli_model_failure_is_exit_status_4_and_float64_is_bad_input(judge_cli):
    status, out, err = judge_cli("factories.py:raises", "--sets", "2", "--speed-rounds", "0")
    assert status == 4, out + err
    assert "the model failed: judge: raises raised in its eager run on input set 0" in err
    assert "planted failure in forward" in err and "verdict" not in out
    status, _, err = judge_cli("factories.py:float64", "--sets", "2", "--speed-rounds", "0")
    assert status == 2 and "no more precise" in err, err


def test_cli_inconclusive_exit_status(judge_cli):
    status, out, err = judge_cli(
        "factories.py:straddle", "--sets", "2", "--backend", "aot_eager", "--speed-rounds", "0"
    )
    assert status == 3, out + err
    assert "INCONCLUSIVE" in out and "sets would decide it" in out


# ---- the fixture
def test_fixture_passes_and_fails_with_the_criterion(tmp_path):
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Chain(torch.nn.Module):
                def forward(self, a, b):
                    return torch.exp(a * b) * 0.5

            def worse(fn):
                return lambda a, b: (torch.exp(a * b).to(torch.bfloat16).to(a.dtype)) * 0.5

            def x():
                g = torch.Generator().manual_seed(0)
                return (torch.randn(512, generator=g), torch.randn(512, generator=g))

            def test_compiled_not_worse(fusebench):
                j = fusebench.assert_fused_not_worse(Chain().eval(), x(), sets=8)
                assert j.outcome.value != "contradicted"

            def test_worse_compiler(fusebench):
                fusebench.assert_fused_not_worse(Chain().eval(), x(), sets=8, compile=worse, tolerance=0.02)

            def scribbles(fn):
                def run(a, b):
                    y = fn(a, b)
                    a.zero_()
                    return y

                return run

            def test_compiler_that_writes_into_its_input(fusebench):
                fusebench.assert_fused_not_worse(Chain().eval(), x(), sets=4, compile=scribbles)
            """
        )
    )
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "2 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    assert "CONTRADICTED: compiled writes into input[0], which eager leaves as it was: 2,560 elements" in r.stdout
    assert "out: CONTRADICTED on the conditioned error: per-set P99 conditioned error +" in r.stdout
    assert "tolerance +2" in r.stdout and "worst compiled element" in r.stdout
    assert "pytest_plugin.py" not in r.stdout  # no plugin source in the traceback


def test_report_records_inconclusive_as_inconclusive_and_failures_apart(tmp_path):
    (tmp_path / "test_user.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Straddle(torch.nn.Module):
                # compiled rounds to bf16 where b[0] > 0: set 0 far worse, set 1 (b[0] perturbed
                # below 0) equal, so two sets cannot tell
                def forward(self, a, b):
                    y = torch.exp(a * b) * 0.5
                    if torch.compiler.is_compiling():
                        y = torch.where(b[0] > 0, y.to(torch.bfloat16).to(y.dtype), y)
                    return y

            def x():
                g = torch.Generator().manual_seed(4)
                a, b = torch.randn(1024, generator=g), torch.randn(1024, generator=g)
                b[0] = 0.1
                return a, b

            def test_inconclusive(fusebench):
                fusebench.assert_fused_not_worse(Straddle().eval(), x(), sets=2, compile="aot_eager")

            def test_raises(fusebench):
                def broken(a, b):
                    raise RuntimeError("planted")
                fusebench.assert_fused_not_worse(broken, x(), sets=2, compile="aot_eager")
            """
        )
    )
    report = tmp_path / "report.json"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--fusebench-report={report}",
            "test_user.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "1 failed, 1 passed" in r.stdout, r.stdout + r.stderr
    summary = json.loads(report.read_text())
    outcomes = {rec["test"].split("::")[-1]: rec for rec in summary["assertions"] if rec["measure"] == "outcome"}
    inconclusive = outcomes["test_inconclusive"]
    assert (inconclusive["outcome"], inconclusive["exit_status"], inconclusive["verdict"]) == (
        "inconclusive",
        3,
        "pass",
    ), inconclusive  # passes under inconclusive="pass", recorded as what it is
    assert inconclusive["figure"].startswith("INCONCLUSIVE")
    failed = outcomes["test_raises"]
    assert (failed["outcome"], failed["exit_status"], failed["verdict"]) == ("failure", 4, "fail")
    assert "planted" in failed["figure"]
    assert summary["judgments"]["inconclusive"] == 1 and summary["judgments"]["failure"] == 1
    assert summary["judgments"]["supported"] == 0


def test_compare_fused_stays_the_plans_literal_rule():
    x = torch.linspace(-4, 4, 512).to(torch.float16)
    result = fb.compare_fused(lambda t: torch.exp(t) * 0.5, x, compile=lambda f: f)
    assert result.not_worse
    assert np.isfinite(result.outputs[0].eager.ulp_error.max)


# ---- every output judged, whatever its dtype (planted wrongs)
def _x(n=1024, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g), torch.randn(n, generator=g))


def nan_in_half(fn):
    """A compiler whose result is NaN at every other element."""

    def run(a, b):
        y = fn(a, b).clone()
        y[::2] = float("nan")
        return y

    return run


def one_inf(fn):
    def run(a, b):
        y = fn(a, b).clone()
        y[7] = float("inf")
        return y

    return run


def all_nan(fn):
    return lambda a, b: torch.full_like(fn(a, b), float("nan"))


@pytest.mark.parametrize(
    "planted,count,first",
    [(nan_in_half, "2,048 elements in 4 of 4 sets", "index 0: compiled nan"),
     (one_inf, "4 elements in 4 of 4 sets", "index 7: compiled inf"),
     (all_nan, "4,096 elements in 4 of 4 sets", "index 0: compiled nan")],
)  # fmt: skip
def test_non_finite_where_eager_is_finite_is_contradicted_before_any_statistic(planted, count, first):
    j = fb.judge(Chain().eval(), _x(), sets=4, compile=planted, speed_rounds=0)
    assert j.outcome.value == "contradicted" and j.exit_status == 1, str(j)
    o = j.outputs[0]
    assert o.finding.startswith("non-finite where eager is finite: " + count), o.finding
    assert first in o.finding and first in j.headline()
    text = str(j)
    assert "decided before any statistic" in text
    assert "cancellation" not in text  # a NaN is never shown as an element where the computation cancels
    assert all(math.isfinite(w.compiled) for w in o.worst)
    # torch's own same() as it is: it fails every set here
    assert "torch._dynamo.utils.same(eager, compiled, fp64) per set: passes 0 of 4 sets" in text
    json.dumps(j.to_dict(), allow_nan=False)


def test_all_nan_in_both_is_judged():
    def nan_everywhere(a):
        return a * float("nan")

    j = fb.judge(nan_everywhere, torch.randn(64), sets=3, compile=identity_compiler, speed_rounds=0)
    assert j.outcome.value == "supported" and j.bit_equal
    assert "compiled is non-finite exactly where eager is" in str(j)


# ---- what a call writes besides its outputs (planted wrongs)
def scribbles_on_its_input(worse, written):
    """A compiler whose result is `worse` times eager's and which then multiplies its first input by `written`
    in place (a buffer reused for an intermediate). With written = worse, a reference run on that input
    afterwards would agree with its error."""

    def compiler(fn):
        def run(a, b):
            y = fn(a, b) * worse
            a.mul_(written)
            return y

        return run

    return compiler


@pytest.mark.parametrize("worse,written", [(1.05, 1.05), (1.0, 3.0)])
def test_a_compiler_that_writes_into_its_input_is_contradicted_and_the_reference_runs_on_the_set(worse, written):
    j = fb.judge(Chain().eval(), _x(), sets=4, compile=scribbles_on_its_input(worse, written), speed_rounds=0)
    assert j.outcome.value == "contradicted" and j.exit_status == 1, str(j)
    (write,) = j.writes
    assert write.what == "input[0]" and write.calls == ["the first call", "set 0", "set 1", "set 2", "set 3"]
    assert write.elements == 5 * 1024
    assert j.headline().startswith(
        "CONTRADICTED: compiled writes into input[0], which eager leaves as it was: 5,120 elements changed in 5 calls"
    )
    assert "(decided before any statistic)" in str(j)
    # the statistics ran on the set as it was made: the planted 5 % shows there too, and a compiler that only
    # writes keeps its outputs' verdict
    assert j.outputs[0].outcome.value == ("contradicted" if worse > 1 else "supported"), str(j)
    assert json.loads(json.dumps(j.to_dict(), allow_nan=False))["writes"][0]["what"] == "input[0]"


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-1, 1, 64))

    def forward(self, a):
        return a * self.weight


def nudges_the_weight(model):
    """A compiled model that writes into a parameter through .data (no version counter sees it)."""

    def run(a):
        y = model(a)
        model.weight.data[3] += 0.25
        return y

    return run


def test_a_compiler_that_writes_into_a_parameter_is_contradicted_and_the_model_put_back():
    model = Affine().eval()
    before = model.weight.detach().clone()
    j = fb.judge(model, torch.randn(64), sets=3, compile=nudges_the_weight, speed_rounds=2)
    assert j.outcome.value == "contradicted", str(j)
    (write,) = j.writes
    assert write.what == "parameter weight" and write.calls == ["the first call", "set 0", "set 1", "set 2"]
    assert write.elements == 4 and "index 3: " in write.first
    # every eager run, and the caller afterwards, saw the weight as it was given (speed rounds included)
    assert torch.equal(model.weight.detach(), before)
    assert j.outputs[0].bit_equal, str(j)


class DoublesItsInput(torch.nn.Module):
    """A model that updates its input in place, as user code may."""

    def forward(self, a, b):
        a.mul_(2)
        return torch.exp(a * b) * 0.5


def test_a_model_that_writes_into_its_input_gets_a_copy_per_run():
    # eagerly twice on one set, each run on its own copy: bit-equal (not a nondeterministic model)
    sample = _x()
    kept = [t.clone() for t in sample]
    j = fb.judge(DoublesItsInput().eval(), sample, sets=3, compile=identity_compiler, speed_rounds=2)
    assert j.outcome.value == "supported" and j.bit_equal and not j.writes, str(j)
    assert any(n.startswith("eager writes into input[0]: each run gets its own copy") for n in j.notes), j.notes
    # set 0 is the sample itself: no run, timed ones included, wrote into the caller's tensors
    assert all(torch.equal(t, k) for t, k in zip(sample, kept))


class CountsItsCalls(Affine):
    """A model that keeps a count of its calls in a buffer, written through .data (no version counter sees it)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, a):
        self.calls.data += 1
        return super().forward(a)


def test_state_that_eager_writes_too_is_the_models_behaviour_not_a_finding():
    model = CountsItsCalls().eval()
    j = fb.judge(model, torch.randn(64), sets=3, compile=identity_compiler, speed_rounds=0)
    assert j.outcome.value == "supported" and not j.writes, str(j)
    assert "eager writes into the model's buffer calls (as in train mode): not judged" in j.notes
    assert float(model.calls) == 2 + 1 + 3 + 3  # sanity runs, first call, the sets' eager and compiled runs


def bf16_matmuls_for_everyone(model):
    """A compiled model that turns on bf16 matmuls process-wide: eager and the reference would then run so too."""

    def run(a):
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"
        return model(a)

    return run


def test_a_compiler_that_changes_a_global_setting_is_contradicted_and_the_setting_put_back():
    before = torch.backends.mkldnn.matmul.fp32_precision
    model = torch.nn.Linear(64, 64).eval()
    j = fb.judge(model, torch.randn(8, 64), sets=3, compile=bf16_matmuls_for_everyone, speed_rounds=2)
    assert j.outcome.value == "contradicted", str(j)
    (write,) = j.writes
    assert write.what == "torch.backends.mkldnn.matmul.fp32_precision"
    assert write.calls == ["the first call", "set 0", "set 1", "set 2"]
    assert j.headline() == (
        "CONTRADICTED: compiled changes torch's global setting torch.backends.mkldnn.matmul.fp32_precision, under "
        "which eager and the fp64 reference run next, in 4 calls (the first call, set 0, set 1 and 1 more); first in "
        f"the first call: {before!r} became 'bf16' (put back after each call)"
    )
    assert torch.backends.mkldnn.matmul.fp32_precision == before


def in_half(fn):
    return lambda a, b: fn(a, b).half()


def one_short(fn):
    return lambda a, b: fn(a, b)[:-1]


@pytest.mark.parametrize("planted,first", [(in_half, "set 0: compiled f16[1024], eager f32[1024]"),
                                           (one_short, "set 0: compiled f32[1023], eager f32[1024]")])  # fmt: skip
def test_a_compiled_output_of_another_dtype_or_shape_is_contradicted_not_bad_input(planted, first):
    j = fb.judge(Chain().eval(), _x(), sets=3, compile=planted, speed_rounds=0)
    assert j.outcome.value == "contradicted" and j.exit_status == 1, str(j)
    (o,) = j.outputs
    assert o.finding == f"compiled returns it in another dtype or shape than eager in 3 of 3 sets; first at {first}"
    assert o.finding in j.headline() and not o.parts
    json.dumps(j.to_dict(), allow_nan=False)


def test_explain_refuses_a_judgment_it_cannot_localise():
    written = fb.judge(Chain().eval(), _x(), sets=2, compile=scribbles_on_its_input(1.0, 3.0), speed_rounds=0)
    with pytest.raises(fb.JudgeError, match=r"decided by what compiled writes \(compiled writes into input\[0\]"):
        fb.explain(Chain().eval(), _x(), judgment=written)
    halved = fb.judge(Chain().eval(), _x(), sets=2, compile=in_half, speed_rounds=0)
    with pytest.raises(fb.JudgeError, match="compiled returns out in another dtype or shape than eager"):
        fb.explain(Chain().eval(), _x(), judgment=halved)
    # a judgment of another compiler is not Inductor's to localise
    other = fb.judge(Chain().eval(), _x(), sets=2, compile=bf16_backend, speed_rounds=0)
    with pytest.raises(fb.JudgeError, match="the judgment is of bf16_backend, and explain would localise inductor's"):
        fb.explain(Chain().eval(), _x(), judgment=other)


class HoldsACompiledChain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.compile(Chain())

    def forward(self, a, b):
        return self.inner(a, b)


def test_eager_runs_op_by_op_where_fn_is_or_holds_torch_compiles_output():
    """Given torch.compile(model) as fn, eager ran compiled code and read 'compiled = eager, bit-equal'."""
    plain = fb.judge(Chain().eval(), _x(), sets=4, dtype="bf16", speed_rounds=0)
    assert not plain.bit_equal
    for fn, where in ((torch.compile(Chain().eval()), "fn is torch.compile's output"),
                      (HoldsACompiledChain().eval(), "fn holds torch.compile's output (inner)")):  # fmt: skip
        j = fb.judge(fn, _x(), sets=4, dtype="bf16", speed_rounds=0)
        assert not j.bit_equal and j.outcome is plain.outcome, str(j)
        assert [p.shown for p in j.parts] == [p.shown for p in plain.parts]
        assert any(n.startswith(where + ": eager and the fp64 reference ran it op by op") for n in j.notes), j.notes


def test_a_callable_given_as_compiled_is_named_by_itself_never_as_inductor():
    def hand_written(a, b):
        return torch.exp(a * b) * 0.5

    j = fb.judge(Chain().eval(), _x(), sets=2, compiled=hand_written, speed_rounds=0)
    assert j.backend == "hand_written" and str(j).startswith("fusebench judgment: Chain, f32, hand_written vs eager")
    assert fb.judge(Chain().eval(), _x(), sets=2, compiled=Chain().eval(), speed_rounds=0).backend == "Chain"
    named = fb.judge(Chain().eval(), _x(), sets=2, compile="aot_eager", compiled=hand_written, speed_rounds=0)
    assert named.backend == "aot_eager"


class Counts(torch.nn.Module):
    """A floating output beside an integer and a bool one."""

    def forward(self, a):
        return a * 2, (a > 0).sum(), a > 1


def off_by_one(fn):
    def run(a):
        y, count, mask = fn(a)
        return y, count + 1, mask

    return run


def test_integer_and_bool_outputs_are_compared_exactly():
    x = torch.randn(256, generator=torch.Generator().manual_seed(1))
    same = fb.judge(Counts().eval(), x, sets=3, compile=identity_compiler, speed_rounds=0)
    assert same.outcome.value == "supported", str(same)
    exact = [o for o in same.outputs if o.exact]
    assert [o.dtype for o in exact] == ["int64", "bool"]
    assert all(o.finding == f"compared exactly ({o.dtype}): compiled equals eager in all 3 sets" for o in exact)
    assert "out[1]: compared exactly (int64): compiled equals eager in all 3 sets" in str(same)
    wrong = fb.judge(Counts().eval(), x, sets=3, compile=off_by_one, speed_rounds=0)
    assert wrong.outcome.value == "contradicted" and wrong.exit_status == 1
    count = wrong.outputs[1]
    assert count.outcome.value == "contradicted" and not wrong.bit_equal
    eager_count = int((x > 0).sum())
    assert count.finding == (
        f"compared exactly (int64): compiled differs from eager in 3 of 3 sets, 3 elements in all; first at set 0, "
        f"index 0: compiled {eager_count + 1}, eager {eager_count}"
    )
    assert "out[1]: compared exactly (int64): compiled differs" in wrong.headline()


def test_torch_same_is_reported_as_torch_computes_it():
    from torch._dynamo.utils import same

    j = fb.judge(Chain().eval(), _inputs(2, torch.float32), sets=4, compile=worse_compiler, speed_rounds=0)
    expected = []
    for index in range(4):
        inputs = fb.Inputs(_inputs(2, torch.float32), {}) if index == 0 else None
        if inputs is None:
            inputs = perturb(fb.Inputs(_inputs(2, torch.float32), {}), set_generator(0, index), 0.5)
        eager, compiled = Chain()(*inputs.args), worse_compiler(None)(*inputs.args)
        fp64 = Chain()(*(a.double() for a in inputs.args))
        expected.append(bool(same(eager, compiled, fp64, log_error=lambda *a: None)))
    assert j.outputs[0].same == expected


def test_a_float64_model_is_refused_saying_why():
    with pytest.raises(fb.JudgeError, match="float64.*no more precise"):
        fb.judge(Chain().eval(), _inputs(2, torch.float64), sets=2, compile=identity_compiler)
    with pytest.raises(fb.JudgeError, match="its parameters are float64"):
        fb.judge(torch.nn.Linear(8, 8).double().eval(), torch.randn(2, 8).double(), sets=2)


# ---- compile=: a backend name, a backend callable, a compiler of the model
def bf16_backend(gm, example_inputs):
    """A torch.compile backend whose graph's floating results are rounded to bf16."""

    def run(*args):
        out = gm(*args)
        return type(out)(t.to(torch.bfloat16).to(t.dtype) if t.is_floating_point() else t for t in out)

    return run


def test_compile_takes_a_backend_callable_and_tells_it_from_a_model_compiler():
    from fusebench._judge import compiler_kind

    assert compiler_kind(bf16_backend) == "backend"
    assert compiler_kind(identity_compiler) == "model" and compiler_kind(torch.compile) == "model"
    assert compiler_kind(lambda gm, example_inputs, **kw: gm) == "backend"
    with pytest.raises(fb.JudgeError, match="a backend takes"):
        compiler_kind(lambda a, b, c: a)
    torch._dynamo.reset()
    j = fb.judge(Chain().eval(), _x(), sets=6, compile=bf16_backend, speed_rounds=0)
    assert j.outcome.value == "contradicted", str(j)
    assert j.backend == "bf16_backend" and not j.bit_equal
    assert any(p.final.value == "contradicted" for p in j.parts)
    torch._dynamo.reset()
    control = fb.judge(Chain().eval(), _x(), sets=6, compile="aot_eager", speed_rounds=0)
    assert control.outcome.value == "supported" and control.bit_equal


def test_a_model_that_raises_is_a_model_error():
    def broken(a):
        raise RuntimeError("planted failure")

    with pytest.raises(fb.ModelError, match="eager run on input set 0: RuntimeError: planted failure"):
        fb.judge(broken, torch.randn(8), sets=2, compile=identity_compiler)

    def compiled_breaks(fn):
        def run(a):
            raise ValueError("compiled breaks")

        return run

    with pytest.raises(fb.ModelError, match="compiled .* on input set 0: ValueError"):
        fb.judge(lambda a: a * 2, torch.randn(8), sets=2, compile=compiled_breaks)


# ---- progress and the speed line
def test_progress_on_stderr_and_a_speed_line_that_cannot_contradict_itself(monkeypatch, capsys):
    from fusebench._judge import Progress, Speed

    monkeypatch.setattr(Progress, "PROGRESS_AFTER_S", 0.0)  # a judgment of seconds shows it as one of minutes
    monkeypatch.setattr(Progress, "PROGRESS_EVERY_S", 0.0)
    j = fb.judge(Chain().eval(), _x(), sets=3, compile=identity_compiler, speed_rounds=3)
    err = capsys.readouterr().err
    for done in (1, 2, 3):
        assert f"fusebench judge: Chain: {done} of 3 sets done, about " in err, err
    assert "s left for the sets" in err and "timing eager against compiled, 3 interleaved rounds" in err
    # the line: medians 3.53 ms and 0.453 ms beside a geometric mean of ratios of 2.04x
    line = Speed(1.0, 3.53, 0.453, 2.04, 1.5, 2.8, 15).text()
    assert "0.453" not in line and line.count("x eager's speed") == 1
    assert "compiled 2.04x eager's speed [1.50, 2.80]" in line and "eager 3.53 ms per call" in line
    text = str(j)  # the judgment's own line reads the same way
    assert re.search(r"speed: compile [\d.]+ s \(first call\); compiled [\d.]+x eager's speed \[", text), text
    speed_line = next(line for line in text.splitlines() if line.startswith("speed:"))
    assert speed_line.endswith("ms per call (median of the rounds)") and speed_line.count(" ms") == 1, speed_line


# ---- explain on graphs with in-place ops
class ConvBlock(torch.nn.Module):
    """conv, batch norm, ReLU twice, as ResNet writes it: ReLU(inplace=True) mutates the batch
    norm's output."""

    def __init__(self, inplace: bool):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=inplace),
            torch.nn.Conv2d(8, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(inplace=inplace),
        )  # fmt: skip
        for m in self.body:
            if isinstance(m, torch.nn.BatchNorm2d):  # statistics that are not the identity
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.body(x).mean((2, 3))


def test_explain_with_in_place_activations_localises_as_the_out_of_place_twin():
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    found = {}
    for inplace in (True, False):
        torch._dynamo.reset()
        model = ConvBlock(inplace).eval().to(torch.bfloat16)
        e = fb.explain(model, (x,), criterion="differs", sets=2, cost_rounds=0, budget=2)
        if e.status == "nothing to explain":
            pytest.skip("Inductor on this machine computes the block bit-equal to eager")
        loc = e.localisation
        assert loc is not None, str(e)
        # the value of a node is the one it had when it ran, not the one a later in-place op left
        assert loc.compiled_cond_max is None or loc.compiled_cond_max < 100, str(e)
        found[inplace] = (loc.position, loc.compiled_cond_max, loc.compiled_ulp_max, loc.eager_ulp_max)
    assert found[True] == found[False], found
