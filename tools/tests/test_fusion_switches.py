"""tools/fusion_switches.py and the report's attribution of B counter-examples, on run directories
made in tmp_path: B evidence carrying the attribution keys the suite writes (per counter-example
`attribution`, per case `switches` and `attribution_summary`).

Run: python -m pytest tools/tests/test_fusion_switches.py (with the repository root on PYTHONPATH)."""

from __future__ import annotations

import copy
import json
import pathlib
import shutil

import pytest

from reports import fusion_switches, report
from reports.results import b_distribution, load_results
from reports.sections import attribution
from tools import fusion_switches as fusion_switches_tool

HERE = pathlib.Path(__file__).resolve().parent
REPORT_RUN = HERE / "fixtures" / "report_run"  # a trimmed quick run with B's per-set dumps
SUITE_DIR = "dumps/{device}/bench_accumulated_error"
DISTRIBUTION_TEXT = {"uniform": "U(-1,1)", "heavy": "N(0,3^2) with 0.1% outliers x20"}


def switch(op: str, token: str, mechanism: str, kind: str = "") -> dict:
    return {"op": op, "kind": kind or op.rstrip("0123456789"), "dtype": "f16", "switch": token, "mechanism": mechanism}


ROUNDING_LN = switch("layernorm7", "rounding=on", "per-op rounding")
ROUNDING_MATMUL = switch("matmul5", "rounding=on", "per-op rounding")
ROUNDING_ADD = switch("add6", "rounding=on", "per-op rounding")
FMA_ADD = switch("add6", "fma=off", "FMA contraction")


def explained(*switches: dict) -> dict:
    return {
        "status": "explained",
        "reason": "",
        "criterion": "fused set max ULP error <= eager's",
        "switches": list(switches),
        "bit_equal_to_eager": True,
        "reruns": 5,
    }


UNEXPLAINED = {
    "status": "unexplained",
    "reason": "no switch removes it: all 4 candidates applied, fused still worse",
    "criterion": "fused set max ULP error <= eager's",
    "switches": [],
    "bit_equal_to_eager": False,
    "reruns": 7,
}

# set -> attribution (None: the search's budget ran out before it, so the key is absent)
UNIFORM = {97: explained(ROUNDING_LN), 54: explained(ROUNDING_LN), 34: explained(ROUNDING_MATMUL, ROUNDING_ADD)}
UNIFORM |= {89: explained(FMA_ADD), 88: UNEXPLAINED}
HEAVY = {95: explained(ROUNDING_LN), 49: explained(ROUNDING_LN), 97: explained(ROUNDING_LN), 76: UNEXPLAINED, 32: None}


def case_switches(attributions: dict[int, dict | None], rounds: int, fused_ms: float, with_switch_ms: float):
    """The case's `switches` key: one per distinct switch, the sets whose minimal set contains it."""
    out: dict[tuple[str, str], dict] = {}
    for set_index, a in attributions.items():
        for sw in (a or {}).get("switches", []):
            entry = out.setdefault(
                (sw["op"], sw["switch"]),
                {**sw, "removes_sets": [], "fused_ms": fused_ms, "fused_with_switch_ms": with_switch_ms},
            )
            entry["removes_sets"].append(set_index)
            entry.update({"eager_ms": 0.06, "rounds": rounds})
    return list(out.values())


def evidence(chain: str, dtype: str, dist: str, attributions: dict, switches: list | None) -> dict:
    counterexamples = []
    for set_index, a in attributions.items():
        c = {"set": set_index, "seed": 9000 + set_index, "element": 3, "first_divergent_op": "layernorm7"}
        c |= {"fused_ulp_max": 3.0, "eager_ulp_max": 1.0}
        if a is not None:
            c["attribution"] = copy.deepcopy(a)
        counterexamples.append(c)
    e = {"chain": chain, "dtype": dtype, "distribution": DISTRIBUTION_TEXT[dist], "counterexamples": counterexamples}
    if switches is not None:
        e["switches"] = switches
    explained_count = sum(1 for a in attributions.values() if a and a["status"] == "explained")
    e["attribution_summary"] = {
        "counterexamples": len(counterexamples),
        "explained": explained_count,
        "unexplained": sum(1 for a in attributions.values() if a and a["status"] == "unexplained"),
        "not_attempted": sum(1 for a in attributions.values() if a is None),
        "budget_note": "attribution budget: 8 counter-examples per case",
    }
    return e


def write_evidence(run: pathlib.Path, device: str, docs: list[dict]):
    folder = run / SUITE_DIR.format(device=device)
    folder.mkdir(parents=True, exist_ok=True)
    for e in docs:
        name = f"B_chain-{e['chain']}_dtype-{e['dtype']}_dist-{b_distribution(e['distribution'])}"
        (folder / f"{name}_device-{device}.json").write_text(json.dumps(e))


def suite_json(run: pathlib.Path, device: str):
    context = {"fusebench_suite": "accumulated_error", "fusebench_device": device}
    (run / f"accumulated_error@{device}.json").write_text(json.dumps({"context": context, "benchmarks": []}))


def cpu_evidence() -> list[dict]:
    return [
        evidence("matmul_add_layernorm", "f16", "uniform", UNIFORM, case_switches(UNIFORM, 15, 0.020, 0.025)),
        evidence("matmul_add_layernorm", "f16", "heavy", HEAVY, case_switches(HEAVY, 21, 0.022, 0.024)),
    ]


TORCH_NA = {
    "status": "n/a",
    "reason": "n/a on torch: per-op switches are the cpu engine's",
    "criterion": "fused set max ULP error <= eager's",
    "switches": [],
}


@pytest.fixture
def synthetic_run(tmp_path) -> pathlib.Path:
    """cpu with switches, torch whose attribution is n/a (no switches): only cpu gets a switch file."""
    run = tmp_path / "run-20250101-000000"
    run.mkdir()
    for device in ("cpu", "torch"):
        suite_json(run, device)
    write_evidence(run, "cpu", cpu_evidence())
    write_evidence(run, "torch", [evidence("layernorm", "f16", "uniform", {3: TORCH_NA}, [])])
    return run


# ---- the switch file
def test_switch_file_merges_both_distributions_with_their_costs(synthetic_run):
    assert fusion_switches_tool.main([str(synthetic_run)]) == 0
    assert sorted(p.name for p in synthetic_run.glob("fusion_switches.*.json")) == ["fusion_switches.cpu.json"]
    assert not list(synthetic_run.glob(".fusion_switches*")), "a temporary file was left behind"
    doc = json.loads((synthetic_run / "fusion_switches.cpu.json").read_text())
    assert fusion_switches.validate(doc) == []
    assert (doc["schema"], doc["device"], doc["run"]) == (fusion_switches.SCHEMA, "cpu", synthetic_run.name)
    by_key = {(e["chain"], e["dtype"], e["op"], e["switch"]): e for e in doc["entries"]}
    assert sorted(by_key) == [
        ("matmul_add_layernorm", "f16", "add6", "fma=off"),
        ("matmul_add_layernorm", "f16", "add6", "rounding=on"),
        ("matmul_add_layernorm", "f16", "layernorm7", "rounding=on"),
        ("matmul_add_layernorm", "f16", "matmul5", "rounding=on"),
    ]
    layernorm = by_key[("matmul_add_layernorm", "f16", "layernorm7", "rounding=on")]
    assert layernorm["removes"] == [
        {"dist": "uniform", "set": 54},
        {"dist": "uniform", "set": 97},
        {"dist": "heavy", "set": 49},
        {"dist": "heavy", "set": 95},
        {"dist": "heavy", "set": 97},
    ]
    assert layernorm["mechanism"] == "per-op rounding" and layernorm["kind"] == "layernorm"
    # heavy has the more rounds (21 against 15): its medians are the cost
    assert layernorm["cost_from"] == "heavy"
    assert layernorm["cost"]["fused_ms"] == 0.022 and layernorm["cost"]["fused_with_switch_ms"] == 0.024
    assert layernorm["cost"]["eager_ms"] == 0.06
    assert layernorm["cost"]["slowdown"] == pytest.approx(0.024 / 0.022)
    fma = by_key[("matmul_add_layernorm", "f16", "add6", "fma=off")]  # found in uniform only
    assert fma["cost_from"] == "uniform" and fma["cost"]["slowdown"] == pytest.approx(0.025 / 0.020)
    assert fma["removes"] == [{"dist": "uniform", "set": 89}]


def test_out_writes_elsewhere_and_no_switches_writes_nothing(synthetic_run, tmp_path):
    out = tmp_path / "elsewhere"
    assert fusion_switches_tool.main([str(synthetic_run), "--out", str(out)]) == 0
    assert [p.name for p in out.iterdir()] == ["fusion_switches.cpu.json"]
    assert not list(synthetic_run.glob("fusion_switches.*"))
    for e in synthetic_run.glob("dumps/cpu/*/B_*.json"):  # older evidence: no switches key at all
        data = json.loads(e.read_text())
        del data["switches"]
        e.write_text(json.dumps(data))
    assert fusion_switches.write_switch_files(load_results(synthetic_run)) == []
    assert not list(synthetic_run.glob("fusion_switches.*"))


def test_validate_names_the_bad_entry(synthetic_run):
    [(_, doc, problems)] = fusion_switches.write_switch_files(load_results(synthetic_run))
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


# ---- the report's parts
def test_first_screen_line_counts_each_outcome(synthetic_run):
    evidence_of = fusion_switches.b_evidence(load_results(synthetic_run))
    line = attribution.first_screen_line("cpu", evidence_of["cpu"])
    # 10 counter-examples: layernorm7 alone in 5; matmul5 + add6 together in 1 (per-op rounding, counted
    # once); FMA contraction at add6 in 1; 2 unexplained; heavy set 32 not reached by the search
    assert line == (
        "cpu: 10 counter-examples: 6 explained by per-op rounding at layernorm7 (matmul_add_layernorm), matmul5 (matmul_add_layernorm), "
        "add6 (matmul_add_layernorm); 1 by FMA contraction at add6 (matmul_add_layernorm); 2 unexplained (in matmul_add_layernorm); "
        "1 not attempted (attribution budget: 8 counter-examples per case)"
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
        "(1 of them also by pattern rewrite alone)"
    )


def test_mechanism_cell_of_each_status():
    assert attribution.mechanism_text({"attribution": explained(ROUNDING_LN)}) == "per-op rounding at layernorm7"
    pair = {"attribution": explained(ROUNDING_MATMUL, ROUNDING_ADD)}
    assert attribution.mechanism_text(pair) == "per-op rounding at matmul5 + add6"
    mixed = {"attribution": explained(ROUNDING_MATMUL, FMA_ADD)}
    assert attribution.mechanism_text(mixed) == "per-op rounding at matmul5 and FMA contraction at add6"
    assert attribution.mechanism_text({"attribution": UNEXPLAINED}) == "unexplained"
    assert attribution.mechanism_text({"attribution": TORCH_NA}).startswith("n/a (on torch: per-op switches")
    assert attribution.mechanism_text({"first_divergent_op": "add2"}) == "—"
    split = switch("matmul5", "split", "kernel split")
    pattern = switch("(whole graph)", "compiler:pattern_matcher=false", "pattern rewrite", kind="graph")
    either = {"attribution": {**explained(split), "also_removed_by": [pattern]}}
    assert attribution.mechanism_text(either) == (
        "kernel split at matmul5; also removed alone by pattern rewrite over the whole graph (compiler:pattern_matcher=false)"
    )
    simd = switch("(whole graph)", "compiler:cpp.simdlen=1", "vectorised code", kind="graph")
    assert attribution.mechanism_text({"attribution": explained(simd)}) == (
        "vectorised code over the whole graph (compiler:cpp.simdlen=1)"
    )


def report_run(tmp_path: pathlib.Path, with_attribution: bool) -> pathlib.Path:
    """The fixture's B suite (real rows and dumps); its matmul_add_layernorm f16 evidence given the
    attribution keys above, keeping its own sets (the fixture's sets are those of UNIFORM and HEAVY)."""
    run = tmp_path / "report"
    run.mkdir()
    shutil.copy(REPORT_RUN / "accumulated_error@cpu.json", run)
    shutil.copytree(REPORT_RUN / "dumps" / "cpu" / "bench_accumulated_error", run / SUITE_DIR.format(device="cpu"))
    if with_attribution:
        for made in cpu_evidence():
            dist = b_distribution(made["distribution"])
            [path] = run.glob(f"{SUITE_DIR.format(device='cpu')}/B_chain-matmul_add_layernorm_dtype-f16_dist-{dist}_*")
            e = json.loads(path.read_text())
            attributions = {c["set"]: c.get("attribution") for c in made["counterexamples"]}
            assert sorted(attributions) == sorted(c["set"] for c in e["counterexamples"]), "fixture sets changed"
            for c in e["counterexamples"]:
                if attributions[c["set"]] is not None:
                    c["attribution"] = attributions[c["set"]]
            e |= {"switches": made["switches"], "attribution_summary": made["attribution_summary"]}
            path.write_text(json.dumps(e))
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
        "2 unexplained (in matmul_add_layernorm); 31 not attempted\n"
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
