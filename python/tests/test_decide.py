"""judge's decision rule is task B's: the port in fusebench._decide gives the same intervals and
verdicts as reports/bootstrap.py and reports/claims/b.py (imported from the checkout), with the
constants of tools/thresholds.json, and Holm's rule across parts demotes the same parts."""

import json
import pathlib
import sys

import numpy as np
import pytest
from fusebench import _decide as D

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def suite():
    if not (ROOT / "reports" / "claims" / "b.py").exists():
        pytest.skip("not run from a checkout: reports/ is not there")
    sys.path.insert(0, str(ROOT))
    try:
        from reports import bootstrap
        from reports.claims import b, verdict
    finally:
        sys.path.remove(str(ROOT))
    return bootstrap, b, verdict


def test_constants_are_thresholds_json():
    b = json.loads((ROOT / "tools" / "thresholds.json").read_text())["B"]
    assert (D.RESAMPLES, D.CONFIDENCE, D.SEED) == (b["resamples"], b["confidence"], b["seed"])
    assert D.STATISTICS == b["statistics"]
    assert D.DECIDING_MEASURE == b["deciding_measure"]
    assert {k: v for k, v in b["torch_same"].items() if k != "about"} == D.TORCH_SAME


CASES = [
    (np.linspace(1.0, 2.0, 32), np.linspace(1.0, 2.0, 32)[::-1] * 0.97),  # a few % worse, mixed
    (np.full(16, 3.0), np.full(16, 2.0)),  # 50 % worse everywhere
    (np.random.default_rng(1).gamma(2.0, size=40), np.random.default_rng(2).gamma(2.0, size=40)),
    (np.array([1.0, 5.0]), np.array([2.0, 1.0])),  # two sets: wide
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_port_equals_the_suite(suite, case):
    bootstrap, b, _ = suite
    fused, eager = CASES[case]
    for effect in ("relative", "share_worse"):
        ours = D.paired_interval(fused, eager, effect)
        theirs = bootstrap.paired_interval(fused, eager, effect)
        assert (ours.estimate, ours.low, ours.high, ours.sets) == (
            theirs.estimate,
            theirs.low,
            theirs.high,
            theirs.sets,
        )
        for tol in (0.0, 0.05, 0.1, 0.5):
            assert ours.sets_to_decide(tol) == theirs.sets_to_decide(tol)
            verdict = b.statistic_verdict("x", theirs, tol)
            assert D.statistic_outcome(ours, tol).value == verdict.outcome.value
    # judge_statistic: the same parts as b_cell_verdicts on a cell carrying that statistic
    cell = b.BCell("bf16", "uniform", {}, {"cond_max": (np.asarray(fused, float), np.asarray(eager, float))})
    theirs = b.cell_verdicts(cell)
    ours = D.judge_statistic("out", "cond_max", fused, eager)
    assert [p.final.value for p in ours] == [v.outcome.value for _, v, _ in theirs]
    assert [p.interval.high - p.tolerance for p in ours] == pytest.approx([m for _, _, m in theirs], abs=0)


def test_combine_is_the_suites(suite):
    _, _, verdict = suite
    O = D.Outcome
    for outcomes in ([O.SUPPORTED], [O.SUPPORTED, O.INCONCLUSIVE], [O.INCONCLUSIVE, O.CONTRADICTED]):
        assert D.combine(outcomes).value == verdict.combine([verdict.Outcome(o.value) for o in outcomes]).value


def test_holm_one_part_is_the_suites_rule_and_many_parts_are_stricter():
    rng = np.random.default_rng(5)
    eager = rng.gamma(3.0, size=24)
    fused = eager * (1.12 + 0.15 * rng.standard_normal(24))  # about 12 % worse, noisy
    alone = D.judge_statistic("out", "cond_p99", fused, eager)
    D.holm(alone)
    assert alone[0].outcome is D.Outcome.CONTRADICTED and alone[0].final is D.Outcome.CONTRADICTED
    # the same part among 40 parts where compiled = eager: Holm compares its 0.025/40 quantile
    many = alone + [p for k in range(39) for p in D.judge_statistic(f"o{k}", "cond_p99", eager, eager)]
    for p in many:
        p.holm = None
    D.holm(many)
    low_quantile = float(np.quantile(many[0].draws, 0.025 / 40))
    expected = D.Outcome.CONTRADICTED if low_quantile > 0.05 else D.Outcome.INCONCLUSIVE
    assert many[0].final is expected
    assert all(p.final is D.Outcome.SUPPORTED for p in many[1:])
    if expected is D.Outcome.INCONCLUSIVE:
        assert "Holm" in many[0].holm_note and "Holm" in many[0].sentence()


def test_holm_is_the_suites(suite):
    """The same parts, judged by the port and by reports/claims/b.py, come out of Holm's rule alike."""
    _, b, _ = suite
    rng = np.random.default_rng(7)
    columns = []
    for k in range(6):
        eager = rng.gamma(3.0, size=20)
        columns.append((eager * (1.0 + 0.04 * k + 0.1 * rng.standard_normal(20)), eager))
    ours = [p for k, (f, e) in enumerate(columns) for p in D.judge_statistic(f"o{k}", "cond_max", f, e)]
    D.holm(ours)
    parts = [v for f, e in columns for _, v, _ in b.cell_verdicts(b.BCell("f16", "uniform", {}, {"cond_max": (f, e)}))]
    theirs = b.holm(parts)
    assert [p.final.value for p in ours] == [v.outcome.value for v in theirs]
