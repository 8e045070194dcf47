"""One results directory from runs of different devices on different machines (a cpu/torch/xla
main job here and a GPU run on a lent machine, say), so that one report shows their columns side by
side: each run's suite JSON, dumps and device-run files, and a run.json that joins theirs and names
where each came from. A device may come from one run only; the report's run line names every
machine (each suite's JSON carries its own).

Usage: python -m tools.combine_runs RUN_DIR RUN_DIR... --out DIR [--no-report]
Exit status 2 on bad input (a missing run.json, a device in two runs, an existing --out)."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys


class CombineError(Exception):
    pass


def combined_manifest(manifests: list[tuple[pathlib.Path, dict]]) -> dict:
    devices: list[str] = []
    for path, m in manifests:
        for d in m.get("devices", []):
            if d in devices:
                raise CombineError(f"{path}: device {d} is in an earlier run too; a device comes from one run")
            devices.append(d)
    profiles = list(dict.fromkeys(m.get("profile", "?") for _, m in manifests))
    unavailable = {}
    for _, m in manifests:
        unavailable.update({d: why for d, why in (m.get("unavailable") or {}).items() if d not in devices})
    first = manifests[0][1]
    return {
        "profile": profiles[0] if len(profiles) == 1 else " + ".join(profiles),
        "filter": first.get("filter"),
        "devices": devices,
        "seconds": sum(int(m.get("seconds", 0)) for _, m in manifests),
        "ran": [e for _, m in manifests for e in m.get("ran", [])],
        "skipped": [e for _, m in manifests for e in m.get("skipped", [])],
        "instances": [e for _, m in manifests for e in m.get("instances", [])],
        "git_revision": first.get("git_revision"),
        "machine": first.get("machine"),
        "timing": first.get("timing"),
        **({"unavailable": unavailable} if unavailable else {}),
        "combined_from": [
            {
                "run": str(path),
                "devices": m.get("devices", []),
                "machine": m.get("machine"),
                "profile": m.get("profile"),
            }
            for path, m in manifests
        ],
    }


def combine(run_dirs: list[pathlib.Path], out: pathlib.Path) -> dict:
    if out.exists():
        raise CombineError(f"{out} exists; combine into a new directory")
    manifests = []
    for run in run_dirs:
        path = run / "run.json"
        if not path.is_file():
            raise CombineError(f"{run}: no run.json (a results directory from tools/run or tools/device-results?)")
        try:
            manifests.append((run, json.loads(path.read_text())))
        except json.JSONDecodeError as e:
            raise CombineError(f"{path}: not JSON ({e})") from e
    if sum((run / "device").is_dir() for run in run_dirs) > 1:
        raise CombineError(
            "more than one run has a device/ folder (device-run files); combine one device run at a time"
        )
    manifest = combined_manifest(manifests)
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for run in run_dirs:
            for result in sorted(run.glob("*@*.json")):
                if (staging / result.name).exists():
                    raise CombineError(f"{result}: {result.name} is in an earlier run too")
                shutil.copy2(result, staging / result.name)
            for folder in ("dumps", "device"):
                if (run / folder).is_dir():
                    shutil.copytree(run / folder, staging / folder, dirs_exist_ok=True)
        (staging / "run.json").write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/combine-runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error("name at least two results directories")
    try:
        manifest = combine(args.runs, args.out)
    except CombineError as e:
        print(f"combine-runs: error: {e}", file=sys.stderr)
        return 2
    print(f"combine-runs: {args.out}: devices {', '.join(manifest['devices'])}")
    if args.no_report:
        return 0
    from reports import report

    return report.main([str(args.out)])


if __name__ == "__main__":
    sys.exit(main())
