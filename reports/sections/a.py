"""Task A's section: the kernel's identity across cold recompiles, per dtype × threads configuration."""

from __future__ import annotations

from reports.claims import a as claim
from reports.numbers import num, yesno
from reports.results import rows
from reports.sections import flag, show


def render(s, result):
    show(s, claim.verdicts(claim.facts(result)))
    ran = rows(result.data, "A/")
    if not ran:
        return
    table = []
    for f, b in ran:
        table.append(
            [
                f["dtype"],
                f["threads"],
                num(b["runs"]),
                num(b["distinct_hashes"]),
                yesno(b.get("kernel_source_stable", -1) == 1),
                flag(b.get("kernel_text_stable", -1)),
                yesno(b["kernel_hash_stable"] == 1),
                num(b["max_ulp_vs_round1"]),
                claim.CONTROLS.get(int(b.get("negative_control_knob", 1)), "none"),
                flag(b["negative_control_detected"]),
                flag(b.get("negative_control_outputs_differ", -1)),
                num(b["real_time"]),
            ]
        )
    s.paragraph(
        "Graph matmul → add → layernorm → gelu. Round 1 and round 2 (after clearing the kernel cache, in a fresh "
        "process) each run the graph; the negative control, a third process beside round 2, recompiles with one "
        "option flipped that the device realises (FMA contraction; on XLA per-op rounding, "
        "xla_allow_excess_precision) and must change the kernel. A kernel's identity is its code: the generated "
        "source with its compile command (XLA: the optimized HLO without metadata) and its machine code (.text) "
        "where the device has any; the binary's own hash is shown beside them. Time per run is round 1's, "
        "which runs alone."
    )
    s.table(
        [
            "dtype",
            "threads",
            "runs",
            "distinct output MD5s",
            "generated code stable",
            ".text stable",
            "binary stable",
            "max ULP vs round 1",
            "negative control",
            "control caught",
            "control changed outputs",
            "time / run (ms)",
        ],
        table,
    )
