"""Tests of the gate and compare tools on small fixture runs (reports/tests/fixtures: run_ok, trimmed
real suite JSONs of the old one-file-per-suite layout; quick_a and quick_b, two real quick runs of the
same commit, made one after the other on the same machine, trimmed; report_run, a trimmed quick run
with B's per-set dumps). Regressions and broken thresholds are injected into temporary copies. Where
the suites are built, tools/run itself runs twice with a --filter that most suites do not match."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

from reports.tests.fixture_runs import FIXTURES
from tools.tests.built import ROOT, needs_suites

FIXTURE = FIXTURES / "run_ok"
QUICK_A, QUICK_B = FIXTURES / "quick_a", FIXTURES / "quick_b"
REPORT_RUN = FIXTURES / "report_run"  # a trimmed quick run with B's per-set dumps
FILTER = "^D/subgraph:transpose/dtype:f16"


def run(module: str, *args) -> subprocess.CompletedProcess:
    """python -m MODULE with the repository root on the path, as the tools/ entry points run it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, env=env)


def copy_fixture(tmp: pathlib.Path, name: str) -> pathlib.Path:
    target = tmp / name
    shutil.copytree(FIXTURE, target)
    return target


def edit(path: pathlib.Path, prefix: str, field: str, fn) -> int:
    data = json.loads(path.read_text())
    edited = 0
    for b in data["benchmarks"]:
        if b["name"].startswith(prefix):
            b[field] = fn(b[field])
            edited += 1
    path.write_text(json.dumps(data))
    return edited


def with_repetitions(source: pathlib.Path, target: pathlib.Path, seed: int, count: int = 9, spread: float = 0.08):
    """A suite JSON as if run with --benchmark_repetitions=count: each benchmark's row repeated with
    multiplicative noise of +-spread (a fixed-seed LCG, so the test is reproducible)."""
    data = json.loads(source.read_text())
    state = seed
    rows = []
    for b in data["benchmarks"]:
        for i in range(count):
            state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
            factor = 1 + spread * ((state >> 11) / 2**53 * 2 - 1)
            rows.append(
                {
                    **b,
                    "repetitions": count,
                    "repetition_index": i,
                    "real_time": b["real_time"] * factor,
                    "cpu_time": b["cpu_time"] * factor,
                }
            )
    data["benchmarks"] = rows
    target.write_text(json.dumps(data))


# ---- gate
def test_gate_passes_the_fixtures_and_fails_a_broken_threshold(tmp_path):
    r = run("tools.gate", FIXTURE)
    assert r.returncode == 0, f"gate on fixtures: exit {r.returncode}\n{r.stdout}"
    broken = copy_fixture(tmp_path, "broken")
    edit(broken / "bench_data_movement.json", "D/subgraph:transpose", "bit_equal", lambda v: 0)
    edit(broken / "bench_fusion_determinism.json", "A/", "distinct_hashes", lambda v: 2)
    r = run("tools.gate", broken)
    assert r.returncode == 1, f"gate on a broken run: exit {r.returncode}"
    assert "FAIL  D/subgraph:transpose" in r.stdout, "gate does not name the failing D check"
    assert "gate: 2 failing checks" in r.stdout, f"gate count: {r.stdout[-200:]}"


def test_gate_takes_a_share_against_the_fastest_copy_on_at_most_as_many_threads(tmp_path):
    """A two-thread copy slower than the one-thread copy was held back by other work and must not flatter."""
    slow_copy = copy_fixture(tmp_path, "slow_copy")
    toolkit_json = slow_copy / "bench_precision_toolkit.json"
    data = json.loads(toolkit_json.read_text())
    one_copy = next(b for b in data["benchmarks"] if b["name"].startswith("MemoryCopy/") and b.get("threads", 1) == 1)
    data["benchmarks"].append(
        {
            **one_copy,
            "name": one_copy["name"].replace("threads:1", "threads:2"),
            "threads": 2,
            "bytes_per_second": one_copy["bytes_per_second"] / 4,
        }
    )
    for b in data["benchmarks"]:
        if b["name"].startswith("ErrorStats/dtype:f16"):
            b["threads"] = 2  # 1.5 % of the one-thread copy, 6 % of the slowed two-thread one
            b["bytes_per_second"] = one_copy["bytes_per_second"] * 0.015
    toolkit_json.write_text(json.dumps(data))
    r = run("tools.gate", slow_copy)
    assert (
        r.returncode == 1
        and "FAIL  ErrorStats/dtype:f16" in r.stdout
        and "MemoryCopy/bytes:134217728/threads:1" in r.stdout
    ), f"gate judged ErrorStats against a slowed two-thread copy:\n{r.stdout[-600:]}"


def test_gate_judges_b_by_the_paired_bootstrap(tmp_path):
    """Task B by the paired bootstrap over the dumped per-set figures; a chain made 50 % worse fused in
    every set of one distribution is CONTRADICTED and fails, the others still pass."""
    b_run = tmp_path / "b_run"
    shutil.copytree(REPORT_RUN, b_run)
    r = run("tools.gate", b_run)
    b_rows = [l for l in r.stdout.splitlines() if l.startswith("B: ")]
    assert len(b_rows) == 5 and all("  pass  " in l for l in b_rows), (
        "gate's B rows on the report fixture:\n" + "\n".join(b_rows)
    )
    worse = next(b_run.glob("dumps/cpu/bench_accumulated_error/B_chain-layernorm_dtype-f16_dist-uniform_*.json"))
    evidence = json.loads(worse.read_text())
    for column in ("cond_p99", "cond_max"):  # the deciding measure's per-set figures
        evidence["per_set"]["fused"][column] = [1.5 * v for v in evidence["per_set"]["eager"][column]]
    worse.write_text(json.dumps(evidence))
    r = run("tools.gate", b_run)
    b_rows = [l for l in r.stdout.splitlines() if l.startswith("B: ")]
    assert (
        any("FAIL  B layernorm" in l and "CONTRADICTED" in l for l in b_rows)
        and sum("  pass  " in l for l in b_rows) == 4
    ), "gate on a B chain made worse:\n" + "\n".join(b_rows)


# ---- compare
def test_compare_passes_identical_runs_and_flags_injected_regressions(tmp_path):
    r = run("tools.compare_runs", FIXTURE, FIXTURE)
    assert r.returncode == 0, f"compare identical: exit {r.returncode}\n{r.stdout[-500:]}\n{r.stderr[-500:]}"
    regressed = copy_fixture(tmp_path, "regressed")
    edit(regressed / "bench_precision_toolkit.json", "UlpDiff/dtype:bf16", "real_time", lambda v: v * 2)
    edit(regressed / "bench_precision_toolkit.json", "UlpDiff/dtype:bf16", "cpu_time", lambda v: v * 2)
    edit(regressed / "bench_scalar_lowering.json", "C1/dtype:f16/scalar:0.5", "frac_ulp0", lambda v: 0.9)
    r = run("tools.compare_runs", FIXTURE, regressed)
    assert r.returncode == 1, f"compare regressed: exit {r.returncode}"
    assert any("REGRESSION" in l and "UlpDiff/dtype:bf16" in l for l in r.stdout.splitlines()), (
        "timing regression not flagged"
    )
    assert "frac_ulp0" in r.stdout and "WORSE" in r.stdout, "precision regression not flagged"


def test_compare_two_quick_runs_of_one_commit_is_no_regression():
    r = run("tools.compare_runs", QUICK_A, QUICK_B)
    assert r.returncode == 0, f"compare A/A on two quick runs: exit {r.returncode}\n" + "\n".join(
        l for l in r.stdout.splitlines() if "REGRESSION" in l or "WORSE" in l or "compare:" in l
    )
    assert "0 timing regressions, 0 precision regressions" in r.stdout, f"compare A/A summary: {r.stdout[-300:]}"
    assert "U-test p=" not in r.stdout, "single-measurement runs must not claim a U-test"
    assert "as a ratio to the run's yardstick" in r.stdout, "compare does not say it uses the yardstick"
    assert "shown, not gated" in r.stdout, "compare does not say which timings are not gated"


def test_compare_flags_a_real_2x_slowdown_against_the_yardstick(tmp_path):
    slow = tmp_path / "slow"
    shutil.copytree(QUICK_B, slow)
    toolkit = next(slow.glob("precision_toolkit@*.json"))
    n = edit(toolkit, "UlpDiff/dtype:f16", "real_time", lambda v: v * 2)
    assert n == 1, f"fixture edit: {n} UlpDiff f16 rows"
    r = run("tools.compare_runs", QUICK_A, slow)
    flagged = [l for l in r.stdout.splitlines() if "REGRESSION" in l]
    assert r.returncode == 1, f"compare with a 2x slowdown: exit {r.returncode}"
    assert len(flagged) == 1 and "UlpDiff/dtype:f16" in flagged[0], f"2x slowdown flags: {flagged}"


def test_compare_takes_precision_counters_exactly(tmp_path):
    """The smallest change of a ULP figure is a regression."""
    drift = tmp_path / "drift"
    shutil.copytree(QUICK_B, drift)
    c3 = next(drift.glob("approximations@*.json"))
    edit(c3, "C3/op:rsqrt/dtype:f32/mode:ieee", "ulp_max", lambda v: v * (1 + 1e-12))
    r = run("tools.compare_runs", QUICK_A, drift)
    assert r.returncode == 1 and "ulp_max" in r.stdout and "WORSE" in r.stdout, (
        f"a 1e-12 relative change of ulp_max is not flagged: exit {r.returncode}"
    )


def test_compare_with_repetitions_decides_by_the_u_test(tmp_path):
    """Noise is not a regression, a 2x slowdown is."""
    reps_a, reps_b, reps_slow = tmp_path / "reps_a", tmp_path / "reps_b", tmp_path / "reps_slow"
    for d in (reps_a, reps_b, reps_slow):
        d.mkdir()
    source = next(QUICK_A.glob("data_movement@*.json"))
    with_repetitions(source, reps_a / source.name, seed=1)
    with_repetitions(source, reps_b / source.name, seed=2)
    with_repetitions(source, reps_slow / source.name, seed=3)
    edit(reps_slow / source.name, "D/subgraph:transpose/dtype:f16", "real_time", lambda v: v * 2)
    r = run("tools.compare_runs", reps_a, reps_b)
    assert r.returncode == 0 and "U-test over repetitions" in r.stdout, (
        f"U-test A/A: exit {r.returncode}\n{r.stdout[-400:]}"
    )
    r = run("tools.compare_runs", reps_a, reps_slow)
    flagged = [l for l in r.stdout.splitlines() if "REGRESSION" in l]
    assert r.returncode == 1 and flagged and all("D/subgraph:transpose/dtype:f16" in l for l in flagged), (
        f"U-test 2x slowdown: exit {r.returncode}, flagged {flagged}"
    )


def test_compare_a_partial_run_names_what_is_only_on_one_side(tmp_path):
    partial = tmp_path / "partial"
    shutil.copytree(QUICK_A, partial)
    for f in partial.glob("*.json"):
        if not f.name.startswith(("data_movement@", "run.json")):
            f.unlink()
    manifest = json.loads((partial / "run.json").read_text())  # a run of D alone says so
    manifest["ran"] = [e for e in manifest["ran"] if e["suite"] == "data_movement"]
    (partial / "run.json").write_text(json.dumps(manifest))
    r = run("tools.compare_runs", partial, QUICK_B)
    assert r.returncode == 0 and "only in the contender run" in r.stdout, (
        f"compare partial vs full: exit {r.returncode}"
    )


# ---- bad input
def test_bad_input_exits_2_naming_the_file(tmp_path):
    r = run("tools.gate", tmp_path / "nope")
    assert r.returncode == 2 and "nope" in r.stderr, f"gate on a missing directory: exit {r.returncode} {r.stderr}"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{ not json")
    r = run("tools.gate", bad)
    assert r.returncode == 2 and "malformed JSON" in r.stderr, f"gate on malformed JSON: {r.stderr}"
    r = run("tools.compare_runs", bad / "x.json", FIXTURE)
    assert r.returncode == 2 and "x.json" in r.stderr, f"compare on malformed JSON: {r.stderr}"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "reduction_order@cpu.json").write_text("")
    for tool in ["tools.gate", "tools.compare_runs"]:
        r = run(tool, empty, *([FIXTURE] if "compare" in tool else []))
        assert r.returncode == 2 and "empty file" in r.stderr, f"{tool} on a 0-byte JSON: {r.stderr}"


# ---- tools/run itself
@needs_suites
def test_filtered_run_leaves_no_file_for_unmatched_suites_and_reports_and_compares(tmp_path):
    """tools/run --filter, twice: suites with no match leave no file; report and compare work on the two runs."""
    runs_root = tmp_path / "filtered"
    made = []
    for _ in range(2):
        r = subprocess.run(
            # the suites as ctest built them: a build here would rebuild whatever the tree holds mid-test
            [str(ROOT / "tools" / "run"), "--no-build", "--device", "cpu", "--filter", FILTER, "--out", str(runs_root)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, f"tools/run --filter: exit {r.returncode}\n{r.stdout[-800:]}\n{r.stderr[-800:]}"
        made.append((runs_root / "latest").resolve())
        time.sleep(1.1)  # run directories are named by the second
    for d in made:
        jsons = sorted(p.name for p in d.glob("*.json"))
        assert jsons == ["data_movement@cpu.json", "run.json"], f"filtered run files: {jsons}"
        assert all(p.stat().st_size > 0 for p in d.glob("*.json")), "a 0-byte JSON in a filtered run"
        assert (d / "report.html").exists() and "Not run" in (d / "report.md").read_text(), (
            "filtered run has no report saying what did not run"
        )
        manifest = json.loads((d / "run.json").read_text())
        assert len(manifest["skipped"]) >= 6 and all(
            "no benchmark matches" in s["reason"] for s in manifest["skipped"]
        ), f"run.json skipped: {manifest['skipped']}"
    r = run("tools.compare_runs", made[0], made[1])
    assert r.returncode == 0, f"compare two filtered runs: exit {r.returncode}\n{r.stdout[-600:]}"
    assert "was not run" in r.stdout and "no benchmark matches" in r.stdout, "compare does not name the suites not run"
