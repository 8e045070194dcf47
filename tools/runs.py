"""Reading results for the tools (report, compare, gate): a results directory or single Google
Benchmark JSON files, keyed by (suite, device) from each file's context (`fusebench_suite`,
`fusebench_device`), never by file name. Both layouts load: `<run>/<suite>@<device>.json` (tools/run
since devices) and the older `<run>/bench_<suite>.json`. `<run>/run.json` is tools/run's manifest
(profile, devices, filter, suites run or skipped, per-suite times); it is optional. Errors name the
file and the problem (exit status 2 in the tools)."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass, field

MANIFEST = "run.json"
# What the report writes beside the suites' files (tools/fusion_switches.py): not results, and a
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

    def get(self, suite: str, device: str) -> SuiteResult | None:
        return self.by_key.get((suite, device))

    def suites(self) -> list[str]:
        return sorted({s for s, _ in self.by_key}, key=lambda s: (KNOWN_SUITES + [s]).index(s))

    def not_run(self) -> list[tuple[str, str, str]]:
        """(suite, device, reason) for every known suite × device with no result in this run."""
        if not self.whole_run:
            return []
        skipped = {(s["suite"], s["device"]): s.get("reason", "") for s in (self.manifest or {}).get("skipped", [])}
        out = []
        for device in self.devices:
            for suite in KNOWN_SUITES:
                if (suite, device) not in self.by_key:
                    out.append((suite, device, skipped.get((suite, device), "no result file")))
        return out


def suite_files(path: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in path.glob("*.json") if p.name != MANIFEST and not p.name.startswith(DERIVED_PREFIXES))


def load_results(target: str | pathlib.Path) -> Results:
    """A results directory, or one suite JSON file."""
    path = pathlib.Path(target)
    manifest = None
    if path.is_dir():
        files = suite_files(path)
        manifest_path = path / MANIFEST
        if manifest_path.exists():
            try:
                manifest = json.loads(manifest_path.read_text())
            except json.JSONDecodeError as e:
                raise InputError(f"{manifest_path}: malformed JSON ({e})") from e
        if not files and manifest is None:
            raise InputError(f"{path}: no suite JSON files in this directory")
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
    return Results(root, by_key, manifest, devices or ["cpu"], path.is_dir())


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
