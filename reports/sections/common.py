"""Helpers shared by the report sections: benchmark rows, name fields, and the report's one number
format (three significant figures, thousands separators, units in the column headers)."""

from __future__ import annotations

import functools
import json
import math


def benchmarks(run: dict, prefix: str = "") -> list[dict]:
    """Benchmarks of one suite run whose name starts with prefix; aggregates (mean/median/stddev of
    repetitions) are skipped, except the median, which stands for the run when repetitions exist."""
    out = []
    for b in run.get("benchmarks", []):
        if not b["name"].startswith(prefix):
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        out.append(b)
    has_median = any(b.get("aggregate_name") == "median" for b in out)
    return [b for b in out if (b.get("aggregate_name") == "median") == has_median]


@functools.lru_cache(maxsize=64)
def _registered_axes(text: str) -> dict[str, dict[str, str]]:
    return json.loads(text)


def axes(run: dict, b: dict) -> dict[str, str]:
    """A benchmark's axes, {'family': 'C1', 'dtype': 'f16', 'scalar': '0.7', ...}, from the structured
    record the suites write (context entry "fusebench_axes": registered name -> axes, see
    suites/support/cases.hpp). Google Benchmark appends its own segments to a run's name
    (/iterations:1/manual_time, /real_time, /threads:2), so the registered name is the longest prefix
    the record knows. 'family' is the name's first segment ('E' for E/Alignment), 'case_family' the
    registered family. Results written before the record existed, and benchmarks registered without
    the helper, fall back to the name's fields."""
    text = run.get("context", {}).get("fusebench_axes")
    if text:
        registered = _registered_axes(text)
        name = b.get("run_name", b["name"])
        while name:
            record = registered.get(name)
            if record is not None:
                family = record.get("family", name)
                return {
                    "family": family.split("/")[0],
                    "case_family": family,
                    **{k: v for k, v in record.items() if k != "family"},
                }
            if "/" not in name:
                break
            name = name.rsplit("/", 1)[0]
    return name_fields(b["name"])


def name_fields(name: str) -> dict[str, str]:
    """'UlpDiff/dtype:f16/n:1024' -> {'family': 'UlpDiff', 'dtype': 'f16', 'n': '1024'}."""
    parts = name.split("/")
    fields = {"family": parts[0]}
    for p in parts[1:]:
        if ":" in p:
            key, value = p.split(":", 1)
            fields[key] = value
    return fields


def copy_bandwidth(run: dict) -> float | None:
    """bytes_per_second of the run's copy yardstick, if it has one: the GPU's own device-to-device
    copy where a GPU device's run measured it (DeviceMemoryCopy), else the host's MemoryCopy."""
    gpu = "cuda" in run.get("context", {}).get("fusebench_device", "")
    # a GPU's kernels against the host's memcpy would read as many times the copy: no yardstick
    for family in ("DeviceMemoryCopy/",) if gpu else ("DeviceMemoryCopy/", "MemoryCopy/"):
        copies = [b for b in benchmarks(run, family) if "bytes_per_second" in b and not b.get("error_occurred")]
        if copies:
            return copies[0]["bytes_per_second"]
    return None


def wall_rate(b: dict, field: str = "bytes_per_second") -> float | None:
    """A rate per wall-clock second. Google Benchmark divides by CPU time unless the benchmark uses
    real (or manual) time; on a loaded machine the process's CPU time is well below the wall time, so
    such a rate overstates what the operation delivers. Converted here: rate x cpu_time / real_time."""
    if field not in b:
        return None
    name = b.get("run_name", b["name"])
    if name.endswith(("/real_time", "/manual_time")) or not b.get("real_time") or not b.get("cpu_time"):
        return b[field]
    return b[field] * b["cpu_time"] / b["real_time"]


def seconds(b: dict) -> float:
    return b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]


# ---- the one number format
def num(x, sig: int = 3) -> str:
    """Integers exactly, with thousands separators; other values to `sig` significant figures, in
    scientific notation only below 0.001; '—' for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    x = float(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}".replace("-", "−")
    magnitude = math.floor(math.log10(abs(x)))
    if abs(x) < 1e-3:
        return f"{x:.{sig - 1}e}".replace("-", "−")
    decimals = max(0, sig - 1 - magnitude)
    return f"{x:,.{decimals}f}".replace("-", "−")


def pct(share, sig: int = 3) -> str:
    """A share (0.71) as a percentage ('71.0 %'), non-breaking space before the sign."""
    return "—" if share is None else num(100 * share, sig) + "\u00a0%"


def yesno(flag) -> str:
    return "—" if flag is None else ("yes" if flag else "no")


def gbps(bytes_per_second: float | None) -> str:
    return "—" if bytes_per_second is None else num(bytes_per_second / 1e9)
