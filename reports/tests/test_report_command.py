"""python -m reports.report RESULTS_DIR on fixture runs and on bad input: every section of a whole run,
N/A with the reason where a device realises no knob of a claim, what a partial run did not run, and
exit 2 naming the file on a missing, malformed or empty result."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

from reports.tests.fixture_runs import FIXTURES

ROOT = pathlib.Path(__file__).resolve().parents[2]


def report(run_dir: pathlib.Path) -> subprocess.CompletedProcess:
    """The report's command line, as tools/run runs it."""
    return subprocess.run(
        [sys.executable, "-m", "reports.report", str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_every_section_renders_from_a_whole_run(tmp_path):
    rendered = tmp_path / "render"
    shutil.copytree(FIXTURES / "run_ok", rendered)
    r = report(rendered)
    assert r.returncode == 0, f"report exit {r.returncode}: {r.stderr}"
    md = (rendered / "report.md").read_text()
    for heading in ["## A —", "## C1 —", "## C2 —", "## C3 —", "## D —", "## S —", "## Engine —"]:
        assert heading in md, f"report lacks section {heading}"
    assert md.count("**Verdict") >= 6, "report has fewer than 6 verdict lines"
    assert "SUPPORTED" in md, "no supported verdict in the fixture report"
    assert "no verdict" not in md.lower(), (
        "a cell reads 'no verdict': every cell must be a verdict or N/A with its reason"
    )
    html = (rendered / "report.html").read_text()
    assert "data:image/png;base64," in html, "HTML report has no embedded plot"


def test_a_claim_whose_knob_the_device_lacks_reads_na_with_the_reason(tmp_path):
    """A device that realises no knob of a claim: the cell reads N/A with the reason, never SUPPORTED."""
    no_knob = tmp_path / "no_knob"  # the C2 suite alone: a quick render
    no_knob.mkdir()
    data = json.loads((FIXTURES / "run_ok" / "bench_reduction_order.json").read_text())
    for b in data["benchmarks"]:
        b.update({"error_occurred": True, "error_message": "n/a on torch: the device exposes no reduction tile size"})
    (no_knob / "bench_reduction_order.json").write_text(json.dumps(data))
    r = report(no_knob)
    assert r.returncode == 0, r.stderr[-500:]
    md = (no_knob / "report.md").read_text()
    c2_row = next((l for l in md.splitlines() if l.startswith("| [C2]")), "")
    assert "**N/A**" in c2_row and "no reduction tile size" in md and "SUPPORTED" not in c2_row, (
        f"C2 with every case skipped: {c2_row}"
    )


def test_a_partial_run_says_what_was_not_run(tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(FIXTURES / "quick_a", partial)
    for f in partial.glob("*.json"):
        if not f.name.startswith(("data_movement@", "run.json")):
            f.unlink()
    # a run that ran only D: its run.json says so (a file run.json says ran, missing, is an integrity failure:
    # tools/tests/test_results_integrity.py)
    manifest = json.loads((partial / "run.json").read_text())
    manifest["ran"] = [e for e in manifest["ran"] if e["suite"] == "data_movement"]
    (partial / "run.json").write_text(json.dumps(manifest))
    r = report(partial)
    assert r.returncode == 0, f"report on a partial run: exit {r.returncode} {r.stderr}"
    md = (partial / "report.md").read_text()
    assert "Not run in this results directory" in md and "Not run:" in md, (
        "partial report does not say what was not run"
    )


def test_bad_input_exits_2_naming_the_file(tmp_path):
    r = report(tmp_path / "nope")
    assert r.returncode == 2 and "nope" in r.stderr, f"report on a missing directory: exit {r.returncode} {r.stderr}"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{ not json")
    r = report(bad)
    assert r.returncode == 2 and "malformed JSON" in r.stderr, f"report on malformed JSON: {r.stderr}"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "reduction_order@cpu.json").write_text("")
    r = report(empty)
    assert r.returncode == 2 and "empty file" in r.stderr, f"report on a 0-byte JSON: {r.stderr}"
