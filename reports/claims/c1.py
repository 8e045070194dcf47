"""Task C1: instruction selection (tensor × scalar as an immediate or as a broadcast tensor) changes
the last bits (plan §1.2 (2)).

On fusebench's engine the two lowerings must differ in the last bits wherever the scalar is inexact
in f16/bf16, agree for the exact scalar 0.5 (the gate's check), and the fused kernels' instructions
must differ (else the mechanism is absent). A framework's eager ops and its compiler each choose a
lowering: the claim is judged in both, and the compiled half decides (it is what fusion does); the
generated code of the two lowerings is the evidence of what the compiler did."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from reports.claims import thresholds
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
from reports.numbers import pct
from reports.results import SuiteResult, benchmarks, evidence, is_framework, rows

TASK = Task("C1", "C1 — tensor × scalar lowering (claim §1.2 (2))", "scalar_lowering")
CLAIMS = {"C1": Claim("C1", "instruction selection (immediate vs broadcast tensor) changes last bits")}
# The trace the claim quotes: the f16 ×0.7 fused kernels of the two lowerings.
EVIDENCE = "C1_dtype-f16_scalar-0.7_*exec-fused*.json"


# ---- facts
@dataclass(frozen=True)
class CodeNote:
    """What the generated code of the two lowerings (f16, ×0.7) shows: the same code or not, its
    SHA-256s, and the scalar constants in it."""

    same: bool
    immediate_sha256: str
    broadcast_sha256: str
    constants: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    """fused, eager: (dtype, scalar, shape, lowering) -> benchmark row; framework: the device compiles
    with a framework's compiler; code: its generated code's note; nothing: what was measured, where no
    case ran."""

    framework: bool
    fused: dict
    eager: dict
    code: CodeNote | None = None
    nothing: NothingMeasured | None = None


def _constants(trace: dict) -> list[str]:
    """Scalar constants a kernel multiplies by: Inductor's `static_cast<float>(0.7)`, XLA's
    `f16[] constant(0.7002)`."""
    found = []
    for k in trace.get("kernels", []):
        found += re.findall(
            r"static_cast<(?:float|double|at::Half|half|at::BFloat16)>\(([-0-9.e]+)\)", k.get("code", "")
        )
    found += [
        f"{t}[] {v}"
        for t, v in re.findall(r"\b(f16|bf16|f32)\[\] constant\(([-0-9.e]+)\)", trace.get("optimized_hlo", ""))
    ]
    return list(dict.fromkeys(found))


def code_note(trace: dict | None) -> CodeNote | None:
    if not trace:
        return None
    a, b = trace.get("immediate", {}), trace.get("broadcast", {})
    if not a.get("source_sha256") or not b.get("source_sha256"):
        return None
    constants = sorted({c for side in (a, b) for c in _constants(side.get("evidence", {}))})
    return CodeNote(a["source_sha256"] == b["source_sha256"], a["source_sha256"], b["source_sha256"], tuple(constants))


def facts(result: SuiteResult) -> Facts:
    run = result.data
    ran = rows(run, "C1/")
    framework = is_framework(result.device)
    if not ran:
        return Facts(framework, {}, {}, nothing=nothing_measured(benchmarks(run, "C1/"), "C1/"))
    fused = {(f["dtype"], f["scalar"], f["shape"], f["lowering"]): b for f, b in ran if f["exec"] == "fused"}
    eager = {(f["dtype"], f["scalar"], f["shape"], f["lowering"]): b for f, b in ran if f["exec"] == "eager"}
    code = None
    if framework:
        files = evidence(result, EVIDENCE)
        code = code_note(files[0][1] if files else None)
    return Facts(framework, fused, eager, code)


def inexact_keys(fused: dict) -> list[tuple]:
    """The immediate-lowering keys of an inexact scalar (not 0.5) in f16/bf16."""
    return [k for k in fused if k[3] == "immediate" and float(k[1]) != 0.5 and k[0] != "f32"]


# ---- decision
@dataclass(frozen=True)
class EngineFigures:
    """On the engine: of the inexact f16/bf16 cases, how many lowerings differ (and the share of
    elements apart, lowest and highest); of the exact-scalar controls, how many agree by the gate's
    check; of the cases with instruction histograms, how many differ; f32's bit-for-bit agreement."""

    control: dict
    inexact: int
    differ: int
    share_low: float
    share_high: float
    exact: int
    agree: int
    instructions: int
    instructions_differ: int
    f32: int
    f32_agree: int


@dataclass(frozen=True)
class FrameworkFigures:
    """On a framework: of the inexact cases run eager and compiled, how many lowerings differ in each
    half (and the share of elements apart in eager's); folded: compiled cases whose lowerings agree
    while the scalar passed as an input tensor differs; same_as_eager: the compiled figures are
    eager's, case for case (a backend that does not fuse)."""

    eager_differ: int
    eager_n: int
    eager_shares: tuple[float, ...]
    compiled_differ: int
    compiled_n: int
    folded: int
    same_as_eager: bool
    code: CodeNote | None


def decide(facts: Facts) -> Verdict:
    if facts.nothing is not None:
        return Verdict("C1", Outcome.NA, facts.nothing)
    if facts.framework:
        return _decide_framework(facts)
    control = thresholds.of("C1").check()
    fused = facts.fused
    inexact = [(k, fused[k]) for k in inexact_keys(fused)]
    exact = [(k, b) for k, b in fused.items() if k[3] == "immediate" and float(k[1]) == 0.5]
    instr = [b for k, b in fused.items() if k[3] == "immediate" and b.get("instructions_differ", -1) >= 0]
    if not inexact:
        return Verdict("C1", Outcome.NA, NotApplicable("no inexact-scalar f16/bf16 case in this run"))
    differ = [k for k, b in inexact if b["frac_ulp0"] < 1]
    agree = [k for k, b in exact if thresholds.counter_passes(control, b)]
    instr_differ = [b for b in instr if b["instructions_differ"] == 1]
    shares = [1 - b["frac_ulp0"] for _, b in inexact]
    f32_rows = [b for k, b in fused.items() if k[0] == "f32" and k[3] == "immediate"]
    figures = EngineFigures(
        control,
        len(inexact),
        len(differ),
        min(shares),
        max(shares),
        len(exact),
        len(agree),
        len(instr),
        len(instr_differ),
        len(f32_rows),
        sum(b["frac_ulp0"] == 1 for b in f32_rows),
    )
    if instr and not instr_differ and not differ:
        return Verdict("C1", Outcome.ABSENT, figures)
    ok = len(differ) == len(inexact) and len(agree) == len(exact) and (not instr or len(instr_differ) == len(instr))
    return Verdict("C1", Outcome.SUPPORTED if ok else Outcome.CONTRADICTED, figures, len(inexact) + len(exact))


def _decide_framework(facts: Facts) -> Verdict:
    eager, fused = facts.eager, facts.fused
    keys = inexact_keys(fused)
    eager_differ = [k for k in keys if k in eager and eager[k]["frac_ulp0"] < 1]
    fused_differ = [k for k in keys if fused[k]["frac_ulp0"] < 1]
    eager_n = sum(k in eager for k in keys)
    if not keys:
        return Verdict("C1", Outcome.NA, Untestable("no inexact f16/bf16 case ran fused", (), "no inexact case"))
    folded = [
        k
        for k in keys
        if fused[k]["frac_ulp0"] == 1 and fused[k].get("control_input_tensor_vs_broadcast_frac_ulp0", 1) < 1
    ]
    compared = ("frac_ulp0", "ulp_max", "ulp_p99")
    # Equal figures show a compiled path that is eager's (a backend that does not fuse) only where the
    # lowerings differ: where they differ in no case, eager's and the compiler's figures are equal
    # whether or not it fuses (XLA's op-by-op jit and jax.jit, both bit-equal between lowerings).
    same_as_eager = bool(eager_differ) and all(
        k in eager and all(fused[k].get(c) == eager[k].get(c) for c in compared) for k in keys
    )
    figures = FrameworkFigures(
        len(eager_differ),
        eager_n,
        tuple(1 - eager[k]["frac_ulp0"] for k in eager_differ),
        len(fused_differ),
        len(keys),
        len(folded),
        same_as_eager,
        facts.code,
    )
    if not fused_differ:
        return Verdict("C1", Outcome.ABSENT, figures)
    outcome = Outcome.SUPPORTED if len(fused_differ) == len(keys) else Outcome.INCONCLUSIVE
    return Verdict("C1", outcome, figures, len(keys))


def verdicts(facts: Facts) -> list[Verdict]:
    return [decide(facts)]


# ---- words
def statement(v: Verdict) -> str:
    return CLAIMS[v.claim].statement


def _span(shares: tuple[float, ...]) -> str:
    low, high = pct(min(shares)), pct(max(shares))
    return low if low == high else f"{low} to {high}"


EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def code_text(code: CodeNote | None) -> str:
    if code is None:
        return ""
    if code.same and code.immediate_sha256 == EMPTY_SHA256:
        # a backend that writes no code of its own (aot_eager: ATen's kernels run): nothing to compare
        return "Generated code: none for either lowering (the backend wrote no code of its own)."
    return (
        f"Generated code (f16, ×0.7): {'identical' if code.same else 'different'} for the two lowerings (SHA-256 "
        f"{code.immediate_sha256[:12]}{'' if code.same else ' vs ' + code.broadcast_sha256[:12]})"
        + (f"; constants in it: {', '.join(code.constants)}" if code.constants else "")
        + "."
    )


def words(v: Verdict) -> Wording:
    shared = na_wording(v.figures)
    if shared is not None:
        return shared
    if isinstance(v.figures, FrameworkFigures):
        return _framework_words(v)
    f: EngineFigures = v.figures
    condition = (
        f"the two lowerings differ (frac_ulp0 < 1) in every inexact f16/bf16 case, agree "
        f"({thresholds.check_text(f.control)}) in every exact-scalar control (0.5), and the fused kernels' "
        "instructions differ"
    )
    evidence_text = (
        f"they differ in {f.differ}/{f.inexact} inexact cases ({pct(f.share_low)} to {pct(f.share_high)} of "
        f"elements 1 ULP or more apart), agree in {f.agree}/{f.exact} controls; instruction histograms differ "
        f"in {f.instructions_differ}/{f.instructions}"
        + (
            f". f32 agrees bit for bit in {f.f32_agree}/{f.f32} (the broadcast "
            "tensor holds the same fp32 constant the immediate uses)"
            if f.f32
            else ""
        )
    )
    key = f"{f.differ}/{f.inexact} inexact f16/bf16 cases differ"
    if v.outcome is Outcome.ABSENT:
        return Wording(
            v.outcome,
            key,
            reason=f"the two lowerings compile to the same instructions in all {f.instructions} cases and give the "
            f"same bits: {evidence_text}",
        )
    return Wording(v.outcome, key, condition, evidence_text, v.cases)


def _framework_words(v: Verdict) -> Wording:
    f: FrameworkFigures = v.figures
    eager_text = (
        (
            f"eager: the two lowerings differ in {f.eager_differ}/{f.eager_n} inexact f16/bf16 cases"
            + (f" ({_span(f.eager_shares)} of elements)" if f.eager_shares else "")
        )
        if f.eager_n
        else "eager: not run"
    )
    code = code_text(f.code)
    fused_text = f"compiled: they differ in {f.compiled_differ}/{f.compiled_n}"
    if f.folded:
        fused_text += (
            f"; in {f.folded} of the identical cases the scalar passed as an input tensor (which no compiler "
            "can fold) does differ, so the compiler folded the broadcast tensor into the same constant as the "
            "immediate"
        )
    figure = f"eager {f.eager_differ}/{f.eager_n}, compiled {f.compiled_differ}/{f.compiled_n} differ"
    if f.same_as_eager:
        # a backend that does not fuse (aot_eager): the compiled path is eager's, figure for figure
        figure = f"fused = eager; lowerings differ in {f.compiled_differ}/{f.compiled_n}"
    facts_text = f"{eager_text}; {fused_text}" + (f". {code.rstrip('.')}" if code else "")
    condition = (
        "the compiled half decides: the two lowerings differ (frac_ulp0 < 1) in every inexact f16/bf16 case run "
        "compiled; ABSENT where they differ in none"
    )
    if v.outcome is Outcome.ABSENT:
        return Wording(
            v.outcome,
            figure,
            reason=f"The compiled lowerings give the same bits in all {f.compiled_n} inexact cases: {facts_text}",
        )
    if v.outcome is Outcome.SUPPORTED:
        return Wording(v.outcome, figure, condition, facts_text, v.cases)
    return Wording(
        v.outcome,
        figure,
        condition,
        facts_text,
        v.cases,
        interval=f"the compiled lowerings differ in {f.compiled_differ} of {f.compiled_n} inexact cases: "
        "neither all nor none",
    )
