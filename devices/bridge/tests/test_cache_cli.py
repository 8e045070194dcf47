"""fusebench-cache covers the framework devices' compile caches besides the kernel cache: `list`
shows each one's entry count and size, `verify` checks that every Inductor .so starts with the ELF
magic and that no JAX entry is empty (exit 1 naming each corrupt file), `clear` removes them. The
caches are where the devices keep them: $TORCHINDUCTOR_CACHE_DIR / $JAX_COMPILATION_CACHE_DIR,
else <kernel cache>-torch, -jax beside the kernel cache. Built caches of files, no framework."""

from __future__ import annotations

import os
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN", ROOT / "build" / "release" / "bin"))


def cache_cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    binary = BIN / "fusebench-cache"
    assert binary.exists(), f"{binary} is missing: build it with tools/build release"
    return subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, timeout=60)


def make_caches(tmp_path: pathlib.Path) -> tuple[dict, pathlib.Path, pathlib.Path, pathlib.Path]:
    kernels = tmp_path / "kernels"
    inductor = tmp_path / "kernels-torch"  # the torch device's default beside the kernel cache
    jax = tmp_path / "jax-cache"  # named by the variable, as the xla device reads it
    (inductor / "ab").mkdir(parents=True)
    (inductor / "cd").mkdir()
    (inductor / "ab" / "cgood.so").write_bytes(b"\x7fELF" + bytes(1000))
    (inductor / "ab" / "cgood.cpp").write_text("// kernel\n")
    bad = inductor / "cd" / "cbad.main.so"
    bad.write_bytes(b"\x13\x37" + os.urandom(998))
    jax.mkdir()
    (jax / "jit_graph_fn-0123-cache").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(500))
    (jax / "jit_graph_fn-0123-atime").write_bytes(bytes(8))
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR")}
    env.update(FUSEBENCH_KERNEL_CACHE=str(kernels), JAX_COMPILATION_CACHE_DIR=str(jax))
    return env, inductor, jax, bad


def test_list_shows_the_framework_caches(tmp_path):
    env, inductor, jax, _ = make_caches(tmp_path)
    done = cache_cli(env, "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("0 kernels in ") for line in lines), done.stdout
    torch_line = next((line for line in lines if str(inductor) in line), None)
    assert torch_line and "3 entries (2 .so libraries), 2014 bytes" in torch_line, (
        f"no Inductor cache line: {done.stdout}"
    )
    jax_line = next((line for line in lines if str(jax) in line), None)
    assert jax_line and "1 entries, 512 bytes" in jax_line, f"no JAX cache line: {done.stdout}"
    assert "(torch)" in torch_line and "(xla, xla:cuda)" in jax_line, done.stdout


def test_verify_names_a_corrupt_library(tmp_path):
    env, inductor, jax, bad = make_caches(tmp_path)
    done = cache_cli(env, "verify")
    assert done.returncode == 1, f"verify passed a corrupt .so (exit {done.returncode}): {done.stdout}"
    corrupt = [line for line in done.stdout.splitlines() if line.startswith("CORRUPT")]
    assert len(corrupt) == 1 and str(bad) in corrupt[0] and "ELF magic" in corrupt[0], done.stdout
    bad.unlink()
    (jax / "jit_graph_fn-4567-cache").write_bytes(b"")
    done = cache_cli(env, "verify")
    assert done.returncode == 1 and "jit_graph_fn-4567-cache: is empty" in done.stdout, done.stdout
    (jax / "jit_graph_fn-4567-cache").unlink()
    done = cache_cli(env, "verify")
    assert done.returncode == 0, f"verify failed on sound caches: {done.stdout}"
    assert "1 .so libraries checked" in done.stdout, done.stdout


def test_clear_removes_the_framework_caches(tmp_path):
    env, inductor, jax, _ = make_caches(tmp_path)
    done = cache_cli(env, "clear")
    assert done.returncode == 0, done.stderr
    assert not inductor.exists() and not jax.exists(), f"clear left a framework cache: {done.stdout}"
    assert f"removed the Inductor cache (torch): 3 entries, 2014 bytes in {inductor}" in done.stdout, done.stdout
    assert "removed 0 kernels from" in done.stdout, done.stdout
    done = cache_cli(env, "dir")
    assert done.stdout.strip() == str(tmp_path / "kernels"), done.stdout
