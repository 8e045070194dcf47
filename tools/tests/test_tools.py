"""Tests of the report, gate and compare tools on small fixture runs (fixtures/run_ok: trimmed
real suite JSONs of the old one-file-per-suite layout; fixtures/quick_a and quick_b: two real quick
runs of the same commit, made one after the other on the same machine, trimmed). Regressions and
broken thresholds are injected into temporary copies. With --filtered-run, tools/run itself runs
twice with a --filter that most suites do not match."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FIXTURE = HERE / "fixtures" / "run_ok"
QUICK_A, QUICK_B = HERE / "fixtures" / "quick_a", HERE / "fixtures" / "quick_b"
REPORT_RUN = HERE / "fixtures" / "report_run"  # a trimmed quick run with B's per-set dumps
FILTER = "^D/subgraph:transpose/dtype:f16"
failures: list[str] = []


def check(condition: bool, what: str):
    if not condition:
        failures.append(what)


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


filtered_run = "--filtered-run" in sys.argv
with tempfile.TemporaryDirectory() as tmp_name:
    tmp = pathlib.Path(tmp_name)
    # ---- report renders from the fixtures
    rendered = copy_fixture(tmp, "render")
    r = run("reports.report", rendered)
    check(r.returncode == 0, f"report exit {r.returncode}: {r.stderr}")
    md = (rendered / "report.md").read_text() if (rendered / "report.md").exists() else ""
    for heading in ["## A —", "## C1 —", "## C2 —", "## C3 —", "## D —", "## S —", "## Engine —"]:
        check(heading in md, f"report lacks section {heading}")
    check(md.count("**Verdict") >= 6, "report has fewer than 6 verdict lines")
    check("SUPPORTED" in md, "no supported verdict in the fixture report")
    check(
        "no verdict" not in md.lower(), "a cell reads 'no verdict': every cell must be a verdict or N/A with its reason"
    )
    html = (rendered / "report.html").read_text() if (rendered / "report.html").exists() else ""
    check("data:image/png;base64," in html, "HTML report has no embedded plot")

    # ---- a device that realises no knob of a claim: the cell reads N/A with the reason, never SUPPORTED
    no_knob = tmp / "no_knob"  # the C2 suite alone: a quick render
    no_knob.mkdir()
    data = json.loads((FIXTURE / "bench_reduction_order.json").read_text())
    for b in data["benchmarks"]:
        b.update({"error_occurred": True, "error_message": "n/a on torch: the device exposes no reduction tile size"})
    (no_knob / "bench_reduction_order.json").write_text(json.dumps(data))
    r = run("reports.report", no_knob)
    md = (no_knob / "report.md").read_text() if r.returncode == 0 else ""
    c2_row = next((l for l in md.splitlines() if l.startswith("| [C2]")), "")
    check(
        "**N/A**" in c2_row and "no reduction tile size" in md and "SUPPORTED" not in c2_row,
        f"C2 with every case skipped: {c2_row or r.stderr[-500:]}",
    )

    # ---- gate: passes on the fixtures, fails when a threshold is broken
    r = run("tools.gate", FIXTURE)
    check(r.returncode == 0, f"gate on fixtures: exit {r.returncode}\n{r.stdout}")
    broken = copy_fixture(tmp, "broken")
    edit(broken / "bench_data_movement.json", "D/subgraph:transpose", "bit_equal", lambda v: 0)
    edit(broken / "bench_fusion_determinism.json", "A/", "distinct_hashes", lambda v: 2)
    r = run("tools.gate", broken)
    check(r.returncode == 1, f"gate on a broken run: exit {r.returncode}")
    check("FAIL  D/subgraph:transpose" in r.stdout, "gate does not name the failing D check")
    check("gate: 2 failing checks" in r.stdout, f"gate count: {r.stdout[-200:]}")

    # ---- gate: a share of the copy is taken against the fastest copy on at most as many threads (a
    # two-thread copy slower than the one-thread copy was held back by other work and must not flatter)
    slow_copy = copy_fixture(tmp, "slow_copy")
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
    check(
        r.returncode == 1
        and "FAIL  ErrorStats/dtype:f16" in r.stdout
        and "MemoryCopy/bytes:134217728/threads:1" in r.stdout,
        f"gate judged ErrorStats against a slowed two-thread copy:\n{r.stdout[-600:]}",
    )

    # ---- gate: task B by the paired bootstrap over the dumped per-set figures; a chain made 50 % worse
    # fused in every set of one distribution is CONTRADICTED and fails, the others still pass
    b_run = tmp / "b_run"
    shutil.copytree(REPORT_RUN, b_run)
    r = run("tools.gate", b_run)
    b_rows = [l for l in r.stdout.splitlines() if l.startswith("B: ")]
    check(
        len(b_rows) == 5 and all("  pass  " in l for l in b_rows),
        "gate's B rows on the report fixture:\n" + "\n".join(b_rows),
    )
    worse = next(b_run.glob("dumps/cpu/bench_accumulated_error/B_chain-layernorm_dtype-f16_dist-uniform_*.json"))
    evidence = json.loads(worse.read_text())
    for column in ("cond_p99", "cond_max"):  # the deciding measure's per-set figures
        evidence["per_set"]["fused"][column] = [1.5 * v for v in evidence["per_set"]["eager"][column]]
    worse.write_text(json.dumps(evidence))
    r = run("tools.gate", b_run)
    b_rows = [l for l in r.stdout.splitlines() if l.startswith("B: ")]
    check(
        any("FAIL  B layernorm" in l and "CONTRADICTED" in l for l in b_rows)
        and sum("  pass  " in l for l in b_rows) == 4,
        "gate on a B chain made worse:\n" + "\n".join(b_rows),
    )

    # ---- compare: identical runs pass; injected regressions are flagged
    r = run("tools.compare_runs", FIXTURE, FIXTURE)
    check(r.returncode == 0, f"compare identical: exit {r.returncode}\n{r.stdout[-500:]}\n{r.stderr[-500:]}")
    regressed = copy_fixture(tmp, "regressed")
    edit(regressed / "bench_precision_toolkit.json", "UlpDiff/dtype:bf16", "real_time", lambda v: v * 2)
    edit(regressed / "bench_precision_toolkit.json", "UlpDiff/dtype:bf16", "cpu_time", lambda v: v * 2)
    edit(regressed / "bench_scalar_lowering.json", "C1/dtype:f16/scalar:0.5", "frac_ulp0", lambda v: 0.9)
    r = run("tools.compare_runs", FIXTURE, regressed)
    check(r.returncode == 1, f"compare regressed: exit {r.returncode}")
    check(
        any("REGRESSION" in l and "UlpDiff/dtype:bf16" in l for l in r.stdout.splitlines()),
        "timing regression not flagged",
    )
    check("frac_ulp0" in r.stdout and "WORSE" in r.stdout, "precision regression not flagged")

    # ---- compare A/A: two real quick runs of the same commit are not a regression
    r = run("tools.compare_runs", QUICK_A, QUICK_B)
    check(
        r.returncode == 0,
        f"compare A/A on two quick runs: exit {r.returncode}\n"
        + "\n".join(l for l in r.stdout.splitlines() if "REGRESSION" in l or "WORSE" in l or "compare:" in l),
    )
    check("0 timing regressions, 0 precision regressions" in r.stdout, f"compare A/A summary: {r.stdout[-300:]}")
    check("U-test p=" not in r.stdout, "single-measurement runs must not claim a U-test")
    check("as a ratio to the run's yardstick" in r.stdout, "compare does not say it uses the yardstick")
    check("shown, not gated" in r.stdout, "compare does not say which timings are not gated")

    # ---- a real 2x slowdown of one benchmark is still flagged (single measurements, against the yardstick)
    slow = tmp / "slow"
    shutil.copytree(QUICK_B, slow)
    toolkit = next(slow.glob("precision_toolkit@*.json"))
    n = edit(toolkit, "UlpDiff/dtype:f16", "real_time", lambda v: v * 2)
    check(n == 1, f"fixture edit: {n} UlpDiff f16 rows")
    r = run("tools.compare_runs", QUICK_A, slow)
    flagged = [l for l in r.stdout.splitlines() if "REGRESSION" in l]
    check(r.returncode == 1, f"compare with a 2x slowdown: exit {r.returncode}")
    check(len(flagged) == 1 and "UlpDiff/dtype:f16" in flagged[0], f"2x slowdown flags: {flagged}")

    # ---- precision counters: exact; the smallest change of a ULP figure is a regression
    drift = tmp / "drift"
    shutil.copytree(QUICK_B, drift)
    c3 = next(drift.glob("approximations@*.json"))
    edit(c3, "C3/op:rsqrt/dtype:f32/mode:ieee", "ulp_max", lambda v: v * (1 + 1e-12))
    r = run("tools.compare_runs", QUICK_A, drift)
    check(
        r.returncode == 1 and "ulp_max" in r.stdout and "WORSE" in r.stdout,
        f"a 1e-12 relative change of ulp_max is not flagged: exit {r.returncode}",
    )

    # ---- with repetitions the U-test decides: noise is not a regression, a 2x slowdown is
    reps_a, reps_b, reps_slow = tmp / "reps_a", tmp / "reps_b", tmp / "reps_slow"
    for d in (reps_a, reps_b, reps_slow):
        d.mkdir()
    source = next(QUICK_A.glob("data_movement@*.json"))
    with_repetitions(source, reps_a / source.name, seed=1)
    with_repetitions(source, reps_b / source.name, seed=2)
    with_repetitions(source, reps_slow / source.name, seed=3)
    edit(reps_slow / source.name, "D/subgraph:transpose/dtype:f16", "real_time", lambda v: v * 2)
    r = run("tools.compare_runs", reps_a, reps_b)
    check(
        r.returncode == 0 and "U-test over repetitions" in r.stdout,
        f"U-test A/A: exit {r.returncode}\n{r.stdout[-400:]}",
    )
    r = run("tools.compare_runs", reps_a, reps_slow)
    flagged = [l for l in r.stdout.splitlines() if "REGRESSION" in l]
    check(
        r.returncode == 1 and flagged and all("D/subgraph:transpose/dtype:f16" in l for l in flagged),
        f"U-test 2x slowdown: exit {r.returncode}, flagged {flagged}",
    )

    # ---- partial runs: a run with some suites missing reports and compares, naming what did not run
    partial = tmp / "partial"
    shutil.copytree(QUICK_A, partial)
    for f in partial.glob("*.json"):
        if not f.name.startswith(("data_movement@", "run.json")):
            f.unlink()
    r = run("reports.report", partial)
    check(r.returncode == 0, f"report on a partial run: exit {r.returncode} {r.stderr}")
    md = (partial / "report.md").read_text() if (partial / "report.md").exists() else ""
    check(
        "Not run in this results directory" in md and "Not run:" in md, "partial report does not say what was not run"
    )
    r = run("tools.compare_runs", partial, QUICK_B)
    check(
        r.returncode == 0 and "only in the contender run" in r.stdout, f"compare partial vs full: exit {r.returncode}"
    )

    # ---- tools/run --filter: suites with no match leave no file; report and compare work on two such runs
    if filtered_run:
        runs_root = tmp / "filtered"
        made = []
        for _ in range(2):
            r = subprocess.run(
                [str(ROOT / "tools" / "run"), "--device", "cpu", "--filter", FILTER, "--out", str(runs_root)],
                capture_output=True,
                text=True,
            )
            check(r.returncode == 0, f"tools/run --filter: exit {r.returncode}\n{r.stdout[-800:]}\n{r.stderr[-800:]}")
            made.append((runs_root / "latest").resolve())
            time.sleep(1.1)  # run directories are named by the second
        for d in made:
            jsons = sorted(p.name for p in d.glob("*.json"))
            check(jsons == ["data_movement@cpu.json", "run.json"], f"filtered run files: {jsons}")
            check(all(p.stat().st_size > 0 for p in d.glob("*.json")), "a 0-byte JSON in a filtered run")
            check(
                (d / "report.html").exists() and "Not run" in (d / "report.md").read_text(),
                "filtered run has no report saying what did not run",
            )
            manifest = json.loads((d / "run.json").read_text())
            check(
                len(manifest["skipped"]) >= 6
                and all("no benchmark matches" in s["reason"] for s in manifest["skipped"]),
                f"run.json skipped: {manifest['skipped']}",
            )
        r = run("tools.compare_runs", made[0], made[1])
        check(r.returncode == 0, f"compare two filtered runs: exit {r.returncode}\n{r.stdout[-600:]}")
        check(
            "was not run" in r.stdout and "no benchmark matches" in r.stdout, "compare does not name the suites not run"
        )

    # ---- bad input: missing and malformed results
    for tool in ["tools.gate", "reports.report"]:
        r = run(tool, tmp / "nope")
        check(
            r.returncode == 2 and "nope" in r.stderr, f"{tool} on a missing directory: exit {r.returncode} {r.stderr}"
        )
    bad = tmp / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{ not json")
    for tool in ["tools.gate", "reports.report"]:
        r = run(tool, bad)
        check(r.returncode == 2 and "malformed JSON" in r.stderr, f"{tool} on malformed JSON: {r.stderr}")
    r = run("tools.compare_runs", bad / "x.json", FIXTURE)
    check(r.returncode == 2 and "x.json" in r.stderr, f"compare on malformed JSON: {r.stderr}")
    empty = tmp / "empty"
    empty.mkdir()
    (empty / "reduction_order@cpu.json").write_text("")
    for tool in ["tools.gate", "reports.report", "tools.compare_runs"]:
        r = run(tool, empty, *([FIXTURE] if "compare" in tool else []))
        check(r.returncode == 2 and "empty file" in r.stderr, f"{tool} on a 0-byte JSON: {r.stderr}")

for f in failures:
    print("FAIL:", f)
print(f"tools tests: {len(failures)} failures")
sys.exit(1 if failures else 0)
