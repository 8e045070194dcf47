"""tools/run's processes under real faults: what a run starts dies with it, no wait on a worker blocks it, and
two runs never share a directory.

- SIGKILL of tools/run alone, mid-suite (a scheduler's kill of the shell; the suite and the worker servers lead
  process groups of their own): the suite and the worker server, stuck in a framework call, are gone within
  PROMPT_S (the suite's parent-death signal; the server waits on the run's pidfd).
- A FUSEBENCH_PYTHON wrapper that hangs before it starts Python: the run says every quarter of
  FUSEBENCH_WORKER_START_TIMEOUT that the worker is still starting and gives up at the timeout, naming the
  command and the variable; SIGTERM in the middle stops the run at once. Nothing of the wrapper is left.
- Two runs started in the same second: the second takes <stamp>-2 and leaves the first run alone; two runs
  started together both complete, each in its own directory.
- A framework call that never answers: the case fails at FUSEBENCH_WORKER_REQUEST_TIMEOUT, naming it, and the
  worker is killed; the run ends (exit 3).
- OUT/latest a real directory: exit 2 at once, naming it; nothing runs.
- The run's identity: run.json's run_id is the directory's name, every suite file carries it
  (fusebench_run_id), and run.json lists each suite file with its SHA-256.

A framework device's worker here is the real fusebench_worker.py with a backend of the test's (HANGING_BACKEND,
through a FUSEBENCH_PYTHON that swaps it in): it needs no framework, and its compile blocks for good in a C call
that no signal interrupts."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tools.tests.built import ROOT, needs_suites

QUICK_FILTER = "^D/subgraph:transpose/dtype:f16/"
PROMPT_S = 3.0  # the kernel's signal and a pidfd are immediate; a loaded 2-core machine is not

HANGING_BACKEND = '''"""A framework backend whose compile and eager run block for good in a C call (a second lock of a
non-recursive mutex, the GIL released), after touching $HANG_MARKER."""
import ctypes
import os
import pathlib

import numpy

VERSION = "hanging 0"


def setup(target, compile_backend=None):
    pass


def load(path):
    return numpy.load(path)


def to_host(value):
    return numpy.ascontiguousarray(value)


def _hang():
    pathlib.Path(os.environ["HANG_MARKER"]).touch()
    mutex = ctypes.create_string_buffer(64)
    libc = ctypes.CDLL(None)
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


def compile(fn, settings, inputs):
    _hang()


def eager(fn, settings):
    _hang()
'''

SWAPPING_PYTHON = """#!{python}
import os, sys
args = sys.argv[1:]
for flag, value in (("--backend", "hanging_backend"), ("--backend-dir", {backend_dir!r})):
    args[args.index(flag) + 1] = value
os.execv(sys.executable, [sys.executable, *args])
"""


def tools_run(out: pathlib.Path, *flags: str, env: dict | None = None, **popen) -> subprocess.Popen:
    argv = [str(ROOT / "tools" / "run"), "--no-build", "--out", str(out), *flags]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, **popen
    )


def running(pid: int) -> bool:
    """Whether the process runs (an exited one not yet reaped, a zombie, does not)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_until(condition, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, f"{what}: not within {timeout} s"
        time.sleep(0.05)
    return time.monotonic() - start


def processes_with(text: str) -> list[int]:
    """The running processes whose command line holds text."""
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found if running(int(p)) and int(p) != os.getpid()]


def hanging_framework(tmp_path: pathlib.Path) -> dict:
    backend_dir = tmp_path / "backend"
    backend_dir.mkdir()
    (backend_dir / "hanging_backend.py").write_text(HANGING_BACKEND)
    python = tmp_path / "swapping-python"
    python.write_text(SWAPPING_PYTHON.format(python=sys.executable, backend_dir=str(backend_dir)))
    python.chmod(0o755)
    return {"FUSEBENCH_PYTHON": str(python), "HANG_MARKER": str(tmp_path / "hanging")}


def hung_wrapper(tmp_path: pathlib.Path) -> tuple[dict, str]:
    """A FUSEBENCH_PYTHON that sleeps before it would start Python; the sleep's command line, to find it."""
    sleep = f"sleep {900000 + os.getpid() % 90000}"
    wrapper = tmp_path / "hung-python"
    wrapper.write_text(f'#!/bin/sh\n{sleep}\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return {"FUSEBENCH_PYTHON": str(wrapper)}, sleep


def run_dirs(runs: pathlib.Path) -> list[pathlib.Path]:
    return sorted(d for d in runs.iterdir() if d.is_dir() and not d.is_symlink())


@needs_suites
def test_a_sigkilled_run_takes_its_suite_and_its_stuck_worker_server_with_it(tmp_path):
    env = hanging_framework(tmp_path)
    runs = tmp_path / "runs"
    proc = tools_run(runs, "--device", "torch", "--filter", QUICK_FILTER, env=env, start_new_session=True)
    try:
        wait_until(lambda: pathlib.Path(env["HANG_MARKER"]).exists() or proc.poll() is not None, 240, "a hang")
        assert proc.poll() is None, f"tools/run exited {proc.returncode}: {proc.communicate()[1][-1500:]}"
        suites = processes_with(f"bin/bench_data_movement .*{runs}")
        workers = list(pathlib.Path(os.environ.get("TMPDIR", "/tmp")).glob(f"fusebench-workers-{proc.pid}-*"))
        servers = [int(p.read_text()) for w in workers for p in w.glob("torch-*.pid")]
        assert suites and servers, f"suite {suites}, torch worker servers {servers}: the run is not where expected"
        os.kill(proc.pid, signal.SIGKILL)  # tools/run alone: what runs in other process groups stays
        proc.communicate(timeout=30)
        left = []
        for pid in suites + servers:
            try:
                wait_until(lambda pid=pid: not running(pid), PROMPT_S, f"process {pid}")
            except AssertionError:
                left.append(pid)
        assert not left, f"still running {PROMPT_S} s after tools/run's SIGKILL: {left} (suites {suites})"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in processes_with(str(runs)):
            os.kill(pid, signal.SIGKILL)


@needs_suites
def test_a_worker_that_never_starts_is_given_up_at_the_start_timeout_naming_its_command(tmp_path):
    env, sleep = hung_wrapper(tmp_path)
    runs = tmp_path / "runs"
    env["FUSEBENCH_WORKER_START_TIMEOUT"] = "4"
    start = time.monotonic()
    proc = tools_run(runs, "--device", "torch", "--filter", QUICK_FILTER, env=env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-1500:]
    assert time.monotonic() - start < 60
    assert err.count("is still starting after") == 3, err[-1500:]  # at 1, 2 and 3 s of 4
    assert "within 4 s (FUSEBENCH_WORKER_START_TIMEOUT" in err and env["FUSEBENCH_PYTHON"] in err, err[-1500:]
    assert "fusebench_worker.py" in err and "killed it" in err, err[-1500:]
    assert not processes_with(sleep), "the wrapper's sleep outlived the worker's start"
    assert not runs.exists() or not run_dirs(runs), "a run directory was made for a run that never started"


@needs_suites
def test_a_request_that_never_answers_fails_its_case_at_the_request_timeout(tmp_path):
    """A framework call that hangs (the worker alive, its compile blocked for good): the case fails at
    FUSEBENCH_WORKER_REQUEST_TIMEOUT naming it, the worker is killed, and the run ends with exit 3."""
    env = hanging_framework(tmp_path)
    env["FUSEBENCH_WORKER_REQUEST_TIMEOUT"] = "4"
    runs = tmp_path / "runs"
    proc = tools_run(runs, "--device", "torch", "--filter", QUICK_FILTER + "shape:2x16x32/", env=env)
    try:
        _, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-2000:]
    assert "has not answered after" in err, err[-2000:]  # the progress line, every quarter of the wait
    run = (runs / "latest").resolve()
    data = json.loads((run / "data_movement@torch.json").read_text())
    errors = [b.get("error_message", "") for b in data["benchmarks"] if b.get("error_occurred")]
    assert errors and all("gave no answer within 4 s (FUSEBENCH_WORKER_REQUEST_TIMEOUT" in e for e in errors), errors
    assert not processes_with(str(tmp_path / "backend")), "a hung worker outlived its timeout"


@needs_suites
def test_sigterm_stops_a_run_waiting_on_a_starting_worker_at_once(tmp_path):
    env, sleep = hung_wrapper(tmp_path)
    env["FUSEBENCH_WORKER_START_TIMEOUT"] = "400"  # 100 s between progress lines: nothing ends on its own
    runs = tmp_path / "runs"
    proc = tools_run(runs, "--device", "torch", "--filter", QUICK_FILTER, env=env)
    try:
        wait_until(lambda: processes_with(sleep) or proc.poll() is not None, 120, "the hung wrapper")
        assert proc.poll() is None, proc.communicate()[1][-1500:]
        time.sleep(0.5)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err[-1500:]
    assert took < PROMPT_S, f"tools/run took {took:.1f} s to stop on SIGTERM"
    wait_until(lambda: not processes_with(sleep), PROMPT_S, "the wrapper's sleep gone")


def utc_stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y%m%dT%H%M%SZ")


@needs_suites
def test_a_run_started_in_another_runs_second_takes_its_own_directory_and_leaves_that_run_alone(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    # another run, healthy and in progress, in each second this run may start in
    now = datetime.datetime.now(datetime.UTC)
    others = {}
    for second in range(-2, 400):
        other = runs / utc_stamp(now + datetime.timedelta(seconds=second))
        other.mkdir()
        (other / ".in-progress").write_text(f"tools/run pid 1 on another node, started {other.name}\n")
        others[other] = (other / ".in-progress").read_text()
    proc = tools_run(runs, "--device", "cpu", "--filter", QUICK_FILTER)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-1500:]
    mine = [d for d in run_dirs(runs) if d not in others]
    assert len(mine) == 1 and mine[0].name.endswith("-2"), [d.name for d in mine]
    assert (runs / mine[0].name.removesuffix("-2")) in others
    for other, text in others.items():
        assert (other / ".in-progress").read_text() == text, f"{other} was marked by a run that was not its own"
        assert sorted(other.iterdir()) == [other / ".in-progress"], f"{other} got files of another run"
    assert (runs / "latest").resolve() == mine[0].resolve()
    # the names still sort by time: right after its second's run, before the next second's
    names = sorted(d.name for d in run_dirs(runs))
    assert names[names.index(mine[0].name) - 1] == mine[0].name.removesuffix("-2")
    check_run_identity(mine[0])


def check_run_identity(run_dir: pathlib.Path) -> None:
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["run_id"] == run_dir.name
    files = sorted(p.name for p in run_dir.glob("*@*.json"))
    assert files and sorted(manifest["files"]) == files, (manifest["files"], files)
    for name in files:
        data = (run_dir / name).read_bytes()
        assert manifest["files"][name] == hashlib.sha256(data).hexdigest(), name
        assert json.loads(data)["context"]["fusebench_run_id"] == run_dir.name, name


@needs_suites
def test_two_runs_started_together_each_complete_in_a_directory_of_their_own(tmp_path):
    runs = tmp_path / "runs"
    procs = [tools_run(runs, "--device", "cpu", "--filter", QUICK_FILTER) for _ in range(2)]
    results = [p.communicate(timeout=600) for p in procs]
    for proc, (_, err) in zip(procs, results):
        assert proc.returncode == 0, err[-1500:]
    dirs = run_dirs(runs)
    assert len(dirs) == 2, [d.name for d in dirs]
    for run_dir in dirs:
        assert not (run_dir / ".in-progress").exists(), f"{run_dir} is marked incomplete"
        assert (run_dir / "report.html").exists()
        check_run_identity(run_dir)
    assert (runs / "latest").resolve() in [d.resolve() for d in dirs]


@needs_suites
def test_a_latest_that_is_a_real_directory_is_refused_before_anything_runs(tmp_path):
    runs = tmp_path / "runs"
    (runs / "latest").mkdir(parents=True)
    (runs / "latest" / "run.json").write_text("{}")
    start = time.monotonic()
    proc = tools_run(runs, "--device", "cpu", "--filter", QUICK_FILTER)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-1500:]
    assert time.monotonic() - start < 10
    assert f"run: {runs / 'latest'} is not a symbolic link (a directory)" in err, err
    assert "rename or remove it" in err, err
    assert sorted(p.name for p in runs.iterdir()) == ["latest"], "something ran"
    assert not out.strip(), out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
