"""Task S: the precision toolkit keeps up with memory: each targeted f16 operation reaches its target
share of a memory copy measured in the same run (the issues' targets; the gate holds regression
floors, filed under this claim too). Decided on interleaved rounds where the run has them
(reports/claims/shares.py: each round one call and a memcpy of the same bytes on the same threads;
the median share's 95 % interval against the target)."""

from __future__ import annotations

from dataclasses import dataclass

from reports.claims import shares, thresholds
from reports.claims.verdict import Claim, Task, Verdict, Wording
from reports.numbers import gbps, pct
from reports.results import SuiteResult, axes, benchmarks, wall_rate

TASK = Task("S", "S — precision toolkit throughput", "precision_toolkit")
CLAIMS = {"S": Claim("S", "the toolkit keeps up with memory", noun="measures")}


def targets() -> dict[str, float]:
    """family -> target share of the copy bandwidth."""
    return thresholds.of("S").targets


# ---- facts
@dataclass(frozen=True)
class Measured:
    """One toolkit benchmark against the copy it is set against (the fastest on at most as many
    threads as it used)."""

    family: str
    dtype: str
    n: str
    threads: int
    bw: float
    copy: float | None
    ratio: float | None
    target: float | None
    passes: float | None
    rounds: shares.Rounds | None = None


@dataclass(frozen=True)
class Facts:
    """copies: threads -> the MemoryCopy's bytes per (wall-clock) second; measured: every toolkit
    benchmark with a rate."""

    copies: dict[int, float]
    measured: tuple[Measured, ...]


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


def facts(result: SuiteResult) -> Facts:
    """Each comparison against the fastest copy on at most as many threads as it used (its `threads` counter;
    runs made before that counter existed had one copy, on one thread)."""
    run = result.data
    copy_bw = copies(run)
    target = targets()
    measured = []
    for b in benchmarks(run):
        f = axes(run, b)
        if f["family"] == "MemoryCopy" or "bytes_per_second" not in b or b.get("error_occurred"):
            continue
        threads = int(b.get("threads", 1))  # the suite's own counter (it overrides Google Benchmark's field)
        copy = reference_copy(copy_bw, threads)
        measured.append(
            Measured(
                f["family"],
                f.get("dtype", "?"),
                f.get("n", "?"),
                threads,
                wall_rate(b),
                copy,
                wall_rate(b) / copy if copy else None,
                target.get(f["family"]),
                b.get("passes"),
                shares.rounds_of(b),
            )
        )
    return Facts(copy_bw, tuple(measured))


# ---- decision
def verdicts(facts: Facts) -> list[Verdict]:
    """One per targeted f16 operation that has a copy to be set against: its interleaved rounds' own, or the
    copy timed apart (a run whose filter left MemoryCopy out still decides on the rounds)."""
    return [decide(m) for m in facts.measured if decidable(m) and m.dtype == "f16"]


def row_verdicts(facts: Facts) -> list[tuple[Measured, Verdict | None]]:
    """Every measured operation (each dtype, each thread count) with its verdict against its target, for
    the section's table; None where it has no target. The claim's own verdicts are `verdicts`."""
    return [(m, decide(m) if decidable(m) else None) for m in facts.measured]


def decidable(m: Measured) -> bool:
    """A target, and a copy to set the operation against: its rounds' own or the copy timed apart."""
    return m.target is not None and (m.rounds is not None or m.ratio is not None)


def decide(m: Measured) -> Verdict:
    if m.rounds:
        return Verdict("S", shares.rounds_outcome(m.rounds, m.target), m, m.rounds.rounds, member=m.family)
    return Verdict("S", shares.outcome(m.ratio, m.target), m, 1, member=m.family)


# ---- words
def share_text(m: Measured) -> str:
    """The share of the copy, with enough digits that one just under its target does not print as the target."""
    close = m.target is not None and m.ratio is not None and abs(m.ratio / m.target - 1) < 0.01
    return pct(m.ratio, 4 if close else 3)


def statement(v: Verdict) -> str:
    return f"{v.member} keeps up with memory (≥ {pct(v.figures.target, 2)} of copy)"


def words(v: Verdict) -> Wording:
    m: Measured = v.figures
    if m.rounds:
        details = (
            f"{m.family} f16 on {m.threads} thread{'s' if m.threads > 1 else ''}: {gbps(m.bw)} GB/s timed apart, "
            + (
                f"{share_text(m)} of the copy timed apart ({gbps(m.copy)} GB/s)"
                if m.ratio is not None
                else "no copy timed apart in this run (its filter left MemoryCopy out)"
            )
        )
        return shares.rounds_wording(v.outcome, f"{m.family} f16", m.rounds, m.target, details)
    details = (
        f"{m.family} f16 moves {gbps(m.bw)} GB/s on {m.threads} thread{'s' if m.threads > 1 else ''}, "
        f"{share_text(m)} of the copy measured in the same run ({gbps(m.copy)} GB/s: the fastest on at most as many "
        "threads)"
    )
    return shares.wording(v.outcome, f"{m.family} f16", m.ratio, m.target, details)
