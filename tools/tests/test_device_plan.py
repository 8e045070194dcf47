"""tools/device_plan.py and tools/combine-runs --plan: a loan's results become loan-NN/ and the
plan's state; a step done stays done, a cut step is partial, a skipped one pending; the schedule
places steps in calls by their estimates and names the ones no call can hold; the loans combine
into one run with E's units as one band."""

from __future__ import annotations

import json
import pathlib
import tarfile

import pytest

from tools import combine_runs, device_plan


def loan_out(tmp: pathlib.Path, name: str, steps: list[dict], files: dict[str, str], revision="0123456789ab"):
    out = tmp / name
    results = tmp / f"{name}-results"
    for rel, text in files.items():
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        (results / rel).write_text(text)
    out.mkdir()
    with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
        for path in sorted(results.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(pathlib.Path("results") / path.relative_to(results)))
    summary = {"revision": revision, "elapsed_s": 500, "machine": {"versions": {"gpu": "NVIDIA H200"}}, "steps": steps}
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def unit(mode: str, seed: int) -> str:
    return json.dumps({"config": "gpt2-124m", "runs": [{"seed": seed, "mode": mode, "eval": [{"step": 1, "loss": 2}]}]})


def manifest(devices, ran):
    return json.dumps({"profile": "mixed", "devices": devices, "seconds": 100, "ran": ran, "skipped": []})


def test_two_loans_record_resume_and_combine(tmp_path):
    plan = tmp_path / "plan"
    first = loan_out(
        tmp_path, "out1",
        [{"step": "unpack", "status": "ok"}, {"step": "E/eager-1", "status": "ok", "seconds": 101.5},
         {"step": "E/compiled-1", "status": "timed_out", "seconds": 160, "reason": "ran past 160 s"},
         {"step": "A@cuda", "status": "skipped", "reason": "budget: 40 s left"}],
        {"device/gpu_alignment/eager-1.json": unit("eager", 1), "device/summary.json": "{}"},
    )  # fmt: skip
    loan, state = device_plan.record(first, plan)
    assert loan == "loan-01"
    assert state["steps"]["E/eager-1"] == state["steps"]["E/eager-1"] | {"status": "done", "revision": "0123456789ab"}
    assert state["steps"]["E/compiled-1"]["status"] == "partial"
    assert state["steps"]["A@cuda"] == {"status": "pending", "skipped_in": "loan-01", "reason": "budget: 40 s left"}
    assert "unpack" not in state["steps"]
    assert device_plan.group_status(state)["E"] == "partial"
    second = loan_out(
        tmp_path, "out2",
        [{"step": "E/compiled-1", "status": "ok", "seconds": 170}, {"step": "A@cuda", "status": "ok", "seconds": 230}],
        {"device/gpu_alignment/compiled-1.json": unit("compiled", 1), "fusion_determinism@cuda.json": "{}",
         "run.json": manifest(["cuda"], [{"suite": "fusion_determinism", "device": "cuda", "seconds": 230}])},
        revision="fedcba987654",
    )  # fmt: skip
    loan, state = device_plan.record(second, plan)
    assert loan == "loan-02" and [entry["loan"] for entry in state["loans"]] == ["loan-01", "loan-02"]
    assert state["steps"]["E/eager-1"]["loan"] == "loan-01"  # done stays with the loan that did it
    assert state["steps"]["A@cuda"] == state["steps"]["A@cuda"] | {"status": "done", "revision": "fedcba987654"}
    assert json.loads((plan / "state.json").read_text()) == state
    assert combine_runs.main(["--plan", str(plan), "--out", str(tmp_path / "combined"), "--no-report"]) == 0
    combined = tmp_path / "combined"
    band = json.loads((combined / "device" / "gpu_alignment.json").read_text())
    assert [(r["mode"], r["seed"]) for r in band["runs"]] == [("eager", 1), ("compiled", 1)]
    assert (combined / "fusion_determinism@cuda.json").exists()
    assert json.loads((combined / "run.json").read_text())["devices"] == ["cuda"]
    assert {p.name for p in (combined / "device" / "loans").iterdir()} == {"loan-01", "loan-02"}
    steps = {s["step"]: s for s in json.loads((combined / "device" / "summary.json").read_text())["steps"]}
    assert steps["A@cuda"]["status"] == "ok" and steps["A@cuda"]["reason"] == "loan-02 at fedcba987654"


@pytest.mark.parametrize(
    "case, message",
    [
        ("no revision", "names no revision"),
        ("unknown step", "steps the plan does not have: E/eager-9"),
        ("no archive", "no summary.json and results.tar.gz"),
    ],
)
def test_a_loan_that_cannot_be_placed_is_refused_and_the_state_is_unchanged(tmp_path, case, message, capsys):
    steps = [{"step": "E/eager-9" if case == "unknown step" else "E/eager-1", "status": "ok"}]
    out = loan_out(tmp_path, "out", steps, {"x.txt": ""}, revision="unknown" if case == "no revision" else "abc")
    if case == "no archive":
        (out / "results.tar.gz").unlink()
    assert device_plan.main(["record", str(out), "--plan-dir", str(tmp_path / "plan")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "plan" / "state.json").exists()


def test_the_schedule_places_steps_by_their_estimates_and_names_what_fits_no_call():
    place = device_plan.schedule({"steps": {}, "loans": []}, loans=6)
    steps = {s.name: s for s in device_plan.plan_steps()}
    assert place["E/eager-1"] == "loan 1 call 1"  # E first: it needs no build
    assert place["A@torch:cuda"] == "no call: 900 s + 260 s build > 508 s"
    usable = device_plan.CALL_BUDGET_S - 10 - sum(device_plan.SETUP_S.values())
    for name, where in place.items():  # what one call holds never exceeds its budget
        if where.startswith("loan"):
            assert steps[name].estimate_s <= usable
    loans_calls = {}
    for name, where in place.items():
        if where.startswith("loan"):
            loans_calls.setdefault(where, []).append(name)
    for where, names in loans_calls.items():
        cost = sum(steps[n].estimate_s for n in names)
        builds = any(steps[n].needs_build for n in names)
        assert cost + (device_plan.COLD_BUILD_S if builds and where.endswith("call 1") else 0) <= usable, where
    done = {"steps": {"E/eager-1": {"status": "done"}}, "loans": []}
    assert "E/eager-1" not in device_plan.schedule(done)
    measured = {"steps": {"gpu-tests": {"status": "failed", "seconds": 999}}, "loans": []}
    assert device_plan.schedule(measured)["gpu-tests"].startswith("no call: 999 s")


def test_the_run_line_names_the_benchmark_library_and_the_tree():
    from reports import runline

    new = {
        "benchmark_version": "1.7.1",
        "library_build_type": "debug",
        "git_revision": "0123456789ab+tree-aaaabbbbcccc",
    }
    assert runline.benchmark_library([new]) == ", Google Benchmark 1.7.1 (the library a debug build)"
    built = new | {"compile_flags": "-O3 -DNDEBUG -ffp-contract=off -march=native"}
    assert (
        runline.benchmark_library([built])
        == ", Google Benchmark 1.7.1 (the library a debug build; the suites -O3 -DNDEBUG)"
    )
    assert (
        runline.benchmark_library([{"library_build_type": "debug"}]) == ""
    )  # suites from before the release was recorded
    assert runline.tree([new]) == (
        "0123456789ab+tree-aaaabbbbcccc (with uncommitted changes: their diff is in device/provenance/tree.diff)"
    )
    assert runline.tree([{"git_revision": "0123456789ab"}]) == "0123456789ab"


def test_the_run_line_says_what_a_devices_eager_path_is_where_its_context_does():
    from reports import runline
    from reports.results import Results, SuiteResult

    def results_of(contexts):
        by_key = {
            key: SuiteResult(*key, pathlib.Path(f"{key[0]}@{key[1]}.json"), {"context": context})
            for key, context in contexts.items()
        }
        return Results(root=pathlib.Path("."), by_key=by_key, devices=sorted({d for _, d in contexts}))

    eager = "one jax.jit per op, each op's value rounded once, at its output"
    described = results_of(
        {
            ("accumulated_error", "cpu"): {},
            ("accumulated_error", "xla"): {"fusebench_eager": eager},
            ("scalar_lowering", "xla"): {"fusebench_eager": eager},
        }
    )
    assert runline.devices(described) == f"cpu, xla (eager: {eager})"
    assert f"devices cpu, xla (eager: {eager}); " in runline.run_line(described)
    # results from before the suites said it (xla's eager was then primitive by primitive): the name alone
    assert runline.devices(results_of({("accumulated_error", "xla"): {}})) == "xla"
    two = results_of(
        {("accumulated_error", "xla"): {"fusebench_eager": "b"}, ("scalar_lowering", "xla"): {"fusebench_eager": "a"}}
    )
    assert runline.devices(two) == "xla (eager: a / b)"


def test_the_bundle_stamp_names_this_tree_and_the_device_run_accepts_it(tmp_path):
    import subprocess

    from tools import device_run

    root = device_run.ROOT
    (tmp_path / "MANIFEST").write_text("# no packages: --stamp only stamps\n")
    done = subprocess.run([str(root / "tools" / "device-bundle"), "--out", str(tmp_path), "--stamp"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True)
    revision = (tmp_path / "REVISION").read_text().strip()
    differs = (tmp_path / "tree.diff").stat().st_size > 0
    assert revision == head.stdout.strip() + (revision[12:] if differs else "")
    assert not differs or (revision[12:18] == "+tree-" and len(revision) == 30)
    listed = dict(line.split("  ", 1)[::-1] for line in (tmp_path / "TREE.sha256").read_text().splitlines())
    assert "tools/device_run.py" in listed
    assert device_run.checked_tree(tmp_path, root) == (revision, "")
    clean = subprocess.run([str(root / "tools" / "device-bundle"), "--out", str(tmp_path), "--stamp", "--require-clean"],
                           capture_output=True, text=True)  # fmt: skip
    assert (clean.returncode == 0) == (not differs)
    assert differs == ("the tree differs from" in clean.stderr)
