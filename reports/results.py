"""The results data model, read by the report, the claims and the tools (compare, gate, merge): a
results directory or single Google Benchmark JSON files, keyed by (suite, device) from each file's
context (`fusebench_suite`, `fusebench_device`), never by file name. Both layouts load:
`<run>/<suite>@<device>.json` (tools/run since devices) and the older `<run>/bench_<suite>.json`.
`<run>/run.json` is tools/run's manifest (profile, devices, filter, suites run, skipped or failed, per-suite
times); it is optional. Errors name the file and the problem (exit status 2 in the tools).

A run directory is complete or says it is not: tools/run writes `.in-progress` when it starts and removes it
once the report is written; a suite's `*.json.tmp` or tools/run's `.entries.tsv` left behind means the run was
cut off; a merge of incomplete shards says so in run.json ("incomplete"). The readers refuse such a directory
unless asked (`allow_incomplete`), and then carry the reason (`Results.incomplete`) to label what they print.

Within one suite's JSON: its benchmark rows (`benchmarks`, medians standing for repetitions), each
row's axes (`axes`, from the record the suites write), and the evidence files in its dump directory
(`dump_dir`, `evidence`)."""

from __future__ import annotations

import functools
import json
import pathlib
import re
from dataclasses import dataclass, field

from reports import integrity

MANIFEST = "run.json"
IN_PROGRESS = ".in-progress"
# What the report writes beside the suites' files (reports/fusion_switches.py): not results, and a
# report or merge run again over the directory must not read them as such.
DERIVED_PREFIXES = ("fusion_switches.",)
# Every suite tools/run knows about, in the plan's order (the report lists the ones not run).
KNOWN_SUITES = [
    "precision_toolkit",
    "fusion_determinism",
    "accumulated_error",
    "scalar_lowering",
    "reduction_order",
    "approximations",
    "data_movement",
    "training_alignment",
    "engine_throughput",
]


class InputError(Exception):
    pass


class IncompleteRun(InputError):
    pass


def load_json(path: pathlib.Path) -> dict:
    try:
        text = path.read_text()
    except FileNotFoundError as e:
        raise InputError(f"{path}: no such file") from e
    if not text.strip():
        raise InputError(f"{path}: empty file (0 bytes; a suite run that wrote nothing?)")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON ({e})") from e
    if not isinstance(data, dict) or "benchmarks" not in data or "context" not in data:
        raise InputError(f"{path}: not a Google Benchmark JSON file (no 'context'/'benchmarks')")
    return data


def file_device_name(device: str) -> str:
    """A device name as it appears in file and directory names (':' is not portable, '/' a directory)."""
    return device.replace(":", "-").replace("/", "-")


@dataclass
class SuiteResult:
    suite: str
    device: str
    path: pathlib.Path
    data: dict

    @property
    def context(self) -> dict:
        return self.data["context"]


@dataclass
class Results:
    """One run: results keyed by (suite, device), plus the manifest when tools/run wrote one."""

    root: pathlib.Path
    by_key: dict[tuple[str, str], SuiteResult]
    manifest: dict | None = None
    devices: list[str] = field(default_factory=list)
    whole_run: bool = True  # False when loaded from single files: nothing can be said about other suites
    incomplete: str | None = None  # why the run directory is incomplete, when it was read anyway
    integrity: list = field(default_factory=list)  # what is not what the run wrote (reports/integrity.py)

    def get(self, suite: str, device: str) -> SuiteResult | None:
        return self.by_key.get((suite, device))

    def suites(self) -> list[str]:
        return sorted({s for s, _ in self.by_key}, key=lambda s: (KNOWN_SUITES + [s]).index(s))

    def not_run(self) -> list[tuple[str, str, str]]:
        """(suite, device, reason) for every known suite × device with no result in this run."""
        if not self.whole_run:
            return []
        manifest = self.manifest or {}
        skipped = {(s["suite"], s["device"]): s.get("reason", "") for s in manifest.get("skipped", [])}
        skipped |= {(s["suite"], s["device"]): f"failed: {s.get('reason', '')}" for s in manifest.get("failed", [])}
        out = []
        for device in self.devices:
            for suite in KNOWN_SUITES:
                if (suite, device) not in self.by_key:
                    out.append((suite, device, skipped.get((suite, device), "no result file")))
        return out

    def failed_suites(self) -> list[tuple[str, str, str]]:
        """(suite, device, reason) for every suite that failed as a whole (a crash, a signal, a write error):
        the cases it finished, if any, are in its results file; the others never ran."""
        return [(s["suite"], s["device"], s.get("reason", "")) for s in (self.manifest or {}).get("failed", [])]


MANIFEST_LISTS = ("devices", "ran", "skipped", "failed")


def read_manifest(path: pathlib.Path) -> dict:
    """A run.json, checked for the shape its readers rely on; errors name the file and what was expected."""
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON ({e})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read it ({e})") from e
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: expected a JSON object (tools/run's manifest), found {type(manifest).__name__}")
    for key in MANIFEST_LISTS:
        value = manifest.setdefault(key, [])
        if not isinstance(value, list):
            raise InputError(f"{path}: '{key}' must be a list, found {type(value).__name__} {json.dumps(value)[:60]}")
    if not all(isinstance(d, str) for d in manifest["devices"]):
        raise InputError(f"{path}: 'devices' must be a list of device names")
    for key in ("ran", "skipped", "failed"):
        for entry in manifest[key]:
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("suite"), str)
                or not isinstance(entry.get("device"), str)
            ):
                raise InputError(f"{path}: each entry of '{key}' must be an object with 'suite' and 'device' names")
    history = manifest.get("yardstick_history")
    if history is not None and not _valid_yardstick_history(history):
        raise InputError(
            f"{path}: 'yardstick_history' must be an object whose 'rates' map each benchmark to a list of "
            "{'run_id', 'copy_bytes_per_second' > 0} (reports/yardsticks.py)"
        )
    return manifest


def is_copy_rate(value) -> bool:
    """A copy's rate as the history keeps it: a positive, finite number of bytes per second."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < float("inf")


def _valid_yardstick_history(history) -> bool:
    rates = history.get("rates") if isinstance(history, dict) else None
    return isinstance(rates, dict) and all(
        isinstance(entries, list)
        and all(
            isinstance(e, dict)
            and is_copy_rate(e.get("copy_bytes_per_second"))
            and isinstance(e.get("reference", False), bool)
            for e in entries
        )
        for entries in rates.values()
    )


def incomplete_reason(run_dir: pathlib.Path, completing: bool = False) -> str | None:
    """Why a results directory is not a complete run, or None. completing: the caller is the tools/run that
    owns the directory's .in-progress marker, writing its report."""
    marker = run_dir / IN_PROGRESS
    if marker.exists() and not completing:
        lines = marker.read_text(errors="replace").strip().splitlines()
        return f"{run_dir} is a run in progress or one that was stopped ({IN_PROGRESS}: {'; '.join(lines)})"
    leftovers = sorted(p.name for p in run_dir.glob("*.json.tmp")) + [
        name for name in (".entries.tsv",) if (run_dir / name).exists()
    ]
    if leftovers:
        return f"{run_dir} was cut off: {', '.join(leftovers)} left by a run that did not finish"
    manifest_path = run_dir / MANIFEST
    if manifest_path.exists():
        try:
            why = json.loads(manifest_path.read_text()).get("incomplete")
        except (json.JSONDecodeError, AttributeError, OSError):
            why = None  # read_manifest names the problem
        if why:
            return f"{run_dir}: {why}"
    return None


def suite_files(path: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in path.glob("*.json") if p.name != MANIFEST and not p.name.startswith(DERIVED_PREFIXES))


def load_results(
    target: str | pathlib.Path, allow_incomplete: bool = False, completing: bool = False, strict: bool = True
) -> Results:
    """A results directory, or one suite JSON file. An incomplete run directory (incomplete_reason) is an
    IncompleteRun unless allow_incomplete; read anyway, its Results.incomplete says why.

    Results that are not what the run wrote (reports/integrity.py) are an IntegrityError when strict (compare,
    gate, merge: nothing is decided from them). Not strict (the report), each problem becomes a failure that the
    verdicts it bears on name: a file that is not the run's is a suite that failed as a whole (its rows unread);
    a duplicated case or a counter outside its domain is a failed case. Results.integrity lists them."""
    path = pathlib.Path(target)
    manifest = None
    incomplete = None
    if path.is_dir():
        incomplete = incomplete_reason(path, completing)
        if incomplete and not allow_incomplete:
            raise IncompleteRun(f"{incomplete}; pass --allow-incomplete to read it anyway")
        files = suite_files(path)
        manifest_path = path / MANIFEST
        if manifest_path.exists():
            manifest = read_manifest(manifest_path)
        if not files and manifest is None:
            cut_off = f" ({incomplete})" if incomplete else ""
            raise InputError(f"{path}: no suite JSON files in this directory{cut_off}")
        root = path
    elif path.exists():
        files, root = [path], path.parent
    else:
        raise InputError(f"{path}: no such file or directory")
    by_key: dict[tuple[str, str], SuiteResult] = {}
    for f in files:
        data = load_json(f)
        context = data["context"]
        suite = context.get("fusebench_suite") or f.stem.split("@")[0].removeprefix("bench_")
        device = context.get("fusebench_device", "cpu")
        if (suite, device) in by_key:
            raise InputError(
                f"{f}: a second result for suite {suite} on device {device} "
                f"(the first is {by_key[(suite, device)].path.name})"
            )
        by_key[(suite, device)] = SuiteResult(suite, device, f, data)
    devices = list(dict.fromkeys((manifest or {}).get("devices", []) + sorted({d for _, d in by_key})))
    results = Results(root, by_key, manifest, devices or ["cpu"], path.is_dir(), incomplete)
    problems = check_integrity(results)
    if problems and strict:
        raise IntegrityError(integrity.summary(problems), problems)
    if problems:
        apply_integrity_problems(results, problems)
    attach_earlier_copy_rates(results)
    return results


# Where a row carries the copy rates that earlier runs on the same machine measured for it (run.json's
# "yardstick_history", written by reports/yardsticks.py): the between-run component of its share of the copy.
EARLIER_COPY_RATES = "copy_share_earlier_rates"
# How many of those rates are the machine class's reference runs' (results/reference/yardsticks.jsonl).
EARLIER_REFERENCE_RUNS = "copy_share_earlier_references"


def copy_key(suite: str, device: str, benchmark: dict) -> str:
    """The identity of a benchmark's interleaved copy across runs: suite, device and benchmark (its name
    fixes the bytes copied; the threads are the machine's)."""
    return f"{suite}@{device}::{benchmark.get('run_name', benchmark['name'])}"


def attach_earlier_copy_rates(results: Results) -> None:
    """Gives each interleaved row the rates run.json's yardstick history holds for its copy (a tuple,
    empty where no earlier run on this machine measured it)."""
    history = (results.manifest or {}).get("yardstick_history") or {}
    by_key = history.get("rates", {})
    for r in results.by_key.values():
        for b in r.data.get("benchmarks", []):
            if b.get("copy_share_rounds"):
                entries = by_key.get(copy_key(r.suite, r.device, b), [])
                b[EARLIER_COPY_RATES] = tuple(float(e["copy_bytes_per_second"]) for e in entries)
                b[EARLIER_REFERENCE_RUNS] = sum(1 for e in entries if e.get("reference") is True)


INTEGRITY_PREFIX = "results integrity: "  # the error message of a case or suite that integrity made a failure


class IntegrityError(InputError):
    """Results that are not what the run wrote; .problems names each (file, case, field, why)."""

    def __init__(self, message: str, problems: list[integrity.Problem]):
        super().__init__(message)
        self.problems = problems


def check_integrity(results: Results) -> list[integrity.Problem]:
    problems = []
    if results.whole_run:
        contexts = {r.path.name: r.context for r in results.by_key.values()}
        problems += integrity.file_problems(results.root, results.manifest, contexts)
        named = {p.file for p in problems}
        problems += [
            p
            for p in integrity.ran_without_file(
                results.manifest, set(results.by_key), lambda suite, device: f"{suite}@{file_device_name(device)}.json"
            )
            if p.file not in named
        ]
    for r in results.by_key.values():
        problems += integrity.row_problems(r.path.name, r.data.get("benchmarks", []))
    return problems


def apply_integrity_problems(results: Results, problems: list[integrity.Problem]) -> None:
    """Each problem made a failure the verdicts name (load_results, not strict)."""
    results.integrity = problems
    manifest = results.manifest = results.manifest if results.manifest is not None else {"failed": []}
    manifest.setdefault("failed", [])
    by_file = {r.path.name: key for key, r in results.by_key.items()}
    for p in problems:
        if p.case is not None:
            continue
        key = by_file.get(p.file)
        if key is None:  # a file that is missing: its suite, when run.json names it, failed
            suite, _, device = p.file.removesuffix(".json").partition("@")
            ran = {(e["suite"], file_device_name(e["device"])): e["device"] for e in manifest.get("ran", [])}
            key = (suite, ran.get((suite, device), device))
        results.by_key.pop(key, None)
        manifest["failed"] = [e for e in manifest["failed"] if (e["suite"], e["device"]) != key]
        manifest["failed"].append({"suite": key[0], "device": key[1], "reason": f"{INTEGRITY_PREFIX}{p}"})
    for r in results.by_key.values():
        benchmarks = r.data.get("benchmarks", [])
        kept, seen = [], {}
        for b in benchmarks:
            key = (b.get("name"), b.get("run_type", "iteration"), b.get("aggregate_name"), b.get("repetition_index"))
            if key in seen:  # the first row stands for the case, marked failed below
                continue
            seen[key] = b
            kept.append(b)
        r.data["benchmarks"] = kept
        by_case: dict[str, list[str]] = {}
        for p in problems:
            if p.file == r.path.name and p.case is not None:
                by_case.setdefault(p.case, []).append(str(p))
        for case, why in by_case.items():
            # the rows the claims read for the case: its median when repetitions were aggregated, else its run
            rows_of_case = [b for b in kept if integrity.case_of(b) == case and integrity.is_read_row(b)]
            medians = [b for b in rows_of_case if b.get("aggregate_name") == "median"]
            for b in medians or rows_of_case:
                previous = b.get("error_message", "") if b.get("error_occurred") else ""
                b["error_occurred"] = True
                b["error_message"] = INTEGRITY_PREFIX + "; ".join(why) + (f"; {previous}" if previous else "")


def dump_dir(result: SuiteResult) -> pathlib.Path:
    """Where the suite's evidence files are, whichever layout the run used and wherever the run
    directory has been moved to: the context's dump_dir re-rooted at the run directory."""
    recorded = result.context.get("dump_dir", "")
    candidates = []
    if "/dumps/" in recorded:
        candidates.append(result.path.parent / "dumps" / recorded.rsplit("/dumps/", 1)[1])
    binary = f"bench_{result.suite}"
    candidates += [
        result.path.parent / "dumps" / file_device_name(result.device) / binary,
        result.path.parent / "dumps" / binary,
    ]
    return next((c for c in candidates if c.is_dir()), candidates[0])


def plain(benchmarks: list[dict]) -> list[dict]:
    """Iterations rows only (aggregates dropped), or the medians when repetitions were aggregated."""
    medians = [b for b in benchmarks if b.get("aggregate_name") == "median"]
    if medians:
        return medians
    return [b for b in benchmarks if b.get("run_type", "iteration") == "iteration"]


def seconds(b: dict, field_name: str = "real_time") -> float:
    return b[field_name] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]


# ---- one suite's rows
def benchmarks(run: dict, prefix: str = "") -> list[dict]:
    """Benchmarks of one suite run whose name starts with prefix; aggregates (mean/median/stddev of
    repetitions) are skipped, except the median, which stands for the run when repetitions exist."""
    out = []
    for b in run.get("benchmarks", []):
        if not b["name"].startswith(prefix):
            continue
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        out.append(b)
    has_median = any(b.get("aggregate_name") == "median" for b in out)
    return [b for b in out if (b.get("aggregate_name") == "median") == has_median]


@functools.lru_cache(maxsize=64)
def _registered_axes(text: str) -> dict[str, dict[str, str]]:
    return json.loads(text)


def axes(run: dict, b: dict) -> dict[str, str]:
    """A benchmark's axes, {'family': 'C1', 'dtype': 'f16', 'scalar': '0.7', ...}, from the structured
    record the suites write (context entry "fusebench_axes": registered name -> axes, see
    suites/support/cases.hpp). Google Benchmark appends its own segments to a run's name
    (/iterations:1/manual_time, /real_time, /threads:2), so the registered name is the longest prefix
    the record knows. 'family' is the name's first segment ('E' for E/Alignment), 'case_family' the
    registered family. Results written before the record existed, and benchmarks registered without
    the helper, fall back to the name's fields."""
    text = run.get("context", {}).get("fusebench_axes")
    if text:
        registered = _registered_axes(text)
        name = b.get("run_name", b["name"])
        while name:
            record = registered.get(name)
            if record is not None:
                family = record.get("family", name)
                return {
                    "family": family.split("/")[0],
                    "case_family": family,
                    **{k: v for k, v in record.items() if k != "family"},
                }
            if "/" not in name:
                break
            name = name.rsplit("/", 1)[0]
    return name_fields(b["name"])


def name_fields(name: str) -> dict[str, str]:
    """'UlpDiff/dtype:f16/n:1024' -> {'family': 'UlpDiff', 'dtype': 'f16', 'n': '1024'}."""
    parts = name.split("/")
    fields = {"family": parts[0]}
    for p in parts[1:]:
        if ":" in p:
            key, value = p.split(":", 1)
            fields[key] = value
    return fields


def rows(run: dict, prefix: str) -> list[tuple[dict, dict]]:
    """(axes, benchmark) of every row under prefix that ran (skipped rows left out)."""
    return [(axes(run, b), b) for b in benchmarks(run, prefix) if not b.get("error_occurred")]


def wall_rate(b: dict, field: str = "bytes_per_second") -> float | None:
    """A rate per wall-clock second. Google Benchmark divides by CPU time unless the benchmark uses
    real (or manual) time; on a loaded machine the process's CPU time is well below the wall time, so
    such a rate overstates what the operation delivers. Converted here: rate x cpu_time / real_time."""
    if field not in b:
        return None
    name = b.get("run_name", b["name"])
    if name.endswith(("/real_time", "/manual_time")) or not b.get("real_time") or not b.get("cpu_time"):
        return b[field]
    return b[field] * b["cpu_time"] / b["real_time"]


def is_gpu_run(run: dict) -> bool:
    return "cuda" in run.get("context", {}).get("fusebench_device", "")


def copy_bandwidth(run: dict) -> float | None:
    """bytes_per_second of the run's copy yardstick, if it has one: the GPU's own device-to-device
    copy where a GPU device's run measured it (DeviceMemoryCopy), else the host's MemoryCopy. A GPU
    run without its own copy has none: its kernels against the host's memcpy would read as many
    times the copy."""
    for family in ("DeviceMemoryCopy/",) if is_gpu_run(run) else ("DeviceMemoryCopy/", "MemoryCopy/"):
        copies = [b for b in benchmarks(run, family) if "bytes_per_second" in b and not b.get("error_occurred")]
        if copies:
            return copies[0]["bytes_per_second"]
    return None


def copy_source(run: dict) -> str:
    """What the run's copy yardstick is, in words (the host's memcpy, on the kernels' threads, needs
    none: it is the yardstick a report names by default)."""
    device_copy = benchmarks(run, "DeviceMemoryCopy/")
    if device_copy and not device_copy[0].get("error_occurred"):
        return "the GPU's device-to-device copy of 1 GiB, timed with CUDA events"
    if is_gpu_run(run):
        return "this run measured no GPU copy, and the host's memcpy is no yardstick for a GPU's kernels"
    return ""


# ---- evidence files in a suite's dump directory
def evidence(result: SuiteResult, pattern: str) -> list[tuple[pathlib.Path, dict]]:
    """(path, document) of the suite's evidence files matching pattern, in file-name order."""
    return [(p, json.loads(p.read_text())) for p in sorted(dump_dir(result).glob(pattern))]


def evidence_of(result: SuiteResult, name: str) -> dict | None:
    """A benchmark's evidence file, named as the suites name it ('/' -> '_', ':' -> '-')."""
    path = dump_dir(result) / (name.replace("/", "_").replace(":", "-") + ".json")
    return json.loads(path.read_text()) if path.is_file() else None


def b_distribution(name: str) -> str:
    """Task B's input distribution, 'uniform' or 'heavy', from a benchmark's dist field or an evidence
    file's distribution."""
    return "uniform" if name.startswith("U") or name == "uniform" else "heavy"


# ---- what a device is, and what it refused
def is_framework(device: str) -> bool:
    """A device that runs a framework's own compiler (PyTorch's torch.compile, JAX's XLA)."""
    return device.split(":")[0].split("/")[0] in ("torch", "xla")


NA_MESSAGE = re.compile(r"n/a on \S+: (.*)")  # device names hold no spaces (torch:cuda/aot_eager)


def is_failure(b: dict) -> bool:
    """A benchmark that errored for a reason other than a declared n/a (a message that starts "n/a": "n/a
    on DEVICE: why", the device cannot realise the case; "n/a in the quick profile ..."): something
    broke, and the case is a failure, not a skip."""
    return bool(b.get("error_occurred")) and not b.get("error_message", "").startswith("n/a")


def failures(results: Results) -> list[tuple[str, str, str, str]]:
    """(suite, device, benchmark, error message) for every failed case of the run (is_failure)."""
    return [
        (r.suite, r.device, b["name"], b.get("error_message", ""))
        for r in results.by_key.values()
        for b in r.data.get("benchmarks", [])
        if is_failure(b)
    ]


def na_reasons(benchmarks_of_a_task: list[dict]) -> list[str]:
    """The distinct reasons of rows the device skipped as not applicable ("n/a on DEVICE: why")."""
    reasons = []
    for b in benchmarks_of_a_task:
        message = b.get("error_message", "") if b.get("error_occurred") else ""
        m = NA_MESSAGE.match(message)
        if m and m.group(1) not in reasons:
            reasons.append(m.group(1))
    return reasons
