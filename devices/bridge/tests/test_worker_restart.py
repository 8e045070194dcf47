"""A run's worker server that dies mid-suite is restarted once (devices/bridge/worker.cpp):
- the case it died in fails naming how (killed by signal 9) and quoting the last lines of its log;
- the next case runs on a restarted server, and says so (the counter worker_restarted);
- a second death in the same suite process is final: that case and every later one fail naming it.
The server dies when a torch.compile backend of this directory (dying_backend.py) kills it, as often
as the test asks. Skips where torch is not importable from the venv."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN", ROOT / "build" / "release" / "bin"))
# eager, eager, fused, fused, eager, eager, fused, fused (C1 cases of one dtype, two scalars)
FILTER = r"C1/dtype:f16/scalar:0\.(7|1)/shape:1024x1024/"
DEVICE = "torch/fusebench_test_dying"


@pytest.fixture(scope="module", autouse=True)
def needs_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torch is not importable from {sys.executable}: {e}")


def run_suite(tmp_path: pathlib.Path, deaths: int) -> tuple[list[dict], str]:
    binary = BIN / "bench_scalar_lowering"
    assert binary.exists(), f"{binary} is missing: build it with tools/build release"
    # a short directory: a Unix socket's path has 107 bytes
    worker_dir = pathlib.Path(tempfile.mkdtemp(prefix="fbw-", dir="/tmp"))
    counter = tmp_path / "deaths"
    counter.write_text(f"{deaths}\n")
    out = tmp_path / "out.json"
    env = dict(
        os.environ,
        FUSEBENCH_WORKER_DIR=str(worker_dir),
        FUSEBENCH_TORCH_BACKEND_MODULES=str(HERE / "dying_backend.py"),
        FUSEBENCH_TEST_DEATHS=str(counter),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
        FUSEBENCH_WORKER_OWNER=str(os.getpid()),  # the servers go when this test does
    )
    try:
        done = subprocess.run(
            [str(binary), f"--device={DEVICE}", f"--benchmark_filter={FILTER}", "--benchmark_min_time=0.001",
             f"--benchmark_out={out}", "--benchmark_out_format=json"],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    finally:
        for pidfile in worker_dir.glob("*.pid"):
            try:
                os.kill(int(pidfile.read_text()), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        shutil.rmtree(worker_dir, ignore_errors=True)
    assert out.exists(), f"{binary.name} wrote no results (exit {done.returncode}): {done.stderr[-3000:]}"
    benchmarks = json.loads(out.read_text())["benchmarks"]
    names = [b["name"] for b in benchmarks]
    assert len(benchmarks) == 8, f"expected 8 C1 cases for {FILTER}, got {names}"
    assert ["exec:fused" in n for n in names] == [False, False, True, True] * 2, f"unexpected case order: {names}"
    return benchmarks, done.stderr


def error(b: dict) -> str:
    return b.get("error_message", "") if b.get("error_occurred") else ""


def test_one_death_is_restarted(tmp_path):
    benchmarks, stderr = run_suite(tmp_path, deaths=1)
    assert not error(benchmarks[0]) and not error(benchmarks[1]), [error(b) for b in benchmarks[:2]]
    died = error(benchmarks[2])
    assert "killed by signal 9" in died, f"the case the server died in does not say it was killed by signal 9: {died!r}"
    assert "fusebench_test_dying: SIGKILL to the worker server" in died, (
        f"the case the server died in does not quote its log's last lines: {died!r}"
    )
    assert "restarted once, for the next request" in died, f"it does not say the worker is restarted: {died!r}"
    later = benchmarks[3:]
    assert not any(error(b) for b in later), f"cases after the restart failed: {[error(b) for b in later]}"
    assert later[0].get("worker_restarted") == 1, (
        f"the first case on the restarted worker does not say so (worker_restarted): {later[0]}"
    )
    assert not any("worker_restarted" in b for b in later[1:]), "a later case claims a restart"
    assert "restarting the Python worker once" in stderr, f"no restart line on stderr: {stderr[-2000:]}"


def test_a_second_death_is_final(tmp_path):
    benchmarks, _ = run_suite(tmp_path, deaths=2)
    assert "killed by signal 9" in error(benchmarks[2]), error(benchmarks[2])
    second = error(benchmarks[3])
    assert "killed by signal 9" in second and "not restarted again" in second, (
        f"the second death does not say it is final: {second!r}"
    )
    for b in benchmarks[4:]:
        message = error(b)
        assert "died again after its restart and is not restarted a second time" in message, (
            f"{b['name']}: a case after the second death does not name it: {message!r}"
        )
        assert not message.startswith("n/a"), message
