"""What is measured: the experiments, the sizes, the ops (each traced by dynamo; the fp64 reference
runs the same function on float64 inputs), the seeded inputs and the variants of Inductor's options."""

from __future__ import annotations

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


def dtype_of(name):
    import torch

    return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[name]
