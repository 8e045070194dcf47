"""The copy yardstick across runs on one machine: the between-run component of a share of the copy.

A share of the copy is decided on interleaved rounds (reports/claims/shares.py), whose interval covers the
rounds of one run, a few seconds. Where the memory is shared with other tenants (a virtual machine), the
copy's speed moves between states that last minutes while a kernel whose speed does not follow the memory's stays put: the
rounds of one run agree, and one run's interval cannot hold the next run's share (docs/claims.md has the
figures).

So tools/run keeps, beside its runs, the copy's median rate of every interleaved benchmark of every run
(OUT/yardsticks.jsonl, one line per run, appended under a lock), and the same line in the machine's own record
($XDG_STATE_HOME/fusebench/yardsticks.jsonl, for runs into other folders and other clones), and gives each new
run the rates that the last EARLIER_RUNS runs on the same machine measured for the same benchmarks (run.json "yardstick_history",
fixed when the run is written, so that its report reads the same later). The report then takes the share
against the copy as fast and as slow as any of those runs measured it (shares.Rounds.decided). Rates from
rounds on a loaded machine (shares.LOADED_COPY_WAIT) are not recorded: their own verdicts are INCONCLUSIVE,
and their yardstick is the load's, not the machine's.

A first run on a machine (a CI job on a fresh one, or the machine's record gone) would hold its own rounds
only, and two such runs on two machines of one kind could then read SUPPORTED and CONTRADICTED on one
kernel as the memory changed state between them. So the project keeps reference runs per machine class (CPU model,
instruction sets and count: results/reference/yardsticks.jsonl, added with `tools/yardstick-reference RUN_DIR`), and every
run on a machine of a listed class is also set against them. Widening by a common anchor is what makes two
runs agree: each run's interval holds its own share and the share against the anchor's copy, so one run
cannot lie wholly above a target while another lies wholly below it, whatever state each ran in. It can
only turn a verdict INCONCLUSIVE, never turn one over."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import pathlib

from reports.results import InputError, Results, copy_key, is_copy_rate, load_results, plain

HISTORY_FILE = "yardsticks.jsonl"
REFERENCE_FILE = pathlib.Path(__file__).resolve().parents[1] / "results" / "reference" / HISTORY_FILE
# Another reference file, or "none" for no reference (the tests, which must not depend on this machine's class).
REFERENCE_ENV = "FUSEBENCH_YARDSTICK_REFERENCE"
# The machine's record of runs into any folder: another file, or "none" (the tests' runs, which must not
# become a user's history). Default: $XDG_STATE_HOME/fusebench/yardsticks.jsonl.
MACHINE_HISTORY_ENV = "FUSEBENCH_MACHINE_HISTORY"
# The earlier runs of a machine a run is measured against: enough to see the states a shared machine's
# memory goes through over an afternoon of runs, few enough that a machine's lasting change (a new
# host, a kernel update) leaves the record within a day of runs.
EARLIER_RUNS = 20
SCHEMA = "fusebench.yardstick_history/1"


def run_rates(results: Results, loaded_wait: float) -> dict[str, float]:
    """This run's interleaved copy rates (traffic bytes per second, the rounds' median) by results.copy_key; rows
    that failed, and rounds whose copy threads waited more than loaded_wait for a CPU, left out."""
    rates = {}
    for r in results.by_key.values():
        for b in plain(r.data.get("benchmarks", [])):
            rate = b.get("copy_bytes_per_second")
            if b.get("error_occurred") or not b.get("copy_share_rounds") or not rate or rate <= 0:
                continue
            if b.get("copy_share_wait") is not None and b["copy_share_wait"] > loaded_wait:
                continue
            rates[copy_key(r.suite, r.device, b)] = float(rate)
    return rates


def run_revision(results: Results) -> str | None:
    """The commit the run's suites were built from (the first, sorted, where they name more than one)."""
    revisions = sorted({r.context.get("git_revision") for r in results.by_key.values()} - {None, ""})
    return revisions[0] if revisions else None


def machine_class(machine: dict) -> dict:
    """What reference runs are matched on: the CPU model, its instruction sets and count, not the host.
    A record that does not name its instruction sets matches no run that does."""
    return {"cpu_model": machine.get("cpu_model"), "cpu_isa": machine.get("cpu_isa"), "cpus": machine.get("cpus")}


def _chosen_path(env: str, default: pathlib.Path) -> pathlib.Path | None:
    """The file the environment variable `env` names, None for "none" or "", `default` where it is unset."""
    chosen = os.environ.get(env)
    if chosen is None:
        return default
    return None if chosen in ("", "none") else pathlib.Path(chosen)


def reference_path() -> pathlib.Path | None:
    return _chosen_path(REFERENCE_ENV, REFERENCE_FILE)


def read_history(path: pathlib.Path, machine: dict, same=lambda a, b: a == b) -> tuple[list[dict], str]:
    """The records of earlier runs on `machine` (oldest first; `same` decides which record's machine is it),
    and what could not be read ("" if all)."""
    if not path.exists():
        return [], ""
    records, problems = [], []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            valid = (
                isinstance(record, dict)
                and isinstance(record.get("rates"), dict)
                and all(is_copy_rate(v) for v in record["rates"].values())
            )
        except json.JSONDecodeError:
            valid = False
        if not valid:
            problems.append(str(number))
            continue
        if isinstance(record.get("machine"), dict) and same(record["machine"], machine):
            records.append(record)
    why = f"{path}: line {', '.join(problems)} not a run's record (left out)" if problems else ""
    return records, why


def history_for(
    records: list[dict],
    rates: dict[str, float],
    path: pathlib.Path,
    problem: str,
    reference: list[dict] = (),
    reference_file: pathlib.Path | None = None,
) -> dict:
    """run.json's "yardstick_history": per key of this run, the rates the machine's last EARLIER_RUNS runs
    measured (`records`, oldest first), then those of its class's reference runs (marked "reference": true).
    A run of this machine that is also a reference run counts once, as the reference run."""
    reference_ids = {r.get("run_id") for r in reference}
    earlier = [r for r in records[-EARLIER_RUNS:] if r.get("run_id") not in reference_ids]
    anchors = [(r, False) for r in earlier] + [(r, True) for r in reference]
    history = {
        "schema": SCHEMA,
        "file": str(path),
        "earlier_runs": [r.get("run_id") for r in earlier],
        "rates": {
            key: [
                {"run_id": r.get("run_id"), "copy_bytes_per_second": r["rates"][key]}
                | ({"reference": True} if is_reference else {})
                for r, is_reference in anchors
                if key in r["rates"]
            ]
            for key in sorted(rates)
        },
    }
    if reference_file is not None:
        history["reference_file"] = str(reference_file)
        history["reference_runs"] = [r.get("run_id") for r in reference]
    if problem:
        history["problem"] = problem
    return history


def append_record(path: pathlib.Path, record: dict) -> None:
    """One line appended under an exclusive lock (runs into one OUT at once append whole lines)."""
    line = json.dumps(record, sort_keys=True) + "\n"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def machine_history_path() -> pathlib.Path | None:
    """The machine's own record of runs, whatever folder they went to (None: FUSEBENCH_MACHINE_HISTORY=none)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return _chosen_path(MACHINE_HISTORY_ENV, pathlib.Path(state) / "fusebench" / HISTORY_FILE)


def record_run(
    results: Results, out: pathlib.Path, run_id: str, machine: dict, revision: str | None, loaded_wait: float
) -> dict | None:
    """Reads the machine's earlier runs from OUT/yardsticks.jsonl and from the machine's own record (runs into
    other folders), appends this run's rates to both, and returns run.json's "yardstick_history" (None when
    the run has no interleaved copy)."""
    rates = run_rates(results, loaded_wait)
    if not rates:
        return None
    path = out / HISTORY_FILE
    records, problem = read_history(path, machine)
    machine_file = machine_history_path()
    if machine_file is not None and machine_file.resolve() == path.resolve():
        machine_file = None
    problems = [problem]
    if machine_file is not None:
        elsewhere, machine_problem = read_history(machine_file, machine)
        problems.append(machine_problem)
        # a run is in both files when it went to this folder: once, in the order the runs were recorded
        # (records from before "recorded" was kept come first, in their file's order)
        seen = {(r.get("run_id"), r.get("results_folder", str(out))) for r in records}
        records = records + [r for r in elsewhere if (r.get("run_id"), r.get("results_folder")) not in seen]
        records.sort(key=lambda r: str(r.get("recorded", "")))
    reference_file = reference_path()
    reference, reference_problem = (
        read_history(reference_file, machine, lambda a, b: machine_class(a) == machine_class(b))
        if reference_file
        else ([], "")
    )
    problems.append(reference_problem)
    history = history_for(
        records, rates, path, "; ".join(p for p in problems if p), reference, reference_file if reference else None
    )
    if machine_file is not None:
        history["machine_file"] = str(machine_file)
    record = {
        "run_id": run_id,
        "git_revision": revision,
        "machine": machine,
        "rates": rates,
        "results_folder": str(out),
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
    }
    append_record(path, record)
    if machine_file is not None:
        machine_file.parent.mkdir(parents=True, exist_ok=True)
        append_record(machine_file, record)
    return history


def add_reference(run_dir: pathlib.Path, reference_file: pathlib.Path, loaded_wait: float) -> dict:
    """Appends a run's copy rates to the reference file as one of its machine class's runs. Refuses a run
    without interleaved rounds of a quiet machine, and one already there."""
    results = load_results(run_dir)
    machine = (results.manifest or {}).get("machine")
    if not isinstance(machine, dict) or not all(machine.get(k) for k in ("cpu_model", "cpu_isa", "cpus")):
        raise InputError(
            f"{run_dir / 'run.json'}: no 'machine' with 'cpu_model', 'cpu_isa' and 'cpus' (tools/run writes them)"
        )
    rates = run_rates(results, loaded_wait)
    if not rates:
        raise InputError(f"{run_dir}: no interleaved copy rates of a quiet machine (no share rounds, or all loaded)")
    run_id = (results.manifest or {}).get("run_id") or run_dir.name
    records, _ = read_history(reference_file, machine, lambda a, b: True)
    if any(r.get("run_id") == run_id for r in records):
        raise InputError(f"{reference_file}: run {run_id} is there already")
    record = {
        "run_id": run_id,
        "git_revision": run_revision(results),
        "machine": machine_class(machine),
        "rates": rates,
    }
    reference_file.parent.mkdir(parents=True, exist_ok=True)
    append_record(reference_file, record)
    return record
