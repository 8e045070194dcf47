"""Task B's attribution and switch list end to end: a real B case (on xla) finds its
counter-examples' mechanisms, the switch list made from its evidence removes every explained one when
the suite reruns with it, and a bad list is refused with exit 2 naming the entry, before anything runs.

Needs the built suite: FUSEBENCH_B_BINARY (ctest sets it) or build/release/bin/bench_accumulated_error.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from reports import fusion_switches
from reports.claims.b import switch_recommendation

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = pathlib.Path(
    os.environ.get("FUSEBENCH_B_BINARY", ROOT / "build" / "release" / "bin" / "bench_accumulated_error")
)
# A case with a counter-example on the deciding measure (the conditioned error beyond the margin):
# on xla, mul_add_gelu_mul f32 with uniform inputs has one, explained by a split after the multiply.
# The cpu engine's quick profile has none: its ULP-worse sets are all at cancellation.
DEVICE = "xla"
CASE = "B/chain:mul_add_gelu_mul/dtype:f32/dist:uniform/"


def run_b(
    tmp: pathlib.Path, name: str, *extra: str, check: bool = True, device: str = DEVICE
) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / f"{name}-results.json"
    dumps = tmp / f"{name}-dumps"
    proc = subprocess.run(
        [
            str(BINARY),
            "--profile=quick",
            f"--device={device}",
            f"--dump-dir={dumps}",
            f"--benchmark_filter={CASE}",
            f"--benchmark_out={out}",
            "--benchmark_out_format=json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    results = json.loads(out.read_text()) if out.exists() else {}
    evidence = [json.loads(p.read_text()) for p in sorted(dumps.glob("B_*.json"))] if dumps.exists() else []
    return proc, {"results": results, "evidence": evidence, "out": out}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    if not BINARY.exists():
        pytest.skip(f"{BINARY} is not built")
    tmp = tmp_path_factory.mktemp("b-plain")
    _, run = run_b(tmp, "plain")
    return tmp, run


def counters(run: dict) -> dict:
    (bench,) = [b for b in run["results"]["benchmarks"] if b["name"].startswith(CASE)]
    return bench


def test_every_counterexample_is_attributed_and_its_switch_makes_fused_bit_equal(plain):
    _, run = plain
    (evidence,) = run["evidence"]
    bench = counters(run)
    assert bench["counterexamples"] > 0, "the case has no counter-example to attribute"
    assert bench["counterexamples_explained"] + bench["counterexamples_unexplained"] == bench["counterexamples"]
    for c in evidence["counterexamples"]:
        a = c["attribution"]
        assert a["status"] in ("explained", "unexplained")
        if a["status"] == "explained":
            assert a["switches"], c
            assert a["bit_equal_to_eager"] is True, c
            for sw in a["switches"]:
                assert sw["mechanism"] and sw["op"] and sw["switch"]
        else:
            assert "no switch removes it" in a["reason"]
    for sw in evidence["switches"]:
        assert sw["removes_sets"] and sw["rounds"] > 0
        low, high = sw["slowdown_ci95"]
        assert low <= sw["slowdown"] <= high
        low, high = sw["aa_ratio_ci95"]
        assert low <= sw["aa_ratio"] <= high


def test_the_switch_list_removes_the_explained_counterexamples_and_says_its_cost(plain):
    tmp, run = plain
    (evidence,) = run["evidence"]
    doc = fusion_switches.switch_document(DEVICE, "plain", run["evidence"], switch_recommendation)
    assert doc is not None and fusion_switches.validate(doc) == []
    explained = {c["set"] for c in evidence["counterexamples"] if c["attribution"]["status"] == "explained"}
    # recommended or not (one case alone may not move its chain × dtype's verdict), every switch found
    # names the verdict it answers, and the rerun applies them all: what is tested is that they remove
    # what they explain
    found = doc["entries"] + doc["not_recommended"]
    assert all(e["answers"] and e["removes_count"] == len(e["removes"]) for e in found)
    removed = {r["set"] for e in found for r in e["removes"]}
    assert removed == explained
    listed = tmp / f"fusion_switches.{DEVICE}.json"
    listed.write_text(json.dumps({**doc, "entries": found, "not_recommended": []}))
    _, applied = run_b(tmp, "applied", f"--fusion-switches={listed}")
    bench = counters(applied)
    remaining = {c["set"] for c in applied["evidence"][0]["counterexamples"]}
    assert not remaining & explained, f"explained counter-examples remain: {sorted(remaining & explained)}"
    assert applied["results"]["context"]["fusion_switches"] == str(listed)
    applied_switches = applied["evidence"][0]["applied_switches"]
    assert {(a["op"], a["switch"]) for a in applied_switches} == {(e["op"], e["switch"]) for e in found}
    for key in ("fused_ms_without_switches", "fused_ms_with_switches", "switches_slowdown", "switches_aa_ratio"):
        assert bench[key] > 0, key


@pytest.mark.parametrize(
    "change, named",
    [
        ({"op": "nosuch9"}, "nosuch9"),
        ({"switch": "fuse=never"}, "fuse=never"),
        ({"chain": "nochain"}, "nochain"),
        ({"dtype": "f8"}, "f8"),
        # a value outside its knob's domain, refused before anything runs rather than in each case
        ({"switch": "tile=0"}, "tile=0: 0 is out of range (at least 1)"),
        ({"switch": "rsqrt_iters=7"}, "rsqrt_iters=7: 7 is out of range (0..3)"),
        # a switch the device cannot realise: cpu has no compile options
        ({"op": "(whole graph)", "switch": "compiler:foo=1"}, "the device cannot realise it"),
    ],
)
def test_a_bad_entry_is_named_with_exit_2_and_nothing_is_written(plain, change, named):
    tmp, _ = plain
    good = {"chain": "matmul_add_layernorm", "dtype": "f16", "op": "matmul5", "switch": "rounding=on"}
    doc = {"schema": "fusebench.fusion_switches/1", "entries": [good, {**good, **change}]}
    listed = tmp / "bad.json"
    listed.write_text(json.dumps(doc))
    proc, run = run_b(tmp, "bad", f"--fusion-switches={listed}", check=False, device="cpu")
    assert proc.returncode == 2, proc.stderr
    assert "entry 1" in proc.stderr and named in proc.stderr, proc.stderr
    assert not run["out"].exists() and not run["evidence"]


def test_a_file_that_is_not_a_switch_list_is_refused(plain):
    tmp, _ = plain
    for text, named in (("{", "not JSON"), ('{"entries": []}', "schema")):
        listed = tmp / "not-a-list.json"
        listed.write_text(text)
        proc, _ = run_b(tmp, "not-a-list", f"--fusion-switches={listed}", check=False, device="cpu")
        assert proc.returncode == 2 and named in proc.stderr, proc.stderr
    proc, _ = run_b(tmp, "missing", f"--fusion-switches={tmp / 'absent.json'}", check=False, device="cpu")
    assert proc.returncode == 2 and "cannot read" in proc.stderr, proc.stderr


def test_another_suite_refuses_a_switch_list(plain):
    other = BINARY.with_name("bench_reduction_order")
    proc = subprocess.run(
        [str(other), "--fusion-switches=x.json", "--benchmark_list_tests"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "applies to task B" in proc.stderr, proc.stderr
