"""Task C1's section: the two lowerings of tensor × scalar, their ULP distance per dtype × scalar × shape,
the fused kernels' instruction counts, and their SASS on a GPU architecture."""

from __future__ import annotations

from reports.claims import c1 as claim
from reports.numbers import num, pct, yesno
from reports.results import evidence as evidence_files
from reports.sections import DTYPES, ENGINE_DEVICES, sass_rows, show
from reports.sections.plots import close, figure


def render(s, result):
    run = result.data
    facts = claim.facts(result)
    show(s, claim.verdicts(facts))
    if facts.nothing is not None:
        return
    fused, eager = facts.fused, facts.eager
    keys = ("frac_ulp0", "frac_ulp1", "frac_ulp_ge2", "ulp_max_between", "ulp_p99", "ulp_max")
    same = [k for k in fused if k in eager and all(fused[k].get(c) == eager[k].get(c) for c in keys)]
    dtypes = [d for d in DTYPES if any(k[0] == d for k in fused)]
    scalars = sorted({k[1] for k in fused}, key=float)
    shapes = sorted({k[2] for k in fused}, key=lambda x: [int(v) for v in x.split("x")])
    if shapes:  # a shard may hold only eager rows: no fused figure to plot
        _c1_plot(s, fused, dtypes, scalars, shapes[-1])
    if same:
        s.paragraph(
            f"Eager and fused agree: {len(same)}/{len(fused)} fused rows have the same shares and ULP figures as "
            "the eager row of the same configuration, so each configuration is shown once"
            + ("." if len(same) == len(fused) else "; the others are marked.")
        )
    header = ["dtype", "shape"] + [f"×{sc}" for sc in scalars]
    grid = []
    for d in dtypes:
        for shape in shapes:
            cells = []
            for sc in scalars:
                b = fused.get((d, sc, shape, "immediate"))
                cells.append("—" if b is None else pct(1 - b["frac_ulp0"]))
            grid.append([d, shape] + cells)
    s.table(
        header,
        grid,
        caption="Share of elements whose two lowerings are 1 ULP or more apart (dtype × scalar; "
        "0.5 is the exact-scalar control):",
    )
    detail = []
    for d in dtypes:
        for sc in scalars:
            for shape in shapes:
                b, o = fused.get((d, sc, shape, "immediate")), fused.get((d, sc, shape, "broadcast"))
                if b is None:
                    continue
                detail.append(
                    [
                        d,
                        sc,
                        shape,
                        pct(b["frac_ulp0"]),
                        pct(b["frac_ulp1"]),
                        pct(b["frac_ulp_ge2"]),
                        num(b["ulp_max_between"]),
                        num(b["ulp_p99"]),
                        num(b["ulp_max"]),
                        num(o["ulp_p99"]) if o else "—",
                        num(o["ulp_max"]) if o else "—",
                        yesno(b["instructions_differ"] == 1) if b["instructions_differ"] >= 0 else "n/a",
                        "yes" if (d, sc, shape, "immediate") in same else "no",
                    ]
                )
    s.table(
        [
            "dtype",
            "scalar",
            "shape",
            "ULP = 0",
            "ULP = 1",
            "ULP ≥ 2",
            "max ULP apart",
            "immediate P99 (ULP)",
            "immediate max (ULP)",
            "broadcast P99 (ULP)",
            "broadcast max (ULP)",
            "instructions differ",
            "eager identical",
        ],
        detail,
        summary=f"All {len(detail)} configurations (errors against fp64)",
    )
    _c1_evidence(s, result)
    _c1_sass(s, run)


def _c1_sass(s, run):
    rows = sass_rows(run, "SASS/C1/")
    if not rows:
        return
    table = [
        [
            f["dtype"],
            f["arch"],
            num(b["immediate_fmul_constant_operand"]),
            num(b["broadcast_fmul_constant_operand"]),
            num(b["immediate_ldg"]),
            num(b["broadcast_ldg"]),
            num(b["immediate_instructions"]),
            num(b["broadcast_instructions"]),
            yesno(b["sass_differ"] == 1),
        ]
        for f, b in rows
    ]
    differ = sum(b["sass_differ"] == 1 for _, b in rows)
    s.paragraph(
        f"On a GPU (CUDA device, SASS compiled by NVRTC and disassembled without a GPU): the two lowerings of "
        f"×0.7 give different machine code in {differ}/{len(rows)} dtype × architecture cases; the immediate "
        "lowering multiplies by an immediate operand, the broadcast lowering loads the scalar tensor instead "
        "(more LDG)."
    )
    s.table(
        [
            "dtype",
            "arch",
            "FMUL with constant operand (immediate)",
            "FMUL with constant operand (broadcast)",
            "LDG (immediate)",
            "LDG (broadcast)",
            "instructions (immediate)",
            "instructions (broadcast)",
            "SASS differs",
        ],
        table,
        summary=f"SASS of the two lowerings, {len(table)} dtype × architecture cases",
    )


def _c1_evidence(s, result):
    if result.device not in ENGINE_DEVICES:
        return  # a framework's kernels: the verdict quotes their generated code, no engine trace exists
    files = evidence_files(result, claim.EVIDENCE)
    if not files:
        s.paragraph("No C1 evidence files in the dump directory (tools/run writes them).")
        return
    evidence = files[0][1]
    a, b = evidence["immediate"], evidence["broadcast"]
    s.paragraph(
        "Trace of the two fused kernels (f16, ×0.7): immediate — "
        + "; ".join(a["notes"][:1])
        + ". broadcast — "
        + "; ".join(b["notes"][:1])
        + "."
    )
    mnemonics = sorted(set(a["instructions"]) | set(b["instructions"]))
    changed = [
        [m, num(a["instructions"].get(m, 0)), num(b["instructions"].get(m, 0))]
        for m in mnemonics
        if a["instructions"].get(m, 0) != b["instructions"].get(m, 0)
    ]
    s.table(
        ["mnemonic", "immediate (count)", "broadcast (count)"],
        changed or [["(none)", "—", "—"]],
        summary=f"{len(changed)} instruction mnemonics whose counts differ between the two kernels (objdump)",
    )


def _c1_plot(s, fused, dtypes, scalars, shape):
    data = [
        (d, sc, fused[(d, sc, shape, "immediate")])
        for d in dtypes
        if d != "f32"
        for sc in scalars
        if (d, sc, shape, "immediate") in fused
    ]
    if not data:
        return
    fig, axes = figure(8, 3.2)
    ax = axes[0][0]
    labels = [f"{d}\n×{sc}" for d, sc, _ in data]
    bottom = [0.0] * len(data)
    for key, name, color in [
        ("frac_ulp0", "ULP = 0", "#4c9a2a"),
        ("frac_ulp1", "ULP = 1", "#e3a21a"),
        ("frac_ulp_ge2", "ULP ≥ 2", "#c0392b"),
    ]:
        values = [100 * b[key] for _, _, b in data]
        ax.bar(labels, values, bottom=bottom, label=name, color=color)
        bottom = [x + y for x, y in zip(bottom, values)]
    ax.set_ylabel("% of elements")
    ax.set_ylim(0, 100)
    ax.set_title(f"Immediate vs broadcast-tensor lowering, fused, {shape} (f32 omitted: 100 % at 0 ULP)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    s.figure(fig, "c1_ulp_shares", "C1: ULP distance between the two lowerings, share of elements")
    close(fig)
