"""A suite whose results cannot be written fails: on a full disk (a tmpfs of 8 KiB) it exits 1,
names each file it could not write, and leaves no truncated file under the final name. Needs root
to mount the tmpfs; skipped otherwise.

Needs the built suite: FUSEBENCH_D_BINARY (ctest sets it) or build/release/bin/bench_data_movement.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = pathlib.Path(os.environ.get("FUSEBENCH_D_BINARY", ROOT / "build" / "release" / "bin" / "bench_data_movement"))


@pytest.fixture
def full_disk(tmp_path):
    if not BINARY.exists():
        pytest.skip(f"{BINARY} is not built")
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


def test_a_suite_that_cannot_write_its_results_fails_and_leaves_no_truncated_file(full_disk):
    out, times = full_disk / "data_movement@cpu.json", full_disk / "times"
    proc = subprocess.run(
        [
            str(BINARY),
            "--profile=quick",
            "--device=cpu",
            "--benchmark_filter=^D/subgraph:transpose/",
            f"--benchmark_out={out}",
            "--benchmark_out_format=json",
            f"--instance-times={times}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert f"--instance-times={times}: cannot write" in proc.stderr
    assert f"--benchmark_out={out}: the results file is incomplete" in proc.stderr
    assert list(full_disk.iterdir()) == [], "a truncated file was left under its final name"


def test_the_listing_asks_only_the_devices_named():
    if not BINARY.exists():
        pytest.skip(f"{BINARY} is not built")
    proc = subprocess.run([str(BINARY), "--list-devices=cpu"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "cpu\n", "")
    proc = subprocess.run([str(BINARY), "--list-devices=cpu,nosuch"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown device nosuch" in proc.stderr
