"""fusebench-cache under faults: a run holding the cache (a process with the shared use lock, and a
real suite compiling kernels), a cache directory with files that are not the cache's, an
environment naming other caches than --dir, a build interrupted halfway. Each test states the exit
code and the words it expects; clear and verify must never touch what is not theirs, nor work
under a run."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pathlib
import signal
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN", ROOT / "build" / "release" / "bin"))
USE_LOCK = ".fusebench-cache.lock"
EXIT_IN_USE = 75

CACHE_VARIABLES = ("FUSEBENCH_KERNEL_CACHE", "TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")


def clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env.update(extra)
    return env


def cache_cli(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    binary = BIN / "fusebench-cache"
    assert binary.exists(), f"{binary} is missing: build it with tools/build release"
    return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout)


def add_kernel(cache: pathlib.Path, seed: str) -> dict[str, pathlib.Path]:
    """One complete entry as the cache writes it: <key[0:2]>/<key>.{cpp,so,log,sha256,lock}."""
    key = hashlib.sha256(seed.encode()).hexdigest()
    shard = cache / key[:2]
    shard.mkdir(parents=True, exist_ok=True)
    library = b"\x7fELF" + seed.encode() * 100
    files = {
        "cpp": shard / f"{key}.cpp",
        "so": shard / f"{key}.so",
        "log": shard / f"{key}.log",
        "sha256": shard / f"{key}.sha256",
        "lock": shard / f"{key}.lock",
    }
    files["cpp"].write_text("// kernel\n")
    files["so"].write_bytes(library)
    files["log"].write_text("")
    files["sha256"].write_text(hashlib.sha256(library).hexdigest())
    files["lock"].write_text("")
    return files


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


class SharedHolder:
    """A process holding the cache's use lock shared, as a run does, until closed."""

    def __init__(self, cache: pathlib.Path):
        script = (
            "import fcntl, sys\n"
            f"f = open({str(cache / USE_LOCK)!r}, 'a')\n"
            "fcntl.flock(f, fcntl.LOCK_SH)\n"
            "print('holding', flush=True)\n"
            "sys.stdin.read()\n"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout.readline().strip() == "holding", "the holder did not take the lock"

    def close(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0


def lock_is_held(lock_file: pathlib.Path) -> bool:
    with open(lock_file, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


# ---- clear removes only its own entries


def test_clear_leaves_what_is_not_a_cache_entry(tmp_path):
    cache = tmp_path / "kernels"
    kept_kernel = add_kernel(cache, "kept")
    shard = kept_kernel["so"].parent
    key = kept_kernel["so"].stem
    other = add_kernel(cache, "another")
    # the cache's own temporaries: a build directory and an atomic write's temporary file
    (shard / f"{key}.tmp4242").mkdir()
    (shard / f"{key}.tmp4242" / f"{key}.so").write_bytes(b"\x7fEL")
    (shard / f"{key}.sha256.tmp.4242").write_text("0" * 10)
    foreign = [
        shard / "notes.txt",  # beside kernels, in a shard folder
        shard / f"{'f' * 64}.so",  # a key-like name in the wrong shard
        cache / "zz" / "data.csv",  # a two-letter folder that is not hex
        cache / "results" / "run.json",
        cache / "README",
    ]
    for path in foreign:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not the cache's\n")
    (cache / "ee").mkdir()  # an empty hex shard with a foreign folder inside
    (cache / "ee" / "mine").mkdir()
    (cache / "ee" / "mine" / "thesis.tex").write_text("keep me\n")

    done = cache_cli(clean_env(), "--dir", str(cache), "clear")
    assert done.returncode == 0, f"exit {done.returncode}: {done.stdout}{done.stderr}"
    assert f"removed 2 kernels from {cache}" in done.stdout, done.stdout
    left_line = next((line for line in done.stdout.splitlines() if line.startswith("left ")), "")
    assert left_line.startswith("left 6 entries that are not cache entries: "), done.stdout
    for path in [*foreign[:2], cache / "zz", cache / "results", cache / "README", cache / "ee" / "mine"]:
        assert str(path) in left_line, f"{path} not named in: {left_line}"
    for path in foreign:
        assert path.read_text() == "not the cache's\n", f"clear removed or changed {path}"
    assert (cache / "ee" / "mine" / "thesis.tex").read_text() == "keep me\n"
    mine = [*kept_kernel.values(), *other.values(), shard / f"{key}.tmp4242", shard / f"{key}.sha256.tmp.4242"]
    assert not any(p.exists() for p in mine), f"clear left its own: {[str(p) for p in mine if p.exists()]}"
    assert not other["so"].parent.exists() or other["so"].parent == shard, "an emptied shard folder stayed"
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [shard.name, "README", "ee", "results", "zz"] + ([USE_LOCK] if (cache / USE_LOCK).exists() else [])
    )


def test_clear_names_a_single_foreign_file(tmp_path):
    cache = tmp_path / "kernels"
    kernel = add_kernel(cache, "one")
    notes = kernel["so"].parent / "notes.txt"
    notes.write_text("mine\n")
    done = cache_cli(clean_env(), "--dir", str(cache), "clear")
    assert done.returncode == 0, done.stderr
    assert f"left 1 file that is not a cache entry: {notes}" in done.stdout, done.stdout
    assert notes.read_text() == "mine\n"


def test_the_precompiled_prelude_folder_is_the_caches_own(tmp_path):
    """<cache>/pch/<hash>/ (the JIT's precompiled prelude): listed, not corrupt to verify, removed by
    clear without being reported as a foreign entry."""
    cache = tmp_path / "kernels"
    add_kernel(cache, "one")
    prelude = cache / "pch" / hashlib.sha256(b"flags").hexdigest()
    prelude.mkdir(parents=True)
    (prelude / "prelude.hpp").write_text("#include <cmath>\n")
    (prelude / "prelude.hpp.gch").write_bytes(b"gpch" + bytes(96))
    (prelude / "prelude.lock").write_text("")
    listed = cache_cli(clean_env(), "--dir", str(cache), "list")
    assert listed.returncode == 0, listed.stderr
    assert f"1 precompiled kernel preludes, 117 bytes in {cache / 'pch'}" in listed.stdout, listed.stdout
    verified = cache_cli(clean_env(), "--dir", str(cache), "verify")
    assert verified.returncode == 0 and "CORRUPT" not in verified.stdout, verified.stdout
    done = cache_cli(clean_env(), "--dir", str(cache), "clear")
    assert done.returncode == 0, done.stderr
    assert "removed 1 kernels from" in done.stdout and "left " not in done.stdout, done.stdout
    assert not (cache / "pch").exists(), done.stdout


# ---- --dir: everything from DIR, nothing from the environment


def test_dir_clears_only_the_caches_beside_it(tmp_path):
    cache = tmp_path / "mine"
    add_kernel(cache, "mine")
    (tmp_path / "mine-torch").mkdir()
    (tmp_path / "mine-torch" / "c.so").write_bytes(b"\x7fELF")
    (tmp_path / "mine-jax").mkdir()
    (tmp_path / "mine-jax" / "jit_f-1-cache").write_bytes(b"x")
    other = tmp_path / "other"  # what the environment names: another user's, another run's
    add_kernel(other, "other")
    for name in ("other-torch", "other-jax", "inductor-env", "jax-env"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "entry").write_bytes(b"\x7fELF")
    env = clean_env(
        FUSEBENCH_KERNEL_CACHE=str(other),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-env"),
        JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax-env"),
    )
    untouched = {
        name: snapshot(tmp_path / name) for name in ("other", "other-torch", "other-jax", "inductor-env", "jax-env")
    }

    done = cache_cli(env, "--dir", str(cache), "clear")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "mine-torch").exists() and not (tmp_path / "mine-jax").exists(), done.stdout
    assert f"removed the Inductor cache (torch): 1 entries, 4 bytes in {tmp_path / 'mine-torch'}" in done.stdout
    assert "removed 1 kernels from" in done.stdout, done.stdout
    for name, files in untouched.items():
        assert snapshot(tmp_path / name) == files, f"clear --dir {cache} changed {tmp_path / name}: {done.stdout}"
    assert f"--dir {cache}: every cache is taken from it" in done.stderr, done.stderr
    for variable in CACHE_VARIABLES:
        assert f"{variable}=" in done.stderr, f"{variable} not named as unused: {done.stderr}"
    listed = cache_cli(env, "list", "--dir", str(cache))  # --dir after the subcommand too
    assert listed.returncode == 0 and f"0 kernels in {cache}" in listed.stdout, listed.stdout
    assert f"none at {tmp_path / 'mine-torch'}" in listed.stdout, listed.stdout
    assert str(other) not in listed.stdout, listed.stdout


# ---- the use lock: clear and verify refuse under a run


def test_clear_and_verify_refuse_while_a_run_holds_the_cache(tmp_path):
    cache = tmp_path / "kernels"
    add_kernel(cache, "in use")
    (tmp_path / "kernels-torch").mkdir()
    (tmp_path / "kernels-torch" / "c.so").write_bytes(b"\x7fELF")
    before = snapshot(tmp_path)
    holder = SharedHolder(cache)
    try:
        for command in ("clear", "verify"):
            done = cache_cli(clean_env(), "--dir", str(cache), command)
            assert done.returncode == EXIT_IN_USE, f"{command} under a run: exit {done.returncode}: {done.stdout}"
            assert (
                f"fusebench-cache {command}: refused: the kernel cache {cache} is in use by pid {holder.process.pid} (python"
                in done.stderr
            ), done.stderr
            assert "--wait SECONDS" in done.stderr, done.stderr
            assert done.stdout == "", f"{command} printed results while refusing: {done.stdout}"
        start = time.monotonic()
        done = cache_cli(clean_env(), "--dir", str(cache), "clear", "--wait", "1")
        assert done.returncode == EXIT_IN_USE and "still after waiting 1 s" in done.stderr, done.stderr
        assert time.monotonic() - start >= 1.0, "--wait 1 did not wait"
        listed = cache_cli(clean_env(), "--dir", str(cache), "list")
        assert listed.returncode == 0 and "1 kernels in" in listed.stdout, "list needs no exclusive lock"
        assert snapshot(tmp_path) == before | {f"kernels/{USE_LOCK}": b""}, "a refused clear changed the cache"
    finally:
        holder.close()
    done = cache_cli(clean_env(), "--dir", str(cache), "clear")
    assert done.returncode == 0 and "removed 1 kernels" in done.stdout, done.stdout + done.stderr


def test_clear_waits_for_a_run_that_ends_within_its_wait(tmp_path):
    cache = tmp_path / "kernels"
    add_kernel(cache, "waited for")
    holder = SharedHolder(cache)
    binary = BIN / "fusebench-cache"
    clearing = subprocess.Popen(
        [str(binary), "--dir", str(cache), "clear", "--wait", "30"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    assert clearing.poll() is None, "clear did not wait for the run"
    assert (cache / next(cache.glob("??")).name).exists(), "clear removed entries while waiting"
    holder.close()
    out, err = clearing.communicate(timeout=30)
    assert clearing.returncode == 0 and "removed 1 kernels" in out, out + err


def test_a_running_suite_holds_the_cache_until_it_exits(tmp_path):
    """A real run: a suite compiling kernels into the cache; clear refuses naming it, the cache
    stays whole; once the suite is gone, clear goes ahead."""
    suite = BIN / "bench_scalar_lowering"
    assert suite.exists(), f"{suite} is missing: build it with tools/build release"
    cache = tmp_path / "kernels"
    env = clean_env(FUSEBENCH_KERNEL_CACHE=str(cache))
    run = subprocess.Popen(
        [
            str(suite),
            "--device=cpu",
            "--benchmark_filter=^C1/dtype:f32/scalar:0.7/shape:256x256/exec:fused/lowering:immediate/device:cpu$",
            "--benchmark_min_time=120",
            f"--benchmark_out={tmp_path / 'out.json'}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ((cache / USE_LOCK).exists() and lock_is_held(cache / USE_LOCK)):
            assert run.poll() is None, (
                f"the suite ended (exit {run.returncode}) before using the cache: {run.stderr.read()}"
            )
            assert time.monotonic() < deadline, "the suite never took the cache's use lock"
            time.sleep(0.1)
        done = cache_cli(clean_env(), "--dir", str(cache), "clear")
        assert run.poll() is None, "the suite ended during the check: the refusal proves nothing"
        assert done.returncode == EXIT_IN_USE, f"clear under a suite: exit {done.returncode}: {done.stdout}"
        assert f"in use by pid {run.pid} (bench_scalar_lowering)" in done.stderr, done.stderr
        assert "nothing was removed" in done.stderr, done.stderr
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=30)
    # killed, it leaves no stale holder behind: the lock went with the process
    done = cache_cli(clean_env(), "--dir", str(cache), "verify")
    assert done.returncode == 0, f"verify after the suite: exit {done.returncode}: {done.stdout}{done.stderr}"
    assert "CORRUPT" not in done.stdout, done.stdout


# ---- verify and a build interrupted halfway


def test_verify_does_not_call_a_half_written_build_corrupt(tmp_path):
    cache = tmp_path / "kernels"
    kernel = add_kernel(cache, "sound")
    building = hashlib.sha256(b"half written").hexdigest()
    shard = cache / building[:2]
    work = shard / f"{building}.tmp31337"  # the compiler's output directory, mid-link
    work.mkdir(parents=True)
    (work / f"{building}.cpp").write_text("// kernel\n")
    (work / f"{building}.so").write_bytes(b"\x7fELF\x02")
    half_digest = shard / f"{building}.sha256.tmp.31337"
    half_digest.write_text("ab")
    done = cache_cli(clean_env(), "--dir", str(cache), "verify")
    assert done.returncode == 0, f"verify failed on a sound cache with a build halfway: {done.stdout}"
    assert "CORRUPT" not in done.stdout, done.stdout
    assert "1 kernels checked in" in done.stdout, done.stdout
    expected = f"2 temporaries of interrupted builds, not kernels (clear removes them): {half_digest}, {work}"
    assert expected in done.stdout, done.stdout
    # a finished library whose digest does not match still is corrupt
    kernel["so"].write_bytes(b"\x7fELF truncated")
    done = cache_cli(clean_env(), "--dir", str(cache), "verify")
    assert done.returncode == 1 and f"CORRUPT kernel {kernel['so'].stem}" in done.stdout, done.stdout


def test_tools_run_holds_the_cache_for_the_whole_run(tmp_path):
    """tools/run takes the use lock before its first suite and keeps it between suites (the framework caches beside
    the kernel cache are in use then too): a clear during the run refuses naming it; after the run it goes ahead."""
    cache, out = tmp_path / "kernels", tmp_path / "results"
    env = clean_env(FUSEBENCH_KERNEL_CACHE=str(cache))
    run = subprocess.Popen(
        [str(ROOT / "tools" / "run"), "--no-build", "--device", "cpu", "--out", str(out),
         "--filter", "^D/subgraph:transpose/dtype:f16/shape:2x16x32/"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not ((cache / USE_LOCK).exists() and lock_is_held(cache / USE_LOCK)):
            assert run.poll() is None, f"the run ended (exit {run.returncode}) before holding the cache"
            assert time.monotonic() < deadline, "tools/run never took the cache's use lock"
            time.sleep(0.1)
        done = cache_cli(clean_env(), "--dir", str(cache), "clear")
        assert run.poll() is None, "the run ended during the check: the refusal proves nothing"
        assert done.returncode == EXIT_IN_USE, f"clear under a run: exit {done.returncode}: {done.stdout}"
        assert "nothing was removed" in done.stderr, done.stderr
        assert run.wait(timeout=600) == 0, run.stderr.read()[-2000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    done = cache_cli(clean_env(), "--dir", str(cache), "clear")
    assert done.returncode == 0, f"clear after the run: exit {done.returncode}: {done.stderr}"
