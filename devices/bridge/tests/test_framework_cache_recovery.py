"""A corrupt compiled artifact in a framework's on-disk cache recovers (fusebench_worker.py,
devices/torch/torch_backend.py): Inductor's .so files overwritten with random bytes fail the load
with "invalid ELF header"; the worker moves the cache entry aside (renamed <dir>.corrupt-<time>,
never deleted), compiles the graph once more, and the case says so (the counter
framework_cache_recovered, a line on stderr naming the moved directory). A second failure, the
recompile's, is a real error naming both. Skips where torch is not importable from the venv."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN", ROOT / "build" / "release" / "bin"))
FILTER = r"C1/dtype:f16/scalar:0\.7/shape:1024x1024/exec:fused/lowering:immediate/"


@pytest.fixture(scope="module", autouse=True)
def needs_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torch is not importable from {sys.executable}: {e}")


def run_case(
    tmp_path: pathlib.Path, cache: pathlib.Path, name: str, device: str = "torch", **env_extra
) -> tuple[dict, str]:
    binary = BIN / "bench_scalar_lowering"
    assert binary.exists(), f"{binary} is missing: build it with tools/build release"
    out = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k != "FUSEBENCH_WORKER_DIR"}  # a worker of its own
    env.update(TORCHINDUCTOR_CACHE_DIR=str(cache), **env_extra)
    done = subprocess.run(
        [str(binary), f"--device={device}", f"--benchmark_filter={FILTER}", "--benchmark_min_time=0.001",
         f"--benchmark_out={out}", "--benchmark_out_format=json"],
        env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.exists(), f"{binary.name} wrote no results (exit {done.returncode}): {done.stderr[-3000:]}"
    benchmarks = json.loads(out.read_text())["benchmarks"]
    assert len(benchmarks) == 1, [b["name"] for b in benchmarks]
    return benchmarks[0], done.stderr


def test_corrupt_library_is_moved_aside_and_recompiled(tmp_path):
    cache = tmp_path / "inductor"
    first, _ = run_case(tmp_path, cache, "cold")
    assert not first.get("error_occurred"), first.get("error_message")
    libraries = sorted(cache.rglob("*.so"))
    assert libraries, f"Inductor left no .so in {cache}"
    for library in libraries:
        library.write_bytes(os.urandom(4096))
    case, stderr = run_case(tmp_path, cache, "corrupt")
    assert not case.get("error_occurred"), f"the case failed on a corrupt cache: {case.get('error_message')}"
    assert case.get("framework_cache_recovered", 0) >= 1, f"the case does not say it recovered: {case}"
    moved = sorted(p for p in cache.iterdir() if ".corrupt-" in p.name)
    assert moved, f"nothing under {cache} was moved aside: {sorted(p.name for p in cache.iterdir())}"
    corrupt = {p.read_bytes() for p in moved[0].rglob("*.so")}
    assert corrupt, f"{moved[0]} holds no .so: the corrupt entry was not kept"
    for directory in moved:
        assert str(directory) in stderr, f"stderr does not name the moved directory {directory}: {stderr[-2000:]}"
    # each entry moved aside was compiled again: ELF libraries in its place
    for directory in moved:
        entry = directory.with_name(directory.name.split(".corrupt-")[0])
        fresh = sorted(entry.glob("*.so"))
        assert fresh and all(p.read_bytes()[:4] == b"\x7fELF" for p in fresh), f"{entry} was not rebuilt: {fresh}"


def test_a_second_failure_is_an_error(tmp_path):
    """A compiler that writes garbage where its .so goes: the recompile fails as the first did."""
    cxx = tmp_path / "garbage-g++"
    cxx.write_text(
        "#!/usr/bin/env bash\n"
        'g++ "$@" || exit $?\n'
        'prev=""; for a in "$@"; do if [ "$prev" = "-o" ]; then case "$a" in *.so) '
        'head -c 4096 /dev/urandom > "$a";; esac; fi; prev="$a"; done\n'
    )
    cxx.chmod(0o755)
    case, _ = run_case(tmp_path, tmp_path / "inductor", "garbage", CXX=str(cxx))
    message = case.get("error_message", "")
    assert case.get("error_occurred"), f"the case passed with a compiler that writes garbage: {case}"
    assert not message.startswith("n/a"), f"a second failure reads as n/a: {message}"
    assert "invalid ELF header" in message and "the second failure" in message and ".corrupt-" in message, (
        f"the error does not name both failures and the moved entry: {message}"
    )


def test_an_unreadable_jax_cache_entry_is_recompiled_and_the_case_says_so(tmp_path):
    """JAX repairs an unreadable entry of its persistent cache itself (it warns, compiles anew and
    overwrites the entry); the worker catches the warning so that the case says so."""
    try:
        import jax  # noqa: F401
    except ImportError as e:
        pytest.skip(f"jax is not importable from {sys.executable}: {e}")
    cache = tmp_path / "jax"
    first, _ = run_case(tmp_path, tmp_path / "inductor", "xla-cold", device="xla", JAX_COMPILATION_CACHE_DIR=str(cache))
    assert not first.get("error_occurred"), first.get("error_message")
    entries = sorted(p for p in cache.rglob("*") if p.is_file())
    assert entries, f"JAX left no entry in {cache}"
    for entry in entries:
        entry.write_bytes(os.urandom(256))
    case, stderr = run_case(
        tmp_path, tmp_path / "inductor", "xla-corrupt", device="xla", JAX_COMPILATION_CACHE_DIR=str(cache)
    )
    assert not case.get("error_occurred"), f"the case failed on a corrupt cache: {case.get('error_message')}"
    assert case.get("framework_cache_recovered", 0) >= 1, f"the case does not say it recovered: {case}"
    assert "Error reading persistent compilation cache entry" in stderr and "JAX compiled the graph anew" in stderr
