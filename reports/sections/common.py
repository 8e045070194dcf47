"""Helpers shared by the report sections."""
from __future__ import annotations


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


def name_fields(name: str) -> dict[str, str]:
    """'UlpDiff/dtype:f16/n:1024' -> {'family': 'UlpDiff', 'dtype': 'f16', 'n': '1024'}."""
    parts = name.split("/")
    fields = {"family": parts[0]}
    for p in parts[1:]:
        if ":" in p:
            key, value = p.split(":", 1)
            fields[key] = value
    return fields


def gbps(value: float) -> str:
    return f"{value / 1e9:.2f}"


def suite_run(doc, runs: dict[str, dict], suite: str) -> dict | None:
    """The suite's run, or None after saying in the report that it did not run."""
    run = runs.get(suite)
    if run is None:
        doc.paragraph(f"The {suite} suite did not run in this results directory.")
    return run


def copy_bandwidth(run: dict) -> float | None:
    """bytes_per_second of the run's MemoryCopy yardstick, if it has one."""
    copies = [b for b in benchmarks(run, "MemoryCopy/") if "bytes_per_second" in b]
    return copies[0]["bytes_per_second"] if copies else None
