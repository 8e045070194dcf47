"""Turns what a device run brought back (OUT/results.tar.gz from tools/device-run) into a results
directory here: the suites' JSON and run.json as tools/run writes them, the run's own files under
device/ (summary, machine, logs, the probe scripts' JSON, the GPU tests' JUnit file), without the
dumps' arrays, cache directories and repro scripts (--keep-dumps keeps them),
then writes the report. A reference run is such a directory, committed.

Usage: python -m tools.device_results DEVICE_OUT_DIR --out DIR [--keep-dumps] [--no-report]"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import tarfile
import tempfile

# Files of an early layout (before device/ held them) that belong under device/.
RUN_FILES = ("device-run-summary.json", "machine.json", "inductor_mechanisms.json", "gpu_alignment.json",
             "gpu-tests.junit.xml", "logs")  # fmt: skip


def unpack(device_out: pathlib.Path, out: pathlib.Path, keep_dumps: bool) -> dict:
    archive = device_out / "results.tar.gz"
    if not archive.is_file():
        raise SystemExit(f"device-results: {archive}: no results archive (the device run's OUT folder?)")
    if out.exists():
        raise SystemExit(f"device-results: {out} exists; a reference run is written once (remove it first)")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        results = pathlib.Path(tmp) / "results"
        if not results.is_dir():
            raise SystemExit(f"device-results: {archive} holds no results/ folder")
        extras = results / "device"
        extras.mkdir(exist_ok=True)
        for name in RUN_FILES:
            if (results / name).exists():
                target = "summary.json" if name == "device-run-summary.json" else name
                shutil.move(str(results / name), str(extras / target))
        for partial in results.glob("*.partial"):
            shutil.move(str(partial), str(extras / partial.name))
        for leftover in (".entries.tsv", ".instances.tsv"):
            (results / leftover).unlink(missing_ok=True)
        if not keep_dumps:
            # the evidence the report reads stays (B's per-set figures, each case's JSON); arrays,
            # the frameworks' cache directories and the per-graph repro scripts go
            for path in sorted((results / "dumps").rglob("*"), reverse=True):
                relative = str(path.relative_to(results))
                if path.is_file() and (path.suffix in (".npy", ".py") or "cache_" in relative or "/repro/" in relative):
                    path.unlink()
                elif path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
        if (device_out / "summary.json").is_file():  # the last call's, which names every step
            shutil.copy(device_out / "summary.json", extras / "summary.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(results, out)
    summary = (
        json.loads((out / "device" / "summary.json").read_text()) if (out / "device" / "summary.json").exists() else {}
    )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/device-results", description=__doc__.split("\n\n")[0])
    parser.add_argument("device_out", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--keep-dumps", action="store_true")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    summary = unpack(args.device_out, args.out, args.keep_dumps)
    for step in summary.get("steps", []):
        print(f"device-results: {step['step']:<28} {step['status']:<10} {step.get('reason', '')[:100]}")
    if not args.no_report:
        from reports import report

        return report.main([str(args.out)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
