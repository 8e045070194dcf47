"""The claims fusebench judges, each defined once: what decides it, its threshold, and which condition
decided it. The report (reports/report.py) renders these verdicts; the gate (tools/gate.py) applies
the same checks to a results directory. Thresholds live in tools/thresholds.json, read here only.

Vocabulary (Outcome): a verdict is one of
  SUPPORTED     the data meet the claim's condition;
  CONTRADICTED  they violate it;
  INCONCLUSIVE  the data cannot tell (with the interval that straddles the threshold);
  ABSENT        the mechanism the claim is about does not occur on this device (with the evidence);
  N/A           the claim cannot be tested here (with the reason).
A verdict over zero cases is refused (Verdict raises): a claim with nothing to judge is N/A with the
reason, never SUPPORTED.

Adding a claim: write a function `decide_<claim>(...) -> Verdict` here that takes the figures it
needs (benchmark rows as dicts, per-set arrays), builds its verdict with `judged`, `not_applicable`
or `absent`, and names its threshold from `thresholds()`; the section calls it and renders what it
returns. A check the gate should enforce goes into tools/thresholds.json's "checks" with a "claim"
key naming the claim it belongs to.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import operator
import pathlib
import re
from dataclasses import dataclass, field

import numpy as np

from reports.bootstrap import Interval, paired_interval
from reports.numbers import num as _num
from reports.numbers import pct as _pct
from reports.numbers import signed_pct as _signed_pct
from reports.results import InputError, Results, axes, b_distribution, benchmarks, dump_dir, plain

THRESHOLDS = pathlib.Path(__file__).resolve().parents[1] / "tools" / "thresholds.json"


# ---- vocabulary
class Outcome(str, enum.Enum):
    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    INCONCLUSIVE = "inconclusive"
    ABSENT = "absent"
    NA = "n/a"

    @property
    def css(self) -> str:
        return {"n/a": "not-applicable"}.get(self.value, self.value)


JUDGED = (Outcome.SUPPORTED, Outcome.CONTRADICTED, Outcome.INCONCLUSIVE)


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict on one device.

    key_figure: a few words for the claims × devices matrix: the figure that decided;
    condition: what decides the claim, with its threshold ("fused − eager upper end ≤ 5 %");
    evidence: the facts the condition was applied to, as a sentence;
    cases: how many cases were judged (required for SUPPORTED / CONTRADICTED / INCONCLUSIVE, > 0);
    interval: for INCONCLUSIVE, the interval that straddles the threshold, as text;
    reason: for ABSENT (its evidence) and N/A (why it cannot be tested)."""

    outcome: Outcome
    key_figure: str
    condition: str = ""
    evidence: str = ""
    cases: int | None = None
    interval: str = ""
    reason: str = ""
    beside: list[tuple[str, Verdict]] = field(default_factory=list)  # other rules' outcomes, shown with it
    parts: list[tuple[str, Verdict]] = field(default_factory=list)  # the judged parts it combines, for tables

    def __post_init__(self):
        if self.outcome in JUDGED:
            if not self.cases or self.cases <= 0:
                raise ValueError(
                    f"a {self.outcome.value} verdict over {self.cases or 0} cases "
                    f"('{self.key_figure}'): a claim with nothing to judge is N/A with the reason"
                )
            if not self.condition:
                raise ValueError(f"a {self.outcome.value} verdict without the condition that decided it")
        if self.outcome is Outcome.INCONCLUSIVE and not self.interval:
            raise ValueError("an INCONCLUSIVE verdict without the interval (or spread) that left it undecided")
        if self.outcome in (Outcome.ABSENT, Outcome.NA) and not self.reason:
            raise ValueError(
                f"an {self.outcome.value} verdict without its {'evidence' if self.outcome is Outcome.ABSENT else 'reason'}"
            )

    @property
    def label(self) -> str:
        return self.outcome.value.upper()

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


def judged(
    passed: int, cases: int, key_figure: str, condition: str, evidence: str = "", *, na_reason: str = "nothing to judge"
) -> Verdict:
    """SUPPORTED when every case passes, CONTRADICTED otherwise; N/A (with na_reason) over zero cases."""
    if cases == 0:
        return not_applicable(na_reason, key_figure="0 cases")
    return Verdict(
        Outcome.SUPPORTED if passed == cases else Outcome.CONTRADICTED, key_figure, condition, evidence, cases
    )


def not_applicable(reason: str, key_figure: str = "") -> Verdict:
    return Verdict(Outcome.NA, key_figure or _short(reason), reason=reason)


def absent(evidence: str, key_figure: str) -> Verdict:
    return Verdict(Outcome.ABSENT, key_figure, reason=evidence)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _short(text: str, words: int = 8) -> str:
    w = text.split()
    return " ".join(w[:words]) + (" …" if len(w) > words else "")


def combine(verdicts: list[Verdict]) -> Outcome:
    """Several judged parts of one claim: CONTRADICTED if any part is, SUPPORTED if all are, else
    INCONCLUSIVE. N/A and ABSENT parts do not vote (the caller says which they were)."""
    votes = [v.outcome for v in verdicts if v.outcome in JUDGED]
    if not votes:
        raise ValueError("no judged part to combine")
    if Outcome.CONTRADICTED in votes:
        return Outcome.CONTRADICTED
    if all(o is Outcome.SUPPORTED for o in votes):
        return Outcome.SUPPORTED
    return Outcome.INCONCLUSIVE


# ---- thresholds and the gate's checks
@functools.lru_cache(maxsize=4)
def _load(path: str) -> dict:
    try:
        return json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: cannot read the thresholds ({e})") from e


def thresholds(path: str | pathlib.Path | None = None) -> dict:
    return _load(str(path or THRESHOLDS))


def checks(path: str | pathlib.Path | None = None) -> list[dict]:
    try:
        return thresholds(path)["checks"]
    except KeyError as e:
        raise InputError(f"{path or THRESHOLDS}: cannot read the thresholds (no {e})") from e


def claim_checks(claim: str, path=None) -> list[dict]:
    """The gate's checks that belong to one claim (their "claim" key)."""
    return [c for c in checks(path) if c.get("claim") == claim]


OPS = {"==": operator.eq, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def field_value(b: dict, name: str):
    """A benchmark's field; a rate (`*_per_second`) per wall-clock second, as the report shows it:
    Google Benchmark divides by CPU time unless the benchmark uses real or manual time."""
    value = b.get(name)
    if value is None or not name.endswith("_per_second"):
        return value
    if b.get("run_name", b["name"]).endswith(("/real_time", "/manual_time")) or not b.get("real_time"):
        return value
    return value * b["cpu_time"] / b["real_time"]


def counter_passes(check: dict, b: dict) -> bool | None:
    """Whether one benchmark row passes a counter check; None when the row lacks the counter."""
    value = b.get(check["counter"])
    return None if value is None else bool(OPS[check["op"]](value, check["value"]))


def check_text(check: dict) -> str:
    return f"{check['counter']} {check['op']} {check['value']}"


def threshold_text(check: dict) -> str:
    """The threshold as the gate prints it."""
    if "bootstrap" in check:
        return f"not {check['bootstrap']['not']}"
    return f"{check['op']} {check['value']}"


def _matching(run: dict, pattern: str) -> list[dict]:
    return [b for b in plain(run["benchmarks"]) if re.search(pattern, b["name"]) and not b.get("error_occurred")]


def evaluate_check(check: dict, results: Results, device: str) -> list[tuple[str, float | None, bool, str]]:
    """The gate's rows (subject, value, passed, note) for one check on one device."""
    if "bootstrap" not in check and check.get("op") not in OPS:
        raise InputError(f"thresholds: check '{check['name']}' has unknown op {check['op']!r}")
    suite = check["suite"]
    result = results.get(suite, device)
    if result is None:
        reason = next((r for s, d, r in results.not_run() if (s, d) == (suite, device)), "")
        return [(f"{suite} on {device}", None, False, "suite not run" + (f": {reason}" if reason else ""))]
    run = result.data
    if "bootstrap" in check:
        return _evaluate_bootstrap_check(check, result)
    compare = OPS[check["op"]]
    if "counter" in check:
        rows = []
        benches = _matching(run, check["benchmark"])
        if not benches:
            return [(check["benchmark"], None, False, "no benchmark matches")]
        for b in benches:
            value = b.get(check["counter"])
            if value is None:
                rows.append((b["name"], None, False, f"no counter {check['counter']}"))
            else:
                rows.append((b["name"], value, bool(compare(value, check["value"])), ""))
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
    isa = check.get("measured_with_isa")
    machine_isa = str(run.get("context", {}).get("cpu_isa", ""))
    if isa and isa not in machine_isa.split():
        # A regression floor holds on the instruction set it was measured with; elsewhere the
        # figure is shown (and judged as a claim in the report), not gated.
        return [(subject, value, True, f"n/a: a floor measured with {isa}; this machine's ISA is '{machine_isa}'")]
    return [(subject, value, bool(compare(value, check["value"])), "")]


def _evaluate_bootstrap_check(check: dict, result) -> list[tuple[str, float | None, bool, str]]:
    """A claim decided by the paired bootstrap (task B): one row per chain; the value is the largest
    lower end of a deciding interval (CONTRADICTED when it exceeds that statistic's tolerance)."""
    rows = []
    for chain, cells in b_cells(result).items():
        v = decide_b(chain, cells)
        if v.outcome is Outcome.NA:
            rows.append((f"B {chain}", None, True, "n/a: " + v.reason))
            continue
        passed = v.outcome.value != check["bootstrap"]["not"]
        rows.append((f"B {chain}", None, passed, f"{v.label}: {v.key_figure}"))
    if not rows:
        return [(check["benchmark"], None, False, "no benchmark matches")]
    return rows


# ---- C1: tensor × scalar lowering
def decide_c1(fused: dict[tuple, dict]) -> Verdict:
    """fused: (dtype, scalar, shape, lowering) -> fused benchmark. The two lowerings must differ in the
    last bits wherever the scalar is inexact in f16/bf16, agree for the exact scalar 0.5 (the gate's
    check), and the fused kernels' instructions must differ (else the mechanism is absent)."""
    (control,) = claim_checks("C1")
    inexact = [(k, b) for k, b in fused.items() if k[3] == "immediate" and float(k[1]) != 0.5 and k[0] != "f32"]
    exact = [(k, b) for k, b in fused.items() if k[3] == "immediate" and float(k[1]) == 0.5]
    instr = [b for k, b in fused.items() if k[3] == "immediate" and b.get("instructions_differ", -1) >= 0]
    if not inexact:
        return not_applicable("no inexact-scalar f16/bf16 case in this run")
    differ = [k for k, b in inexact if b["frac_ulp0"] < 1]
    agree = [k for k, b in exact if counter_passes(control, b)]
    instr_differ = [b for b in instr if b["instructions_differ"] == 1]
    shares = [1 - b["frac_ulp0"] for _, b in inexact]
    f32_rows = [b for k, b in fused.items() if k[0] == "f32" and k[3] == "immediate"]
    condition = (
        f"the two lowerings differ (frac_ulp0 < 1) in every inexact f16/bf16 case, agree "
        f"({check_text(control)}) in every exact-scalar control (0.5), and the fused kernels' instructions differ"
    )
    evidence = (
        f"they differ in {len(differ)}/{len(inexact)} inexact cases ({_pct(min(shares))} to {_pct(max(shares))} of "
        f"elements 1 ULP or more apart), agree in {len(agree)}/{len(exact)} controls; instruction histograms differ "
        f"in {len(instr_differ)}/{len(instr)}"
        + (
            f". f32 agrees bit for bit in {sum(b['frac_ulp0'] == 1 for b in f32_rows)}/{len(f32_rows)} (the broadcast "
            "tensor holds the same fp32 constant the immediate uses)"
            if f32_rows
            else ""
        )
    )
    key = f"{len(differ)}/{len(inexact)} inexact f16/bf16 cases differ"
    if instr and not instr_differ and not differ:
        return absent(
            f"the two lowerings compile to the same instructions in all {len(instr)} cases and give the same "
            f"bits: {evidence}",
            key,
        )
    ok = len(differ) == len(inexact) and len(agree) == len(exact) and (not instr or len(instr_differ) == len(instr))
    return Verdict(
        Outcome.SUPPORTED if ok else Outcome.CONTRADICTED, key, condition, evidence, len(inexact) + len(exact)
    )


# ---- C2: reduction order
def decide_c2(rows: list[tuple[dict, dict]], shown: list[tuple], where: dict[tuple, float]) -> Verdict:
    """rows: every C2 benchmark; shown: the distinct (out, acc, shape) configurations; where: the max
    ULP between any two tiles of a configuration. The tile sums are deterministic functions of one
    seeded input, so "tiles differ" is an existence claim with no sampling noise: one configuration
    whose tiles differ by ≥ 1 ULP shows it (no interval is needed, the self-determinism check shows
    the figure repeats)."""
    if not rows:
        return not_applicable("no C2 benchmark in this run (the device exposes no tile size)")
    (det_check,) = claim_checks("C2")
    nondeterministic = [b["name"] for _, b in rows if counter_passes(det_check, b) is not True]
    differs = [c for c in shown if where[c] >= 1]
    describe = lambda cs: (
        ", ".join(
            f"out {o}/acc {a}/{sh}" + (f" (up to {_num(where[(o, a, sh)])} ULP)" if where[(o, a, sh)] else "")
            for o, a, sh in cs
        )
        or "none"
    )
    condition = (
        f"every configuration self-deterministic ({check_text(det_check)}, repeated runs of one tile) and "
        "tiles differ by ≥ 1 ULP in at least one configuration (a deterministic sum: one difference is proof)"
    )
    evidence = (
        f"self-deterministic in {len(rows) - len(nondeterministic)}/{len(rows)}; tiles differ in "
        f"{describe(differs)}; every tile agrees at 0 ULP in {describe([c for c in shown if where[c] == 0])}"
    )
    ok = not nondeterministic and bool(differs)
    return Verdict(
        Outcome.SUPPORTED if ok else Outcome.CONTRADICTED,
        f"tiles differ in {len(differs)}/{len(shown)} configs; {len(rows) - len(nondeterministic)}/{len(rows)} "
        "self-deterministic",
        condition,
        evidence,
        len(rows),
    )


# ---- C3: iterative approximations
def decide_c3(series: list[tuple[str, dict[int, float]]], seeds_differ: list[bool], ieee_text: str) -> Verdict:
    """series: (name, iterations -> P99 ULP) for each op × dtype × Newton seed with 0, 1 and 3
    iterations; seeds_differ: whether each 0-iteration seed differs from the IEEE path."""
    if not series:
        return not_applicable("no Newton series (0, 1, 3 iterations) in this run")
    failing = [
        f"{name}: P99 {_num(p[0])} → {_num(p[1])} → {_num(p[3])} ULP"
        for name, p in series
        if not (p[1] < p[0] and p[3] <= p[1])
    ]
    improving = len(series) - len(failing)
    ok = not failing and all(seeds_differ)
    return Verdict(
        Outcome.SUPPORTED if ok else Outcome.CONTRADICTED,
        f"{improving}/{len(series)} series improve",
        "the P99 error falls from 0 to 1 iteration and does not rise at 3 in every series, and every "
        "0-iteration seed differs from the IEEE path",
        f"{improving}/{len(series)} series improve"
        + (f" (not: {'; '.join(failing)})" if failing else "")
        + f"; the seeds differ from IEEE in {sum(seeds_differ)}/{len(seeds_differ)}. "
        + ieee_text,
        len(series),
    )


# ---- D: pure data movement
def decide_d(rows: list[tuple[dict, dict]], mechanisms: dict[str, str] | None = None) -> Verdict:
    """mechanisms: benchmark name -> what its attribution found ("vectorised code over the whole graph"),
    said beside each case that differs."""
    (bit_check,) = claim_checks("D")
    counter = [b for _, b in rows if counter_passes(bit_check, b) is not True]

    def differs(b: dict) -> str:
        found = (mechanisms or {}).get(b["name"])
        return f"{b['name']} differs in {_num(b.get('mismatches'))} elements" + (
            f" (mechanism: {found})" if found else ""
        )

    return judged(
        len(rows) - len(counter),
        len(rows),
        f"{len(rows) - len(counter)}/{len(rows)} bit-equal",
        f"every subgraph × dtype × shape: {check_text(bit_check)}",
        "; ".join(differs(b) for b in counter) or "no exception",
        na_reason="no D benchmark in this run",
    )


# ---- B: eager vs fused accumulated error
PER_SET_SCHEMA = "fusebench.B.per_set/1"
# the flat per-set pairs of dumps written before the per_set block (fused_set_max_ulp, ...)
_LEGACY_PER_SET_NAMES = {"max_ulp": "ulp_max", "p99_ulp": "ulp_p99"}


@dataclass
class BCell:
    """One chain × dtype × distribution of task B: the suite's pooled row, the per-set arrays of every
    statistic its dump carries (column name -> (fused, eager), NaN where a set has no finite figure),
    and per set whether fused and eager are allclose at 1e-4 (torch's precheck), when the dump says."""

    dtype: str
    dist: str
    row: dict
    per_set: dict[str, tuple[np.ndarray, np.ndarray]]
    allclose: np.ndarray | None = None


def b_cells(result) -> dict[str, list[BCell]]:
    """chain -> its cells, from the suite's rows and its evidence files (the report and the gate read
    task B through this one function)."""
    evidence = {}
    for path in sorted(dump_dir(result).glob("B_*.json")):
        e = json.loads(path.read_text())
        e["_path"] = str(path)
        evidence[(e["chain"], e["dtype"], b_distribution(e["distribution"]))] = e
    out: dict[str, list[BCell]] = {}
    for b in benchmarks(result.data, "B/"):
        if b.get("error_occurred"):
            continue
        f = axes(result.data, b)
        e = evidence.get((f["chain"], f["dtype"], b_distribution(f["dist"])), {})
        out.setdefault(f["chain"], []).append(
            BCell(f["dtype"], f["dist"], b, per_set_statistics(e), per_set_allclose(e))
        )
    return out


def _floats(values: list) -> np.ndarray:
    return np.asarray([np.nan if v is None else v for v in values], dtype=float)


def _per_set_block(evidence: dict) -> dict | None:
    block = evidence.get("per_set")
    if block is None:
        return None
    if not isinstance(block, dict) or block.get("schema") != PER_SET_SCHEMA:
        where = evidence.get("_path", f"{evidence.get('chain')}/{evidence.get('dtype')}")
        got = block.get("schema") if isinstance(block, dict) else type(block).__name__
        raise ValueError(f"B evidence {where}: per_set schema {got!r}, this report reads {PER_SET_SCHEMA!r}")
    return block


def per_set_statistics(evidence: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every per-set statistic an evidence file carries, as column name -> (fused, eager): the columns
    of its per_set block (schema fusebench.B.per_set/1: ulp_p99, ulp_max, cond_p99, cond_max,
    msprobe's metrics, rmse_vs_fp64), and the flat pairs `fused_set_<name>` / `eager_set_<name>` of
    older dumps (max_ulp is ulp_max). Columns of unequal length are not a pair."""
    out = {}
    for key, fused in evidence.items():
        if key.startswith("fused_set_") and isinstance(fused, list):
            name = key.removeprefix("fused_set_")
            eager = evidence.get(f"eager_set_{name}")
            if isinstance(eager, list) and len(eager) == len(fused):
                out[_LEGACY_PER_SET_NAMES.get(name, name)] = (_floats(fused), _floats(eager))
    block = _per_set_block(evidence)
    if block:
        for name, fused in block.get("fused", {}).items():
            eager = block.get("eager", {}).get(name)
            if isinstance(fused, list) and isinstance(eager, list) and len(eager) == len(fused):
                out[name] = (_floats(fused), _floats(eager))
    return out


def per_set_allclose(evidence: dict) -> np.ndarray | None:
    block = _per_set_block(evidence)
    values = block.get("fused_allclose_eager_1e-4") if block else None
    return np.asarray(values, dtype=bool) if isinstance(values, list) else None


def b_config() -> dict:
    return thresholds()["B"]


def b_measures() -> dict[str, dict]:
    """measure -> its description (label, why), the deciding one first."""
    cfg = b_config()
    measures = cfg["measures"]
    deciding = cfg["deciding_measure"]
    return {deciding: measures[deciding], **{m: d for m, d in measures.items() if m != deciding}}


def b_interval(fused: np.ndarray, eager: np.ndarray, effect: str) -> Interval:
    cfg = b_config()
    return paired_interval(
        fused, eager, effect, resamples=cfg["resamples"], confidence=cfg["confidence"], seed=cfg["seed"]
    )


def _effect_text(effect: str, x: float) -> str:
    return _signed_pct(x) if effect == "relative" else (("+" if x >= 0 else "−") + _num(abs(x)))


def b_statistic_verdict(label: str, interval: Interval, tolerance: float, evidence: str = "") -> Verdict:
    """One statistic's verdict: SUPPORTED when the interval's upper end ≤ tolerance, CONTRADICTED
    when its lower end > tolerance, else INCONCLUSIVE with the sets that would decide it."""
    e = interval.effect
    shown = (
        f"{label} {_effect_text(e, interval.estimate)} [{_effect_text(e, interval.low)}, "
        f"{_effect_text(e, interval.high)}]"
    )
    if interval.low == interval.high == interval.estimate == 0:
        shown = f"{label}: fused = eager in all {interval.sets} sets"
    tol = _effect_text(e, tolerance)
    condition = f"95 % paired-bootstrap interval of fused − eager ({label}) upper end ≤ {tol}"
    if interval.high <= tolerance:
        identical = interval.low == interval.high == interval.estimate == 0
        return Verdict(
            Outcome.SUPPORTED, shown if identical else f"{shown} ≤ {tol}", condition, evidence, interval.sets
        )
    if interval.low > tolerance:
        return Verdict(Outcome.CONTRADICTED, f"{shown} > {tol}", condition, evidence, interval.sets)
    need = interval.sets_to_decide(tolerance)
    more = (
        "no number of sets decides it: the estimate equals the tolerance"
        if need is None or math.isinf(need)
        else f"about {_num(round(need))} sets would decide it at the observed effect (now {interval.sets})"
    )
    return Verdict(
        Outcome.INCONCLUSIVE,
        f"{shown} spans tolerance {tol}",
        condition,
        evidence,
        interval.sets,
        interval=f"{shown} straddles {tol}; {more}",
    )


def b_cell_verdicts(cell: BCell, measure: str | None = None) -> list[tuple[str, Verdict, float]]:
    """(statistic label, verdict, upper end − tolerance) for each statistic of one cell that its dump
    carries (of one measure, "ulp" or "conditioned", when given). Sets where either path has no finite
    figure (a conditioned error over a zero bound) are left out of the pairing, and the verdict says how many."""
    cfg = b_config()
    out = []
    for name, spec in cfg["statistics"].items():
        if name not in cell.per_set or (measure is not None and spec["measure"] != measure):
            continue
        fused, eager = cell.per_set[name]
        finite = np.isfinite(fused) & np.isfinite(eager)
        if not finite.any():
            continue
        left_out = int((~finite).sum())
        note = f"{left_out} of {fused.size} sets without a finite figure on one path, left out" if left_out else ""
        fused, eager = fused[finite], eager[finite]
        identical = bool(np.array_equal(fused, eager))
        if spec.get("relative_tolerance") is not None and (identical or eager.sum() > 0):
            i = (
                Interval("relative", 0.0, 0.0, 0.0, fused.size, cfg["resamples"])
                if identical
                else b_interval(fused, eager, "relative")
            )
            tol = spec["relative_tolerance"]
            out.append((spec["label"], b_statistic_verdict(spec["label"], i, tol, note), i.high - tol))
        if spec.get("share_worse_tolerance") is not None:
            label = f"sets worse ({spec['label']})"
            i, tol = b_interval(fused, eager, "share_worse"), spec["share_worse_tolerance"]
            out.append((label, b_statistic_verdict(label, i, tol, note), i.high - tol))
    return out


def b_plan_rule(cells: list[BCell]) -> Verdict:
    """The plan's literal rule: pooled ULP error of every f16/bf16 distribution, fused P99 ≤ eager P99
    and fused max ≤ eager max (no uncertainty)."""
    failed = []
    for c in cells:
        for stat, key in (("P99", "ulp_p99"), ("max", "ulp_max")):
            f, e = c.row[f"fused_{key}"], c.row[f"eager_{key}"]
            if f > e:
                failed.append(
                    f"{stat} {c.dtype}/{c.dist} fused {_num(f)} vs eager {_num(e)} ULP "
                    f"({_signed_pct(f / e - 1) if e else '+∞'})"
                )
    return judged(
        2 * len(cells) - len(failed),
        2 * len(cells),
        f"{len(failed)}/{2 * len(cells)} checks worse fused",
        "pooled fused P99 ≤ eager P99 and fused max ≤ eager max",
        ("worse fused: " + "; ".join(failed)) if failed else "fused ≤ eager in every check",
        na_reason="no f16/bf16 row",
    )


def torch_same_sets(cell: BCell) -> np.ndarray | None:
    """Per input set, torch._dynamo.utils.same(eager, fused, fp64_ref) as PyTorch's benchmarks apply
    it (torch 2.15): allclose(eager, fused, rtol = atol = 1e-4) passes; otherwise fused passes when
    rmse(fused, fp64) ≤ m · rmse(eager, fp64) + 1e-4 / 10, m = 3 for f16/bf16 results and 2 otherwise
    (torch also takes 3 below 1,000 elements; task B judges f16/bf16 only). None when the dump lacks
    the figures."""
    if cell.allclose is None or "rmse_vs_fp64" not in cell.per_set:
        return None
    fused, eager = cell.per_set["rmse_vs_fp64"]
    if not (cell.allclose.size == fused.size == eager.size):
        return None
    cfg = b_config()["torch_same"]
    m = cfg["multiplier_low_precision"] if cell.dtype in ("f16", "bf16") else cfg["multiplier"]
    with np.errstate(invalid="ignore"):
        return cell.allclose | (fused <= m * eager + cfg["tol"] / 10)


def b_torch_same_rule(cells: list[BCell]) -> Verdict:
    """torch's accuracy rule for compiled models, set by set: the share of sets it fails."""
    failed, judged_sets, passed_sets, distributions = [], 0, 0, 0
    for c in cells:
        ok = torch_same_sets(c)
        if ok is None:
            continue
        distributions += 1
        judged_sets += ok.size
        passed_sets += int(ok.sum())
        if not ok.all():
            failed.append(f"{c.dtype}/{c.dist} {int((~ok).sum())}/{ok.size} sets")
    cfg = b_config()["torch_same"]
    return judged(
        passed_sets,
        judged_sets,
        f"{len(failed)} of {distributions} distributions with a failing set",
        f"per set, allclose(eager, fused, 1e-4) or rmse(fused, fp64) ≤ m·rmse(eager, fp64) + {_num(cfg['tol'] / 10)} "
        f"(m = {_num(cfg['multiplier_low_precision'])} for f16/bf16), as torch._dynamo.utils.same",
        ("failing: " + "; ".join(failed)) if failed else f"every one of {judged_sets} sets passes",
        na_reason="no per-set RMSE and allclose figures in the dump",
    )


def b_measure_verdict(chain: str, cells: list[BCell], measure: str) -> Verdict | None:
    """The chain's verdict on one error measure ("ulp" or "conditioned"): every f16/bf16 distribution
    and statistic of that measure judged by the paired bootstrap over input sets; CONTRADICTED if any
    part is, SUPPORTED if all are, else INCONCLUSIVE. None when the dump carries none of its statistics."""
    cfg = b_config()
    judged_parts = [
        (f"{c.dtype}/{c.dist} {label}", v, margin) for c in cells for label, v, margin in b_cell_verdicts(c, measure)
    ]
    if not judged_parts:
        return None
    parts = [(w, v) for w, v, _ in judged_parts]
    outcome = combine([v for _, v in parts])
    deciding = [(w, v) for w, v in parts if v.outcome is outcome]
    # the part shown in the matrix: for SUPPORTED the one closest to its tolerance, else the first
    # that reached the chain's outcome
    worst_where, worst = deciding[0]
    if outcome is Outcome.SUPPORTED:
        worst_where, worst, _ = max(judged_parts, key=lambda p: p[2])
    counts = {o: sum(v.outcome is o for _, v in parts) for o in JUDGED}
    tally = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n)
    specs = {n: s for n, s in cfg["statistics"].items() if s["measure"] == measure}
    present = {name for c in cells for name in c.per_set}
    stats = "; ".join(
        f"{s['label']}: mean over sets at most {_signed_pct(s['relative_tolerance'])}"
        + (
            f", share of sets worse fused minus share worse eager ≤ {_num(s['share_worse_tolerance'])}"
            if s.get("share_worse_tolerance") is not None
            else ""
        )
        for name, s in specs.items()
        if name in present
    )
    absent_stats = [s["label"] for name, s in specs.items() if name not in present]
    missing = [f"{c.dtype}/{c.dist}" for c in cells if not any(n in c.per_set for n in specs)]
    left_out = [f"{w.split(' ', 1)[0]}: {v.evidence}" for w, v in parts if v.evidence]
    condition = (
        f"{cfg['measures'][measure]['label']}: for every f16/bf16 input distribution and statistic, the "
        f"{_pct(cfg['confidence'], 2)} paired-bootstrap interval (over input sets, {_num(cfg['resamples'])} "
        f"resamples, seed {cfg['seed']}) of fused − eager: SUPPORTED when its upper end ≤ the tolerance, "
        f"CONTRADICTED when its lower end > it ({stats})"
    )
    evidence = (
        f"{len(parts)} parts: {tally}"
        + (f"; no per-set figures for {', '.join(missing)}" if missing else "")
        + (f"; not in this dump: {', '.join(absent_stats)}" if absent_stats else "")
        + (f"; {'; '.join(dict.fromkeys(left_out))}" if left_out else "")
    )
    interval = ""
    if outcome is Outcome.INCONCLUSIVE:
        interval = "; ".join(f"{w.split(' ', 1)[0]}: {v.interval}" for w, v in deciding)
    return Verdict(
        outcome,
        f"{worst_where.split(' ', 1)[0]} {worst.key_figure}",
        condition,
        evidence,
        sum(v.cases for _, v in parts),
        interval=interval,
        parts=parts,
    )


def decide_b(chain: str, cells: list[BCell]) -> Verdict:
    """Task B for one chain, decided on the thresholds' deciding measure (the conditioned error: see
    "measures" in tools/thresholds.json for why); the other measure's verdict, the plan's literal rule
    and torch's accuracy rule are shown beside it. Where the dump lacks the deciding measure the next
    one decides, and the verdict says so."""
    cells = [c for c in cells if c.dtype != "f32"]
    if not cells:
        return not_applicable(f"{chain}: only f32 rows (the floor control), no f16/bf16 distribution")
    plan = b_plan_rule(cells)
    torch_rule = b_torch_same_rule(cells)
    by_measure = {m: b_measure_verdict(chain, cells, m) for m in b_measures()}
    measured = [(m, v) for m, v in by_measure.items() if v is not None]
    rules = [("The plan's rule (pooled ULP, no uncertainty)", plan)]
    if torch_rule.outcome is not Outcome.NA:
        rules.append(("torch._dynamo.utils.same, per set", torch_rule))
    if not measured:
        v = not_applicable(
            f"no per-set figures in the dump for {', '.join(f'{c.dtype}/{c.dist}' for c in cells)} (tools/run writes "
            f"them); the plan's rule alone: {plan.label}",
            key_figure=f"no per-set dumps; plan's rule: {plan.label}",
        )
        return Verdict(v.outcome, v.key_figure, reason=v.reason, beside=rules)
    measures = b_measures()
    (measure, v), others = measured[0], measured[1:]
    deciding = next(iter(measures))
    decides = f"{_capital(measures[measure]['label'])} decides (why: the paragraph under the verdicts)"
    if measure != deciding:
        decides = f"The dump has no {measures[deciding]['label']} figures, so {measures[measure]['label']} decides"
    beside = [(f"{_capital(measures[m]['label'])} (not deciding)", o) for m, o in others] + rules
    # the other measure's outcome where it differs, so that the plan's rule beside it can be read
    differing = [f"{measures[m]['label'].split()[0]}: {o.label}" for m, o in others if o.outcome is not v.outcome]
    key = "; ".join([v.key_figure, *differing, f"plan's rule: {plan.label}"])
    return Verdict(
        v.outcome,
        key,
        f"{v.condition}. {decides}",
        v.evidence,
        v.cases,
        interval=v.interval,
        beside=beside,
        parts=v.parts,
    )


# ---- E: training alignment
def _t_quantile(p: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(p, dof))


def decide_e_gap(dtype: str, eager: dict[int, dict], fused: dict[int, dict], row: dict) -> Verdict:
    """The eager-vs-fused eval-loss gap against the eager seed-to-seed spread, at the final evaluation.
    A band that is the range of k eager seeds is itself uncertain: a fifth run from the same
    distribution as k = 3 seeds falls outside their range with probability 2/(k+1) = 50 %. So the
    band is the 95 % prediction interval for one more run from the seeds' mean and standard deviation
    (Student t with k−1 degrees of freedom: mean ± t·s·√(1 + 1/k)). CONTRADICTED when the fused
    final eval loss lies outside it, SUPPORTED when inside. The plan's literal rule (every row within
    the range of the seeds) is shown beside it."""
    literal = judged(
        int(row["rows"]) - int(row["excursions"]),
        int(row["rows"]),
        f"max gap {_num(row['max_gap_over_band'])}× the band",
        "every CSV row's gap within the range of the eager seeds",
        f"{int(row['excursions'])} of {int(row['rows'])} rows outside",
        na_reason="no CSV rows",
    )
    finals = []
    for runs in (eager, fused):
        vals = {}
        for seed, run in runs.items():
            losses = [x for x in run.get("eval_loss", []) if isinstance(x, float) and math.isfinite(x)]
            if losses:
                vals[seed] = losses[-1]
        finals.append(vals)
    eager_final, fused_final = finals
    if len(eager_final) < 2 or not fused_final:
        v = not_applicable(
            f"{dtype}: the prediction interval needs ≥ 2 eager seeds and a fused run with eval-loss CSVs "
            f"(found {len(eager_final)} and {len(fused_final)}); the plan's rule alone: {literal.label}",
            key_figure=f"no eval-loss CSVs; plan's rule: {literal.label}",
        )
        return Verdict(
            v.outcome, v.key_figure, reason=v.reason, beside=[("The plan's rule (range of the seeds)", literal)]
        )
    k = len(eager_final)
    values = np.asarray(list(eager_final.values()))
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    half = _t_quantile(0.975, k - 1) * sd * math.sqrt(1 + 1 / k)
    gaps = [f - mean for f in fused_final.values()]
    outside = [g for g in gaps if abs(g) > half]
    return Verdict(
        Outcome.CONTRADICTED if outside else Outcome.SUPPORTED,
        f"gap {_num(max(gaps, key=abs))} vs ±{_num(half)}",
        f"the fused final eval loss within the 95 % prediction interval of one more eager run from the {k} seeds "
        f"(mean ± t₀.₉₇₅,{k - 1}·s·√(1 + 1/{k}))",
        f"eager seeds mean {mean:.4f}, s {sd:.2e}, interval ±{half:.2e}; fused − mean "
        + ", ".join(f"{g:+.2e}" for g in gaps),
        len(gaps),
        beside=[("The plan's rule (range of the seeds)", literal)],
    )


def decide_e_speed(dtype: str, b: dict) -> Verdict:
    """Fused training steps faster: the interleaved ratio of medians beyond the A/A control's spread
    (two identical eager trainers measured the same way), and a one-sided sign test over the rounds."""
    rounds = int(b["timing_rounds"])
    fused_ms = b.get("fused_median_step_ms")
    if not (isinstance(fused_ms, (int, float)) and math.isfinite(fused_ms) and fused_ms > 0):
        # a skipped step (non-finite gradient, no optimizer update) is left out of the timing
        return not_applicable(
            f"no fused step time to compare: every fused step of the {rounds} interleaved rounds was skipped for "
            "a non-finite gradient (no optimizer update); the band verdict and the skipped steps say why",
            key_figure="every fused step skipped (non-finite)",
        )
    wins = round(b["fused_faster_rounds"] * rounds)
    p_faster, p_slower = _sign_test(wins, rounds), _sign_test(rounds - wins, rounds)
    speedup = b["fused_speedup"]
    control = b.get("control_ratio", 1.0) or 1.0
    noise = max(control, 1 / control)
    outcome = (
        Outcome.SUPPORTED
        if speedup > noise and p_faster < 0.05
        else Outcome.CONTRADICTED
        if speedup < 1 / noise and p_slower < 0.05
        else Outcome.INCONCLUSIVE
    )
    return Verdict(
        outcome,
        f"{_num(speedup)}×",
        f"speed-up beyond the A/A control's {100 * (noise - 1):.1f} % and a sign test p < 0.05",
        f"median step {_num(b['eager_median_step_ms'])} ms eager vs {_num(b['fused_median_step_ms'])} ms fused, "
        f"interleaved ({rounds} rounds of {int(b['timing_steps_per_turn'])} timed steps per mode): "
        f"{_num(speedup)}×; the fused turn was faster in {wins} of {rounds} rounds (sign test p = "
        f"{(p_faster if speedup >= 1 else p_slower):.2g}). A/A control: {_num(control)}×",
        rounds,
        interval=f"{_num(speedup)}× against the A/A spread 1 ± {100 * (noise - 1):.1f} %, sign test p = "
        f"{min(p_faster, p_slower):.2g}",
    )


def _sign_test(wins: int, rounds: int) -> float:
    """One-sided sign test: the chance of at least `wins` of `rounds` paired rounds going one way
    if neither mode were faster."""
    return sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds


def decide_e_control(b: dict) -> Verdict:
    (control,) = claim_checks("E-control")
    ok = counter_passes(control, b)
    return Verdict(
        Outcome.SUPPORTED if ok else Outcome.CONTRADICTED,
        f"max rel. diff {_num(b['max_rel_loss_diff'])}",
        check_text(control),
        f"max relative train-loss difference {b['max_rel_loss_diff']:.2e} over {int(b['steps'])} steps "
        f"(first step that differs at all: {int(b['first_step_differing'])}, -1 = none)",
        int(b["steps"]),
    )


# ---- S and Engine: speed targets (the issues' targets; the gate holds regression floors)
def targets(suite: str) -> dict[str, float]:
    """family -> target share of the copy bandwidth, from tools/thresholds.json "targets"."""
    return thresholds()["targets"][suite]


def decide_share_target(what: str, share: float, target: float, evidence: str) -> Verdict:
    return Verdict(
        Outcome.SUPPORTED if share >= target else Outcome.CONTRADICTED,
        f"{_pct(share)} of copy",
        f"{what} ≥ {_pct(target, 2)} of the memory copy measured in the same run",
        evidence,
        1,
    )


def yardsticks_suspect(what: str, share: float, target: float, evidence: str, why: str) -> Verdict:
    """A kernel measured faster than a copy of its bytes, or than its own arithmetic ceiling: the
    yardsticks ran under a different load than the kernel, so the share decides nothing."""
    return Verdict(
        Outcome.INCONCLUSIVE,
        f"{_pct(share)} of copy: yardsticks suspect",
        f"{what} ≥ {_pct(target, 2)} of the memory copy measured in the same run",
        evidence,
        1,
        interval=f"{why}, which a kernel that reads and writes its bytes cannot be; the machine's load changed "
        "between the measurements of this run. Rerun on a quiet machine, or with repetitions (full profile)",
    )


# ---- A, and what a framework device (torch[:cuda][/BACKEND], xla) can test of A, C1, C2, C3, Engine
# The fusebench engine (`cpu`) realises every knob; a framework device realises few, so a claim is
# tested the way the device allows, and a claim it cannot test reads N/A with the reason.
def is_framework(device: str) -> bool:
    """A device that runs a framework's own compiler (PyTorch's torch.compile, JAX's XLA)."""
    return device.split(":")[0].split("/")[0] in ("torch", "xla")


def na_reasons(benchmarks: list[dict]) -> list[str]:
    """The distinct reasons of rows the device skipped as not applicable ("n/a on DEVICE: why")."""
    reasons = []
    for b in benchmarks:
        message = b.get("error_message", "") if b.get("error_occurred") else ""
        m = re.match(r"n/a on \S+: (.*)", message)  # device names hold no spaces (torch:cuda/aot_eager)
        if m and m.group(1) not in reasons:
            reasons.append(m.group(1))
    return reasons


def _untestable(what: str, reasons: list[str], key_figure: str) -> Verdict:
    reason = "; ".join(reasons) if reasons else "no row of this claim ran on this device"
    return not_applicable(f"Not testable here: {what}. Reason: {reason}", key_figure=key_figure)


A_CONTROLS = {1: "FMA contraction flipped", 2: "per-op rounding flipped (XLA: xla_allow_excess_precision)"}


def a_config(axes_of_row: dict) -> str:
    """An A configuration as the report names it: "bf16, 1 thread"."""
    threads = axes_of_row["threads"]
    return f"{axes_of_row['dtype']}, {threads} thread{'' if str(threads) == '1' else 's'}"


def decide_a(rows: list[tuple[dict, dict]], refused: list[str] = (), not_in_profile: list[str] = ()) -> Verdict:
    """rows: (name fields, benchmark) of task A; refused: why the device skipped configurations;
    not_in_profile: the configurations this profile leaves out ("bf16, 1 thread"), named in the condition.
    A kernel is the same when its generated code is (the source with its compile command, or XLA's
    HLO without metadata) and so is its machine code where the device has any (.text); a binary
    differing only outside .text, where it names its cache directory, is reported as debug paths,
    not as another kernel. The output checks are the gate's (claim "A" in the thresholds)."""
    if not rows:
        return _untestable("no A configuration ran", list(refused), "no configuration")
    output_checks = [c for c in claim_checks("A") if c["counter"] in ("distinct_hashes", "max_ulp_vs_round1")]
    failures, notes, no_control, blind = [], [], [], []
    for f, b in rows:
        config = a_config(f)
        source_same = b.get("kernel_source_stable", b["kernel_hash_stable"]) == 1
        text = b.get("kernel_text_stable", -1)
        debug_only = b["kernel_hash_stable"] != 1 and source_same and text == 1
        if debug_only:
            mentions = b.get("artifact_cache_dir_mentions", -1)
            notes.append(
                f"{config}: the binaries differ outside their machine code (.text identical)"
                + (
                    f"; each names its cache directory {_num(mentions)} times in its debug sections (-g1)"
                    if mentions > 0
                    else ""
                )
            )
        checks_of_row = {check_text(c): counter_passes(c, b) is True for c in output_checks}
        checks_of_row.update(
            {
                "generated code stable": source_same,
                "machine code (.text) stable": text != 0,
                "binary stable or differing only in debug paths": b["kernel_hash_stable"] == 1 or debug_only,
            }
        )
        failures += [f"{config}: {what}" for what, ok in checks_of_row.items() if not ok]
        if b.get("control_artifact_differs", -1) == 1 and b.get("control_source_differs", -1) == 0:
            notes.append(
                f"{config}: the control changed only the compiled artifact's hash (XLA: the executable fingerprint, "
                "which covers the compile options), not the generated code"
                + (" nor the outputs" if b.get("negative_control_outputs_differ", -1) == 0 else "")
            )
        if b.get("negative_control_detected", -1) == -1:
            no_control.append(config)
        elif b["negative_control_detected"] != 1:
            blind.append(config)
    condition = (
        "in every dtype × threads configuration: "
        + ", ".join(check_text(c) for c in output_checks)
        + " between cold compiles in fresh processes, the same generated code and machine code (.text) where the "
        "device has any, the binary the same or differing only in debug paths; and the negative control, where the "
        "device realises one, changes the kernel"
        + (f" (not run in this profile: {', '.join(not_in_profile)})" if not_in_profile else "")
    )
    knob = {int(b.get("negative_control_knob", 1)) for _, b in rows} - {-1}
    control = (
        f"the negative control ({', '.join(A_CONTROLS.get(k, str(k)) for k in sorted(knob))}) changed the kernel "
        f"in {len(rows) - len(no_control) - len(blind)}/{len(rows) - len(no_control)} configurations"
        if knob
        else ""
    )
    if no_control:
        control += (
            ("; " if control else "") + f"no negative control in {len(no_control)}/{len(rows)} configurations: "
            "the device realises no option that changes the kernel"
        )
    if failures:
        return Verdict(
            Outcome.CONTRADICTED,
            f"{len(failures)} failed checks",
            condition,
            "Failed: " + "; ".join(failures),
            len(rows),
        )
    summary = (
        ("in the one configuration run" if len(rows) == 1 else f"in all {len(rows)} configurations")
        + ": 1 distinct output MD5, 0 ULP between cold compiles in fresh processes, "
        "the same generated code"
        + (
            " and machine code (.text)"
            if any(b.get("kernel_text_stable", -1) == 1 for _, b in rows)
            else " (no machine code to compare on this device)"
        )
    )
    if blind:
        return Verdict(
            Outcome.INCONCLUSIVE,
            f"control missed in {len(blind)}",
            condition,
            summary + (f"; {'; '.join(notes)}" if notes else ""),
            len(rows),
            interval=f"the negative control changed neither code nor artifact in {', '.join(blind)}, so the "
            "identity check could not have failed there",
        )
    return Verdict(
        Outcome.SUPPORTED,
        f"{len(rows)}/{len(rows)} configs"
        + (f" ({len(not_in_profile)} not in this profile)" if not_in_profile else "")
        + ": 1 hash, 0 ULP"
        + ("; no control" if len(no_control) == len(rows) else ""),
        condition,
        f"{summary}; {control}" + (f"; {'; '.join(notes)}" if notes else ""),
        len(rows),
    )


def c1_halves(eager: dict, fused: dict, inexact_keys: list) -> dict:
    """For the inexact f16/bf16 immediate-lowering keys: which cases' two lowerings differ in eager
    and in fused execution."""

    def differ(rows):
        return [k for k in inexact_keys if k in rows and rows[k]["frac_ulp0"] < 1]

    return {
        "eager": differ(eager),
        "fused": differ(fused),
        "eager_n": sum(k in eager for k in inexact_keys),
        "fused_n": sum(k in fused for k in inexact_keys),
    }


def decide_c1_framework(eager: dict, fused: dict, inexact_keys: list, evidence: dict | None) -> Verdict:
    """A framework's eager ops and its compiler each choose a lowering: the claim is judged in both,
    and the compiled half decides the cell (it is what fusion does); the generated code of the two
    lowerings is the evidence of what the compiler did. evidence: the f16 ×0.7 fused trace file."""
    h = c1_halves(eager, fused, inexact_keys)
    if not h["fused_n"]:
        return _untestable("no inexact f16/bf16 case ran fused", [], "no inexact case")
    shares = [1 - eager[k]["frac_ulp0"] for k in h["eager"]]
    eager_text = (
        (
            f"eager: the two lowerings differ in {len(h['eager'])}/{h['eager_n']} inexact f16/bf16 cases"
            + (f" ({_span(shares)} of elements)" if shares else "")
        )
        if h["eager_n"]
        else "eager: not run"
    )
    code = c1_code_note(evidence)
    folded = [
        k
        for k in inexact_keys
        if k in fused
        and fused[k]["frac_ulp0"] == 1
        and fused[k].get("control_input_tensor_vs_broadcast_frac_ulp0", 1) < 1
    ]
    fused_text = f"compiled: they differ in {len(h['fused'])}/{h['fused_n']}"
    if folded:
        fused_text += (
            f"; in {len(folded)} of the identical cases the scalar passed as an input tensor (which no compiler "
            "can fold) does differ, so the compiler folded the broadcast tensor into the same constant as the "
            "immediate"
        )
    figure = f"eager {len(h['eager'])}/{h['eager_n']}, compiled {len(h['fused'])}/{h['fused_n']} differ"
    figures = ("frac_ulp0", "ulp_max", "ulp_p99")
    if h["eager_n"] and all(
        k in eager and all(fused[k].get(c) == eager[k].get(c) for c in figures) for k in inexact_keys if k in fused
    ):
        # a backend that does not fuse (aot_eager): the compiled path is eager's, figure for figure
        figure = f"fused = eager; lowerings differ in {len(h['fused'])}/{h['fused_n']}"
    facts = f"{eager_text}; {fused_text}" + (f". {code.rstrip('.')}" if code else "")
    condition = (
        "the compiled half decides: the two lowerings differ (frac_ulp0 < 1) in every inexact f16/bf16 case run "
        "compiled; ABSENT where they differ in none"
    )
    if not h["fused"]:
        return absent(f"The compiled lowerings give the same bits in all {h['fused_n']} inexact cases: {facts}", figure)
    if len(h["fused"]) == h["fused_n"]:
        return Verdict(Outcome.SUPPORTED, figure, condition, facts, h["fused_n"])
    return Verdict(
        Outcome.INCONCLUSIVE,
        figure,
        condition,
        facts,
        h["fused_n"],
        interval=f"the compiled lowerings differ in {len(h['fused'])} of {h['fused_n']} inexact cases: "
        "neither all nor none",
    )


def _span(shares: list[float]) -> str:
    low, high = _pct(min(shares)), _pct(max(shares))
    return low if low == high else f"{low} to {high}"


def c1_code_note(evidence: dict | None) -> str:
    """What the generated code of the two lowerings shows: the same code or not, and the constant."""
    if not evidence:
        return ""
    a, b = evidence.get("immediate", {}), evidence.get("broadcast", {})
    if not a.get("source_sha256") or not b.get("source_sha256"):
        return ""
    same = a["source_sha256"] == b["source_sha256"]
    constants = sorted({c for side in (a, b) for c in _constants(side.get("evidence", {}))})
    return (
        f"Generated code (f16, ×0.7): {'identical' if same else 'different'} for the two lowerings (SHA-256 "
        f"{a['source_sha256'][:12]}{'' if same else ' vs ' + b['source_sha256'][:12]})"
        + (f"; constants in it: {', '.join(constants)}" if constants else "")
        + "."
    )


def _constants(evidence: dict) -> list[str]:
    """Scalar constants a kernel multiplies by: Inductor's `static_cast<float>(0.7)`, XLA's
    `f16[] constant(0.7002)`."""
    found = []
    for k in evidence.get("kernels", []):
        found += re.findall(
            r"static_cast<(?:float|double|at::Half|half|at::BFloat16)>\(([-0-9.e]+)\)", k.get("code", "")
        )
    found += [
        f"{t}[] {v}"
        for t, v in re.findall(r"\b(f16|bf16|f32)\[\] constant\(([-0-9.e]+)\)", evidence.get("optimized_hlo", ""))
    ]
    return list(dict.fromkeys(found))


def decide_c2_threads(threads_rows: list[tuple[dict, dict]], refused: list[str]) -> Verdict:
    """C2 where no reduction tile can be set: the thread count is the order knob a framework exposes
    (Inductor splits a long row between its OpenMP threads)."""
    if not threads_rows:
        return _untestable("neither a reduction tile nor a thread count can be set", refused, "no order knob")
    (det_check,) = claim_checks("C2")
    changed = [(f, b) for f, b in threads_rows if b["ulp_between_orders"] >= 1]
    deterministic = all(counter_passes(det_check, b) is True for _, b in threads_rows)
    describe = "; ".join(
        f"out {f['out']} {f['shape']}: {_num(b['ulp_between_orders'])} ULP, "
        f"{_pct(b['frac_differ_between_orders'])} of sums differ"
        for f, b in threads_rows
    )
    recompiled = [b for _, b in threads_rows if b.get("sources_differ", -1) == 1]
    figure = f"1 vs 2 threads differ in {len(changed)}/{len(threads_rows)}"
    facts = (
        f"the same sum at 1 and at 2 threads ({describe}); every order self-deterministic: "
        f"{'yes' if deterministic else 'no'}"
        + (
            f"; the thread count changed the generated code in {len(recompiled)}/{len(threads_rows)} (so the order "
            "knob reached the compiler" + (", and the sums stayed bit-identical" if not changed else "") + ")"
            if recompiled
            else ""
        )
        + ". The reduction tile cannot be set here"
        + (f" ({refused[0]})" if refused else "")
    )
    condition = (
        f"every order self-deterministic ({check_text(det_check)}) and the sums at 1 and 2 threads differ by ≥ 1 ULP "
        "in at least one case (ABSENT where they never do)"
    )
    if not deterministic:
        return Verdict(Outcome.CONTRADICTED, figure, condition, facts, len(threads_rows))
    if not changed:
        return absent(f"The thread count never changed a sum's bits: {facts}", figure)
    return Verdict(Outcome.SUPPORTED, figure, condition, facts, len(threads_rows))


def decide_c3_ieee(ieee_rows: list[tuple[dict, dict]], emitted: dict[str, str], refused: list[str]) -> Verdict:
    """C3 where no Newton-Raphson form can be set (a framework): whether the compiler replaces the
    IEEE operation, compiled against eager (bit for bit) and against the correctly rounded value.
    emitted: op -> what the generated code computes (c3_emitted)."""
    rows = [(f, b) for f, b in ieee_rows if "fused_vs_eager_frac_equal" in b]
    if not rows:
        return _untestable("no IEEE rsqrt/div row compared compiled with eager", refused, "no rsqrt/div row")
    differ = [(f, b) for f, b in rows if b["fused_vs_eager_frac_equal"] < 1]
    worse = [(f, b) for f, b in differ if b["frac_correctly_rounded"] < b["eager_frac_correctly_rounded"]]
    cases = "; ".join(
        f"{f['op']} {f['dtype']}: compiled = eager in {_pct(b['fused_vs_eager_frac_equal'])}, correctly rounded "
        f"{_pct(b['frac_correctly_rounded'])} (eager {_pct(b['eager_frac_correctly_rounded'])})"
        for f, b in rows
    )
    code = "; ".join(f"{op}: {text}" for op, text in emitted.items())
    figure = f"compiled = eager in {len(rows) - len(differ)}/{len(rows)}"
    facts = (
        cases
        + (f". What the compiler emitted: {code}" if code else "")
        + (f". Newton-Raphson forms: n/a ({refused[0]})" if refused else "")
    )
    condition = (
        "the compiler approximates where its rsqrt/div differs from eager's bit for bit and is less often correctly "
        "rounded (ABSENT where compiled = eager everywhere)"
    )
    if not differ:
        return absent(f"The compiled rsqrt/div equal eager's bit for bit: {facts}", figure + "; no approximation")
    if worse:
        return Verdict(Outcome.SUPPORTED, figure, condition, facts, len(rows))
    return Verdict(
        Outcome.INCONCLUSIVE,
        figure,
        condition,
        facts,
        len(rows),
        interval=f"compiled differs from eager in {len(differ)}/{len(rows)} but is no less often correctly rounded",
    )


def c3_emitted(evidence_by_op: dict[str, dict]) -> dict[str, str]:
    """op -> the operations the compiled kernel uses for it (from the generated C++ or the HLO)."""
    out = {}
    for op, evidence in evidence_by_op.items():
        text = " ".join(
            k.get("code", "") for t in evidence.get("fused_trace", []) for k in t.get("evidence", {}).get("kernels", [])
        )
        text += " ".join(t.get("evidence", {}).get("optimized_hlo", "") for t in evidence.get("fused_trace", []))
        # Inductor's C++ (`1 / std::sqrt(tmp0)`, `tmp0 / tmp1`, at::vec's `.rsqrt()`) or XLA's HLO
        # (`rsqrt(`, `sqrt(`, `divide(`); a division needs spaces around its slash (comments and
        # include paths have none)
        found = [
            name
            for name, pattern in (
                ("rsqrt", r"\brsqrt\("),
                ("sqrt", r"\bsqrt\("),
                ("reciprocal", r"\breciprocal\("),
                ("division", r"[\w)]\s+/\s+[\w:(]|\bdivide\("),
            )
            if re.search(pattern, text)
        ]
        if found:
            out[op] = ", ".join(found)
    return out


SPEEDUP_NOISE = 0.1  # one run of each on a shared machine: a ratio within 10 % of 1 is not read as faster or slower


def decide_speedup(family: str, eager: dict, fused: dict, copy_bw: float | None) -> Verdict:
    """A fuser's compiled kernel against its own eager ops, each also a share of the run's copy.
    Decided on the interleaved rounds where the run has them (the median per-round eager/fused time
    ratio and its distribution-free 95 % interval): SUPPORTED when the interval lies above 1,
    CONTRADICTED when below, INCONCLUSIVE when it holds 1. Older runs without them: one timed run of
    each, within SPEEDUP_NOISE of 1 not judged."""
    speedup = eager["real_time"] / fused["real_time"]
    shares = ""
    if copy_bw and "bytes_per_second" in fused and "bytes_per_second" in eager:
        shares = (
            f"; fused {_pct(fused['bytes_per_second'] / copy_bw)} of the copy, eager "
            f"{_pct(eager['bytes_per_second'] / copy_bw)}"
        )
    facts = (
        f"eager {_num(eager['real_time'])} {eager.get('time_unit', '')}, fused {_num(fused['real_time'])} "
        f"{fused.get('time_unit', '')} per run timed apart ({_num(speedup)}×){shares}"
    )
    rounds = int(fused.get("interleaved_rounds", 0))
    if rounds:
        median, lo, hi = (fused[f"interleaved_speedup{k}"] for k in ("", "_lo", "_hi"))
        wins = int(fused["interleaved_fused_wins"])
        figure = f"{_num(median)}× eager [{_num(lo)}, {_num(hi)}]"
        condition = (
            f"the 95 % interval of the median eager/fused time ratio over {rounds} interleaved rounds (one run of "
            "each per round, alternating order; sign-test order statistics) lies above 1 (below: CONTRADICTED)"
        )
        facts = (
            f"interleaved: fused faster in {wins} of {rounds} rounds, median ratio {_num(median)}× "
            f"[{_num(lo)}, {_num(hi)}]; {facts}"
        )
        if (lo > 1 and speedup < 1) or (hi < 1 and speedup > 1):
            # The timed-apart figure is the mean of a short loop of each path, the two loops taken
            # apart (on a framework device in the quick profile, a dozen runs each); the rounds pair
            # each eager run with a fused one, so a change of load hits both.
            runs = (
                f" over {_num(eager['iterations'])} eager and {_num(fused['iterations'])} fused runs"
                if ("iterations" in eager and "iterations" in fused)
                else ""
            )
            facts += (
                f". The two measurements disagree in direction ({_num(speedup)}× timed apart{runs}): the "
                "interleaved rounds decide, since each pairs an eager run with a fused one under the same load; "
                "repetitions (full profile) would show how far the timed-apart figure moves"
            )
        if lo > 1:
            return Verdict(Outcome.SUPPORTED, figure, condition, facts, rounds)
        if hi < 1:
            return Verdict(Outcome.CONTRADICTED, figure, condition, facts, rounds)
        return Verdict(
            Outcome.INCONCLUSIVE,
            figure,
            condition,
            facts,
            rounds,
            interval=f"the median ratio's 95 % interval [{_num(lo)}, {_num(hi)}] holds 1",
        )
    condition = f"fused {family}'s time per run more than {_pct(SPEEDUP_NOISE, 2)} below eager's (one run of each)"
    if abs(speedup - 1) < SPEEDUP_NOISE:
        return Verdict(
            Outcome.INCONCLUSIVE,
            f"{_num(speedup)}× eager",
            condition,
            facts,
            1,
            interval=f"{_num(speedup)}× is within {_pct(SPEEDUP_NOISE, 2)} of eager's time: not judged",
        )
    return Verdict(
        Outcome.SUPPORTED if speedup > 1 else Outcome.CONTRADICTED, f"{_num(speedup)}× eager", condition, facts, 1
    )


def not_this_devices_target(family: str, target: float) -> Verdict:
    return not_applicable(
        f"Not a claim about this device: the {_pct(target, 2)} target is fusebench's own engine's. This "
        f"device's fused {family} as a share of the copy is in the speed-up verdict and the table",
        key_figure="the target is the engine's own",
    )
