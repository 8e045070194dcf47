"""A suite whose results cannot be written fails: on a full disk (a tmpfs of 8 KiB) it exits 1,
names each file it could not write, and leaves no truncated file under the final name. Needs root
to mount the tmpfs; skipped otherwise.

Needs the built suite: FUSEBENCH_D_BINARY (ctest sets it) or build/release/bin/bench_data_movement.
"""

from __future__ import annotations

import hashlib
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


def test_bootstrap_refuses_the_frameworks_on_a_disk_too_small_for_them(tmp_path):
    """tools/bootstrap says what disk the frameworks need, and where, before pip starts: a full disk
    half-way through leaves a broken environment and an OSError (a CI run ended so). The .venv is a
    tmpfs of 64 MiB; its python is a stand-in that records any pip install."""
    root = tmp_path / "checkout"
    (root / "tools").mkdir(parents=True)
    for name in ("bootstrap", "requirements.txt", "requirements-frameworks.txt"):
        (root / "tools" / name).write_bytes((ROOT / "tools" / name).read_bytes())
    (root / "tools" / "bootstrap").chmod(0o755)
    venv = root / ".venv"
    venv.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(venv)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {made.stderr.decode().strip()}")
    try:
        (venv / "bin").mkdir()
        installs = venv / "pip-installs"
        python = venv / "bin" / "python"
        python.write_text(
            f'#!/bin/sh\nif [ "$3" = cache ]; then echo {venv}/pip-cache; exit 0; fi\necho "$@" >> {installs}\n'
        )
        python.chmod(0o755)
        requirements = hashlib.sha256((root / "tools" / "requirements.txt").read_bytes()).hexdigest()
        (venv / ".requirements.sha256").write_text(requirements + "\n")
        env = {k: v for k, v in os.environ.items() if k != "FUSEBENCH_FRAMEWORKS"}
        proc = subprocess.run([str(root / "tools" / "bootstrap")], capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert (
            f"not enough disk for the frameworks (torch, jax): {venv} has 0.1 GiB free and needs 9 GiB" in proc.stderr
        )
        assert "FUSEBENCH_FRAMEWORKS=0" in proc.stderr
        assert not installs.exists(), f"pip ran: {installs.read_text()}"
        assert not (venv / ".frameworks.sha256").exists()
    finally:
        subprocess.run(["umount", str(venv)], check=True)
