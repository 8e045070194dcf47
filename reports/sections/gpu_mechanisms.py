"""The device run's own sections: what ran on the accelerator machine (device/summary.json,
tools/device-run), and Inductor -> Triton's numerical mechanisms on the GPU
(device/inductor_mechanisms.json, tools/gpu/inductor_mechanisms.py): for each case, whether the
compiled result equals eager's, which of the switches tried makes it equal (the mechanism, named by
its switch), and which of the two is nearer fp64. One seeded input set per case, millions of
elements: the counts are exact for that set, not estimates."""

from __future__ import annotations

import json
import pathlib

from reports import claims
from reports.numbers import num
from reports.sections import show

# What a switch that makes compiled equal eager says about the mechanism it turned off.
MECHANISM_OF_SWITCH = {
    "eager_numerics.division_rounding=True": "Triton's division (div.full.f32, within 2 ULP) where eager divides in IEEE (div.rn)",
    "eager_numerics.disable_ftz=True": "subnormals flushed to zero (.ftz in the PTX) where eager keeps them",
    "emulate_precision_casts=True": "fp16/bf16 intermediates kept in fp32 across op boundaries, and FMA contraction (Inductor turns both off with this switch)",
    "triton parse_options enable_fp_fusion=False": "FMA contraction (fma.rn in the PTX) where eager rounds the product",
    "use_fast_math=True": "fast math",
}


def load(results_dir: pathlib.Path) -> dict | None:
    path = results_dir / "device" / "inductor_mechanisms.json"
    return json.loads(path.read_text()) if path.is_file() else None


def load_summary(results_dir: pathlib.Path) -> dict | None:
    path = results_dir / "device" / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _ulp(v: dict) -> tuple[float | None, float | None]:
    u = v.get("ulp_vs_fp64") or {}
    return u.get("max"), u.get("p99")


def case_finding(case: dict) -> dict:
    """The case's default compiled result against eager and fp64, and the switches that make it
    equal eager."""
    variants = [v for v in case.get("variants", []) if v.get("status") == "ok"]
    default = next((v for v in variants if v["name"] == "default"), None)
    eager_max, eager_p99 = _ulp(case.get("eager", {}))
    if default is None:
        return {"case": case["id"], "status": "not run", "reason": case.get("status", "")}
    compiled_max, compiled_p99 = _ulp(default)
    n = (case.get("output") or {}).get("n_elements") or (default.get("ulp_vs_fp64") or {}).get("n")
    removing = [v["name"] for v in variants if v["name"] != "default" and v.get("bit_equal_eager")]
    tried = [v["name"] for v in variants if v["name"] != "default"]
    absent = [v["name"] for v in case.get("variants", []) if v.get("status") == "absent"]
    if default.get("bit_equal_eager"):
        nearer = "equal"
    elif compiled_max is None or eager_max is None:
        nearer = "unknown"
    elif (compiled_max, compiled_p99) == (eager_max, eager_p99):
        nearer = "as near as eager"
    elif compiled_max <= eager_max and compiled_p99 <= eager_p99:
        nearer = "compiled nearer"
    elif compiled_max >= eager_max and compiled_p99 >= eager_p99:
        nearer = "eager nearer"
    else:
        nearer = "mixed"
    return {
        "case": case["id"],
        "status": "ok",
        "elements": n,
        "differ": default.get("n_diff_eager"),
        "eager_ulp": (eager_max, eager_p99),
        "compiled_ulp": (compiled_max, compiled_p99),
        "nearer_fp64": nearer,
        "removed_by": removing,
        "tried": tried,
        "absent": absent,
    }


def mechanism_text(finding: dict) -> str:
    if finding["status"] != "ok":
        return f"not run ({finding['reason']})"
    if finding["nearer_fp64"] == "equal":
        return "compiled = eager, bit-equal"
    if finding["removed_by"]:
        names = "; ".join(MECHANISM_OF_SWITCH.get(s, s) for s in finding["removed_by"])
        return f"{names} (removed by {', '.join(finding['removed_by'])})"
    return "unexplained: no switch tried makes it equal eager" + (
        f" (tried {', '.join(finding['tried'])})" if finding["tried"] else ""
    )


def render(s, data: dict) -> None:
    """The mechanisms section: one table per experiment, its finding first."""
    header = data.get("header", {})
    versions = header.get("versions", {})
    s.paragraph(
        f"Inductor → Triton on {versions.get('gpu_name', 'the GPU')} (torch {versions.get('torch', '?')}, "
        f"Triton {versions.get('triton', '?')}): each case compiled with Inductor's defaults and with each switch "
        "the installed torch has, on one seeded input set (seed "
        f"{header.get('seed', '?')}), against eager ATen on the same GPU and an fp64 reference. A switch that "
        "makes compiled bit-equal to eager names the mechanism behind the difference. "
        "Options this torch lacks are listed as absent, never counted."
    )
    for name, experiment in data.get("experiments", {}).items():
        findings = [case_finding(c) for c in experiment.get("cases", [])]
        rows = []
        for f in findings:
            if f["status"] != "ok":
                rows.append([f["case"], "—", "—", "—", "—", mechanism_text(f)])
                continue
            rows.append(
                [
                    f["case"],
                    f"{num(f['differ'])} of {num(f['elements'])}",
                    f"{num(f['compiled_ulp'][0])} / {num(f['compiled_ulp'][1])}",
                    f"{num(f['eager_ulp'][0])} / {num(f['eager_ulp'][1])}",
                    f["nearer_fp64"],
                    mechanism_text(f),
                ]
            )
        s.paragraph(f"**{experiment.get('title', name)}** ({experiment.get('status', '?')})")
        s.table(
            ["case", "elements ≠ eager", "compiled ULP vs fp64 (max / p99)", "eager ULP (max / p99)",
             "nearer fp64", "mechanism (the switch that makes compiled = eager)"],
            rows,
            wrap=("mechanism (the switch that makes compiled = eager)",),
        )  # fmt: skip


def first_screen_line(data: dict) -> str:
    """One line for the first screen: how many cases differ from eager, how many of them a switch
    explains, and the mechanisms."""
    findings = [case_finding(c) for e in data.get("experiments", {}).values() for c in e.get("cases", [])]
    ran = [f for f in findings if f["status"] == "ok"]
    differ = [f for f in ran if f["nearer_fp64"] != "equal"]
    explained = [f for f in differ if f["removed_by"]]
    worse = [f for f in differ if f["nearer_fp64"] == "eager nearer"]
    switches = sorted({s for f in explained for s in f["removed_by"]})
    unexplained = [f["case"] for f in differ if not f["removed_by"]]
    return (
        f"torch:cuda mechanisms (Inductor → Triton): {len(differ)} of {len(ran)} cases differ from eager "
        f"({len(worse)} farther from fp64 than eager: {', '.join(f['case'] for f in worse) or 'none'}); "
        f"{len(explained)} explained by a switch ({', '.join(switches) or 'none'}); {len(unexplained)} by none "
        f"tried ({', '.join(unexplained)})."
        if differ
        else f"torch:cuda mechanisms: all {len(ran)} cases compiled = eager."
    )


def render_run(s, summary: dict) -> None:
    """What the device run did, step by step, with the reason of each step that did not succeed."""
    machine = summary.get("machine", {})
    versions = machine.get("versions", {})
    s.paragraph(
        f"Machine: {machine.get('nvidia_smi', 'no nvidia-smi')}; {machine.get('cpus', '?')} CPUs; "
        f"python {versions.get('python', '?')}, torch {versions.get('torch', '?')} (CUDA {versions.get('torch_cuda', '?')}), "
        f"triton {versions.get('triton', '?')}, jax {versions.get('jax', '?')}; {machine.get('nvcc', '')}; "
        f"{machine.get('g++', '')}; {machine.get('cmake', '')}. Budget {num(summary.get('budget_s'))} s a call; "
        "steps a later call kept from an earlier one are listed once."
    )
    rows = [
        [st["step"], st["status"], num(st.get("seconds", 0)), st.get("reason", "") or "", st.get("what", "")]
        for st in summary.get("steps", [])
    ]
    s.table(["step", "status", "seconds", "reason", "what it runs"], rows, wrap=("reason", "what it runs"))


def load_alignment(results_dir: pathlib.Path) -> dict | None:
    path = results_dir / "device" / "gpu_alignment.json"
    return json.loads(path.read_text()) if path.is_file() else None


def render_alignment(s, data: dict) -> None:
    """Task E on the GPU (gpu_alignment.py): the compiled run's final held-out loss against the eager
    seeds' prediction interval, the suite's rule, and the plan's literal rule beside it."""
    show(s, claims.e.gpu_verdicts(claims.e.gpu_facts(data)))
    runs = data.get("runs", [])
    model = data.get("model", {})
    s.paragraph(
        f"On {data.get('device', 'the GPU')} in PyTorch alone (suites/training_alignment/gpu_alignment.py, torch "
        f"{data.get('torch', '?')}): the {data.get('config', '?')} config ({model.get('layers', '?')} layers, width "
        f"{model.get('width', '?')}, context {model.get('context', '?')}, batch {data.get('batch', '?')}), "
        f"{data.get('steps', '?')} steps, {data.get('dtype', '?')} autocast, eager seeds {data.get('seeds')} and "
        f"torch.compile (Inductor → Triton) from seeds {data.get('compiled_seeds')}."
    )
    rows = []
    for r in runs:
        if "error" in r:
            rows.append([r["mode"], r["seed"], "—", "—", "—", "—", r["error"][:120]])
            continue
        final = r["eval"][-1]["loss"] if r.get("eval") else None
        rows.append(
            [r["mode"], r["seed"], num(final), num(r.get("median_step_s", 0) * 1e3), num(r.get("tokens_per_s")),
             num(r.get("compile_s")), ""]
        )  # fmt: skip
    for r in data.get("not_run", []):
        rows.append([r["mode"], r["seed"], "—", "—", "—", "—", r["reason"]])
    s.table(
        [
            "mode",
            "seed",
            "final held-out loss",
            "median step (ms)",
            "tokens/s",
            "compile and first step (s)",
            "not run / error",
        ],
        rows,
        wrap=("not run / error",),
    )
