"""tools/compare BASE CONTENDER: two runs (JSON files or result directories, paired by suite).
Timings go through Google Benchmark's compare.py (gbench: relative change, and the Mann-Whitney U
test when both sides have repetitions); every precision counter is diffed. Exit 1 when a timing
regresses beyond --time-threshold (and the U-test, when available, says it is significant) or a
precision counter gets worse beyond --precision-tolerance; 2 on bad input."""
from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from runs import InputError, load_runs, plain  # noqa: E402

GBENCH_DIR = pathlib.Path("/usr/share/benchmark")
# Counters where a larger value is worse, and where a smaller value is worse.
HIGHER_IS_WORSE = ("ulp_", "abs_err", "rel_err", "mismatches", "distinct_hashes", "frac_ulp_ge2", "frac_ulp1",
                   "max_ulp", "frac_differ")
LOWER_IS_WORSE = ("bit_equal", "kernel_hash_stable", "self_deterministic", "frac_ulp0", "frac_correctly_rounded",
                  "negative_control_detected", "inputs_reload_exact")


def direction(counter: str) -> int:
    """+1 when higher is worse, -1 when lower is worse, 0 for counters that are not precision."""
    if counter.startswith(LOWER_IS_WORSE):
        return -1
    if counter.startswith(HIGHER_IS_WORSE):
        return 1
    return 0


def timing_report(base: dict, contender: dict, threshold: float, alpha: float) -> tuple[list[str], int]:
    sys.path.insert(0, str(GBENCH_DIR))
    try:
        from gbench import report  # Google Benchmark's compare.py machinery
    except ImportError as e:
        raise InputError(f"Google Benchmark's tools (compare.py, gbench) not found in {GBENCH_DIR}: {e}") from e
    diff = report.get_difference_report(base, contender, utest=True)
    lines, regressions = [], 0
    for entry in diff:
        name = entry["name"]
        measurements = entry.get("measurements", [])
        if not measurements:
            continue
        if name == "OVERALL_GEOMEAN":
            lines.append(f"  {name:<70} time {measurements[0]['time']:+7.1%}")
            continue
        change = measurements[0]["time"]  # relative change of the real time, (new - old) / old
        utest = entry.get("utest", {})
        p = utest.get("time_pvalue") if utest and utest.get("have_optimal_repetitions", False) else None
        significant = p is None or p < alpha
        regressed = change > threshold and significant
        regressions += regressed
        lines.append(f"  {name:<70} time {change:+7.1%}" + (f"  U-test p={p:.3f}" if p is not None else "") +
                     ("  REGRESSION" if regressed else ""))
    return lines, regressions


def precision_report(base: dict, contender: dict, tolerance: float) -> tuple[list[str], int]:
    base_rows = {b["name"]: b for b in plain(base["benchmarks"])}
    lines, worse = [], 0
    for b in plain(contender["benchmarks"]):
        a = base_rows.get(b["name"])
        if a is None:
            continue
        for counter, new in b.items():
            d = direction(counter)
            if d == 0 or not isinstance(new, (int, float)) or counter not in a:
                continue
            old = a[counter]
            if old == new:
                continue
            delta = new - old
            scale = max(abs(old), 1e-300)
            got_worse = d * delta > tolerance * scale
            worse += got_worse
            lines.append(f"  {b['name']:<70} {counter:<24} {old:.6g} -> {new:.6g}  "
                         f"{'WORSE' if got_worse else ('better' if d * delta < 0 else 'moved')}")
    return lines, worse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("base")
    parser.add_argument("contender")
    parser.add_argument("--time-threshold", type=float, default=0.25, help="relative slow-down that counts (0.25 = 25%%)")
    parser.add_argument("--alpha", type=float, default=0.05, help="U-test significance level")
    parser.add_argument("--precision-tolerance", type=float, default=1e-9, help="relative change of a precision counter")
    args = parser.parse_args(argv)
    try:
        base_runs, contender_runs = load_runs(args.base), load_runs(args.contender)
        common = sorted(set(base_runs) & set(contender_runs))
        if not common:
            raise InputError(f"no suite in common between {args.base} and {args.contender}")
        time_regressions = precision_regressions = 0
        for suite in common:
            base, contender = base_runs[suite][1], contender_runs[suite][1]
            print(f"== {suite}: {base_runs[suite][0]} vs {contender_runs[suite][0]}")
            lines, n = timing_report(base, contender, args.time_threshold, args.alpha)
            time_regressions += n
            print("timings:", *lines, sep="\n")
            lines, n = precision_report(base, contender, args.precision_tolerance)
            precision_regressions += n
            print("precision counters that moved:", *(lines or ["  none"]), sep="\n")
    except InputError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    print(f"compare: {time_regressions} timing regressions, {precision_regressions} precision regressions")
    return 1 if time_regressions or precision_regressions else 0


if __name__ == "__main__":
    sys.exit(main())
