"""Sharded runs: which benchmark instances a shard of `tools/run --shard K/N` runs, and `tools/merge`,
which joins the shards' results directories into one that report, compare and gate read like an
unsharded run's.

An instance is `<suite>@<device> <benchmark name>`. The partition is a pure function of the instance
listing, the cost table and N, so every shard of an array computes the same one on its own:
  - costs: each instance's wall time from a previous run's run.json ("instances"); an instance that
    run lacks costs the median of its suite@device there, else the median of the whole run; without a
    previous run every instance costs 1 (shards then balance by count);
  - instances that share state inside a suite process stay together (SHARED_STATE);
  - groups are dealt largest first to the least-loaded shard (ties: lower shard, then name).
Exit status 2 on bad input, naming the shard, file or instance."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import re
import secrets
import shutil
import socket
import statistics
import sys
import time
from collections import defaultdict

from reports.integrity import sha256_of
from reports.results import MANIFEST, InputError, incomplete_reason, load_json, load_results, suite_files
from reports.results import read_manifest as read_manifest_file

# Instances of one suite whose figures read state an earlier instance of the same process left:
# task E's peer comparison divides by the engine's fused tokens/s that the alignment case of the
# same dtype measured. The group key is the match of the regex in the benchmark name.
SHARED_STATE = {"training_alignment": re.compile(r"dtype:[a-z0-9]+")}


def parse_shard(spec: str) -> tuple[int, int]:
    """'K/N' with 1 <= K <= N; 'env/N' takes K from Slurm's array task (SLURM_ARRAY_TASK_ID: an array
    numbered 1-N, as tools/slurm submits it, so that a resubmitted task keeps its number) or from a
    Kubernetes Indexed Job (JOB_COMPLETION_INDEX, counted from 0)."""
    match = re.fullmatch(r"(\d+|env)/(\d+)", spec)
    if not match:
        raise InputError(f"--shard {spec}: expected K/N (e.g. 2/4) or env/N")
    count = int(match[2])
    if match[1] == "env":
        if "SLURM_ARRAY_TASK_ID" in os.environ:
            index = int(os.environ["SLURM_ARRAY_TASK_ID"])
        elif "JOB_COMPLETION_INDEX" in os.environ:
            index = int(os.environ["JOB_COMPLETION_INDEX"]) + 1
        else:
            raise InputError(f"--shard {spec}: neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set")
    else:
        index = int(match[1])
    if count < 1 or not 1 <= index <= count:
        raise InputError(f"--shard {spec}: shard {index} of {count} does not exist (K must be 1..N)")
    return index, count


def instance_key(suite: str, device: str, name: str) -> str:
    return f"{suite}@{device} {name}"


def read_manifest(run_dir: pathlib.Path, label: str) -> dict:
    """A results directory's run.json; errors name the directory (label: the flag that named it)."""
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError(f"{label}{run_dir}: no {MANIFEST} (not a tools/run results directory)")
    try:
        return read_manifest_file(path)
    except InputError as e:
        raise InputError(f"{label}{e}") from e


def read_costs(run_dir: pathlib.Path | None) -> dict[str, float]:
    """Instance wall times recorded by an earlier tools/run, by instance key (empty without one)."""
    if run_dir is None:
        return {}
    manifest = read_manifest(run_dir, "--shard-costs ")
    return {
        instance_key(i["suite"], i["device"], i["name"]): float(i["seconds"]) for i in manifest.get("instances", [])
    }


def estimated_costs(keys: list[str], recorded: dict[str, float]) -> dict[str, float]:
    if not recorded:
        return dict.fromkeys(keys, 1.0)
    by_suite = defaultdict(list)
    for key, seconds in recorded.items():
        by_suite[key.split(" ", 1)[0]].append(seconds)
    overall = statistics.median(recorded.values())
    costs = {}
    for key in keys:
        suite_device = key.split(" ", 1)[0]
        costs[key] = recorded.get(key, statistics.median(by_suite[suite_device]) if by_suite[suite_device] else overall)
    return costs


def group_of(key: str) -> str:
    suite_device, name = key.split(" ", 1)
    rule = SHARED_STATE.get(suite_device.split("@", 1)[0])
    match = rule.search(name) if rule else None
    return f"{suite_device} {match[0]}" if match else key


def partition(keys: list[str], costs: dict[str, float], count: int) -> list[list[str]]:
    """The instances of each of `count` shards, each in listing order."""
    if len(set(keys)) != len(keys):
        duplicated = sorted({k for k in keys if keys.count(k) > 1})
        raise InputError(f"the listing names an instance twice: {duplicated[0]}")
    groups: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        groups[group_of(key)].append(key)
    weight = {g: sum(costs[k] for k in members) for g, members in groups.items()}
    load = [0.0] * count
    shard_of_group = {}
    for g in sorted(groups, key=lambda g: (-weight[g], g)):
        target = min(range(count), key=lambda s: (load[s], s))
        shard_of_group[g] = target
        load[target] += weight[g]
    shards: list[list[str]] = [[] for _ in range(count)]
    for key in keys:
        shards[shard_of_group[group_of(key)]].append(key)
    return shards


def exact_names_regex(names: list[str]) -> str:
    """The Google Benchmark filter that matches exactly these benchmark names ("" for none)."""
    escaped = [re.sub(r"([][().*+?{}|^$\\])", r"\\\1", name) for name in names]
    return f"^({'|'.join(escaped)})$" if escaped else ""


def filter_command(args: argparse.Namespace) -> int:
    """Prints the filter of one suite on one device: its instances in the shard's selection."""
    prefix = f"{args.suite}@{args.device} "
    lines = pathlib.Path(args.selected).read_text().splitlines()
    print(exact_names_regex([line[len(prefix) :] for line in lines if line.startswith(prefix)]))
    return 0


def digest(items) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()


def plan_command(args: argparse.Namespace) -> int:
    """Reads the listing (`<suite>@<device> <name>` lines), writes the shard's instances and a JSON
    description of the partition for run.json."""
    index, count = parse_shard(args.shard)
    keys = [line for line in pathlib.Path(args.listing).read_text().splitlines() if line.strip()]
    costs_dir = pathlib.Path(args.costs) if args.costs else None
    recorded = read_costs(costs_dir)
    costs = estimated_costs(keys, recorded)
    shards = partition(keys, costs, count)
    mine = shards[index - 1]
    pathlib.Path(args.selected).write_text("".join(k + "\n" for k in mine))
    description = {
        "index": index,
        "count": count,
        "costs_from": str(costs_dir.resolve()) if costs_dir else None,
        "costs": "recorded instance times" if recorded else "1 per instance (no earlier run)",
        "estimated_seconds": [round(sum(costs[k] for k in s), 1) for s in shards],
        "listing": keys,
        "listing_sha256": digest(keys),
        "partition_sha256": digest(f"{i + 1} {key}" for i, shard in enumerate(shards) for key in shard),
        "instances": mine,
    }
    pathlib.Path(args.describe).write_text(json.dumps(description))
    print(
        f"run: shard {index}/{count}: {len(mine)} of {len(keys)} instances, "
        f"estimated {description['estimated_seconds'][index - 1]} of {sum(description['estimated_seconds']):.1f} "
        f"({description['costs']})"
    )
    return 0


# ---- merge


SHARD_FIELDS = {
    "index": int,
    "count": int,
    "listing_sha256": str,
    "partition_sha256": str,
    "listing": list,
    "instances": list,
}


def _manifest(run_dir: pathlib.Path, allow_incomplete: bool = False) -> dict:
    why = incomplete_reason(run_dir)
    if why and not allow_incomplete:
        raise InputError(
            f"{why}; pass --allow-incomplete to merge it anyway (the merged run is then marked incomplete)"
        )
    manifest = read_manifest(run_dir, "")
    if "shard" not in manifest:
        raise InputError(f"{run_dir}: not a shard ({MANIFEST} has no 'shard'; run with tools/run --shard K/N)")
    shard = manifest["shard"]
    wrong = [k for k, kind in SHARD_FIELDS.items() if not isinstance(shard, dict) or not isinstance(shard.get(k), kind)]
    if wrong:
        raise InputError(
            f"{run_dir / MANIFEST}: 'shard' lacks or mistypes {', '.join(wrong)} (tools/run --shard writes them)"
        )
    if why:
        manifest["incomplete"] = why
    return manifest


def _same(shards: list[tuple[pathlib.Path, dict]], what: str, value) -> None:
    seen = {}
    for run_dir, manifest in shards:
        seen.setdefault(json.dumps(value(manifest), sort_keys=True), []).append(str(run_dir))
    if len(seen) > 1:
        listed = "; ".join(f"{v} in {', '.join(dirs)}" for v, dirs in seen.items())
        raise InputError(f"the shards differ in {what}: {listed}")


def _copy_tree(source: pathlib.Path, target: pathlib.Path) -> None:
    """Copies the shard's dump files; a file two shards both wrote must be the same bytes."""
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        destination = target / path.relative_to(source)
        if destination.exists():
            if destination.read_bytes() != path.read_bytes():
                raise InputError(f"{path}: another shard wrote {path.relative_to(source)} with other content")
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)


def merge(
    run_dirs: list[pathlib.Path], out: pathlib.Path, allow_machines: bool = False, allow_incomplete: bool = False
) -> dict:
    shards = [(d, _manifest(d, allow_incomplete)) for d in run_dirs]
    for run_dir, _ in shards:  # files that are not what the shard's run wrote: IntegrityError naming them
        load_results(run_dir, allow_incomplete=allow_incomplete)
    _same(shards, "shard count", lambda m: m["shard"]["count"])
    _same(shards, "instance listing (profile, filter or build)", lambda m: m["shard"]["listing_sha256"])
    _same(shards, "partition (the cost table of --shard-costs)", lambda m: m["shard"]["partition_sha256"])
    _same(shards, "profile", lambda m: m["profile"])
    _same(shards, "filter", lambda m: m.get("filter"))
    _same(shards, "commit", lambda m: m.get("git_revision"))
    if not allow_machines:
        _same(
            shards,
            "machine (pass --allow-machines to merge anyway; the report then names each)",
            lambda m: m.get("machine"),
        )
    count = shards[0][1]["shard"]["count"]
    by_index = defaultdict(list)
    for run_dir, manifest in shards:
        by_index[manifest["shard"]["index"]].append(run_dir)
    for index, dirs in sorted(by_index.items()):
        if len(dirs) > 1:
            raise InputError(f"shard {index}/{count} given twice: {', '.join(map(str, dirs))}")
    missing = [i for i in range(1, count + 1) if i not in by_index]
    if missing:
        raise InputError(f"shard {', '.join(f'{i}/{count}' for i in missing)} missing (merge needs all {count})")
    shards.sort(key=lambda s: s[1]["shard"]["index"])
    listing = shards[0][1]["shard"]["listing"]
    position = {key: i for i, key in enumerate(listing)}

    # benchmarks by suite file, each instance from exactly the shard it was assigned to
    files: dict[str, dict] = {}
    found: dict[str, pathlib.Path] = {}
    for run_dir, manifest in shards:
        for path in sorted(run_dir.glob("*@*.json")):
            data = load_json(path)
            context = data["context"]
            suite, device = context["fusebench_suite"], context["fusebench_device"]
            merged = files.setdefault(path.name, {"context": dict(context), "benchmarks": []})
            for b in data["benchmarks"]:
                key = instance_key(suite, device, b.get("run_name", b["name"]))
                if key not in position:
                    raise InputError(f"{path}: {key} is not in the shards' listing")
                if key in found and found[key] != run_dir:
                    raise InputError(f"{key} ran in two shards: {found[key]} and {run_dir}")
                found[key] = run_dir
                merged["benchmarks"].append(b)
        for key in manifest["shard"]["instances"]:
            if found.get(key) != run_dir:
                raise InputError(
                    f"{run_dir}: {key} was assigned to shard {manifest['shard']['index']}/{count} "
                    "but has no result there (rerun that shard)"
                )

    # The merged run is a run of its own: its files carry its id, and run.json lists them with their digests.
    run_id = merged_run_id()
    partial = out.with_name(f".{out.name}.partial")
    if out.exists():
        raise InputError(f"--out {out}: exists (merge writes a new directory)")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        for name, data in files.items():
            data["benchmarks"].sort(
                key=lambda b: position[
                    instance_key(
                        data["context"]["fusebench_suite"],
                        data["context"]["fusebench_device"],
                        b.get("run_name", b["name"]),
                    )
                ]
            )
            data["context"]["fusebench_shards"] = str(count)
            data["context"]["fusebench_run_id"] = run_id
            (partial / name).write_text(json.dumps(data, indent=1) + "\n")
        for run_dir, _ in shards:
            if (run_dir / "dumps").is_dir():
                _copy_tree(run_dir / "dumps", partial / "dumps")
        manifest = merged_manifest(shards)
        manifest["run_id"] = run_id
        # the files as written above, as the report and the other readers will find them
        manifest["files"] = {path.name: sha256_of(path) for path in suite_files(partial)}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def merged_run_id() -> str:
    """A new run's id, as tools/run's sort by time: the UTC time and a random part (merges of one second)."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-merged-{secrets.token_hex(4)}"


def merged_manifest(shards: list[tuple[pathlib.Path, dict]]) -> dict:
    first = shards[0][1]
    ran: dict[tuple[str, str], dict] = {}
    for _, m in shards:
        for e in m.get("ran", []):
            entry = ran.setdefault(
                (e["suite"], e["device"]), {"suite": e["suite"], "device": e["device"], "seconds": 0}
            )
            entry["seconds"] += e["seconds"]
            for k, v in e.get("framework_compiles", {}).items():
                compiles = entry.setdefault("framework_compiles", {})
                compiles[k] = round(compiles.get(k, 0) + v, 2)
    failed = [e for _, m in shards for e in m.get("failed", [])]
    skipped = {}
    for _, m in shards:
        for e in m.get("skipped", []):
            if (e["suite"], e["device"]) not in ran and not e.get("reason", "").startswith("not in shard"):
                skipped[(e["suite"], e["device"])] = e
    devices = list(dict.fromkeys(d for _, m in shards for d in m["devices"]))
    manifest = {
        "profile": first["profile"],
        "filter": first.get("filter"),
        "devices": devices,
        "seconds": sum(m["seconds"] for _, m in shards),
        "git_revision": first.get("git_revision"),
        "machine": first.get("machine"),
        "merged_from": [
            {
                "index": m["shard"]["index"],
                "dir": str(d.resolve()),
                "seconds": m["seconds"],
                "machine": m.get("machine"),
            }
            for d, m in shards
        ],
        "ran": sorted(ran.values(), key=lambda e: (devices.index(e["device"]) if e["device"] in devices else 0,)),
        "skipped": list(skipped.values()),
        "failed": failed,
        "instances": [i for _, m in shards for i in m.get("instances", [])],
    }
    incomplete = [m["incomplete"] for _, m in shards if m.get("incomplete")]
    if incomplete:
        manifest["incomplete"] = "merged from incomplete shards: " + "; ".join(incomplete)
    if "unavailable" in first:
        manifest["unavailable"] = first["unavailable"]
    return manifest


# The instruction sets the kernels are compiled for (-march=native), as the suites' cpu_isa context
# names them (suites/support/suite_main.cpp): "AMD EPYC" or "Intel(R) Xeon(R) Processor" alone names
# processors with and without AVX-512, whose kernels differ.
ISA_FLAGS = ("avx512f", "avx512fp16", "avx512_bf16", "avx2", "fma", "f16c")


def machine_description() -> dict:
    model, isa = "unknown", "unknown"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and isa == "unknown":
                flags = line.split(":", 1)[1].split()
                isa = " ".join(f for f in flags if f in ISA_FLAGS)
    except OSError:
        pass
    return {"host": socket.gethostname(), "cpu_model": model, "cpu_isa": isa, "cpus": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/merge", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="(tools/run) the instances of one shard")
    plan.add_argument("--shard", required=True)
    plan.add_argument("--costs")
    plan.add_argument("--listing", required=True)
    plan.add_argument("--selected", required=True)
    plan.add_argument("--describe", required=True)
    only = sub.add_parser("filter", help="(tools/run) the filter of one suite's instances in a shard")
    only.add_argument("--selected", required=True)
    only.add_argument("--suite", required=True)
    only.add_argument("--device", required=True)
    join = sub.add_parser("merge", help="join shard directories into one results directory")
    join.add_argument("dirs", nargs="+", type=pathlib.Path)
    join.add_argument("--out", required=True, type=pathlib.Path)
    join.add_argument("--allow-machines", action="store_true", help="merge shards that ran on different machines")
    join.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="merge shards whose runs did not finish (the merged run.json then says it is incomplete)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "plan":
            return plan_command(args)
        if args.command == "filter":
            return filter_command(args)
        manifest = merge(args.dirs, args.out, args.allow_machines, args.allow_incomplete)
        instances = len(manifest["instances"])
        print(f"merge: {len(args.dirs)} shards, {instances} instances -> {args.out}")
        return 0
    except InputError as e:
        print(f"{'run' if args.command != 'merge' else 'merge'}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk or a read-only --out: nothing was left under the final name
        print(f"merge: cannot write {e.filename or args.out}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
