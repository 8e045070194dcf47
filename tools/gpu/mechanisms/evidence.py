"""Evidence: the generated code Inductor wrote, the launch configurations it chose, the PTX (and
SASS) Triton wrote."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess

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
