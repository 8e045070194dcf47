"""Reading results for the command-line tools: a results directory or single Google Benchmark
JSON files, keyed by suite. Errors name the file and the problem (exit status 2 in the tools)."""
from __future__ import annotations

import json
import pathlib


class InputError(Exception):
    pass


def load_json(path: pathlib.Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise InputError(f"{path}: no such file") from e
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON ({e})") from e
    if not isinstance(data, dict) or "benchmarks" not in data or "context" not in data:
        raise InputError(f"{path}: not a Google Benchmark JSON file (no 'context'/'benchmarks')")
    return data


def load_runs(target: str | pathlib.Path) -> dict[str, tuple[pathlib.Path, dict]]:
    """suite -> (file, data) for a directory of suite JSONs or one JSON file."""
    path = pathlib.Path(target)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise InputError(f"{path}: no suite JSON files in this directory")
    elif path.exists():
        files = [path]
    else:
        raise InputError(f"{path}: no such file or directory")
    runs = {}
    for f in files:
        data = load_json(f)
        runs[data["context"].get("fusebench_suite", f.stem)] = (f, data)
    return runs


def plain(benchmarks: list[dict]) -> list[dict]:
    """Iterations rows only (aggregates dropped), or the medians when repetitions were aggregated."""
    medians = [b for b in benchmarks if b.get("aggregate_name") == "median"]
    if medians:
        return medians
    return [b for b in benchmarks if b.get("run_type", "iteration") == "iteration"]
