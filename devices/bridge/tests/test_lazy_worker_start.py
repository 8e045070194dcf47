"""A framework worker starts only for a device that runs: listing benchmarks starts none (on cpu, on
a framework device, with bench_engine_throughput's framework comparisons named), a run on cpu starts
none, and without a GPU the CUDA targets say so without starting one.

Every worker start is recorded: FUSEBENCH_PYTHON names a wrapper that appends its command line to a
log, then runs the project's Python. The control (asking whether xla is available, which only its
worker can answer) shows that the wrapper sees a start."""

from __future__ import annotations

import os
import pathlib
import re
import stat
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN", ROOT / "build" / "release" / "bin"))
SUITES = sorted(p for p in BIN.glob("bench_*") if p.is_file() and os.access(p, os.X_OK))


@pytest.fixture
def recorded(tmp_path: pathlib.Path):
    """(environment whose workers run through the recording wrapper, function giving the starts)"""
    log = tmp_path / "worker-starts.log"
    python = ROOT / ".venv" / "bin" / "python"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\necho "$*" >> "{log}"\nexec "{python if python.exists() else sys.executable}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, FUSEBENCH_PYTHON=str(wrapper), FUSEBENCH_KERNEL_CACHE=str(tmp_path / "cache"))
    env.pop("FUSEBENCH_WORKER_DIR", None)  # each worker a process of its own, none shared with a run

    def starts() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    return env, starts


def run(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], env=env, capture_output=True, text=True, timeout=timeout)


def gpu_visible() -> bool:
    return any(re.fullmatch(r"nvidia[0-9]+|dxg", p.name) for p in pathlib.Path("/dev").iterdir())


def test_the_suites_are_built():
    assert len(SUITES) >= 8, f"suite binaries in {BIN}: {[p.name for p in SUITES]}"


def test_listing_on_any_device_starts_no_worker(recorded):
    env, starts = recorded
    for suite in SUITES:
        for device in ("cpu", "torch", "xla", "torch/aot_eager"):
            listed = run(env, suite, f"--device={device}", "--benchmark_list_tests=true")
            assert listed.returncode == 0, f"{suite.name} on {device}: {listed.stderr}"
            assert listed.stdout.strip() or suite.name == "bench_cuda_codegen", (
                f"{suite.name} on {device} lists nothing"
            )
            assert starts() == [], f"listing {suite.name} on {device} started a worker: {starts()}"


def test_engine_comparisons_are_listed_without_a_worker(recorded):
    env, starts = recorded
    engine = BIN / "bench_engine_throughput"
    alone = run(env, engine, "--benchmark_list_tests=true").stdout.splitlines()
    assert alone and not [name for name in alone if "/device:" in name], alone
    compared = run(env, engine, "--compare-devices=torch,xla", "--benchmark_list_tests=true")
    assert compared.returncode == 0, compared.stderr
    names = compared.stdout.splitlines()
    for device in ("torch", "xla"):
        assert any(n.startswith("Chain/path:fused/") and f"/device:{device}/" in n for n in names), names
    assert starts() == []


def test_a_cpu_run_starts_no_worker(recorded, tmp_path):
    env, starts = recorded
    engine = BIN / "bench_engine_throughput"
    ran = run(env, engine, "--benchmark_filter=^CacheHit/", "--benchmark_min_time=0.01",
              f"--benchmark_out={tmp_path / 'out.json'}")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "CacheHit/kernel:chain" in ran.stdout
    assert starts() == []


def test_compare_devices_is_refused_where_it_does_not_apply(recorded):
    env, starts = recorded
    other = run(env, BIN / "bench_data_movement", "--compare-devices=torch", "--benchmark_list_tests=true")
    assert other.returncode == 2 and "bench_engine_throughput" in other.stderr, other.stderr
    gpu = run(env, BIN / "bench_engine_throughput", "--compare-devices=torch:cuda", "--benchmark_list_tests=true")
    assert gpu.returncode == 2 and "torch:cuda is not a framework device on the CPU" in gpu.stderr, gpu.stderr
    assert starts() == []


@pytest.mark.skipif(gpu_visible(), reason="a GPU is visible here: its CUDA targets start their workers")
def test_cuda_targets_without_a_gpu_start_no_worker(recorded):
    env, starts = recorded
    asked = run(env, BIN / "bench_data_movement", "--list-devices=torch:cuda,xla:cuda")
    assert asked.returncode == 0 and asked.stdout == "", asked
    for device in ("torch:cuda", "xla:cuda"):
        assert f"{device}: unavailable: cannot run device {device} here: no GPU is visible" in asked.stderr
    assert starts() == []


def test_asking_a_framework_device_starts_its_worker(recorded):
    env, starts = recorded
    asked = run(env, BIN / "bench_data_movement", "--list-devices=xla")
    assert asked.returncode == 0, asked.stderr
    assert [line for line in starts() if "fusebench_worker.py" in line and "xla_backend" in line], starts()
