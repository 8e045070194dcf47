"""tools/device_run.py: the budget stops a plan between steps and keeps every finished step's files;
a command past its share of the budget is stopped, and a SIGKILLed runner takes its command's process
group with it; each call is a run with an id; the bundle's packages unpack without dpkg."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tarfile

import pytest

from tools import device_run
from tools.device_run import Outcome, Runner, Step
from tools.tests.test_run_processes import PROMPT_S, processes_with, wait_until


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def writing_step(name: str, clock: FakeClock, seconds: float, min_s: float = 30) -> Step:
    def action(runner: Runner, timeout: float) -> Outcome:
        clock.now += seconds
        (runner.results / f"{name}.json").write_text(json.dumps({"step": name}))
        return Outcome("ok")

    return Step(name, f"writes {name}.json", action, timeout_s=600, min_s=min_s)


def packed_names(out: pathlib.Path) -> set[str]:
    with tarfile.open(out / "results.tar.gz") as tar:
        return {pathlib.PurePath(n).name for n in tar.getnames()}


def test_budget_stops_between_steps_and_keeps_finished_files(tmp_path):
    clock = FakeClock()
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100, clock=clock)
    plan = [writing_step(n, clock, 40) for n in ("first", "second", "third", "fourth")]
    status = runner.run_plan(plan)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    by_name = {s["step"]: s for s in summary["steps"]}
    assert [by_name[n]["status"] for n in ("first", "second", "third", "fourth")] == ["ok", "ok", "skipped", "skipped"]
    # 100 s budget, 80 s spent, 10 s kept for packing: 10 s left for a step that needs 30
    assert by_name["third"]["reason"].startswith("budget: 10 s left")
    assert {"first.json", "second.json"} <= packed_names(tmp_path / "out")
    assert "third.json" not in packed_names(tmp_path / "out")
    assert status == 0  # skipped for the budget is not a failure; --strict makes it one


def test_strict_fails_a_plan_cut_by_the_budget(tmp_path):
    clock = FakeClock()
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=50, clock=clock)
    assert runner.run_plan([writing_step("a", clock, 45), writing_step("b", clock, 1)], strict=True) == 1


def test_a_failed_or_raising_step_does_not_stop_the_plan_and_its_dependents_say_why(tmp_path):
    clock = FakeClock()

    def broken(runner, timeout):
        raise RuntimeError("no GPU")

    plan = [
        Step("setup", "raises", broken, 60, 1),
        Step("needs-setup", "never starts", lambda r, t: Outcome("ok"), 60, 1, needs=("setup",)),
        writing_step("independent", clock, 1, min_s=1),
    ]
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100, clock=clock)
    assert runner.run_plan(plan) == 1
    steps = {s["step"]: s for s in json.loads((tmp_path / "out" / "summary.json").read_text())["steps"]}
    assert steps["setup"] == steps["setup"] | {"status": "failed", "reason": "RuntimeError: no GPU"}
    assert steps["needs-setup"]["reason"] == "needs setup, which did not succeed"
    assert steps["independent"]["status"] == "ok"


def test_a_command_is_stopped_at_the_budget_with_its_output_kept(tmp_path):
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=13)  # 3 s after the packing reserve

    def sleeper(runner: Runner, timeout: float) -> Outcome:
        status, text = runner.command(
            ["sh", "-c", "echo started; sleep 30; echo never"], timeout, log_name="sleeper.log"
        )
        return Outcome("timed_out" if status is None else "ok", text.strip())

    runner.run_plan([Step("sleeper", "sleeps past the budget", sleeper, 600, 1)])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"][0]["status"] == "timed_out"
    assert summary["steps"][0]["seconds"] < 10
    assert (runner.extras / "logs" / "sleeper.log").read_text().strip() == "started"
    assert "sleeper.log" in packed_names(tmp_path / "out")


def test_a_sigkilled_runner_takes_its_command_and_what_it_started_with_it(tmp_path):
    """SIGKILL of the runner (tools/device-run execs it, so the wrapper is this process) in the middle
    of a command: the command and what it started in its process group, here sh and its sleep, are
    gone within PROMPT_S, though no handler of the runner's can run."""
    sleep = f"sleep {800000 + os.getpid() % 90000}"
    script = (
        "import pathlib, sys\n"
        "from tools.device_run import Runner\n"
        f"runner = Runner(pathlib.Path({str(tmp_path / 'out')!r}), pathlib.Path({str(tmp_path / 'work')!r}), 600)\n"
        f"runner.command(['sh', '-c', 'echo started; {sleep}; echo never'], 300)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(device_run.ROOT)))  # fmt: skip
    try:
        assert runner.stdout.readline().strip() == "started", runner.communicate(timeout=30)
        sleeping = processes_with(sleep)
        assert sleeping, f"no process runs {sleep!r}: the command is not where expected"
        runner.kill()
        runner.communicate(timeout=30)
        wait_until(lambda: not processes_with(sleep), PROMPT_S, f"{sleep} ({sleeping}) gone after the runner's SIGKILL")
    finally:
        if runner.poll() is None:
            runner.kill()
        for pid in processes_with(sleep):
            os.kill(pid, signal.SIGKILL)


def test_resume_keeps_what_an_earlier_call_finished(tmp_path):
    clock = FakeClock()
    first = Runner(tmp_path / "out", tmp_path / "work", budget_s=60, clock=clock)
    first.run_plan([writing_step("a", clock, 40), writing_step("b", clock, 40)])
    clock2 = FakeClock()
    second = Runner(tmp_path / "out2", tmp_path / "work", budget_s=60, clock=clock2)
    ran = []

    def record(runner, timeout):
        ran.append("a")
        return Outcome("ok")

    second.run_plan([Step("a", "done before", record, 60, 1), writing_step("b", clock2, 5)], resume=True)
    assert ran == []
    assert {s["step"]: s["status"] for s in json.loads((tmp_path / "out2" / "summary.json").read_text())["steps"]} == {
        "a": "ok",
        "b": "ok",
    }


def suite_writing_step(name: str) -> Step:
    """A stand-in suite: a command that writes NAME@cpu.json with the run id it was given in its
    context (as suite_main.cpp writes FUSEBENCH_RUN_ID), and the line run.json is made from."""

    def action(runner: Runner, timeout: float) -> Outcome:
        write = (
            "import json, os, sys; json.dump({'context': {'fusebench_run_id': os.environ.get('FUSEBENCH_RUN_ID')},"
            " 'benchmarks': []}, open(sys.argv[1], 'w'))"
        )
        status, text = runner.command([sys.executable, "-c", write, str(runner.results / f"{name}@cpu.json")], timeout)
        runner.append(device_run.ENTRIES, f"{name}\tcpu\tran\t0\t\t[]\n")
        return Outcome("ok" if status == 0 else "failed", text)

    return Step(name, f"writes {name}@cpu.json", action, 60, 1)


def run_with_manifest(tmp_path: pathlib.Path, out: str, names: list[str], resume: bool = False) -> dict:
    runner = Runner(tmp_path / out, tmp_path / "work", budget_s=100)
    suites = device_run.SuiteRuns(device_run.Settings(tmp_path, tmp_path, "python3", 1, "OFF", "90", []))
    suites.devices = ["cpu"]
    device_run.install_manifest(runner, suites, "quick")
    assert runner.run_plan([suite_writing_step(n) for n in names], resume=resume) == 0
    return json.loads((tmp_path / out / "summary.json").read_text())


def test_each_call_is_a_run_whose_id_its_commands_get_and_its_files_carry(tmp_path):
    """FUSEBENCH_RUN_ID as tools/run gives it: the commands get the call's id, summary.json and
    run.json record it, and the integrity check finds every file this run's. --resume continues
    the earlier call's run; a fresh call is a new run with an empty results directory."""
    from reports.integrity import file_problems

    results = tmp_path / "work" / "results"

    def contexts() -> dict[str, dict]:
        return {p.name: json.loads(p.read_text())["context"] for p in results.glob("*@*.json")}

    first = run_with_manifest(tmp_path, "out1", ["first"])
    run_id = first["run_id"]
    assert re.fullmatch(r"\d{8}T\d{6}Z-device-[0-9a-f]{8}", run_id), run_id
    manifest = json.loads((results / "run.json").read_text())
    assert manifest["run_id"] == run_id and contexts() == {"first@cpu.json": {"fusebench_run_id": run_id}}
    assert json.loads((results / "device" / "summary.json").read_text())["run_id"] == run_id
    assert file_problems(results, manifest, contexts()) == []

    resumed = run_with_manifest(tmp_path, "out2", ["first", "second"], resume=True)
    assert resumed["run_id"] == run_id and [s["step"] for s in resumed["steps"]] == ["first", "second"]
    manifest = json.loads((results / "run.json").read_text())
    assert set(manifest["files"]) == {"first@cpu.json", "second@cpu.json"} and manifest["run_id"] == run_id
    assert file_problems(results, manifest, contexts()) == []

    fresh = run_with_manifest(tmp_path, "out3", ["third"])
    assert fresh["run_id"] != run_id
    manifest = json.loads((results / "run.json").read_text())
    assert set(contexts()) == set(manifest["files"]) == {"third@cpu.json"}, "an earlier run's file was kept"
    assert [e["suite"] for e in manifest["ran"]] == ["third"]
    assert file_problems(results, manifest, contexts()) == []


def make_deb(path: pathlib.Path, files: dict[str, bytes]) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b""), ("data.tar.xz", data.getvalue())]
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, body in members:
        out.write(f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode())
        out.write(body + (b"\n" if len(body) % 2 else b""))
    path.write_bytes(out.getvalue())


def test_extract_deb_without_dpkg(tmp_path):
    deb = tmp_path / "x.deb"
    make_deb(deb, {"usr/include/fmt/core.h": b"// odd length!", "usr/share/x": b"ab"})
    device_run.extract_deb(deb, tmp_path / "prefix")
    assert (tmp_path / "prefix/usr/include/fmt/core.h").read_bytes() == b"// odd length!"
    assert (tmp_path / "prefix/usr/share/x").read_bytes() == b"ab"
    (tmp_path / "bad.deb").write_bytes(b"not an archive")
    with pytest.raises(ValueError, match="not a Debian package"):
        device_run.extract_deb(tmp_path / "bad.deb", tmp_path / "prefix")


def test_the_gpu_plan_puts_setup_first_and_every_measurement_after_what_it_needs():
    settings = device_run.Settings(pathlib.Path("b"), pathlib.Path("d"), "python3", 16, "ON", "90", [])
    plan = device_run.gpu_plan(settings)
    names = [s.name for s in plan]
    assert names[:2] == ["unpack", "environment"]
    assert all("build" in s.needs or s.needs == ("environment",) for s in plan if s.name not in device_run.SETUP_STEPS)
    assert len(names) == len(set(names))


def test_a_step_whose_estimate_does_not_fit_waits_and_a_smaller_one_goes_ahead(tmp_path):
    clock = FakeClock()
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100, clock=clock)
    big = writing_step("big", clock, 80, min_s=1)
    big.estimate_s = 120  # more than the 90 s left after the packing reserve
    small = writing_step("small", clock, 20, min_s=1)
    small.estimate_s = 30
    runner.run_plan([big, small])
    steps = {s["step"]: s for s in json.loads((tmp_path / "out" / "summary.json").read_text())["steps"]}
    assert steps["big"]["status"] == "skipped"
    assert steps["big"]["reason"] == "budget: 90 s left, the step takes about 120 s (its estimate)"
    assert steps["small"]["status"] == "ok"


def test_steps_done_in_an_earlier_loan_are_not_run_again(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"steps": {"a": {"status": "done", "loan": "loan-01", "revision": "abc"},
                                           "b": {"status": "partial", "loan": "loan-01"}}, "loans": []}))  # fmt: skip
    done = device_run.done_steps(state)
    assert done == {"a": "loan-01 (commit abc)"}
    clock = FakeClock()
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100, clock=clock, done_elsewhere=done)
    ran = []

    def record(runner, timeout):
        ran.append("a")
        return Outcome("ok")

    runner.run_plan([Step("a", "done in loan-01", record, 60, 1), writing_step("b", clock, 5, min_s=1)])
    assert ran == []
    assert [s["step"] for s in json.loads((tmp_path / "out" / "summary.json").read_text())["steps"]] == ["b"]
    state.write_text("{}")
    with pytest.raises(ValueError, match="no 'steps' object"):
        device_run.done_steps(state)


def test_the_tree_stamp_names_a_changed_or_missing_file(tmp_path):
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.cpp").write_text("int a;\n")
    (root / "b.py").write_text("b = 1\n")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    import hashlib

    listing = "".join(
        f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}\n" for rel in ("src/a.cpp", "b.py")
    )
    (bundle / "TREE.sha256").write_text(listing)
    (bundle / "REVISION").write_text("0123456789ab+tree-aaaaaaaaaaaa\n")
    assert device_run.checked_tree(bundle, root) == ("0123456789ab+tree-aaaaaaaaaaaa", "")
    (root / "src" / "a.cpp").write_text("int a = 2;\n")
    (root / "b.py").unlink()
    revision, problem = device_run.checked_tree(bundle, root)
    assert "2 file(s) differ" in problem and "src/a.cpp (differs)" in problem and "b.py (missing)" in problem
    (bundle / "REVISION").unlink()
    assert "no REVISION or TREE.sha256" in device_run.checked_tree(bundle, root)[1]


def test_e_units_merge_into_one_band_in_the_band_order(tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    assert device_run.merge_alignment(units, tmp_path / "merged.json") == 0
    assert not (tmp_path / "merged.json").exists()
    for mode, seed in (("eager", 2), ("compiled", 1), ("eager", 1)):
        run = {"seed": seed, "mode": mode, "train_loss": [1.0], "eval": [{"step": 1, "loss": 2.0}]}
        (units / f"{mode}-{seed}.json").write_text(json.dumps({"config": "gpt2-124m", "steps": 1000, "runs": [run],
                                                               "not_run": [], "seeds": [], "compiled_seeds": []}))  # fmt: skip
    assert device_run.merge_alignment(units, tmp_path / "merged.json") == 3
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [(r["mode"], r["seed"]) for r in merged["runs"]] == [("eager", 1), ("compiled", 1), ("eager", 2)]
    assert merged["seeds"] == [1, 2] and merged["compiled_seeds"] == [1]
    assert {(n["mode"], n["seed"]) for n in merged["not_run"]} == {("compiled", 2), ("eager", 3)}
    assert merged["config"] == "gpt2-124m"


def test_the_gpu_plan_follows_the_issue_priority_and_e_needs_no_build():
    settings = device_run.Settings(pathlib.Path("b"), pathlib.Path("d"), "python3", 16, "ON", "90", [])
    plan = device_run.gpu_plan(settings)
    measured = [s for s in plan if s.name not in device_run.SETUP_STEPS]
    assert [s.priority for s in measured] == sorted(s.priority for s in measured)
    assert [s.name for s in measured if s.name.startswith("E/")] == [f"E/{m}-{n}" for m, n in device_run.E_UNITS]
    assert all(s.needs == ("environment",) for s in measured if s.name.startswith("E/"))
    names = [s.name for s in plan]
    assert names.index("E/eager-3") < names.index("configure") < names.index("build") < names.index("gpu-tests")
    assert all(s.estimate_s > 0 for s in measured)
    stand_in = device_run.gpu_plan(dataclasses.replace(settings, stand_in=True, estimate_scale=0.1))
    by_name = {s.name: s for s in stand_in}
    assert by_name["A@cuda"].estimate_s == 24 and "configure" not in by_name


def test_a_step_an_earlier_loan_cut_is_expected_to_take_at_least_that_long(tmp_path):
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"steps": {"long": {"status": "partial", "seconds": 95.0}}, "loans": []}))
    measured = device_run.measured_steps(state)
    assert measured == {"long": 95.0}
    clock = FakeClock()
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100, clock=clock, measured_elsewhere=measured)
    long = writing_step("long", clock, 50, min_s=1)
    long.estimate_s = 40  # fits the 90 s left, but the last loan ran it 95 s and cut it
    runner.run_plan([long])
    step = json.loads((tmp_path / "out" / "summary.json").read_text())["steps"][0]
    assert step["status"] == "skipped"
    assert step["reason"] == "budget: 90 s left, the step takes about 95 s (an earlier loan ran it that long)"


@pytest.mark.parametrize("stand_in,ran_on,status", [(False, "cuda:0 (NVIDIA H200)", "ok"), (False, "cpu", "failed"),
                                                    (True, "cpu", "ok")])  # fmt: skip
def test_a_judge_step_keeps_the_judgment_and_checks_where_it_ran(tmp_path, stand_in, ran_on, status):
    """The judge step's command line and its check of judgment.json, with an interpreter that writes
    the judgment a GPU (or a CPU) judgment writes; the package counts as installed for the run."""
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100)
    runner.facts["fusebench_python"] = str(runner.work / "fusebench-python")
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {tmp_path}/argv\n'
        'while [ "$1" != "--out" ]; do shift; done\n'
        'mkdir -p "$2"\n'
        f"""echo '{{"environment": {{"device": "{ran_on}"}}}}' > "$2/judgment.json"\n"""
        "exit 3\n"
    )
    fake.chmod(0o755)
    runner.env["FUSEBENCH_PYTHON"] = str(fake)
    outcome = device_run.judge_step(stand_in, device_run.Judged("mlp", "f32", 8, 5))(runner, 60)
    device = "cpu" if stand_in else "cuda"
    argv = (tmp_path / "argv").read_text().split()
    assert argv[:3] == ["-m", "fusebench", "judge"] and argv[3].endswith(f"tools/gpu/judge_models.py:mlp_{device}")
    assert argv[argv.index("--backend") + 1] == "inductor" and argv[argv.index("--dtype") + 1] == "f32"
    assert (runner.extras / f"judge-mlp@{device}" / "judgment.json").is_file()
    assert outcome.status == status
    if status == "ok":
        assert outcome.facts == {"verdict": "INCONCLUSIVE", "device": ran_on, "judgment": f"device/judge-mlp@{device}"}
    else:
        assert outcome.reason == "judgment.json says the judgment ran on cpu, not on cuda"


def test_the_gpu_plan_judges_a_small_model_before_the_build_and_gpt2():
    settings = device_run.Settings(pathlib.Path("b"), pathlib.Path("d"), "python3", 16, "ON", "90", [])
    names = [s.name for s in device_run.gpu_plan(settings)]
    by_name = {s.name: s for s in device_run.gpu_plan(settings)}
    assert names.index("E/eager-3") < names.index("judge-mlp@cuda") < names.index("configure")
    assert names.index("judge-mlp@cuda") < names.index("judge@cuda")
    assert by_name["judge-mlp@cuda"].needs == ("environment",) and by_name["judge-mlp@cuda"].estimate_s > 0


@pytest.mark.parametrize("install,status,reason", [
    ("sleep 5", "timed_out", "pip install ./python offline ran past 1 s"),
    ("echo 'error: no compiler' >&2; exit 1", "failed", "pip install ./python offline: exit 1: error: no compiler"),
])  # fmt: skip
def test_an_install_cut_by_the_budget_is_resumed_and_a_broken_one_fails(tmp_path, install, status, reason):
    """The judge step's offline install of python/: where the call's budget ends during it, the step
    is timed out (partial in the plan, resumed by the next loan), not failed; an install that exits
    non-zero fails the step with its error."""
    runner = Runner(tmp_path / "out", tmp_path / "work", budget_s=100)
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n{install}\n")
    fake.chmod(0o755)
    runner.env["FUSEBENCH_PYTHON"] = str(fake)
    outcome = device_run.judge_step(True, device_run.Judged("mlp", "f32", 8, 5))(runner, 1)
    assert (outcome.status, outcome.reason) == (status, reason)
    assert "fusebench_python" not in runner.facts
