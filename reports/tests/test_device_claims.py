"""Tests of the device-dependent verdicts (reports/claims/) and of the report's
cells for a framework device, on synthetic suite JSONs shaped as the suites write them:
- torch eager's two C1 lowerings differ while the compiled ones do not (Inductor folds the
  broadcast): the cell reads ABSENT and says both halves;
- a device that realises no knob of a claim (C2, C3): N/A with the reason, never SUPPORTED;
- no verdict over zero cases;
- task A on Inductor: binaries that differ only in their debug paths are the same kernel."""

from __future__ import annotations

import json
import pathlib

from reports import report
from reports.claims import a, c1, c2, c3, words
from reports.claims.verdict import Outcome
from reports.results import na_reasons


def c1_rows(device: str, eager_share: float, fused_share: float) -> list[dict]:
    """C1 benchmarks: f16 and bf16 x scalars 0.7, 0.1 (inexact) and 0.5 (exact), both executors and
    lowerings; the share of elements at ULP 0 between the lowerings as given (exact: 1)."""
    rows = []
    for dtype in ("f16", "bf16"):
        for scalar in ("0.7", "0.1", "0.5"):
            for exec_ in ("eager", "fused"):
                share = 1.0 if scalar == "0.5" else (eager_share if exec_ == "eager" else fused_share)
                for lowering in ("immediate", "broadcast"):
                    rows.append(
                        {
                            "name": f"C1/dtype:{dtype}/scalar:{scalar}/shape:1024x1024/exec:{exec_}/lowering:{lowering}"
                            f"/device:{device}/manual_time",
                            "run_name": f"C1/dtype:{dtype}/scalar:{scalar}/shape:1024x1024/exec:{exec_}/lowering:{lowering}"
                            f"/device:{device}",
                            "run_type": "iteration",
                            "real_time": 10.0,
                            "cpu_time": 10.0,
                            "time_unit": "us",
                            "frac_ulp0": share,
                            "frac_ulp1": 1 - share,
                            "frac_ulp_ge2": 0.0,
                            "ulp_max_between": 0 if share == 1 else 1,
                            "ulp_max": 1.0,
                            "ulp_p99": 1.0,
                            "instructions_differ": 0 if exec_ == "fused" else -1,
                            "sources_differ": 0 if exec_ == "fused" else -1,
                            # the scalar as an input tensor differs from the broadcast lowering: a folded constant
                            "control_input_tensor_vs_broadcast_frac_ulp0": 0.6 if scalar != "0.5" else 1.0,
                        }
                    )
    return rows


def na_row(name: str, device: str, reason: str) -> dict:
    return {
        "name": name,
        "run_name": name,
        "run_type": "iteration",
        "error_occurred": True,
        "error_message": f"n/a on {device}: {reason}",
        "real_time": 0,
        "cpu_time": 0,
        "time_unit": "us",
    }


def suite_json(path: pathlib.Path, suite: str, device: str, benchmarks: list[dict]):
    path.write_text(
        json.dumps(
            {
                "context": {"fusebench_suite": suite, "fusebench_device": device, "fusebench_profile": "quick"},
                "benchmarks": benchmarks,
            }
        )
    )


def test_c1_halves():
    rows = c1_rows("torch", 0.6, 1.0)
    fused = {}
    eager = {}
    for b in rows:
        f = dict(p.split(":", 1) for p in b["run_name"].split("/")[1:])
        (fused if f["exec"] == "fused" else eager)[(f["dtype"], f["scalar"], f["shape"], f["lowering"])] = b
    v = words(c1.decide(c1.Facts(True, fused, eager)))
    verdict, figure, sentence = v.outcome, v.key_figure, v.sentence()
    assert verdict is Outcome.ABSENT, f"C1: eager differs, compiled identical: {verdict}, expected absent"
    assert "eager 4/4" in figure and "compiled 0/4" in figure, f"C1: the key figure names both halves: {figure!r}"
    assert "eager: the two lowerings differ in 4/4" in sentence and "compiled: they differ in 0/4" in sentence, (
        f"C1: the sentence names both halves: {sentence!r}"
    )
    assert "folded" in sentence, f"C1: the folded constant is named: {sentence!r}"
    v = words(c1.decide(c1.Facts(True, {k: {**b, "frac_ulp0": 0.6} for k, b in fused.items()}, eager)))
    verdict, figure = v.outcome, v.key_figure
    assert verdict is Outcome.SUPPORTED, f"C1: compiled lowerings that differ everywhere: {verdict}, expected supported"
    # aot_eager: no fusion, so the compiled figures are eager's
    assert figure.startswith("fused = eager"), f"C1: a compiled path identical to eager says so: {figure!r}"
    exact_only = {k: b for k, b in fused.items() if k[1] == "0.5"}
    verdict = c1.decide(c1.Facts(True, exact_only, eager)).outcome
    assert verdict is Outcome.NA, f"C1: zero cases gives {verdict}, expected n/a"


def test_na_with_reason():
    reason = "reduce_tile: XLA:CPU chooses its reduction loops itself; no tile option"
    refused = na_reasons([na_row("C2/out:f16/acc:f32/shape:1x16384/tile:256/device:xla", "xla", reason)])
    assert refused == [reason], f"na_reasons: {refused}"
    v = words(c2.decide(c2.Facts(True, (), (), tuple(refused), {}, (), (), {})))
    verdict, sentence = v.outcome, v.sentence()
    assert verdict is Outcome.NA and reason in sentence, f"C2 with no knob: {verdict} / {sentence!r}"
    v = words(c3.decide(c3.Facts(True, False, (), (), (), {}, ("rsqrt: XLA has no Newton-Raphson rsqrt option",))))
    verdict, sentence = v.outcome, v.sentence()
    assert verdict is Outcome.NA and "Newton" in sentence, f"C3 with no row: {verdict} / {sentence!r}"
    verdict = a.decide(a.Facts((), ("threads=1: XLA:CPU has no thread-count option",))).outcome
    assert verdict is Outcome.NA, f"A with no configuration: {verdict}"


def test_a_debug_paths():
    row = {
        "runs": 200,
        "distinct_hashes": 1,
        "kernel_hash_stable": 0,
        "kernel_source_stable": 1,
        "kernel_text_stable": 1,
        "artifact_cache_dir_mentions": 3,
        "max_ulp_vs_round1": 0,
        "negative_control_knob": 1,
        "negative_control_detected": 1,
    }
    v = words(a.decide(a.Facts((("f16, 1 thread", row),))))
    verdict, sentence = v.outcome, v.sentence()
    assert verdict is Outcome.SUPPORTED, f"A: .so differing only in debug paths: {verdict}, expected supported"
    assert "3 times" in sentence and ".text identical" in sentence, f"A: debug paths reported: {sentence!r}"
    verdict = a.decide(a.Facts((("f16, 1 thread", {**row, "kernel_text_stable": 0}),))).outcome
    assert verdict is Outcome.CONTRADICTED, f"A: machine code that changed: {verdict}, expected contradicted"
    verdict = a.decide(a.Facts((("f16, 1 thread", {**row, "negative_control_detected": 0}),))).outcome
    assert verdict is Outcome.INCONCLUSIVE, f"A: a control that changed nothing: {verdict}, expected inconclusive"
    v = words(
        a.decide(
            a.Facts(
                (("f16, 2 threads", {**row, "negative_control_knob": -1, "negative_control_detected": -1}),),
            )
        )
    )
    figure, sentence = v.key_figure, v.sentence()
    assert "no negative control" in sentence and "no control" in figure, (
        f"A without a control says so: {figure!r} {sentence!r}"
    )


def test_a_names_the_configurations_its_profile_left_out():
    row = {
        "runs": 200,
        "distinct_hashes": 1,
        "kernel_hash_stable": 1,
        "kernel_source_stable": 1,
        "kernel_text_stable": 1,
        "max_ulp_vs_round1": 0,
        "negative_control_knob": 1,
        "negative_control_detected": 1,
    }
    v = words(a.decide(a.Facts((("f16, 2 threads", row),), (), ("f16, 1 thread", "bf16, 1 thread"))))
    sentence = v.sentence()
    assert v.outcome is Outcome.SUPPORTED, f"A over the configuration that ran: {v.outcome}"
    assert "not run in this profile: f16, 1 thread, bf16, 1 thread" in sentence, (
        f"A's condition names what the profile left out: {sentence!r}"
    )


def test_report_cells(tmp_path):
    """The whole report on a torch results directory: C1's cell ABSENT with both halves, C2 and C3
    N/A with their reasons."""
    out = tmp_path
    suite_json(out / "scalar_lowering@torch.json", "scalar_lowering", "torch", c1_rows("torch", 0.6, 1.0))
    suite_json(
        out / "reduction_order@torch.json",
        "reduction_order",
        "torch",
        [
            na_row(
                "C2/out:f16/acc:f32/shape:1x16384/tile:256/device:torch",
                "torch",
                "reduce_tile: Inductor has no reduction tile on CPU",
            ),
            na_row("C2/knob:threads/out:f16/shape:1x1048576/device:torch", "torch", "threads: not settable (test)"),
        ],
    )
    suite_json(
        out / "approximations@torch.json",
        "approximations",
        "torch",
        [
            na_row(
                "C3/op:rsqrt/dtype:f16/mode:newton-hw/iters:1/shape:256x1024/device:torch",
                "torch",
                "rsqrt: PyTorch and Inductor have no Newton-Raphson rsqrt (Inductor emits 1/sqrt)",
            )
        ],
    )
    md, _ = report.render(out)
    text = md.read_text()
    c1 = next((line for line in text.splitlines() if line.startswith("| [C1]")), "")
    assert "**ABSENT** eager 4/4, compiled 0/4 differ" in c1, f"report: C1 cell: {c1!r}"
    c2 = next((line for line in text.splitlines() if line.startswith("| [C2]")), "")
    assert "**N/A**" in c2 and "SUPPORTED" not in c2, f"report: C2 cell: {c2!r}"
    c3 = next((line for line in text.splitlines() if line.startswith("| [C3]")), "")
    assert "**N/A**" in c3 and "SUPPORTED" not in c3, f"report: C3 cell: {c3!r}"
    assert "Reason: reduce_tile: Inductor has no reduction tile on CPU" in text, "report: C2's reason in its section"


def test_c1_eager_rows_only(tmp_path):
    """A shard of a sharded run may hold C1's eager rows alone: the report is written, C1 reads N/A."""
    out = tmp_path
    eager = [r for r in c1_rows("cpu", 0.6, 0.6) if "exec:eager" in r["name"]]
    suite_json(out / "scalar_lowering@cpu.json", "scalar_lowering", "cpu", eager)
    md, _ = report.render(out)
    c1 = next((line for line in md.read_text().splitlines() if line.startswith("| [C1]")), "")
    assert "**N/A**" in c1, f"report of eager-only C1 rows: C1 cell: {c1!r}"


def d_row(subgraph: str, dtype: str, mismatches: int) -> dict:
    name = f"D/subgraph:{subgraph}/dtype:{dtype}/shape:4x256x512/device:torch"
    return {
        "name": name,
        "run_name": name,
        "run_type": "iteration",
        "real_time": 10.0,
        "cpu_time": 10.0,
        "time_unit": "us",
        "bit_equal": 0 if mismatches else 1,
        "mismatches": mismatches,
        "kernels": 1,
        "promoted": 0,
    }


def test_d_mismatch_mechanism(tmp_path):
    """A D mismatch whose evidence carries its attribution: the verdict's facts, the counter-example
    table and the first screen name the mechanism; one without attribution is named too, as such."""
    simd = {"op": "(whole graph)", "kind": "graph", "dtype": "f16", "switch": "compiler:cpp.simdlen=1"}
    attributed = {
        "subgraph": "transpose_concat",
        "dtype": "f16",
        "mismatches": 1000,
        "attribution": {
            "status": "explained",
            "reason": "",
            "criterion": "bit-equal to eager",
            "switches": [{**simd, "mechanism": "vectorised code"}],
            "also_removed_by": [],
        },
    }
    out = tmp_path
    rows = [d_row("transpose_concat", "f16", 1000), d_row("transpose", "f16", 0)]
    suite_json(out / "data_movement@torch.json", "data_movement", "torch", rows)
    dumps = out / "dumps" / "torch" / "bench_data_movement"
    dumps.mkdir(parents=True)
    (dumps / "D_subgraph-transpose_concat_dtype-f16_shape-4x256x512_device-torch.json").write_text(
        json.dumps(attributed)
    )
    md, _ = report.render(out)
    text = md.read_text()
    mechanism = "vectorised code over the whole graph (compiler:cpp.simdlen=1)"
    assert f"(mechanism: {mechanism})" in text, "report: D verdict's facts name the mismatch's mechanism"
    assert f"| {mechanism} |" in text, "report: D's counter-example table has the mechanism"
    assert (
        "torch, task D: 1 counter-example: 1 explained by vectorised code over the whole graph of transpose_concat"
        in text
    ), "report: first screen's D line"
