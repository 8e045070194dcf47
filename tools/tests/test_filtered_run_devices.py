"""tools/run --filter on a framework device runs exactly what each suite lists for that filter.

A suite with matches must run them all (a listing read through `| grep -q` once made a suite with
66 matches look empty: its second 4 KiB stdio write met a closed pipe, the lister died of SIGPIPE
and pipefail turned that into "no match"); a suite without matches is skipped and says why. First
`tools/run --list` must show a listing larger than one stdio buffer whole (task D on the device,
no run); then a run with a filter that picks one cheap case from four suites must run exactly
those, and run.json must count the framework's compiles of each suite (and its cache lookups). The
run's worker servers (one per device for all its suites) must be gone when it ends, and their log
relayed to its stderr.

The device is FUSEBENCH_FILTERED_DEVICE (torch by default); skipped where it is unavailable or the
suites are not built.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess

import pytest

from tools.tests.built import BIN, ROOT, needs_suites, suites, work_dir

FILTER = (
    "^(D/subgraph:transpose/dtype:f16/shape:2x16x32/|C2/out:f16/acc:f32/shape:1x16384/tile:256/"
    "|UlpDiff/dtype:f16/|Chain/path:eager/dtype:f16/)"
)
DEVICE = os.environ.get("FUSEBENCH_FILTERED_DEVICE", "torch")


def listing(suite: pathlib.Path, device: str, regex: str = FILTER) -> list[str]:
    r = subprocess.run(
        [
            str(suite),
            "--profile=quick",
            f"--device={device}",
            "--benchmark_list_tests=true",
            f"--benchmark_filter={regex}",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, (
        f"{suite.name} --device={device} --benchmark_list_tests: exit {r.returncode}\n{r.stderr[-800:]}"
    )
    return [line for line in r.stdout.splitlines() if line.strip()]


def servers_of(owner: int) -> list[str]:
    """Command lines of the live processes whose environment names `owner` as their run."""
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environment = (proc / "environ").read_bytes().split(b"\0")
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"FUSEBENCH_WORKER_OWNER={owner}".encode() in environment and "--serve" in command:
            found.append(f"{proc.name}: {command}")
    return found


@needs_suites
def test_filtered_run_runs_what_each_suite_lists(tmp_path):
    device = DEVICE
    work = work_dir(tmp_path, f"filtered-run-{device.replace(':', '-').replace('/', '-')}")
    devices = subprocess.run([str(suites()[0]), "--list-devices"], capture_output=True, text=True)
    if device not in devices.stdout.split():
        reason = next(
            (line for line in devices.stderr.splitlines() if line.startswith(f"{device}:")),
            f"{device}: not listed by --list-devices",
        )
        pytest.skip(f"device unavailable here ({reason})")

    failures = []
    # tools/run's own listing of a filter whose listing takes more than one stdio buffer
    whole = listing(BIN / "bench_data_movement", device, "^D/")
    r = subprocess.run(
        [str(ROOT / "tools" / "run"), "--list", "--device", device, "--filter", "^D/"],
        capture_output=True,
        text=True,
    )
    shown = [line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("bench_data_movement@")]
    if r.returncode != 0 or shown != whole or len("\n".join(whole)) <= 4096:
        failures.append(
            f"tools/run --list --filter '^D/' on {device}: exit {r.returncode}, {len(shown)} names "
            f"against the suite's {len(whole)} ({len(chr(10).join(whole))} bytes)\n{r.stderr[-800:]}"
        )

    expected = {p.name.removeprefix("bench_"): listing(p, device) for p in suites()}
    matched = [name for name, names in expected.items() if names]
    if len(matched) < 4 or "data_movement" not in matched:
        failures.append(
            f"the filter should match four suites including data_movement on {device}, listings matched {matched}"
        )

    shutil.rmtree(work, ignore_errors=True)
    run = subprocess.Popen(
        [str(ROOT / "tools" / "run"), "--device", device, "--filter", FILTER, "--out", str(work)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = run.communicate()
    r = subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)
    # the run's worker servers (their environment names tools/run as FUSEBENCH_WORKER_OWNER) stop with it
    left = servers_of(run.pid)
    if left:
        failures.append(f"worker servers of the run still running after it: {left}")
    if "graphs compiled" not in r.stderr:
        failures.append("the worker servers' log (their compile counts) was not relayed to tools/run's stderr")
    assert r.returncode == 0, (
        f"tools/run --device {device} --filter: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    )
    run_dir = (work / "latest").resolve()
    manifest = json.loads((run_dir / "run.json").read_text())
    ran = {e["suite"] for e in manifest["ran"]}
    skipped = {e["suite"]: e["reason"] for e in manifest["skipped"]}
    file_device = device.replace(":", "-")
    for name, names in expected.items():
        if names:
            out = run_dir / f"{name}@{file_device}.json"
            if name not in ran or not out.exists():
                failures.append(
                    f"{name}: the listing shows {len(names)} benchmarks but the run "
                    f"{'skipped it: ' + skipped.get(name, '?') if name in skipped else 'wrote no ' + out.name}"
                )
                continue
            got = sorted({b.get("run_name", b["name"]) for b in json.loads(out.read_text())["benchmarks"]})
            if got != sorted(names):
                failures.append(f"{name}: ran {got}, the listing shows {sorted(names)}")
        elif "no benchmark matches" not in skipped.get(name, ""):
            failures.append(
                f"{name}: no listed match, but the run did not skip it saying so "
                f"(ran: {name in ran}, skipped: {skipped.get(name)})"
            )
    # the framework's compiles are counted per suite (the workers' own counts, in run.json)
    counted = {e["suite"]: e.get("framework_compiles") for e in manifest["ran"]}
    compiled = [s for s, c in counted.items() if c and c["compiles"] > 0]
    # Inductor and XLA look every compiled graph up in their persistent cache (other torch.compile
    # backends have none)
    cached = device in ("torch", "torch/inductor", "xla")
    if "data_movement" not in compiled or any(
        cached and c["cache_hits"] + c["cache_misses"] < c["compiles"] for c in counted.values() if c
    ):
        failures.append(f"run.json's framework_compiles per suite: {counted}")
    assert not failures, "\n".join(failures)
    print(
        f"passed: {len(matched)} suites ran their {sum(map(len, expected.values()))} listed benchmarks on "
        f"{device}; {len(expected) - len(matched)} without matches were skipped with the reason"
    )
