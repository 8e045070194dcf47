"""The copy yardstick's history across runs (reports/yardsticks.py): tools/run's run.json gives a run the
copy rates earlier runs into the same results folder measured on the same machine, and the report sets the
run's share of the copy against them (reports/claims/shares.py). Replayed with the recorded rounds of two
back-to-back quiet runs (reports/tests/fixtures/share_rounds.json, runs e and f), the copy moving 27.9 -> 36.7 GB/s."""

from __future__ import annotations

import json
import pathlib
import statistics

import pytest

from reports import yardsticks
from reports.claims import engine, shares
from reports.claims.verdict import Outcome
from reports.results import EARLIER_COPY_RATES, InputError, load_results
from reports.runline import run_line
from tools import run_manifest, yardstick_reference
from tools.shards import machine_description

FIXTURE = json.loads(
    (pathlib.Path(__file__).resolve().parents[2] / "reports" / "tests" / "fixtures" / "share_rounds.json").read_text()
)
CHAIN = "Chain/path:fused/dtype:f16/n:4194304"
MACHINE = machine_description()  # this machine, as tools/run describes it


def chain_row(run: str, wait: float | None = None) -> dict:
    """The fused Chain's row as the engine suite writes it, from the recorded rounds of fixture run `run`."""
    dump = FIXTURE["runs"][run][CHAIN]
    share = dump["share"]
    row = {
        "name": f"{CHAIN}/real_time",
        "run_name": f"{CHAIN}/real_time",
        "run_type": "iteration",
        "real_time": 1.0,
        "time_unit": "ms",
        "bytes_per_second": dump["traffic_bytes"] / statistics.median(dump["kernel_seconds"]),
        "copy_share": share["median"],
        "copy_share_lo": share["low"],
        "copy_share_hi": share["high"],
        "copy_share_rounds": share["rounds"],
        "copy_bytes_per_second": 2 * dump["copied_bytes"] / statistics.median(dump["copy_seconds"]),
        "copy_share_wait": statistics.median(dump["copy_waits"]) if wait is None else wait,
    }
    return row


def write_run(out: pathlib.Path, name: str, rows: list[dict], machine: dict = MACHINE) -> pathlib.Path:
    """A run directory as tools/run leaves it: the engine suite's results, then run.json with the history."""
    run_dir = out / name
    run_dir.mkdir(parents=True)
    context = {"fusebench_suite": "engine_throughput", "fusebench_device": "cpu", "fusebench_run_id": name}
    (run_dir / "engine_throughput@cpu.json").write_text(json.dumps({"context": context, "benchmarks": rows}))
    if machine == MACHINE:  # as tools/run does it
        history = run_manifest.yardstick_history(run_dir, name)
    else:
        results = load_results(run_dir, allow_incomplete=True, strict=False)
        history = yardsticks.record_run(results, out, name, machine, None, shares.LOADED_COPY_WAIT)
    run_manifest.write_run_manifest(
        run_dir,
        "quick",
        None,
        1,
        ["cpu"],
        {"engine": "", "framework": ""},
        extra={"yardstick_history": history} if history else None,
        consume=False,
        run_id=name,
    )
    return run_dir


def chain_of(run_dir: pathlib.Path) -> dict:
    (result,) = load_results(run_dir).by_key.values()
    return next(b for b in result.data["benchmarks"] if b["name"].startswith("Chain/"))


def test_the_second_run_is_set_against_the_first_runs_copy(tmp_path):
    first = write_run(tmp_path, "run1", [chain_row("e")])
    second = write_run(tmp_path, "run2", [chain_row("f")])
    assert chain_of(first)[EARLIER_COPY_RATES] == ()
    (rate,) = chain_of(second)[EARLIER_COPY_RATES]
    assert rate == pytest.approx(chain_row("e")["copy_bytes_per_second"])
    manifest = json.loads((second / "run.json").read_text())
    assert manifest["yardstick_history"]["earlier_runs"] == ["run1"]
    # The Chain's 70 % target: run1 INCONCLUSIVE ([62.5, 76.0 %]), run2 CONTRADICTED on its own rounds
    # ([54.1, 58.6 %]) but INCONCLUSIVE against run1's slower copy (up to 77 %). A 60 % target: SUPPORTED in
    # run1, CONTRADICTED in run2 alone, INCONCLUSIVE in run2 as the report decides it.
    rounds = shares.rounds_of(chain_of(second))
    alone = shares.Rounds(rounds.median, rounds.low, rounds.high, rounds.rounds, rounds.copy_bytes_per_second)
    assert shares.rounds_outcome(alone, engine.targets()["Chain"]) is Outcome.CONTRADICTED
    assert shares.rounds_outcome(rounds, engine.targets()["Chain"]) is Outcome.INCONCLUSIVE
    assert shares.rounds_outcome(shares.rounds_of(chain_of(first)), 0.60) is Outcome.SUPPORTED
    assert shares.rounds_outcome(alone, 0.60) is Outcome.CONTRADICTED
    assert shares.rounds_outcome(rounds, 0.60) is Outcome.INCONCLUSIVE
    # the report of run1 reads the same after run2: its history was fixed when it was written
    assert chain_of(first)[EARLIER_COPY_RATES] == ()
    assert len((tmp_path / yardsticks.HISTORY_FILE).read_text().splitlines()) == 2
    # the run line under the matrix says which copies the shares were set against
    assert "no earlier run on this machine" in run_line(load_results(first))
    assert "as slow as the 1 earlier run on this machine" in run_line(load_results(second))
    # a merged run (tools/merge) carries no history: its shards ran on their own
    manifest = json.loads((second / "run.json").read_text())
    manifest["merged_from"] = [{"index": 1, "dir": str(second), "seconds": 1, "machine": MACHINE}]
    (second / "run.json").write_text(json.dumps(manifest))
    assert "a merged run, so each interval holds its shard's rounds only" in run_line(load_results(second))


def test_another_machine_and_a_loaded_run_are_not_history(tmp_path):
    write_run(tmp_path, "elsewhere", [chain_row("e")], machine={**MACHINE, "host": MACHINE["host"] + "-other"})
    loaded = write_run(tmp_path, "loaded", [chain_row("e", wait=2 * shares.LOADED_COPY_WAIT)])
    assert "yardstick_history" not in json.loads((loaded / "run.json").read_text())  # nothing to record
    here = write_run(tmp_path, "here", [chain_row("f")])
    assert chain_of(here)[EARLIER_COPY_RATES] == ()
    records = [json.loads(line) for line in (tmp_path / yardsticks.HISTORY_FILE).read_text().splitlines()]
    assert [r["run_id"] for r in records] == ["elsewhere", "here"]


def test_only_the_last_runs_of_the_machine_count(tmp_path):
    for k in range(yardsticks.EARLIER_RUNS + 3):
        write_run(tmp_path, f"run{k:02d}", [chain_row("e" if k < 3 else "f")])
    last = write_run(tmp_path, "last", [chain_row("f")])
    rates = chain_of(last)[EARLIER_COPY_RATES]
    assert len(rates) == yardsticks.EARLIER_RUNS
    assert rates == pytest.approx([chain_row("f")["copy_bytes_per_second"]] * yardsticks.EARLIER_RUNS)


def test_a_damaged_history_line_is_named_and_left_out(tmp_path):
    write_run(tmp_path, "run1", [chain_row("e")])
    with open(tmp_path / yardsticks.HISTORY_FILE, "a") as f:
        f.write('{"run_id": "cut", "rates": {"x": \n')
        f.write(json.dumps({"run_id": "negative", "machine": MACHINE, "rates": {"x": -1.0}}) + "\n")
        f.write(json.dumps({"run_id": "infinite", "machine": MACHINE, "rates": {"x": float("inf")}}) + "\n")
    second = write_run(tmp_path, "run2", [chain_row("f")])
    history = json.loads((second / "run.json").read_text())["yardstick_history"]
    assert history["earlier_runs"] == ["run1"]
    assert "line 2, 3, 4 not a run's record" in history["problem"]
    assert len(chain_of(second)[EARLIER_COPY_RATES]) == 1


@pytest.mark.parametrize(
    "history",
    [
        "fast",
        {"rates": {"x": [{"copy_bytes_per_second": 0}]}},
        {"rates": {"x": [{"copy_bytes_per_second": "3e10"}]}},
        {"rates": {"x": {"copy_bytes_per_second": 3e10}}},
    ],
)
def test_a_run_json_whose_history_is_not_one_is_refused(tmp_path, history):
    run_dir = write_run(tmp_path, "run1", [chain_row("e")])
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["yardstick_history"] = history
    (run_dir / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"run\.json: 'yardstick_history' must be"):
        load_results(run_dir)


def write_reference(path: pathlib.Path, runs: dict[str, dict]) -> pathlib.Path:
    """A reference file: run id -> machine, each with the fused Chain's copy rate of fixture run e."""
    key = f"engine_throughput@cpu::{CHAIN}/real_time"
    lines = [
        json.dumps({"run_id": run_id, "machine": machine, "rates": {key: chain_row("e")["copy_bytes_per_second"]}})
        for run_id, machine in runs.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_first_run_is_set_against_its_machine_class_reference(tmp_path, monkeypatch):
    """Two fresh folders (a clone each): the first run in each is set against the reference runs of its
    machine class (CPU model, instruction sets and count, any host), not against another class's: a
    processor of the same name without (or with) AVX-512 runs other kernels, and a record that does not
    name its instruction sets says nothing of them."""
    same_class = {k: MACHINE[k] for k in ("cpu_model", "cpu_isa", "cpus")}
    reference = write_reference(
        tmp_path / "reference.jsonl",
        {
            "ref-same-class": {"host": "another-host", **same_class},
            "ref-other-count": {**MACHINE, "cpus": MACHINE["cpus"] + 64},
            "ref-other-isa": {**same_class, "cpu_isa": MACHINE["cpu_isa"] + " avx512_vnni"},
            "ref-isa-unsaid": {"cpu_model": MACHINE["cpu_model"], "cpus": MACHINE["cpus"]},
        },
    )
    monkeypatch.setenv(yardsticks.REFERENCE_ENV, str(reference))
    in_e = write_run(tmp_path / "clone1", "run1", [chain_row("e")])
    in_f = write_run(tmp_path / "clone2", "run1", [chain_row("f")])
    for run_dir in (in_e, in_f):
        (rate,) = chain_of(run_dir)[EARLIER_COPY_RATES]
        assert rate == pytest.approx(chain_row("e")["copy_bytes_per_second"])
        history = json.loads((run_dir / "run.json").read_text())["yardstick_history"]
        assert history["earlier_runs"] == [] and history["reference_runs"] == ["ref-same-class"]
        assert "the 1 reference run of this machine class" in run_line(load_results(run_dir))
    # f alone: CONTRADICTED against the Chain's 70 % target; against the reference run's slower copy, INCONCLUSIVE
    rounds = shares.rounds_of(chain_of(in_f))
    assert rounds.earlier_reference == 1
    alone = shares.Rounds(rounds.median, rounds.low, rounds.high, rounds.rounds, rounds.copy_bytes_per_second)
    assert shares.rounds_outcome(alone, engine.targets()["Chain"]) is Outcome.CONTRADICTED
    assert shares.rounds_outcome(rounds, engine.targets()["Chain"]) is Outcome.INCONCLUSIVE
    # the reference file is read, never written by a run
    assert len(reference.read_text().splitlines()) == 4
    # a second run into clone2 has both: the folder's earlier run and the reference
    again = write_run(tmp_path / "clone2", "run2", [chain_row("f")])
    assert "the 1 earlier run on this machine and the 1 reference run" in run_line(load_results(again))


def test_a_run_that_became_a_reference_run_counts_once(tmp_path, monkeypatch):
    """A run of this machine added to the reference file (tools/yardstick-reference) is both an earlier
    run and a reference run of the next: its copy rate is one anchor, named once, as the reference run."""
    reference = tmp_path / "reference.jsonl"
    monkeypatch.setenv(yardsticks.REFERENCE_ENV, str(reference))
    first = write_run(tmp_path / "out", "run1", [chain_row("e")])
    assert yardstick_reference.main([str(first), "--reference", str(reference)]) == 0
    second = write_run(tmp_path / "out", "run2", [chain_row("f")])
    history = json.loads((second / "run.json").read_text())["yardstick_history"]
    assert history["earlier_runs"] == [] and history["reference_runs"] == ["run1"]
    assert chain_of(second)[EARLIER_COPY_RATES] == pytest.approx((chain_row("e")["copy_bytes_per_second"],))
    line = run_line(load_results(second))
    assert "the 1 reference run of this machine class" in line and "earlier run" not in line, line


def test_a_damaged_reference_line_is_named_and_left_out(tmp_path, monkeypatch):
    reference = write_reference(tmp_path / "reference.jsonl", {"ref": MACHINE})
    with open(reference, "a") as f:
        f.write('{"run_id": "cut", "rates": \n')
    monkeypatch.setenv(yardsticks.REFERENCE_ENV, str(reference))
    run_dir = write_run(tmp_path / "out", "run1", [chain_row("f")])
    history = json.loads((run_dir / "run.json").read_text())["yardstick_history"]
    assert history["reference_runs"] == ["ref"]
    assert f"{reference}: line 2 not a run's record" in history["problem"]


def test_adding_a_reference_run(tmp_path, capsys):
    """tools/yardstick-reference RUN_DIR: a quiet run's rates under its machine class; a run without
    quiet rounds and a run already there are refused (exit 2), the file left as it was."""
    reference = tmp_path / "reference" / "yardsticks.jsonl"
    quiet = write_run(tmp_path / "out", "quiet", [chain_row("e")])
    assert yardstick_reference.main([str(quiet), "--reference", str(reference)]) == 0
    (record,) = [json.loads(line) for line in reference.read_text().splitlines()]
    assert record["run_id"] == "quiet" and record["machine"] == yardsticks.machine_class(MACHINE)
    assert record["rates"] == {
        f"engine_throughput@cpu::{CHAIN}/real_time": pytest.approx(chain_row("e")["copy_bytes_per_second"])
    }
    assert yardstick_reference.main([str(quiet), "--reference", str(reference)]) == 2
    assert "run quiet is there already" in capsys.readouterr().err
    loaded = write_run(tmp_path / "out", "loaded", [chain_row("e", wait=2 * shares.LOADED_COPY_WAIT)])
    assert yardstick_reference.main([str(loaded), "--reference", str(reference)]) == 2
    assert "no interleaved copy rates of a quiet machine" in capsys.readouterr().err
    assert len(reference.read_text().splitlines()) == 1


def test_a_run_into_another_folder_is_set_against_the_machines_earlier_runs(tmp_path, monkeypatch):
    """The machine's own record (FUSEBENCH_MACHINE_HISTORY, default $XDG_STATE_HOME/fusebench/yardsticks.jsonl)
    holds runs into every folder: a first run into a new folder (another clone) is set against them, and a run
    recorded in both its folder's file and the machine's counts once."""
    machine_file = tmp_path / "state" / "yardsticks.jsonl"
    monkeypatch.setenv(yardsticks.MACHINE_HISTORY_ENV, str(machine_file))
    write_run(tmp_path / "clone1", "run1", [chain_row("e")])
    elsewhere = write_run(tmp_path / "clone2", "run1", [chain_row("f")])
    (rate,) = chain_of(elsewhere)[EARLIER_COPY_RATES]
    assert rate == pytest.approx(chain_row("e")["copy_bytes_per_second"])
    history = json.loads((elsewhere / "run.json").read_text())["yardstick_history"]
    assert history["machine_file"] == str(machine_file)
    rounds = shares.rounds_of(chain_of(elsewhere))
    assert shares.rounds_outcome(rounds, engine.targets()["Chain"]) is Outcome.INCONCLUSIVE  # CONTRADICTED alone
    again = write_run(tmp_path / "clone2", "run2", [chain_row("f")])
    assert json.loads((again / "run.json").read_text())["yardstick_history"]["earlier_runs"] == ["run1", "run1"]
    assert len(chain_of(again)[EARLIER_COPY_RATES]) == 2  # clone1's and clone2's run1, each once
    assert len(machine_file.read_text().splitlines()) == 3
    # without the machine's record, clone2's first run held its own rounds only
    monkeypatch.setenv(yardsticks.MACHINE_HISTORY_ENV, "none")
    alone = write_run(tmp_path / "clone3", "run1", [chain_row("f")])
    assert chain_of(alone)[EARLIER_COPY_RATES] == ()
