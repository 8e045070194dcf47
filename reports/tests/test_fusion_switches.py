"""The switch file's format (reports/fusion_switches.py) and the report's attribution of B
counter-examples, on run directories made in tmp_path from switch_evidence's synthetic evidence."""

from __future__ import annotations

import copy
import pathlib
import shutil

import pytest

from reports import fusion_switches, report
from reports.claims.b import switch_recommendation
from reports.results import load_results
from reports.sections import attribution
from reports.tests.switch_evidence import (
    FMA_ADD,
    ROUNDING_ADD,
    ROUNDING_LN,
    ROUNDING_MATMUL,
    SUITE_DIR,
    TORCH_NA,
    UNEXPLAINED,
    add_attribution,
    cpu_evidence,
    explained,
    per_set_block,
    switch,
)
from reports.tests.switch_evidence import synthetic_run as make_synthetic_run

HERE = pathlib.Path(__file__).resolve().parent
REPORT_RUN = HERE / "fixtures" / "report_run"  # a trimmed quick run with B's per-set dumps


@pytest.fixture
def synthetic_run(tmp_path) -> pathlib.Path:
    return make_synthetic_run(tmp_path)


# ---- the switch file's format
def test_validate_names_the_bad_entry(synthetic_run):
    [(_, doc, problems)] = fusion_switches.write_switch_files(load_results(synthetic_run), switch_recommendation)
    assert problems == []
    bad = copy.deepcopy(doc)
    bad["entries"][1]["switch"] = "rounding=on tile=0 warp=32"
    del bad["entries"][2]["cost"]
    bad["entries"][3]["mechanism"] = "cosmic rays"
    problems = fusion_switches.validate(bad)
    op1, op2, op3 = (bad["entries"][i]["op"] for i in (1, 2, 3))
    assert any(p.startswith(f"entries[1] (op {op1!r}") and "'warp=32'" in p and "unknown" in p for p in problems)
    assert any(p.startswith("entries[1]") and "'tile=0'" in p for p in problems)
    assert any(p.startswith(f"entries[2] (op {op2!r}") and "missing cost" in p for p in problems)
    assert any(p.startswith(f"entries[3] (op {op3!r}") and "unknown mechanism" in p for p in problems)
    assert not any(p.startswith("entries[0]") for p in problems), problems
    assert fusion_switches.validate({**doc, "schema": "fusebench.fusion_switches/0"})[0].startswith("schema:")
    every_token = (
        "rounding=on split fma=off scalar=broadcast tile=64 acc=f32 rsqrt=newton-hw rsqrt_iters=2 div=ieee "
        "compiler:max_fusion_size=1"
    )
    good = copy.deepcopy(doc)
    good["entries"][0]["switch"] = every_token + " div_iters=0"
    assert fusion_switches.validate(good) == []


def test_only_switches_answering_a_verdict_that_is_not_supported_are_recommended():
    """The synthetic cpu case (fused's conditioned error 1.3× eager's in every set) is CONTRADICTED, so its
    switches are recommended, each naming the verdict it answers; a case with the same counter-examples
    but fused = eager in its per-set figures is SUPPORTED, and evidence from before the deciding-measure
    rule has ULP counter-examples: both are listed as not recommended, with why."""
    contradicted = cpu_evidence()
    doc = fusion_switches.switch_document("cpu", "run", contradicted, switch_recommendation)
    assert len(doc["entries"]) == 4 and doc["not_recommended"] == []
    for entry in doc["entries"]:
        assert entry["answers"]["outcome"] == "CONTRADICTED" and entry["answers"]["measure"] == "conditioned"
        assert entry["removes_count"] == len(entry["removes"]) > 0
    supported = copy.deepcopy(contradicted)
    for e in supported:
        e["per_set"] = per_set_block(100, 1.0)
    doc = fusion_switches.switch_document("cpu", "run", supported, switch_recommendation)
    assert doc["entries"] == [] and len(doc["not_recommended"]) == 4
    assert all("SUPPORTED" in e["why_not_recommended"] for e in doc["not_recommended"])
    assert fusion_switches.validate(doc) == []
    older = copy.deepcopy(contradicted)
    for e in older:
        del e["counterexample_margin"]
    doc = fusion_switches.switch_document("cpu", "run", older, switch_recommendation)
    assert doc["entries"] == [] and all("ULP error" in e["why_not_recommended"] for e in doc["not_recommended"])


# ---- the report's parts
def test_first_screen_line_counts_each_outcome(synthetic_run):
    evidence_of = fusion_switches.b_evidence(load_results(synthetic_run))
    line = attribution.first_screen_line("cpu", evidence_of["cpu"])
    # 10 counter-examples: layernorm7 alone in 5; matmul5 + add6 together in 1 (per-op rounding, counted
    # once); FMA contraction at add6 in 1; 2 unexplained; heavy set 32 not reached by the search
    assert line == (
        "cpu: 10 counter-examples: 6 explained by per-op rounding at layernorm7 (matmul_add_layernorm), matmul5 (matmul_add_layernorm), "
        "add6 (matmul_add_layernorm); 1 by FMA contraction at add6 (matmul_add_layernorm); 2 unexplained (in matmul_add_layernorm); "
        "1 not attempted (attribution budget: 8 counter-examples per case); 7 of 10 explained at an op"
    )
    torch = attribution.first_screen_line("torch", evidence_of["torch"])
    assert torch == "torch: 1 counter-example: 1 n/a (in layernorm: per-op switches are the cpu engine's)"
    assert "explained" not in torch
    none = [{"chain": "softmax", "dtype": "f16", "counterexamples": [], "attribution_summary": {"counterexamples": 0}}]
    assert attribution.first_screen_line("cpu", none) == "cpu: 0 counter-examples"
    assert attribution.first_screen_line("cpu", [{"chain": "softmax", "counterexamples": []}]) is None
    split = switch("matmul5", "split", "kernel split")
    pattern = switch("(whole graph)", "compiler:pattern_matcher=false", "pattern rewrite", kind="graph")
    both = {"attribution": {**explained(split), "also_removed_by": [pattern]}}
    only_split = {"attribution": explained(split)}
    line = attribution.first_screen_line(
        "torch", [{"chain": "matmul_add_layernorm", "counterexamples": [both, only_split], "attribution_summary": {}}]
    )
    assert line == (
        "torch: 2 counter-examples: 2 explained by kernel split at matmul5 (matmul_add_layernorm) "
        "(1 of them also by pattern rewrite alone); 2 of 2 explained at an op"
    )
    simd = switch("(whole graph)", "compiler:cpp.simdlen=1", "vectorised code", kind="graph")
    graph_wide = {"attribution": explained(simd)}
    line = attribution.first_screen_line("torch", [{"chain": "mul_add_gelu_mul", "counterexamples": [graph_wide]}])
    assert line == (
        "torch: 1 counter-example: 1 explained by vectorised code over the whole graph of mul_add_gelu_mul "
        "(not localised); 0 of 1 explained at an op"
    )
    # not localised, but the suite's experiment at the first divergent op names the mechanism there
    found_there = {"op": "gelu6", "mechanism": "function evaluation: the kernel's formula at gelu6", "confirmed": True}
    named = {"attribution": {**explained(simd), "localised": False, "candidate_mechanism": found_there}}
    line = attribution.first_screen_line("torch", [{"chain": "mul_add_gelu_mul", "counterexamples": [named]}])
    assert line == (
        "torch: 1 counter-example: 1 explained by vectorised code over the whole graph of mul_add_gelu_mul "
        "(not localised; candidate: function evaluation at gelu6, confirmed in 1 of 1); 0 of 1 explained at an op, "
        "1 more named at an op by a confirmed candidate"
    )
    assert fusion_switches.mechanism_text(named) == (
        "vectorised code over the whole graph (compiler:cpp.simdlen=1) (not localised; candidate: function "
        "evaluation at gelu6, confirmed)"
    )
    unexplained = {"attribution": {**UNEXPLAINED, "candidate_mechanism": {**found_there, "confirmed": False}}}
    assert fusion_switches.mechanism_text(unexplained) == (
        "unexplained (candidate: function evaluation at gelu6, not confirmed)"
    )
    beside = {"chain": "layernorm", "counterexamples": [], "attribution_summary": {}}
    beside |= {"at_cancellation": {"count": 251}, "shared_errors": {"count": 12}}
    line = attribution.first_screen_line("cpu", [{"chain": "softmax", "counterexamples": [graph_wide]}, beside])
    assert line.endswith(
        " — not counter-examples: 251 sets worse fused in ULP only, at cancellation (neither path accurate); "
        "12 sets where both paths miss fp64 far beyond the bound (the kernels', not fusion's)"
    )
    nothing_beside = {**beside, "at_cancellation": {"count": 0}, "shared_errors": {"count": 0}}
    clean = {**nothing_beside, "per_set": {"sets": 100}}
    assert attribution.first_screen_line("torch", [clean]) == "torch: 0 counter-examples in 100 input sets"


def test_mechanism_cell_of_each_status():
    assert fusion_switches.mechanism_text({"attribution": explained(ROUNDING_LN)}) == "per-op rounding at layernorm7"
    pair = {"attribution": explained(ROUNDING_MATMUL, ROUNDING_ADD)}
    assert fusion_switches.mechanism_text(pair) == "per-op rounding at matmul5 + add6"
    mixed = {"attribution": explained(ROUNDING_MATMUL, FMA_ADD)}
    assert fusion_switches.mechanism_text(mixed) == "per-op rounding at matmul5 and FMA contraction at add6"
    assert fusion_switches.mechanism_text({"attribution": UNEXPLAINED}) == "unexplained"
    assert fusion_switches.mechanism_text({"attribution": TORCH_NA}).startswith("n/a (on torch: per-op switches")
    assert fusion_switches.mechanism_text({"first_divergent_op": "add2"}) == "—"
    split = switch("matmul5", "split", "kernel split")
    pattern = switch("(whole graph)", "compiler:pattern_matcher=false", "pattern rewrite", kind="graph")
    either = {"attribution": {**explained(split), "also_removed_by": [pattern]}}
    assert fusion_switches.mechanism_text(either) == (
        "kernel split at matmul5; also removed alone by pattern rewrite over the whole graph (compiler:pattern_matcher=false)"
    )
    simd = switch("(whole graph)", "compiler:cpp.simdlen=1", "vectorised code", kind="graph")
    assert fusion_switches.mechanism_text({"attribution": explained(simd)}) == (
        "vectorised code over the whole graph (compiler:cpp.simdlen=1)"
    )


def report_run(tmp_path: pathlib.Path, with_attribution: bool) -> pathlib.Path:
    """The fixture's B suite (real rows and dumps), with the attribution keys of switch_evidence where asked."""
    run = tmp_path / "report"
    run.mkdir()
    shutil.copy(REPORT_RUN / "accumulated_error@cpu.json", run)
    shutil.copytree(REPORT_RUN / "dumps" / "cpu" / "bench_accumulated_error", run / SUITE_DIR.format(device="cpu"))
    if with_attribution:
        add_attribution(run)
    return run


def test_report_shows_the_mechanism_column_section_and_first_screen_line(tmp_path):
    run = report_run(tmp_path, with_attribution=True)
    assert report.main([str(run)]) == 0
    md = (run / "report.md").read_text()
    html = (run / "report.html").read_text()
    assert (run / "fusion_switches.cpu.json").exists()
    # the switch file the report wrote is not read back as a suite's results
    assert report.main([str(run)]) == 0
    assert (run / "report.md").read_text() == md
    first_screen = md.split("Contents:", 1)[0]
    # the fixture's other cases carry no attribution: their 31 counter-examples were not attempted, and the
    # budget note of the two attributed cases is not said of them
    assert (
        "\ncpu: 40 counter-examples: 6 explained by per-op rounding at layernorm7 (matmul_add_layernorm), "
        "matmul5 (matmul_add_layernorm), add6 (matmul_add_layernorm); 1 by FMA contraction at add6 (matmul_add_layernorm); "
        "2 unexplained (in matmul_add_layernorm); 31 not attempted; 7 of 40 explained at an op\n"
    ) in first_screen
    assert first_screen.count("counter-examples:") == 1  # one line per device
    assert "| mechanism |" in md.split("## B —", 1)[1]
    assert "| per-op rounding at layernorm7 |" in md and "| per-op rounding at matmul5 + add6 |" in md
    assert "| unexplained |" in md
    section = md.split(f"## {attribution.TITLE}", 1)[1]
    assert section.index("per-op rounding") < section.index("FMA contraction")  # the counts' columns
    assert "[fusion_switches.cpu.json](fusion_switches.cpu.json)" in section
    assert "href='fusion_switches.cpu.json'" in html and "href='#task-attribution'" in html
    # the switch table: layernorm7's row with its merged count and cost from heavy (1.09×)
    row = next(l for l in section.splitlines() if l.startswith("| matmul_add_layernorm | layernorm7 |"))
    assert "| rounding=on | 5 | 0.0220 | 0.0240 | 0.0600 | 1.09 |" in row
    # the fixture's counter-examples are the ULP error's: nothing is recommended, and the table says why
    assert "No switch is recommended on cpu" in section and row.rstrip(" |").endswith(
        "at cancellation where neither path is accurate"
    )
    # sections after B keep their order: the attribution right after B
    headings = [l for l in md.splitlines() if l.startswith("## ")]
    assert (
        headings[headings.index(next(h for h in headings if h.startswith("## B —"))) + 1] == f"## {attribution.TITLE}"
    )


def test_report_without_attribution_has_no_section_and_dashes(tmp_path):
    run = report_run(tmp_path, with_attribution=False)
    assert report.main([str(run)]) == 0
    md = (run / "report.md").read_text()
    assert attribution.TITLE not in md and "counter-examples:" not in md.split("Contents:", 1)[0]
    assert "| mechanism |" in md and "| — |" in md
    assert not list(run.glob("fusion_switches.*"))


def test_b_section_takes_counterexamples_on_the_deciding_measure_and_sets_the_rest_beside(tmp_path):
    """Evidence that states its margin: the counter-example tables rank by the conditioned error in
    units of the bound, and the sets at cancellation, within the margin and with shared errors get
    their own tables, the shared ones with where they arise and the bound checked there."""
    from reports.document import Document
    from reports.sections import b as b_section

    cases = cpu_evidence()
    for e in cases:
        for c in e["counterexamples"]:
            c |= {"fused_cond_max": 6.0 + c["set"] / 100, "eager_cond_max": 2.0}
    cases[0] |= {"at_cancellation": {"about": "…", "count": 251, "examples": []}}
    cases[0] |= {"ulp_within_margin": {"about": "…", "count": 4, "examples": []}}
    finding = "the bound holds: gelu's own condition at x = -9.1 is 3.2e4"
    shared = {
        "set": 7,
        "eager_cond_max": 5.2e5,
        "fused_cond_max": 5.1e5,
        "eager_ulp_max": 2**24,
        "fused_ulp_max": 2**24,
    }
    shared |= {"arises_at": "gelu3", "bound_check": {"op": "gelu3", "finding": finding}}
    cases[1] |= {"shared_errors": {"about": "…", "threshold": 100, "count": 3, "examples": [shared]}}
    s = Document(tmp_path).section("B", "B")
    b_section._b_counterexamples(s, cases)
    md = "".join(line for lines, _ in s.body for line in lines)
    assert "Counter-examples: 10 input sets where fused worse by > 1 unit and > 10 %" in md
    assert "| fused − eager (units of bound) |" in md
    assert "| matmul_add_layernorm | f16 | uniform | 251 | 4 | — |" in md
    assert "| matmul_add_layernorm | f16 | heavy | — | — | 3 |" in md
    assert "exceeds the threshold 100 (shared errors" in md
    assert f"| 7 | 520,000 | 510,000 | 16,777,216 | 16,777,216 | gelu3 | {finding} |" in md
