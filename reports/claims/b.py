"""Task B: fused error ≤ eager error (plan §3.2), per chain.

Each chain × dtype (f32, f16, bf16: every dtype the suite runs) × input distribution and each
per-set statistic its dump carries (the per_set block, schema fusebench.B.per_set/1) is judged by
the decision rule that fusebench.judge applies too (reports/decision.py, one module for both): a
paired bootstrap over the input sets, the magnitude (the relative change of the statistic's mean
over sets) deciding against its tolerance, the share of sets worse beside it, Holm's step-down rule
across the chain's parts so that a chain reads CONTRADICTED in at most 2.5 % of runs where fused
and eager err alike, whatever the number of parts. The thresholds' deciding measure (the
conditioned error: see "measures" in tools/thresholds.json for why) decides the chain; the other
measure, the plan's literal rule (pooled ULP, no uncertainty) and torch's accuracy rule are shown
beside it. Where the dump lacks the deciding measure the next one decides, and the verdict says so."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from reports import decision
from reports.claims import thresholds
from reports.claims.verdict import (
    JUDGED,
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
from reports.numbers import num, pct, signed_pct
from reports.results import SuiteResult, axes, b_distribution, benchmarks, dump_dir

TASK = Task("B", "B — eager vs fused accumulated error (claim §3.2)", "accumulated_error")
CLAIMS = {"B": Claim("B", "fused error ≤ eager error", noun="chains")}
PER_SET_SCHEMA = "fusebench.B.per_set/1"
# the flat per-set pairs of dumps written before the per_set block (fused_set_max_ulp, ...)
_LEGACY_PER_SET_NAMES = {"max_ulp": "ulp_max", "p99_ulp": "ulp_p99"}


def config() -> dict:
    """B's settings in the thresholds: the bootstrap, the measures, the statistics and their
    tolerances, torch's accuracy rule."""
    return thresholds.of("B").settings


def measures() -> dict[str, dict]:
    """measure -> its description (label, why), the deciding one first."""
    cfg = config()
    deciding = cfg["deciding_measure"]
    return {deciding: cfg["measures"][deciding], **{m: d for m, d in cfg["measures"].items() if m != deciding}}


# ---- facts
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


@dataclass(frozen=True)
class Chain:
    """One chain's cells: what its verdict is decided on."""

    chain: str
    cells: tuple[BCell, ...]


@dataclass(frozen=True)
class Facts:
    chains: tuple[Chain, ...]
    nothing: NothingMeasured | None = None


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


def cells(result: SuiteResult) -> dict[str, list[BCell]]:
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


def facts(result: SuiteResult) -> Facts:
    by_chain = cells(result)
    nothing = None if by_chain else nothing_measured(benchmarks(result.data, "B/"), "B/")
    return Facts(tuple(Chain(chain, tuple(c)) for chain, c in by_chain.items()), nothing)


def torch_same_sets(cell: BCell) -> np.ndarray | None:
    """Per input set, torch._dynamo.utils.same(eager, fused, fp64_ref) as PyTorch's benchmarks apply
    it (torch 2.15): allclose(eager, fused, rtol = atol = 1e-4) passes; otherwise fused passes when
    rmse(fused, fp64) ≤ m · rmse(eager, fp64) + 1e-4 / 10, m = 3 for f16/bf16 results and 2 otherwise
    (torch also takes 3 below 1,000 elements, fewer than any B case has). None when the dump lacks
    the figures."""
    if cell.allclose is None or "rmse_vs_fp64" not in cell.per_set:
        return None
    fused, eager = cell.per_set["rmse_vs_fp64"]
    if not (cell.allclose.size == fused.size == eager.size):
        return None
    cfg = config()["torch_same"]
    m = cfg["multiplier_low_precision"] if cell.dtype in ("f16", "bf16") else cfg["multiplier"]
    with np.errstate(invalid="ignore"):
        return cell.allclose | (fused <= m * eager + cfg["tol"] / 10)


# ---- decision (the rule itself is reports/decision.py, shared with fusebench.judge)
@dataclass(frozen=True)
class Measure:
    """A chain's verdict on one measure: its deciding parts ("f16/uniform set-max ULP", the statistic's
    verdict after Holm's rule), the one shown in the matrix, the statistics present and absent, the
    cells without per-set figures, and the parts that stand beside them without deciding (the share
    of sets worse)."""

    measure: str
    parts: tuple[tuple[str, Verdict], ...]
    shown: int
    present: tuple[str, ...]
    absent: tuple[str, ...]
    missing: tuple[str, ...]
    beside: tuple[tuple[str, Verdict], ...] = ()


@dataclass(frozen=True)
class PlanRule:
    """The plan's literal rule: pooled fused P99 ≤ eager P99 and fused max ≤ eager max per cell; the
    checks that failed (statistic, dtype, dist, fused, eager)."""

    checks: int
    failed: tuple[tuple[str, str, str, float, float], ...]


@dataclass(frozen=True)
class TorchRule:
    """torch._dynamo.utils.same set by set: the distributions with a failing set (name, failing,
    sets), how many distributions and sets it judged."""

    failed: tuple[tuple[str, int, int], ...]
    distributions: int
    sets: int


@dataclass(frozen=True)
class Figures:
    """A chain's verdict: the measure that decided it (the thresholds' deciding one unless the dump
    lacks it), every measure's verdict, the plan's and torch's rules beside them; without per-set
    figures, the cells that lack them."""

    chain: str
    deciding: str
    measures: tuple[tuple[str, Verdict], ...]
    plan: Verdict
    torch: Verdict
    no_per_set: tuple[str, ...] = ()


def part_verdict(part: decision.Part) -> Verdict:
    """One judged part as a verdict: its outcome after Holm's rule (its own, for a part beside)."""
    return Verdict("B", Outcome(part.final.value), part, part.interval.sets)


def cell_parts(cell: BCell, measure: str | None = None) -> list[decision.Part]:
    """The deciding parts (decision.judge_statistic: the magnitude, the share of sets worse beside
    it) of each statistic of one cell that its dump carries, of one measure ("ulp" or
    "conditioned") when given. Sets where either path has no finite figure (a conditioned error over
    a zero bound) are left out of the pairing, and the parts count them. On the deciding measure a
    cell the bound cannot resolve is decided by the other measure, as fusebench.judge decides an
    output (decision.output_parts)."""
    cfg = config()
    output = f"{cell.dtype}/{cell.dist}"
    if measure == cfg["deciding_measure"]:
        figures = {name: cell.per_set[name] for name in cfg["statistics"] if name in cell.per_set}
        return decision.output_parts(output, figures, measure, config=cfg)[1]
    out = []
    for name, spec in cfg["statistics"].items():
        if name in cell.per_set and (measure is None or spec["measure"] == measure):
            fused, eager = cell.per_set[name]
            out += decision.judge_statistic(output, name, fused, eager, config=cfg)
    return out


def plan_rule(cells: list[BCell]) -> Verdict:
    """The plan's literal rule: pooled ULP error of every dtype and distribution, fused P99 ≤ eager P99
    and fused max ≤ eager max (no uncertainty)."""
    failed = []
    for c in cells:
        for stat, key in (("P99", "ulp_p99"), ("max", "ulp_max")):
            f, e = c.row[f"fused_{key}"], c.row[f"eager_{key}"]
            if f > e:
                failed.append((stat, c.dtype, c.dist, f, e))
    checks = 2 * len(cells)
    outcome = all_pass(checks - len(failed), checks)
    if outcome is Outcome.NA:
        return Verdict("B", outcome, NotApplicable("no B row", "0 cases"))
    return Verdict("B", outcome, PlanRule(checks, tuple(failed)), checks)


def torch_same_rule(cells: list[BCell]) -> Verdict:
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
            failed.append((f"{c.dtype}/{c.dist}", int((~ok).sum()), ok.size))
    outcome = all_pass(passed_sets, judged_sets)
    if outcome is Outcome.NA:
        return Verdict("B", outcome, NotApplicable("no per-set RMSE and allclose figures in the dump", "0 cases"))
    return Verdict("B", outcome, TorchRule(tuple(failed), distributions, judged_sets), judged_sets)


def measure_verdict(cells: list[BCell], measure: str) -> Verdict | None:
    """The chain's verdict on one error measure ("ulp" or "conditioned"): every dtype, distribution
    and statistic of that measure judged by the decision rule (reports/decision.py: the magnitude
    decides, Holm's rule across the chain's parts, the share of sets worse beside). None when the
    dump carries none of its statistics."""
    cfg = config()
    judged = [p for c in cells for p in cell_parts(c, measure)]
    if not judged:
        return None
    outcome = Outcome(decision.decide(judged, cfg["confidence"]).value)
    parts = tuple((f"{p.output} {p.label}", part_verdict(p)) for p in judged)
    beside = tuple((f"{p.output} {b.label}", part_verdict(b)) for p in judged for b in p.beside)
    # the part shown in the matrix: for SUPPORTED the one closest to its tolerance, else the first
    # that reached the chain's outcome
    if outcome is Outcome.SUPPORTED:
        shown = max(range(len(judged)), key=lambda i: judged[i].interval.high - judged[i].tolerance)
    else:
        shown = next(i for i, (_, v) in enumerate(parts) if v.outcome is outcome)
    specs = {n: s for n, s in cfg["statistics"].items() if s["measure"] == measure}
    present = {name for c in cells for name in c.per_set}
    figures = Measure(
        measure,
        parts,
        shown,
        tuple(n for n in specs if n in present),
        tuple(s["label"] for n, s in specs.items() if n not in present),
        tuple(f"{c.dtype}/{c.dist}" for c in cells if not any(n in c.per_set for n in specs)),
        beside,
    )
    return Verdict("B", outcome, figures, sum(v.cases for _, v in parts))


def decide(chain: Chain) -> Verdict:
    cells = list(chain.cells)
    plan = plan_rule(cells)
    torch = torch_same_rule(cells)
    measured = tuple((m, v) for m, v in ((m, measure_verdict(cells, m)) for m in measures()) if v is not None)
    deciding = next(iter(measures()))
    if not measured:
        figures = Figures(chain.chain, deciding, (), plan, torch, tuple(f"{c.dtype}/{c.dist}" for c in cells))
        return Verdict("B", Outcome.NA, figures, member=chain.chain)
    v = measured[0][1]
    return Verdict("B", v.outcome, Figures(chain.chain, deciding, measured, plan, torch), v.cases, member=chain.chain)


def verdicts(facts: Facts) -> list[Verdict]:
    if facts.nothing is not None:
        return [Verdict("B", Outcome.NA, facts.nothing)]
    return [decide(chain) for chain in facts.chains]


# ---- the switch list's recommendation (reports/fusion_switches.py)
def chain_dtype_verdict(evidence: list[dict]) -> Verdict | None:
    """Task B's verdict over one chain × dtype's evidence (both distributions): the first measure, the
    deciding one first, whose per-set figures the evidence carries; None without per-set figures."""
    cells = [BCell(e["dtype"], b_distribution(e.get("distribution", "")), {}, per_set_statistics(e)) for e in evidence]
    for measure in measures():
        v = measure_verdict(cells, measure)
        if v is not None:
            return v
    return None


def switch_recommendation(evidence: list[dict]) -> tuple[dict | None, str]:
    """For one chain × dtype's evidence: (the verdict its switches answer, as {outcome, measure,
    figure}; why they are not recommended, or "" where they are). A switch is recommended where the
    counter-examples it removes are on the deciding measure beyond the stated margin (evidence that
    states `counterexample_margin`) and the chain × dtype's verdict is not SUPPORTED."""
    v = chain_dtype_verdict(evidence)
    answers = None
    if v is not None:
        answers = {"outcome": v.outcome.label, "measure": v.figures.measure, "figure": words(v).key_figure}
    margins = [e.get("counterexample_margin") for e in evidence]
    if not all(isinstance(m, dict) for m in margins):
        return answers, (
            "its counter-examples are the ULP error's (evidence written before counter-examples were taken on "
            "the deciding measure), which explodes at cancellation where neither path is accurate"
        )
    if v is None:
        return answers, "the evidence has no per-set figures, so the chain × dtype has no verdict to answer"
    if v.figures.measure != config()["deciding_measure"]:
        return answers, f"the chain × dtype was judged on {v.figures.measure} error, not the deciding measure"
    if v.outcome is Outcome.SUPPORTED:
        return answers, (
            "the chain × dtype's verdict is SUPPORTED: the sets it removes are within what fused's error may "
            "differ from eager's, so the switch would buy no significant accuracy"
        )
    return answers, ""


# ---- words
def statement(v: Verdict) -> str:
    statement = CLAIMS[v.claim].statement
    return f"{v.member}: {statement}" if v.member else statement


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _effect_text(effect: str, x: float) -> str:
    return signed_pct(x) if effect == "relative" else (("+" if x >= 0 else "−") + num(abs(x)))


def words(v: Verdict) -> Wording:
    f = v.figures
    if isinstance(f, decision.Part):
        return _statistic_words(v)
    if isinstance(f, Measure):
        return _measure_words(v)
    if isinstance(f, PlanRule):
        failed = [
            f"{stat} {dtype}/{dist} fused {num(fu)} vs eager {num(e)} ULP ({signed_pct(fu / e - 1) if e else '+∞'})"
            for stat, dtype, dist, fu, e in f.failed
        ]
        return Wording(
            v.outcome,
            f"{len(f.failed)}/{f.checks} checks worse fused",
            "pooled fused P99 ≤ eager P99 and fused max ≤ eager max",
            ("worse fused: " + "; ".join(failed)) if failed else "fused ≤ eager in every check",
            v.cases,
        )
    if isinstance(f, TorchRule):
        cfg = config()["torch_same"]
        return Wording(
            v.outcome,
            f"{len(f.failed)} of {f.distributions} distributions with a failing set",
            f"per set, allclose(eager, fused, 1e-4) or rmse(fused, fp64) ≤ m·rmse(eager, fp64) + {num(cfg['tol'] / 10)} "
            f"(m = {num(cfg['multiplier_low_precision'])} for f16/bf16, {num(cfg['multiplier'])} for f32), as "
            "torch._dynamo.utils.same",
            ("failing: " + "; ".join(f"{d} {n}/{size} sets" for d, n, size in f.failed))
            if f.failed
            else f"every one of {f.sets} sets passes",
            v.cases,
        )
    if isinstance(f, Figures):
        return _chain_words(v)
    return na_wording(f)


def _statistic_words(v: Verdict) -> Wording:
    f: decision.Part = v.figures
    i = f.interval
    e = i.effect
    shown = f"{f.label} {_effect_text(e, i.estimate)} [{_effect_text(e, i.low)}, {_effect_text(e, i.high)}]"
    identical = i.low == i.high == i.estimate == 0
    if identical:
        shown = f"{f.label}: fused = eager in all {i.sets} sets"
    tol = _effect_text(e, f.tolerance)
    condition = f"95 % paired-bootstrap interval of fused − eager ({f.label}) upper end ≤ {tol}"
    if not f.decides:
        condition += ", shown beside the magnitude, not deciding"
    evidence = f"{f.left_out} of {f.sets} sets without a finite figure on one path, left out" if f.left_out else ""
    if v.outcome is Outcome.SUPPORTED:
        return Wording(v.outcome, shown if identical else f"{shown} ≤ {tol}", condition, evidence, v.cases)
    if v.outcome is Outcome.CONTRADICTED:
        return Wording(v.outcome, f"{shown} > {tol}", condition, evidence, v.cases)
    if f.unresolved:
        return Wording(
            v.outcome,
            f"{shown} unresolved: within the fp64 reference's resolution",
            condition,
            evidence,
            v.cases,
            interval=f"{shown}: {f.resolution_text()}; {to_decide_text(v)}",
        )
    d = f.difference
    if d is not None and i.low > f.tolerance and d.low <= f.floor:
        return Wording(
            v.outcome,
            f"{shown} > {tol}, fused − eager down to the reference's resolution",
            condition,
            evidence,
            v.cases,
            interval=f"{shown}: its lower end is above {tol}, but {f.resolution_text()} reaches down to it",
        )
    if f.holm_rule is not None:
        level, parts = f.holm_rule
        return Wording(
            v.outcome,
            f"{shown} > {tol} alone, not after Holm over {parts} parts",
            condition,
            evidence,
            v.cases,
            interval=f"{shown}: its lower end is above {tol}, but its {num(level, 2)} quantile (Holm's rule "
            f"over the chain's {parts} parts) is not",
        )
    return Wording(
        v.outcome,
        f"{shown} spans tolerance {tol}",
        condition,
        evidence,
        v.cases,
        interval=f"{shown} straddles {tol}; {to_decide_text(v)}",
    )


def _tally(parts: list[tuple[str, Wording]]) -> str:
    counts = {o: sum(p.outcome is o for _, p in parts) for o in JUDGED}
    return ", ".join(f"{n} {o.value}" for o, n in counts.items() if n)


def to_decide_text(v: Verdict) -> str:
    """For an undecided part: how many sets would decide it, or why none would; '—' for a decided one."""
    f: decision.Part = v.figures
    if v.outcome is not Outcome.INCONCLUSIVE:
        return "—"
    if f.unresolved:
        return "no number of sets decides it: the difference lies within the fp64 reference's resolution"
    if f.holm_rule is not None:
        return f"Holm's rule over the chain's {f.holm_rule[1]} parts: more sets at the observed effect"
    if f.to_decide is None or math.isinf(f.to_decide):
        return "no number of sets decides it: the estimate equals the tolerance"
    return f"about {num(round(f.to_decide))} sets would decide it at the observed effect (now {f.interval.sets})"


def _measure_words(v: Verdict) -> Wording:
    f: Measure = v.figures
    cfg = config()
    parts = [(where, words(part)) for where, part in f.parts]
    deciding = [(w, p) for w, p in parts if p.outcome is v.outcome]
    worst_where, worst = parts[f.shown]
    beside = [(where, words(part)) for where, part in f.beside]
    stats = "; ".join(
        f"{s['label']}: mean over sets at most {signed_pct(s['relative_tolerance'])}"
        + (
            f", beside it the share of sets worse fused minus share worse eager against {num(s['share_worse_tolerance'])}"
            if s.get("share_worse_tolerance") is not None
            else ""
        )
        for s in (cfg["statistics"][name] for name in f.present)
    )
    left_out = [f"{w.split(' ', 1)[0]}: {p.evidence}" for w, p in parts if p.evidence]
    condition = (
        f"{cfg['measures'][f.measure]['label']}: for every dtype, input distribution and statistic, the "
        f"{pct(cfg['confidence'], 2)} paired-bootstrap interval (over input sets, {num(cfg['resamples'])} "
        f"resamples, seed {cfg['seed']}) of fused − eager: SUPPORTED when every part's upper end ≤ its "
        f"tolerance, CONTRADICTED when a part's lower end > it after Holm's rule over the chain's parts; "
        f"the share of sets worse stands beside the magnitude and decides only where the magnitude is "
        f"unbounded (eager's figure 0 in every set) ({stats})"
        + (
            f"; CONTRADICTED on it also needs the interval of fused's mean minus eager's above the fp64 "
            f"reference's resolution ({num(decision.RESOLUTION_FLOOR)} of the bound), and a cell whose whole "
            "interval lies within it is decided by the ULP error"
            if f.measure == "conditioned"
            else ""
        )
    )
    evidence = (
        f"{len(parts)} parts: {_tally(parts)}"
        + (f"; beside them, not deciding, {len(beside)} shares of sets worse: {_tally(beside)}" if beside else "")
        + (f"; no per-set figures for {', '.join(f.missing)}" if f.missing else "")
        + (f"; not in this dump: {', '.join(f.absent)}" if f.absent else "")
        + (f"; {'; '.join(dict.fromkeys(left_out))}" if left_out else "")
    )
    interval_text = ""
    if v.outcome is Outcome.INCONCLUSIVE:
        interval_text = "; ".join(f"{w.split(' ', 1)[0]}: {p.interval}" for w, p in deciding)
    worst_part: decision.Part = f.parts[f.shown][1].figures
    key_figure = f"{worst_where.split(' ', 1)[0]} {worst.key_figure}"
    return Wording(
        v.outcome,
        key_figure,
        condition,
        evidence,
        v.cases,
        interval=interval_text,
        parts=parts,
        decider=(key_figure, worst_part.interval.high - worst_part.tolerance),
    )


def _chain_words(v: Verdict) -> Wording:
    f: Figures = v.figures
    labels = measures()
    plan = words(f.plan)
    rules = [("The plan's rule (pooled ULP, no uncertainty)", plan)]
    if f.torch.outcome is not Outcome.NA:
        rules.append(("torch._dynamo.utils.same, per set", words(f.torch)))
    if not f.measures:
        return Wording(
            Outcome.NA,
            f"no per-set dumps; plan's rule: {plan.label}",
            reason=f"no per-set figures in the dump for {', '.join(f.no_per_set)} (tools/run writes them); the "
            f"plan's rule alone: {plan.label}",
            beside=rules,
        )
    (measure, decided), others = f.measures[0], f.measures[1:]
    m = words(decided)
    decides = f"{_capital(labels[measure]['label'])} decides (why: the paragraph under the verdicts)"
    if measure != f.deciding:
        decides = f"The dump has no {labels[f.deciding]['label']} figures, so {labels[measure]['label']} decides"
    beside = [(f"{_capital(labels[name]['label'])} (not deciding)", words(o)) for name, o in others] + rules
    # the other measure's outcome where it differs, so that the plan's rule beside it can be read
    differing = [
        f"{labels[name]['label'].split()[0]}: {o.label}" for name, o in others if o.outcome is not decided.outcome
    ]
    key = "; ".join([m.key_figure, *differing, f"plan's rule: {plan.label}"])
    return Wording(
        m.outcome,
        key,
        f"{m.condition}. {decides}",
        m.evidence,
        m.cases,
        interval=m.interval,
        beside=beside,
        parts=m.parts,
        decider=m.decider,
    )
