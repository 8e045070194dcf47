"""Tests of tools/gpu/inductor_mechanisms.py (the command, its parts in tools/gpu/mechanisms) without
a GPU: its ULP and rounding helpers on hand-made cases, its readers of generated Triton code and PTX
on hand-made files, the Triton patch it takes from fusebench, its argument checks, and a dry run on
Inductor's C++ backend (--device cpu --sizes small) with a budget that stops it: valid JSON,
Triton-only variants marked n/a, the budget honoured."""

from __future__ import annotations

import inspect
import json
import math
import pathlib
import subprocess
import sys
import time
import types

import pytest

torch = pytest.importorskip("torch", reason="torch is not importable (install tools/requirements-frameworks.txt)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu" / "inductor_mechanisms.py"


from tools.gpu.mechanisms import evidence, findings, measures, patches  # noqa: E402


def t(values, dtype):
    return torch.tensor(values, dtype=dtype)


def bits(pattern: int, dtype):
    it = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}[dtype]
    width = torch.finfo(dtype).bits
    if pattern >= 1 << (width - 1):
        pattern -= 1 << width
    return torch.tensor([pattern], dtype=it).view(dtype)


# ---------------------------------------------------------------------------------------------
# ULPs and rounding


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_ulp_distance_hand_made(dtype):
    fi = torch.finfo(dtype)
    one = t([1.0], dtype)
    next_up = (
        torch.nextafter(one.float(), t([2.0], torch.float32)).to(dtype)
        if dtype == torch.float32
        else t([1.0 + fi.eps], dtype)
    )
    assert measures.ulp_distance(one, one).item() == 0
    assert measures.ulp_distance(one, next_up).item() == 1
    assert measures.ulp_distance(next_up, one).item() == 1
    # +0 and -0 are the same point; the smallest subnormals on either side of zero are 2 apart
    assert measures.ulp_distance(t([0.0], dtype), t([-0.0], dtype)).item() == 0
    tiny = t([fi.smallest_normal], dtype)
    sub = bits(1, dtype)
    neg_sub = bits((1 << (fi.bits - 1)) | 1, dtype)
    assert sub.item() > 0 and neg_sub.item() < 0
    assert measures.ulp_distance(sub, neg_sub).item() == 2
    assert measures.ulp_distance(neg_sub, t([0.0], dtype)).item() == 1
    assert measures.ulp_distance(-tiny, tiny).item() == 2 * measures.ordered_int(tiny).item()
    # across a sign change: -1 to +1 is twice the distance from 0 to 1
    assert measures.ulp_distance(-one, one).item() == 2 * measures.ordered_int(one).item()
    # the largest finite value is 1 ULP below infinity
    assert measures.ulp_distance(t([fi.max], dtype), t([math.inf], dtype)).item() == 1
    # NaN on both sides counts 0, on one side -1 (counted apart by ulp_stats)
    nan = t([math.nan], dtype)
    assert measures.ulp_distance(nan, nan).item() == 0
    assert measures.ulp_distance(nan, one).item() == -1


def test_ulp_distance_known_values():
    # f16: 1.0 = 0x3C00, 2.0 = 0x4000 -> 1024 ULPs; bf16: 1.0 = 0x3F80, 2.0 = 0x4000 -> 128
    assert measures.ulp_distance(t([1.0], torch.float16), t([2.0], torch.float16)).item() == 1024
    assert measures.ulp_distance(t([1.0], torch.bfloat16), t([2.0], torch.bfloat16)).item() == 128
    assert measures.ulp_distance(t([1.0], torch.float32), t([2.0], torch.float32)).item() == 1 << 23
    assert measures.ulp_distance(t([1.0], torch.bfloat16), t([1.0078125], torch.bfloat16)).item() == 1
    assert measures.ulp_distance(t([1.0], torch.float16), t([1.0009765625], torch.float16)).item() == 1
    with pytest.raises(ValueError):
        measures.ulp_distance(t([1.0], torch.float16), t([1.0], torch.bfloat16))


def test_ulp_stats():
    ref = t([1.0] * 200, torch.float16)
    out = ref.clone()
    out[0] = 1.0009765625  # 1 ULP
    out[1] = 1.001953125  # 2 ULP
    out[2] = math.nan
    s = measures.ulp_stats(out, ref)
    assert s["n"] == 200 and s["nan_mismatch"] == 1
    # nearest rank over the 199 non-NaN distances: the 198th smallest (ceil(0.99 * 199)) is 1
    assert s["max"] == 2 and s["p99"] == 1
    assert (s["n_0"], s["n_1"], s["n_2"], s["n_gt2"]) == (197, 1, 1, 0)


def test_round_to_dtype_avoids_double_rounding():
    f64 = torch.float64
    # just above the midpoint between 1 and the next f16 (bf16): nearest is the upper neighbour,
    # but float64 -> float32 lands exactly on the midpoint and ties-to-even then goes down
    x16 = t([1 + 2**-11 + 2**-40], f64)
    assert x16.to(torch.float16).item() == 1.0  # torch's own conversion rounds twice
    assert measures.round_to_dtype(x16, torch.float16).item() == 1 + 2**-10
    xb = t([1 + 2**-8 + 2**-40], f64)
    assert measures.round_to_dtype(xb, torch.bfloat16).item() == 1 + 2**-7
    # just below the midpoint rounds down; the exact midpoint ties to even
    assert measures.round_to_dtype(t([1 + 2**-11 - 2**-40], f64), torch.float16).item() == 1.0
    assert measures.round_to_dtype(t([1 + 2**-11], f64), torch.float16).item() == 1.0
    assert measures.round_to_dtype(t([1 + 3 * 2**-11], f64), torch.float16).item() == 1 + 2**-9
    # negative values, f16 subnormals, overflow and zero keep their meaning
    assert measures.round_to_dtype(-x16, torch.float16).item() == -(1 + 2**-10)
    assert measures.round_to_dtype(t([2**-24 * 0.75], f64), torch.float16).item() == 2**-24
    assert measures.round_to_dtype(t([1e6], f64), torch.float16).item() == math.inf
    assert math.copysign(1, measures.round_to_dtype(t([-0.0], f64), torch.float16).item()) == -1
    # float32 is a single rounding: identical to torch's conversion
    g = torch.Generator().manual_seed(1)
    r = torch.randn(10000, generator=g, dtype=f64)
    assert torch.equal(measures.round_to_dtype(r, torch.float32), r.to(torch.float32))
    # against an exact reference (Python floats): the nearest f16 by ULP distance
    for v in r[:200].tolist():
        got = measures.round_to_dtype(t([v], f64), torch.float16)
        lo = t([v], f64).to(torch.float16)
        cands = [
            lo,
            torch.nextafter(lo.float(), t([math.inf], torch.float32)).half(),
            torch.nextafter(lo.float(), t([-math.inf], torch.float32)).half(),
        ]
        cands = [c for c in cands if not torch.isnan(c).any()]
        best = min(abs(c.double().item() - v) for c in cands)
        assert abs(got.double().item() - v) == best


def test_bits_equal_count():
    a = t([0.0, 1.0, math.nan, 2.0], torch.float32)
    b = t([-0.0, 1.0, math.nan, 2.5], torch.float32)
    assert measures.bits_equal_count(a, b) == 2  # the signed zero and 2.0 vs 2.5; NaNs of equal bits agree


# ---------------------------------------------------------------------------------------------
# Readers of generated code, launch configurations and PTX (the GPU-only paths, on fakes)

WRAPPER = """
from torch._inductor.async_compile import AsyncCompile
async_compile = AsyncCompile()

triton_per_fused_rsqrt_0 = async_compile.triton('triton_per_fused_rsqrt_0', '''
import triton
import triton.language as tl

@triton_heuristics.persistent_reduction(
    size_hints={'x': 4096, 'r0_': 1024},
    reduction_hint=ReductionHint.INNER,
    filename=__file__,
    triton_meta={'signature': {'in_ptr0': '*fp16'}, 'constants': {}, 'enable_fp_fusion': True, 'disable_ftz': False},
    inductor_meta={'kernel_name': 'triton_per_fused_rsqrt_0'}
)
@triton.jit
def triton_per_fused_rsqrt_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    R0_BLOCK: tl.constexpr = 1024
    RBLOCK: tl.constexpr = R0_BLOCK
    x0 = xindex // 4096
    tmp0 = tl.load(in_ptr0 + (r0_1), None).to(tl.float32)
    tmp5 = tl.sum(tmp3, 1)[:, None]
    tmp6 = 1024.0
    tmp7 = (tmp5 / tmp6)
    tmp8 = 1e-06
    tmp10 = libdevice.rsqrt(tmp9)
    tmp11 = tmp0 * tmp10
    tmp12 = tmp11.to(tl.float16)
''', device_str='cuda')

triton_red_fused_sum_1 = async_compile.triton('triton_red_fused_sum_1', '''
@triton_heuristics.reduction(
    size_hints={'x': 64, 'r0_': 65536},
    reduction_hint=ReductionHint.INNER,
    triton_meta={'enable_fp_fusion': True},
)
@triton.jit
def triton_red_fused_sum_1(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    tmp2 = libdevice.div_rn(tmp0, tmp1)
''', device_str='cuda')

async_compile.wait(globals())

def call(args):
    triton_per_fused_rsqrt_0.run(arg0_1, buf0, 4096, 1024, stream=stream0)
"""


def test_source_facts_on_triton_wrapper(tmp_path):
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "cabc.py").write_text(WRAPPER)
    (tmp_path / "triton").mkdir()  # skipped
    (tmp_path / "triton" / "x.py").write_text("def call(): pass  # async_compile")
    code = evidence.read_generated_code(str(tmp_path))
    assert len(code["wrappers"]) == 1
    facts = evidence.source_facts(code)
    assert facts["kernel_count"] == 2
    k0, k1 = facts["kernels"]
    assert k0["name"] == "triton_per_fused_rsqrt_0" and k0["decorator"] == "persistent_reduction"
    assert k0["R0_BLOCK"] == [1024] and not k0["R0_BLOCK_is_runtime"]
    assert k0["libdevice_rsqrt"] == 1 and k0["slash_div"] == 1 and k0["div_rn"] == 0
    assert k0["enable_fp_fusion"] == "True" and k0["disable_ftz"] == "False"
    assert k0["to_fp32"] == 1 and k0["to_fp16"] == 1
    assert "1024.0" in k0["float_constants"] and "1e-06" in k0["float_constants"]
    assert k1["decorator"] == "reduction" and k1["R0_BLOCK_is_runtime"] and k1["div_rn"] == 1
    assert facts["decorators"] == ["persistent_reduction", "reduction"]
    assert facts["R0_BLOCK"] == [1024] and facts["enable_fp_fusion"] == ["True"]
    assert facts["libdevice_calls"] == ["div_rn", "rsqrt"]
    assert "persistent_reduction" in findings._src_summary(facts)


def test_runtime_configs_from_loaded_module(tmp_path):
    from torch._inductor.codecache import PyCodeCache

    class Cfg:
        kwargs = {"XBLOCK": 1, "R0_BLOCK": 2048}
        num_warps = 16
        num_stages = 1

    class Launcher:
        config = Cfg()
        n_regs = 40
        n_spills = 0

    class Autotuner:
        launchers = [Launcher()]
        configs = [Cfg(), Cfg()]
        inductor_meta = {"kernel_name": "triton_red_fused_sum_0"}

    mod = types.ModuleType("fake_wrapper")
    mod.__file__ = str(tmp_path / "ab" / "cfake.py")
    mod.triton_red_fused_sum_0 = Autotuner()
    other = types.ModuleType("elsewhere")
    other.__file__ = "/somewhere/else.py"
    other.k = Autotuner()
    PyCodeCache.modules.extend([mod, other])
    try:
        got = evidence.runtime_configs(str(tmp_path))
    finally:
        PyCodeCache.modules.remove(mod)
        PyCodeCache.modules.remove(other)
    assert got == [
        {
            "kernel": "triton_red_fused_sum_0",
            "n_configs": 2,
            "launchers": [
                {
                    "kwargs": {"XBLOCK": 1, "R0_BLOCK": 2048},
                    "num_warps": 16,
                    "num_stages": 1,
                    "n_regs": 40,
                    "n_spills": 0,
                }
            ],
        }
    ]
    assert "R0_BLOCK=2048" in findings._chosen({"runtime_configs": got})


def test_ptx_facts(tmp_path):
    d = tmp_path / "HASH"
    d.mkdir()
    (d / "triton_poi_fused_add_mul_0.ptx").write_text(
        "\tfma.rn.f32 \t%r1, %r2, %r3, %r4;\n\tfma.rn.f32 %r5;\n\tmul.rn.f32 %r6;\n\tdiv.full.f32 %r7;\n\trsqrt.approx.ftz.f32 %r8;\n"
    )
    (d / "triton_poi_fused_add_mul_0.json").write_text(
        json.dumps({"name": "triton_poi_fused_add_mul_0", "num_warps": 4, "enable_fp_fusion": True})
    )
    p = evidence.ptx_facts(str(tmp_path), None)
    assert p["n_ptx"] == 1
    assert p["totals"]["fma.rn"] == 2 and p["totals"]["fma.rn.f32"] == 2 and p["totals"]["mul.f32"] == 1
    assert p["totals"]["div.full.f32"] == 1 and p["totals"]["rsqrt.approx"] == 1 and p["totals"]["ftz"] == 1
    assert p["files"][0]["meta"] == {"name": "triton_poi_fused_add_mul_0", "num_warps": 4, "enable_fp_fusion": True}


def test_the_triton_patch_is_fusebenchs_one_copy():
    patch = inspect.unwrap(patches.PATCHES["triton_parse_options"])
    assert pathlib.Path(patch.__code__.co_filename) == ROOT / "python" / "fusebench" / "_inductor.py"
    ok, why = patches.triton_parse_options_available()
    assert isinstance(ok, bool) and (ok or why)


# ---------------------------------------------------------------------------------------------
# The script as a program


def run_script(*args, timeout=150):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("bad", [["--device", "tpu"], ["--only", "c9"], ["--budget-s", "0"], ["--sizes", "huge"], []])
def test_bad_arguments_exit_2(tmp_path, bad):
    args = bad if bad == [] else [*bad, "--out", tmp_path / "x.json"]
    r = run_script(*args, timeout=60)
    assert r.returncode == 2, r.stderr
    assert not (tmp_path / "x.json").exists()


# A budget no loaded 2-core machine spends on C3 and C1 at the small sizes: the dry run's outcome
# must not depend on how fast this machine is today (the budget's cut is tested apart, below).
BUDGET_S = 900.0


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dry")
    out = tmp / "dry.json"
    t0 = time.monotonic()
    r = run_script(
        "--device", "cpu", "--sizes", "small", "--only", "c3,c1", "--budget-s", BUDGET_S, "--out", out,
        "--work-dir", tmp / "work", timeout=1200,
    )  # fmt: skip
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text()), r, wall, tmp


def test_dry_run_structure(dry_run):
    data, r, _, tmp = dry_run
    assert data["schema"] == "fusebench.inductor_mechanisms/1"
    h = data["header"]
    assert h["device"] == "cpu" and h["seed"] == 20261204 and h["order"] == ["c3", "c1"]
    assert h["versions"]["torch"] == torch.__version__
    for name in (
        "numerics",
        "emulate_divison_rounding",
        "eager_numerics.division_rounding",
        "triton.persistent_reductions",
    ):
        assert isinstance(h["options"][name]["present"], bool)
    assert not (tmp / "dry.json.tmp").exists()
    assert list(data["experiments"]) == h["order"]
    ok = 0
    for exp in data["experiments"].values():
        assert exp["status"] in ("done", "partial", "skipped", "error")
        assert isinstance(exp["finding"], str) and exp["finding"]
        for case in exp["cases"]:
            for v in case["variants"]:
                assert v["status"] in ("ok", "n/a", "absent", "skipped", "error"), v
                if v["status"] == "error":
                    pytest.fail(f"{case['id']} {v['name']}: {v['error']}")
                if v["status"] != "ok":
                    assert v["reason"]
                    continue
                ok += 1
                for key in (
                    "ulp_vs_fp64",
                    "ulp_vs_eager",
                    "n_diff_eager",
                    "bit_equal_eager",
                    "compile_s",
                    "compiles",
                    "source",
                    "rerun_bit_equal",
                ):
                    assert key in v, (case["id"], v["name"], key)
                assert isinstance(v["ulp_vs_fp64"]["max"], int) and isinstance(v["ulp_vs_fp64"]["p99"], int)
                assert v["bit_equal_eager"] == (v["n_diff_eager"] == 0)
                assert v["source"]["kernel_count"] >= 1
                assert ("bit_equal_default" in v) == (v["name"] != "default")
            if case["status"] == "done":
                assert case["finding"].startswith(case["id"])
                assert isinstance(case["eager"]["ulp_vs_fp64"]["max"], int)
    assert ok >= 1
    assert "exp" in r.stdout.splitlines()[0] and "[c3]" in r.stdout


def test_dry_run_marks_triton_only_variants(dry_run):
    data = dry_run[0]
    statuses = {}
    for case in data["experiments"]["c3"]["cases"]:
        for v in case["variants"]:
            statuses.setdefault(v["name"], set()).add(v["status"])
            if v["status"] == "n/a":
                assert v["reason"].startswith("n/a on cpu: ")
    present = data["header"]["options"]
    for name in ("eager_numerics.division_rounding", "eager_numerics.disable_ftz", "use_fast_math"):
        if present[name]["present"]:
            assert statuses[f"{name}=True"] <= {"n/a", "skipped"}, (name, statuses[f"{name}=True"])
            assert "n/a" in statuses[f"{name}=True"]
        else:
            assert statuses[f"{name}=True"] <= {"absent", "skipped"}
    for name in ("emulate_divison_rounding", "emulate_division_rounding"):
        assert statuses[f"{name}=True"] <= (
            {"absent", "skipped"} if not present.get(name, {}).get("present") else {"n/a", "skipped"}
        )


def test_dry_run_completes_the_experiments_asked_for(dry_run):
    data, _, _, _ = dry_run
    assert data["status"] == "complete"
    assert {name for name, e in data["experiments"].items() if e["status"] != "skipped"} == {"c3", "c1"}


def test_budget_spent_before_anything_ran_exits_1(tmp_path):
    out = tmp_path / "none.json"
    r = run_script("--device", "cpu", "--sizes", "small", "--budget-s", "0.01", "--out", out, timeout=60)
    assert r.returncode == 1, r.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["status"] == "budget_exhausted"
    assert all(e["status"] == "skipped" for e in data["experiments"].values())
