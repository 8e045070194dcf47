"""tools/device_run.py: the budget stops a plan between steps and keeps every finished step's files;
a command past its share of the budget is stopped; the bundle's packages unpack without dpkg."""

from __future__ import annotations

import io
import json
import pathlib
import tarfile

import pytest

from tools import device_run
from tools.device_run import Outcome, Runner, Step


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


def test_the_gpu_plan_puts_setup_first_and_every_measurement_after_the_build():
    settings = device_run.Settings(pathlib.Path("b"), pathlib.Path("d"), "python3", 16, "ON", "90", [])
    plan = device_run.gpu_plan(settings)
    names = [s.name for s in plan]
    assert names[:4] == list(device_run.SETUP_STEPS)
    assert names[4] == "gpu-tests"
    assert all("build" in s.needs for s in plan[4:])
    assert len(names) == len(set(names))
