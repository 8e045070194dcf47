"""A speed target as a share of the memory copy measured in the same run (the issues' targets, filed
under their claim in tools/thresholds.json "targets"): shared by task S (the toolkit) and the
engine's fused kernels. A kernel measured faster than a copy of its bytes, or than its own
arithmetic ceiling, leaves the share undecided: the yardsticks ran under a different load."""

from __future__ import annotations

from reports.claims.verdict import Outcome, Wording
from reports.numbers import pct


def outcome(share: float, target: float, suspect: str = "") -> Outcome:
    """suspect: why the yardsticks are suspect ("above the copy"), or ""."""
    if suspect:
        return Outcome.INCONCLUSIVE
    return Outcome.SUPPORTED if share >= target else Outcome.CONTRADICTED


def wording(
    outcome: Outcome, what: str, share: float, target: float, details: str, suspect: str = "", cases: int = 1
) -> Wording:
    """what: the kernel ("fused Chain", "UlpDiff f16"); details: the facts beside the share."""
    condition = f"{what} ≥ {pct(target, 2)} of the memory copy measured in the same run"
    if suspect:
        return Wording(
            outcome,
            f"{pct(share)} of copy: yardsticks suspect",
            condition,
            details,
            cases,
            interval=f"{suspect}, which a kernel that reads and writes its bytes cannot be; the machine's load "
            "changed between the measurements of this run. Rerun on a quiet machine, or with repetitions (full "
            "profile)",
        )
    return Wording(outcome, f"{pct(share)} of copy", condition, details, cases)
