"""The gate's checks (tools/thresholds.json "checks"), evaluated on a results directory: a counter of
every matching benchmark, a ratio of two benchmarks' fields, or the claim's own verdicts (each member's
outcome other than the one the check excludes: B's chains, decided by reports/decision.py as the
report decides them). tools/gate prints the rows; each check is filed under the claim it belongs to."""

from __future__ import annotations

import re

from reports import claims
from reports.claims.thresholds import OPS
from reports.claims.verdict import Outcome
from reports.results import InputError, Results, plain


def field_value(row: dict, name: str):
    """A benchmark's field; a rate (`*_per_second`) per wall-clock second, as the report shows it:
    Google Benchmark divides by CPU time unless the benchmark uses real or manual time."""
    value = row.get(name)
    if value is None or not name.endswith("_per_second"):
        return value
    if row.get("run_name", row["name"]).endswith(("/real_time", "/manual_time")) or not row.get("real_time"):
        return value
    return value * row["cpu_time"] / row["real_time"]


def _matching(run: dict, pattern: str) -> list[dict]:
    return [r for r in plain(run["benchmarks"]) if re.search(pattern, r["name"]) and not r.get("error_occurred")]


def evaluate_check(check: dict, results: Results, device: str) -> list[tuple[str, float | None, bool, str]]:
    """The gate's rows (subject, value, passed, note) for one check on one device."""
    if "verdict" not in check and check.get("op") not in OPS:
        raise InputError(f"thresholds: check '{check['name']}' has unknown op {check['op']!r}")
    suite = check["suite"]
    result = results.get(suite, device)
    if result is None:
        reason = next((r for s, d, r in results.not_run() if (s, d) == (suite, device)), "")
        return [(f"{suite} on {device}", None, False, "suite not run" + (f": {reason}" if reason else ""))]
    run = result.data
    if "verdict" in check:
        return _evaluate_verdict_check(check, result)
    compare = OPS[check["op"]]
    if "counter" in check:
        rows = []
        benches = _matching(run, check["benchmark"])
        if not benches:
            return [(check["benchmark"], None, False, "no benchmark matches")]
        for row in benches:
            value = row.get(check["counter"])
            if value is None:
                rows.append((row["name"], None, False, f"no counter {check['counter']}"))
            else:
                rows.append((row["name"], value, bool(compare(value, check["value"])), ""))
        return rows
    num = _matching(run, check["ratio"]["numerator"]["benchmark"])
    den = _matching(run, check["ratio"]["denominator"]["benchmark"])
    same = check["ratio"].get("same_counter")  # e.g. "threads": the copy on as many threads as the comparison
    if same and num:
        den = [d for d in den if d.get(same, 1) == num[0].get(same, 1)]
    # e.g. "threads": the fastest copy on at most as many threads (one on more threads that ran slower
    # was held back by other work), as the report's section S sets it
    at_most = check["ratio"].get("at_most_counter")
    if at_most and num:
        den = [d for d in den if d.get(at_most, 1) <= num[0].get(at_most, 1)]
        den.sort(key=lambda d: -(field_value(d, check["ratio"]["denominator"]["field"]) or 0))
    if not num or not den:
        return [(suite, None, False, "ratio operands missing")]
    n = field_value(num[0], check["ratio"]["numerator"]["field"])
    d = field_value(den[0], check["ratio"]["denominator"]["field"])
    if n is None or d in (None, 0):
        return [(num[0]["name"], None, False, "ratio field missing or zero")]
    value = n / d
    subject = f"{num[0]['name']} / {den[0]['name']}"
    return [(subject, value, bool(compare(value, check["value"])), "")]


def _evaluate_verdict_check(check: dict, result) -> list[tuple[str, float | None, bool, str]]:
    """A check on the claim's verdicts as the report decides them: one row per verdict (per member,
    B's chains), passing unless its outcome is the one the check excludes; an N/A verdict passes,
    naming why."""
    family = claims.family(check["claim"])
    excluded = Outcome(check["verdict"]["not"])
    rows = []
    verdicts = [v for v in family.verdicts(family.facts(result)) if v.claim == check["claim"]]
    if all(v.outcome is Outcome.NA and v.member is None for v in verdicts):
        # nothing of the claim ran: a gate check that matches nothing fails, as a counter check does
        return [(check["benchmark"], None, False, "no benchmark matches")]
    for v in verdicts:
        shown = family.words(v)
        subject = f"{v.claim} {v.member}" if v.member else v.claim
        if v.outcome is Outcome.NA:
            rows.append((subject, None, True, "n/a: " + shown.reason))
            continue
        rows.append((subject, None, v.outcome is not excluded, f"{v.label}: {shown.key_figure}"))
    return rows or [(check["benchmark"], None, False, "no benchmark matches")]
