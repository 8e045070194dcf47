"""A results directory's run.json: what ran, what was skipped and why, per-suite and per-instance wall
times, the machine and the timing loops. Written by tools/run and tools/device-run from the lines
they append while the suites run:
  .entries.tsv    suite, device, ran|skipped|failed, seconds, reason, [worker stats as a JSON list]
  .instances.tsv  suite, device, benchmark name, seconds
Both files are consumed (deleted) once run.json is written through a temporary file.
run.json names the run ("run_id": the run directory's name, which tools/run gave every suite as
FUSEBENCH_RUN_ID) and lists each suite results file with its SHA-256 ("files"), computed on the files as
the report and the other readers then find them (reports/integrity.py checks both).

Usage: python -m tools.run_manifest RUN_DIR PROFILE FILTER SECONDS DEVICE... (TIMING, FRAMEWORK_TIMING,
SHARD and UNAVAILABLE from the environment, as tools/run sets them); exit 1 naming the file when it cannot
be written.
       python -m tools.run_manifest --failures RUN_DIR: prints how many cases and suites of the run failed,
exit 3 when any did (FAILED_CASES: tools/run's and tools/merge's exit status for a complete run with failures)."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import sys

from reports import yardsticks
from reports.claims.shares import LOADED_COPY_WAIT
from reports.integrity import sha256_of
from reports.results import failures, load_results, suite_files
from tools.shards import machine_description

ENTRIES = ".entries.tsv"
FAILED_CASES = 3
INSTANCES = ".instances.tsv"


def write_run_manifest(
    run_dir: pathlib.Path,
    profile: str,
    filt: str | None,
    seconds: int,
    devices: list[str],
    timing: dict[str, str],
    shard: dict | None = None,
    unavailable: dict[str, str] | None = None,
    extra: dict | None = None,
    consume: bool = True,
    run_id: str | None = None,
) -> dict:
    manifest = {
        "profile": profile,
        "filter": filt or None,
        "devices": devices,
        "seconds": seconds,
        "ran": [],
        "skipped": [],
        "failed": [],
    }
    revisions = {json.loads(p.read_text())["context"].get("git_revision") for p in sorted(run_dir.glob("*@*.json"))}
    manifest["git_revision"] = sorted(r for r in revisions if r)[0] if any(revisions) else None
    manifest["machine"] = machine_description()
    # Google Benchmark's loop per instance: the engine's devices' and the framework devices'
    manifest["timing"] = timing
    if shard:
        manifest["shard"] = shard
    if unavailable:
        manifest["unavailable"] = {
            device: reason.removeprefix("unavailable: ") for device, reason in unavailable.items()
        }
    entries = run_dir / ENTRIES
    for line in entries.read_text().splitlines() if entries.exists() else []:
        suite, device, status, secs, reason, *stats = line.split("\t")
        entry = {"suite": suite, "device": device, "seconds": int(float(secs))}
        if status in ("skipped", "failed"):
            entry["reason"] = reason
        try:
            workers = json.loads(stats[0]) if stats and stats[0] else []
        except json.JSONDecodeError:  # a worker's line cut short: the suite's own results stand
            workers = []
        if workers:
            # the framework's graphs compiled in this suite, and how many its persistent cache served
            entry["framework_compiles"] = {
                k: round(sum(w.get(k, 0) for w in workers), 2)
                for k in ("compiles", "compile_s", "cache_hits", "cache_misses")
            }
        manifest[status if status in ("ran", "failed") else "skipped"].append(entry)
    # each benchmark instance's wall time (setup and compiles included): what --shard-costs balances by
    instances = run_dir / INSTANCES
    manifest["instances"] = [
        {"suite": suite, "device": device, "name": name, "seconds": float(secs)}
        for suite, device, name, secs in (
            line.split("\t") for line in (instances.read_text().splitlines() if instances.exists() else [])
        )
    ]
    manifest.update(extra or {})
    if run_id:  # the suites were given it (tools/run's FUSEBENCH_RUN_ID)
        manifest["run_id"] = run_id
    manifest["files"] = file_digests(run_dir)
    tmp = run_dir / ".run.json.tmp"
    try:
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, run_dir / "run.json")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if consume:
        instances.unlink(missing_ok=True)
        entries.unlink(missing_ok=True)
    return manifest


def file_digests(run_dir: pathlib.Path) -> dict[str, str]:
    """Each suite results file of the run (<suite>@<device>.json; not run.json, not the report's derived
    files) by name, with its SHA-256."""
    return {path.name: sha256_of(path) for path in suite_files(run_dir)}


def report_failures(run_dir: pathlib.Path) -> int:
    """Prints the run's failed cases and suites (the report lists them); FAILED_CASES when there are any."""
    # strict=False: what is not what the run wrote counts as failed cases and suites (reports/integrity.py)
    results = load_results(run_dir, allow_incomplete=True, strict=False)
    cases, suites = failures(results), results.failed_suites()
    if not cases and not suites:
        return 0
    places = collections.Counter(f"{suite} on {device}" for suite, device, _, _ in cases)
    parts = [f"{len(cases)} cases failed ({', '.join(f'{p}: {n}' for p, n in places.items())})"] if cases else []
    parts += [f"{suite} on {device} failed as a whole ({why})" for suite, device, why in suites]
    print(f"{'; '.join(parts)}; listed in {run_dir / 'report.md'}", file=sys.stderr)
    return FAILED_CASES


def main(argv: list[str]) -> int:
    if argv[:1] == ["--failures"]:
        return report_failures(pathlib.Path(argv[1]))
    run_dir, profile, filt, total, *devices = argv
    unavailable = dict(line.split(": ", 1) for line in os.environ.get("UNAVAILABLE", "").splitlines() if ": " in line)
    run_id = os.environ.get("FUSEBENCH_RUN_ID") or None
    try:
        history = yardstick_history(pathlib.Path(run_dir), run_id)
    except OSError as e:  # the run's own verdicts stand on its rounds; the report says there was no history
        print(f"run: the copy yardstick's history not kept: {e}", file=sys.stderr)
        history = None
    try:
        write_run_manifest(
            pathlib.Path(run_dir),
            profile,
            filt,
            int(total),
            devices,
            {"engine": os.environ["TIMING"], "framework": os.environ["FRAMEWORK_TIMING"]},
            shard=json.loads(os.environ["SHARD"]) if os.environ.get("SHARD") else None,
            unavailable=unavailable,
            extra={"yardstick_history": history} if history else None,
            run_id=run_id,
        )
    except OSError as e:
        print(f"run: cannot write {pathlib.Path(run_dir) / 'run.json'}: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


def yardstick_history(run_dir: pathlib.Path, run_id: str | None) -> dict | None:
    """The copy rates of the earlier runs into the same OUT on this machine (run.json's "yardstick_history"),
    with this run's rates appended to OUT's record (reports/yardsticks.py)."""
    results = load_results(run_dir, allow_incomplete=True, strict=False)
    return yardsticks.record_run(
        results,
        run_dir.parent,
        run_id or run_dir.name,
        machine_description(),
        yardsticks.run_revision(results),
        LOADED_COPY_WAIT,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
