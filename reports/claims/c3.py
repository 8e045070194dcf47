"""Task C3: iterative approximations (rsqrt, division from a seed refined by Newton-Raphson) differ
from the IEEE operations, and more iterations lower the error (plan §1.2 (4)).

Where no Newton-Raphson form can be set (a framework), the claim is whether the compiler replaces the
IEEE operation: compiled against eager (bit for bit) and against the correctly rounded value."""

from __future__ import annotations

import re
from dataclasses import dataclass

from reports.claims.verdict import (
    Claim,
    NotApplicable,
    NothingMeasured,
    Outcome,
    Task,
    Untestable,
    Verdict,
    Wording,
    na_wording,
    nothing_measured,
)
from reports.numbers import num, pct
from reports.results import SuiteResult, benchmarks, evidence, is_framework, na_reasons, rows

TASK = Task("C3", "C3 — rsqrt / division iteration count (claim §1.2 (4))", "approximations")
CLAIMS = {"C3": Claim("C3", "iterative approximations differ from IEEE, and more iterations lower the error")}
DTYPES = ("f16", "bf16", "f32")
OPS = ("rsqrt", "div")
NEWTON = ("newton-bittrick", "newton-hw")


# ---- facts
@dataclass(frozen=True)
class Facts:
    """series: (op dtype mode, iterations -> P99 ULP) for each op × dtype × Newton seed run at every
    iteration count; seeds_differ: whether each 0-iteration seed differs from the IEEE path; ieee:
    the IEEE rows (axes, row); emitted: op -> what the compiled kernel computes (a framework's
    generated code); refused: why the device skipped cases."""

    framework: bool
    newton: bool
    series: tuple[tuple[str, dict[int, float]], ...]
    seeds_differ: tuple[bool, ...]
    ieee: tuple[tuple[dict, dict], ...]
    emitted: dict[str, str]
    refused: tuple[str, ...]
    nothing: NothingMeasured | None = None


def emitted(evidence_by_op: dict[str, dict]) -> dict[str, str]:
    """op -> the operations the compiled kernel uses for it (from the generated C++ or the HLO)."""
    out = {}
    for op, trace in evidence_by_op.items():
        text = " ".join(
            k.get("code", "") for t in trace.get("fused_trace", []) for k in t.get("evidence", {}).get("kernels", [])
        )
        text += " ".join(t.get("evidence", {}).get("optimized_hlo", "") for t in trace.get("fused_trace", []))
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


def facts(result: SuiteResult) -> Facts:
    run = result.data
    ran = rows(run, "C3/")
    refused = tuple(na_reasons(benchmarks(run, "C3/")))
    framework = is_framework(result.device)
    newton = any(f["mode"] != "ieee" for f, _ in ran)
    ieee = tuple((f, b) for f, b in ran if f["mode"] == "ieee")
    nothing = nothing_measured(benchmarks(run, "C3/"), "C3/")
    if framework or not newton:
        traces = {op: e for op in OPS for _, e in evidence(result, f"C3_op-{op}_dtype-f32_mode-ieee_*.json")[:1]}
        return Facts(framework, newton, (), (), ieee, emitted(traces), refused, nothing)
    series, seeds_differ = [], []
    for op in OPS:
        for dtype in DTYPES:
            ieee_row = next((b for f, b in ran if (f["op"], f["dtype"], f["mode"]) == (op, dtype, "ieee")), None)
            for mode in NEWTON:
                p99 = {
                    int(f["iters"]): b["ulp_p99"]
                    for f, b in ran
                    if (f["op"], f["dtype"], f["mode"]) == (op, dtype, mode)
                }
                if len(p99) == 4:
                    series.append((f"{op} {dtype} {mode}", p99))
                if ieee_row is not None and 0 in p99:
                    seeds_differ.append(p99[0] != ieee_row["ulp_p99"])
    return Facts(framework, newton, tuple(series), tuple(seeds_differ), ieee, {}, refused)


# ---- decision
@dataclass(frozen=True)
class NewtonFigures:
    """Each Newton series' P99 at 0, 1 and 3 iterations, those that do not improve, how many 0-iteration
    seeds differ from IEEE, and the IEEE rows' share correctly rounded and max ULP."""

    series: int
    failing: tuple[tuple[str, float, float, float], ...]
    seeds_differ: int
    seeds: int
    ieee: tuple[tuple[str, str, float, float], ...]


@dataclass(frozen=True)
class IeeeFigures:
    """Compiled IEEE rsqrt/div against eager: per case (op, dtype, share compiled = eager, share
    correctly rounded compiled, eager's); how many differ from eager, how many of those are less
    often correctly rounded; what the compiler emitted; why the Newton forms cannot be set."""

    cases: tuple[tuple[str, str, float, float, float], ...]
    differ: int
    worse: int
    emitted: tuple[tuple[str, str], ...]
    refused: tuple[str, ...]


def decide(facts: Facts) -> Verdict:
    if facts.framework or not facts.newton:
        if not (facts.ieee or facts.refused):
            return Verdict("C3", Outcome.NA, facts.nothing)
        return _decide_ieee(facts)
    if not facts.series:
        return Verdict("C3", Outcome.NA, NotApplicable("no Newton series (0, 1, 3 iterations) in this run"))
    failing = tuple((name, p[0], p[1], p[3]) for name, p in facts.series if not (p[1] < p[0] and p[3] <= p[1]))
    figures = NewtonFigures(
        len(facts.series),
        failing,
        sum(facts.seeds_differ),
        len(facts.seeds_differ),
        tuple((f["op"], f["dtype"], b["frac_correctly_rounded"], b["ulp_max"]) for f, b in facts.ieee),
    )
    ok = not failing and all(facts.seeds_differ)
    return Verdict("C3", Outcome.SUPPORTED if ok else Outcome.CONTRADICTED, figures, len(facts.series))


def _decide_ieee(facts: Facts) -> Verdict:
    compared = [(f, b) for f, b in facts.ieee if "fused_vs_eager_frac_equal" in b]
    if not compared:
        what = "no IEEE rsqrt/div row compared compiled with eager"
        return Verdict("C3", Outcome.NA, Untestable(what, facts.refused, "no rsqrt/div row"))
    differ = [b for _, b in compared if b["fused_vs_eager_frac_equal"] < 1]
    worse = [b for b in differ if b["frac_correctly_rounded"] < b["eager_frac_correctly_rounded"]]
    figures = IeeeFigures(
        tuple(
            (
                f["op"],
                f["dtype"],
                b["fused_vs_eager_frac_equal"],
                b["frac_correctly_rounded"],
                b["eager_frac_correctly_rounded"],
            )
            for f, b in compared
        ),
        len(differ),
        len(worse),
        tuple(facts.emitted.items()),
        facts.refused,
    )
    if not differ:
        return Verdict("C3", Outcome.ABSENT, figures)
    return Verdict("C3", Outcome.SUPPORTED if worse else Outcome.INCONCLUSIVE, figures, len(compared))


def verdicts(facts: Facts) -> list[Verdict]:
    return [decide(facts)]


# ---- words
def statement(v: Verdict) -> str:
    return CLAIMS[v.claim].statement


def words(v: Verdict) -> Wording:
    shared = na_wording(v.figures)
    if shared is not None:
        return shared
    if isinstance(v.figures, IeeeFigures):
        return _ieee_words(v)
    f: NewtonFigures = v.figures
    inexact = [
        f"{op} {dtype}: {pct(rounded)} correctly rounded, max {num(ulp_max)} ULP"
        for op, dtype, rounded, ulp_max in f.ieee
        if rounded < 1
    ]
    exact = [f"{op} {dtype}" for op, dtype, rounded, _ in f.ieee if rounded == 1]
    ieee_text = (
        (
            "The IEEE path is not always correctly rounded: rsqrt is 1/sqrt(x), two correctly rounded operations; "
            + "; ".join(inexact)
            + (f" (100 % in {', '.join(exact)})." if exact else ".")
        )
        if inexact
        else "The IEEE path is correctly rounded in every configuration."
    )
    failing = [f"{name}: P99 {num(p0)} → {num(p1)} → {num(p3)} ULP" for name, p0, p1, p3 in f.failing]
    improving = f.series - len(f.failing)
    return Wording(
        v.outcome,
        f"{improving}/{f.series} series improve",
        "the P99 error falls from 0 to 1 iteration and does not rise at 3 in every series, and every "
        "0-iteration seed differs from the IEEE path",
        f"{improving}/{f.series} series improve"
        + (f" (not: {'; '.join(failing)})" if failing else "")
        + f"; the seeds differ from IEEE in {f.seeds_differ}/{f.seeds}. "
        + ieee_text,
        v.cases,
    )


def _ieee_words(v: Verdict) -> Wording:
    f: IeeeFigures = v.figures
    n = len(f.cases)
    cases = "; ".join(
        f"{op} {dtype}: compiled = eager in {pct(equal)}, correctly rounded {pct(rounded)} (eager {pct(eager_rounded)})"
        for op, dtype, equal, rounded, eager_rounded in f.cases
    )
    code = "; ".join(f"{op}: {text}" for op, text in f.emitted)
    figure = f"compiled = eager in {n - f.differ}/{n}"
    facts_text = (
        cases
        + (f". What the compiler emitted: {code}" if code else "")
        + (f". Newton-Raphson forms: n/a ({f.refused[0]})" if f.refused else "")
    )
    condition = (
        "the compiler approximates where its rsqrt/div differs from eager's bit for bit and is less often correctly "
        "rounded (ABSENT where compiled = eager everywhere)"
    )
    if v.outcome is Outcome.ABSENT:
        return Wording(
            v.outcome,
            figure + "; no approximation",
            reason=f"The compiled rsqrt/div equal eager's bit for bit: {facts_text}",
        )
    if v.outcome is Outcome.SUPPORTED:
        return Wording(v.outcome, figure, condition, facts_text, v.cases)
    return Wording(
        v.outcome,
        figure,
        condition,
        facts_text,
        v.cases,
        interval=f"compiled differs from eager in {f.differ}/{n} but is no less often correctly rounded",
    )
