"""Adds a run's interleaved copy rates to the reference runs of its machine class
(results/reference/yardsticks.jsonl, reports/yardsticks.py): every later run on a machine of that class (CPU
model, instruction sets and count) sets its shares of the copy against them, as well as against the earlier runs into its own
results folder. Add quiet runs of the default profile from more than one time of day: each one widens the
intervals of later runs to the copy's speed it saw.

Usage: tools/yardstick-reference RUN_DIR [--reference FILE]; exit 2 naming what was wrong (an incomplete run,
no quiet interleaved rounds, a run already there)."""

from __future__ import annotations

import argparse
import pathlib
import sys

from reports import yardsticks
from reports.claims.shares import LOADED_COPY_WAIT
from reports.results import InputError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/yardstick-reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=pathlib.Path)
    parser.add_argument("--reference", type=pathlib.Path, default=yardsticks.REFERENCE_FILE)
    args = parser.parse_args(argv)
    try:
        record = yardsticks.add_reference(args.run_dir, args.reference, LOADED_COPY_WAIT)
    except InputError as e:
        print(f"yardstick-reference: {e}", file=sys.stderr)
        return 2
    print(f"{args.reference}: run {record['run_id']}, {len(record['rates'])} copy rates, class {record['machine']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
