"""tools/shards.py: the partition's properties and tools/merge's refusals, on synthetic shards."""

from __future__ import annotations

import hashlib
import json
import pathlib
import random
import re

import pytest

from reports.results import InputError, load_results
from tools import shards

SUITES = ["accumulated_error@cpu", "scalar_lowering@cpu", "training_alignment@cpu", "data_movement@torch"]


def listing(count: int = 60, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    keys = []
    for i in range(count):
        suite = SUITES[i % len(SUITES)]
        keys.append(f"{suite} X/case:{i}/dtype:{rng.choice(['f16', 'bf16'])}/n:{rng.randint(1, 99)}")
    return list(dict.fromkeys(keys))


@pytest.mark.parametrize("count", [1, 2, 3, 7, 200])
def test_every_instance_in_exactly_one_shard(count):
    keys = listing()
    costs = shards.estimated_costs(keys, {})
    parts = shards.partition(keys, costs, count)
    assert len(parts) == count
    flat = [k for part in parts for k in part]
    assert sorted(flat) == sorted(keys)
    assert len(flat) == len(set(flat))
    for part in parts:  # each shard keeps the listing's order
        assert part == [k for k in keys if k in set(part)]


def test_assignment_is_stable_for_the_same_n_and_costs():
    keys = listing()
    recorded = {k: float(i % 9 + 1) for i, k in enumerate(keys[::2])}
    first = shards.partition(keys, shards.estimated_costs(keys, recorded), 4)
    again = shards.partition(list(keys), shards.estimated_costs(keys, dict(recorded)), 4)
    assert first == again


def test_recorded_costs_balance_the_shards():
    keys = [f"accumulated_error@cpu B/{i}" for i in range(40)]
    recorded = {k: (100.0 if i < 4 else 1.0) for i, k in enumerate(keys)}
    parts = shards.partition(keys, shards.estimated_costs(keys, recorded), 4)
    loads = [sum(recorded[k] for k in part) for part in parts]
    assert max(loads) - min(loads) <= 1.0, loads
    # by count, without costs
    parts = shards.partition(keys, shards.estimated_costs(keys, {}), 4)
    assert [len(p) for p in parts] == [10, 10, 10, 10]


def test_missing_costs_take_the_suite_median():
    keys = ["a@cpu x", "a@cpu y", "a@cpu new", "b@cpu z", "c@cpu unseen"]
    costs = shards.estimated_costs(keys, {"a@cpu x": 2.0, "a@cpu y": 4.0, "b@cpu z": 10.0})
    assert costs["a@cpu new"] == 3.0
    assert costs["c@cpu unseen"] == 4.0  # the whole run's median


def test_instances_that_share_state_stay_together():
    keys = [
        f"training_alignment@cpu E/{kind}/config:tiny/dtype:{d}"
        for d in ("bf16", "f16")
        for kind in ("alignment", "peer")
    ]
    for count in (2, 3, 4):
        parts = shards.partition(keys, shards.estimated_costs(keys, {}), count)
        for dtype in ("bf16", "f16"):
            holders = {i for i, part in enumerate(parts) for k in part if f"dtype:{dtype}" in k}
            assert len(holders) == 1, (count, dtype, parts)


@pytest.mark.parametrize("spec", ["3/2", "0/2", "1/0", "2", "a/b", "1/2/3"])
def test_bad_shard_specs_are_refused(spec):
    with pytest.raises(InputError, match="--shard"):
        shards.parse_shard(spec)


def test_shard_from_the_scheduler(monkeypatch):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    assert shards.parse_shard("env/3") == (1, 3)
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert shards.parse_shard("env/3") == (3, 3)
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID")
    monkeypatch.delenv("JOB_COMPLETION_INDEX")
    with pytest.raises(InputError, match="neither"):
        shards.parse_shard("env/3")


# ---- merge on synthetic shard directories


def write_shard(root: pathlib.Path, index: int, count: int, keys: list[str], revision: str = "abc123") -> pathlib.Path:
    parts = shards.partition(keys, shards.estimated_costs(keys, {}), count)
    mine = parts[index - 1]
    run_dir = root / f"shard{index}-{revision}"
    run_dir.mkdir(parents=True)
    by_file: dict[tuple[str, str], list[dict]] = {}
    for key in mine:
        suite_device, name = key.split(" ", 1)
        suite, device = suite_device.split("@")
        by_file.setdefault((suite, device), []).append(
            {"name": name, "run_name": name, "run_type": "iteration", "ulp_max": float(len(name))}
        )
        dump = run_dir / "dumps" / device / f"bench_{suite}" / (name.replace("/", "_") + ".json")
        dump.parent.mkdir(parents=True, exist_ok=True)
        dump.write_text(json.dumps({"name": name}))
    for (suite, device), benchmarks in by_file.items():
        context = {"fusebench_suite": suite, "fusebench_device": device, "git_revision": revision}
        (run_dir / f"{suite}@{device}.json").write_text(json.dumps({"context": context, "benchmarks": benchmarks}))
    description = {
        "index": index,
        "count": count,
        "listing": keys,
        "listing_sha256": shards.digest(keys),
        "partition_sha256": shards.digest(f"{i + 1} {k}" for i, p in enumerate(parts) for k in p),
        "instances": mine,
    }
    manifest = {
        "profile": "quick",
        "filter": None,
        "devices": ["cpu", "torch"],
        "seconds": 10,
        "git_revision": revision,
        "machine": {"host": "node1", "cpu_model": "x", "cpus": 2},
        "shard": description,
        "ran": [{"suite": s, "device": d, "seconds": 5} for s, d in by_file],
        "skipped": [],
        "instances": [],
    }
    (run_dir / "run.json").write_text(json.dumps(manifest))
    return run_dir


def test_merge_joins_every_instance_in_listing_order(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 3, keys) for i in (1, 2, 3)]
    manifest = shards.merge(dirs, tmp_path / "merged")
    merged = tmp_path / "merged"
    for suite_device in {k.split(" ", 1)[0] for k in keys}:
        data = json.loads((merged / f"{suite_device}.json").read_text())
        order = [f"{suite_device} {b['name']}" for b in data["benchmarks"]]
        assert order == [k for k in keys if k.startswith(suite_device + " ")]
    assert len(list((merged / "dumps").rglob("*.json"))) == len(keys)
    assert [m["index"] for m in manifest["merged_from"]] == [1, 2, 3]
    assert not (tmp_path / ".merged.partial").exists()


def test_merge_refuses_a_missing_shard(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 3, keys) for i in (1, 3)]
    with pytest.raises(InputError, match="shard 2/3 missing"):
        shards.merge(dirs, tmp_path / "merged")
    assert not (tmp_path / "merged").exists()


def test_merge_refuses_a_shard_given_twice(tmp_path):
    keys = listing(24)
    one = write_shard(tmp_path, 1, 2, keys)
    with pytest.raises(InputError, match="given twice"):
        shards.merge([one, one, write_shard(tmp_path, 2, 2, keys)], tmp_path / "merged")


def test_merge_refuses_another_commit(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, 1, 2, keys), write_shard(tmp_path, 2, 2, keys, revision="def456")]
    with pytest.raises(InputError, match="commit"):
        shards.merge(dirs, tmp_path / "merged")


def test_merge_refuses_other_machines_unless_allowed(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 2, keys) for i in (1, 2)]
    manifest = json.loads((dirs[1] / "run.json").read_text())
    manifest["machine"]["host"] = "node2"
    (dirs[1] / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="machine"):
        shards.merge(dirs, tmp_path / "merged")
    merged = shards.merge(dirs, tmp_path / "merged", allow_machines=True)
    assert {m["machine"]["host"] for m in merged["merged_from"]} == {"node1", "node2"}


def test_merge_names_an_instance_a_shard_lacks(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 2, keys) for i in (1, 2)]
    victim = sorted(dirs[1].glob("*@*.json"))[0]
    data = json.loads(victim.read_text())
    lost = data["benchmarks"].pop()
    victim.write_text(json.dumps(data))
    with pytest.raises(InputError, match=lost["name"].replace("/", ".")):
        shards.merge(dirs, tmp_path / "merged")


def test_merge_refuses_a_dump_two_shards_wrote_differently(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 2, keys) for i in (1, 2)]
    for d, text in zip(dirs, ("one", "two")):
        path = d / "dumps" / "cpu" / "shared.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with pytest.raises(InputError, match="shared.txt"):
        shards.merge(dirs, tmp_path / "merged")
    assert not (tmp_path / "merged").exists() and not (tmp_path / ".merged.partial").exists()


def test_merge_of_an_unsharded_run_is_refused(tmp_path):
    run_dir = tmp_path / "whole"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps({"profile": "quick", "devices": ["cpu"]}))
    with pytest.raises(InputError, match="not a shard"):
        shards.merge([run_dir], tmp_path / "merged")


def test_merge_command_exits_2_with_the_reason(tmp_path, capsys):
    keys = listing(12)
    one = write_shard(tmp_path, 1, 2, keys)
    assert shards.main(["merge", str(one), "--out", str(tmp_path / "m")]) == 2
    assert "shard 2/2 missing" in capsys.readouterr().err


def test_merge_names_a_truncated_shard_file(tmp_path, capsys):
    keys = listing(12)
    dirs = [write_shard(tmp_path, i, 2, keys) for i in (1, 2)]
    victim = sorted(dirs[1].glob("*@*.json"))[0]
    victim.write_text(victim.read_text()[:40])
    assert shards.main(["merge", *map(str, dirs), "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("merge: ") and str(victim) in err and "malformed JSON" in err, err
    assert not (tmp_path / "m").exists() and not (tmp_path / ".m.partial").exists()


def test_merge_refuses_an_incomplete_shard_unless_allowed_and_then_says_so(tmp_path):
    keys = listing(12)
    dirs = [write_shard(tmp_path, i, 2, keys) for i in (1, 2)]
    (dirs[0] / ".in-progress").write_text("tools/run pid 1 on node1, started 2026-12-05T00:00:00Z\n")
    with pytest.raises(InputError, match=r"run in progress or one that was stopped.*--allow-incomplete"):
        shards.merge(dirs, tmp_path / "merged")
    manifest = shards.merge(dirs, tmp_path / "merged", allow_incomplete=True)
    assert "merged from incomplete shards" in manifest["incomplete"]
    assert str(dirs[0]) in manifest["incomplete"]


@pytest.mark.parametrize(
    ("shard", "wrong"), [("no", "index, count"), ({"index": 1, "count": "2"}, "count, listing_sha256")]
)
def test_merge_names_a_wrong_shaped_shard_description(tmp_path, shard, wrong):
    keys = listing(12)
    one = write_shard(tmp_path, 1, 2, keys)
    manifest = json.loads((one / "run.json").read_text())
    manifest["shard"] = shard
    (one / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=f"'shard' lacks or mistypes {wrong}"):
        shards.merge([one], tmp_path / "merged")


def test_a_shard_from_the_environment_without_one_names_run_not_merge(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    (tmp_path / "listing").write_text("a@cpu x\n")
    args = [
        "--listing",
        str(tmp_path / "listing"),
        "--selected",
        str(tmp_path / "s"),
        "--describe",
        str(tmp_path / "d"),
    ]
    assert shards.main(["plan", "--shard", "env/2", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("run: --shard env/2: neither") and "merge" not in err, err


def give_run_identity(run_dir: pathlib.Path, run_id: str) -> None:
    """What tools/run writes into a shard: its id in every suite file and run.json, and the files' digests."""
    for path in sorted(run_dir.glob("*@*.json")):
        data = json.loads(path.read_text())
        data["context"]["fusebench_run_id"] = run_id
        path.write_text(json.dumps(data))
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["run_id"] = run_id
    manifest["files"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.glob("*@*.json"))}
    (run_dir / "run.json").write_text(json.dumps(manifest))


def test_a_merged_run_has_an_identity_of_its_own_and_lists_its_files_digests(tmp_path):
    keys = listing(24)
    dirs = [write_shard(tmp_path, i, 3, keys) for i in (1, 2, 3)]
    for index, run_dir in enumerate(dirs, 1):
        give_run_identity(run_dir, f"20261206T120000Z-shard{index}")
    merged = tmp_path / "merged"
    manifest = shards.merge(dirs, merged)
    run_id = manifest["run_id"]
    assert re.fullmatch(r"\d{8}T\d{6}Z-merged-[0-9a-f]{8}", run_id), run_id
    assert json.loads((merged / "run.json").read_text())["run_id"] == run_id
    files = sorted(p.name for p in merged.glob("*@*.json"))
    assert sorted(manifest["files"]) == files and files
    for name in files:
        path = merged / name
        assert json.loads(path.read_text())["context"]["fusebench_run_id"] == run_id, name
        assert manifest["files"][name] == hashlib.sha256(path.read_bytes()).hexdigest(), name
    load_results(merged)  # the readers' integrity check: every file is the merged run's, as written
    again = shards.merge(dirs, tmp_path / "merged-again")
    assert again["run_id"] != run_id, "two merges of the same shards are two runs"
