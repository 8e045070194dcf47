"""The pytest plugin, as a user meets it: a sample project run by pytest in a subprocess, the
fixture found through the installed package's pytest11 entry point."""

import json
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

SAMPLE = pathlib.Path(__file__).parent / "sample_project"


def run_sample(tmp_path, *args):
    project = tmp_path / "project"
    shutil.copytree(SAMPLE, project)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--no-header", *args, "test_sample.py"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_sample_project_one_pass_one_fail_with_report(tmp_path):
    report = tmp_path / "out" / "fusebench-report.json"
    run = run_sample(tmp_path, f"--fusebench-report={report}")
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "1 failed, 1 passed" in output, output
    # The failing assertion's message: what was compared, the count, and the element with its
    # index, both values and both bit patterns.
    assert (
        "fusebench: f16[4] is not bit-equal to f16[4] (nan=bitwise, signed_zero=bitwise): 1 of 4 elements differ; first ones:"
        in output
    ), output
    assert "[2] a=3.00195312 (0x4201) b=3 (0x4200)" in output, output

    summary = json.loads(report.read_text())
    records = summary["assertions"]
    assert (summary["passed"], summary["failed"]) == (4, 1)
    by_measure = {(r["test"].split("::")[-1], r["measure"]): r for r in records}
    failing = by_measure[("test_fused_result_is_bit_equal", "mismatches")]
    assert (failing["figure"], failing["limit"], failing["verdict"]) == (1, 0, "fail")
    passing = by_measure[("test_rounding_is_within_one_ulp", "ulp_error.max")]
    assert passing["verdict"] == "pass" and 0 < passing["figure"] <= 0.5
    assert by_measure[("test_rounding_is_within_one_ulp", "ulp_diff.max")]["figure"] == 1
    assert all(r["test"].startswith("test_sample.py::") for r in records)


def test_without_the_option_no_report_is_written(tmp_path):
    run = run_sample(tmp_path)
    assert run.returncode == 1
    assert not list(tmp_path.rglob("*.json"))


def test_failure_messages_of_ulp_and_error_assertions(fusebench):
    a = np.array([1.0, 2.0, np.nan, 4.0], np.float16)
    b = np.array([1.0, 2.0078125, np.nan, 4.0], np.float16)  # [1] is 4 ULP above 2.0
    fusebench.assert_ulp_within(a, b, 4)
    with pytest.raises(AssertionError) as failed:
        fusebench.assert_ulp_within(a, b, 3)
    message = str(failed.value)
    assert "not within 3 ULP" in message and "max distance 4 ULP at [1]" in message
    assert "[1] a=2 (0x4000) b=2.0078125 (0x4004)" in message
    assert "1 NaN pairs (0 NaN against a number)" in message

    with pytest.raises(AssertionError) as failed:
        fusebench.assert_ulp_within(a, np.array([1.0, 2.0, 3.0, 4.0], np.float16), 100)
    assert "(1 NaN against a number)" in str(failed.value) and "[2] a=nan (0x7e00) b=3 (0x4200)" in str(failed.value)

    ref = np.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(AssertionError) as failed:
        fusebench.assert_error_within(b[[0, 1, 3]], ref[[0, 1, 3]], ulp_max=0.5)
    assert "ulp_error.max = 4 > 0.5" in str(failed.value)
    assert "[1] y=2.0078125 (0x4004) ref=2 (0x4000000000000000)" in str(failed.value)


def test_registered_through_the_entry_point():
    from importlib.metadata import entry_points

    names = [ep.value for ep in entry_points(group="pytest11") if ep.name == "fusebench"]
    assert names == ["fusebench.pytest_plugin"]
