"""A sharded run, merged, reads like the unsharded run of the same commit.

tools/run runs a filtered quick profile on cpu whole, then as shards 1/2 and 2/2 (balanced by the
whole run's instance times); tools/merge joins them. Every precision counter of every instance must
be identical, every instance must be there exactly once, and the report's claims table must read the
same (the claims decided on timings: the same verdict, or one INCONCLUSIVE; their figures were timed apart). Bad input must stop with exit 2 and the reason: `--shard 3/2`, a missing shard, a shard of
another commit.

With --slurm, the same through a real single-node Slurm (tools/slurm-local: Debian's slurmctld,
slurmd and munge on localhost): tools/slurm submits the 2 shards as a job array and the merge with
--dependency=afterok. Shard 2 is made to fail first (its results root is taken by a file): the merge
must then never run, and after `tools/slurm --resubmit 2` the merge must complete and match.
Skipped when Slurm cannot be started here, except under CI=true, where that is a failure.

The unsharded run is made once, in FUSEBENCH_SHARDED_WHOLE (pytest's temporary directory when unset):
once per pytest session, and under ctest by the first test of the pair (FUSEBENCH_FRESH_WHOLE=1, a
ctest fixture) for the Slurm test to reuse, so that CI pays for it once. Both need the suites built.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

from reports.integrity import ROW_FIELDS
from tools.compare_runs import direction
from tools.tests.built import ROOT, needs_suites, work_dir

pytestmark = needs_suites

# Cheap cases of five suites (B, C1, C2, D and the toolkit), enough instances for two shards.
FILTER = (
    "^(D/subgraph:transpose/dtype:f16/|C2/out:f16/acc:f32/shape:1x16384/|C1/dtype:f16/scalar:0\\.7/"
    "|B/chain:mul_add_gelu_mul/dtype:f16/dist:uniform/|UlpDiff/dtype:f16/)"
)
# Google Benchmark's own fields of a row, not the suites' counters
BOOKKEEPING = ROW_FIELDS


def run(args: list[str], expect: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != expect:
        pytest.fail(
            f"FAIL: {' '.join(args)}: exit {r.returncode}, expected {expect}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        )
    return r


def tools_run(out: pathlib.Path, *extra: str) -> pathlib.Path:
    run([str(ROOT / "tools" / "run"), "--device", "cpu", "--filter", FILTER, "--out", str(out), *extra])
    return (out / "latest").resolve()


def precision_counters(run_dir: pathlib.Path) -> dict[tuple[str, str], dict[str, float]]:
    out = {}
    for path in sorted(run_dir.glob("*@*.json")):
        for b in json.loads(path.read_text())["benchmarks"]:
            key = (path.name, b["name"])
            if key in out:
                pytest.fail(f"{run_dir}: {key} appears twice")
            out[key] = {k: v for k, v in b.items() if k not in BOOKKEEPING and direction(k) is not None}
    return out


def claims_table(run_dir: pathlib.Path) -> list[str]:
    """The report's first table (claims x devices), without the run line's times."""
    lines = (run_dir / "report.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


# Claims decided on timings (shares of the copy, speed-ups): the whole run and the shards timed them apart, so
# their figures differ; their verdicts must agree, or one be INCONCLUSIVE (a run on a loaded machine is).
TIMED_TASKS = ("| [S]", "| [Engine]")
VERDICT = re.compile(r"\*\*([A-Z/]+)\*\*")


def tables_agree(whole: list[str], merged: list[str]) -> bool:
    """Every row the same, but for the timed claims' figures: the same claim, and the same verdict or one of them
    INCONCLUSIVE."""
    if len(whole) != len(merged):
        return False
    for a, b in zip(whole, merged):
        if not a.startswith(TIMED_TASKS):
            if a != b:
                return False
            continue
        claim_a, claim_b = a.split("|")[1:3], b.split("|")[1:3]
        verdicts = {VERDICT.search(a).group(1), VERDICT.search(b).group(1)}
        if claim_a != claim_b or (len(verdicts) > 1 and "INCONCLUSIVE" not in verdicts):
            return False
    return True


def check_same(whole: pathlib.Path, merged: pathlib.Path, label: str) -> None:
    a, b = precision_counters(whole), precision_counters(merged)
    if set(a) != set(b):
        pytest.fail(
            f"FAIL ({label}): instances differ: only whole {sorted(set(a) - set(b))}, only merged {sorted(set(b) - set(a))}"
        )
    for key in a:
        if a[key] != b[key]:
            diff = {
                k: (a[key].get(k), b[key].get(k)) for k in set(a[key]) | set(b[key]) if a[key].get(k) != b[key].get(k)
            }
            pytest.fail(f"({label}): {key}: precision counters differ (whole, merged): {diff}")
    counted = sum(len(c) for c in a.values())
    if counted == 0:
        pytest.fail(f"({label}): no precision counter compared")
    if not tables_agree(claims_table(whole), claims_table(merged)):
        pytest.fail(
            f"FAIL ({label}): the claims tables differ:\n"
            + "\n".join(claims_table(whole))
            + "\n--\n"
            + "\n".join(claims_table(merged))
        )
    print(f"ok ({label}): {len(a)} instances, {counted} precision counters identical; claims table identical")


def sharded(work: pathlib.Path, whole: pathlib.Path) -> None:
    r = run([str(ROOT / "tools" / "run"), "--shard", "3/2", "--device", "cpu"], expect=2)
    assert "shard 3 of 2 does not exist" in r.stderr, r.stderr
    shards = [tools_run(work / f"shard{k}", "--shard", f"{k}/2", "--shard-costs", str(whole)) for k in (1, 2)]
    for k, shard in enumerate(shards, 1):
        manifest = json.loads((shard / "run.json").read_text())
        if not manifest["shard"]["instances"]:
            pytest.fail(f"shard {k}/2 got no instance: {manifest['shard']}")
        if manifest["shard"]["costs"] != "recorded instance times":
            pytest.fail(f"shard {k}/2 was not balanced by the recorded times: {manifest['shard']['costs']}")
    merge = [str(ROOT / "tools" / "merge")]
    r = run([*merge, str(shards[0]), "--out", str(work / "missing")], expect=2)
    assert "shard 2/2 missing" in r.stderr, r.stderr
    other = work / "other-commit"
    shutil.copytree(shards[1], other)
    manifest = json.loads((other / "run.json").read_text())
    manifest["git_revision"] = "0" * 40
    (other / "run.json").write_text(json.dumps(manifest))
    r = run([*merge, str(shards[0]), str(other), "--out", str(work / "mixed")], expect=2)
    assert "differ in commit" in r.stderr, r.stderr
    assert not (work / "missing").exists() and not (work / "mixed").exists()
    run([*merge, *map(str, shards), "--out", str(work / "merged")])
    check_same(whole, work / "merged", "tools/run --shard, tools/merge")


def job_state(job: str) -> str:
    r = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    states = re.findall(r"JobState=(\w+)", r.stdout)
    if not states:
        return "GONE"
    if any(s in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") for s in states):
        return "ACTIVE"
    return states[-1]


def wait(job: str, limit_s: int = 900) -> str:
    start = time.time()
    while (state := job_state(job)) == "ACTIVE":
        if time.time() - start > limit_s:
            pytest.fail(f"Slurm job {job} still active after {limit_s} s")
        time.sleep(3)
    return state


def slurm(work: pathlib.Path, whole: pathlib.Path) -> None:
    up = subprocess.run([str(ROOT / "tools" / "slurm-local")], capture_output=True, text=True)
    if up.returncode != 0:
        message = f"Slurm could not be started here: {up.stderr.strip()[-1500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    job_dir = work / "slurm-job"
    job_dir.mkdir()
    (job_dir / "shard-2").write_text("a file where shard 2 writes its results: it fails\n")
    submit = [str(ROOT / "tools" / "slurm"), "--shards", "2", "--job-dir", str(job_dir), "--costs", str(whole)]
    r = run([*submit, "--", "--device", "cpu", "--filter", FILTER])
    array_job, merge_job = (job_dir / "jobs").read_text().split()[:2]
    print(r.stdout.strip())
    state = wait(merge_job)
    if (job_dir / "merged").exists() or state == "COMPLETED":
        pytest.fail(f"the merge ran although shard 2 failed (merge job {merge_job}: {state})")
    print(f"ok: shard 2 failed, merge job {merge_job} did not run ({state})")
    (job_dir / "shard-2").unlink()
    run([str(ROOT / "tools" / "slurm"), "--job-dir", str(job_dir), "--resubmit", "2"])
    merge_job = (job_dir / "jobs").read_text().split()[-1]
    state = wait(merge_job)
    if state != "COMPLETED" or not (job_dir / "merged" / "run.json").exists():
        log = job_dir / "logs" / "merge.out"
        pytest.fail(
            f"FAIL: merge job {merge_job} after resubmitting shard 2: {state}\n"
            + (log.read_text()[-3000:] if log.exists() else "")
        )
    check_same(whole, job_dir / "merged", "tools/slurm job array, resubmitted shard, afterok merge")


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> pathlib.Path:
    """The unsharded run's directory, made where FUSEBENCH_SHARDED_WHOLE says (or once per session)."""
    root = pathlib.Path(os.environ.get("FUSEBENCH_SHARDED_WHOLE") or tmp_path_factory.mktemp("sharded-whole"))
    if os.environ.get("FUSEBENCH_FRESH_WHOLE") == "1" or not (root / "latest" / "run.json").exists():
        shutil.rmtree(root, ignore_errors=True)
        tools_run(root)
    return (root / "latest").resolve()


def fresh(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    work = work_dir(tmp_path, name)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def test_sharded_run_merged_reads_like_the_whole_run(tmp_path, whole):
    sharded(fresh(tmp_path, "sharded-run"), whole)


def test_slurm_sharded_run_with_a_resubmitted_shard(tmp_path, whole):
    slurm(fresh(tmp_path, "slurm-sharded-run"), whole)
