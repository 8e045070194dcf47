"""torch.compile backends named on the command line (--device=torch/BACKEND), end to end through
the suites:
- torch/aot_eager, AOTAutograd with no code generation, the unfused negative control of the whole
  suite: over A, B, C1 and D every figure of the fused path equals eager's;
- a backend this test registers itself (fma_inductor_backend.py: Inductor with FP contraction
  "fast"), reached through FUSEBENCH_TORCH_BACKEND_MODULES: a filtered C1 runs through it, and its
  kernels' compile commands carry the changed option;
- an unknown backend name stops the suite with the list of known ones.
Skips (exit 77) where torch is not installed. Usage: test_torch_backends.py --bin DIR --work DIR"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
failures: list[str] = []


def check(condition: bool, what: str):
    if not condition:
        failures.append(what)


def run_suite(binary: pathlib.Path, device: str, filt: str, work: pathlib.Path, env: dict | None = None) -> dict:
    out = work / f"{binary.name}@{device.replace('/', '-')}.json"
    dump = work / "dumps" / device.replace("/", "-") / binary.name
    command = [
        str(binary),
        "--profile=quick",
        f"--device={device}",
        f"--benchmark_filter={filt}",
        f"--dump-dir={dump}",
        "--benchmark_min_time=0.01",
        f"--benchmark_out={out}",
        "--benchmark_out_format=json",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        failures.append(f"{binary.name} --device={device}: exit {done.returncode}: {done.stderr[-2000:]}")
        return {"benchmarks": []}
    data = json.loads(out.read_text())
    for b in data["benchmarks"]:
        check(not b.get("error_occurred"), f"{b['name']}: {b.get('error_message')}")
    check(bool(data["benchmarks"]), f"{binary.name} --device={device}: no benchmark matched {filt}")
    return data


def aot_eager(bin_dir: pathlib.Path, work: pathlib.Path):
    device = "torch/aot_eager"
    a = run_suite(bin_dir / "bench_fusion_determinism", device, "^A/dtype:f16/threads:2/", work)
    for b in a["benchmarks"]:
        check(
            b.get("distinct_hashes") == 1 and b.get("max_ulp_vs_round1") == 0,
            f"A on aot_eager: {b['name']} not deterministic",
        )
        # no Inductor option exists on aot_eager: the control is absent, and A says so
        check(
            b.get("negative_control_knob") == -1,
            f"A on aot_eager: a negative control ran ({b.get('negative_control_knob')})",
        )
    bench = run_suite(
        bin_dir / "bench_accumulated_error", device, "^B/chain:mul_add_gelu_mul/dtype:f16/dist:uniform/", work
    )
    for b in bench["benchmarks"]:
        for figure in ("ulp_p50", "ulp_p99", "ulp_max", "abs_err_max", "rel_err_p99", "setmax_p99"):
            check(
                b.get(f"fused_{figure}") == b.get(f"eager_{figure}"),
                f"B on aot_eager: {b['name']}: fused_{figure} {b.get(f'fused_{figure}')} != eager's {b.get(f'eager_{figure}')}",
            )
    c1 = run_suite(bin_dir / "bench_scalar_lowering", device, "^C1/dtype:f16/scalar:0.7/", work)
    rows = {b["name"]: b for b in c1["benchmarks"]}
    fused_rows = [n for n in rows if "/exec:fused/" in n]
    check(len(fused_rows) == 2, f"C1 on aot_eager: {len(fused_rows)} fused rows, expected 2")
    for name in fused_rows:
        eager = rows.get(name.replace("/exec:fused/", "/exec:eager/"))
        for figure in ("frac_ulp0", "ulp_max", "ulp_p99", "ulp_mean", "ulp_max_between"):
            check(
                eager is not None and rows[name][figure] == eager[figure],
                f"C1 on aot_eager: {name}: {figure} {rows[name][figure]} != eager's {eager and eager[figure]}",
            )
    d = run_suite(bin_dir / "bench_data_movement", device, "^D/subgraph:transpose/dtype:f16/", work)
    for b in d["benchmarks"]:
        check(b.get("bit_equal") == 1, f"D on aot_eager: {b['name']}: fused differs from eager")


def own_backend(bin_dir: pathlib.Path, work: pathlib.Path):
    sys.path.insert(0, str(HERE))
    name = "fusebench_test_inductor_fma"
    env = {
        "FUSEBENCH_TORCH_BACKEND_MODULES": str(HERE / "fma_inductor_backend.py"),
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache"),
    }
    c1 = run_suite(
        bin_dir / "bench_scalar_lowering",
        f"torch/{name}",
        "^C1/dtype:f16/scalar:0.7/.*/exec:fused/lowering:immediate/",
        work,
        env,
    )
    evidence_files = sorted((work / "dumps" / f"torch-{name}" / "bench_scalar_lowering").glob("C1_*exec-fused*.json"))
    check(bool(evidence_files), "own backend: no C1 evidence written")
    for path in evidence_files:
        evidence = json.loads(path.read_text())["immediate"]["evidence"]
        check(evidence.get("backend") == name, f"own backend: evidence names backend {evidence.get('backend')!r}")
        commands = [k.get("command_line", "") for k in evidence.get("kernels", [])]
        check(
            bool(commands) and all("-ffp-contract=fast" in c for c in commands),
            f"own backend: the kernels' compile commands lack -ffp-contract=fast: {commands}",
        )
    check(len(c1["benchmarks"]) == 1, f"own backend: {len(c1['benchmarks'])} C1 rows, expected 1")


def unknown_backend(bin_dir: pathlib.Path):
    done = subprocess.run(
        [str(bin_dir / "bench_data_movement"), "--device=torch/no_such_backend", "--benchmark_list_tests=true"],
        capture_output=True,
        text=True,
    )
    check(
        done.returncode == 2 and "no_such_backend" in done.stderr and "aot_eager" in done.stderr,
        f"unknown backend: exit {done.returncode}, stderr {done.stderr[-600:]!r}",
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", type=pathlib.Path, required=True)
    parser.add_argument("--work", type=pathlib.Path, required=True)
    args = parser.parse_args()
    probe = subprocess.run([str(args.bin / "bench_data_movement"), "--list-devices"], capture_output=True, text=True)
    if "torch" not in probe.stdout.split():
        print(f"SKIPPED: device torch unavailable: {probe.stderr.strip()}")
        return 77
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    unknown_backend(args.bin)
    aot_eager(args.bin, args.work)
    own_backend(args.bin, args.work)
    for f in failures:
        print(f"FAIL: {f}")
    print(f"torch backends: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
