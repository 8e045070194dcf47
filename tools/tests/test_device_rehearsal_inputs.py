"""tools/device-rehearsal --rehearsed: the cold offline build is skipped only while its inputs (build files,
device tools, bootstrap pins, the bundle's packages, the compilers) are those of its last passing run, and
any change to one of them runs it again. Checked on a throwaway git checkout holding a copy of the script."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tools.tests.built import ROOT

MANIFEST = """# fusebench offline device bundle, written 2026-12-08T00:00:00Z
# package version sha256 file
libfmt-dev 9.1.0+ds1-2 c8fa00dd debs/libfmt-dev_9.1.0+ds1-2_amd64.deb
"""


@pytest.fixture
def checkout(tmp_path: pathlib.Path) -> pathlib.Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    (repo / "common" / "src").mkdir(parents=True)
    shutil.copy2(ROOT / "tools" / "device-rehearsal", repo / "tools" / "device-rehearsal")
    (repo / "CMakeLists.txt").write_text("project(probe)\n")
    (repo / "common" / "CMakeLists.txt").write_text("add_library(probe src/probe.cpp)\n")
    (repo / "common" / "src" / "probe.cpp").write_text("int probe() { return 1; }\n")
    (repo / "tools" / "bootstrap").write_text("# pins\n")
    bundle = repo / "bundle"
    bundle.mkdir()
    (bundle / "MANIFEST").write_text(MANIFEST)
    (repo / ".gitignore").write_text("/bundle/\n/record.json\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")  # fmt: skip
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "probe"]):
        subprocess.run(argv, cwd=repo, env=env, check=True)
    return repo


def rehearsal(repo: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(repo / "tools" / "device-rehearsal"), "--bundle", str(repo / "bundle"), "--python", sys.executable, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def digest(repo: pathlib.Path) -> str:
    proc = rehearsal(repo, "--inputs")
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("sha256 "), proc.stdout
    return last.split()[1]


def test_the_inputs_are_the_build_files_tools_packages_and_compilers_not_the_sources(checkout):
    listed = rehearsal(checkout, "--inputs").stdout
    assert "CMakeLists.txt" in listed and "common/CMakeLists.txt" in listed and "tools/bootstrap" in listed
    assert "package libfmt-dev 9.1.0+ds1-2" in listed and "g++ " in listed
    assert "probe.cpp" not in listed
    before = digest(checkout)
    (checkout / "common" / "src" / "probe.cpp").write_text("int probe() { return 2; }\n")
    assert digest(checkout) == before, "a source file is the main build's to check"
    (checkout / "common" / "CMakeLists.txt").write_text("add_library(probe src/probe.cpp)\nfind_package(fmt)\n")
    assert digest(checkout) != before, "a new dependency enters through CMake"
    changed_cmake = digest(checkout)
    (checkout / "bundle" / "MANIFEST").write_text(MANIFEST.replace("9.1.0+ds1-2 c8fa00dd", "9.1.0+ds1-3 d9fb11ee"))
    assert digest(checkout) != changed_cmake, "a package's new version can break the build"
    (checkout / "cmake").mkdir()
    (checkout / "cmake" / "extra.cmake").write_text("# untracked, not ignored\n")
    assert "cmake/extra.cmake" in rehearsal(checkout, "--inputs").stdout


def test_a_record_of_the_same_inputs_skips_the_build_and_a_changed_input_does_not(checkout, tmp_path):
    record = checkout / "record.json"
    record.write_text(json.dumps({"inputs_sha256": digest(checkout), "revision": "abc123",
                                  "rehearsed_utc": "2026-12-08T00:00:00Z"}))  # fmt: skip
    build, out = tmp_path / "build", tmp_path / "out"
    proc = rehearsal(checkout, "--build-dir", str(build), "--out", str(out), "--rehearsed", str(record))
    assert proc.returncode == 77, proc.stdout + proc.stderr
    assert "skipped" in proc.stdout and "abc123" in proc.stdout and "2026-12-08T00:00:00Z" in proc.stdout
    assert not out.exists() and not build.exists()

    (checkout / "CMakeLists.txt").write_text("project(probe)\nfind_package(Eigen3)\n")
    # A changed input goes on to the build. Without root (or unshare) that stops at exit 77 naming root;
    # with it, the build fails on this probe tree, and a failure writes no record.
    proc = rehearsal(checkout, "--build-dir", str(build), "--out", str(out), "--rehearsed", str(record))
    assert "differ from those" in proc.stdout, proc.stdout + proc.stderr
    assert proc.returncode == 77 and "needs root" in proc.stderr or proc.returncode not in (0, 77)
    assert json.loads(record.read_text())["revision"] == "abc123"


def test_a_record_that_is_not_one_runs_the_build(checkout, tmp_path):
    record = checkout / "record.json"
    record.write_text("{not json")
    proc = rehearsal(
        checkout, "--build-dir", str(tmp_path / "b"), "--out", str(tmp_path / "o"), "--rehearsed", str(record)
    )
    assert "differ from those" in proc.stdout, proc.stdout + proc.stderr
