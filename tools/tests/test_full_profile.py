"""The plan's own configuration keeps its results: `tools/run --profile full` on each suite's smallest full-profile case
runs end to end, exits 0, keeps every suite's results (Google Benchmark's repetition aggregates, NaN tokens
included) and writes a report whose cells are decided, not "suite failed".

Task A is left out, and said so: its smallest full case is the plan's [8, 2048, 4096] with 1,000 runs per round,
hours on this machine (`tools/cost`); A's quick profile runs in tools.run_faults and the suites' smoke tests.
The case per suite is the cheapest instance that still exercises its full-profile path (sizes, set counts,
repetitions)."""

from __future__ import annotations

import json
import os
import subprocess

from reports.results import load_results
from tools.tests.built import ROOT, needs_suites, work_dir

SMALLEST_FULL_CASE = {
    "precision_toolkit": r"UlpDiff/dtype:f16/",
    "accumulated_error": r"B/chain:mul_add_gelu_mul/dtype:f16/dist:uniform/",
    "scalar_lowering": r"C1/dtype:f16/scalar:0\.7/shape:1024x1024/exec:eager/lowering:immediate/",
    "reduction_order": r"C2/out:f16/acc:f32/shape:1x16384/tile:256/",
    "approximations": r"C3/op:rsqrt/dtype:f16/mode:ieee/iters:0/shape:",
    "data_movement": r"D/subgraph:transpose/dtype:f16/shape:2x16x32/",
    "training_alignment": r"E/Control/",
    "engine_throughput": r"Chain/path:eager/dtype:f16/",
}


@needs_suites
def test_the_full_profile_keeps_every_suites_results(tmp_path):
    out = work_dir(tmp_path, "full-profile")
    filt = "^(" + "|".join(SMALLEST_FULL_CASE.values()) + ")"
    env = dict(os.environ, FUSEBENCH_KERNEL_CACHE=os.environ.get("FUSEBENCH_KERNEL_CACHE", str(out / "kernel-cache")))
    proc = subprocess.run(
        [
            str(ROOT / "tools" / "run"),
            "--no-build",
            "--profile",
            "full",
            "--device",
            "cpu",
            "--filter",
            filt,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = (out / "latest").resolve()
    results = load_results(run)  # strict: every file the run's own, every counter in its domain
    ran = {suite for suite, device in results.by_key if device == "cpu"}
    assert set(SMALLEST_FULL_CASE) <= ran, f"missing results: {set(SMALLEST_FULL_CASE) - ran}"
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["profile"] == "full" and manifest["failed"] == []
    toolkit = (run / "precision_toolkit@cpu.json").read_text()
    assert '"aggregate_name": "median"' in toolkit  # the full profile's repetitions, aggregated
    # Google Benchmark's cv of a zero mean: the token that made every full-profile suite remove its own results
    assert any("NaN" in p.read_text() for p in run.glob("*@cpu.json"))
    first_screen = (run / "report.md").read_text().split("Contents:", 1)[0]
    assert "suite failed" not in first_screen and "Failed" not in first_screen, first_screen
