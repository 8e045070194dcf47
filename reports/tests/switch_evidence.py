"""Synthetic task B evidence carrying the attribution keys the suite writes (per counter-example
`attribution`, per case `switches` and `attribution_summary`), for the tests of the switch file and
of the report's attribution parts: a run made of it alone (`synthetic_run`), and the fixture run with
its matmul_add_layernorm f16 evidence given it (`add_attribution`)."""

from __future__ import annotations

import copy
import json
import pathlib

from reports.results import b_distribution

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


MARGIN = {"measure": "cond_max", "units_of_bound": 1, "relative": 0.1, "rule": "fused worse by > 1 unit and > 10 %"}


def per_set_block(sets: int, fused_factor: float) -> dict:
    """A per_set block of conditioned errors: eager's a fixed pattern, fused's `fused_factor` times it."""
    eager = [1.0 + 0.1 * (i % 5) for i in range(sets)]
    fused = [fused_factor * x for x in eager]
    return {
        "schema": "fusebench.B.per_set/1",
        "sets": sets,
        "fused": {"cond_p99": [0.5 * x for x in fused], "cond_max": fused},
        "eager": {"cond_p99": [0.5 * x for x in eager], "cond_max": eager},
    }


def evidence(
    chain: str, dtype: str, dist: str, attributions: dict, switches: list | None, fused_factor: float | None = None
) -> dict:
    """One case's evidence; with `fused_factor`, as the suite writes it since counter-examples are taken
    on the deciding measure: its margin and per-set conditioned errors, fused's that factor of eager's."""
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
    if fused_factor is not None:
        e |= {"counterexample_margin": MARGIN, "per_set": per_set_block(100, fused_factor)}
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
        evidence("matmul_add_layernorm", "f16", "uniform", UNIFORM, case_switches(UNIFORM, 15, 0.020, 0.025), 1.3),
        evidence("matmul_add_layernorm", "f16", "heavy", HEAVY, case_switches(HEAVY, 21, 0.022, 0.024), 1.3),
    ]


TORCH_NA = {
    "status": "n/a",
    "reason": "n/a on torch: per-op switches are the cpu engine's",
    "criterion": "fused set max ULP error <= eager's",
    "switches": [],
}


def synthetic_run(tmp_path: pathlib.Path) -> pathlib.Path:
    """cpu with switches, torch whose attribution is n/a (no switches): only cpu gets a switch file."""
    run = tmp_path / "run-20250101-000000"
    run.mkdir()
    for device in ("cpu", "torch"):
        suite_json(run, device)
    write_evidence(run, "cpu", cpu_evidence())
    write_evidence(run, "torch", [evidence("layernorm", "f16", "uniform", {3: TORCH_NA}, [])])
    return run


def add_attribution(run: pathlib.Path):
    """Gives the fixture run's matmul_add_layernorm f16 evidence the attribution keys above, keeping its
    own sets (the fixture's sets are those of UNIFORM and HEAVY) and its own per-set figures: its
    counter-examples are the ULP error's (the fixture predates the deciding-measure rule), so its
    switches are listed as not recommended."""
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
