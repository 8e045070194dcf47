"""tools/gate RESULTS [--thresholds FILE] (python -m tools.gate): check a results directory against the checked-in
thresholds; prints one row per check and device and exits 1 when any fails, 2 on bad input. An incomplete run
(one tools/run did not finish) is exit 2, or with --allow-incomplete checked, labelled and failed.
A check applies to the devices it lists ("devices": [...]), by default to cpu, the engine whose
claims the thresholds encode; results are found by their context (suite, device), whatever the
file names. Each check is filed under the claim it belongs to (reports/claims/); reports/claims/checks.py
evaluates them."""

from __future__ import annotations

import argparse
import pathlib
import sys

from reports.claims.checks import evaluate_check
from reports.claims.thresholds import THRESHOLDS, checks, threshold_text
from reports.results import InputError, load_results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results")
    parser.add_argument("--thresholds", default=str(THRESHOLDS))
    parser.add_argument(
        "--allow-incomplete", action="store_true", help="check a run that did not finish (labelled; it cannot pass)"
    )
    args = parser.parse_args(argv)
    try:
        results = load_results(args.results, args.allow_incomplete)
        if results.incomplete:
            print(f"gate: the run is INCOMPLETE: {results.incomplete}")
        thresholds = checks(pathlib.Path(args.thresholds))
        failures = 0
        print(f"{'check':<55} {'value':>12} {'threshold':>12}  result")
        applied = [(check, device) for check in thresholds for device in check.get("devices", ["cpu"])]
        for check, device in applied:
            for subject, value, passed, note in evaluate_check(check, results, device):
                failures += not passed
                shown = "—" if value is None else f"{value:.4g}"
                print(
                    f"{check['name'][:55]:<55} {shown:>12} {threshold_text(check):>12}  "
                    f"{'pass' if passed else 'FAIL'}  {subject}{'  (' + note + ')' if note else ''}"
                    f"{'' if device == 'cpu' else '  [' + device + ']'}"
                )
    except InputError as e:
        print(f"gate: error: {e}", file=sys.stderr)
        return 2
    print(f"gate: {failures} failing checks")
    if results.incomplete:
        print("gate: FAIL: an incomplete run cannot pass the gate (what did not run was not checked)")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
