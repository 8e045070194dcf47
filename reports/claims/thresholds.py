"""The thresholds, one file (tools/thresholds.json, read by reports/decision.py), read by claim id: a claim reads its own entries
through `of(claim)` and no other's. Every entry names its claim: a gate check by its "claim" key, a
target share and a block of settings by the claim id they are filed under ("targets", and "B" at
the top level). "compare" is tools/compare's, not a claim's. The gate reads every check
(reports/claims/checks.py)."""

from __future__ import annotations

import operator
import pathlib
from dataclasses import dataclass

from reports import decision
from reports.results import InputError

THRESHOLDS = decision.thresholds_path()
NOT_CLAIMS = ("about", "compare", "checks", "targets")  # the top-level keys that are no claim's block


def load(path: str | pathlib.Path | None = None) -> dict:
    """The thresholds file, read by the decision core (reports/decision.py), the one reader of it."""
    try:
        return decision.load_thresholds(path)
    except decision.ThresholdsError as e:
        raise InputError(str(e)) from e


def checks(path: str | pathlib.Path | None = None) -> list[dict]:
    """Every gate check (tools/gate applies them all)."""
    try:
        return load(path)["checks"]
    except KeyError as e:
        raise InputError(f"{path or THRESHOLDS}: cannot read the thresholds (no {e})") from e


@dataclass(frozen=True)
class ClaimThresholds:
    """One claim's entries: its gate checks, its target shares (family -> share of the copy) and its
    block of settings, each empty where the claim has none."""

    claim: str
    checks: tuple[dict, ...]
    targets: dict
    settings: dict

    def check(self) -> dict:
        """The claim's one gate check (a claim with several reads `checks`)."""
        (only,) = self.checks
        return only


def of(claim: str, path: str | pathlib.Path | None = None) -> ClaimThresholds:
    t = load(path)
    return ClaimThresholds(
        claim,
        tuple(c for c in t.get("checks", []) if c.get("claim") == claim),
        t.get("targets", {}).get(claim, {}),
        t.get(claim, {}) if claim not in NOT_CLAIMS else {},
    )


def owners(path: str | pathlib.Path | None = None) -> list[tuple[str, str]]:
    """(entry, the claim id it is filed under) for every threshold entry: each check by its name, each
    target family, each block of settings."""
    t = load(path)
    out = [(f"checks: {c['name']}", c.get("claim", "")) for c in t.get("checks", [])]
    out += [
        (f"targets: {claim}.{family}", claim)
        for claim, shares in t.get("targets", {}).items()
        if claim != "about"
        for family in shares
    ]
    out += [(f"block: {key}", key) for key in t if key not in NOT_CLAIMS]
    return out


# ---- what a check says
OPS = {"==": operator.eq, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def counter_passes(check: dict, b: dict) -> bool | None:
    """Whether one benchmark row passes a counter check; None when the row lacks the counter."""
    value = b.get(check["counter"])
    return None if value is None else bool(OPS[check["op"]](value, check["value"]))


def check_text(check: dict) -> str:
    return f"{check['counter']} {check['op']} {check['value']}"


def threshold_text(check: dict) -> str:
    """The threshold as the gate prints it."""
    if "verdict" in check:
        return f"not {check['verdict']['not']}"
    return f"{check['op']} {check['value']}"
