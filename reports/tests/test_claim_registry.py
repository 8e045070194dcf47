"""The claim registry (reports/claims/): every claim id in the matrix has exactly one module, every
threshold is filed under exactly one claim and read by that claim alone, and no claim's id is derived
from its wording (the matrix's rows stay the same when every statement is reworded)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys

import pytest

from reports import claims, document, matrix, report
from reports.claims import thresholds
from reports.tests.fixture_runs import RUNS, make_run

ID = re.compile(r"^[A-Z][A-Za-z0-9]*(-[a-z]+)?$")


def modules_owning(claim_id: str) -> list[str]:
    return [f.__name__ for f in claims.FAMILIES if claim_id in f.CLAIMS or claim_id == f.TASK.id]


def without_figure_files(monkeypatch) -> None:
    """The sections still build every figure (and read what they read for it); only drawing each to a
    PNG, three quarters of a report's time, is left out: the verdicts and the matrix never read it."""
    monkeypatch.setattr(document.Section, "figure", lambda self, fig, name, caption: None)


def matrix_of(name: str, tmp_path, monkeypatch) -> tuple[list[matrix.Row], list]:
    """The matrix rows and the cells (verdicts shown) of a fixture run's report."""
    without_figure_files(monkeypatch)
    seen = {}
    real = matrix.verdict_table

    def capture(doc, results):
        seen["rows"] = matrix.rows(doc, len(results.devices) > 1)[0]
        seen["cells"] = list(doc.verdicts)
        return real(doc, results)

    monkeypatch.setattr(report, "verdict_table", capture)
    report.render(make_run(name, tmp_path))
    return seen["rows"], seen["cells"]


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_claim_id_in_the_matrix_has_exactly_one_module(name, tmp_path, monkeypatch):
    rows, cells = matrix_of(name, tmp_path, monkeypatch)
    ids = {r.claim for r in rows} | {c.claim for c in cells}
    assert ids, "no row"
    for claim_id in ids:
        assert len(modules_owning(claim_id)) == 1, f"{claim_id}: owned by {modules_owning(claim_id)}"
    for c in cells:  # a verdict's claim belongs to the task whose section shows it
        assert claims.family(c.claim).TASK.id == c.task, c


def test_claim_ids_are_names_not_words():
    for family in claims.FAMILIES:
        for claim_id, claim in family.CLAIMS.items():
            assert claim.id == claim_id and ID.match(claim_id), f"{family.__name__}: {claim_id!r}"
            assert claim_id not in claim.statement and claim.statement.lower() != claim_id.lower()
        assert ID.match(family.TASK.id)


def test_every_threshold_is_filed_under_exactly_one_claim():
    entries = thresholds.owners()
    assert len(entries) == len({e for e, _ in entries}), "an entry listed twice"
    for entry, claim_id in entries:
        assert len(modules_owning(claim_id)) == 1, (
            f"{entry}: filed under {claim_id!r}, owned by {modules_owning(claim_id)}"
        )
    checks = thresholds.checks()
    assert all(sum(c in thresholds.of(claim_id).checks for claim_id in claims.OWNERS) == 1 for c in checks)


def test_every_threshold_is_read_by_its_own_claim_alone(tmp_path, monkeypatch):
    """Rendering every fixture run, each claim module asks for its own ids' thresholds only (thresholds.of),
    and nothing but the gate's checks module reads the file whole."""
    reads: dict[str, set[str]] = {}
    real = thresholds.of

    def recording(claim_id, path=None):
        # the calling frame alone: inspect.stack() would read the source lines of every frame, at every read
        caller = inspect.getmodule(sys._getframe(1)).__name__
        reads.setdefault(claim_id, set()).add(caller)
        return real(claim_id, path)

    monkeypatch.setattr(thresholds, "of", recording)
    without_figure_files(monkeypatch)
    for name in RUNS:
        report.render(make_run(name, tmp_path))
    assert reads, "no threshold read"
    for claim_id, callers in reads.items():
        owner = claims.family(claim_id).__name__
        assert callers == {owner}, f"thresholds of {claim_id} read by {sorted(callers)}, owned by {owner}"
    for family in claims.FAMILIES:
        source = inspect.getsource(family)
        assert "thresholds.load(" not in source and "thresholds.checks(" not in source, family.__name__


def test_the_matrix_does_not_read_a_claims_wording(tmp_path, monkeypatch):
    """Every statement reworded: the same rows, the same members, the same cells."""
    before, _ = matrix_of("three_devices", tmp_path / "before", monkeypatch)
    for family in claims.FAMILIES:
        reworded = {
            i: dataclasses.replace(c, statement=f"claim {n} reworded: x")
            for n, (i, c) in enumerate(family.CLAIMS.items())
        }
        monkeypatch.setattr(family, "CLAIMS", reworded)
        monkeypatch.setattr(family, "statement", lambda v, n=family.__name__: f"{n}: {v.member or ''} reworded")
    after, _ = matrix_of("three_devices", tmp_path / "after", monkeypatch)

    def shape(rows):
        return [(r.task, r.claim, [key for _, key in r.members]) for r in rows]

    assert shape(before) == shape(after)
    assert [r.statement for r in before] != [r.statement for r in after]
