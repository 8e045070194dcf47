"""Tests of the report, gate and compare tools on small fixture runs (fixtures/run_ok: trimmed
real suite JSONs). Regressions and broken thresholds are injected into temporary copies."""
from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FIXTURE = HERE / "fixtures" / "run_ok"
failures: list[str] = []


def check(condition: bool, what: str):
    if not condition:
        failures.append(what)


def run(script: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *map(str, args)], capture_output=True, text=True)


def copy_fixture(tmp: pathlib.Path, name: str) -> pathlib.Path:
    target = tmp / name
    shutil.copytree(FIXTURE, target)
    return target


def edit(path: pathlib.Path, prefix: str, field: str, fn):
    data = json.loads(path.read_text())
    for b in data["benchmarks"]:
        if b["name"].startswith(prefix):
            b[field] = fn(b[field])
    path.write_text(json.dumps(data))


with tempfile.TemporaryDirectory() as tmp_name:
    tmp = pathlib.Path(tmp_name)
    # ---- report renders from the fixtures
    rendered = copy_fixture(tmp, "render")
    r = run("reports/report.py", rendered)
    check(r.returncode == 0, f"report exit {r.returncode}: {r.stderr}")
    md = (rendered / "report.md").read_text() if (rendered / "report.md").exists() else ""
    for heading in ["## A —", "## C1 —", "## C2 —", "## C3 —", "## D —", "## S —", "## Engine —"]:
        check(heading in md, f"report lacks section {heading}")
    check(md.count("**Verdict") >= 6, "report has fewer than 6 verdict lines")
    check("SUPPORTED" in md, "no supported verdict in the fixture report")
    html = (rendered / "report.html").read_text() if (rendered / "report.html").exists() else ""
    check("data:image/png;base64," in html, "HTML report has no embedded plot")

    # ---- gate: passes on the fixtures, fails when a threshold is broken
    r = run("tools/gate.py", FIXTURE)
    check(r.returncode == 0, f"gate on fixtures: exit {r.returncode}\n{r.stdout}")
    broken = copy_fixture(tmp, "broken")
    edit(broken / "bench_data_movement.json", "D/subgraph:transpose", "bit_equal", lambda v: 0)
    edit(broken / "bench_fusion_determinism.json", "A/", "distinct_hashes", lambda v: 2)
    r = run("tools/gate.py", broken)
    check(r.returncode == 1, f"gate on a broken run: exit {r.returncode}")
    check("FAIL  D/subgraph:transpose" in r.stdout, "gate does not name the failing D check")
    check("gate: 2 failing checks" in r.stdout, f"gate count: {r.stdout[-200:]}")

    # ---- compare: identical runs pass; injected regressions are flagged
    r = run("tools/compare_runs.py", FIXTURE, FIXTURE)
    check(r.returncode == 0, f"compare identical: exit {r.returncode}\n{r.stdout[-500:]}\n{r.stderr[-500:]}")
    regressed = copy_fixture(tmp, "regressed")
    edit(regressed / "bench_engine_throughput.json", "Chain/path:fused", "real_time", lambda v: v * 2)
    edit(regressed / "bench_engine_throughput.json", "Chain/path:fused", "cpu_time", lambda v: v * 2)
    edit(regressed / "bench_scalar_lowering.json", "C1/dtype:f16/scalar:0.5", "frac_ulp0", lambda v: 0.9)
    r = run("tools/compare_runs.py", FIXTURE, regressed)
    check(r.returncode == 1, f"compare regressed: exit {r.returncode}")
    check("REGRESSION" in r.stdout and "Chain/path:fused" in r.stdout, "timing regression not flagged")
    check("frac_ulp0" in r.stdout and "WORSE" in r.stdout, "precision regression not flagged")

    # ---- bad input: missing and malformed results
    for tool in ["tools/gate.py", "reports/report.py"]:
        r = run(tool, tmp / "nope")
        check(r.returncode == 2 and "nope" in r.stderr, f"{tool} on a missing directory: exit {r.returncode} {r.stderr}")
    bad = tmp / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{ not json")
    for tool in ["tools/gate.py", "reports/report.py"]:
        r = run(tool, bad)
        check(r.returncode == 2 and "malformed JSON" in r.stderr, f"{tool} on malformed JSON: {r.stderr}")
    r = run("tools/compare_runs.py", bad / "x.json", FIXTURE)
    check(r.returncode == 2 and "x.json" in r.stderr, f"compare on malformed JSON: {r.stderr}")

for f in failures:
    print("FAIL:", f)
print(f"tools tests: {len(failures)} failures")
sys.exit(1 if failures else 0)
