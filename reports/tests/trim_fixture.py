"""Turns a real results directory into a small test fixture (how fixtures/quick_a, quick_b and
report_run were made). Keeps every suite JSON and run.json as they are; with --dumps also the
evidence files the report reads (B's per-set maxima and counter-examples, cut to --counterexamples
per file without their per-op dump paths, the per-set figures at 4 significant digits; C1's trace of
the f16 x0.7 fused kernels; C3's f32 rsqrt histograms). --skip SUITE leaves a suite's JSON out.

Usage: trim_fixture.py RUN_DIR FIXTURE_DIR [--dumps] [--counterexamples N] [--skip SUITE ...]"""

from __future__ import annotations

import argparse
import json
import pathlib

EVIDENCE = [
    "bench_accumulated_error/B_*.json",
    "bench_scalar_lowering/C1_dtype-f16_scalar-0.7_*exec-fused*.json",
    "bench_approximations/C3_op-rsqrt_dtype-f32_mode-newton-bittrick_*.json",
]


def _significant(x, digits: int = 4):
    if isinstance(x, float):
        return float(f"{x:.{digits}g}")
    if isinstance(x, list):
        return [_significant(v, digits) for v in x]
    if isinstance(x, dict):
        return {k: _significant(v, digits) for k, v in x.items()}
    return x


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=pathlib.Path)
    parser.add_argument("fixture", type=pathlib.Path)
    parser.add_argument("--dumps", action="store_true")
    parser.add_argument("--counterexamples", type=int, default=12)
    parser.add_argument("--skip", nargs="*", default=[], help="suites to leave out (e.g. training_alignment)")
    args = parser.parse_args()
    args.fixture.mkdir(parents=True, exist_ok=True)
    for f in sorted(args.run.glob("*.json")):
        if f.name.split("@")[0] in args.skip:
            continue
        data = json.loads(f.read_text())
        if f.name == "run.json":
            data["ran"] = [r for r in data["ran"] if r["suite"] not in args.skip]
        if "context" in data:
            data["context"].pop("dump_dir", None)  # an absolute path of the machine that ran it
        (args.fixture / f.name).write_text(json.dumps(data, indent=1) + "\n")
    if args.dumps:
        for device_dir in sorted((args.run / "dumps").iterdir()):
            for pattern in EVIDENCE:
                for f in sorted(device_dir.glob(pattern)):
                    target = args.fixture / "dumps" / device_dir.name / f.parent.name / f.name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    data = json.loads(f.read_text())
                    if "counterexamples" in data:
                        worst = sorted(data["counterexamples"], key=lambda c: c["eager_ulp_max"] - c["fused_ulp_max"])
                        # the per-op dump paths name files the fixture does not carry
                        data["counterexamples"] = [
                            {k: v for k, v in c.items() if k != "ops"} for c in worst[: args.counterexamples]
                        ]
                    if "per_set" in data:
                        data["per_set"] = _significant(data["per_set"])
                    target.write_text(json.dumps(data) + "\n")
    print(
        f"trim_fixture: {args.fixture}: {sum(p.stat().st_size for p in args.fixture.rglob('*') if p.is_file()):,} bytes"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
