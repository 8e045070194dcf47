"""Smoke run of one suite binary: a tiny min-time, JSON out, then checks that every benchmark ran
without error and carries throughput and the suite's context. Suite-specific counter checks are
listed in EXPECTED_COUNTERS."""

import argparse
import json
import pathlib
import subprocess
import sys

# A share of the copy from interleaved rounds (support/interleaved.hpp): median, 95 % interval, rounds.
COPY_SHARE = ["copy_share", "copy_share_lo", "copy_share_hi", "copy_share_rounds", "copy_bytes_per_second"]
EXPECTED_COUNTERS = {
    "bench_precision_toolkit": {
        "UlpDiff/": ["ulp_max", "frac_ulp0", "frac_ulp1", "bytes_per_second", *COPY_SHARE],
        "ErrorStats/": ["ulp_max", "ulp_p99", "ulp_p50", "rel_err_p99", "abs_err_max", "bytes_per_second", *COPY_SHARE],
        "ErrorStatsVsF64/": ["ulp_max", "ulp_p99", "bytes_per_second", *COPY_SHARE],
        "BitEqual/": ["bit_equal", "bytes_per_second", *COPY_SHARE],
        "MemoryCopy/": ["bytes_per_second"],
    },
    "bench_engine_throughput": {
        "Chain/": ["bytes_per_second", "bytes_moved", "kernels", "ulp_max", "ulp_p99", *COPY_SHARE],
        "LayerNorm/": ["bytes_per_second", "ulp_max", *COPY_SHARE],
        "Softmax/": ["bytes_per_second", "ulp_max", *COPY_SHARE],
        "Matmul/": ["gflops", "ulp_max"],
        "Fp32Peak/": ["gflops"],
        "CompileCold/": ["compile_ms"],
        "MemoryCopy/": ["bytes_per_second"],
    },
    "bench_fusion_determinism": {
        "A/": [
            "runs",
            "distinct_hashes",
            "kernel_hash_stable",
            "max_ulp_vs_round1",
            "negative_control_detected",
            "negative_control_knob",
            "control_source_differs",
        ],
    },
    "bench_scalar_lowering": {
        "C1/": ["frac_ulp0", "frac_ulp1", "frac_ulp_ge2", "ulp_max", "ulp_p99", "instructions_differ"],
        "SASS/C1/": [
            "immediate_fmul_constant_operand",
            "broadcast_fmul_constant_operand",
            "immediate_ldg",
            "broadcast_ldg",
            "sass_differ",
        ],
    },
    "bench_reduction_order": {
        "C2/out:": ["self_deterministic", "ulp_max", "ulp_p99", "ulp_vs_tile512", "ulp_vs_tile2048"],
        "C2/knob:threads/": [
            "self_deterministic",
            "ulp_between_orders",
            "frac_differ_between_orders",
            "sources_differ",
        ],
    },
    "bench_approximations": {
        "C3/": ["ulp_p50", "ulp_p99", "ulp_max", "frac_correctly_rounded"],
        "C3/op:rsqrt/dtype:f32/mode:ieee/": ["fused_vs_eager_frac_equal", "eager_frac_correctly_rounded"],
        "SASS/C3/": ["MUFU.RSQ", "MUFU.RCP", "FFMA", "FMUL", "FADD", "instructions"],
    },
    "bench_accumulated_error": {
        "B/": [
            "sets",
            "eager_ulp_p99",
            "fused_ulp_p99",
            "eager_ulp_max",
            "fused_ulp_max",
            "fused_le_eager_p99",
            "counterexamples",
            "ulp_counterexamples",
            "at_cancellation",
            "ulp_within_margin",
            "shared_error_sets",
            "counterexamples_localised",
            "emulated_vs_eager_max_ulp",
            "eager_setmax_p99",
        ],
    },
    "bench_cuda_codegen": {
        "NVRTC/cold/": ["compile_ms", "cubin_bytes", "sass_instructions"],
        "NVRTC/hit/": ["hit_ms", "cold_compile_ms", "cold_over_hit"],
    },
    "bench_data_movement": {
        "D/": ["bit_equal", "mismatches", "kernels"],
    },
}

parser = argparse.ArgumentParser()
parser.add_argument("--binary", required=True)
parser.add_argument("--suite", required=True)
parser.add_argument("--work", required=True)
args = parser.parse_args()
work = pathlib.Path(args.work)
work.mkdir(parents=True, exist_ok=True)
out = work / "smoke.json"
# Seven interleaved rounds, not the 31 of a run: the smoke run checks that the shares and their intervals
# exist, not what they say (the copy shares' rounds were half the toolkit's smoke time).
SMOKE_ROUNDS = 7
cmd = [
    args.binary,
    "--profile=quick",
    "--benchmark_min_time=0.01",
    f"--interleaved-rounds={SMOKE_ROUNDS}",
    f"--benchmark_out={out}",
    "--benchmark_out_format=json",
    "--benchmark_format=console",
]
run = subprocess.run(cmd, capture_output=True, text=True)
print(run.stdout[-4000:])
failures = []
if run.returncode != 0:
    failures.append(f"exit {run.returncode}: {run.stderr[-2000:]}")
else:
    data = json.loads(out.read_text())
    context = data["context"]
    for key in ["fusebench_suite", "fusebench_profile", "compiler", "compile_flags", "cpu_isa", "git_revision"]:
        if key not in context:
            failures.append(f"context lacks {key}")
    if context.get("fusebench_interleaved_rounds") != str(SMOKE_ROUNDS):
        failures.append(f"context's fusebench_interleaved_rounds is {context.get('fusebench_interleaved_rounds')!r}")
    if not data["benchmarks"]:
        failures.append("no benchmarks ran")
    for bench in data["benchmarks"]:
        if bench.get("error_occurred"):
            failures.append(f"{bench['name']}: {bench.get('error_message')}")
        for prefix, counters in EXPECTED_COUNTERS.get(args.suite, {}).items():
            if bench["name"].startswith(prefix):
                failures += [f"{bench['name']} lacks {c}" for c in counters if c not in bench]
        if "copy_share" in bench and not (
            0 < bench["copy_share_lo"] <= bench["copy_share"] <= bench["copy_share_hi"]
            and bench["copy_share_rounds"] == SMOKE_ROUNDS
        ):
            failures.append(
                f"{bench['name']}: copy share {bench['copy_share']} outside its interval "
                f"[{bench['copy_share_lo']}, {bench['copy_share_hi']}] or not over {SMOKE_ROUNDS} rounds"
            )
    if data["benchmarks"] and all(b.get("error_occurred") for b in data["benchmarks"]):
        failures.append("every benchmark was skipped")
# Bad flags are refused with exit 2.
for flag in ["--profile=huge", "--interleaved-rounds=5", "--interleaved-rounds=7x"]:
    bad = subprocess.run([args.binary, flag], capture_output=True, text=True)
    if bad.returncode != 2 or flag not in bad.stderr:
        failures.append(f"{flag}: exit {bad.returncode}, stderr {bad.stderr!r}")
for f in failures:
    print("FAIL:", f)
print(f"{args.suite} smoke: {len(failures)} failures")
sys.exit(1 if failures else 0)
