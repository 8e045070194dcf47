"""tools/combine_runs.py: runs of different devices joined into one results directory; a device in
two runs, a directory without run.json, two device-run folders and an existing --out are refused."""

from __future__ import annotations

import json
import pathlib

import pytest

from tools import combine_runs


def make_run(root: pathlib.Path, name: str, devices: list[str], device_folder: bool = False) -> pathlib.Path:
    run = root / name
    run.mkdir()
    manifest = {"profile": "quick", "devices": devices, "seconds": 10, "ran": [], "skipped": [], "instances": [],
                "machine": {"host": name}}  # fmt: skip
    for d in devices:
        (run / f"data_movement@{d.replace(':', '-')}.json").write_text("{}")
        manifest["ran"].append({"suite": "data_movement", "device": d, "seconds": 5})
        (run / "dumps" / d).mkdir(parents=True)
        (run / "dumps" / d / "evidence.json").write_text("{}")
    if device_folder:
        (run / "device").mkdir()
        (run / "device" / "summary.json").write_text("{}")
    (run / "run.json").write_text(json.dumps(manifest))
    return run


def test_runs_of_different_devices_join(tmp_path):
    cpu = make_run(tmp_path, "cpu-run", ["cpu", "torch"])
    gpu = make_run(tmp_path, "gpu-run", ["cuda", "torch:cuda"], device_folder=True)
    manifest = combine_runs.combine([cpu, gpu], tmp_path / "both")
    assert manifest["devices"] == ["cpu", "torch", "cuda", "torch:cuda"]
    assert manifest["seconds"] == 20
    assert [m["machine"]["host"] for m in manifest["combined_from"]] == ["cpu-run", "gpu-run"]
    both = tmp_path / "both"
    assert {p.name for p in both.glob("*@*.json")} == {
        "data_movement@cpu.json", "data_movement@torch.json", "data_movement@cuda.json", "data_movement@torch-cuda.json"
    }  # fmt: skip
    assert (both / "dumps" / "torch:cuda" / "evidence.json").exists() and (both / "device" / "summary.json").exists()
    assert json.loads((both / "run.json").read_text())["devices"] == manifest["devices"]


@pytest.mark.parametrize(
    "case, message",
    [
        ("same device", "device cpu is in an earlier run too"),
        ("no run.json", "no run.json"),
        ("two device folders", "more than one run has a device/ folder"),
        ("out exists", "exists; combine into a new directory"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(tmp_path, case, message, capsys):
    first = make_run(tmp_path, "a", ["cpu"], device_folder=case == "two device folders")
    second = make_run(
        tmp_path, "b", ["cpu"] if case == "same device" else ["cuda"], device_folder=case == "two device folders"
    )
    if case == "no run.json":
        (second / "run.json").unlink()
    out = tmp_path / "out"
    if case == "out exists":
        out.mkdir()
    assert combine_runs.main([str(first), str(second), "--out", str(out), "--no-report"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.tmp").exists()
    assert case == "out exists" or not out.exists()
