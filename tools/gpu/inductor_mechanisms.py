#!/usr/bin/env python3
"""What Inductor's code generation does to the numerics of a few small graphs, on one GPU.

One unattended run measures, for each case (an op, a dtype, a shape), eager ATen and
torch.compile(fullgraph=True, dynamic=False) under Inductor's default options and under
variants of them (options introspected from the installed torch, never assumed), every output
against an fp64 reference (the same ops on the inputs upcast to float64, correctly rounded to the
output dtype) in ULPs, against eager bit for bit, and against the default compiled variant. The
evidence is the generated code (read from a fresh TORCHINDUCTOR_CACHE_DIR per variant), the launch
configurations Inductor chose, and the PTX Triton wrote (a fresh TRITON_CACHE_DIR per variant).

Experiments, most valuable first (a spent budget drops the tail):
  c3      rsqrt and division: libdevice.rsqrt vs 1/sqrt, div_rn vs '/', FTZ, fast math
  fma     a*b+c: FMA contraction on and off (Triton env vars in child processes, Inductor options,
          a patched Triton option parser), PTX fma.rn counts
  c1      scalar lowering: x*0.7+y with an immediate, a full_like tensor, an input tensor
  c2      reduction blocking: sum and layer_norm at row lengths 1024, 8192, 65536 under persistent,
          split, cooperative, multi-kernel, deterministic and strict-reduction options
  strict  strict numerics control: numerics=strict*, emulate_precision_casts on gelu(x*0.7+y)*z
          and layer_norm

Usage (on the GPU machine; python3 with torch and triton; no network):
  python3 tools/gpu/inductor_mechanisms.py --out result.json --budget-s 420
  python3 tools/gpu/inductor_mechanisms.py --device cpu --sizes small --budget-s 60 --out dry.json
A full run at default sizes is about 150 compiles of small graphs under torch 2.11 (each in a
fresh cache). The budget is checked before every compile, so the run ends at most one compile
after it (--variant-timeout-s bounds that one; the fma child process gets 60 s of grace).
--keep-work keeps each variant's cache directory (generated code, PTX, cubins) for inspection.

The JSON file is rewritten (FILE.tmp, then renamed) after every variant, so a killed run keeps what
it measured. Exit 0 unless the arguments are bad (2) or no experiment could run at all (1).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import glob
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

T_START = time.monotonic()

SCHEMA = "fusebench.inductor_mechanisms/1"
EXPERIMENTS = ["c3", "fma", "c1", "c2", "strict"]
EXPERIMENT_TITLES = {
    "c3": "C3: rsqrt and division",
    "fma": "FMA contraction of a*b+c",
    "c1": "C1: scalar lowering of x*0.7+y",
    "c2": "C2: reduction blocking",
    "strict": "Strict numerics control",
}
DEFAULT_SEED = 20261204
FP_FUSION_ENV = {
    "default": {},
    "0": {"TRITON_DEFAULT_FP_FUSION": "0"},
    "1": {"TRITON_DEFAULT_FP_FUSION": "1"},
    "force-off": {"TRITON_FORCE_DISABLE_FP_FUSION": "1"},
}
# Child processes the fma experiment starts (one Triton environment setting each).
FMA_CHILDREN = ["0", "force-off"]

SIZES = {
    "default": {
        "ew": (4096, 4096),
        "red": {1024: 4096, 8192: 512, 65536: 64},
        "rms": (4096, 4096),
        "ln": (2048, 4096),
        "subnormal": (1024, 1024),
    },
    "small": {
        "ew": (64, 128),
        "red": {1024: 8, 8192: 2, 65536: 1},
        "rms": (32, 256),
        "ln": (16, 512),
        "subnormal": (32, 64),
    },
}


# --------------------------------------------------------------------------------------------
# Small utilities


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_int(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def error_record(exc: BaseException) -> dict:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    lines = "".join(tb).rstrip().splitlines()
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback_tail": lines[-15:]}


def sanitize(obj):
    """JSON-safe copy: non-finite floats become strings, tuples lists, unknown objects repr."""
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        items = sorted(obj, key=repr) if isinstance(obj, set | frozenset) else obj
        return [sanitize(v) for v in items]
    if isinstance(obj, bool) or obj is None or isinstance(obj, int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    return repr(obj)


def write_json_atomic(path: str, data: dict):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(sanitize(data), f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


class Budget:
    """Wall-clock budget counted from the script's start (imports included)."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def used(self) -> float:
        return time.monotonic() - T_START

    def remaining(self) -> float:
        return self.seconds - self.used()

    def spent(self) -> bool:
        return self.remaining() <= 0


class VariantTimeout(Exception):
    pass


@contextlib.contextmanager
def hard_timeout(seconds: float):
    """Raise VariantTimeout in the main thread after `seconds` (SIGALRM; a no-op where absent)."""
    if not hasattr(signal, "SIGALRM") or seconds <= 0:
        yield
        return

    def handler(signum, frame):
        raise VariantTimeout(f"variant ran past its hard limit of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def env_vars(values: dict):
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------------------------------
# ULPs


def _int_dtype(dtype):
    import torch

    table = {
        torch.float16: torch.int16,
        torch.bfloat16: torch.int16,
        torch.float32: torch.int32,
        torch.float64: torch.int64,
    }
    if dtype not in table:
        raise TypeError(f"no ULP mapping for {dtype}")
    return table[dtype]


def ordered_int(t):
    """Map floats to int64 whose order is the floats' order and whose difference counts ULPs
    (+0 and -0 both map to 0; NaNs map somewhere beyond infinity and must be masked by the caller)."""
    import torch

    bits = torch.finfo(t.dtype).bits
    i = t.contiguous().view(_int_dtype(t.dtype)).to(torch.int64)
    mag = i & ((1 << (bits - 1)) - 1)
    return torch.where(i < 0, -mag, mag)


def ulp_distance(a, b):
    """|a - b| in ULPs of their common dtype, int64; NaN on both sides counts 0, on one side -1."""
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"ulp_distance: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
    d = (ordered_int(a) - ordered_int(b)).abs()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, -1), d)


def ulp_stats(a, b) -> dict:
    """Max, p99 and a histogram of the ULP distance between a and b (NaN mismatches counted apart)."""
    import torch

    d = ulp_distance(a, b).flatten()
    n = d.numel()
    nan_mismatch = int((d < 0).sum())
    d = d[d >= 0]
    m = d.numel()
    if m == 0:
        return {"n": n, "nan_mismatch": nan_mismatch, "max": None, "p99": None}
    s = torch.sort(d).values
    k = max(0, math.ceil(0.99 * m) - 1)
    return {
        "n": n,
        "max": int(s[-1]),
        "p99": int(s[k]),
        "mean": float(d.double().mean()),
        "n_0": int((d == 0).sum()),
        "n_1": int((d == 1).sum()),
        "n_2": int((d == 2).sum()),
        "n_gt2": int((d > 2).sum()),
        "nan_mismatch": nan_mismatch,
    }


def round_to_dtype(ref64, dtype):
    """Correctly rounded (to nearest even) conversion of a float64 tensor to dtype. A plain
    .to(float16) goes through float32 and can round twice; here float32 is reached with
    round-to-odd, which makes the second rounding exact."""
    import torch

    if dtype == torch.float64:
        return ref64
    f32 = ref64.to(torch.float32)
    if dtype == torch.float32:
        return f32
    inexact = (f32.to(torch.float64) != ref64) & torch.isfinite(f32) & torch.isfinite(ref64)
    even = (f32.view(torch.int32) & 1) == 0
    up = ref64 > f32.to(torch.float64)
    toward = torch.where(up, torch.full_like(f32, math.inf), torch.full_like(f32, -math.inf))
    odd = torch.where(inexact & even, torch.nextafter(f32, toward), f32)
    return odd.to(dtype)


def bits_equal_count(a, b) -> int:
    """Number of elements whose bit patterns differ."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError("bits_equal_count: shape or dtype mismatch")
    it = _int_dtype(a.dtype)
    return int((a.contiguous().view(it) != b.contiguous().view(it)).sum())


def tensor_digest(t) -> str | None:
    import hashlib

    try:
        c = t.detach().contiguous().cpu()
        return hashlib.sha256(c.view(_int_dtype(c.dtype)).numpy().tobytes()).hexdigest()[:16]
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# Ops (each traced by dynamo; the fp64 reference runs the same function on float64 inputs)


def op_rsqrt(x):
    import torch

    return torch.rsqrt(x)


def op_div(a, b):
    return a / b


def op_rmsnorm(x):
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def op_fma(a, b, c):
    return a * b + c


def op_scalar_immediate(x, y):
    return x * 0.7 + y


def op_scalar_full_like(x, y):
    import torch

    return x * torch.full_like(x, 0.7) + y


def op_scalar_input(x, y, s):
    return x * s + y


def op_sum_f32(x):
    import torch

    return x.sum(-1, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)


def op_layer_norm(x, w, b):
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def op_gelu_chain(x, y, z):
    import torch

    return torch.nn.functional.gelu(x * 0.7 + y) * z


# --------------------------------------------------------------------------------------------
# Inputs (generated on the CPU from a seeded generator, then moved: the same bits on every device)


def _gen(seed: int):
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed(seed)
    return g


def inp_log_uniform(shape, lo, hi, dtype, seed, signed=False):
    import torch

    g = _gen(seed)
    e = torch.rand(shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
    v = torch.exp2(e)
    if signed:
        v = v * torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).double()
    return v.to(dtype)


def inp_normal(shape, dtype, seed, scale=1.0, shift=0.0):
    import torch

    return (torch.randn(shape, generator=_gen(seed), dtype=torch.float64) * scale + shift).to(dtype)


def inp_uniform(shape, dtype, seed, lo=0.0, hi=1.0):
    import torch

    return (torch.rand(shape, generator=_gen(seed), dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def inp_f32_subnormal(shape, seed, signed=False):
    """float32 subnormals: random bit patterns 1 .. 0x007FFFFF."""
    import torch

    g = _gen(seed)
    bits = torch.randint(1, 0x007FFFFF, shape, generator=g, dtype=torch.int32)
    if signed:
        bits = bits | (torch.randint(0, 2, shape, generator=g, dtype=torch.int32) << 31)
    return bits.view(torch.float32)


# --------------------------------------------------------------------------------------------
# Variants: a set of Inductor options (or a Triton patch, or a child process's environment)

NA_TRITON = "n/a on cpu: {what} only reaches Triton code generation (the C++ backend ignores it)"


class Variant:
    def __init__(self, name, options=None, triton_only=None, patch=None, note=None):
        self.name = name
        self.options = dict(options or {})
        self.triton_only = triton_only  # reason string when the variant only means something on Triton
        self.patch = patch  # name of an in-process patch (see PATCHES)
        self.note = note


def opt(name, value, triton=False, note=None):
    what = f"torch._inductor.config.{name}"
    return Variant(f"{name}={value}", {name: value}, NA_TRITON.format(what=what) if triton else None, note=note)


def division_rounding_variants():
    out = []
    for key in ("emulate_divison_rounding", "emulate_division_rounding", "eager_numerics.division_rounding"):
        out.append(opt(key, True, triton=True))
    return out


def variants_c3(kind: str, dtype_name: str):
    v = [Variant("default")]
    lowp = dtype_name != "f32"
    if kind in ("div", "rmsnorm", "div_subnormal"):
        v += division_rounding_variants()
    if kind in ("rsqrt", "rmsnorm", "rsqrt_subnormal"):
        v.append(opt("eager_numerics.use_pytorch_libdevice", True, triton=True))
    if not lowp:
        v.append(opt("eager_numerics.disable_ftz", True, triton=True))
    if kind in ("rsqrt", "div", "rmsnorm") and not lowp:
        v.append(opt("use_fast_math", True, triton=True))
    if kind == "rmsnorm" and lowp:
        v.append(opt("emulate_precision_casts", True))
    return v


# --------------------------------------------------------------------------------------------
# Evidence: generated code, launch configurations, PTX

KERNEL_DEF = re.compile(
    r"(\w+)\s*=\s*async_compile\.(triton|cpp_pybinding|cpp)\((.*?)(?:'''|\"\"\")(.*?)(?:'''|\"\"\")", re.S
)
SKIP_DIRS = {"triton", "fxgraph", "aotautograd", "locks", "precompiled_headers", "cache", "__pycache__"}


def read_generated_code(cache_dir: str) -> dict:
    """The wrapper module(s) and kernel sources Inductor wrote to `cache_dir`."""
    wrappers, kernel_files = [], []
    for root, dirs, files in os.walk(cache_dir):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for fn in files:
            if not fn.endswith(".py"):
                continue
            try:
                with open(os.path.join(root, fn), errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if "async_compile" in text and ("def call(" in text or "async_compile.wait(" in text):
                wrappers.append(text)
            elif "@triton.jit" in text:
                kernel_files.append(text)
    kernels = []
    for w in wrappers:
        for m in KERNEL_DEF.finditer(w):
            kernels.append({"name": m.group(1), "kind": m.group(2), "source": m.group(4)})
    if not kernels:  # kernels not embedded in the wrapper: take the kernel files
        for text in kernel_files:
            m = re.search(r"def (\w+)\(", text.split("@triton.jit", 1)[-1])
            kernels.append({"name": m.group(1) if m else "?", "kind": "triton", "source": text})
    return {"wrappers": wrappers, "kernels": kernels}


def _count(pattern, text, flags=0) -> int:
    return len(re.findall(pattern, text, flags))


def _tmp_lines(body: str) -> list[str]:
    return [ln for ln in body.splitlines() if re.match(r"\s*(?:auto\s+|[\w:<>]+\s+)?tmp\w*\s*=", ln)]


def kernel_facts(kernel: dict) -> dict:
    src = kernel["source"]
    if "@triton.jit" in src:
        head, body = src.split("@triton.jit", 1)
    else:
        head, body = "", src
    tmp_lines = _tmp_lines(body)
    tmp_text = "\n".join(tmp_lines)
    f = {
        "name": kernel["name"],
        "kind": kernel["kind"],
        "decorator": (re.findall(r"@triton_heuristics\.(\w+)", head) or [None])[0],
        "reduction_hint": (re.findall(r"reduction_hint=ReductionHint\.(\w+)", head) or [None])[0],
        "size_hints": (re.findall(r"size_hints=(\{[^}]*\}|\[[^\]]*\])", head) or [None])[0],
        "enable_fp_fusion": (re.findall(r"['\"]enable_fp_fusion['\"]\s*:\s*(True|False)", head) or [None])[0],
        "disable_ftz": (re.findall(r"['\"]disable_ftz['\"]\s*:\s*(True|False)", head) or [None])[0],
        "R0_BLOCK": sorted({int(x) for x in re.findall(r"\bR0_BLOCK\s*:\s*tl\.constexpr\s*=\s*(\d+)", body)}),
        "RBLOCK": sorted({int(x) for x in re.findall(r"\bRBLOCK\s*:\s*tl\.constexpr\s*=\s*(\d+)", body)}),
        "XBLOCK": sorted({int(x) for x in re.findall(r"\bXBLOCK\s*:\s*tl\.constexpr\s*=\s*(\d+)", body)}),
        "R0_BLOCK_is_runtime": bool(re.search(r"def \w+\([^)]*\bR0_BLOCK\s*:\s*tl\.constexpr", body)),
        "libdevice_rsqrt": _count(r"libdevice\.rsqrt\b", body),
        "rsqrt": _count(r"rsqrt", body),
        "sqrt": _count(r"(?<![rR])sqrt\b", body),
        "div_rn": _count(r"div_rn", body),
        "slash_div": sum(len(re.findall(r"(?<![/*])\s/\s(?![/*])", ln)) for ln in tmp_lines),
        "fma": _count(r"\btl\.fma\b|libdevice\.fma\b|fmadd|std::fma\b", body),
        "libdevice_calls": sorted(set(re.findall(r"libdevice\.(\w+)", body))),
        "to_fp32": _count(r"\.to\(tl\.float32\)", body),
        "to_fp16": _count(r"\.to\(tl\.float16\)", body),
        "to_bf16": _count(r"\.to\(tl\.bfloat16\)", body),
        "cpp_lowp_converts": _count(r"convert<[^>]*(?:Half|BFloat16|half|bfloat16)[^>]*>", body),
        "welford": _count(r"welford", body, re.I),
        "tree_mentions": _count(r"tree", body, re.I),
        "rsplit": _count(r"RSPLIT", body),
        "float_constants": sorted(set(re.findall(r"(?<![\w.])(?:\d+\.\d+(?:e[+-]?\d+)?|\d+e[+-]?\d+)", tmp_text)))[:20],
    }
    return f


SUMMED = [
    "libdevice_rsqrt",
    "rsqrt",
    "sqrt",
    "div_rn",
    "slash_div",
    "fma",
    "to_fp32",
    "to_fp16",
    "to_bf16",
    "cpp_lowp_converts",
    "welford",
    "tree_mentions",
    "rsplit",
]


def source_facts(code: dict) -> dict:
    kernels = [kernel_facts(k) for k in code["kernels"]]
    wrapper = "\n".join(code["wrappers"])
    totals = {k: sum(kf[k] for kf in kernels) for k in SUMMED}
    merged = {
        "kernel_count": len(kernels),
        "wrapper_found": bool(code["wrappers"]),
        "extern_kernel_calls": _count(r"extern_kernels\.\w+\(", wrapper),
        "aten_calls_in_wrapper": _count(r"\baten\.\w+", wrapper),
        "decorators": sorted({kf["decorator"] for kf in kernels if kf["decorator"]}),
        "R0_BLOCK": sorted({b for kf in kernels for b in kf["R0_BLOCK"] + kf["RBLOCK"]}),
        "enable_fp_fusion": sorted({kf["enable_fp_fusion"] for kf in kernels if kf["enable_fp_fusion"]}),
        "disable_ftz": sorted({kf["disable_ftz"] for kf in kernels if kf["disable_ftz"]}),
        "libdevice_calls": sorted({c for kf in kernels for c in kf["libdevice_calls"]}),
        "float_constants": sorted({c for kf in kernels for c in kf["float_constants"]})[:20],
        **totals,
        "kernels": kernels,
    }
    return merged


def runtime_configs(cache_dir: str) -> list:
    """Launch configurations of the Triton kernels loaded from `cache_dir` (after they ran: an
    autotuned kernel keeps the winning launcher)."""
    mods = []
    try:
        from torch._inductor.codecache import PyCodeCache

        mods = list(getattr(PyCodeCache, "modules", []) or [])
        mods += list((getattr(PyCodeCache, "modules_no_attr", {}) or {}).values())
        mods += list((getattr(PyCodeCache, "cache", {}) or {}).values())
    except Exception:
        pass
    seen, out = set(), []
    cache_dir = os.path.realpath(cache_dir)
    for mod in mods:
        path = os.path.realpath(getattr(mod, "__file__", "") or "")
        if not path.startswith(cache_dir):
            continue
        for obj in list(vars(mod).values()):
            launchers = getattr(obj, "launchers", None)
            if not isinstance(launchers, list) or id(obj) in seen:
                continue
            seen.add(id(obj))
            meta = getattr(obj, "inductor_meta", None) or {}
            name = meta.get("kernel_name") or getattr(getattr(obj, "fn", None), "__name__", None) or type(obj).__name__
            ls = []
            for launcher in launchers:
                cfg = getattr(launcher, "config", None)
                ls.append(
                    {
                        "kwargs": dict(getattr(cfg, "kwargs", {}) or {}),
                        "num_warps": getattr(cfg, "num_warps", None),
                        "num_stages": getattr(cfg, "num_stages", None),
                        "n_regs": getattr(launcher, "n_regs", None),
                        "n_spills": getattr(launcher, "n_spills", None),
                    }
                )
            out.append({"kernel": name, "n_configs": len(getattr(obj, "configs", []) or []), "launchers": ls})
    return out


PTX_PATTERNS = {
    "fma.rn": r"\bfma\.rn(?:\.ftz)?\.(?:f32|f16|f16x2|bf16|bf16x2|f64)",
    "fma.rn.f32": r"\bfma\.rn(?:\.ftz)?\.f32\b",
    "fma.rn.f16": r"\bfma\.rn(?:\.ftz)?\.(?:f16|f16x2|bf16|bf16x2)\b",
    "mul.f32": r"\bmul\.(?:rn\.)?(?:ftz\.)?f32\b",
    "add.f32": r"\badd\.(?:rn\.)?(?:ftz\.)?f32\b",
    "div.full.f32": r"\bdiv\.full(?:\.ftz)?\.f32\b",
    "div.rn.f32": r"\bdiv\.rn(?:\.ftz)?\.f32\b",
    "div.approx.f32": r"\bdiv\.approx(?:\.ftz)?\.f32\b",
    "rcp.rn": r"\brcp\.rn\b",
    "rcp.approx": r"\brcp\.approx\b",
    "rsqrt.approx": r"\brsqrt\.approx\b",
    "sqrt.rn": r"\bsqrt\.rn\b",
    "sqrt.approx": r"\bsqrt\.approx\b",
    "ftz": r"\.ftz\b",
}


def find_cuobjdump() -> str | None:
    try:
        import triton

        p = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.access(p, os.X_OK):
            return p
    except Exception:
        pass
    return shutil.which("cuobjdump")


def ptx_facts(triton_dir: str, cuobjdump: str | None) -> dict:
    files = sorted(glob.glob(os.path.join(triton_dir, "**", "*.ptx"), recursive=True))
    per = []
    totals = dict.fromkeys(PTX_PATTERNS, 0)
    for p in files:
        try:
            with open(p, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        counts = {k: len(re.findall(rx, text)) for k, rx in PTX_PATTERNS.items()}
        for k, v in counts.items():
            totals[k] += v
        entry = {"file": os.path.basename(p), "counts": counts}
        meta_path = p[: -len(".ptx")] + ".json"
        if os.path.exists(meta_path):
            try:
                with open(meta_path) as f:
                    meta = json.load(f)
                entry["meta"] = {
                    k: meta.get(k)
                    for k in ("name", "num_warps", "num_stages", "enable_fp_fusion", "arch", "shared")
                    if k in meta
                }
            except Exception as exc:
                entry["meta_error"] = repr(exc)
        cubin = p[: -len(".ptx")] + ".cubin"
        if cuobjdump and os.path.exists(cubin) and len(per) < 8:
            try:
                r = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, timeout=20)
                sass = r.stdout
                entry["sass"] = {
                    op: len(re.findall(rf"\b{op}\b", sass))
                    for op in ("FFMA", "FMUL", "FADD", "HFMA2", "HMUL2", "HADD2", "MUFU.RSQ", "MUFU.RCP", "MUFU.SQRT")
                }
            except Exception as exc:
                entry["sass_error"] = repr(exc)
        per.append(entry)
    return {"n_ptx": len(files), "totals": totals, "files": per[:24]}


# --------------------------------------------------------------------------------------------
# The runner


class Runner:
    def __init__(self, args, budget: Budget, data: dict, work: str):
        import torch

        self.torch = torch
        self.args = args
        self.budget = budget
        self.data = data
        self.work = work
        self.dev = torch.device(args.device)
        self.sizes = SIZES[args.sizes]
        self.cuobjdump = find_cuobjdump() if args.device == "cuda" else None
        self._keys = None
        self.n_ok = 0
        self.n_variants = 0

    # ---- bookkeeping
    def save(self):
        self.data["header"]["elapsed_s"] = round(self.budget.used(), 2)
        write_json_atomic(self.args.out, self.data)

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    def config_keys(self):
        if self._keys is None:
            try:
                self._keys = set(self.torch._inductor.config.get_config_copy().keys())
            except Exception:
                self._keys = set()
        return self._keys

    def config_has(self, key: str) -> bool:
        if key in self.config_keys():
            return True
        obj = self.torch._inductor.config
        for part in key.split("."):
            try:
                obj = getattr(obj, part)
            except Exception:
                return False
        return True

    def config_get(self, key: str):
        obj = self.torch._inductor.config
        for part in key.split("."):
            obj = getattr(obj, part)
        return obj

    # ---- why a variant cannot run here (None: it can)
    def unavailable(self, v: Variant):
        for key in v.options:
            if not self.config_has(key):
                return "absent", f"torch._inductor.config has no '{key}' in torch {self.torch.__version__}"
        if v.patch == "triton_parse_options":
            ok, why = triton_parse_options_available()
            if not ok and self.dev.type == "cuda":
                return "absent", why
        if self.dev.type == "cpu" and v.triton_only:
            return "n/a", v.triton_only
        return None

    # ---- compile, run, gather evidence
    def compile_and_run(self, fn, args, v: Variant, tag: str, sass: bool = False):
        torch = self.torch
        vdir = tempfile.mkdtemp(prefix=re.sub(r"\W+", "_", tag)[:60] + "_", dir=self.work)
        tdir = os.path.join(vdir, "triton")
        from torch._dynamo.utils import counters

        def snapshot():
            return {g: dict(c) for g, c in counters.items()}

        clear = getattr(torch._inductor.utils, "clear_caches", None) or getattr(
            torch._inductor.utils, "clear_inductor_caches", None
        )
        with env_vars({"TORCHINDUCTOR_CACHE_DIR": vdir, "TRITON_CACHE_DIR": tdir}):
            if clear:
                clear()
            torch._dynamo.reset()
            before = snapshot()
            patch_cm = PATCHES[v.patch]() if v.patch else contextlib.nullcontext()
            with torch._inductor.config.patch(v.options), patch_cm, torch.no_grad():
                compiled = torch.compile(fn, fullgraph=True, dynamic=False)
                t0 = time.perf_counter()
                out = compiled(*args)
                self.sync()
                first_s = time.perf_counter() - t0
                t1 = time.perf_counter()
                out2 = compiled(*args)
                self.sync()
                second_s = time.perf_counter() - t1
            after = snapshot()
            code = read_generated_code(vdir)
            rcfg = runtime_configs(vdir) if self.dev.type == "cuda" else []
            ptx = ptx_facts(tdir, self.cuobjdump if sass else None) if self.dev.type == "cuda" else None
            torch._dynamo.reset()
            if clear:
                clear()
        diff = {}
        for g, keys in (
            ("stats", ("unique_graphs",)),
            ("frames", ("ok", "total")),
            ("inductor", ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_cache_bypass")),
            ("aot_autograd", ("autograd_cache_miss", "autograd_cache_hit")),
        ):
            for k in keys:
                d = after.get(g, {}).get(k, 0) - before.get(g, {}).get(k, 0)
                if d:
                    diff[f"{g}.{k}"] = d
        info = {
            "compile_s": round(first_s - second_s, 4),
            "first_call_s": round(first_s, 4),
            "second_call_ms": round(second_s * 1e3, 3),
            "compiles": diff,
            "recompiled_on_second_call": diff.get("stats.unique_graphs", 1) > 1,
            "source": source_facts(code),
            "runtime_configs": rcfg,
        }
        if ptx is not None:
            info["ptx"] = ptx
        if not self.args.keep_work:
            shutil.rmtree(vdir, ignore_errors=True)
        else:
            info["cache_dir"] = vdir
        return out, out2, info

    def compare(self, out, eager, ref, default_out):
        r = {"ulp_vs_fp64": ulp_stats(out, ref)}
        n_eager = bits_equal_count(out, eager)
        r["n_diff_eager"] = n_eager
        r["bit_equal_eager"] = n_eager == 0
        r["ulp_vs_eager"] = ulp_stats(out, eager) if n_eager else {"max": 0, "p99": 0}
        if default_out is not None:
            n_def = bits_equal_count(out, default_out)
            r["n_diff_default"] = n_def
            r["bit_equal_default"] = n_def == 0
        return r

    # ---- one case: inputs, eager, reference, each variant
    def run_case(self, exp: dict, spec: dict, keep: dict | None = None, digest: bool = False):
        """spec: id, fn, inputs (callable seed -> list of CPU tensors), variants, desc."""
        state = self.prepare_case(exp, spec, keep, digest)
        if state is not None:
            self.run_variants(exp, state, spec["variants"])
            self.finish_case(state)
        return state

    def budget_reason(self) -> str:
        return f"budget spent ({self.budget.used():.1f} s of {self.budget.seconds:.0f} s)"

    def prepare_case(self, exp: dict, spec: dict, keep: dict | None = None, digest: bool = False):
        """Inputs, eager output and fp64 reference of one case (None when it cannot run)."""
        torch = self.torch
        case = {"id": spec["id"], "description": spec.get("desc", ""), "variants": [], "status": "running"}
        exp["cases"].append(case)
        if self.budget.spent():
            case["status"] = "skipped"
            case["reason"] = self.budget_reason()
            for v in spec["variants"]:
                case["variants"].append({"name": v.name, "status": "skipped", "reason": case["reason"]})
            self.save()
            return None
        try:
            seed = (self.args.seed + zlib.crc32(spec["id"].encode())) % (2**31)
            case["seed"] = seed
            cpu_args = spec["inputs"](seed)
            args = [a.to(self.dev) for a in cpu_args]
            case["inputs"] = [{"dtype": str(a.dtype).replace("torch.", ""), "shape": list(a.shape)} for a in args]
            with torch.no_grad():
                eager = spec["fn"](*args)
                self.sync()
                ref64 = spec["fn"](*[a.to(torch.float64) for a in args])
                ref = round_to_dtype(ref64, eager.dtype)
            del ref64
            case["output"] = {
                "dtype": str(eager.dtype).replace("torch.", ""),
                "shape": list(eager.shape),
                "n_elements": eager.numel(),
            }
            case["eager"] = {"ulp_vs_fp64": ulp_stats(eager, ref)}
            if digest:
                case["eager"]["digest"] = tensor_digest(eager)
            if keep is not None:
                keep[(spec["id"], "eager")] = eager
                keep[(spec["id"], "inputs")] = args
        except Exception as exc:
            case["status"] = "error"
            case["error"] = error_record(exc)
            self.save()
            return None
        self.save()
        return {
            "case": case,
            "spec": spec,
            "args": args,
            "eager": eager,
            "ref": ref,
            "default": None,
            "keep": keep,
            "digest": digest,
        }

    def run_variants(self, exp: dict, st: dict, variants: list):
        torch = self.torch
        case, spec = st["case"], st["spec"]
        for v in variants:
            rec = {"name": v.name, "options": v.options}
            if v.patch:
                rec["patch"] = v.patch
            if v.note:
                rec["note"] = v.note
            case["variants"].append(rec)
            self.n_variants += 1
            why = self.unavailable(v)
            if why:
                rec["status"], rec["reason"] = why
                continue
            if self.budget.spent():
                rec["status"] = "skipped"
                rec["reason"] = self.budget_reason()
                continue
            _progress(f"{exp['id']} {spec['id']} {v.name}")
            try:
                limit = min(self.args.variant_timeout_s, max(30.0, self.budget.remaining() + 30.0))
                with hard_timeout(limit):
                    out, out2, info = self.compile_and_run(
                        spec["fn"], st["args"], v, f"{spec['id']}_{v.name}", sass=exp["id"] in ("c3", "fma")
                    )
                rec.update(info)
                rec.update(self.compare(out, st["eager"], st["ref"], st["default"]))
                rec["rerun_bit_equal"] = bits_equal_count(out, out2) == 0
                if st["digest"]:
                    rec["digest"] = tensor_digest(out)
                rec["status"] = "ok"
                self.n_ok += 1
                if v.name == "default":
                    st["default"] = out
                if st["keep"] is not None:
                    st["keep"][(spec["id"], v.name)] = out
                if self.args.save_outputs:
                    os.makedirs(self.args.save_outputs, exist_ok=True)
                    torch.save(out.cpu(), os.path.join(self.args.save_outputs, _fname(spec["id"], v.name) + ".pt"))
            except Exception as exc:
                rec["status"] = "error"
                rec["error"] = error_record(exc)
                with contextlib.suppress(Exception):
                    torch._dynamo.reset()
            self.save()

    def finish_case(self, st: dict):
        st["case"]["status"] = "done"
        st["case"]["finding"] = case_finding(st["case"])
        self.save()


def _fname(*parts) -> str:
    return "__".join(re.sub(r"[^\w.-]+", "_", p) for p in parts)


def _progress(msg: str):
    print(f"[{time.monotonic() - T_START:7.1f}s] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# In-process patches


def triton_parse_options_available():
    try:
        from triton.backends.nvidia.compiler import CUDABackend

        if not hasattr(CUDABackend, "parse_options"):
            return False, "triton.backends.nvidia.compiler.CUDABackend has no parse_options"
        return True, ""
    except Exception as exc:
        return False, f"cannot import Triton's CUDA backend: {exc!r}"


@contextlib.contextmanager
def patch_triton_no_fp_fusion():
    """Force enable_fp_fusion=False in every Triton CUDA compile (Inductor passes its own value
    explicitly, which the TRITON_DEFAULT_FP_FUSION environment variable does not override)."""
    from triton.backends.nvidia.compiler import CUDABackend

    orig = CUDABackend.parse_options

    def parse_options(self, opts, *a, **kw):
        opts = dict(opts)
        opts["enable_fp_fusion"] = False
        return orig(self, opts, *a, **kw)

    CUDABackend.parse_options = parse_options
    try:
        yield
    finally:
        CUDABackend.parse_options = orig


PATCHES = {"triton_parse_options": patch_triton_no_fp_fusion}


# --------------------------------------------------------------------------------------------
# Findings (sentences computed from the recorded numbers)


def _ok(variants):
    return [v for v in variants if v.get("status") == "ok"]


def _find(variants, name):
    for v in variants:
        if v.get("name") == name:
            return v
    return None


def _src_summary(src: dict) -> str:
    if not src:
        return ""
    bits = [f"{src.get('kernel_count', 0)} kernel(s)"]
    if src.get("decorators"):
        bits.append("/".join(src["decorators"]))
    if src.get("R0_BLOCK"):
        bits.append("R0_BLOCK " + ",".join(map(str, src["R0_BLOCK"])))
    for key, label in (
        ("libdevice_rsqrt", "libdevice.rsqrt"),
        ("div_rn", "div_rn"),
        ("slash_div", "'/'"),
        ("fma", "fma"),
        ("sqrt", "sqrt"),
    ):
        if src.get(key):
            bits.append(f"{label} x{src[key]}")
    if src.get("rsqrt") and not src.get("libdevice_rsqrt"):
        bits.append(f"rsqrt x{src['rsqrt']}")
    if src.get("to_fp16") or src.get("to_bf16"):
        bits.append(f"lowp casts x{src.get('to_fp16', 0) + src.get('to_bf16', 0)}")
    if src.get("enable_fp_fusion"):
        bits.append("enable_fp_fusion=" + "/".join(src["enable_fp_fusion"]))
    if src.get("extern_kernel_calls"):
        bits.append(f"extern x{src['extern_kernel_calls']}")
    return ", ".join(bits)


def _chosen(v: dict) -> str:
    out = []
    for k in v.get("runtime_configs") or []:
        for launcher in k.get("launchers", [])[:1]:
            kw = launcher.get("kwargs", {})
            r = kw.get("R0_BLOCK", kw.get("RBLOCK"))
            s = f"{k['kernel']}: " + ", ".join(f"{a}={b}" for a, b in kw.items())
            if launcher.get("num_warps") is not None:
                s += f", num_warps={launcher['num_warps']}"
            if r is not None or launcher.get("num_warps") is not None:
                out.append(s)
    return "; ".join(out)


def _ptx_summary(v: dict) -> str:
    p = v.get("ptx")
    if not p:
        return ""
    t = p["totals"]
    keys = [k for k in ("fma.rn", "div.full.f32", "div.rn.f32", "rsqrt.approx", "sqrt.rn", "rcp.rn", "ftz") if t.get(k)]
    return f"PTX ({p['n_ptx']} file(s)): " + (", ".join(f"{k} x{t[k]}" for k in keys) or "none of fma.rn/div/rsqrt/ftz")


def variant_sentence(v: dict, n: int, default: bool) -> str:
    st = v.get("status")
    if st != "ok":
        why = (
            v.get("reason")
            or (v.get("error") or {}).get("type", "") + ": " + (v.get("error") or {}).get("message", "")[:160]
        )
        return f"{v['name']}: {st} ({why})"
    u = v["ulp_vs_fp64"]
    s = f"{v['name']}: "
    if v["bit_equal_eager"]:
        s += "bit-equal to eager"
    else:
        s += f"differs from eager in {fmt_int(v['n_diff_eager'])} of {fmt_int(n)} elements (up to {v['ulp_vs_eager'].get('max')} ULP apart)"
    s += f"; max/p99 ULP vs fp64 {u.get('max')}/{u.get('p99')}"
    if u.get("nan_mismatch"):
        s += f", {fmt_int(u['nan_mismatch'])} NaN mismatches"
    if not default and "bit_equal_default" in v:
        s += (
            "; bits same as default"
            if v["bit_equal_default"]
            else f"; differs from default in {fmt_int(v['n_diff_default'])}"
        )
    if not v.get("rerun_bit_equal", True):
        s += "; a second call gave different bits"
    src = _src_summary(v.get("source"))
    if src:
        s += f"; source: {src}"
    ch = _chosen(v)
    if ch:
        s += f"; launch: {ch}"
    px = _ptx_summary(v)
    if px:
        s += f"; {px}"
    return s


def case_finding(case: dict) -> str:
    if case.get("status") in ("skipped", "error"):
        return f"{case['id']}: {case['status']}"
    n = case["output"]["n_elements"]
    e = case["eager"]["ulp_vs_fp64"]
    parts = [f"{case['id']} ({fmt_int(n)} elements): eager max/p99 ULP vs fp64 {e.get('max')}/{e.get('p99')}"]
    for v in case["variants"]:
        parts.append(variant_sentence(v, n, v["name"] == "default"))
    return ". ".join(parts)


def _cases_done(exp):
    return [c for c in exp["cases"] if c.get("status") == "done"]


def generic_experiment_finding(exp: dict) -> str:
    cases = _cases_done(exp)
    if not cases:
        return "no case ran"
    d_ok = [(c, _find(c["variants"], "default")) for c in cases]
    d_ok = [(c, d) for c, d in d_ok if d and d.get("status") == "ok"]
    eq = [c["id"] for c, d in d_ok if d["bit_equal_eager"]]
    neq = [(c["id"], d["n_diff_eager"], c["output"]["n_elements"]) for c, d in d_ok if not d["bit_equal_eager"]]
    if d_ok:
        s = f"default compiled is bit-equal to eager in {len(eq)} of {len(d_ok)} cases"
    else:
        s = "no case has a default compiled result"
    if neq:
        s += " (differs: " + "; ".join(f"{i} {fmt_int(a)}/{fmt_int(b)}" for i, a, b in neq) + ")"
    ulp = [(c["id"], d["ulp_vs_fp64"].get("max"), c["eager"]["ulp_vs_fp64"].get("max")) for c, d in d_ok]
    worse = [f"{i} {a} vs {b}" for i, a, b in ulp if a is not None and b is not None and a > b]
    better = [f"{i} {a} vs {b}" for i, a, b in ulp if a is not None and b is not None and a < b]
    if worse:
        s += "; compiled max ULP vs fp64 above eager's in " + "; ".join(worse)
    if better:
        s += "; below eager's in " + "; ".join(better)
    fixes, changes, statuses = {}, {}, {}
    for c, d in d_ok:
        for v in _ok(c["variants"]):
            if v["name"] == "default":
                continue
            if v["bit_equal_eager"] and not d["bit_equal_eager"]:
                fixes.setdefault(v["name"], []).append(c["id"])
            if not v.get("bit_equal_default", True):
                changes.setdefault(v["name"], []).append(c["id"])
    for c in cases:
        for v in c["variants"]:
            if v.get("status") in ("absent", "n/a", "error", "skipped"):
                statuses.setdefault(v["status"], set()).add(v["name"])
    if fixes:
        s += "; variants that reach bit equality with eager where default does not: " + "; ".join(
            f"{k} ({len(v)}: {', '.join(v)})" for k, v in fixes.items()
        )
    if changes:
        s += "; variants that change the bits vs default: " + "; ".join(
            f"{k} ({len(v)} case(s))" for k, v in changes.items()
        )
    else:
        s += "; no variant changed the bits vs default"
    for st, names in statuses.items():
        s += f"; {st}: " + ", ".join(sorted(names))
    return s


def finding_c3(exp: dict) -> str:
    s = generic_experiment_finding(exp)
    facts = []
    for c in _cases_done(exp):
        d = _find(c["variants"], "default")
        if d and d.get("status") == "ok":
            src = d["source"]
            what = []
            if src.get("libdevice_rsqrt"):
                what.append("libdevice.rsqrt")
            elif src.get("rsqrt"):
                what.append("rsqrt")
            if src.get("sqrt") and src.get("slash_div"):
                what.append("1/sqrt")
            if src.get("div_rn"):
                what.append("div_rn")
            elif src.get("slash_div"):
                what.append("'/'")
            px = (d.get("ptx") or {}).get("totals", {})
            ptx = [k for k in ("div.full.f32", "div.rn.f32", "rsqrt.approx", "rcp.rn") if px.get(k)]
            facts.append(
                f"{c['id']}: {'+'.join(what) or 'none of rsqrt/div'}" + (f" (PTX {', '.join(ptx)})" if ptx else "")
            )
        for v in _ok(c["variants"]):
            if v["name"] != "default" and d and d.get("status") == "ok":
                a, b = v["source"], d["source"]
                delta = [k for k in ("libdevice_rsqrt", "rsqrt", "div_rn", "slash_div", "sqrt") if a.get(k) != b.get(k)]
                if delta:
                    facts.append(
                        f"{c['id']} {v['name']} changes source "
                        + ", ".join(f"{k} {b.get(k)}->{a.get(k)}" for k in delta)
                    )
    if facts:
        s += ". Default source: " + "; ".join(facts)
    return s


def finding_fma(exp: dict) -> str:
    parts = []
    for c in _cases_done(exp):
        bits = []
        for v in c["variants"]:
            if v.get("status") != "ok":
                bits.append(f"{v['name']}: {v.get('status')}")
                continue
            p = (v.get("ptx") or {}).get("totals", {})
            fma = p.get("fma.rn")
            eq = "== eager" if v["bit_equal_eager"] else f"!= eager in {fmt_int(v['n_diff_eager'])}"
            fus = "/".join(v["source"].get("enable_fp_fusion") or []) or "unset"
            b = f"{v['name']}: {eq}, max ULP vs fp64 {v['ulp_vs_fp64'].get('max')}, triton_meta enable_fp_fusion={fus}"
            if fma is not None:
                b += f", PTX fma.rn x{fma}"
            if v["name"] != "default" and "bit_equal_default" in v:
                b += (
                    ", same bits as default"
                    if v["bit_equal_default"]
                    else f", {fmt_int(v['n_diff_default'])} differ from default"
                )
            bits.append(b)
        parts.append(f"{c['id']} (eager max ULP vs fp64 {c['eager']['ulp_vs_fp64'].get('max')}): " + "; ".join(bits))
    for ch in exp.get("children", []):
        if ch.get("status") != "done":
            why = ch.get("reason") or (ch.get("error") or {}).get("message", "")
            parts.append(f"child {ch.get('variant')}: {ch.get('status')}" + (f" ({why})" if why else ""))
    return " | ".join(parts) if parts else "no case ran"


def finding_c1(exp: dict) -> str:
    parts = []
    for cmp in exp.get("comparisons", []):
        if "n_diff" in cmp:
            same = cmp["n_diff"] == 0
            parts.append(
                f"{cmp['what']}: "
                + (
                    f"identical in all {fmt_int(cmp['n'])}"
                    if same
                    else f"differ in {fmt_int(cmp['n_diff'])} of {fmt_int(cmp['n'])}"
                )
            )
        else:
            parts.append(f"{cmp['what']}: {cmp.get('status', 'not compared')}")
    consts = []
    for c in _cases_done(exp):
        d = _find(c["variants"], "default")
        if d and d.get("status") == "ok" and d["source"].get("float_constants"):
            consts.append(f"{c['id']}: {', '.join(d['source']['float_constants'])}")
    s = "; ".join(parts) or "no comparison ran"
    if consts:
        s += ". Float constants in the compiled code: " + "; ".join(consts)
    return s + ". " + generic_experiment_finding(exp)


def finding_c2(exp: dict) -> str:
    s = generic_experiment_finding(exp)
    launch = []
    for c in _cases_done(exp):
        for v in _ok(c["variants"]):
            if v["name"] in ("default", "triton.persistent_reductions=False", "split_reductions=False"):
                ch = _chosen(v) or _src_summary(v["source"])
                launch.append(f"{c['id']} {v['name']}: {ch}")
    if launch:
        s += ". Launch/blocking: " + " | ".join(launch)
    return s


def finding_strict(exp: dict) -> str:
    s = generic_experiment_finding(exp)
    rows = []
    for c in _cases_done(exp):
        rows.append(f"{c['id']}: " + ", ".join(f"{v['name']} {fmt_int(v['n_diff_eager'])}" for v in _ok(c["variants"])))
    if rows:
        s += ". Elements differing from eager: " + " | ".join(rows)
    return s


FINDERS = {"c3": finding_c3, "fma": finding_fma, "c1": finding_c1, "c2": finding_c2, "strict": finding_strict}


# --------------------------------------------------------------------------------------------
# Experiments


def dtype_of(name):
    import torch

    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[name]


def exp_c3(r: Runner, exp: dict):
    torch = r.torch
    ew, rms, sub = r.sizes["ew"], r.sizes["rms"], r.sizes["subnormal"]
    specs = []
    specs.append(
        (
            "div/f32/normal",
            op_div,
            lambda s: [inp_normal(ew, torch.float32, s), inp_log_uniform(ew, -8, 8, torch.float32, s + 1, signed=True)],
            variants_c3("div", "f32"),
            "a/b, a ~ N(0,1), |b| = 2^U(-8,8) random sign",
        )
    )
    specs.append(
        (
            "rsqrt/f32/normal",
            op_rsqrt,
            lambda s: [inp_log_uniform(ew, -60, 60, torch.float32, s)],
            variants_c3("rsqrt", "f32"),
            "rsqrt(x), x = 2^U(-60,60)",
        )
    )
    specs.append(
        (
            "rmsnorm/f32",
            op_rmsnorm,
            lambda s: [inp_normal(rms, torch.float32, s)],
            variants_c3("rmsnorm", "f32"),
            "x*rsqrt(mean(x^2,-1)+1e-6), x ~ N(0,1)",
        )
    )
    specs.append(
        (
            "div/f32/subnormal",
            op_div,
            lambda s: [
                inp_f32_subnormal(sub, s, signed=True),
                inp_log_uniform(sub, -1, 2, torch.float32, s + 1, signed=True),
            ],
            variants_c3("div_subnormal", "f32"),
            "a/b, a float32 subnormal, |b| = 2^U(-1,2)",
        )
    )
    specs.append(
        (
            "rsqrt/f32/subnormal",
            op_rsqrt,
            lambda s: [inp_f32_subnormal(sub, s)],
            variants_c3("rsqrt_subnormal", "f32"),
            "rsqrt(x), x float32 subnormal",
        )
    )
    for dn, lo, hi in (("f16", -14, 15), ("bf16", -100, 100)):
        dt = dtype_of(dn)
        specs.append(
            (
                f"rsqrt/{dn}",
                op_rsqrt,
                lambda s, dt=dt, lo=lo, hi=hi: [inp_log_uniform(ew, lo, hi, dt, s)],
                variants_c3("rsqrt", dn),
                f"rsqrt(x), x = 2^U({lo},{hi})",
            )
        )
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        specs.append(
            (
                f"div/{dn}",
                op_div,
                lambda s, dt=dt: [inp_normal(ew, dt, s, scale=4.0), inp_log_uniform(ew, -4, 4, dt, s + 1, signed=True)],
                variants_c3("div", dn),
                "a/b, a ~ N(0,16), |b| = 2^U(-4,4)",
            )
        )
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        specs.append(
            (
                f"rmsnorm/{dn}",
                op_rmsnorm,
                lambda s, dt=dt: [inp_normal(rms, dt, s)],
                variants_c3("rmsnorm", dn),
                "x*rsqrt(mean(x^2,-1)+1e-6), x ~ N(0,1)",
            )
        )
    for cid, fn, inputs, variants, desc in specs:
        r.run_case(exp, {"id": cid, "fn": fn, "inputs": inputs, "variants": variants, "desc": desc})


def fma_variants(r: Runner, child: bool):
    if child:
        return [Variant("default")]
    v = [Variant("default")]
    # Inductor options about FP contraction, whatever this torch calls them
    for key in sorted(r.config_keys()):
        low = key.lower()
        if ("fp_fusion" in low or "fma" in low or "fp_contract" in low) and not key.startswith(
            ("cpp.", "cuda.", "rocm.", "xpu.", "cutlass.")
        ):
            try:
                val = r.config_get(key)
            except Exception:
                continue
            if isinstance(val, bool):
                v.append(opt(key, not val, triton=True, note="found by introspection"))
    v.append(
        opt(
            "emulate_precision_casts",
            True,
            note="recent Inductor sets Triton's enable_fp_fusion = not emulate_precision_casts",
        )
    )
    v.append(
        Variant(
            "triton parse_options enable_fp_fusion=False",
            patch="triton_parse_options",
            triton_only="n/a on cpu: patches Triton's CUDA option parser",
            note="Triton's CUDABackend.parse_options patched to force enable_fp_fusion=False (overrides Inductor's explicit value)",
        )
    )
    return v


def exp_fma(r: Runner, exp: dict):
    torch = r.torch
    ew = r.sizes["ew"]
    child = r.args.child
    specs = [
        (
            "fma/f32",
            lambda s: [
                inp_normal(ew, torch.float32, s),
                inp_normal(ew, torch.float32, s + 1),
                inp_normal(ew, torch.float32, s + 2),
            ],
            "a*b+c, all ~ N(0,1) float32",
        ),
        (
            "fma/f16",
            lambda s: [
                inp_normal(ew, torch.float16, s),
                inp_normal(ew, torch.float16, s + 1),
                inp_normal(ew, torch.float16, s + 2),
            ],
            "a*b+c, all ~ N(0,1) float16",
        ),
    ]
    procs = []
    if not child:
        procs = start_fma_children(r, exp)
    keep = {}
    for cid, inputs, desc in specs:
        r.run_case(
            exp,
            {"id": cid, "fn": op_fma, "inputs": inputs, "variants": fma_variants(r, child), "desc": desc},
            keep=keep,
            digest=True,
        )
    if not child:
        finish_fma_children(r, exp, procs, keep)


def triton_language_knob(name: str) -> bool:
    try:
        import triton

        return hasattr(triton.knobs.language, name)
    except Exception:
        return False


def start_fma_children(r: Runner, exp: dict) -> list:
    procs = []
    for val in FMA_CHILDREN:
        env_desc = " ".join(f"{k}={v}" for k, v in FP_FUSION_ENV[val].items())
        rec = {"fp_fusion": val, "env": FP_FUSION_ENV[val], "variant": f"env {env_desc}"}
        exp.setdefault("children", []).append(rec)
        if r.dev.type == "cpu" and not r.args.dry_run_children:
            rec["status"] = "n/a"
            rec["reason"] = (
                "n/a on cpu: Triton's environment variables do not reach the C++ backend (--dry-run-children runs them anyway)"
            )
            continue
        knob = {"force-off": "force_disable_fp_fusion", "0": "default_fp_fusion", "1": "default_fp_fusion"}.get(val)
        if knob and not triton_language_knob(knob):
            rec["status"] = "absent"
            rec["reason"] = f"this Triton has no knobs.language.{knob}, so {env_desc} does nothing"
            continue
        remaining = r.budget.remaining()
        if remaining <= 5:
            rec["status"] = "skipped"
            rec["reason"] = f"budget spent ({r.budget.used():.1f} s of {r.budget.seconds:.0f} s)"
            continue
        cdir = tempfile.mkdtemp(prefix=f"child_{_fname(val)}_", dir=r.work)
        out = os.path.join(cdir, "child.json")
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            "--child",
            "--only",
            "fma",
            "--fp-fusion",
            val,
            "--device",
            r.args.device,
            "--sizes",
            r.args.sizes,
            "--seed",
            str(r.args.seed),
            "--budget-s",
            f"{remaining:.1f}",
            "--out",
            out,
            "--save-outputs",
            os.path.join(cdir, "outputs"),
            "--work-dir",
            cdir,
            "--variant-timeout-s",
            str(r.args.variant_timeout_s),
        ]
        try:
            log = open(os.path.join(cdir, "child.log"), "w")  # closed in finish_fma_children
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            rec["status"] = "started"
            rec["pid"] = p.pid
            procs.append((rec, p, log, cdir, out, time.monotonic(), remaining))
            _progress(f"fma child started: {env_desc} (pid {p.pid})")
        except Exception as exc:
            rec["status"] = "error"
            rec["error"] = error_record(exc)
    return procs


def finish_fma_children(r: Runner, exp: dict, procs: list, keep: dict):
    torch = r.torch
    for rec in exp.get("children", []):
        if rec.get("status") in ("n/a", "absent", "skipped", "error"):
            for pcase in exp["cases"]:
                if pcase.get("status") == "done":
                    stub = {"name": rec["variant"], "process": "child", "env": rec["env"], "status": rec["status"]}
                    stub["reason"] = rec.get("reason") or (rec.get("error") or {}).get("message", "")
                    if rec.get("error"):
                        stub["error"] = rec["error"]
                    pcase["variants"].append(stub)
    for rec, p, log, cdir, out, t0, _remaining in procs:
        wait = max(10.0, r.budget.remaining() + 60.0)
        try:
            p.wait(timeout=wait)
            rec["returncode"] = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rec["returncode"] = "killed"
            rec["reason"] = f"killed after waiting {wait:.0f} s past its start"
        log.close()
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        try:
            with open(os.path.join(cdir, "child.log"), errors="replace") as f:
                rec["log_tail"] = f.read().splitlines()[-12:]
        except OSError:
            pass
        try:
            with open(out) as f:
                child = json.load(f)
        except Exception as exc:
            rec["status"] = "error"
            rec["error"] = error_record(exc)
            continue
        rec["status"] = "done"
        rec["child_header"] = {
            k: child["header"].get(k) for k in ("versions", "triton_knobs", "elapsed_s", "fp_fusion_env")
        }
        cexp = child.get("experiments", {}).get("fma", {})
        for ccase in cexp.get("cases", []):
            pcase = next((c for c in exp["cases"] if c["id"] == ccase["id"]), None)
            cv = _find(ccase.get("variants", []), "default")
            if pcase is None or cv is None:
                continue
            v = dict(cv)
            v["name"] = rec["variant"]
            v["process"] = "child"
            v["env"] = rec["env"]
            cd, pd = ccase.get("eager", {}).get("digest"), pcase.get("eager", {}).get("digest")
            v["eager_digest_same_as_parent"] = None if cd is None or pd is None else cd == pd
            for k in ("bit_equal_default", "n_diff_default"):
                v.pop(k, None)
            path = os.path.join(cdir, "outputs", _fname(ccase["id"], "default") + ".pt")
            dflt = keep.get((ccase["id"], "default"))
            if v.get("status") == "ok" and os.path.exists(path) and dflt is not None:
                try:
                    cout = torch.load(path).to(dflt.device)
                    n = bits_equal_count(cout, dflt)
                    v["n_diff_default"] = n
                    v["bit_equal_default"] = n == 0
                    eager = keep.get((ccase["id"], "eager"))
                    if eager is not None:
                        n_e = bits_equal_count(cout, eager)
                        v["n_diff_eager_parent"] = n_e
                except Exception as exc:
                    v["compare_error"] = error_record(exc)
            if r.dev.type == "cpu" and v.get("status") == "ok":
                v["status"] = "n/a"
                v["reason"] = (
                    "n/a on cpu: Triton's environment variables do not reach the C++ backend (ran only to test the subprocess path)"
                )
            elif v.get("status") == "ok":
                r.n_ok += 1
            pcase["variants"].append(v)
        if not r.args.keep_work:
            shutil.rmtree(cdir, ignore_errors=True)
        r.save()
    for pcase in exp["cases"]:
        if pcase.get("status") == "done":
            pcase["finding"] = case_finding(pcase)
    r.save()


def exp_c1(r: Runner, exp: dict):
    torch = r.torch
    ew = r.sizes["ew"]
    keep = {}
    forms = [
        ("immediate", op_scalar_immediate, "x*0.7+y (Python scalar)"),
        ("full_like", op_scalar_full_like, "x*full_like(x,0.7)+y (in-graph tensor)"),
        ("input_tensor", op_scalar_input, "x*s+y, s = full(0.7) passed as an input (control: cannot be folded)"),
    ]
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        for form, fn, desc in forms:

            def inputs(s, dt=dt, form=form, dn=dn):
                base = (r.args.seed + zlib.crc32(f"c1/{dn}".encode())) % (2**31)  # same x, y for every form
                xs = [inp_normal(ew, dt, base), inp_normal(ew, dt, base + 1)]
                if form == "input_tensor":
                    xs.append(torch.full(ew, 0.7, dtype=dt))
                return xs

            variants = [Variant("default"), opt("emulate_precision_casts", True)]
            r.run_case(
                exp,
                {"id": f"c1/{dn}/{form}", "fn": fn, "inputs": inputs, "variants": variants, "desc": desc},
                keep=keep,
            )
    comps = []
    for dn in ("f16", "bf16"):
        pairs = [
            ("eager immediate vs eager full_like", ("immediate", "eager"), ("full_like", "eager")),
            ("eager full_like vs eager input_tensor", ("full_like", "eager"), ("input_tensor", "eager")),
            ("compiled immediate vs compiled full_like", ("immediate", "default"), ("full_like", "default")),
            ("compiled immediate vs eager immediate", ("immediate", "default"), ("immediate", "eager")),
            ("compiled full_like vs eager full_like", ("full_like", "default"), ("full_like", "eager")),
            ("compiled full_like vs compiled input_tensor", ("full_like", "default"), ("input_tensor", "default")),
            ("compiled immediate vs eager full_like", ("immediate", "default"), ("full_like", "eager")),
            (
                "emulate_precision_casts: compiled immediate vs compiled full_like",
                ("immediate", "emulate_precision_casts=True"),
                ("full_like", "emulate_precision_casts=True"),
            ),
            (
                "emulate_precision_casts: compiled immediate vs eager immediate",
                ("immediate", "emulate_precision_casts=True"),
                ("immediate", "eager"),
            ),
            (
                "emulate_precision_casts: compiled full_like vs eager full_like",
                ("full_like", "emulate_precision_casts=True"),
                ("full_like", "eager"),
            ),
        ]
        for what, (fa, va), (fb, vb) in pairs:
            a, b = keep.get((f"c1/{dn}/{fa}", va)), keep.get((f"c1/{dn}/{fb}", vb))
            rec = {"what": f"{dn} {what}"}
            if a is None or b is None:
                rec["status"] = "not compared (an output is missing)"
            else:
                rec["n_diff"] = bits_equal_count(a, b)
                rec["n"] = a.numel()
            comps.append(rec)
    exp["comparisons"] = comps


def exp_c2(r: Runner, exp: dict):
    torch = r.torch
    red = r.sizes["red"]
    tri = "n/a on cpu: {what} only reaches Triton reductions (Inductor's C++ backend has a fixed per-thread cascade)"
    variants = [
        Variant("default"),
        Variant(
            "numerics=strict_reduction",
            {"numerics": "strict_reduction"},
            triton_only="n/a on cpu: strict reduction ordering needs Triton (has_triton_reduction_ordering)",
        ),
    ]
    variants += [opt("deterministic", True), opt("batch_invariant", True)]
    variants += [
        Variant(
            "triton.persistent_reductions=False",
            {"triton.persistent_reductions": False},
            tri.format(what="triton.persistent_reductions"),
        )
    ]
    variants += [Variant("split_reductions=False", {"split_reductions": False}, tri.format(what="split_reductions"))]
    variants += [
        Variant(
            "triton.cooperative_reductions=True",
            {"triton.cooperative_reductions": True},
            tri.format(what="triton.cooperative_reductions"),
        )
    ]
    variants += [
        Variant(
            "triton.force_cooperative_reductions=True",
            {"triton.cooperative_reductions": True, "triton.force_cooperative_reductions": True},
            tri.format(what="triton.force_cooperative_reductions"),
        )
    ]
    for mk in (1, 2, 3):
        variants.append(
            Variant(f"triton.multi_kernel={mk}", {"triton.multi_kernel": mk}, tri.format(what="triton.multi_kernel"))
        )
    variants.append(
        Variant("dynamic_scale_rblock=False", {"dynamic_scale_rblock": False}, tri.format(what="dynamic_scale_rblock"))
    )
    order = [
        ("sum", 65536),
        ("layer_norm", 8192),
        ("sum", 8192),
        ("layer_norm", 65536),
        ("sum", 1024),
        ("layer_norm", 1024),
    ]
    # Two tiers: the options most likely to matter on every case first, then the rest, so that a
    # spent budget drops the least valuable variants rather than whole cases.
    tier1, tier2 = variants[:7], variants[7:]
    # layer_norm only: Welford vs two-step variance (recent Inductor picks by row length on CUDA)
    tri_var = tri.format(what="triton.use_two_step_variance_*")
    variance = [
        Variant(
            "welford (triton.use_two_step_variance_threshold=0)", {"triton.use_two_step_variance_threshold": 0}, tri_var
        ),
        Variant(
            "two-step variance (min_numel=0, threshold=2**31-1)",
            {"triton.use_two_step_variance_min_numel": 0, "triton.use_two_step_variance_threshold": 2**31 - 1},
            tri_var,
        ),
    ]
    states = []
    for op, n in order:
        rows = red[n]
        shape = (rows, n)
        if op == "sum":
            spec = {
                "id": f"sum/f16->f32/{rows}x{n}",
                "fn": op_sum_f32,
                "inputs": lambda s, shape=shape: [inp_uniform(shape, torch.float16, s)],
                "variants": variants,
                "desc": "x.sum(-1, dtype=float32), x ~ U(0,1) float16",
            }
        else:
            spec = {
                "id": f"layer_norm/f16/{rows}x{n}",
                "fn": op_layer_norm,
                "inputs": lambda s, shape=shape, n=n: [
                    inp_normal(shape, torch.float16, s, scale=2.0, shift=0.5),
                    inp_normal((n,), torch.float16, s + 1, scale=0.2, shift=1.0),
                    inp_normal((n,), torch.float16, s + 2, scale=0.2),
                ],
                "variants": variants + variance,
                "desc": "layer_norm over the last dim, eps 1e-5, float16 weight and bias",
            }
        st = r.prepare_case(exp, spec)
        if st is not None:
            r.run_variants(exp, st, tier1)
            states.append(st)
    for st in states:
        r.run_variants(exp, st, tier2 + (variance if st["spec"]["fn"] is op_layer_norm else []))
        r.finish_case(st)
        st.clear()


def exp_strict(r: Runner, exp: dict):
    ew, ln = r.sizes["ew"], r.sizes["ln"]
    variants = [
        Variant("default"),
        Variant("numerics=strict_pointwise", {"numerics": "strict_pointwise"}),
        Variant("numerics=strict", {"numerics": "strict"}),
        opt("emulate_precision_casts", True),
        Variant(
            "emulate_precision_casts+use_pytorch_libdevice",
            {"emulate_precision_casts": True, "eager_numerics.use_pytorch_libdevice": True},
            NA_TRITON.format(what="eager_numerics.use_pytorch_libdevice"),
        ),
        Variant(
            "emulate_precision_casts+eager_numerics.division_rounding+disable_ftz",
            {
                "emulate_precision_casts": True,
                "eager_numerics.division_rounding": True,
                "eager_numerics.disable_ftz": True,
            },
            NA_TRITON.format(what="eager_numerics.*"),
            note="what numerics=strict_pointwise implies in torch 2.15, spelled out for a torch without numerics",
        ),
        Variant(
            "emulate_precision_casts+emulate_divison_rounding",
            {"emulate_precision_casts": True, "emulate_divison_rounding": True},
            NA_TRITON.format(what="emulate_divison_rounding"),
        ),
    ]
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        r.run_case(
            exp,
            {
                "id": f"gelu_chain/{dn}",
                "fn": op_gelu_chain,
                "inputs": lambda s, dt=dt: [
                    inp_normal(ew, dt, s),
                    inp_normal(ew, dt, s + 1),
                    inp_normal(ew, dt, s + 2),
                ],
                "variants": variants,
                "desc": "gelu(x*0.7+y)*z, all ~ N(0,1)",
            },
        )
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        n = ln[1]
        r.run_case(
            exp,
            {
                "id": f"layer_norm/{dn}/{ln[0]}x{n}",
                "fn": op_layer_norm,
                "inputs": lambda s, dt=dt, n=n: [
                    inp_normal(ln, dt, s, scale=2.0, shift=0.5),
                    inp_normal((n,), dt, s + 1, scale=0.2, shift=1.0),
                    inp_normal((n,), dt, s + 2, scale=0.2),
                ],
                "variants": variants,
                "desc": "layer_norm over the last dim, eps 1e-5",
            },
        )


RUNNERS = {"c3": exp_c3, "fma": exp_fma, "c1": exp_c1, "c2": exp_c2, "strict": exp_strict}


# --------------------------------------------------------------------------------------------
# Header


OPTION_NAMES = [
    "numerics",
    "emulate_precision_casts",
    "emulate_divison_rounding",
    "emulate_division_rounding",
    "eager_numerics.division_rounding",
    "eager_numerics.disable_ftz",
    "eager_numerics.use_pytorch_libdevice",
    "eager_numerics.pow_precision",
    "use_fast_math",
    "split_reductions",
    "deterministic",
    "batch_invariant",
    "dynamic_scale_rblock",
    "triton.persistent_reductions",
    "triton.multi_kernel",
    "triton.cooperative_reductions",
    "triton.force_cooperative_reductions",
    "triton.codegen_upcast_to_fp32",
    "fx_graph_cache",
    "compile_threads",
]
INTEREST = re.compile(
    r"numerics|fp_fusion|fma|divi|ftz|libdevice|fast_math|persistent|cooperative|multi_kernel|determin|batch_invariant|split_reduction|precision_cast|rblock|upcast|contract|variance|welford",
    re.I,
)


def nvidia_smi() -> dict:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {"available": False}
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
        return {
            "available": True,
            "rc": out.returncode,
            "gpus": out.stdout.strip().splitlines(),
            "stderr": out.stderr.strip()[-300:],
        }
    except Exception as exc:
        return {"available": True, "error": repr(exc)}


def build_header(r: Runner) -> dict:
    torch = r.torch
    h = r.data["header"]
    v = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": getattr(torch.version, "cuda", None),
        "torch_git": getattr(torch.version, "git_version", None),
    }
    try:
        import triton

        v["triton"] = triton.__version__
    except Exception as exc:
        v["triton"] = None
        v["triton_import_error"] = repr(exc)
    if r.dev.type == "cuda":
        try:
            v["gpu_name"] = torch.cuda.get_device_name(0)
            v["gpu_capability"] = list(torch.cuda.get_device_capability(0))
            v["cuda_runtime_device_count"] = torch.cuda.device_count()
        except Exception as exc:
            v["gpu_error"] = repr(exc)
        v["nvidia_smi"] = nvidia_smi()
    h["versions"] = v
    opts = {}
    for name in OPTION_NAMES:
        present = r.config_has(name)
        rec = {"present": present}
        if present:
            try:
                rec["default"] = r.config_get(name)
            except Exception as exc:
                rec["error"] = repr(exc)
        opts[name] = rec
    h["options"] = opts
    h["inductor_config_keys_of_interest"] = {k: _safe_get(r, k) for k in sorted(r.config_keys()) if INTEREST.search(k)}
    knobs = {}
    try:
        import triton

        lk = getattr(getattr(triton, "knobs", None), "language", None)
        for k in ("default_fp_fusion", "force_disable_fp_fusion", "fp32_default"):
            knobs[f"knobs.language.{k}"] = {
                "present": lk is not None and hasattr(lk, k),
                "value": getattr(lk, k, None) if lk is not None else None,
            }
        ok, why = triton_parse_options_available()
        knobs["CUDABackend.parse_options"] = {"present": ok, "why": why}
    except Exception as exc:
        knobs["error"] = repr(exc)
    h["triton_knobs"] = knobs
    h["tools"] = {"cuobjdump": r.cuobjdump}
    return h


def _safe_get(r, k):
    try:
        return r.config_get(k)
    except Exception as exc:
        return f"<error {exc!r}>"


# --------------------------------------------------------------------------------------------
# Table


def print_table(data: dict, out=None):
    """One row per variant that ran (or failed); variants absent, n/a or skipped are counted under
    each experiment instead."""
    out = out or sys.stdout
    rows = [
        ("exp", "case", "variant", "status", "maxULP", "p99", "diff vs eager", "=eager", "=dflt", "compile_s", "source")
    ]
    others = {}
    for eid in data["header"]["order"]:
        exp = data["experiments"].get(eid)
        if not exp:
            continue
        for c in exp.get("cases", []):
            if c.get("status") == "done":
                e = c["eager"]["ulp_vs_fp64"]
                rows.append((eid, c["id"], "(eager)", "ok", str(e.get("max")), str(e.get("p99")), "", "", "", "", ""))
            elif c.get("status") == "error":
                rows.append(
                    (
                        eid,
                        c["id"],
                        "(inputs/eager)",
                        "error",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        (c.get("error") or {}).get("type", ""),
                    )
                )
            for v in c.get("variants", []):
                st = v.get("status", "?")
                if st == "ok":
                    u = v["ulp_vs_fp64"]
                    cs = v.get("compile_s")
                    rows.append(
                        (
                            eid,
                            c["id"],
                            v["name"][:44],
                            "ok",
                            str(u.get("max")),
                            str(u.get("p99")),
                            f"{fmt_int(v['n_diff_eager'])}/{fmt_int(c['output']['n_elements'])}",
                            "yes" if v["bit_equal_eager"] else "no",
                            "" if "bit_equal_default" not in v else ("yes" if v["bit_equal_default"] else "no"),
                            f"{cs:.2f}" if isinstance(cs, float) else "",
                            _src_summary(v.get("source"))[:60],
                        )
                    )
                elif st == "error":
                    err = v.get("error") or {}
                    rows.append(
                        (
                            eid,
                            c["id"],
                            v["name"][:44],
                            "error",
                            "",
                            "",
                            "",
                            "",
                            "",
                            "",
                            f"{err.get('type', '')}: {err.get('message', '')}"[:60],
                        )
                    )
                else:
                    others.setdefault(eid, {}).setdefault(st, set()).add(v["name"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    print(file=out)
    for eid in data["header"]["order"]:
        for st, names in sorted(others.get(eid, {}).items()):
            print(f"[{eid}] {st}: {', '.join(sorted(names))}", file=out)
    print(file=out)
    for eid in data["header"]["order"]:
        exp = data["experiments"].get(eid)
        if exp:
            print(f"[{eid}] {exp.get('status')}: {exp.get('finding', '')}", file=out)
            print(file=out)


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="JSON file to write (FILE.tmp, then renamed)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=120.0,
        help="wall-clock budget from start; no new variant starts after it (default 120)",
    )
    p.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cuda (the measurement) or cpu (a dry run of the C++ backend)",
    )
    p.add_argument("--sizes", choices=sorted(SIZES), default="default", help="tensor sizes (small: for tests)")
    p.add_argument(
        "--only",
        default=",".join(EXPERIMENTS),
        help=f"comma-separated experiments, in the order run: {','.join(EXPERIMENTS)}",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--variant-timeout-s", type=float, default=120.0, help="hard limit of one compile+run (SIGALRM)")
    p.add_argument(
        "--work-dir",
        default=None,
        help="where per-variant cache directories go (default: a new temporary directory, removed at the end)",
    )
    p.add_argument(
        "--keep-work", action="store_true", help="keep the per-variant cache directories (generated code, PTX)"
    )
    p.add_argument(
        "--fp-fusion",
        choices=sorted(FP_FUSION_ENV),
        default="default",
        help="set Triton's FP-fusion environment before importing torch (used by the fma child processes)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save-outputs", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--dry-run-children",
        action="store_true",
        help="on cpu, run the fma child processes anyway (tests the subprocess path)",
    )
    args = p.parse_args(argv)
    if not args.budget_s > 0:
        p.error("--budget-s must be > 0")
    if args.variant_timeout_s <= 0:
        p.error("--variant-timeout-s must be > 0")
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = [x for x in only if x not in EXPERIMENTS]
    if bad or not only:
        p.error(f"--only: unknown experiment(s) {bad}; choose from {EXPERIMENTS}")
    args.only = [x for x in EXPERIMENTS if x in only]
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        p.error(f"--out: directory {out_dir} does not exist")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    budget = Budget(args.budget_s)
    # Before torch is imported: Triton's FP fusion (child processes) and in-process compilation
    # (so per-variant TRITON_CACHE_DIR and the Triton option patch reach every compile).
    os.environ.update(FP_FUSION_ENV[args.fp_fusion])
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    data = {
        "schema": SCHEMA,
        "status": "starting",
        "header": {
            "started_utc": now_utc(),
            "argv": sys.argv if argv is None else ["inductor_mechanisms.py", *argv],
            "device": args.device,
            "sizes": args.sizes,
            "size_table": SIZES[args.sizes],
            "seed": args.seed,
            "seed_note": "each case's inputs come from torch.Generator('cpu').manual_seed(seed + crc32(case id)) and are then moved to the device",
            "budget_s": args.budget_s,
            "order": args.only,
            "child": args.child,
            "fp_fusion_env": FP_FUSION_ENV[args.fp_fusion],
            "env_at_start": {
                k: v
                for k, v in os.environ.items()
                if k.startswith(("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE", "CUDA_VISIBLE"))
            },
            "reference": "the same function on the inputs upcast to float64 (same device), rounded to the output dtype with round-to-odd through float32",
            "ulp": "distance between ordered integers of the output dtype (+0 == -0); NaN on one side only is counted as nan_mismatch and left out of max/p99",
        },
        "experiments": {},
    }
    write_json_atomic(args.out, data)
    try:
        import torch
        import torch._dynamo
        import torch._inductor.config
        import torch._inductor.utils
    except Exception as exc:
        data["status"] = "failed"
        data["error"] = error_record(exc)
        write_json_atomic(args.out, data)
        print(f"cannot import torch: {exc!r}", file=sys.stderr)
        return 1
    if args.device == "cuda" and not torch.cuda.is_available():
        data["status"] = "failed"
        data["error"] = {
            "type": "NoCuda",
            "message": f"torch.cuda.is_available() is False (torch {torch.__version__}, built for CUDA {torch.version.cuda})",
        }
        write_json_atomic(args.out, data)
        print(data["error"]["message"], file=sys.stderr)
        return 1
    own_work = args.work_dir is None
    work = args.work_dir or tempfile.mkdtemp(prefix="inductor_mechanisms_")
    os.makedirs(work, exist_ok=True)
    data["header"]["work_dir"] = work
    r = Runner(args, budget, data, work)
    torch._inductor.config.compile_threads = 1
    try:
        build_header(r)
    except Exception as exc:
        data["header"]["header_error"] = error_record(exc)
    data["status"] = "running"
    r.save()
    if not budget.spent():
        # One throwaway compile, so that the first variant's compile_s does not carry the
        # process's one-time costs (Triton and CUDA initialisation, precompiled headers).
        _progress("warm-up compile")
        t0 = time.monotonic()
        try:
            with hard_timeout(args.variant_timeout_s):
                r.compile_and_run(op_fma, [torch.ones(64, device=r.dev)] * 3, Variant("default"), "warmup")
            data["header"]["warmup_s"] = round(time.monotonic() - t0, 2)
        except Exception as exc:
            data["header"]["warmup_error"] = error_record(exc)
        r.save()
    for eid in args.only:
        exp = {"id": eid, "title": EXPERIMENT_TITLES[eid], "status": "running", "cases": []}
        data["experiments"][eid] = exp
        if budget.spent():
            exp["status"] = "skipped"
            exp["reason"] = f"budget spent ({budget.used():.1f} s of {budget.seconds:.0f} s)"
            exp["finding"] = "not run: " + exp["reason"]
            r.save()
            continue
        t0 = time.monotonic()
        try:
            RUNNERS[eid](r, exp)
            complete = all(
                c.get("status") == "done" and all(v.get("status") != "skipped" for v in c["variants"])
                for c in exp["cases"]
            )
            exp["status"] = "done" if complete else "partial"
        except Exception as exc:
            exp["status"] = "error"
            exp["error"] = error_record(exc)
        exp["elapsed_s"] = round(time.monotonic() - t0, 2)
        try:
            exp["finding"] = FINDERS[eid](exp)
        except Exception as exc:
            exp["finding"] = f"finding failed: {exc!r}"
        r.save()
    data["status"] = "budget_exhausted" if budget.spent() else "complete"
    data["header"]["finished_utc"] = now_utc()
    data["summary"] = summarize(data)
    r.save()
    if own_work and not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    if not args.child:
        print_table(data)
    print(f"wrote {args.out}: {json.dumps(data['summary'])}", file=sys.stderr)
    return 0 if r.n_ok > 0 else 1


def summarize(data: dict) -> dict:
    counts = {}
    for exp in data["experiments"].values():
        for c in exp.get("cases", []):
            for v in c.get("variants", []):
                counts[v.get("status", "?")] = counts.get(v.get("status", "?"), 0) + 1
    return {"variants_by_status": counts, "elapsed_s": data["header"].get("elapsed_s")}


if __name__ == "__main__":
    sys.exit(main())
