"""Writes a run's switch files without the report: `fusion_switches.<device>.json` for every device
whose task B evidence lists switches (the format and its checks: reports/fusion_switches.py,
docs/fusion-switches.md). Exit 1 when a written file breaks the format, 2 on bad input.

Usage: python -m tools.fusion_switches RUN_DIR [--out DIR]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from reports.claims.b import switch_recommendation
from reports.fusion_switches import write_switch_files
from reports.results import InputError, load_results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, help="write the files here instead of into RUN_DIR")
    args = parser.parse_args(argv)
    try:
        if not args.run_dir.is_dir():
            raise InputError(f"{args.run_dir}: not a run directory")
        written = write_switch_files(load_results(args.run_dir), switch_recommendation, args.out)
    except InputError as e:
        print(f"fusion_switches: error: {e}", file=sys.stderr)
        return 2
    if not written:
        print(f"fusion_switches: no switches in {args.run_dir}'s B evidence; nothing written")
    status = 0
    for path, doc, problems in written:
        others = len(doc.get("not_recommended", []))
        print(f"fusion_switches: {path} ({len(doc['entries'])} recommended, {others} not recommended)")
        for p in problems:
            print(f"fusion_switches: {path.name}: {p}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
