"""Task D: pure data movement (transpose, concat, slice, broadcast, promotion chains) is bit-identical
between eager and fused execution (plan §2). Bit equality is the criterion (the gate's check); each
mismatch's evidence may carry its attribution, the mechanism whose switch to eager's behaviour makes
fused bit-equal (found as for task B)."""

from __future__ import annotations

from dataclasses import dataclass

from reports.claims import thresholds
from reports.claims.verdict import (
    Claim,
    NotApplicable,
    NothingMeasured,
    Outcome,
    Task,
    Verdict,
    Wording,
    all_pass,
    na_wording,
    nothing_measured,
)
from reports.fusion_switches import mechanism_text
from reports.numbers import num
from reports.results import SuiteResult, benchmarks, evidence_of, rows

TASK = Task("D", "D — pure data movement (claim §2)", "data_movement")
CLAIMS = {"D": Claim("D", "pure data movement is bit-identical between eager and fused")}


# ---- facts
@dataclass(frozen=True)
class Facts:
    """cases: every D benchmark that ran (axes, row); evidence: a mismatching benchmark's name -> its
    evidence file ({} where it has none)."""

    cases: tuple[tuple[dict, dict], ...]
    evidence: dict[str, dict]
    nothing: NothingMeasured | None = None


def facts(result: SuiteResult) -> Facts:
    run = result.data
    ran = tuple(rows(run, "D/"))
    mismatches = [b for _, b in ran if b["bit_equal"] != 1]
    return Facts(
        ran,
        {b["name"]: evidence_of(result, b["name"]) or {} for b in mismatches},
        None if ran else nothing_measured(benchmarks(run, "D/"), "D/"),
    )


def mechanisms(facts: Facts) -> dict[str, str]:
    """A mismatch's name -> what its attribution found, where its evidence has one."""
    return {name: mechanism_text(e) for name, e in facts.evidence.items() if "attribution" in e}


# ---- decision
@dataclass(frozen=True)
class Figures:
    """The gate's bit-equality check; how many cases; each mismatch (name, elements that differ, the
    mechanism its attribution found or None)."""

    check: dict
    cases: int
    mismatches: tuple[tuple[str, float | None, str | None], ...]


def decide(facts: Facts) -> Verdict:
    if facts.nothing is not None:
        return Verdict("D", Outcome.NA, facts.nothing)
    check = thresholds.of("D").check()
    found = mechanisms(facts)
    mismatches = tuple(
        (b["name"], b.get("mismatches"), found.get(b["name"]))
        for _, b in facts.cases
        if thresholds.counter_passes(check, b) is not True
    )
    n = len(facts.cases)
    outcome = all_pass(n - len(mismatches), n)
    if outcome is Outcome.NA:
        return Verdict("D", outcome, NotApplicable("no D benchmark in this run", "0 cases"))
    return Verdict("D", outcome, Figures(check, n, mismatches), n)


def verdicts(facts: Facts) -> list[Verdict]:
    return [decide(facts)]


# ---- words
def statement(v: Verdict) -> str:
    return CLAIMS[v.claim].statement


def words(v: Verdict) -> Wording:
    shared = na_wording(v.figures)
    if shared is not None:
        return shared
    f: Figures = v.figures
    differs = [
        f"{name} differs in {num(count)} elements" + (f" (mechanism: {found})" if found else "")
        for name, count, found in f.mismatches
    ]
    return Wording(
        v.outcome,
        f"{f.cases - len(f.mismatches)}/{f.cases} bit-equal",
        f"every subgraph × dtype × shape: {thresholds.check_text(f.check)}",
        "; ".join(differs) or "no exception",
        v.cases,
    )
