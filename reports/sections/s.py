"""Task S's section: throughput of the precision toolkit against a memory copy measured in the same run."""

from __future__ import annotations

from reports.claims import s as claim
from reports.claims import shares
from reports.claims.verdict import Outcome
from reports.numbers import gbps, num, pct
from reports.sections import show
from reports.sections.plots import close, figure

VERDICT_WORD = {Outcome.SUPPORTED: "meets", Outcome.CONTRADICTED: "misses", Outcome.INCONCLUSIVE: "undecided"}
WHAT = {
    "BitEqual": "reads both operands, writes nothing",
    "UlpDiff": "reads both operands, writes a distance per element",
    "ErrorStats": "reads both operands; exact percentiles in one pass where the sampled windows hold the ranks",
    "ErrorStatsVsF64": "the same, a result against its fp64 reference (continuous errors; both operands' bytes)",
}


def render(s, result):
    facts = claim.facts(result)
    copy_bw, rows = facts.copies, facts.measured
    if not copy_bw and not any(r.rounds for r in rows):
        s.paragraph("No MemoryCopy reference in this run: shares of the copy bandwidth cannot be computed.")
        return
    if not rows:
        s.paragraph("No toolkit benchmark in this run besides the copy.")
        return
    show(s, claim.verdicts(facts))
    if copy_bw:
        _copy_timed_apart(s, rows, copy_bw)
    else:
        s.paragraph(
            "No MemoryCopy timed apart in this run (its filter left it out): each share below is set against the copy "
            "measured in its own interleaved rounds." + _passes_text(rows) + _rounds_text(rows, False)
        )
    table = [
        [
            r.family,
            r.dtype,
            num(int(r.n)) if r.n.isdigit() else r.n,
            num(r.threads),
            gbps(r.bw),
            shares.interval_text(r.rounds) if r.rounds else claim.share_text(r) if r.ratio is not None else "—",
            pct(r.target, 2) if r.target is not None else "—",
            VERDICT_WORD[v.outcome] if v is not None else "—",
            WHAT.get(r.family, ""),
        ]
        for r, v in claim.row_verdicts(facts)
    ]
    s.table(["operation", "dtype", "elements", "threads", "GB/s", "of copy", "target", "verdict", "traffic"], table)


def _copy_timed_apart(s, rows, copy_bw) -> None:
    """The copies timed apart, their plot, and how the rates are counted."""
    _plot(s, rows, copy_bw)
    bit_equal = [r for r in rows if r.family == "BitEqual" and r.ratio and r.ratio > 1]
    copy_text = ", ".join(f"{gbps(bw)} GB/s on {t} thread{'s' if t > 1 else ''}" for t, bw in sorted(copy_bw.items()))
    s.paragraph(
        f"Memory copy measured in the same run: {copy_text} of traffic (each byte copied is read and "
        "written, as STREAM counts it); each comparison is set against the fastest copy on at most as many threads "
        "as it used (a copy on more threads that ran slower was held back by other work). "
        "The toolkit's rates count traffic too: the bytes of both operands, plus UlpDiff's per-element distance, "
        "which it writes. Operands of 2²⁵ elements (beyond the caches). Rates are per wall-clock second "
        "(Google Benchmark's own rate for these divides by CPU time, which a loaded machine makes smaller)."
        + (
            f" BitEqual exceeds the copy ({', '.join(r.dtype + ' ' + pct(r.ratio) for r in bit_equal)}) because "
            "it only reads: a copy's written lines are first read into the cache (write-allocate) and then written "
            "back, so the copy moves more bytes than it counts, and a read-only scan has no such cost."
            if bit_equal
            else ""
        )
        + _passes_text(rows)
        + _rounds_text(rows)
    )


def _rounds_text(rows, copy_timed_apart: bool = True) -> str:
    """How the shares with an interval were measured (where the run has interleaved rounds)."""
    rounds = max((r.rounds.rounds for r in rows if r.rounds), default=0)
    if not rounds:
        return ""
    apart = " (the copy figures above are the copies timed apart)" if copy_timed_apart else ""
    return (
        f" Shares with an interval are medians of {rounds} interleaved rounds with their 95 % interval: each round "
        "the operation and a memcpy of the same bytes on the same threads, alternating call by call for at least "
        f"40 ms, so that both see the same load{apart}; the verdicts rest on them."
    )


def _passes_text(rows) -> str:
    """How many passes over the operands ErrorStats took (its `passes` counter, where the run has it)."""
    passes = [f"{r.dtype} {int(r.passes)}" for r in rows if r.family == "ErrorStats" and r.passes is not None]
    if not passes:
        return ""
    return (
        " ErrorStats' passes over the operands per call: " + ", ".join(passes) + " (1: the sampled windows held every "
        "percentile's ranks; more: the radix selection's passes were needed)."
    )


def _plot(s, rows, copy_bw):
    import numpy as np

    families = list(dict.fromkeys(r.family for r in rows))
    dtypes = list(dict.fromkeys(r.dtype for r in rows))
    fig, axes = figure(8, 0.5 + 0.55 * len(families) * len(dtypes) / 2 + 0.8)
    ax = axes[0][0]
    height = 0.8 / len(dtypes)
    colors = {"f16": "#1b9e77", "bf16": "#d95f02", "f32": "#7570b3"}
    for i, dtype in enumerate(dtypes):
        ys = np.arange(len(families)) + i * height
        values = [next((r.bw / 1e9 for r in rows if r.family == f and r.dtype == dtype), 0) for f in families]
        ax.barh(ys, values, height=height, label=dtype, color=colors.get(dtype))
    for (t, bw), style in zip(sorted(copy_bw.items()), ("--", "-.", ":")):
        ax.axvline(
            bw / 1e9,
            color="black",
            linestyle=style,
            label=f"memory copy, {t} thread{'s' if t > 1 else ''}: {gbps(bw)} GB/s",
        )
    for f in families:
        if f in claim.targets():
            y = families.index(f)
            copy = next((r.copy for r in rows if r.family == f and r.copy), None)
            if copy:
                ax.plot([claim.targets()[f] * copy / 1e9] * 2, [y - 0.15, y + 0.8], color="#a00", linewidth=2)
    ax.plot([], [], color="#a00", linewidth=2, label="target share of copy")
    ax.set_yticks(np.arange(len(families)) + 0.4 - height / 2, families)
    ax.invert_yaxis()
    ax.set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    lo = min(r.bw for r in rows) / 1e9
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
