"""Task S: throughput of the precision toolkit against a memory copy measured in the same run."""

from __future__ import annotations

from reports import claims
from reports.numbers import gbps, num, pct
from reports.results import axes, benchmarks, wall_rate

from .plots import close, figure

# Family -> target share of the copy bandwidth (the targets; shown, and the verdict's condition).
TARGETS = claims.targets("precision_toolkit")
WHAT = {
    "BitEqual": "reads both operands, writes nothing",
    "UlpDiff": "reads both operands, writes a distance per element",
    "ErrorStats": "reads both operands; exact percentiles in one pass where the sampled windows hold the ranks",
    "ErrorStatsVsF64": "the same, a result against its fp64 reference (continuous errors; both operands' bytes)",
}


def copies(run: dict) -> dict[int, float]:
    """threads -> bytes_per_second of the MemoryCopy on that many threads."""
    return {
        int(axes(run, b).get("threads", b.get("threads", 1))): wall_rate(b)
        for b in benchmarks(run, "MemoryCopy/")
        if "bytes_per_second" in b
    }


def reference_copy(copy_bw: dict[int, float], threads: int) -> float | None:
    """The copy a comparison on `threads` threads is set against: the fastest copy measured on at most as
    many threads. A copy on more threads that ran slower than one on fewer was slowed by other work (the
    machine did not lose bandwidth), and a share computed against it would flatter the comparison."""
    eligible = [bw for t, bw in copy_bw.items() if t <= threads]
    if eligible:
        return max(eligible)
    return next(iter(copy_bw.values())) if len(copy_bw) == 1 else None


def ratios(run: dict) -> tuple[dict[int, float], list[dict]]:
    """Each comparison against the fastest copy on at most as many threads as it used (its `threads` counter; runs
    made before that counter existed had one copy, on one thread)."""
    copy_bw = copies(run)
    rows = []
    for b in benchmarks(run):
        f = axes(run, b)
        if f["family"] == "MemoryCopy" or "bytes_per_second" not in b or b.get("error_occurred"):
            continue
        threads = int(b.get("threads", 1))  # the suite's own counter (it overrides Google Benchmark's field)
        copy = reference_copy(copy_bw, threads)
        rows.append(
            {
                "family": f["family"],
                "dtype": f.get("dtype", "?"),
                "n": f.get("n", "?"),
                "threads": threads,
                "bw": wall_rate(b),
                "copy": copy,
                "ratio": wall_rate(b) / copy if copy else None,
                "target": TARGETS.get(f["family"]),
                "passes": b.get("passes"),
            }
        )
    return copy_bw, rows


def share(r: dict) -> str:
    """The share of the copy, with enough digits that one just under its target does not print as the target."""
    close = r["target"] is not None and r["ratio"] is not None and abs(r["ratio"] / r["target"] - 1) < 0.01
    return pct(r["ratio"], 4 if close else 3)


def render(s, run: dict, result):
    copy_bw, rows = ratios(run)
    if not copy_bw:
        s.paragraph("No MemoryCopy reference in this run: shares of the copy bandwidth cannot be computed.")
        return
    if not rows:
        s.paragraph("No toolkit benchmark in this run besides the copy.")
        return
    targeted = [r for r in rows if r["target"] is not None and r["dtype"] == "f16"]
    for r in targeted:
        v = claims.decide_share_target(
            f"{r['family']} f16",
            r["ratio"],
            r["target"],
            f"{r['family']} f16 moves {gbps(r['bw'])} GB/s on {r['threads']} thread{'s' if r['threads'] > 1 else ''}, "
            f"{share(r)} of the copy measured in the same run ({gbps(r['copy'])} GB/s: the fastest on at most as many threads)",
        )
        s.verdict(f"{r['family']} keeps up with memory (≥ {pct(r['target'], 2)} of copy)", v)
    _plot(s, rows, copy_bw)
    bit_equal = [r for r in rows if r["family"] == "BitEqual" and r["ratio"] and r["ratio"] > 1]
    copy_text = ", ".join(f"{gbps(bw)} GB/s on {t} thread{'s' if t > 1 else ''}" for t, bw in sorted(copy_bw.items()))
    s.paragraph(
        f"Memory copy measured in the same run: {copy_text} of traffic (each byte copied is read and "
        "written, as STREAM counts it); each comparison is set against the fastest copy on at most as many threads "
        "as it used (a copy on more threads that ran slower was held back by other work). "
        "The toolkit's rates count traffic too: the bytes of both operands, plus UlpDiff's per-element distance, "
        "which it writes. Operands of 2²⁵ elements (beyond the caches). Rates are per wall-clock second "
        "(Google Benchmark's own rate for these divides by CPU time, which a loaded machine makes smaller)."
        + (
            f" BitEqual exceeds the copy ({', '.join(r['dtype'] + ' ' + pct(r['ratio']) for r in bit_equal)}) because "
            "it only reads: a copy's written lines are first read into the cache (write-allocate) and then written "
            "back, so the copy moves more bytes than it counts, and a read-only scan has no such cost."
            if bit_equal
            else ""
        )
        + _passes_text(rows)
    )
    table = [
        [
            r["family"],
            r["dtype"],
            num(int(r["n"])) if r["n"].isdigit() else r["n"],
            num(r["threads"]),
            gbps(r["bw"]),
            share(r),
            pct(r["target"], 2) if r["target"] is not None else "—",
            ("meets" if r["ratio"] >= r["target"] else "misses") if r["target"] is not None else "—",
            WHAT.get(r["family"], ""),
        ]
        for r in rows
    ]
    s.table(["operation", "dtype", "elements", "threads", "GB/s", "of copy", "target", "verdict", "traffic"], table)


def _passes_text(rows) -> str:
    """How many passes over the operands ErrorStats took (its `passes` counter, where the run has it)."""
    passes = [
        f"{r['dtype']} {int(r['passes'])}" for r in rows if r["family"] == "ErrorStats" and r.get("passes") is not None
    ]
    if not passes:
        return ""
    return (
        " ErrorStats' passes over the operands per call: " + ", ".join(passes) + " (1: the sampled windows held every "
        "percentile's ranks; more: the radix selection's passes were needed)."
    )


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
    for (t, bw), style in zip(sorted(copy_bw.items()), ("--", "-.", ":")):
        ax.axvline(
            bw / 1e9,
            color="black",
            linestyle=style,
            label=f"memory copy, {t} thread{'s' if t > 1 else ''}: {gbps(bw)} GB/s",
        )
    for f in families:
        if f in TARGETS:
            y = families.index(f)
            copy = next((r["copy"] for r in rows if r["family"] == f and r["copy"]), None)
            if copy:
                ax.plot([TARGETS[f] * copy / 1e9] * 2, [y - 0.15, y + 0.8], color="#a00", linewidth=2)
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
    s.figure(
        fig,
        "s_throughput",
        "S: toolkit throughput against the memory copy of the same run (log axis: the rates span two decades)",
    )
    close(fig)
