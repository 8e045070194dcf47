"""Task S: throughput of the precision toolkit against a memory copy measured in the same run."""
from __future__ import annotations

from .common import benchmarks, copy_bandwidth, gbps, name_fields, suite_run

SUITE = "precision_toolkit"
# Family -> (target share of the copy bandwidth, what the target means).
TARGETS = {"UlpDiff": 0.50, "ErrorStats": 0.05}


def ratios(run: dict) -> tuple[float | None, list[dict]]:
    copy_bw = copy_bandwidth(run)
    rows = []
    for b in benchmarks(run):
        f = name_fields(b["name"])
        if f["family"] == "MemoryCopy" or "bytes_per_second" not in b:
            continue
        rows.append({"family": f["family"], "dtype": f.get("dtype", "?"), "n": f.get("n", "?"),
                     "bw": b["bytes_per_second"], "ratio": b["bytes_per_second"] / copy_bw if copy_bw else None,
                     "target": TARGETS.get(f["family"])})
    return copy_bw, rows


def render(doc, runs: dict[str, dict]):
    doc.heading("S — precision toolkit throughput")
    run = suite_run(doc, runs, SUITE)
    if run is None:
        return
    copy_bw, rows = ratios(run)
    if copy_bw is None:
        doc.paragraph("No MemoryCopy reference in this run: ratios cannot be computed.")
        return
    doc.paragraph(f"Memory-copy bandwidth measured in the same run: {gbps(copy_bw)} GB/s of traffic (each byte "
                  "copied is read and written, as STREAM counts it). Comparison throughput counts traffic too: the "
                  "bytes of both operands, plus UlpDiff's per-element distance tensor, which it writes. One core.")
    table = []
    for r in rows:
        verdict = "—"
        if r["target"] is not None:
            verdict = "meets" if r["ratio"] >= r["target"] else "misses"
        table.append([r["family"], r["dtype"], r["n"], gbps(r["bw"]), f"{100 * r['ratio']:.1f} %",
                      f"{100 * r['target']:.0f} %" if r["target"] is not None else "—", verdict])
    doc.table(["operation", "dtype", "elements", "GB/s", "of copy", "target", "verdict"], table)
    targeted = [r for r in rows if r["target"] is not None and r["dtype"] == "f16"]
    if targeted:
        misses = [r for r in targeted if r["ratio"] < r["target"]]
        evidence = "; ".join(f"{r['family']} f16 at {100 * r['ratio']:.1f} % of copy (target {100 * r['target']:.0f} %)"
                             for r in targeted)
        doc.verdict("comparing never dominates a run", "contradicted" if misses else "supported", evidence)
