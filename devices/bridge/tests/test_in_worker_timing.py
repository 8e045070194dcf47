"""A framework device's benchmark time is its calls' time in the worker (back-to-back calls after
warm-ups), and the request's round trip beyond it is a counter of its own: a filtered case of the
engine throughput suite and one of C1's scalar-lowering suite on device torch (the CPU) carry
worker_call_ms (their manual time), worker_batch_calls, worker_warmup_calls and bridge_overhead_ms;
the engine's own device, timed in this process, carries none of the worker's. Skips where torch is
not installed (ctest reads the all-skipped session as skipped: FUSEBENCH_SKIP_RETURN_CODE). The
suites are FUSEBENCH_BIN's."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN") or HERE.parents[2] / "build" / "release" / "bin")
ENGINE = BIN / "bench_engine_throughput"
SCALAR_LOWERING = BIN / "bench_scalar_lowering"
# C1's cheapest framework case: torch eager, f32, the exact scalar
SCALAR_LOWERING_CASE = "^C1/dtype:f32/scalar:0.5/shape:1024x1024/exec:eager/lowering:immediate/"


def run_case(suite: pathlib.Path, device: str, filt: str, work: pathlib.Path) -> dict:
    out = work / f"{suite.name}@{device}.json"
    done = subprocess.run(
        [str(suite), "--profile=quick", f"--device={device}", f"--benchmark_filter={filt}",
         "--benchmark_min_time=0.01", f"--benchmark_out={out}", "--benchmark_out_format=json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, f"{suite.name} --device={device}: exit {done.returncode}: {done.stderr[-2000:]}"
    cases = json.loads(out.read_text())["benchmarks"]
    assert len(cases) == 1, f"{suite.name} --device={device} {filt}: {[c['name'] for c in cases]}"
    assert not cases[0].get("error_occurred"), cases[0].get("error_message")
    return cases[0]


@functools.cache
def torch_unavailable() -> str:
    """Why device torch cannot run here ('' where it can): asked once of one suite, and of torch alone
    (the listing starts a worker for each device it asks; both suites link the same device library)."""
    probe = subprocess.run([str(ENGINE), "--list-devices=torch"], capture_output=True, text=True)
    return "" if "torch" in probe.stdout.split() else probe.stderr.strip() or f"exit {probe.returncode}"


def needs_torch(suite: pathlib.Path) -> None:
    for binary in (suite, ENGINE):
        if not binary.exists():
            pytest.skip(f"no {binary}: build first (tools/build release)")
    if why := torch_unavailable():
        pytest.skip(f"device torch unavailable: {why}")


@pytest.fixture(scope="module")
def torch_case(tmp_path_factory) -> dict:
    needs_torch(ENGINE)
    return run_case(ENGINE, "torch", "^Chain/path:eager/", tmp_path_factory.mktemp("torch"))


@pytest.fixture(scope="module")
def scalar_lowering_torch_case(tmp_path_factory) -> dict:
    needs_torch(SCALAR_LOWERING)
    return run_case(SCALAR_LOWERING, "torch", SCALAR_LOWERING_CASE, tmp_path_factory.mktemp("c1"))


def assert_timed_in_the_worker(case: dict) -> None:
    assert case["worker_call_ms"] > 0
    # the benchmark's (manual) time is the in-worker per-call time
    assert case["real_time"] == pytest.approx(case["worker_call_ms"], rel=1e-6)
    assert case["worker_batch_calls"] >= 3
    assert case["worker_warmup_calls"] == 2
    # a request's round trip beyond the worker's time: the module, staged inputs, the reply, outputs
    assert case["bridge_overhead_ms"] > 0


def test_the_time_is_the_calls_in_the_worker(torch_case):
    assert torch_case["time_unit"] == "ms"
    assert_timed_in_the_worker(torch_case)
    # and so is the graph's kernel time
    assert torch_case["k0_ms"] == pytest.approx(torch_case["worker_call_ms"], rel=1e-6)


def test_the_host_overhead_is_a_counter_of_its_own(torch_case):
    assert torch_case["bridge_overhead_ms"] > 0


def test_the_engine_is_timed_here(tmp_path):
    if not ENGINE.exists():
        pytest.skip(f"no {ENGINE}: build first (tools/build release)")
    case = run_case(ENGINE, "cpu", "^Chain/path:eager/", tmp_path)
    assert not {"worker_call_ms", "worker_batch_calls", "bridge_overhead_ms"} & case.keys(), case


def test_scalar_lowering_times_its_framework_cases_in_the_worker(scalar_lowering_torch_case):
    assert scalar_lowering_torch_case["time_unit"] == "us"
    # Google Benchmark's time in microseconds, the counter in milliseconds
    case = scalar_lowering_torch_case | {"real_time": scalar_lowering_torch_case["real_time"] * 1e-3}
    assert_timed_in_the_worker(case)


def test_scalar_lowering_cpu_cases_are_timed_here(tmp_path):
    if not SCALAR_LOWERING.exists():
        pytest.skip(f"no {SCALAR_LOWERING}: build first (tools/build release)")
    case = run_case(SCALAR_LOWERING, "cpu", SCALAR_LOWERING_CASE.replace("1024x1024", "256x256"), tmp_path)
    assert not {"worker_call_ms", "worker_batch_calls", "bridge_overhead_ms"} & case.keys(), case
