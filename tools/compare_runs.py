"""tools/compare BASE CONTENDER: two runs (result directories or suite JSON files), paired by
(suite, device) from each file's context.

Precision counters are compared exactly: a changed ULP figure is never noise. A counter that got
worse is a regression; one that improved or moved without a known direction is listed.

Timings are noisy, so a plain percentage of two single measurements decides nothing:
  - with repetitions on both sides, Google Benchmark's Mann-Whitney U test (gbench) decides: a
    regression needs p < --alpha AND a median slow-down above --min-effect;
  - without repetitions, a benchmark's time is taken as a ratio to its run's own yardstick, and a
    regression is a ratio that grew by more than the thresholds file's tolerance. The thresholds file
    names the yardstick per suite: a benchmark of the same run (a regex, e.g. the memory copy), or
    "median": the suite's median time ratio between the two runs, i.e. how much slower the machine
    was as a whole (robust to one benchmark that really changed; blind to a change of all of them);
  - a suite with neither is shown, not gated.
Suites or benchmarks present on one side only are listed, never silently dropped.
A run that did not finish (reports/results.py incomplete_reason) is bad input unless --allow-incomplete,
which compares it labelled INCOMPLETE.
Exit 1 on a regression, 2 on bad input."""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import re
import statistics
import sys

from reports.results import InputError, Results, load_results, plain, seconds

GBENCH_DIR = pathlib.Path("/usr/share/benchmark")
THRESHOLDS = pathlib.Path(__file__).resolve().parent / "thresholds.json"

# ---- which counters are precision figures, and which way is worse
# Speed, sizes and bookkeeping: not precision (timings are compared through their own rules).
NOT_PRECISION = re.compile(
    r"(bytes_per_second|items_per_second|gflops|_ms$|bytes_moved|bytes_copied|^threads$|"
    r"^kernels$|^runs$|^sets$|^promoted$|^iterations$|^copy_share|^interleaved_|^passes$)"
)
# Larger is better for these (verdicts and shares of exact results); for every other precision
# counter with an error-like name, larger is worse.
LOWER_IS_WORSE = re.compile(
    r"(bit_equal|hash_stable|self_deterministic|frac_ulp0|frac_correctly_rounded|"
    r"negative_control_detected|inputs_reload_exact|fused_le_eager)"
)
HIGHER_IS_WORSE = re.compile(r"(ulp|err|mismatch|distinct_hashes|counterexamples|differ)")


def direction(counter: str) -> int | None:
    """+1 when higher is worse, -1 when lower is worse, 0 for a precision counter with no known
    direction, None for a counter that is not a precision figure."""
    if NOT_PRECISION.search(counter):
        return None
    if LOWER_IS_WORSE.search(counter):
        return -1
    if HIGHER_IS_WORSE.search(counter) and not counter.startswith("frac_ulp1"):
        return 1
    return 0


def iterations(run: dict) -> dict[str, list[dict]]:
    """name -> its measured rows (one per repetition); failed and skipped benchmarks dropped."""
    out: dict[str, list[dict]] = {}
    for b in run["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred") or "real_time" not in b:
            continue
        out.setdefault(b["name"], []).append(b)
    return out


# ---- timings
def _gbench_report():
    """Google Benchmark's compare.py machinery (gbench/report.py, from Debian's libbenchmark-tools), loaded
    from its file: the package is not on the path, and this leaves the path as it is."""
    path = GBENCH_DIR / "gbench" / "report.py"
    spec = importlib.util.spec_from_file_location("gbench_report", path)
    if spec is None or not path.is_file():
        raise InputError(f"Google Benchmark's tools (compare.py, gbench) not found in {GBENCH_DIR}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise InputError(f"Google Benchmark's gbench/report.py in {GBENCH_DIR} cannot be loaded: {e}") from e
    return module


def utest_pvalues(base: dict, contender: dict) -> dict[str, float]:
    """name -> two-sided Mann-Whitney p-value of real time, from Google Benchmark's own compare code."""
    report = _gbench_report()
    keep = lambda run: {
        **run,
        "benchmarks": [b for b in run["benchmarks"] if b.get("run_type", "iteration") == "iteration"],
    }
    out = {}
    for entry in report.get_difference_report(keep(base), keep(contender), utest=True):
        u = entry.get("utest") or {}
        if u.get("time_pvalue") is not None:
            out[entry["name"]] = u["time_pvalue"]
    return out


def yardsticks(rows: dict[str, list[dict]], pattern: str) -> dict[int, tuple[str, float]]:
    """threads -> (name, median time) of the benchmarks matching the yardstick pattern: a benchmark is
    set against the yardstick on as many threads as it used (its `threads` counter), else the first."""
    out: dict[int, tuple[str, float]] = {}
    for n in rows:
        if re.search(pattern, n):
            out.setdefault(int(rows[n][0].get("threads", 1)), (n, statistics.median(seconds(b) for b in rows[n])))
    return out


def yardstick_for(yards: dict[int, tuple[str, float]], row: dict) -> tuple[str, float] | None:
    if not yards:
        return None
    return yards.get(int(row.get("threads", 1)), next(iter(yards.values())))


def timing_report(base: dict, contender: dict, suite: str, settings: dict, args) -> tuple[list[str], int, str]:
    """Lines, regression count and the rule that decided."""
    a_rows, b_rows = iterations(base), iterations(contender)
    names = [n for n in a_rows if n in b_rows]
    repeated = names and all(len(a_rows[n]) >= 2 and len(b_rows[n]) >= 2 for n in names)
    pattern = settings.get("yardsticks", {}).get(suite)
    median_drift = None
    if pattern == "median":
        ratios = [
            statistics.median(seconds(b) for b in b_rows[n]) / statistics.median(seconds(b) for b in a_rows[n])
            for n in names
            if all(seconds(b) > 0 for b in a_rows[n] + b_rows[n])
        ]
        median_drift = statistics.median(ratios) if ratios else None
        pattern = None
    a_yards = yardsticks(a_rows, pattern) if pattern else {}
    b_yards = yardsticks(b_rows, pattern) if pattern else {}
    tolerance = float(settings.get("yardstick_tolerance", 0.5))
    if repeated:
        rule = (
            f"U-test over repetitions: regression when p < {args.alpha} and the median is more than "
            f"{args.min_effect:.0%} slower"
        )
        pvalues = utest_pvalues(base, contender)
    elif median_drift is not None:
        rule = (
            f"single measurements, each as a ratio to the run's yardstick (the suite's median change, "
            f"{median_drift - 1:+.1%}): regression when that ratio grows by more than {tolerance:.0%}"
        )
    elif a_yards and b_yards:
        rule = (
            f"single measurements, each as a ratio to the run's yardstick ({pattern} on as many threads): "
            f"regression when that ratio grows by more than {tolerance:.0%}"
        )
    else:
        rule = "single measurements and no yardstick for this suite: shown, not gated"
    ungated = [re.compile(u) for u in settings.get("ungated", [])]
    lines, regressions = [], 0
    for name in names:
        t_a = statistics.median(seconds(b) for b in a_rows[name])
        t_b = statistics.median(seconds(b) for b in b_rows[name])
        if t_a <= 0 or t_b <= 0:
            continue
        raw = t_b / t_a - 1
        note, regressed = "", False
        if any(u.search(name) for u in ungated):
            note = "not gated (thresholds: ungated)"
        elif repeated:
            p = pvalues.get(name)
            regressed = p is not None and p < args.alpha and raw > args.min_effect
            note = f"U-test p={p:.3f}" if p is not None else "no U-test"
        elif median_drift is not None:
            relative = (t_b / t_a) / median_drift - 1
            regressed = relative > tolerance
            note = f"vs yardstick {relative:+7.1%}"
        elif a_yards and b_yards:
            a_yard, b_yard = yardstick_for(a_yards, a_rows[name][0]), yardstick_for(b_yards, b_rows[name][0])
            if re.search(pattern, name):
                note = "yardstick"
            else:
                relative = (t_b / b_yard[1]) / (t_a / a_yard[1]) - 1
                regressed = relative > tolerance
                note = f"vs yardstick {relative:+7.1%}"
        else:
            note = "not gated"
        regressions += regressed
        lines.append(
            f"  {name:<72} {t_a:10.4g} s -> {t_b:10.4g} s  {raw:+7.1%}  {note}" + ("  REGRESSION" if regressed else "")
        )
    for name in a_rows:
        if name not in b_rows:
            lines.append(f"  {name:<72} only in the base run")
    for name in b_rows:
        if name not in a_rows:
            lines.append(f"  {name:<72} only in the contender run")
    return lines, regressions, rule


# ---- precision counters: exact
def precision_report(base: dict, contender: dict) -> tuple[list[str], int]:
    base_rows = {b["name"]: b for b in plain(base["benchmarks"])}
    lines, worse = [], 0
    for b in plain(contender["benchmarks"]):
        a = base_rows.get(b["name"])
        if a is None:
            continue
        for counter, new in b.items():
            d = direction(counter)
            if d is None or counter not in a or not isinstance(new, (int, float)) or isinstance(new, bool):
                continue
            if counter in (
                "real_time",
                "cpu_time",
                "iterations",
                "repetitions",
                "repetition_index",
                "threads",
                "family_index",
                "per_family_instance_index",
            ):
                continue
            old = a[counter]
            if not isinstance(old, (int, float)) or old == new:
                continue
            got_worse = d * (new - old) > 0
            worse += got_worse
            word = "WORSE" if got_worse else ("better" if d * (new - old) < 0 else "changed")
            lines.append(f"  {b['name']:<72} {counter:<26} {old:.9g} -> {new:.9g}  {word}")
    return lines, worse


def load_settings(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text()).get("compare", {})
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: cannot read the thresholds ({e})") from e


def run_profiles(results: Results, keys) -> dict[str, list[str]]:
    """profile -> the suites (on their devices) that ran it, as their contexts say (run.json's as a fallback)."""
    out: dict[str, list[str]] = {}
    fallback = (results.manifest or {}).get("profile")
    for suite, device in keys:
        profile = results.by_key[(suite, device)].context.get("fusebench_profile") or fallback or "unknown"
        out.setdefault(profile, []).append(f"{suite} on {device}")
    return out


def provenance(results: Results, field: str) -> set[str]:
    values = {r.context.get(field) for r in results.by_key.values()}
    if field == "git_revision" and results.manifest and results.manifest.get("git_revision"):
        values.add(results.manifest["git_revision"])
    return {v for v in values if v}


def check_comparable(base: Results, contender: Results, common: list[tuple[str, str]]) -> None:
    """Refuses runs that measured different things (InputError, exit 2); says where commits or machines differ."""
    base_profiles, contender_profiles = run_profiles(base, common), run_profiles(contender, common)
    if len(base_profiles) != 1 or base_profiles.keys() != contender_profiles.keys():
        raise InputError(
            "the runs ran different profiles (different numbers of sets, sizes and repetitions, so their figures "
            "differ by design): base "
            + "; ".join(f"{p} ({', '.join(w)})" for p, w in base_profiles.items())
            + ", contender "
            + "; ".join(f"{p} ({', '.join(w)})" for p, w in contender_profiles.items())
            + "; compare runs of one profile"
        )
    cases = 0
    for key in common:
        a = {b["name"] for b in plain(base.by_key[key].data.get("benchmarks", []))}
        b = {b["name"] for b in plain(contender.by_key[key].data.get("benchmarks", []))}
        cases += len(a & b)
    if not cases:
        raise InputError(
            f"no case in common: the runs share {len(common)} suite(s) ({', '.join(f'{s} on {d}' for s, d in common)}) "
            "but no benchmark of the same name (different filters?); nothing to compare"
        )
    for field, what in (("git_revision", "commits"), ("host_name", "machines"), ("cpu_model", "processors")):
        a, b = provenance(base, field), provenance(contender, field)
        if a and b and a != b:
            print(f"compare: the runs differ in {what}: base {', '.join(sorted(a))}; contender {', '.join(sorted(b))}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("contender")
    parser.add_argument("--alpha", type=float, default=0.05, help="U-test significance level (with repetitions)")
    parser.add_argument(
        "--min-effect",
        type=float,
        default=0.10,
        help="smallest median slow-down that counts with repetitions (0.10 = 10%%)",
    )
    parser.add_argument(
        "--thresholds",
        type=pathlib.Path,
        default=THRESHOLDS,
        help="its 'compare' section names each suite's yardstick and the tolerance",
    )
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="compare runs that did not finish (each is labelled; what it lacks is not compared)",
    )
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.thresholds)
        base_runs = load_results(args.base, args.allow_incomplete)
        contender_runs = load_results(args.contender, args.allow_incomplete)
        for side, results in (("base", base_runs), ("contender", contender_runs)):
            if results.incomplete:
                print(f"compare: the {side} run is INCOMPLETE: {results.incomplete}")
        common = [k for k in base_runs.by_key if k in contender_runs.by_key]
        if not common:
            raise InputError(f"no suite and device in common between {args.base} and {args.contender}")
        check_comparable(base_runs, contender_runs, common)
        time_regressions = precision_regressions = 0
        for suite, device in common:
            a, b = base_runs.by_key[(suite, device)], contender_runs.by_key[(suite, device)]
            print(f"== {suite} on {device}: {a.path} vs {b.path}")
            lines, n, rule = timing_report(a.data, b.data, suite, settings, args)
            time_regressions += n
            print(f"timings ({rule}):", *lines, sep="\n")
            lines, n = precision_report(a.data, b.data)
            precision_regressions += n
            print("precision counters that changed (compared exactly):", *(lines or ["  none"]), sep="\n")
        for side, mine, other in (("base", base_runs, contender_runs), ("contender", contender_runs, base_runs)):
            for key in mine.by_key:
                if key not in other.by_key:
                    print(f"compare: {key[0]} on {key[1]} is only in the {side} run: not compared")
        for side, results in (("base", base_runs), ("contender", contender_runs)):
            for suite, device, reason in results.not_run():
                print(f"compare: {suite} on {device} was not run in the {side} ({reason})")
    except InputError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    print(f"compare: {time_regressions} timing regressions, {precision_regressions} precision regressions")
    return 1 if time_regressions or precision_regressions else 0


if __name__ == "__main__":
    sys.exit(main())
