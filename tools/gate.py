"""tools/gate RESULTS [--thresholds FILE]: check a results directory against the checked-in
thresholds; prints one row per check and device and exits 1 when any fails, 2 on bad input.
A check applies to the devices it lists ("devices": [...]), by default to cpu, the engine whose
claims the thresholds encode; results are found by their context (suite, device), whatever the
file names."""
from __future__ import annotations

import argparse
import json
import operator
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from runs import InputError, Results, load_results, plain  # noqa: E402

OPS = {"==": operator.eq, "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}


def field_value(b: dict, field: str):
    """A benchmark's field; a rate (`*_per_second`) per wall-clock second, as the report shows it:
    Google Benchmark divides by CPU time unless the benchmark uses real or manual time."""
    value = b.get(field)
    if value is None or not field.endswith("_per_second"):
        return value
    if b.get("run_name", b["name"]).endswith(("/real_time", "/manual_time")) or not b.get("real_time"):
        return value
    return value * b["cpu_time"] / b["real_time"]


def matching(run: dict, pattern: str) -> list[dict]:
    return [b for b in plain(run["benchmarks"]) if re.search(pattern, b["name"]) and not b.get("error_occurred")]


def evaluate(check: dict, results: Results, device: str) -> list[tuple[str, float | None, bool, str]]:
    """Rows (subject, value, passed, note) for one check on one device."""
    if check["op"] not in OPS:
        raise InputError(f"thresholds: check '{check['name']}' has unknown op {check['op']!r}")
    suite = check["suite"]
    result = results.get(suite, device)
    if result is None:
        reason = next((r for s, d, r in results.not_run() if (s, d) == (suite, device)), "")
        return [(f"{suite} on {device}", None, False, "suite not run" + (f": {reason}" if reason else ""))]
    run = result.data
    compare = OPS[check["op"]]
    if "counter" in check:
        rows = []
        benches = matching(run, check["benchmark"])
        if not benches:
            return [(check["benchmark"], None, False, "no benchmark matches")]
        for b in benches:
            value = b.get(check["counter"])
            if value is None:
                rows.append((b["name"], None, False, f"no counter {check['counter']}"))
            else:
                rows.append((b["name"], value, bool(compare(value, check["value"])), ""))
        return rows
    num = matching(run, check["ratio"]["numerator"]["benchmark"])
    den = matching(run, check["ratio"]["denominator"]["benchmark"])
    same = check["ratio"].get("same_counter")  # e.g. "threads": the copy on as many threads as the comparison
    if same and num:
        den = [d for d in den if d.get(same, 1) == num[0].get(same, 1)]
    # e.g. "threads": the fastest copy on at most as many threads (one on more threads that ran slower
    # was held back by other work), as the report's section S sets it
    at_most = check["ratio"].get("at_most_counter")
    if at_most and num:
        den = [d for d in den if d.get(at_most, 1) <= num[0].get(at_most, 1)]
        den.sort(key=lambda d: -(field_value(d, check["ratio"]["denominator"]["field"]) or 0))
    if not num or not den:
        return [(suite, None, False, "ratio operands missing")]
    n = field_value(num[0], check["ratio"]["numerator"]["field"])
    d = field_value(den[0], check["ratio"]["denominator"]["field"])
    if n is None or d in (None, 0):
        return [(num[0]["name"], None, False, "ratio field missing or zero")]
    value = n / d
    return [(f"{num[0]['name']} / {den[0]['name']}", value, bool(compare(value, check["value"])), "")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results")
    parser.add_argument("--thresholds", default=str(pathlib.Path(__file__).resolve().parent / "thresholds.json"))
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results)
        try:
            thresholds = json.loads(pathlib.Path(args.thresholds).read_text())["checks"]
        except (OSError, json.JSONDecodeError, KeyError) as e:
            raise InputError(f"{args.thresholds}: cannot read the thresholds ({e})") from e
        failures = 0
        print(f"{'check':<55} {'value':>12} {'threshold':>12}  result")
        checks = [(check, device) for check in thresholds for device in check.get("devices", ["cpu"])]
        for check, device in checks:
            for subject, value, passed, note in evaluate(check, results, device):
                failures += not passed
                shown = "—" if value is None else f"{value:.4g}"
                print(f"{check['name'][:55]:<55} {shown:>12} {check['op'] + ' ' + str(check['value']):>12}  "
                      f"{'pass' if passed else 'FAIL'}  {subject}{'  (' + note + ')' if note else ''}"
                      f"{'' if device == 'cpu' else '  [' + device + ']'}")
    except InputError as e:
        print(f"gate: error: {e}", file=sys.stderr)
        return 2
    print(f"gate: {failures} failing checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
