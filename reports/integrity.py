"""Results integrity: what a run directory holds is what its run wrote, or the readers say what is not.

tools/run names each run (`run_id`, the run directory's name), passes the name to every suite it starts
(the suites write it into their JSON context as `fusebench_run_id`), and lists the files it kept in
run.json with their SHA-256 (`files`). Here each problem is found and named by file, case and field:

- a file run.json lists that is missing, or whose digest is not the one recorded (edited or replaced);
- a suite file that run.json does not list, or that names another run;
- a case that appears twice in one file;
- a counter outside its domain, in a row the claims read (iterations, or the medians of repetitions): NaN or
  ±∞ where a number is expected, a negative count, a share outside [0, 1].

Google Benchmark's own aggregates other than the median (mean, stddev, cv) are not read, and its cv of a zero
mean is NaN by construction: those rows are not checked. Runs written before run identities existed carry
neither `run_id` nor `files`; for them only what can be checked is (the rows, and the files `ran` lists).
"""

from __future__ import annotations

import hashlib
import math
import pathlib
import re
from dataclasses import dataclass

# Google Benchmark's own fields of a row: not counters.
ROW_FIELDS = frozenset(
    {
        "name",
        "family_index",
        "per_family_instance_index",
        "run_name",
        "run_type",
        "repetitions",
        "repetition_index",
        "threads",
        "iterations",
        "real_time",
        "cpu_time",
        "time_unit",
        "aggregate_name",
        "aggregate_unit",
        "error_occurred",
        "error_message",
        "label",
    }
)
# Counters that count something (cases, sets, kernels, bytes): whole and never negative. A count that may be
# unknown is written -1 by its suite and is not named here (`sources_differ`, `instructions_differ`).
COUNT = re.compile(
    r"^(sets|kernels|compiles|mismatches|interleaved_rounds|interleaved_fused_wins|bytes_moved|bytes_copied"
    r"|interleaved_pairs_per_round|copy_share_rounds|.*counterexamples.*|.*_count|n_.*)$"
)
# Counters that are fractions of a whole (of elements, sets or cases): within [0, 1]. A speed's share of the copy
# is not one: a kernel may outrun the copy it is set against.
FRACTION = re.compile(r"(^|_)frac(_|$)|^fused_le_eager_|^bit_equal$|^promoted$|_faster_rounds$")
PROFILES = ("quick", "full")  # what tools/run's --profile takes, and what the suites write
# Timings and rates Google Benchmark computes: finite and never negative.
NONNEGATIVE_FIELDS = ("real_time", "cpu_time", "bytes_per_second", "items_per_second", "iterations")


@dataclass(frozen=True)
class Problem:
    """One integrity problem: the file, the case (None: the file as a whole), the field, and why."""

    file: str
    case: str | None
    field: str | None
    why: str

    def __str__(self) -> str:
        where = self.file
        if self.case:
            where += f": case {self.case}"
        if self.field:
            where += f": field {self.field}"
        return f"{where}: {self.why}"


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_read_row(b: dict) -> bool:
    """A row the claims read: an iteration, or the median standing for repetitions."""
    return b.get("run_type", "iteration") != "aggregate" or b.get("aggregate_name") == "median"


def counter_problem(name: str, value) -> str | None:
    """Why a counter's value is outside its domain, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if math.isnan(value):
        return "NaN where a number is expected"
    if math.isinf(value):
        return f"{'+' if value > 0 else '-'}∞ where a finite number is expected"
    if COUNT.match(name):
        if value < 0:
            return f"{value:g}: a count cannot be negative"
        if value != int(value):
            return f"{value:g}: a count must be whole"
    if FRACTION.search(name) and not 0 <= value <= 1:
        return f"{value:g}: a fraction must lie within [0, 1]"
    if name in NONNEGATIVE_FIELDS and value < 0:
        return f"{value:g}: cannot be negative"
    return None


def case_of(b: dict) -> str:
    """The case a row belongs to: its repetitions and their aggregates share Google Benchmark's run_name."""
    return b.get("run_name", b["name"])


def row_problems(file: str, benchmarks: list) -> list[Problem]:
    """Duplicated cases and counters outside their domain, in one suite file's rows (each named once per case)."""
    problems: list[Problem] = []
    seen: set[tuple] = set()
    for b in benchmarks:
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            problems.append(Problem(file, None, "benchmarks", f"a row that is not a named benchmark: {str(b)[:60]}"))
            continue
        key = (b["name"], b.get("run_type", "iteration"), b.get("aggregate_name"), b.get("repetition_index"))
        if key in seen:
            problems.append(Problem(file, case_of(b), None, "the case appears twice in this file"))
        seen.add(key)
        if not is_read_row(b) or b.get("error_occurred"):
            continue
        for name, value in b.items():
            if name in ROW_FIELDS and name not in NONNEGATIVE_FIELDS:
                continue
            why = counter_problem(name, value)
            if why:
                problems.append(Problem(file, case_of(b), name, why))
    return list(dict.fromkeys(problems))


def file_problems(run_dir: pathlib.Path, manifest: dict | None, contexts: dict[str, dict]) -> list[Problem]:
    """Files that are not what the run wrote. contexts: suite file name -> its JSON context."""
    if not manifest:
        return []
    problems = []
    run_id = manifest.get("run_id")
    listed = manifest.get("files")
    if isinstance(listed, dict):
        for name, recorded in sorted(listed.items()):
            path = run_dir / name
            if not path.is_file():
                problems.append(Problem(name, None, None, "run.json lists it, but the file is missing"))
            elif sha256_of(path) != recorded:
                problems.append(
                    Problem(
                        name,
                        None,
                        None,
                        f"its SHA-256 is not the one run.json recorded ({str(recorded)[:12]}…): "
                        "the file was edited or replaced after the run",
                    )
                )
        for name in sorted(set(contexts) - set(listed)):
            problems.append(Problem(name, None, None, "run.json does not list it: the run did not write it"))
    profile = manifest.get("profile")
    if profile in PROFILES:  # a combined reference run (tools/combine-runs) declares its mix instead
        for name, context in sorted(contexts.items()):
            theirs = context.get("fusebench_profile")
            if theirs and theirs != profile:
                problems.append(Problem(name, None, None, f"ran the {theirs} profile, not this run's ({profile})"))
    if run_id:
        for name, context in sorted(contexts.items()):
            theirs = context.get("fusebench_run_id")
            if theirs != run_id:
                written_by = f"run {theirs}" if theirs else "no run (it names none)"
                problems.append(Problem(name, None, None, f"written by {written_by}, not by this run ({run_id})"))
    return problems


def ran_without_file(manifest: dict | None, present: set[tuple[str, str]], file_of) -> list[Problem]:
    """Suites run.json says ran, with no results file in the directory (file_of(suite, device) -> its name)."""
    if not manifest:
        return []
    failed = {(e["suite"], e["device"]) for e in manifest.get("failed", [])}
    return [
        Problem(file_of(e["suite"], e["device"]), None, None, "run.json says this suite ran, but its file is missing")
        for e in manifest.get("ran", [])
        if (e["suite"], e["device"]) not in present and (e["suite"], e["device"]) not in failed
    ]


def summary(problems: list[Problem], limit: int = 8) -> str:
    shown = "; ".join(str(p) for p in problems[:limit])
    more = f"; and {len(problems) - limit} more" if len(problems) > limit else ""
    return f"results integrity: {len(problems)} problem{'s' if len(problems) != 1 else ''}: {shown}{more}"
