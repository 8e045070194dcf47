"""The build the tests of whole runs need (tools/run, the suites, fusebench-diff): where it is, and a
skip mark for a checkout that has not been built (tools/build release). ctest runs these tests after
the build; plain pytest skips them until it exists."""

from __future__ import annotations

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("FUSEBENCH_BIN") or ROOT / "build" / "release" / "bin")


def suites() -> list[pathlib.Path]:
    return sorted(p for p in BIN.glob("bench_*") if p.is_file())


needs_suites = pytest.mark.skipif(not suites(), reason=f"no suite binaries in {BIN}: build first (tools/build release)")


def work_dir(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    """A test's work directory: FUSEBENCH_TEST_WORK/name where ctest names one (it keeps what the test
    left for a person to look at), else pytest's temporary directory."""
    root = os.environ.get("FUSEBENCH_TEST_WORK")
    return pathlib.Path(root) / name if root else tmp_path / name
