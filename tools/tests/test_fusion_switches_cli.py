"""tools/fusion_switches (python -m tools.fusion_switches RUN_DIR [--out DIR]): the switch file written
from a run's B evidence, both input distributions merged with their costs, and nothing written where
the evidence lists no switch."""

from __future__ import annotations

import json
import pathlib

import pytest

from reports import fusion_switches
from reports.claims.b import switch_recommendation
from reports.results import load_results
from reports.tests.switch_evidence import synthetic_run as make_synthetic_run
from tools import fusion_switches as fusion_switches_tool


@pytest.fixture
def synthetic_run(tmp_path) -> pathlib.Path:
    return make_synthetic_run(tmp_path)


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
    assert fusion_switches.write_switch_files(load_results(synthetic_run), switch_recommendation) == []
    assert not list(synthetic_run.glob("fusion_switches.*"))
