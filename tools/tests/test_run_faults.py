"""Faults never pass as results. A run directory is complete or says it is not: compare, gate and the
report refuse an incomplete one (exit 2 naming it) unless --allow-incomplete, and then label it; a
run.json of the wrong shape is exit 2 naming the file and what was expected. Where the suites are
built, tools/run itself under faults: a --filter that does not compile or matches nothing, SIGTERM and
SIGKILL of the run mid-suite, a suite killed mid-run, a --out on a tmpfs that fills up (root only).
Each asserts the exit status, the message, that no truncated file carries a final name, and where
`latest` points."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from reports.tests.fixture_runs import FIXTURES
from tools.tests.built import ROOT, needs_suites

REPORT_RUN = FIXTURES / "report_run"
TOOLS = {"gate": ["tools.gate"], "compare": ["tools.compare_runs", REPORT_RUN], "report": ["reports.report"]}
QUICK_FILTER = "^D/subgraph:transpose/dtype:f16/"
# Long enough on 2 cores (B's chains on cpu) to be stopped in the middle of a suite.
SLOW_FILTER = "^(D/subgraph:transpose/dtype:f16/|B/)"


def tool(name: str, target: pathlib.Path, *flags: str) -> subprocess.CompletedProcess:
    module, *before = TOOLS[name]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", module, *map(str, before), str(target), *flags]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)


def copy_run(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    target = tmp_path / name
    shutil.copytree(REPORT_RUN, target)
    return target


# ---- the readers
@pytest.mark.parametrize(
    ("leftover", "says"),
    [
        (".in-progress", "run in progress or one that was stopped"),
        ("data_movement@cpu.json.tmp", "was cut off: data_movement@cpu.json.tmp"),
        (".entries.tsv", "was cut off: .entries.tsv"),
    ],
)
def test_readers_refuse_an_incomplete_run_unless_allowed_and_then_label_it(tmp_path, leftover, says):
    run_dir = copy_run(tmp_path, "cut")
    (run_dir / leftover).write_text("tools/run pid 1 on node1, started 2026-12-05T00:00:00Z\n")
    for name in TOOLS:
        r = tool(name, run_dir)
        assert r.returncode == 2, f"{name} on an incomplete run: exit {r.returncode}\n{r.stdout[-400:]}"
        assert says in r.stderr and str(run_dir) in r.stderr and "--allow-incomplete" in r.stderr, r.stderr
    r = tool("gate", run_dir, "--allow-incomplete")
    assert r.returncode == 1 and "the run is INCOMPLETE" in r.stdout and "cannot pass the gate" in r.stdout
    r = tool("compare", run_dir, "--allow-incomplete")
    assert "the contender run is INCOMPLETE" in r.stdout, r.stdout[-400:]
    r = tool("report", run_dir, "--allow-incomplete")
    assert r.returncode == 0, r.stderr
    first = (run_dir / "report.md").read_text().splitlines()[2]
    assert first.startswith("**Incomplete run: ") and says in first, first


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ({"devices": "cpu"}, "'devices' must be a list, found str"),
        ([], "expected a JSON object (tools/run's manifest), found list"),
        (None, "expected a JSON object (tools/run's manifest), found NoneType"),
        ({"devices": ["cpu"], "skipped": [1]}, "each entry of 'skipped' must be an object"),
        ({"devices": [7]}, "'devices' must be a list of device names"),
    ],
)
def test_a_wrong_shaped_manifest_is_exit_2_naming_it(tmp_path, manifest, expected):
    run_dir = copy_run(tmp_path, "shaped")
    (run_dir / "run.json").write_text(json.dumps(manifest))
    for name in TOOLS:
        r = tool(name, run_dir)
        assert r.returncode == 2, f"{name}: exit {r.returncode}\n{r.stderr[-600:]}"
        assert f"{run_dir / 'run.json'}: {expected}" in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---- tools/run itself
def tools_run(out: pathlib.Path, *flags: str, **popen) -> subprocess.Popen:
    argv = [str(ROOT / "tools" / "run"), "--no-build", "--device", "cpu", "--out", str(out), *flags]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for_suite(run_root: pathlib.Path, suite: str, timeout: float = 120) -> int:
    """The pid of SUITE's process once tools/run has started it for a run under run_root."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = subprocess.run(["pgrep", "-f", f"bin/{suite} .*{run_root}"], capture_output=True, text=True)
        if found.stdout.split():
            return int(found.stdout.split()[0])
        time.sleep(0.1)
    raise AssertionError(f"{suite} did not start within {timeout} s")


def only_run_dir(run_root: pathlib.Path) -> pathlib.Path:
    dirs = [d for d in run_root.iterdir() if d.is_dir() and not d.is_symlink()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def assert_no_truncated_final_file(run_dir: pathlib.Path):
    for path in run_dir.glob("*.json"):
        json.loads(path.read_text())  # every file under a final name is whole


@needs_suites
@pytest.mark.parametrize(
    ("regex", "says"),
    [
        ("[", "run: --filter '[': not a valid regular expression"),
        ("^NoSuchTask/", "run: --filter '^NoSuchTask/' matches none of the "),
    ],
)
def test_a_filter_that_does_not_compile_or_matches_nothing_is_exit_2_and_no_run(tmp_path, regex, says):
    status, _, err = finish(tools_run(tmp_path / "runs", "--filter", regex))
    assert status == 2 and says in err, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "a run directory was made"


@needs_suites
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_run_exits_promptly_cleans_its_workers_and_stays_incomplete(tmp_path, sig, status):
    runs = tmp_path / "runs"
    proc = tools_run(runs, "--filter", SLOW_FILTER)
    suite = wait_for_suite(runs, "bench_accumulated_error")
    workers = list(pathlib.Path(os.environ.get("TMPDIR", "/tmp")).glob(f"fusebench-workers-{proc.pid}-*"))
    assert workers, "tools/run made no worker folder named by its pid"
    stopped = time.monotonic()
    proc.send_signal(sig)
    code, _, err = finish(proc, timeout=60)
    assert time.monotonic() - stopped < 8, "tools/run took longer than 8 s to stop"
    assert code == status, err[-600:]
    assert not pathlib.Path(f"/proc/{suite}").exists() or "zombie" in pathlib.Path(f"/proc/{suite}/status").read_text()
    assert not any(w.exists() for w in workers), "the worker folder was left behind"
    run_dir = only_run_dir(runs)
    assert (run_dir / ".in-progress").exists() and f"stopped: exit {status}" in (run_dir / ".in-progress").read_text()
    assert not (runs / "latest").exists(), "latest points at a run that did not finish"
    assert "is incomplete" in err
    assert_no_truncated_final_file(run_dir)
    for name in TOOLS:
        assert tool(name, run_dir).returncode == 2


@needs_suites
def test_a_killed_run_is_refused_and_the_next_run_removes_its_leftovers(tmp_path):
    runs = tmp_path / "runs"
    # A temporary folder of the test's own: a tools/run of another test (ctest runs them side by side)
    # removes the worker folders of dead runs under the shared one, this test's among them.
    own_tmp = tmp_path / "tmp"
    own_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(own_tmp)}
    proc = tools_run(runs, "--filter", SLOW_FILTER, start_new_session=True, env=env)
    wait_for_suite(runs, "bench_accumulated_error")
    killed_pid = proc.pid
    workers = list(own_tmp.glob(f"fusebench-workers-{killed_pid}-*"))
    os.killpg(proc.pid, signal.SIGKILL)  # the whole job, as a scheduler's kill does
    proc.communicate(timeout=60)
    run_dir = only_run_dir(runs)
    assert workers and all(w.exists() for w in workers), "SIGKILL leaves the worker folder (nothing can clean it)"
    for name in TOOLS:
        r = tool(name, run_dir)
        assert r.returncode == 2 and "run in progress or one that was stopped" in r.stderr, r.stderr
    r = tool("compare", run_dir, "--allow-incomplete")  # killed before any suite finished: nothing to compare
    assert r.returncode == 2 and "no suite JSON files in this directory" in r.stderr and "stopped" in r.stderr
    # a shared-memory folder of a process that is gone, as a SIGINT during the device listing leaves one
    shm = pathlib.Path("/dev/shm") / f"fusebench-{killed_pid}-torch-0"
    if pathlib.Path("/dev/shm").is_dir():
        shm.mkdir(exist_ok=True)
    time.sleep(1.1)  # run directories are named by the second
    code, _, err = finish(tools_run(runs, "--filter", QUICK_FILTER, env=env))
    assert code == 0, err[-800:]
    assert not any(w.exists() for w in workers), "the killed run's worker folder is still there"
    assert not shm.exists(), "the killed run's shared-memory folder is still there"
    latest = (runs / "latest").resolve()
    assert latest != run_dir and not (latest / ".in-progress").exists() and (latest / "report.html").exists()


@needs_suites
def test_a_suite_killed_mid_run_is_a_failed_result_and_the_run_goes_on(tmp_path):
    runs = tmp_path / "runs"
    proc = tools_run(runs, "--filter", f"^(C1/dtype:f16/scalar:0\\.7/|{QUICK_FILTER[1:]})")
    os.kill(wait_for_suite(runs, "bench_data_movement"), signal.SIGKILL)
    code, _, err = finish(proc)
    assert code == 3, err[-800:]
    assert "data_movement on cpu failed as a whole (killed by SIGKILL (signal 9))" in err
    run_dir = (runs / "latest").resolve()
    assert not (run_dir / ".in-progress").exists(), "a run whose report was written is complete"
    assert_no_truncated_final_file(run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert [(f["suite"], f["reason"]) for f in manifest["failed"]] == [
        ("data_movement", "killed by SIGKILL (signal 9)")
    ]
    assert (run_dir / "scalar_lowering@cpu.json").exists(), "the suites after or before it still count"
    report = (run_dir / "report.md").read_text()
    assert "Failed suites: data_movement (killed by SIGKILL (signal 9))" in report
    d_row = next(line for line in report.splitlines() if line.startswith("| [D]"))
    assert "**INCONCLUSIVE** suite failed" in d_row and "N/A" not in d_row, d_row


@contextlib.contextmanager
def tmpfs(path: pathlib.Path, options: str):
    """A tmpfs mounted at path for the test (root only: skipped elsewhere)."""
    path.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs -o {options} here (root needed): {made.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@needs_suites
def test_a_run_whose_out_fills_up_fails_and_leaves_nothing_truncated(tmp_path):
    with tmpfs(tmp_path / "tiny", "size=24k") as mount:
        code, out, err = finish(tools_run(mount, "--filter", QUICK_FILTER))
        assert code not in (0, 2), f"exit {code}\n{out[-600:]}\n{err[-600:]}"
        run_dir = only_run_dir(mount)
        assert_no_truncated_final_file(run_dir)
        assert not (mount / "latest").exists(), "latest points at a run that could not be written"
        assert (run_dir / ".in-progress").exists() or (run_dir / "report.html").exists()
        assert "No space left on device" in err or "cannot write" in err, err[-800:]


@needs_suites
def test_a_read_only_kernel_cache_fails_the_cases_that_need_a_new_kernel_and_says_so(tmp_path):
    with tmpfs(tmp_path / "read-only-cache", "ro,size=64k") as cache:
        env = {**os.environ, "FUSEBENCH_KERNEL_CACHE": str(cache)}
        code, _, err = finish(tools_run(tmp_path / "runs", "--filter", "^C1/dtype:f16/scalar:0\\.7/", env=env))
    assert code == 3, err[-800:]
    assert "cases failed (scalar_lowering on cpu: " in err
    report = ((tmp_path / "runs" / "latest") / "report.md").read_text()
    assert "Read-only file system" in report and "Failed: " in report
    c1_row = next(line for line in report.splitlines() if line.startswith("| [C1]"))
    assert "**INCONCLUSIVE** " in c1_row and "failed" in c1_row, c1_row
