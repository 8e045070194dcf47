"""The vocabulary every claim shares: a verdict's outcome, the decision (Verdict: the outcome, the
cases judged and the figures that decided, no words), and what a reader sees of it (Wording: the
key figure, the condition, the facts, the interval or the reason), which each claim family renders
from its own verdicts.

Outcomes:
  SUPPORTED     the data meet the claim's condition;
  CONTRADICTED  they violate it;
  INCONCLUSIVE  the data cannot tell (with the interval that straddles the threshold);
  ABSENT        the mechanism the claim is about does not occur on this device (with the evidence);
  N/A           the claim cannot be tested here (with the reason).
A verdict over zero cases is refused (Verdict and Wording raise): a claim with nothing to judge is
N/A with the reason, never SUPPORTED."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from reports import decision


class Outcome(str, enum.Enum):
    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    INCONCLUSIVE = "inconclusive"
    ABSENT = "absent"
    NA = "n/a"

    @property
    def css(self) -> str:
        return {"n/a": "not-applicable"}.get(self.value, self.value)

    @property
    def label(self) -> str:
        return self.value.upper()


JUDGED = (Outcome.SUPPORTED, Outcome.CONTRADICTED, Outcome.INCONCLUSIVE)


def _refuse_zero_cases(outcome: Outcome, cases: int | None, what: str):
    if outcome in JUDGED and (not cases or cases <= 0):
        raise ValueError(
            f"a {outcome.value} verdict over {cases or 0} cases ({what}): a claim with nothing to judge is N/A "
            "with the reason"
        )


@dataclass(frozen=True)
class Verdict:
    """One claim's decision on one device. claim: its id (a claim module's CLAIMS); member: the chain,
    dtype, kernel or measure where the claim has one per member; figures: what decided it, the claim
    family's own dataclass, which its words() renders."""

    claim: str
    outcome: Outcome
    figures: Any = None
    cases: int | None = None
    member: str | None = None

    def __post_init__(self):
        _refuse_zero_cases(self.outcome, self.cases, f"claim {self.claim}")

    @property
    def label(self) -> str:
        return self.outcome.label


@dataclass(frozen=True)
class Wording:
    """What a reader sees of one verdict.

    key_figure: a few words for the claims × devices matrix: the figure that decided;
    condition: what decides the claim, with its threshold ("fused − eager upper end ≤ 5 %");
    evidence: the facts the condition was applied to, as a sentence;
    cases: how many cases were judged (required for SUPPORTED / CONTRADICTED / INCONCLUSIVE, > 0);
    interval: for INCONCLUSIVE, the interval that straddles the threshold, as text;
    reason: for ABSENT (its evidence) and N/A (why it cannot be tested);
    beside: other rules' outcomes, shown with it; parts: the judged parts it combines, for tables;
    decider: where one cell of the matrix groups several members (B's chains), the figure that
    decided this member (its worst part's interval) and how far that part's upper end lies above its
    tolerance (negative: below), so that the cell can show the one closest to deciding otherwise."""

    outcome: Outcome
    key_figure: str
    condition: str = ""
    evidence: str = ""
    cases: int | None = None
    interval: str = ""
    reason: str = ""
    beside: list[tuple[str, Wording]] = field(default_factory=list)
    parts: list[tuple[str, Wording]] = field(default_factory=list)
    decider: tuple[str, float] | None = None

    def __post_init__(self):
        _refuse_zero_cases(self.outcome, self.cases, f"'{self.key_figure}'")
        if self.outcome in JUDGED and not self.condition:
            raise ValueError(f"a {self.outcome.value} verdict without the condition that decided it")
        if self.outcome is Outcome.INCONCLUSIVE and not self.interval:
            raise ValueError("an INCONCLUSIVE verdict without the interval (or spread) that left it undecided")
        if self.outcome in (Outcome.ABSENT, Outcome.NA) and not self.reason:
            raise ValueError(
                f"an {self.outcome.value} verdict without its {'evidence' if self.outcome is Outcome.ABSENT else 'reason'}"
            )

    @property
    def label(self) -> str:
        return self.outcome.label

    def sentence(self) -> str:
        """The full text shown under the verdict in a section."""
        parts = []
        if self.outcome in (Outcome.ABSENT, Outcome.NA):
            parts.append(self.reason.rstrip(".") + ".")
        if self.condition:
            parts.append(f"Decided by: {self.condition.rstrip('.')}.")
        if self.evidence:
            parts.append(self.evidence[0].upper() + self.evidence[1:].rstrip(".") + ".")
        if self.interval and self.outcome is Outcome.INCONCLUSIVE:
            parts.append(f"Undecided: {self.interval.rstrip('.')}.")
        for name, other in self.beside:
            parts.append(
                f"{name}: {other.label}"
                + (f" ({other.key_figure})" if other.key_figure else "")
                + (f", {other.evidence.rstrip('.')}" if other.evidence else "")
                + "."
            )
        return " ".join(parts)


def failures_of_any(members: set[str], failed: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The failed cases (benchmark name, error) whose name holds one of the members as one of its
    fields (B's chain:attention, an engine kernel's name)."""
    return [(name, message) for name, message in failed if members & _name_values(name)]


def _name_values(name: str) -> set[str]:
    """The fields of a benchmark name, 'B/chain:attention/dtype:f16' -> {B, attention, f16, ...}."""
    return {part.split(":", 1)[-1] for part in name.split("/")} | set(name.split("/"))


@dataclass(frozen=True)
class FailedCases:
    """The figures of a verdict some of whose cases failed (errored for a reason other than a declared
    n/a): the verdict judged without them, and the failures (benchmark name, error)."""

    judged: Verdict
    failed: tuple[tuple[str, str], ...]


def with_failures(v: Verdict, failed: list[tuple[str, str]]) -> Verdict:
    """A verdict some of whose cases failed. What was judged cannot stand for the claim: SUPPORTED,
    ABSENT and N/A become INCONCLUSIVE; CONTRADICTED stands (the judged cases already contradict the
    claim). Either way the failures are its figures' (FailedCases), named in its words."""
    if not failed:
        return v
    if v.outcome is Outcome.CONTRADICTED:
        return replace(v, figures=FailedCases(v, tuple(failed)))
    judged = v.cases if v.outcome in JUDGED else 0
    return Verdict(v.claim, Outcome.INCONCLUSIVE, FailedCases(v, tuple(failed)), (judged or 0) + len(failed), v.member)


def settle(verdicts: list[Verdict], failed: list[tuple[str, str]]) -> list[Verdict]:
    """Each verdict of one task on one device with the failed cases that bear on it (with_failures): a
    member's, those that name it; a claim without members, all of them; and a failure that names no
    member of the task bears on every verdict."""
    failed = list(failed)
    members = {v.member for v in verdicts if v.member}
    unplaced = [f for f in failed if not failures_of_any(members, [f])]
    return [
        with_failures(v, failed if v.member is None else failures_of_any({v.member}, failed) + unplaced)
        for v in verdicts
    ]


def failed_wording(v: Verdict, judged: Wording) -> Wording:
    """The words of a verdict with failed cases (with_failures), from the words of what was judged."""
    f: FailedCases = v.figures
    messages = list(dict.fromkeys(message for _, message in f.failed))
    errors = "; ".join(short(m, 16) for m in messages[:2]) + (
        f" (and {len(messages) - 2} other errors)" if len(messages) > 2 else ""
    )
    k = len(f.failed)
    failed_text = f"{k} case{'' if k == 1 else 's'} failed: {errors}"
    if v.outcome is Outcome.CONTRADICTED:
        evidence = f"{judged.evidence.rstrip('.')}; also {failed_text}" if judged.evidence else failed_text
        return replace(judged, evidence=evidence)
    cases = f.judged.cases if f.judged.outcome in JUDGED else 0
    before = f"{judged.label} {judged.key_figure}".strip()
    return Wording(
        v.outcome,
        f"{k} failed; on the {num_cases(cases)} judged: {before}" if cases else f"{k} failed; none judged",
        judged.condition or "the claim's condition over every case of the task",
        judged.evidence or judged.reason,
        v.cases,
        interval=f"{failed_text}. Judged without them: {before}",
        beside=judged.beside,
        parts=judged.parts,
        decider=judged.decider,
    )


def num_cases(n: int | None) -> str:
    return f"{n or 0} case{'' if n == 1 else 's'}"


def combine(outcomes: list[Outcome]) -> Outcome:
    """Several judged parts of one claim, by the decision core's rule (reports/decision.py combine):
    CONTRADICTED if any part is, SUPPORTED if all are, else INCONCLUSIVE. N/A and ABSENT parts do not
    vote (the caller says which they were)."""
    votes = [decision.Outcome(o.value) for o in outcomes if o in JUDGED]
    if not votes:
        raise ValueError("no judged part to combine")
    return Outcome(decision.combine(votes).value)


# Worst first: where one claim has several verdicts in one place (judged twice on a device), the worst stands.
SEVERITY = {Outcome.CONTRADICTED: 0, Outcome.INCONCLUSIVE: 1, Outcome.SUPPORTED: 2, Outcome.ABSENT: 3, Outcome.NA: 4}


def group_outcome(outcomes: list[Outcome]) -> Outcome:
    """One outcome for a claim judged once per member, over its members (the matrix cell that groups
    them): combine over the judged members; ABSENT when every member is ABSENT, else N/A, when none
    was judged."""
    if any(o in JUDGED for o in outcomes):
        return combine(outcomes)
    return Outcome.ABSENT if outcomes and all(o is Outcome.ABSENT for o in outcomes) else Outcome.NA


def all_pass(passed: int, cases: int) -> Outcome:
    """SUPPORTED when every case passes, CONTRADICTED otherwise; N/A over zero cases."""
    if cases == 0:
        return Outcome.NA
    return Outcome.SUPPORTED if passed == cases else Outcome.CONTRADICTED


# ---- the figures of a verdict that judged nothing, and their words
@dataclass(frozen=True)
class NotApplicable:
    """An N/A verdict's figures: why the claim cannot be tested here, from the data (a skip message)
    or the claim's own words; key_figure where the matrix cell says less than the whole reason."""

    reason: str
    key_figure: str = ""


@dataclass(frozen=True)
class Untestable:
    """N/A: nothing of the claim could run on this device. what: what is missing; reasons: the
    device's own (its skip messages, 'n/a on DEVICE: why'), or what was measured of the task."""

    what: str
    reasons: tuple[str | NothingMeasured, ...]
    key_figure: str


@dataclass(frozen=True)
class NothingMeasured:
    """N/A: no case of the task ran: its cases' skip messages (e.g. "n/a on torch: no tile size"),
    or none at all."""

    prefix: str
    skipped: int
    messages: tuple[str, ...]


def nothing_measured(benchmarks_under_prefix: list[dict], prefix: str) -> NothingMeasured:
    skipped = [b for b in benchmarks_under_prefix if b.get("error_occurred")]
    return NothingMeasured(prefix, len(skipped), tuple(dict.fromkeys(b.get("error_message", "?") for b in skipped)))


def short(text: str, words: int = 8) -> str:
    w = text.split()
    return " ".join(w[:words]) + (" …" if len(w) > words else "")


def nothing_measured_text(figures: NothingMeasured) -> str:
    name = figures.prefix.rstrip("/")
    if not figures.skipped:
        return f"no {name} benchmark in this run"
    messages = figures.messages
    return (
        f"all {figures.skipped} {name} cases skipped: "
        + "; ".join(messages[:2])
        + (f" (and {len(messages) - 2} other reasons)" if len(messages) > 2 else "")
    )


def na_wording(figures) -> Wording | None:
    """The words of the shared N/A figures; None for a family's own."""
    if isinstance(figures, NotApplicable):
        return Wording(Outcome.NA, figures.key_figure or short(figures.reason), reason=figures.reason)
    if isinstance(figures, Untestable):
        texts = [r if isinstance(r, str) else nothing_measured_text(r) for r in figures.reasons]
        reason = "; ".join(texts) if texts else "no row of this claim ran on this device"
        return Wording(Outcome.NA, figures.key_figure, reason=f"Not testable here: {figures.what}. Reason: {reason}")
    if isinstance(figures, NothingMeasured):
        reason = nothing_measured_text(figures)
        return Wording(Outcome.NA, short(reason), reason=reason)
    return None


def not_applicable(claim: str, reason: str, key_figure: str = "", member: str | None = None) -> Verdict:
    return Verdict(claim, Outcome.NA, NotApplicable(reason, key_figure), member=member)


# ---- what a claim is
@dataclass(frozen=True)
class Claim:
    """A claim the report judges. id: how the report, the matrix, the thresholds and the gate name it
    (never derived from its words); statement: the claim in words, for a claim judged once per member
    (a chain, a dtype, a kernel) the words of the matrix row its members share on several devices;
    noun: what its members are, where the row names too many of them."""

    id: str
    statement: str
    noun: str = ""


@dataclass(frozen=True)
class Task:
    """A task of the plan: its section, the suite whose results it reads, and its title. A task whose
    claims gave no verdict (not run) still has its row in the matrix, named by its id."""

    id: str
    title: str
    suite: str

    @property
    def subject(self) -> str:
        """The title without the task's id: the words of its row when no claim of it was judged."""
        return self.title.split(" — ", 1)[1]
