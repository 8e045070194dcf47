"""Task C3's section: the ULP error of rsqrt and division against the Newton iterations, the IEEE path,
the SASS of each method on a GPU architecture; on a framework, its compiled IEEE operations against
eager's."""

from __future__ import annotations

from reports.claims import c3 as claim
from reports.numbers import num, pct
from reports.results import evidence, rows
from reports.sections import DTYPES, sass_rows, show
from reports.sections.plots import close, figure

C3_MODE_LABEL = {
    "ieee": "IEEE ops (rsqrt: sqrt, then divide)",
    "newton-bittrick": "Newton from bit-trick seed",
    "newton-hw": "Newton from rsqrtss/rcpss",
}


def render(s, result):
    run = result.data
    facts = claim.facts(result)
    show(s, claim.verdicts(facts))
    rows_ = rows(run, "C3/")
    if facts.framework or not facts.newton:
        _c3_ieee_table(s, rows_)
        return
    _c3_plot(s, rows_)
    _c3_histograms(s, result)
    _c3_sass(s, run)
    s.paragraph(
        "Input U(0.01, 100); ULP error against fp64 in the result's format; 'correctly rounded' is the share "
        "of results equal to the fp64 value rounded once to the dtype."
    )
    table = [
        [
            f["op"],
            f["dtype"],
            C3_MODE_LABEL.get(f["mode"], f["mode"]),
            f["iters"] if f["mode"] != "ieee" else "—",
            num(b["ulp_p50"]),
            num(b["ulp_p99"]),
            num(b["ulp_max"]),
            pct(b["frac_correctly_rounded"]),
        ]
        for f, b in rows_
    ]
    s.table(
        ["op", "dtype", "method", "iterations", "ULP P50", "ULP P99", "ULP max", "correctly rounded"],
        table,
        summary=f"All {len(table)} configurations",
    )


def _c3_ieee_table(s, rows):
    table = [
        [
            f["op"],
            f["dtype"],
            pct(b.get("fused_vs_eager_frac_equal")),
            num(b.get("fused_vs_eager_ulp_max")),
            pct(b["frac_correctly_rounded"]),
            pct(b.get("eager_frac_correctly_rounded")),
            num(b["ulp_max"]),
            num(b.get("eager_ulp_max")),
        ]
        for f, b in rows
        if f["mode"] == "ieee"
    ]
    if table:
        s.table(
            [
                "op",
                "dtype",
                "compiled = eager",
                "max ULP compiled vs eager",
                "compiled correctly rounded",
                "eager correctly rounded",
                "compiled ULP max vs fp64",
                "eager ULP max vs fp64",
            ],
            table,
            caption="IEEE rsqrt and division, compiled against the device's eager op and against fp64 "
            "(input U(0.01, 100)):",
        )


def _c3_sass(s, run):
    rows = sass_rows(run, "SASS/C3/")
    if not rows:
        return
    table = [
        [
            f["op"],
            f["dtype"],
            C3_MODE_LABEL.get(f["mode"], f["mode"]),
            f["iters"] if f["mode"] != "ieee" else "—",
            f["arch"],
            num(b.get("MUFU.RSQ", 0)),
            num(b.get("MUFU.RCP", 0)),
            num(b.get("FFMA", 0)),
            num(b.get("FMUL", 0)),
            num(b.get("FADD", 0)),
            num(b.get("instructions", 0)),
        ]
        for f, b in rows
    ]
    s.paragraph(
        "On a GPU (CUDA device, SASS compiled by NVRTC for each architecture and disassembled without a GPU): "
        "the hardware seed is one MUFU.RSQ / MUFU.RCP per element, and each Newton step adds multiplies and adds. "
        "The counts are per kernel: a kernel that computes several elements per thread (the vectorised f32 "
        "kernels: 4) holds that many seeds, and a kernel with a 64-bit grid-stride index also counts its index "
        "division in MUFU.RCP."
    )
    s.table(
        ["op", "dtype", "method", "iterations", "arch", "MUFU.RSQ", "MUFU.RCP", "FFMA", "FMUL", "FADD", "instructions"],
        table,
        summary=f"SASS instruction counts, {len(table)} kernels",
    )


def _c3_plot(s, rows):
    fig, axes = figure(10, 3.8, 1, 2)
    colors = {"f16": "#1b9e77", "bf16": "#d95f02", "f32": "#7570b3"}
    handles = {}
    for ax, op in zip(axes[0], ("rsqrt", "div")):
        for dtype in DTYPES:
            ieee = next((b for f, b in rows if (f["op"], f["dtype"], f["mode"]) == (op, dtype, "ieee")), None)
            if ieee is not None:
                h = ax.axhline(max(ieee["ulp_max"], 1e-3), color=colors[dtype], linestyle=":", linewidth=1.5)
                handles[f"{dtype} IEEE ops (reference)"] = h
            for mode, style in (("newton-bittrick", "-o"), ("newton-hw", "--s")):
                series = sorted(
                    (int(f["iters"]), b["ulp_max"])
                    for f, b in rows
                    if (f["op"], f["dtype"], f["mode"]) == (op, dtype, mode)
                )
                if series:
                    (h,) = ax.plot(
                        [x for x, _ in series], [max(y, 1e-3) for _, y in series], style, color=colors[dtype]
                    )
                    handles[f"{dtype} {C3_MODE_LABEL[mode]}"] = h
        ax.set_yscale("log")
        ax.set_xlabel("Newton iterations")
        ax.set_ylabel("max ULP error vs fp64 (log)")
        ax.set_title(op)
        ax.set_xticks([0, 1, 2, 3])
    fig.legend(handles.values(), handles.keys(), loc="outside right center")
    coincide = []
    for op in ("rsqrt", "div"):
        for dtype in DTYPES:
            ieee = next(
                (b["ulp_max"] for f, b in rows if (f["op"], f["dtype"], f["mode"]) == (op, dtype, "ieee")), None
            )
            last = [
                b["ulp_max"]
                for f, b in rows
                if (f["op"], f["dtype"]) == (op, dtype) and f["mode"] != "ieee" and f["iters"] == "3"
            ]
            if ieee is not None and last and all(abs(v - ieee) <= 0.01 * max(ieee, 1e-9) for v in last):
                coincide.append(f"{op} {dtype}")
    s.figure(
        fig,
        "c3_iterations",
        "C3: max ULP error against Newton iterations (log axis); dotted: the IEEE path of the "
        "same dtype."
        + (
            f" At 3 iterations both Newton curves lie on the IEEE line in {', '.join(coincide)}: "
            "there the result's rounding, not the method, sets the error."
            if coincide
            else ""
        ),
    )
    close(fig)


def _c3_histograms(s, result):
    files = evidence(result, "C3_op-rsqrt_dtype-f32_mode-newton-bittrick_*.json")
    if not files:
        return
    fig, axes = figure(8, 3.0)
    ax = axes[0][0]
    width = 0.8 / len(files)
    counts = []
    for i, (path, data) in enumerate(files):
        counts = data["integer_ulp_histogram"]
        total = sum(counts)
        iters = path.name.split("iters-")[1].split("_")[0]
        ax.bar(
            [k + i * width for k in range(len(counts))],
            [100 * c / total for c in counts],
            width=width,
            label=f"{iters} iterations",
        )
    ax.set_xticks(
        [k + 0.4 - width / 2 for k in range(len(counts))],
        [str(k) for k in range(len(counts) - 1)] + [f"≥{len(counts) - 1}"],
    )
    ax.set_xlabel("integer ULP distance to the correctly rounded result")
    ax.set_ylabel("% of elements")
    ax.set_title("rsqrt f32, Newton from the bit-trick seed")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    s.figure(fig, "c3_histograms", "C3: ULP histograms per iteration count")
    close(fig)
