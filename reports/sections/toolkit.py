"""Task S: throughput of the precision toolkit against a memory copy measured in the same run."""
from __future__ import annotations

from .common import benchmarks, copy_bandwidth, gbps, name_fields, num, pct
from .plots import close, figure

# Family -> target share of the copy bandwidth (the targets; shown, and the verdict's condition).
TARGETS = {"UlpDiff": 0.50, "ErrorStats": 0.05}
WHAT = {"BitEqual": "reads both operands, writes nothing", "UlpDiff": "reads both operands, writes a distance per element",
        "ErrorStats": "reads both operands; sorts for exact percentiles"}


def ratios(run: dict) -> tuple[float | None, list[dict]]:
    copy_bw = copy_bandwidth(run)
    rows = []
    for b in benchmarks(run):
        f = name_fields(b["name"])
        if f["family"] == "MemoryCopy" or "bytes_per_second" not in b or b.get("error_occurred"):
            continue
        rows.append({"family": f["family"], "dtype": f.get("dtype", "?"), "n": f.get("n", "?"),
                     "bw": b["bytes_per_second"], "ratio": b["bytes_per_second"] / copy_bw if copy_bw else None,
                     "target": TARGETS.get(f["family"])})
    return copy_bw, rows


def render(s, run: dict, result):
    copy_bw, rows = ratios(run)
    if copy_bw is None:
        s.paragraph("No MemoryCopy reference in this run: shares of the copy bandwidth cannot be computed.")
        return
    if not rows:
        s.paragraph("No toolkit benchmark in this run besides the copy.")
        return
    targeted = [r for r in rows if r["target"] is not None and r["dtype"] == "f16"]
    for r in targeted:
        meets = r["ratio"] >= r["target"]
        s.verdict(f"{r['family']} keeps up with memory (≥ {pct(r['target'], 2)} of copy)",
                  "supported" if meets else "contradicted", f"{pct(r['ratio'])} of copy",
                  f"Decided by: {r['family']} f16 moves {gbps(r['bw'])} GB/s, {pct(r['ratio'])} of the copy measured "
                  f"in the same run; the target is {pct(r['target'], 2)}: {'met' if meets else 'missed'}.")
    _plot(s, rows, copy_bw)
    bit_equal = [r for r in rows if r["family"] == "BitEqual" and r["ratio"] and r["ratio"] > 1]
    s.paragraph(f"Memory copy measured in the same run: {gbps(copy_bw)} GB/s of traffic (each byte copied is read and "
                "written, as STREAM counts it). The toolkit's rates count traffic too: the bytes of both operands, plus "
                "UlpDiff's per-element distance, which it writes. One core, operands of 2²⁵ elements (beyond the caches)."
                + (f" BitEqual exceeds the copy ({', '.join(r['dtype'] + ' ' + pct(r['ratio']) for r in bit_equal)}) because "
                   "it only reads: a copy's written lines are first read into the cache (write-allocate) and then written "
                   "back, so the copy moves more bytes than it counts, and a read-only scan has no such cost."
                   if bit_equal else ""))
    table = [[r["family"], r["dtype"], num(int(r["n"])) if r["n"].isdigit() else r["n"], gbps(r["bw"]), pct(r["ratio"]),
              pct(r["target"], 2) if r["target"] is not None else "—",
              ("meets" if r["ratio"] >= r["target"] else "misses") if r["target"] is not None else "—",
              WHAT.get(r["family"], "")] for r in rows]
    s.table(["operation", "dtype", "elements", "GB/s", "of copy", "target", "verdict", "traffic"], table)


def _plot(s, rows, copy_bw):
    import numpy as np
    families = list(dict.fromkeys(r["family"] for r in rows))
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    fig, axes = figure(8, 0.5 + 0.55 * len(families) * len(dtypes) / 2 + 0.8)
    ax = axes[0][0]
    height = 0.8 / len(dtypes)
    colors = {"f16": "#1b9e77", "bf16": "#d95f02", "f32": "#7570b3"}
    for i, dtype in enumerate(dtypes):
        ys = np.arange(len(families)) + i * height
        values = [next((r["bw"] / 1e9 for r in rows if r["family"] == f and r["dtype"] == dtype), 0) for f in families]
        ax.barh(ys, values, height=height, label=dtype, color=colors.get(dtype))
    ax.axvline(copy_bw / 1e9, color="black", linestyle="--", label=f"memory copy {gbps(copy_bw)} GB/s")
    for f in families:
        if f in TARGETS:
            y = families.index(f)
            ax.plot([TARGETS[f] * copy_bw / 1e9] * 2, [y - 0.15, y + 0.8], color="#a00", linewidth=2)
    ax.plot([], [], color="#a00", linewidth=2, label="target share of copy")
    ax.set_yticks(np.arange(len(families)) + 0.4 - height / 2, families)
    ax.invert_yaxis()
    ax.set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter
    lo = min(r["bw"] for r in rows) / 1e9
    ax.xaxis.set_major_locator(FixedLocator([t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if t >= lo / 2]))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("GB/s of traffic (log)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    s.figure(fig, "s_throughput", "S: toolkit throughput against the memory copy of the same run (log axis: the "
             "rates span two decades)")
    close(fig)
