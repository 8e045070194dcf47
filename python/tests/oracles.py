"""numpy's own arithmetic for what fusebench computes in C++: the tests' independent oracles."""

import numpy as np

# (mantissa bits, minimum normal exponent, maximum exponent) of each format
FORMATS = {"f16": (10, -14, 15), "bf16": (7, -126, 127), "f32": (23, -126, 127), "f64": (52, -1022, 1023)}
UNSIGNED = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}


def bits_to_values(bits, fmt):
    """float64 values of raw bit patterns (exact)."""
    bits = np.asarray(bits)
    with np.errstate(invalid="ignore"):  # NaN payloads widen quietly
        if fmt == "bf16":
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        return bits.view({"f16": np.float16, "f32": np.float32, "f64": np.float64}[fmt]).astype(np.float64)


def monotone_key(bits, fmt):
    """Sign-magnitude bits to a signed integer line: +0 and -0 both 0, each step one representable
    value; infinity lands one step beyond the largest finite value."""
    width = np.dtype(UNSIGNED[fmt]).itemsize * 8
    b = np.asarray(bits).astype(np.uint64)
    magnitude = (b & np.uint64((1 << (width - 1)) - 1)).astype(np.int64)
    negative = (b >> np.uint64(width - 1)) != 0
    return np.where(negative, -magnitude, magnitude)


def is_nan_bits(bits, fmt):
    return np.isnan(bits_to_values(bits, fmt))


def ulp_distance(a_bits, b_bits, fmt):
    """Integer distance; NaN pairs masked out (returned mask True where a NaN is involved)."""
    distance = np.abs(monotone_key(a_bits, fmt) - monotone_key(b_bits, fmt)).astype(np.uint64)
    nan = is_nan_bits(a_bits, fmt) | is_nan_bits(b_bits, fmt)
    return distance, nan


def spacing(ref, fmt):
    """Spacing of fmt at ref (float64): 2^(e - mantissa_bits) with ref in [2^e, 2^(e+1)), floored at
    the subnormal spacing, capped at the top binade's."""
    mantissa, emin, emax = FORMATS[fmt]
    _, e = np.frexp(np.abs(ref))  # |ref| = m * 2^e, m in [0.5, 1)
    exponent = np.clip(e.astype(np.int64) - 1, emin, emax)
    exponent = np.where(ref == 0, emin, exponent)
    return np.ldexp(1.0, (exponent - mantissa).astype(np.int32))


def ulp_error(y_values, ref, fmt):
    y_values = np.asarray(y_values, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.abs(y_values - ref) / spacing(np.where(np.isfinite(ref), ref, 0.0), fmt)
    finite = np.isfinite(y_values) & np.isfinite(ref)
    same_nonfinite = (np.isnan(y_values) & np.isnan(ref)) | (np.isinf(y_values) & (y_values == ref))
    return np.where(finite, out, np.where(same_nonfinite, 0.0, np.inf))


def summary(values):
    """max (first index), mean, P50, P99 with numpy's default percentile ("linear")."""
    if values.size == 0:
        return None
    return {
        "max": float(values.max()),
        "max_index": int(np.argmax(values)),
        "mean": float(values.mean()),
        "p50": float(np.percentile(values, 50)),
        "p99": float(np.percentile(values, 99)),
    }
