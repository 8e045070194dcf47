"""torch.compile backends named on the command line (--device=torch/BACKEND), end to end through the suites:
- torch/aot_eager, AOTAutograd with no code generation, the unfused negative control of the whole suite: over A, B,
  C1 and D every figure of the fused path equals eager's;
- a backend this test registers itself (fma_inductor_backend.py: Inductor with FP contraction "fast"), reached
  through FUSEBENCH_TORCH_BACKEND_MODULES: a filtered C1 runs through it, and its kernels' compile commands carry
  the changed option;
- an unknown backend name stops the suite with the list of known ones.
Skips where torch is not installed (ctest reads the all-skipped session as skipped: FUSEBENCH_SKIP_RETURN_CODE).
The suites are FUSEBENCH_BIN's (default build/release/bin)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN") or HERE.parents[2] / "build" / "release" / "bin")
OWN_BACKEND = "fusebench_test_inductor_fma"


@pytest.fixture(scope="module")
def bin_dir() -> pathlib.Path:
    if not (BIN / "bench_data_movement").exists():
        pytest.skip(f"no suites in {BIN}: build first (tools/build release)")
    probe = subprocess.run([str(BIN / "bench_data_movement"), "--list-devices"], capture_output=True, text=True)
    if "torch" not in probe.stdout.split():
        pytest.skip(f"device torch unavailable: {probe.stderr.strip()}")
    return BIN


def run_suite(binary: pathlib.Path, device: str, filt: str, work: pathlib.Path, env: dict | None = None) -> dict:
    """The suite's JSON, every benchmark matched and none errored (else the test fails naming them)."""
    out = work / f"{binary.name}@{device.replace('/', '-')}.json"
    dump = work / "dumps" / device.replace("/", "-") / binary.name
    command = [
        str(binary),
        "--profile=quick",
        f"--device={device}",
        f"--benchmark_filter={filt}",
        f"--dump-dir={dump}",
        "--benchmark_min_time=0.01",
        f"--benchmark_out={out}",
        "--benchmark_out_format=json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"{binary.name} --device={device}: exit {done.returncode}: {done.stderr[-2000:]}"
    data = json.loads(out.read_text())
    assert data["benchmarks"], f"{binary.name} --device={device}: no benchmark matched {filt}"
    errors = [f"{b['name']}: {b.get('error_message')}" for b in data["benchmarks"] if b.get("error_occurred")]
    assert not errors, errors
    return data


def test_an_unknown_backend_is_refused_with_the_known_ones(bin_dir):
    done = subprocess.run(
        [str(bin_dir / "bench_data_movement"), "--device=torch/no_such_backend", "--benchmark_list_tests=true"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr[-600:]
    assert "no_such_backend" in done.stderr and "aot_eager" in done.stderr


def test_aot_eager_is_deterministic_with_no_negative_control(bin_dir, tmp_path):
    a = run_suite(bin_dir / "bench_fusion_determinism", "torch/aot_eager", "^A/dtype:f16/threads:2/", tmp_path)
    for b in a["benchmarks"]:
        assert b.get("distinct_hashes") == 1 and b.get("max_ulp_vs_round1") == 0, f"{b['name']} not deterministic"
        # no Inductor option exists on aot_eager: the control is absent, and A says so
        assert b.get("negative_control_knob") == -1, f"{b['name']}: a negative control ran"


def test_aot_eager_fused_equals_eager_in_b(bin_dir, tmp_path):
    b_run = run_suite(
        bin_dir / "bench_accumulated_error",
        "torch/aot_eager",
        "^B/chain:mul_add_gelu_mul/dtype:f16/dist:uniform/",
        tmp_path,
    )
    for b in b_run["benchmarks"]:
        for figure in ("ulp_p50", "ulp_p99", "ulp_max", "abs_err_max", "rel_err_p99", "setmax_p99"):
            assert b.get(f"fused_{figure}") == b.get(f"eager_{figure}"), f"{b['name']}: fused_{figure} != eager's"


def test_aot_eager_fused_equals_eager_in_c1_and_d(bin_dir, tmp_path):
    c1 = run_suite(bin_dir / "bench_scalar_lowering", "torch/aot_eager", "^C1/dtype:f16/scalar:0.7/", tmp_path)
    rows = {b["name"]: b for b in c1["benchmarks"]}
    fused_rows = [n for n in rows if "/exec:fused/" in n]
    assert len(fused_rows) == 2, fused_rows
    for name in fused_rows:
        eager = rows[name.replace("/exec:fused/", "/exec:eager/")]
        for figure in ("frac_ulp0", "ulp_max", "ulp_p99", "ulp_mean", "ulp_max_between"):
            assert rows[name][figure] == eager[figure], f"{name}: {figure} {rows[name][figure]} != {eager[figure]}"
    d = run_suite(bin_dir / "bench_data_movement", "torch/aot_eager", "^D/subgraph:transpose/dtype:f16/", tmp_path)
    differ = [b["name"] for b in d["benchmarks"] if b.get("bit_equal") != 1]
    assert not differ, f"D on aot_eager: fused differs from eager in {differ}"


def test_a_backend_of_our_own_reaches_the_compiler(bin_dir, tmp_path):
    env = {
        "FUSEBENCH_TORCH_BACKEND_MODULES": str(HERE / "fma_inductor_backend.py"),
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache"),
    }
    c1 = run_suite(
        bin_dir / "bench_scalar_lowering",
        f"torch/{OWN_BACKEND}",
        "^C1/dtype:f16/scalar:0.7/.*/exec:fused/lowering:immediate/",
        tmp_path,
        env,
    )
    assert len(c1["benchmarks"]) == 1
    dumps = tmp_path / "dumps" / f"torch-{OWN_BACKEND}" / "bench_scalar_lowering"
    evidence_files = sorted(dumps.glob("C1_*exec-fused*.json"))
    assert evidence_files, f"no C1 evidence written under {dumps}"
    for path in evidence_files:
        evidence = json.loads(path.read_text())["immediate"]["evidence"]
        assert evidence.get("backend") == OWN_BACKEND
        commands = [k.get("command_line", "") for k in evidence.get("kernels", [])]
        assert commands and all("-ffp-contract=fast" in c for c in commands), commands
