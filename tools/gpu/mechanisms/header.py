"""The run's header: Python, torch, Triton and the GPU, Inductor's options of interest with their
defaults, Triton's FP-fusion knobs, the tools found."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys

from .patches import triton_parse_options_available
from .runner import Runner

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
