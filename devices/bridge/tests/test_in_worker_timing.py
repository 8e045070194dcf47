"""A framework device's benchmark time is its calls' time in the worker (back-to-back calls after
warm-ups), and the request's round trip beyond it is a counter of its own: a filtered engine
throughput case on device torch (the CPU) carries worker_call_ms (its manual time),
worker_batch_calls, worker_warmup_calls and bridge_overhead_ms; the engine's own device, timed in
this process, carries none of the worker's. Skips where torch is not installed (ctest reads the
all-skipped session as skipped: FUSEBENCH_SKIP_RETURN_CODE). The suite is FUSEBENCH_BIN's."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parent
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN") or HERE.parents[2] / "build" / "release" / "bin")
SUITE = BIN / "bench_engine_throughput"


def run_case(device: str, filt: str, work: pathlib.Path) -> dict:
    out = work / f"engine@{device}.json"
    done = subprocess.run(
        [str(SUITE), "--profile=quick", f"--device={device}", f"--benchmark_filter={filt}",
         "--benchmark_min_time=0.01", f"--benchmark_out={out}", "--benchmark_out_format=json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, f"--device={device}: exit {done.returncode}: {done.stderr[-2000:]}"
    cases = json.loads(out.read_text())["benchmarks"]
    assert len(cases) == 1, f"--device={device} {filt}: {[c['name'] for c in cases]}"
    assert not cases[0].get("error_occurred"), cases[0].get("error_message")
    return cases[0]


@pytest.fixture(scope="module")
def torch_case(tmp_path_factory) -> dict:
    if not SUITE.exists():
        pytest.skip(f"no {SUITE}: build first (tools/build release)")
    probe = subprocess.run([str(SUITE), "--list-devices"], capture_output=True, text=True)
    if "torch" not in probe.stdout.split():
        pytest.skip(f"device torch unavailable: {probe.stderr.strip()}")
    return run_case("torch", "^Chain/path:eager/", tmp_path_factory.mktemp("torch"))


def test_the_time_is_the_calls_in_the_worker(torch_case):
    assert torch_case["time_unit"] == "ms"
    assert torch_case["worker_call_ms"] > 0
    # the benchmark's (manual) time is the in-worker per-call time, and so is the graph's kernel time
    assert torch_case["real_time"] == pytest.approx(torch_case["worker_call_ms"], rel=1e-6)
    assert torch_case["k0_ms"] == pytest.approx(torch_case["worker_call_ms"], rel=1e-6)
    assert torch_case["worker_batch_calls"] >= 3
    assert torch_case["worker_warmup_calls"] == 2


def test_the_host_overhead_is_a_counter_of_its_own(torch_case):
    # a request's round trip beyond the worker's time: the module, staged inputs, the reply, outputs
    assert torch_case["bridge_overhead_ms"] > 0


def test_the_engine_is_timed_here(tmp_path):
    if not SUITE.exists():
        pytest.skip(f"no {SUITE}: build first (tools/build release)")
    case = run_case("cpu", "^Chain/path:eager/", tmp_path)
    assert not {"worker_call_ms", "worker_batch_calls", "bridge_overhead_ms"} & case.keys(), case
