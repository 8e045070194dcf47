"""Known-answer tests of the claims (reports/claims/) and their paired bootstrap: the verdict
vocabulary, B's decision, E's seed band, the gate's checks, the speed verdicts and the matrix's rows."""

from __future__ import annotations

import numpy as np
import pytest

from reports import decision
from reports.claims import b, c1, c3, d, e, engine, thresholds, words
from reports.claims.b import BCell
from reports.claims.checks import evaluate_check
from reports.claims.verdict import NotApplicable, Outcome, Verdict, Wording, all_pass
from reports.matrix import grouped_verdict


def per_set(rng: np.random.Generator, sets: int, elements: int, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Per-set P99 and max of |N(0, scale²)| errors: one path's figures for `sets` input sets."""
    errors = np.abs(rng.standard_normal((sets, elements))) * scale
    return {"ulp_p99": np.quantile(errors, 0.99, axis=1), "ulp_max": errors.max(axis=1)}


# ---- vocabulary
def test_a_verdict_over_zero_cases_is_refused():
    with pytest.raises(ValueError, match="0 cases"):
        Verdict("C3", Outcome.SUPPORTED, cases=0)
    with pytest.raises(ValueError):
        Verdict("C3", Outcome.CONTRADICTED)  # cases not given
    with pytest.raises(ValueError, match="0 cases"):
        Wording(Outcome.SUPPORTED, "0/0 series improve", "every series improves", cases=0)


def test_zero_cases_become_na_with_the_reason():
    assert all_pass(0, 0) is Outcome.NA
    v = c3.decide(c3.Facts(False, True, (), (), (), {}, ()))
    shown = words(v)
    assert v.outcome is Outcome.NA and "no Newton series" in shown.reason and shown.label == "N/A"
    v = d.decide(d.Facts((), {}))
    assert v.outcome is Outcome.NA and words(v).key_figure == "0 cases"


def test_absent_and_na_need_their_evidence_and_inconclusive_its_interval():
    with pytest.raises(ValueError):
        Wording(Outcome.ABSENT, "same kernel")
    with pytest.raises(ValueError):
        Wording(Outcome.NA, "no knob")
    with pytest.raises(ValueError):
        Wording(Outcome.INCONCLUSIVE, "x", "a condition", cases=3)
    v = Verdict("C1", Outcome.NA, NotApplicable("Inductor folds both lowerings into one kernel", "same kernel"))
    assert words(v).reason.startswith("Inductor folds") and words(v).key_figure == "same kernel"


def test_c1_with_identical_instructions_is_absent():
    row = {"frac_ulp0": 1.0, "instructions_differ": 0}
    fused = {("f16", "0.7", "1024", "immediate"): row, ("f16", "0.5", "1024", "immediate"): row}
    v = c1.decide(c1.Facts(False, fused, {}))
    assert v.outcome is Outcome.ABSENT and "same instructions" in words(v).reason


# ---- the paired bootstrap, as task B applies it (the rule itself: test_decision.py)
def test_identical_distributions_are_never_contradicted_in_95_percent_of_seeds():
    """Eager and fused draw their errors from one distribution. At tolerance 0 (stricter than the
    thresholds' own), a 95 % interval wrongly lies above 0 in about 2.5 % of seeds."""
    contradicted = {"ulp_p99": 0, "ulp_max": 0, "share": 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        eager, fused = per_set(rng, 100, 256), per_set(rng, 100, 256)
        for name in ("ulp_p99", "ulp_max"):
            i = decision.paired_interval(fused[name], eager[name], "relative", seed=seed)
            contradicted[name] += decision.statistic_outcome(i, 0.0) is decision.Outcome.CONTRADICTED
        i = decision.paired_interval(fused["ulp_max"], eager["ulp_max"], "share_worse", seed=seed)
        contradicted["share"] += decision.statistic_outcome(i, 0.0) is decision.Outcome.CONTRADICTED
    for name, n in contradicted.items():
        assert n <= 10, f"{name}: CONTRADICTED in {n} of 200 seeds (more than 5 %)"


def test_fused_ten_percent_worse_at_p99_is_contradicted_with_1000_sets():
    rng = np.random.default_rng(7)
    eager, fused = per_set(rng, 1000, 1024), per_set(rng, 1000, 1024, scale=1.1)
    cell = BCell("f16", "uniform", {}, {"ulp_p99": (fused["ulp_p99"], eager["ulp_p99"])})
    [part] = b.cell_parts(cell)
    v = b.part_verdict(part)
    assert part.label == "per-set P99 ULP" and v.outcome is Outcome.CONTRADICTED, words(v).key_figure


def test_identical_paths_are_supported_exactly():
    x = np.random.default_rng(1).random(50)
    [part] = b.cell_parts(BCell("f16", "uniform", {}, {"ulp_max": (x, x.copy())}))
    v = b.part_verdict(part)
    assert (part.interval.estimate, part.interval.low, part.interval.high) == (0.0, 0.0, 0.0)
    assert v.outcome is Outcome.SUPPORTED and words(v).key_figure == "set-max ULP: fused = eager in all 50 sets"
    [share] = part.beside
    assert words(b.part_verdict(share)).key_figure == "sets worse (set-max ULP): fused = eager in all 50 sets"


def test_a_cell_the_bound_cannot_resolve_is_decided_by_its_ulp_error_and_says_why():
    """Conditioned errors about 1e-20 of the bound, fused 3x eager's: within the fp64 reference's
    resolution, so the cell's ULP parts decide it (decision.output_parts, as fusebench.judge does)."""
    rng = np.random.default_rng(12)
    eager_cond, eager_ulp = rng.gamma(4.0, size=40) * 1e-20, rng.gamma(4.0, size=40)
    figures = {
        "cond_p99": (eager_cond * 3, eager_cond),
        "cond_max": (eager_cond * 3, eager_cond),
        "ulp_p99": (eager_ulp * 1.5, eager_ulp),
        "ulp_max": (eager_ulp * 1.5, eager_ulp),
    }
    cell = BCell("f32", "uniform", {}, figures)
    deciding = b.cell_parts(cell, "conditioned")
    assert {p.statistic for p in deciding} == {"ulp_p99", "ulp_max"}
    assert b.measure_verdict([cell], "conditioned").outcome is Outcome.CONTRADICTED
    [conditioned] = decision.judge_statistic("f32/uniform", "cond_p99", *figures["cond_p99"])
    w = words(b.part_verdict(conditioned))
    assert w.outcome is Outcome.INCONCLUSIVE and "unresolved" in w.key_figure
    assert "no number of sets decides it" in w.interval and "resolution" in w.interval
    assert "resolution" in words(b.measure_verdict([cell], "conditioned")).condition


# ---- task B's decision
def test_b_without_per_set_figures_is_na_whatever_the_dtype():
    row = {"fused_ulp_p99": 1.0, "eager_ulp_p99": 1.0, "fused_ulp_max": 2.0, "eager_ulp_max": 1.0}
    assert b.decide(b.Chain("chain", (BCell("f32", "uniform", row, {}),))).outcome is Outcome.NA
    v = b.decide(b.Chain("chain", (BCell("f16", "uniform", row, {}),)))
    shown = words(v)
    assert v.outcome is Outcome.NA and shown.beside and shown.beside[0][1].outcome is Outcome.CONTRADICTED


def test_b_reads_the_per_set_block_and_the_older_flat_pairs():
    evidence = {
        "fused_set_max_ulp": [1, 2],
        "eager_set_max_ulp": [1, 3],
        "fused_set_bad": [1],
        "eager_set_bad": [1, 2],
        "per_set": {
            "schema": b.PER_SET_SCHEMA,
            "sets": 2,
            "fused": {"cond_p99": [0.5, None], "rmse_vs_fp64": [1e-3, 2e-3], "ulp_p99": [1, 2, 3]},
            "eager": {"cond_p99": [0.4, 0.7], "rmse_vs_fp64": [1e-3, 1e-3], "ulp_p99": [1, 2]},
            "fused_allclose_eager_1e-4": [True, False],
        },
    }
    stats = b.per_set_statistics(evidence)
    assert set(stats) == {"ulp_max", "cond_p99", "rmse_vs_fp64"}  # mismatched lengths are not a pair
    assert np.isnan(stats["cond_p99"][0][1])  # null: no finite figure
    assert b.per_set_allclose(evidence).tolist() == [True, False]
    with pytest.raises(ValueError, match="schema"):
        b.per_set_statistics({"chain": "c", "dtype": "f16", "per_set": {"schema": "fusebench.B.per_set/0"}})


def _cell(dtype="f16", **columns) -> BCell:
    row = {"fused_ulp_p99": 1.0, "eager_ulp_p99": 1.0, "fused_ulp_max": 1.0, "eager_ulp_max": 1.0}
    return BCell(
        dtype, "uniform", row, {k: (np.asarray(f, float), np.asarray(e, float)) for k, (f, e) in columns.items()}
    )


def test_b_is_decided_on_the_conditioned_error_with_ulp_beside():
    """Fused 10 % worse in ULP (the cancelling outputs) and equal in conditioned error: the conditioned
    measure decides, and the ULP verdict is shown beside it, not hidden."""
    rng = np.random.default_rng(11)
    eager, fused = per_set(rng, 1000, 1024), per_set(rng, 1000, 1024, scale=1.1)
    cond = per_set(rng, 1000, 1024)["ulp_max"]
    v = words(b.decide(b.Chain("chain", (_cell(ulp_max=(fused["ulp_max"], eager["ulp_max"]), cond_max=(cond, cond)),))))
    assert v.outcome is Outcome.SUPPORTED, v.key_figure
    assert "Conditioned error decides" in v.condition and "no conditioned error figures" not in v.condition
    ulp = dict(v.beside)["ULP error (not deciding)"]
    assert ulp.outcome is Outcome.CONTRADICTED and "set-max ULP" in ulp.key_figure


def test_b_without_the_deciding_measure_says_which_measure_decided():
    rng = np.random.default_rng(12)
    eager, fused = per_set(rng, 1000, 1024), per_set(rng, 1000, 1024, scale=1.1)
    v = b.decide(b.Chain("chain", (_cell(ulp_max=(fused["ulp_max"], eager["ulp_max"])),)))
    assert v.outcome is Outcome.CONTRADICTED
    assert "no conditioned error figures" in words(v).condition


def test_b_leaves_out_sets_without_a_finite_figure_and_says_so():
    f, e = np.array([1.0, np.nan, 2.0, 3.0]), np.array([1.0, 1.0, np.inf, 3.0])
    [part] = b.cell_parts(_cell(cond_max=(f, e)), "conditioned")
    v = b.part_verdict(part)
    assert v.cases == 2 and "2 of 4 sets without a finite figure" in words(v).evidence


def _gamma_cells(rng, dtypes, fused_scale=1.0, sets=25) -> tuple[BCell, ...]:
    """Per dtype × distribution, per-set P99 and set-max conditioned errors, eager's and fused's drawn
    independently from one gamma distribution (fused's scaled): 3 parts per cell."""
    out = []
    for dtype in dtypes:
        for dist in ("uniform", "heavy"):
            columns = {}
            for name in ("cond_p99", "cond_max"):
                eager = rng.gamma(4.0, size=sets)
                columns[name] = (rng.gamma(4.0, size=sets) * fused_scale, eager)
            cell = _cell(dtype, **columns)
            cell.dist = dist
            out.append(cell)
    return tuple(out)


def test_b_holm_keeps_a_chain_of_8_parts_from_reading_contradicted_on_noise():
    """Fused and eager drawn from one distribution, 200 seeds, a chain of 8 deciding parts (f16, bf16
    × uniform, heavy × 2 statistics; the share of sets worse beside each set-max): CONTRADICTED in at
    most 5 % of seeds."""
    contradicted = 0
    for seed in range(200):
        chain = b.Chain("chain", _gamma_cells(np.random.default_rng(seed), ("f16", "bf16")))
        v = b.measure_verdict(list(chain.cells), "conditioned")
        assert (len(v.figures.parts), len(v.figures.beside)) == (8, 4)
        contradicted += v.outcome is Outcome.CONTRADICTED
    assert contradicted <= 10, f"{contradicted} of 200 seeds CONTRADICTED"


def test_b_holm_demotes_a_part_contradicted_alone_and_says_so():
    """A part whose own interval lies above the tolerance, among many parts where fused = eager, reads
    INCONCLUSIVE after Holm when its deeper quantile is not above the tolerance, and says why."""
    rng = np.random.default_rng(5)
    eager = rng.gamma(3.0, size=24)
    fused = eager * (1.12 + 0.15 * rng.standard_normal(24))
    alone = b.cell_parts(_cell(cond_p99=(fused, eager)))
    assert [p.outcome for p in alone] == [decision.Outcome.CONTRADICTED]
    quiet = [p for k in range(39) for p in b.cell_parts(_cell(cond_p99=(eager + k, eager + k)))]
    decision.holm(alone + quiet)
    (first, *rest) = [b.part_verdict(p) for p in alone + quiet]
    deep = float(np.quantile(alone[0].draws, 0.025 / 40))
    if deep > 0.05:
        assert first.outcome is Outcome.CONTRADICTED
    else:
        assert first.outcome is Outcome.INCONCLUSIVE and first.figures.holm_rule == (0.025 / 40, 40)
        assert "not after Holm over 40 parts" in words(first).key_figure
        assert "Holm's rule over the chain's 40 parts" in b.to_decide_text(first)
    assert all(v.outcome is Outcome.SUPPORTED for v in rest)
    decision.holm(alone)
    assert b.part_verdict(alone[0]).outcome is Outcome.CONTRADICTED  # one part: the plain rule


def test_b_judges_f32_and_a_chain_worse_in_f32_reads_contradicted_on_the_first_screen():
    """Fused worse in every f32 set (f16 and bf16 alike): the chain is CONTRADICTED, decided by an f32
    part, and the matrix cell that groups chains names it with its interval."""
    rng = np.random.default_rng(3)
    alike = _gamma_cells(rng, ("f16", "bf16"))
    f32 = []
    for cell in _gamma_cells(rng, ("f32",)):
        cell.per_set = {k: (e * 1.6 + 0.1, e) for k, (_, e) in cell.per_set.items()}
        f32.append(cell)
    v = b.decide(b.Chain("gelu", alike + tuple(f32)))
    assert v.outcome is Outcome.CONTRADICTED
    shown = words(v)
    assert shown.key_figure.startswith("f32/") and shown.decider[1] > 0
    quiet = words(b.decide(b.Chain("softmax", _gamma_cells(np.random.default_rng(4), ("f16",), sets=400))))
    cell = grouped_verdict([("gelu", shown), ("softmax", quiet)])
    assert cell.outcome is Outcome.CONTRADICTED
    assert cell.key_figure.startswith("gelu (f32/") and "[" in cell.key_figure


def test_torch_same_rule_known_answers():
    """rmse(fused) ≤ 3 · rmse(eager) + 1e-5 for f16, allclose passing first; f32 takes 2."""
    rmse = ([3.0e-3, 3.2e-3, 1.0, 2.0e-3], [1e-3, 1e-3, 1e-3, 1e-3])
    cell = _cell(rmse_vs_fp64=rmse)
    cell.allclose = np.array([False, False, True, False])
    assert b.torch_same_sets(cell).tolist() == [True, False, True, True]
    cell32 = _cell("f32", rmse_vs_fp64=rmse)
    cell32.allclose = np.zeros(4, bool)
    assert b.torch_same_sets(cell32).tolist() == [False, False, False, True]
    v = b.torch_same_rule([cell])
    assert v.outcome is Outcome.CONTRADICTED and v.cases == 4 and "1/4 sets" in words(v).evidence


# ---- E: the seed band's own uncertainty
def _runs(values: list[float]) -> dict[int, dict]:
    return {seed: {"eval_loss": [5.0, v]} for seed, v in enumerate(values)}


def test_e_gap_uses_the_prediction_interval_of_the_seeds():
    row = {"rows": 10, "excursions": 1, "max_gap_over_band": 1.5}
    eager = _runs([3.00, 3.01, 3.02])
    # just outside the range of the three seeds, well inside their 95 % prediction interval
    inside = e.decide_gap("bf16", eager, _runs([3.025]), row)
    assert inside.outcome is Outcome.SUPPORTED and words(inside).beside[0][1].outcome is Outcome.CONTRADICTED
    far = e.decide_gap("bf16", eager, _runs([3.2]), row)
    assert far.outcome is Outcome.CONTRADICTED
    assert e.decide_gap("bf16", _runs([3.0]), _runs([3.0]), row).outcome is Outcome.NA


class _OneSuite:
    """The one suite result evaluate_check reads (Results.get's interface)."""

    def __init__(self, data):
        self.data = data

    def get(self, suite, device):
        return type("SuiteResult", (), {"data": self.data})()


def test_the_fused_chain_speed_floor_reads_the_interleaved_interval_not_two_single_timings():
    """The gate's Engine-speed floor is the interleaved interval's low end: two single timings of eager and
    fused, far apart, neither pass nor fail it."""
    check = next(c for c in thresholds.checks() if c["claim"] == "Engine-speed")

    def run(low: float) -> dict:
        rows = [
            {"name": "Chain/path:eager/dtype:f16/n:4194304/real_time", "real_time": 1.0},
            {
                "name": "Chain/path:fused/dtype:f16/n:4194304/real_time",
                "real_time": 10.0,
                "interleaved_speedup_lo": low,
            },
            {
                "name": "Chain/path:fused_fma/dtype:f16/n:4194304/real_time",
                "real_time": 10.0,
                "interleaved_speedup_lo": 0.5,
            },
        ]
        return {"context": {}, "benchmarks": rows}

    [(subject, value, passed, _)] = evaluate_check(check, _OneSuite(run(check["value"] * 1.1)), "cpu")
    assert passed and "path:fused/" in subject and value == pytest.approx(check["value"] * 1.1)
    [(_, _, passed, _)] = evaluate_check(check, _OneSuite(run(check["value"] * 0.9)), "cpu")
    assert not passed


# ---- the claims × devices matrix of a run on several devices
def _shown(task, claim_id, member, statement, wording, device="cpu"):
    from reports.document import Cell

    return Cell(task, claim_id, member, statement, wording, device)


def test_claims_judged_per_member_share_a_row_by_id():
    from reports.document import Document
    from reports.matrix import rows

    ok = Wording(Outcome.SUPPORTED, "fine", "a condition", cases=1)
    doc = Document(None)
    doc.verdicts = [
        _shown("B", "B", "attention", "attention: fused error ≤ eager error", ok),
        _shown("B", "B", "layernorm", "layernorm: fused error ≤ eager error", ok, "torch"),
        _shown("E", "E-control", None, "fp32 control: eager and fused agree", ok),
        _shown("Engine", "Engine-speed", "Softmax", "fused Softmax is faster than eager", ok),
    ]
    several, _ = rows(doc, several_devices=True)
    by_claim = {(r.task, r.claim): r for r in several}
    assert by_claim[("B", "B")].statement == "fused error ≤ eager error (attention, layernorm)"
    assert by_claim[("E", "E-control")].statement == "fp32 control: eager and fused agree"
    # a group of one keeps its own claim, subject included
    assert by_claim[("Engine", "Engine-speed")].statement == "fused Softmax is faster than eager"
    # on one device every member has its row; every task without a verdict has one too
    one, _ = rows(doc, several_devices=False)
    assert [r.statement for r in one if r.task == "B"] == [
        "attention: fused error ≤ eager error",
        "layernorm: fused error ≤ eager error",
    ]
    assert {r.task for r in one} == {"A", "B", "C1", "C2", "C3", "D", "E", "S", "Engine"}


def test_a_grouped_cell_combines_its_members():
    from reports.matrix import grouped_verdict

    ok = Wording(Outcome.SUPPORTED, "fine", "a condition", cases=1)
    undecided = Wording(Outcome.INCONCLUSIVE, "spans", "a condition", cases=3, interval="[-1, 1]")
    v = grouped_verdict([("layernorm", ok), ("attention", undecided), ("softmax", ok)])
    assert v.outcome is Outcome.INCONCLUSIVE and v.key_figure == "attention; 2 SUPPORTED" and v.cases == 5
    na = Wording(Outcome.NA, "f16 is the full profile's", reason="f16 is the full profile's")
    v = grouped_verdict([("bf16", ok), ("f16", na)])
    assert v.outcome is Outcome.SUPPORTED and v.key_figure == "1/1; N/A: f16"
    bad = Wording(Outcome.CONTRADICTED, "worse", "a condition", cases=1)
    assert grouped_verdict([("a", ok), ("b", bad), ("c", undecided)]).outcome is Outcome.CONTRADICTED
    absent = Wording(Outcome.ABSENT, "same", reason="same kernel")
    v = grouped_verdict([("a", Wording(Outcome.NA, "no knob", reason="no knob")), ("b", absent)])
    assert v.outcome is Outcome.NA and v.reason


def _speed_rows(eager_ms: float, fused_ms: float, interleaved: tuple[float, float, float] | None):
    eager = {"real_time": eager_ms, "time_unit": "ms", "iterations": 13}
    fused = {"real_time": fused_ms, "time_unit": "ms", "iterations": 22}
    if interleaved:
        median, lo, hi = interleaved
        fused |= {
            "interleaved_rounds": 31,
            "interleaved_fused_wins": 20,
            "interleaved_speedup": median,
            "interleaved_speedup_lo": lo,
            "interleaved_speedup_hi": hi,
        }
    return eager, fused


@pytest.mark.parametrize(
    ("interval", "outcome"),
    [
        ((1.07, 1.05, 1.11), Outcome.SUPPORTED),
        ((0.9, 0.85, 0.95), Outcome.CONTRADICTED),
        ((1.01, 0.97, 1.04), Outcome.INCONCLUSIVE),
    ],
)
def test_speedup_is_decided_on_the_interleaved_interval_not_on_runs_timed_apart(interval, outcome):
    # timed apart, fused reads 0.84x eager; interleaved rounds decide
    eager, fused = _speed_rows(2.85, 3.39, interval)
    verdict = words(engine.decide_speedup("Softmax", eager, fused, None))
    assert verdict.outcome is outcome
    assert verdict.cases == 31
    assert "interleaved rounds" in verdict.condition
    assert "0.84" in verdict.evidence  # the runs timed apart stay in the evidence
    disagrees = outcome is Outcome.SUPPORTED  # 0.84x apart against an interval above 1
    assert ("disagree in direction" in verdict.evidence) is disagrees
    assert ("over 13 eager and 22 fused runs" in verdict.evidence) is disagrees


def test_speedup_without_interleaved_rounds_keeps_the_single_run_rule():
    eager, fused = _speed_rows(2.85, 3.39, None)
    assert engine.decide_speedup("Softmax", eager, fused, None).outcome is Outcome.CONTRADICTED
    eager, fused = _speed_rows(3.0, 3.1, None)
    assert engine.decide_speedup("Softmax", eager, fused, None).outcome is Outcome.INCONCLUSIVE


def e_speed_row(fused_ms: float, wins: float) -> dict:
    return {
        "timing_rounds": 24,
        "timing_steps_per_turn": 4,
        "eager_median_step_ms": 90.0,
        "fused_median_step_ms": fused_ms,
        "fused_speedup": 90.0 / fused_ms if fused_ms == fused_ms and fused_ms > 0 else 0.0,
        "fused_faster_rounds": wins,
        "control_ratio": 1.0,
    }


def test_e_speed_with_every_fused_step_skipped_is_na_not_slower():
    """Every fused step skipped (a NaN loss): no step time, so N/A with the reason, never '0×' CONTRADICTED."""
    verdict = e.decide_speed("bf16", e_speed_row(float("nan"), 0.0))
    assert verdict.outcome is Outcome.NA
    assert "skipped for a non-finite gradient" in words(verdict).reason
    assert e.decide_speed("bf16", e_speed_row(60.0, 1.0)).outcome is Outcome.SUPPORTED
