"""ULPs: distances between ordered integers of one format, their statistics, correct rounding of the
fp64 reference to an output's dtype, bit equality and digests."""

from __future__ import annotations

import math


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
