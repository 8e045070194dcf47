"""One results directory from runs of different devices on different machines (a cpu/torch/xla
main job here and a GPU run on a lent machine, say), so that one report shows their columns side by
side: each run's suite JSON, dumps and device-run files, and a run.json that joins theirs and names
where each came from. A device may come from one run only; the report's run line names every
machine (each suite's JSON carries its own).

With --plan DIR (results/device-plan): the loans of the device plan (tools/device_plan.py), each
a partial GPU run, as one reference run: each suite file from the latest loan that has it (a step
a later loan ran again supersedes the earlier one), task E's runs from every loan as one
gpu_alignment.json, each loan's device-run files under device/loans/LOAN/, and a summary naming
every step with the loan and revision that ran it. Other runs named beside --plan join as above.

Usage: python -m tools.combine_runs RUN_DIR RUN_DIR... --out DIR [--no-report]
       python -m tools.combine_runs --plan results/device-plan [RUN_DIR...] --out DIR [--no-report]
Exit status 2 on bad input (a missing run.json, a device in two runs, an existing --out, a plan
directory without loans)."""

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


def combine_plan(plan_dir: pathlib.Path, staging: pathlib.Path) -> pathlib.Path:
    """The plan's loans as one results directory at `staging` (which must not exist)."""
    from tools import device_run

    state_path = plan_dir / "state.json"
    if not state_path.is_file():
        raise CombineError(f"{plan_dir}: no state.json (tools/device_plan.py record writes it)")
    state = json.loads(state_path.read_text())
    loans = [plan_dir / loan["loan"] for loan in state.get("loans", [])]
    absent = [str(loan) for loan in loans if not loan.is_dir()]
    if not loans or absent:
        raise CombineError(f"{plan_dir}: {'no loans recorded' if not loans else 'loans missing: ' + ', '.join(absent)}")
    # a loan that ran only E (PyTorch alone, no suite) has no run.json
    manifests = [(loan, json.loads((loan / "run.json").read_text())) for loan in loans if (loan / "run.json").is_file()]
    if not manifests:
        manifests = [(plan_dir, {"profile": "mixed", "devices": [], "seconds": 0, "ran": [], "skipped": []})]
    staging.mkdir(parents=True)
    source: dict[str, pathlib.Path] = {}
    for loan in loans:  # in order: a later loan's file supersedes
        for result in loan.glob("*@*.json"):
            source[result.name] = loan
    for name, loan in sorted(source.items()):
        shutil.copy2(loan / name, staging / name)
    units = staging / "device" / "gpu_alignment"
    units.mkdir(parents=True)
    for loan in loans:
        if (loan / "dumps").is_dir():
            shutil.copytree(loan / "dumps", staging / "dumps", dirs_exist_ok=True)
        if (loan / "device").is_dir():
            shutil.copytree(loan / "device", staging / "device" / "loans" / loan.name)
            for unit in (loan / "device" / "gpu_alignment").glob("*.json"):
                shutil.copy2(unit, units / unit.name)
    device_run.merge_alignment(units, staging / "device" / "gpu_alignment.json")
    steps = []
    for name, entry in state["steps"].items():
        step = {"step": name, "status": "ok" if entry["status"] == "done" else entry["status"]}
        step["reason"] = f"{entry.get('loan')} at {entry.get('revision')}" + (
            f": {entry['reason']}" if entry.get("reason") else ""
        )
        if "seconds" in entry:
            step["seconds"] = entry["seconds"]
        steps.append(step)
    last_summary = loans[-1] / "device" / "summary.json"
    machine = json.loads(last_summary.read_text()).get("machine", {}) if last_summary.is_file() else {}
    summary = {"budget_s": sum(float(m.get("seconds", 0)) for _, m in manifests), "machine": machine,
               "steps": steps, "loans": state["loans"]}  # fmt: skip
    (staging / "device" / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    # a device comes from several loans here: one run.json over them, each suite file from one loan
    devices = list(dict.fromkeys(d for _, m in manifests for d in m.get("devices", [])))
    ran = {}
    for loan, m in manifests:
        for e in m.get("ran", []):
            if source.get(f"{e['suite']}@{e['device'].replace(':', '-').replace('/', '-')}.json") == loan:
                ran[(e["suite"], e["device"])] = e
    manifest = combined_manifest([(plan_dir, {**manifests[-1][1], "devices": devices, "ran": list(ran.values()),
                                              "seconds": sum(int(m.get("seconds", 0)) for _, m in manifests)})])  # fmt: skip
    manifest["combined_from"] = [
        {"run": str(loan), "devices": m.get("devices", []), "machine": m.get("machine"), "profile": m.get("profile")}
        for loan, m in manifests
    ]
    (staging / "run.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return staging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/combine-runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=pathlib.Path)
    parser.add_argument("--plan", type=pathlib.Path, help="the device plan's directory: its loans as one run")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    if args.plan is None and len(args.runs) < 2:
        parser.error("name at least two results directories, or --plan DIR")
    try:
        if args.plan is not None:
            if args.out.exists():
                raise CombineError(f"{args.out} exists; combine into a new directory")
            plan_run = args.out.with_name(args.out.name + ".plan.tmp")
            shutil.rmtree(plan_run, ignore_errors=True)
            try:
                combine_plan(args.plan, plan_run)
                if args.runs:
                    manifest = combine([plan_run, *args.runs], args.out)
                else:
                    os.replace(plan_run, args.out)
                    manifest = json.loads((args.out / "run.json").read_text())
            finally:
                shutil.rmtree(plan_run, ignore_errors=True)
        else:
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
