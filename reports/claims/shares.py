"""A speed target as a share of the memory copy (the issues' targets, filed under their claim in
tools/thresholds.json "targets"): shared by task S (the toolkit) and the engine's fused kernels.

Where the run has interleaved rounds (the copy_share* counters, suites/support/interleaved.hpp:
each round the kernel once and a memcpy of the same traffic on the same threads, the order
alternating), the median per-round share and its distribution-free 95 % interval decide:
SUPPORTED when the lower end is at or above the target, CONTRADICTED when the upper end is below
it, else INCONCLUSIVE; and INCONCLUSIVE whatever the interval when the rounds ran on a loaded machine
(the copy's threads waited for a CPU: LOADED_COPY_WAIT). Where earlier runs on the same machine, or the
reference runs of its machine class, measured the same copy (reports/yardsticks.py), the interval is widened to the shares against the fastest and the
slowest of those copies (Rounds.decided): the copy's speed between runs is part of the uncertainty. Older runs have one figure of each, the copy timed apart: the share against
the target, and a kernel measured faster than a copy of its bytes, or than its own arithmetic
ceiling, leaves the share undecided (the yardsticks ran under a different load)."""

from __future__ import annotations

from dataclasses import dataclass

from reports.claims.verdict import Outcome, Wording
from reports.numbers import gbps, num, pct
from reports.results import EARLIER_COPY_RATES, EARLIER_REFERENCE_RUNS


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


# ---- interleaved rounds
@dataclass(frozen=True)
class Rounds:
    """A share of the copy from interleaved rounds: the median per-round share, its 95 % interval
    (sign-test order statistics), the rounds, and the interleaved copy's median rate (traffic)."""

    median: float
    low: float
    high: float
    rounds: int
    copy_bytes_per_second: float | None = None
    # the median round's share of the copy threads' time spent waiting for a CPU (None: not measured)
    copy_wait: float | None = None
    # the copy's median rate in each earlier run on this machine, then in each reference run of its
    # machine class (reports/yardsticks.py)
    earlier_copy: tuple[float, ...] = ()
    # how many of earlier_copy are reference runs
    earlier_reference: int = 0

    @property
    def between_runs(self) -> bool:
        """Whether earlier runs' copies widen this run's interval (needs this run's copy rate too)."""
        return bool(self.earlier_copy) and bool(self.copy_bytes_per_second)

    @property
    def decided(self) -> tuple[float, float]:
        """The interval that decides: this run's, widened to the shares its kernel would have had against
        the copy as fast and as slow as an earlier run on this machine measured it. The share is the
        kernel's rate over the copy's, so against an earlier copy rate c it is this run's share times
        this run's copy rate over c."""
        if not self.between_runs:
            return self.low, self.high
        own = self.copy_bytes_per_second
        return (
            min(self.low, self.low * own / max(self.earlier_copy)),
            max(self.high, self.high * own / min(self.earlier_copy)),
        )


def rounds_of(b: dict) -> Rounds | None:
    """The benchmark's interleaved share (its copy_share* counters, and the earlier runs' copy rates
    that reports/results.py attaches), None where the run has none."""
    if not b.get("copy_share_rounds"):
        return None
    return Rounds(
        b["copy_share"],
        b["copy_share_lo"],
        b["copy_share_hi"],
        int(b["copy_share_rounds"]),
        b.get("copy_bytes_per_second"),
        b.get("copy_share_wait"),
        tuple(b.get(EARLIER_COPY_RATES, ())),
        int(b.get(EARLIER_REFERENCE_RUNS, 0)),
    )


# Rounds whose copy threads waited more than this share of their time for a CPU ran on a loaded
# machine. The interval covers the spread of the rounds within one run, not the machine's state, and
# under load the share moves with the load (other processes take a different part of the copy's speed
# than of a kernel's), so that such a run and a quiet one can fall on opposite sides of a target. On a
# machine with a core per thread of the copy and nothing else runnable, its threads do not wait.
LOADED_COPY_WAIT = 0.05


def loaded(r: Rounds) -> bool:
    return r.copy_wait is not None and r.copy_wait > LOADED_COPY_WAIT


def rounds_outcome(r: Rounds, target: float) -> Outcome:
    if loaded(r):
        return Outcome.INCONCLUSIVE
    low, high = r.decided
    if low >= target:
        return Outcome.SUPPORTED
    if high < target:
        return Outcome.CONTRADICTED
    return Outcome.INCONCLUSIVE


def interval_text(r: Rounds) -> str:
    """'93.1 % [80.6, 126 %]': the median share and the interval that decides it (this run's 95 % interval,
    widened by the earlier runs' copies where there were any)."""
    low, high = r.decided
    return f"{pct(r.median)} [{num(100 * low)}, {pct(high)}]"


def within_run_text(r: Rounds) -> str:
    return f"{pct(r.median)} [{num(100 * r.low)}, {pct(r.high)}]"


def earlier_runs_text(r: Rounds) -> str:
    """'the 3 earlier runs on this machine', 'the 2 reference runs of this machine class', or both joined."""
    own = len(r.earlier_copy) - r.earlier_reference
    parts = [f"the {own} earlier run{'s' if own != 1 else ''} on this machine"] if own else []
    if r.earlier_reference:
        n = r.earlier_reference
        parts.append(
            f"the {n} reference run{'s' if n != 1 else ''} of this machine class (results/reference/yardsticks.jsonl)"
        )
    return " and ".join(parts)


def earlier_copy_text(r: Rounds) -> str:
    """'27.9 GB/s' or '27.9-36.7 GB/s': the earlier runs' copy rates."""
    low, high = gbps(min(r.earlier_copy)), gbps(max(r.earlier_copy))
    return f"{low} GB/s" if low == high else f"{low}-{high} GB/s"


def between_runs_text(r: Rounds) -> str:
    """What widened the interval: the earlier runs' copy rates against this run's."""
    return (
        f"the copy ran at {earlier_copy_text(r)} in {earlier_runs_text(r)} (a shared machine's memory speed "
        f"moves between runs, and a kernel's need not follow it): set against the copy as fast and as slow as "
        f"any of them, the share spans {interval_text(r)}"
    )


# Why a share can pass 100 % with the copy measured in the same rounds: the byte counts are the
# bytes read plus the bytes written, for the copy as for the kernel, and memory moves more.
ABOVE_COPY = (
    "A share above 100 % is not a change of load (the copy ran in the same rounds). Both count the bytes read plus "
    "the bytes written, but a write moves more: a written line is first read into the cache (write-allocate), so the "
    "copy, which writes every byte it reads, moves about 1.5× the bytes it counts, while a kernel that writes less "
    "than it reads (BitEqual and ErrorStats write nothing, UlpDiff a third of its bytes, the fused Chain a fifth) "
    "moves fewer uncounted bytes and can pass it; where the bytes fit the last-level cache, the yardstick is "
    "memcpy's speed there, not memory's"
)


def rounds_wording(outcome: Outcome, what: str, r: Rounds, target: float, details: str) -> Wording:
    """what: the kernel ("fused Chain", "UlpDiff f16"); details: the facts beside the share. The matrix
    shows the interval (decider: the figure, and how far the lower end lies below the target)."""
    across = (
        f", set against the copy as fast and as slow as {earlier_runs_text(r)} measured it," if r.between_runs else ""
    )
    condition = (
        f"the 95 % interval of {what}'s median share of the copy over {r.rounds} interleaved rounds (each round the "
        "kernel and a memcpy of the same bytes on the same threads, alternating; sign-test order statistics)"
        f"{across} lies at or above {pct(target, 2)} (entirely below: CONTRADICTED)"
    )
    against = f" against a copy at {gbps(r.copy_bytes_per_second)} GB/s (median)" if r.copy_bytes_per_second else ""
    facts = f"median share {within_run_text(r)} over {r.rounds} rounds{against}; {details}"
    if r.between_runs:
        facts += "; " + between_runs_text(r)
    else:
        facts += (
            "; no earlier run on this machine and no reference run of this machine class: "
            "the interval holds this run's rounds only, not the copy's speed between runs, and another run may "
            "read the opposite verdict in another state of the memory (reports/yardsticks.py)"
        )
    if r.median > 1:
        facts += ". " + ABOVE_COPY
    if r.copy_wait is not None:
        facts += f"; the copy's threads waited {pct(r.copy_wait)} of their time for a CPU (median round)"
    low, high = r.decided
    if outcome is not Outcome.INCONCLUSIVE:
        interval = ""
    elif loaded(r):
        interval = (
            f"the copy's threads waited {pct(r.copy_wait)} of their time for a CPU (more than "
            f"{pct(LOADED_COPY_WAIT)}): the machine was loaded, and a share under load holds for that load only. "
            "Rerun on a quiet machine"
        )
    elif r.between_runs and (r.low >= target or r.high < target):
        side = "above" if r.low >= target else "below"
        interval = (
            f"this run's rounds alone lie {side} the {pct(target, 2)} target ({within_run_text(r)}), but against the "
            f"copy of {earlier_runs_text(r)} ({earlier_copy_text(r)}) the share spans {interval_text(r)}: the "
            "machine's memory speed between runs decides it, not the kernel"
        )
    else:
        interval = f"the median share's 95 % interval {interval_text(r)} holds the {pct(target, 2)} target"
    return Wording(
        outcome,
        f"{interval_text(r)} of copy",
        condition,
        facts,
        r.rounds,
        interval=interval,
        decider=(interval_text(r), target - low),
    )
