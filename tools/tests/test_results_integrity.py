"""Results that are not what the run wrote never become verdicts: each planted wrong (a counter edited to NaN, ∞ or a
negative count, a duplicated row, a file from another run, a file missing or edited after the run) makes the
report's verdict it bears on INCONCLUSIVE naming file, case and field, and the tools (report, gate, compare)
exit 2 naming it. Google Benchmark's own NaN (the cv of a zero mean, in an aggregate row no claim reads) is
read as it is written."""

from __future__ import annotations

import json
import pathlib

import pytest

from reports import integrity, report
from reports.results import IntegrityError, load_results
from reports.tests.fixture_runs import make_run
from tools import compare_runs, gate

D_FILE = "data_movement@cpu.json"
D_ROW = "D/subgraph:transpose/dtype:f16/shape:2x16x32/device:cpu"
RUN_ID = "20261206T190000Z"


def with_identity(run: pathlib.Path) -> pathlib.Path:
    """The fixture run as tools/run now writes it: every suite file names the run, run.json lists their digests."""
    manifest = json.loads((run / "run.json").read_text())
    files = {}
    for path in sorted(run.glob("*@*.json")):
        data = json.loads(path.read_text())
        data["context"]["fusebench_run_id"] = RUN_ID
        path.write_text(json.dumps(data))
        files[path.name] = integrity.sha256_of(path)
    manifest |= {"run_id": RUN_ID, "files": files}
    (run / "run.json").write_text(json.dumps(manifest))
    return run


@pytest.fixture
def run(tmp_path) -> pathlib.Path:
    return with_identity(make_run("quick_a", tmp_path))


def edit(run: pathlib.Path, name: str, change, refresh_digest: bool = True) -> None:
    """change(data) in place; the digest in run.json follows unless a hand edit is what is planted."""
    path = run / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    if refresh_digest:
        manifest = json.loads((run / "run.json").read_text())
        manifest["files"][name] = integrity.sha256_of(path)
        (run / "run.json").write_text(json.dumps(manifest))


def row(data: dict, name: str) -> dict:
    return next(b for b in data["benchmarks"] if b["name"] == name)


def d_cell(run: pathlib.Path) -> str:
    md = report.render(run)[0].read_text()
    return next(line for line in md.splitlines() if line.startswith("| [D](#task-d)"))


def tools_refuse(run: pathlib.Path, words: str, capsys) -> None:
    assert report.main([str(run)]) == 2
    assert gate.main([str(run)]) == 2
    assert compare_runs.main([str(run), str(run)]) == 2
    err = capsys.readouterr().err
    assert words in err


def test_a_clean_run_with_identity_reads_as_before(run):
    results = load_results(run)
    assert results.integrity == [] and len(results.by_key) == 4
    assert "SUPPORTED" in d_cell(run)


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("mismatches", float("nan"), "field mismatches: NaN where a number is expected"),
        ("bit_equal", float("inf"), "field bit_equal: +∞ where a finite number is expected"),
        ("mismatches", -3, "field mismatches: -3: a count cannot be negative"),
        ("bit_equal", 1.5, "field bit_equal: 1.5: a fraction must lie within [0, 1]"),
    ],
)
def test_a_counter_outside_its_domain_is_inconclusive_and_named(run, capsys, field, value, words):
    edit(run, D_FILE, lambda data: row(data, D_ROW).__setitem__(field, value))
    with pytest.raises(IntegrityError, match=words.replace("+", r"\+").replace("[", r"\[").replace("]", r"\]")):
        load_results(run)
    cell = d_cell(run)
    assert "INCONCLUSIVE" in cell and "1 failed" in cell, cell
    md = (run / "report.md").read_text()
    assert "Results integrity: 1 problem makes the verdicts they bear on INCONCLUSIVE" in md.split("Contents:", 1)[0]
    assert f"{D_FILE}: case {D_ROW}: {words}" in md
    tools_refuse(run, f"{D_FILE}: case {D_ROW}: {words}", capsys)


def test_a_duplicated_case_is_not_counted_twice(run, capsys):
    edit(run, D_FILE, lambda data: data["benchmarks"].append(dict(row(data, D_ROW))))
    cell = d_cell(run)
    assert "INCONCLUSIVE" in cell and "1 failed" in cell, cell
    results = load_results(run, strict=False)
    names = [b["name"] for b in results.get("data_movement", "cpu").data["benchmarks"]]
    assert names.count(D_ROW) == 1
    tools_refuse(run, f"case {D_ROW}: the case appears twice in this file", capsys)


def test_a_file_from_another_run_is_refused(run, tmp_path, capsys):
    other = with_identity(make_run("quick_b", tmp_path / "other"))
    edit(other, D_FILE, lambda data: data["context"].__setitem__("fusebench_run_id", "20261201T080000Z"))
    (run / D_FILE).write_bytes((other / D_FILE).read_bytes())
    cell = d_cell(run)
    assert "INCONCLUSIVE" in cell and "suite failed" in cell, cell
    tools_refuse(run, f"{D_FILE}: written by run 20261201T080000Z, not by this run ({RUN_ID})", capsys)


def test_a_file_edited_by_hand_is_refused(run, capsys):
    # a value inside every domain: only the digest can tell
    edit(run, D_FILE, lambda data: row(data, D_ROW).__setitem__("real_time", 1.0), refresh_digest=False)
    tools_refuse(run, f"{D_FILE}: its SHA-256 is not the one run.json recorded", capsys)
    assert "INCONCLUSIVE" in d_cell(run)


def test_a_listed_file_that_is_missing_is_inconclusive_not_na(run, capsys):
    (run / D_FILE).unlink()
    cell = d_cell(run)
    assert "INCONCLUSIVE" in cell and "N/A" not in cell, cell
    tools_refuse(run, f"{D_FILE}: run.json lists it, but the file is missing", capsys)


def test_a_run_without_identity_still_names_a_suite_that_ran_without_its_file(tmp_path, capsys):
    run = make_run("quick_a", tmp_path)  # run.json as written before run identities: no run_id, no files
    (run / D_FILE).unlink()
    assert "INCONCLUSIVE" in d_cell(run)
    tools_refuse(run, f"{D_FILE}: run.json says this suite ran, but its file is missing", capsys)


def test_google_benchmarks_nan_in_an_aggregate_no_claim_reads_is_accepted(run):
    def add_repetition_aggregates(data):
        base = row(data, D_ROW)
        for aggregate, value in (("median", base["real_time"]), ("cv", float("nan"))):
            data["benchmarks"].append(
                dict(base, name=f"{D_ROW}_{aggregate}", run_type="aggregate", aggregate_name=aggregate, real_time=value)
            )

    edit(run, D_FILE, add_repetition_aggregates)
    assert "NaN" in (run / D_FILE).read_text()  # the token Google Benchmark writes
    assert load_results(run).integrity == []


def relabel(run: pathlib.Path, context_field: str, manifest_field: str, value: str) -> pathlib.Path:
    """Every suite file's context and run.json saying `value` (the run as another profile or commit wrote it)."""
    for path in run.glob("*@*.json"):
        data = json.loads(path.read_text())
        data["context"][context_field] = value
        path.write_text(json.dumps(data))
    manifest = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(manifest | {manifest_field: value}))
    return run


def test_compare_refuses_other_profiles_and_runs_with_no_case_in_common(tmp_path, capsys):
    base = make_run("quick_a", tmp_path / "a")
    full = relabel(make_run("quick_b", tmp_path / "b"), "fusebench_profile", "profile", "full")
    assert compare_runs.main([str(base), str(full)]) == 2
    assert "the runs ran different profiles" in capsys.readouterr().err

    renamed = make_run("quick_b", tmp_path / "c")
    for path in renamed.glob("*@*.json"):
        data = json.loads(path.read_text())
        for b in data["benchmarks"]:
            b["name"] = b["name"].replace("/", "/other_", 1)
            b["run_name"] = b["name"]
        path.write_text(json.dumps(data))
    assert compare_runs.main([str(base), str(renamed)]) == 2
    assert "no case in common" in capsys.readouterr().err


def test_compare_says_when_commits_differ(tmp_path, capsys):
    base = make_run("quick_a", tmp_path / "a")
    contender = relabel(make_run("quick_b", tmp_path / "b"), "git_revision", "git_revision", "feedfacecafe")
    compare_runs.main([str(base), str(contender)])
    assert "compare: the runs differ in commits: base" in capsys.readouterr().out


def test_merge_refuses_a_shard_whose_counter_was_edited(tmp_path):
    from tools import shards
    from tools.tests.test_shards import listing, write_shard

    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 3, keys) for i in (1, 2, 3)]
    planted = sorted(dirs[1].glob("*@*.json"))[0]
    data = json.loads(planted.read_text())
    data["benchmarks"][0]["ulp_max"] = float("nan")
    planted.write_text(json.dumps(data))
    case = data["benchmarks"][0]["name"]
    with pytest.raises(IntegrityError, match=f"{planted.name}: case {case}: field ulp_max: NaN"):
        shards.merge(dirs, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()
