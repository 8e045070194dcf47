"""The worker's "time" request (fusebench_worker.py): W untimed warm-up calls, then N calls back to
back timed as one batch, synchronised once; the reply's call_ms is the batch over N, on the
backend's own clock where it has one (CUDA events), else on the host clock. Bad counts are refused
naming the field. Needs no framework: the worker runs counting_backend.py of this directory."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
BRIDGE = HERE.parent
CALL_S = 0.02  # each counting_backend call sleeps this long


@pytest.fixture
def worker(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-u", str(BRIDGE / "fusebench_worker.py"), "--backend", "counting_backend",
         "--backend-dir", str(HERE), "--target", "cpu"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    hello = json.loads(process.stdout.readline())
    assert hello["ready"], hello

    def ask(message):
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())

    yield ask
    ask({"cmd": "quit"})
    process.wait(timeout=30)


def time_request(tmp_path, fused, **fields):
    source = tmp_path / "graph.py"
    source.write_text("def graph_fn(x):\n    return (x * 2,)\n")
    x = tmp_path / "x.npy"
    np.save(x, np.arange(8, dtype=np.float32))
    settings = {"log": str(tmp_path / "calls.log"), "call_s": CALL_S, **fields.pop("settings", {})}
    return {
        "cmd": "time",
        "source": str(source),
        "fused": fused,
        "settings": settings,
        "key": "graph",
        "inputs": [{"name": "x", "path": str(x)}],
        "outputs": [str(tmp_path / "out0.npy")],
        **fields,
    }


def logged(tmp_path):
    return (tmp_path / "calls.log").read_text().split("\n")[:-1]


@pytest.mark.parametrize("fused", [False, True])
def test_warmups_then_a_batch_timed_on_the_host_clock(worker, tmp_path, fused):
    reply = worker(time_request(tmp_path, fused, warmup=2, calls=5))
    assert reply["ok"], reply
    compile_calls = 1 if fused else 0  # the worker's compile runs the graph once, synchronised
    # two warm-ups synchronised once, then five calls back to back synchronised once
    assert logged(tmp_path) == ["call", "sync"] * compile_calls + ["call"] * 2 + ["sync"] + ["call"] * 5 + ["sync"]
    assert (reply["calls"], reply["warmup"]) == (5, 2)
    assert reply["clock"].startswith("time.perf_counter_ns")
    assert CALL_S * 1e3 <= reply["call_ms"] < 20 * CALL_S * 1e3, reply
    assert reply["batch_ms"] == pytest.approx(5 * reply["call_ms"])
    assert reply["run_ms"] == reply["call_ms"]
    # the worker's own time holds the warm-ups and the batch
    assert reply["worker_ms"] >= reply["batch_ms"] + 2 * CALL_S * 1e3
    # the last call's outputs come back, as a run's do
    np.testing.assert_array_equal(np.load(tmp_path / "out0.npy"), np.arange(8, dtype=np.float32) * 2)


def test_a_backend_clock_times_the_batch(worker, tmp_path):
    reply = worker(time_request(tmp_path, True, warmup=1, calls=4, settings={"own_clock_ns": 3_000_000}))
    assert reply["ok"], reply
    assert reply["clock"] == "the backend's own clock"
    assert reply["call_ms"] == pytest.approx(3.0)  # the backend's figure, not the host's 20 ms sleeps
    assert logged(tmp_path)[-5:] == ["call"] * 4 + ["own clock"]


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"warmup": 1, "calls": 0}, "'calls'"),
        ({"warmup": 1}, "'calls'"),
        ({"warmup": 1, "calls": 2.5}, "'calls'"),
        ({"warmup": -1, "calls": 3}, "'warmup'"),
        ({"warmup": 1, "calls": 3, "repeat": 2}, "'repeat'"),
    ],
)
def test_bad_counts_are_refused_naming_the_field(worker, tmp_path, fields, named):
    reply = worker(time_request(tmp_path, False, **fields))
    assert not reply["ok"]
    assert named in reply["error"], reply["error"]
    assert not (tmp_path / "calls.log").exists(), "a refused request ran the graph"


@pytest.mark.parametrize("cmd", ["time", "run"])
def test_a_fused_callable_that_writes_into_its_inputs_is_refused_and_the_input_loaded_again(worker, tmp_path, cmd):
    request = time_request(tmp_path, True, warmup=1, calls=2, settings={"scribble_on_inputs": True, "call_s": 0})
    if cmd == "run":
        request = {k: v for k, v in request.items() if k not in ("warmup", "calls")} | {"cmd": "run"}
    reply = worker(request)
    assert not reply["ok"], reply
    assert re.match(
        r"ValueError: the fused \(counting_backend\) callable wrote into its inputs: x \([12] of 32 bytes\); its results",
        reply["error"],
    ), reply["error"]
    assert not (tmp_path / "out0.npy").exists()  # nothing half-written comes back
    # eager on the same file afterwards runs on the input as the file holds it, not as the callable left it
    eager = worker(time_request(tmp_path, False, warmup=0, calls=1, settings={"call_s": 0}))
    assert eager["ok"], eager
    np.testing.assert_array_equal(np.load(tmp_path / "out0.npy"), np.arange(8, dtype=np.float32) * 2)
