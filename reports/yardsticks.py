"""The copy yardstick across runs on one machine: the between-run component of a share of the copy.

A share of the copy is decided on interleaved rounds (reports/claims/shares.py), whose interval covers the
rounds of one run, a few seconds. Where the memory is shared with other tenants (a virtual machine), the
copy's speed moves between states that last minutes while a kernel whose speed does not follow the memory's stays put: the
rounds of one run agree, and one run's interval cannot hold the next run's share (docs/claims.md has the
figures).

So tools/run keeps, beside its runs, the copy's median rate of every interleaved benchmark of every run
(OUT/yardsticks.jsonl, one line per run, appended under a lock), and gives each new run the rates that the
last EARLIER_RUNS runs on the same machine measured for the same benchmarks (run.json "yardstick_history",
fixed when the run is written, so that its report reads the same later). The report then takes the share
against the copy as fast and as slow as any of those runs measured it (shares.Rounds.decided). Rates from
rounds on a loaded machine (shares.LOADED_COPY_WAIT) are not recorded: their own verdicts are INCONCLUSIVE,
and their yardstick is the load's, not the machine's."""

from __future__ import annotations

import fcntl
import json
import os
import pathlib

from reports.results import Results, copy_key, is_copy_rate, plain

HISTORY_FILE = "yardsticks.jsonl"
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


def read_history(path: pathlib.Path, machine: dict) -> tuple[list[dict], str]:
    """The records of earlier runs on `machine` (oldest first), and what could not be read ("" if all)."""
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
        if record.get("machine") == machine:
            records.append(record)
    why = f"{path}: line {', '.join(problems)} not a run's record (left out)" if problems else ""
    return records, why


def history_for(records: list[dict], rates: dict[str, float], path: pathlib.Path, problem: str) -> dict:
    """run.json's "yardstick_history": per key of this run, the rates the last EARLIER_RUNS runs measured."""
    earlier = records[-EARLIER_RUNS:]
    history = {
        "schema": SCHEMA,
        "file": str(path),
        "earlier_runs": [r.get("run_id") for r in earlier],
        "rates": {
            key: [
                {"run_id": r.get("run_id"), "copy_bytes_per_second": r["rates"][key]}
                for r in earlier
                if key in r["rates"]
            ]
            for key in sorted(rates)
        },
    }
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


def record_run(
    results: Results, out: pathlib.Path, run_id: str, machine: dict, revision: str | None, loaded_wait: float
) -> dict | None:
    """Reads the machine's earlier runs from OUT/yardsticks.jsonl, appends this run's rates, and returns
    run.json's "yardstick_history" (None when the run has no interleaved copy)."""
    rates = run_rates(results, loaded_wait)
    if not rates:
        return None
    path = out / HISTORY_FILE
    records, problem = read_history(path, machine)
    history = history_for(records, rates, path, problem)
    append_record(path, {"run_id": run_id, "git_revision": revision, "machine": machine, "rates": rates})
    return history
