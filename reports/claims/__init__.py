"""The claims fusebench judges: one module per claim family, a task of the plan (a, b, c1, c2, c3, d,
e, s, engine). Each module owns

  TASK                 its task: id, section title, the suite whose results it reads;
  CLAIMS               its claim ids and statements (id -> Claim): how the report, the matrix, the
                       thresholds and the gate name a claim, never derived from its words;
  facts(result)        a typed value read from one suite's results on one device;
  decide(facts)        a Verdict: the outcome, the cases judged and the figures that decided, no
                       words (a family with several claims or members: one decide per claim, and
                       verdicts(facts) lists them all in the section's order);
  statement(verdict), words(verdict)
                       what a reader sees: the claim, and the verdict's Wording (key figure,
                       condition, facts, interval or reason), rendered from its figures.

Thresholds live in tools/thresholds.json and a claim reads its own by id (thresholds.of). The gate
applies the checks (checks.evaluate_check). The vocabulary (Outcome, Verdict, Wording) is
verdict.py's. Adding a claim: its id and statement in its family's CLAIMS, its decision, its words,
and a gate check, if any, filed under its id."""

from __future__ import annotations

from types import ModuleType

from reports.claims import a, b, c1, c2, c3, d, e, engine, s
from reports.claims.verdict import Claim, FailedCases, Outcome, Task, Verdict, Wording, failed_wording

FAMILIES: tuple[ModuleType, ...] = (a, b, c1, c2, c3, d, e, s, engine)  # the plan's order: the report's sections


def _owners() -> dict[str, ModuleType]:
    """claim or task id -> the one module that owns it."""
    out: dict[str, ModuleType] = {}
    for family in FAMILIES:
        for id_ in {family.TASK.id, *family.CLAIMS}:
            if out.get(id_, family) is not family:
                raise ValueError(f"claim id {id_!r} is owned by {out[id_].__name__} and {family.__name__}")
            out[id_] = family
    return out


OWNERS = _owners()


def family(claim: str) -> ModuleType:
    """The module that owns a claim (or task) id."""
    return OWNERS[claim]


def claim(claim_id: str) -> Claim:
    return family(claim_id).CLAIMS[claim_id]


def task(task_id: str) -> Task:
    return family(task_id).TASK


def words(v: Verdict) -> Wording:
    if isinstance(v.figures, FailedCases):
        return failed_wording(v, words(v.figures.judged))
    return family(v.claim).words(v)


def statement(v: Verdict) -> str:
    return family(v.claim).statement(v)


__all__ = [
    "FAMILIES",
    "Claim",
    "Outcome",
    "Task",
    "Verdict",
    "Wording",
    "claim",
    "family",
    "statement",
    "task",
    "words",
]
