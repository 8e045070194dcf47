"""pytest settings for every test of reports/ and tools/ (pytest.ini collects them). Two environment
variables let ctest keep its own reading of a test (tools/CMakeLists.txt):

  FUSEBENCH_SKIP_RETURN_CODE=N  a session whose every test skipped exits N, so that ctest's
                                SKIP_RETURN_CODE reads it as skipped (Slurm or a device unavailable);
  FUSEBENCH_NO_SKIP=1           a skip is a failure: a test ctest runs after the build must find what
                                it needs (the suites, fusebench-diff, Chromium)."""

from __future__ import annotations

import os

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("FUSEBENCH_NO_SKIP") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"skipped where FUSEBENCH_NO_SKIP=1 forbids it: {reason}"


def pytest_sessionfinish(session, exitstatus):
    code = os.environ.get("FUSEBENCH_SKIP_RETURN_CODE")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if code and exitstatus == 0 and reporter is not None:
        if reporter.stats.get("skipped") and not reporter.stats.get("passed"):
            session.exitstatus = int(code)
