"""Tasks A, B, C1, C2, C3 and D of the plan: one render function each, over a suite's JSON and the
evidence files it wrote to its dump directory. Each states its verdict with the condition that
decided it, then its figure, then its tables (long ones collapsed)."""

from __future__ import annotations

import json
import pathlib

from reports import claims
from reports.numbers import num, pct, yesno
from reports.results import axes, b_distribution, benchmarks, dump_dir

from .attribution import mechanism_text
from .plots import EAGER, FUSED, close, figure

DTYPES = ("f16", "bf16", "f32")
ENGINE_DEVICES = ("cpu", "cuda")  # fusebench's own engine: its kernels carry traces and objdump counts


def _rows(run: dict, prefix: str) -> list[tuple[dict, dict]]:
    return [(axes(run, b), b) for b in benchmarks(run, prefix) if not b.get("error_occurred")]


def _nothing_measured(run: dict, prefix: str) -> str:
    """Why a task has no measured case: its cases' skip messages (e.g. "n/a on torch: no tile size"),
    or that the run has none."""
    skipped = [b for b in benchmarks(run, prefix) if b.get("error_occurred")]
    if not skipped:
        return f"no {prefix.rstrip('/')} benchmark in this run"
    messages = list(dict.fromkeys(b.get("error_message", "?") for b in skipped))
    return (
        f"all {len(skipped)} {prefix.rstrip('/')} cases skipped: "
        + "; ".join(messages[:2])
        + (f" (and {len(messages) - 2} other reasons)" if len(messages) > 2 else "")
    )


def _evidence(result, pattern: str) -> list[tuple[pathlib.Path, dict]]:
    return [(p, json.loads(p.read_text())) for p in sorted(dump_dir(result).glob(pattern))]


# ---- A
A_CLAIM = "fused execution and its compilation are bit-deterministic"


def render_a(s, run, result):
    rows = _rows(run, "A/")
    refused = claims.na_reasons(benchmarks(run, "A/"))
    if not rows:
        s.verdict(A_CLAIM, claims.decide_a(rows, refused or [_nothing_measured(run, "A/")]))
        return
    not_in_profile = [
        claims.a_config(f)
        for f, b in ((axes(run, b), b) for b in benchmarks(run, "A/"))
        if b.get("error_occurred") and "quick profile" in b.get("error_message", "")
    ]
    table = []
    for f, b in rows:
        table.append(
            [
                f["dtype"],
                f["threads"],
                num(b["runs"]),
                num(b["distinct_hashes"]),
                yesno(b.get("kernel_source_stable", -1) == 1),
                _flag(b.get("kernel_text_stable", -1)),
                yesno(b["kernel_hash_stable"] == 1),
                num(b["max_ulp_vs_round1"]),
                claims.A_CONTROLS.get(int(b.get("negative_control_knob", 1)), "none"),
                _flag(b["negative_control_detected"]),
                _flag(b.get("negative_control_outputs_differ", -1)),
                num(b["real_time"]),
            ]
        )
    s.verdict(A_CLAIM, claims.decide_a(rows, refused, not_in_profile))
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


def _flag(value) -> str:
    """A 1 / 0 / -1 counter: yes, no, or — where the device has nothing to compare."""
    return "—" if value is None or value < 0 else yesno(value == 1)


# ---- C1
C1_CLAIM = "instruction selection (immediate vs broadcast tensor) changes last bits"


def render_c1(s, run, result):
    rows = _rows(run, "C1/")
    if not rows:
        s.verdict(C1_CLAIM, claims.not_applicable(_nothing_measured(run, "C1/")))
        return
    fused = {(f["dtype"], f["scalar"], f["shape"], f["lowering"]): b for f, b in rows if f["exec"] == "fused"}
    eager = {(f["dtype"], f["scalar"], f["shape"], f["lowering"]): b for f, b in rows if f["exec"] == "eager"}
    keys = ("frac_ulp0", "frac_ulp1", "frac_ulp_ge2", "ulp_max_between", "ulp_p99", "ulp_max")
    same = [k for k in fused if k in eager and all(fused[k].get(c) == eager[k].get(c) for c in keys)]
    dtypes = [d for d in DTYPES if any(k[0] == d for k in fused)]
    scalars = sorted({k[1] for k in fused}, key=float)
    shapes = sorted({k[2] for k in fused}, key=lambda x: [int(v) for v in x.split("x")])
    if claims.is_framework(s.device):
        inexact = [k for k in fused if k[3] == "immediate" and float(k[1]) != 0.5 and k[0] != "f32"]
        files = _evidence(result, "C1_dtype-f16_scalar-0.7_*exec-fused*.json")
        s.verdict(C1_CLAIM, claims.decide_c1_framework(eager, fused, inexact, files[0][1] if files else None))
    else:
        s.verdict(C1_CLAIM, claims.decide_c1(fused))
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


def _sass_rows(run: dict, prefix: str) -> list[tuple[dict, dict]]:
    """The CUDA device's SASS evidence: kernels compiled by NVRTC for named architectures and
    disassembled (cuobjdump), which needs the CUDA toolkit but no GPU."""
    return [(axes(run, b), b) for b in benchmarks(run, prefix) if not b.get("error_occurred")]


def _c1_sass(s, run):
    rows = _sass_rows(run, "SASS/C1/")
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
        "(more LDG). The CUDA kernels have not been run on a GPU here."
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
    files = _evidence(result, "C1_dtype-f16_scalar-0.7_*exec-fused*.json")
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


# ---- C2
C2_CLAIM = "reduction order (tile size) changes last bits; each order is self-deterministic"


def render_c2(s, run, result):
    threads_rows = _rows(run, "C2/knob:threads/")
    rows = [(f, b) for f, b in _rows(run, "C2/") if "tile" in f]
    refused = claims.na_reasons(benchmarks(run, "C2/"))
    if claims.is_framework(s.device) or not rows:
        s.verdict(
            C2_CLAIM,
            claims.decide_c2_threads(threads_rows, refused)
            if threads_rows or refused
            else claims.not_applicable(_nothing_measured(run, "C2/")),
        )
        _c2_threads_table(s, threads_rows)
        return
    configs = list(dict.fromkeys((f["out"], f["acc"], f["shape"]) for f, _ in rows))
    groups = {}
    for c in configs:
        group = sorted(
            [(int(f["tile"]), b) for f, b in rows if (f["out"], f["acc"], f["shape"]) == c], key=lambda t: t[0]
        )
        groups[c] = group

    # An f32 output with an "f32" accumulator repeats the storage-accumulator run (the storage dtype is f32):
    # keep one of two identical groups.
    def signature(group):
        return [
            (
                t,
                b.get("ulp_max"),
                b.get("ulp_p99"),
                tuple(sorted((k, v) for k, v in b.items() if k.startswith("ulp_vs_tile"))),
            )
            for t, b in group
        ]

    shown, dropped = [], []
    for c in configs:
        twin = next(
            (o for o in shown if o[0] == c[0] and o[2] == c[2] and signature(groups[o]) == signature(groups[c])), None
        )
        (dropped if twin else shown).append(c)
    where = {
        c: max((b.get(f"ulp_vs_tile{o}", 0) for t, b in groups[c] for o, _ in groups[c]), default=0) for c in configs
    }
    s.verdict(C2_CLAIM, claims.decide_c2(rows, shown, where))
    _c2_heatmaps(s, shown, groups, where)
    _c2_threads_table(s, threads_rows)
    if dropped:
        kinds = sorted({(o, a) for o, a, _ in dropped})
        s.paragraph(
            "Not shown: " + ", ".join(f"out {o}/acc {a}" for o, a in kinds) + " — identical tile by tile to the "
            "same output with the other accumulator (for an f32 output the storage dtype is f32, so both "
            "accumulators are the same)."
        )
    table = []
    for c in shown:
        for t, b in groups[c]:
            table.append(
                [
                    c[0],
                    c[1],
                    c[2],
                    num(t),
                    yesno(b["self_deterministic"] == 1),
                    num(b["runs"]),
                    num(b["ulp_p50"]),
                    num(b["ulp_p99"]),
                    num(b["ulp_max"]),
                    num(b["abs_err_max"]),
                ]
            )
    s.table(
        [
            "out",
            "acc",
            "shape",
            "tile",
            "self-deterministic",
            "runs",
            "ULP P50 vs fp64",
            "ULP P99 vs fp64",
            "ULP max vs fp64",
            "abs err max",
        ],
        table,
        summary=f"Each tile against fp64 ({len(table)} rows)",
    )


def _c2_threads_table(s, threads_rows):
    if threads_rows:
        s.table(
            [
                "out",
                "shape",
                "max ULP, 1 vs 2 threads",
                "sums that differ",
                "self-deterministic",
                "runs",
                "ULP max vs fp64 (1 thread)",
                "ULP max vs fp64 (2 threads)",
            ],
            [
                [
                    f["out"],
                    f["shape"],
                    num(b["ulp_between_orders"]),
                    pct(b["frac_differ_between_orders"]),
                    yesno(b["self_deterministic"] == 1),
                    num(b["runs"]),
                    num(b["ulp_max_threads1"]),
                    num(b["ulp_max_threads2"]),
                ]
                for f, b in threads_rows
            ],
            caption="The same sum at 1 and at 2 threads (the order a thread count changes):",
        )


def _c2_heatmaps(s, shown, groups, where):
    import numpy as np

    if not shown:
        return
    cols = min(4, len(shown))
    nrows = (len(shown) + cols - 1) // cols
    fig, axes = figure(2.45 * cols + 0.8, 2.85 * nrows + 0.3, nrows, cols)
    vmax = max(1.0, max(where[c] for c in shown))
    image = None
    for i, c in enumerate(shown):
        ax = axes[i // cols][i % cols]
        tiles = [t for t, _ in groups[c]]
        matrix = np.array([[b.get(f"ulp_vs_tile{o}", np.nan) for o in tiles] for _, b in groups[c]], dtype=float)
        image = ax.imshow(matrix, cmap="Reds", vmin=0, vmax=vmax)
        ax.set_xticks(range(len(tiles)), [str(t) for t in tiles], rotation=90)
        ax.set_yticks(range(len(tiles)), [str(t) for t in tiles])
        ax.grid(False)
        for (y, x), v in np.ndenumerate(matrix):
            ax.text(
                x,
                y,
                "—" if np.isnan(v) else f"{v:.0f}",
                ha="center",
                va="center",
                fontsize=9.5,
                color="white" if v > vmax / 2 else "black",
            )
        ax.set_title(f"out {c[0]}, acc {c[1]}\n{c[2]}")
    for j in range(len(shown), nrows * cols):
        axes[j // cols][j % cols].set_visible(False)
    fig.colorbar(image, ax=axes, label="max ULP apart", shrink=0.8)
    fig.supxlabel("tile (elements per partial sum)")
    s.figure(fig, "c2_tiles", "C2: max ULP between the sums of two tile sizes (row and column: tile)")
    close(fig)


# ---- C3
C3_MODE_LABEL = {
    "ieee": "IEEE ops (rsqrt: sqrt, then divide)",
    "newton-bittrick": "Newton from bit-trick seed",
    "newton-hw": "Newton from rsqrtss/rcpss",
}


C3_CLAIM = "iterative approximations differ from IEEE, and more iterations lower the error"


def render_c3(s, run, result):
    rows = _rows(run, "C3/")
    refused = claims.na_reasons(benchmarks(run, "C3/"))
    newton = [(f, b) for f, b in rows if f["mode"] != "ieee"]
    if claims.is_framework(s.device) or not newton:
        ieee = [(f, b) for f, b in rows if f["mode"] == "ieee"]
        evidence = {
            op: e for op in ("rsqrt", "div") for _, e in _evidence(result, f"C3_op-{op}_dtype-f32_mode-ieee_*.json")[:1]
        }
        s.verdict(
            C3_CLAIM,
            claims.decide_c3_ieee(ieee, claims.c3_emitted(evidence), refused)
            if ieee or refused
            else claims.not_applicable(_nothing_measured(run, "C3/")),
        )
        _c3_ieee_table(s, rows)
        return
    series, seeds_differ = [], []
    for op in ("rsqrt", "div"):
        for dtype in DTYPES:
            ieee = next((b for f, b in rows if (f["op"], f["dtype"], f["mode"]) == (op, dtype, "ieee")), None)
            for mode in ("newton-bittrick", "newton-hw"):
                p99 = {
                    int(f["iters"]): b["ulp_p99"]
                    for f, b in rows
                    if (f["op"], f["dtype"], f["mode"]) == (op, dtype, mode)
                }
                if len(p99) == 4:
                    series.append((f"{op} {dtype} {mode}", p99))
                if ieee is not None and 0 in p99:
                    seeds_differ.append(p99[0] != ieee["ulp_p99"])
    ieee_rows = [(f, b) for f, b in rows if f["mode"] == "ieee"]
    inexact = [
        f"{f['op']} {f['dtype']}: {pct(b['frac_correctly_rounded'])} correctly rounded, max {num(b['ulp_max'])} ULP"
        for f, b in ieee_rows
        if b["frac_correctly_rounded"] < 1
    ]
    exact = [f"{f['op']} {f['dtype']}" for f, b in ieee_rows if b["frac_correctly_rounded"] == 1]
    ieee_text = (
        (
            "The IEEE path is not always correctly rounded: rsqrt is 1/sqrt(x), two correctly rounded operations; "
            + "; ".join(inexact)
            + (f" (100 % in {', '.join(exact)})." if exact else ".")
        )
        if inexact
        else "The IEEE path is correctly rounded in every configuration."
    )
    s.verdict(C3_CLAIM, claims.decide_c3(series, seeds_differ, ieee_text))
    _c3_plot(s, rows)
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
        for f, b in rows
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
    rows = _sass_rows(run, "SASS/C3/")
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
        "the hardware seed is one MUFU.RSQ / MUFU.RCP, and each Newton step adds multiplies and adds. MUFU.RCP "
        "also counts the kernel's grid-stride index division. Not run on a GPU here."
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
    files = _evidence(result, "C3_op-rsqrt_dtype-f32_mode-newton-bittrick_*.json")
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


# ---- D
D_CLAIM = "pure data movement is bit-identical between eager and fused"


def _evidence_of(result, name: str) -> dict | None:
    """A benchmark's evidence file, named as the suites name it ('/' -> '_', ':' -> '-')."""
    path = dump_dir(result) / (name.replace("/", "_").replace(":", "-") + ".json")
    return json.loads(path.read_text()) if path.is_file() else None


def render_d(s, run, result):
    rows = _rows(run, "D/")
    counter = [(f, b) for f, b in rows if b["bit_equal"] != 1]
    evidence = {b["name"]: _evidence_of(result, b["name"]) or {} for _, b in counter}
    mechanisms = {name: mechanism_text(e) for name, e in evidence.items() if "attribution" in e}
    s.verdict(
        D_CLAIM, claims.decide_d(rows, mechanisms) if rows else claims.not_applicable(_nothing_measured(run, "D/"))
    )
    if not rows:
        return
    shapes = list(dict.fromkeys(f["shape"] for f, _ in rows))
    subgraphs = list(dict.fromkeys(f["subgraph"] for f, _ in rows))
    table = []
    for sub in subgraphs:
        for dtype in DTYPES:
            cells = []
            for shape in shapes:
                b = next((b for f, b in rows if (f["subgraph"], f["dtype"], f["shape"]) == (sub, dtype, shape)), None)
                cells.append("—" if b is None else ("yes" if b["bit_equal"] == 1 else f"no ({num(b['mismatches'])})"))
            if any(c != "—" for c in cells):
                table.append([sub, dtype] + cells)
    if counter:
        s.table(
            ["benchmark", "mismatches", "mechanism"],
            [[b["name"], num(b["mismatches"]), mechanisms.get(b["name"], "—")] for _, b in counter],
            caption="Counter-examples (evidence in the dump directory). The mechanism is the smallest set of "
            "switches after which fused is bit-equal to eager, found as for task B (its attribution section "
            "says how); '—' where the evidence has no attribution:",
        )
    else:
        s.paragraph(
            "The promotion chains (concat of the dtype with f32; f16 with bf16, which promotes to f32) widen "
            "exactly in both executors, so they stay bit-equal too."
        )
    s.table(
        ["subgraph", "dtype"] + [f"bit-equal {sh}" for sh in shapes],
        table,
        summary=f"Every check: {len(subgraphs)} subgraphs × dtypes × {len(shapes)} shapes",
    )


# ---- B
_dist = b_distribution


def render_b(s, run, result):
    rows = _rows(run, "B/")
    if not rows:
        s.verdict("fused error ≤ eager error", claims.not_applicable(_nothing_measured(run, "B/")))
        return
    evidence = [e for _, e in _evidence(result, "B_*.json")]
    chains = list(dict.fromkeys(f["chain"] for f, _ in rows))
    cells = claims.b_cells(result)
    cfg = claims.b_config()
    deciding = cfg["measures"][cfg["deciding_measure"]]
    s.paragraph(
        f"How a chain is decided: on the {deciding['label']}, because {deciding['why']}. The ULP error, the plan's "
        "pooled rule and torch's accuracy rule are judged beside it, each with its own outcome; the intervals "
        "of every part are in the table below the verdicts."
    )
    verdicts = {chain: claims.decide_b(chain, chain_cells) for chain, chain_cells in cells.items()}
    for chain, v in verdicts.items():
        s.verdict(f"{chain}: fused error ≤ eager error", v)
    _b_intervals(s, verdicts)
    _b_conditioned(s, rows)
    _b_neighbour_metrics(s, cells)
    _b_plots(s, evidence, chains)
    s.paragraph(
        "Per chain × dtype × input distribution: ULP error against fp64 pooled over all elements of all input "
        "sets, the P99 of the per-set maxima, and counter-example sets (the set's fused max above its eager max). "
        "'emulated vs eager' is the control: fused with per-op rounding emulated, max ULP apart from eager "
        "(0 = the fused and eager difference is rounding between ops and nothing else)."
    )
    table = []
    for f, b in rows:
        if f["dtype"] == "f32":
            continue
        table.append(
            [
                f["chain"],
                f["dtype"],
                f["dist"],
                num(b["eager_ulp_p99"]),
                num(b["fused_ulp_p99"]),
                num(b["eager_ulp_max"]),
                num(b["fused_ulp_max"]),
                num(b["eager_setmax_p99"]),
                num(b["fused_setmax_p99"]),
                f"{num(b['counterexamples'])}/{num(b['sets'])}",
                num(b["emulated_vs_eager_max_ulp"]),
            ]
        )
    s.table(
        [
            "chain",
            "dtype",
            "inputs",
            "P99 eager (ULP)",
            "P99 fused (ULP)",
            "max eager (ULP)",
            "max fused (ULP)",
            "set-max P99 eager (ULP)",
            "set-max P99 fused (ULP)",
            "counter-example sets",
            "emulated vs eager (ULP)",
        ],
        table,
    )
    s.table(
        [
            "chain",
            "dtype",
            "inputs",
            "P50 eager (ULP)",
            "P50 fused (ULP)",
            "set-max P50 eager (ULP)",
            "set-max P50 fused (ULP)",
            "abs err max eager",
            "abs err max fused",
            "rel err P99 eager",
            "rel err P99 fused",
        ],
        [
            [
                f["chain"],
                f["dtype"],
                f["dist"],
                num(b["eager_ulp_p50"]),
                num(b["fused_ulp_p50"]),
                num(b["eager_setmax_p50"]),
                num(b["fused_setmax_p50"]),
                num(b["eager_abs_err_max"]),
                num(b["fused_abs_err_max"]),
                num(b["eager_rel_err_p99"]),
                num(b["fused_rel_err_p99"]),
            ]
            for f, b in rows
            if f["dtype"] != "f32"
        ],
        summary="Medians, absolute and relative errors of the same rows",
    )
    _b_floor(s, rows)
    _b_counterexamples(s, evidence)


def _b_intervals(s, verdicts):
    """Each chain's judged parts on every measure (the deciding one first): statistic, interval of
    fused − eager, outcome, and for an undecided part the sets that would decide it."""
    table = []
    for chain, v in verdicts.items():
        # the deciding verdict's condition starts with its measure's label
        measured = [(v.condition.split(":", 1)[0] + " (deciding)", v)]
        measured += [(name.removesuffix(" (not deciding)"), o) for name, o in v.beside if o.parts]
        for measure, verdict in measured:
            for where, part in verdict.parts:
                table.append(
                    [
                        chain,
                        measure,
                        where,
                        part.key_figure,
                        part.label,
                        part.interval.split("; ", 1)[1] if part.interval else "—",
                    ]
                )
    if not table:
        return
    cfg = claims.b_config()
    s.table(
        ["chain", "measure", "inputs and statistic", "fused − eager, 95 % interval", "outcome", "to decide"],
        table,
        caption=f"Paired bootstrap over input sets ({num(cfg['resamples'])} resamples, seed {cfg['seed']}): for a "
        "per-set statistic, the relative change of its mean over sets, fused against eager; for 'share of sets "
        "worse', the share of sets where fused is worse minus the share where eager is. Tolerances: "
        + "; ".join(
            f"{st['label']} {pct(st['relative_tolerance'])}"
            + (f", share worse {num(st['share_worse_tolerance'])}" if st.get("share_worse_tolerance") else "")
            for st in cfg["statistics"].values()
        )
        + " (tools/thresholds.json). An undecided part's sets to decide: n · (half-width ÷ |estimate − "
        "tolerance|)², the half-width on the side facing the tolerance shrinking as 1/√n.",
        summary=f"Every judged part: {len(table)} intervals of fused − eager, the deciding measure's first",
    )


def _b_conditioned(s, rows):
    """The conditioned error's pooled figures beside the counter-examples' conditioning."""
    table = [
        [
            f["chain"],
            f["dtype"],
            f["dist"],
            num(b.get("eager_cond_p50")),
            num(b.get("fused_cond_p50")),
            num(b.get("eager_cond_p99")),
            num(b.get("fused_cond_p99")),
            num(b.get("eager_cond_max")),
            num(b.get("fused_cond_max")),
            num(b.get("cond_counterexamples")),
            f"{num(b.get('counterexamples_well_conditioned'))} / {num(b.get('counterexamples_ill_conditioned'))}",
        ]
        for f, b in rows
        if f["dtype"] != "f32" and "eager_cond_p99" in b
    ]
    if not table:
        return
    s.table(
        [
            "chain",
            "dtype",
            "inputs",
            "P50 eager",
            "P50 fused",
            "P99 eager",
            "P99 fused",
            "max eager",
            "max fused",
            "sets worse fused",
            "ULP counter-examples well / ill",
        ],
        table,
        caption="Conditioned error: each element's error against fp64 in units of the rounding error its "
        "computation cannot avoid at the output dtype (an fp64 running error bound, propagated op by op; "
        "docs/conditioned-error.md), pooled over all elements of all sets. 1 means the element is as accurate "
        "as that bound allows. 'sets worse fused': sets whose fused conditioned max exceeds eager's. A ULP "
        "counter-example is ill-conditioned when its element's condition (bound over the reference's spacing) "
        "exceeds the dump's ill_conditioned_above.",
    )


def _b_neighbour_metrics(s, cells):
    """msprobe's compare metrics and torch's accuracy rule per chain × dtype × distribution, from the
    per-set figures, so a team can set fusebench's figures beside its own tools'."""
    import numpy as np

    table = []
    for chain, chain_cells in cells.items():
        for c in chain_cells:
            if c.dtype == "f32" or "cosine" not in c.per_set:
                continue
            col = c.per_set
            same = claims.torch_same_sets(c)

            def pair(name, reduce, col=col):
                f, e = col[name]
                return f"{num(reduce(e))}\u2009/\u2009{num(reduce(f))}"  # thin spaces: the table fits 1280 px

            table.append(
                [
                    chain,
                    f"{c.dtype}/{c.dist}",
                    pair("cosine", np.nanmin),
                    pair("max_abs_err", np.nanmax),
                    pair("max_rel_err", np.nanmax),
                    pair("one_thousandth_err_ratio", np.nanmean),
                    pair("five_thousandths_err_ratio", np.nanmean),
                    pair("rmse_vs_fp64", np.nanmean),
                    "—" if same is None else f"{num(int(same.sum()))}/{num(same.size)}",
                ]
            )
    if not table:
        return
    tol = claims.b_config()["torch_same"]
    s.table(
        [
            "chain",
            "dtype/inputs",
            "cosine",
            "max abs",
            "max rel",
            "1‰ ratio",
            "5‰ ratio",
            "RMSE",
            "torch same",
        ],
        table,
        caption="The metrics neighbouring tools use, each cell eager / fused, against fp64: msprobe's compare "
        "metrics (cosine similarity, the worst set; max absolute and relative error, the worst set; the "
        "one-thousandth and five-thousandths error ratios, the share of elements whose relative error is below "
        "0.001 / 0.005, mean over sets; msprobe calls them trend indicators, its rule of thumb is cosine > 0.99 "
        "and max abs err < 0.001), the RMSE (mean over sets), and the sets passing "
        "torch._dynamo.utils.same(eager, fused, fp64) "
        f"as torch 2.15 applies it: allclose at {num(tol['tol'])}, else RMSE(fused) ≤ "
        f"{num(tol['multiplier_low_precision'])} · RMSE(eager) + {num(tol['tol'] / 10)} for f16/bf16. Sources, "
        "read and checked: msprobe's debug/accuracy_tools/msprobe/core/compare/npy_compare.py (Ascend mstt) and "
        "torch/_dynamo/utils.py (same, rmse) of the installed torch; definitions in docs/conditioned-error.md.",
        summary="msprobe's metrics and torch's accuracy rule, eager / fused",
    )


def _b_floor(s, rows):
    """f32 is the floor control: eager and fused round the same fp32 values. Its large ULP figures
    come from outputs near zero; the bound below is computed from the run's own counters."""
    floor = [(f, b) for f, b in rows if f["dtype"] == "f32"]
    if not floor:
        return
    table = []
    for f, b in floor:
        same = all(b[f"eager_{k}"] == b[f"fused_{k}"] for k in ("ulp_max", "ulp_p99", "abs_err_max"))
        # At the worst element |y - ref| <= abs_err_max and its ULP error is |y - ref| / spacing(ref), so
        # spacing(ref) <= abs_err_max / ulp_max and |ref| < 2^24 * spacing(ref) (f32: 24-bit significand).
        bound = b["eager_abs_err_max"] / b["eager_ulp_max"] * 2**24 if b["eager_ulp_max"] > 0 else None
        table.append(
            [
                f["chain"],
                f["dist"],
                num(b["eager_ulp_p99"]),
                num(b["eager_ulp_max"]),
                num(b["eager_abs_err_max"]),
                num(b["eager_rel_err_p99"]),
                num(bound),
                yesno(same),
            ]
        )
    worst = max(floor, key=lambda fb: fb[1]["eager_ulp_max"])
    tight = [
        (f, b)
        for f, b in floor
        if b["eager_ulp_max"] > 1000 and b["eager_abs_err_max"] / b["eager_ulp_max"] * 2**24 < 1e-3
    ]
    large = [(f, b) for f, b in floor if b["eager_ulp_max"] > 1000]
    s.table(
        [
            "chain",
            "inputs",
            "P99 (ULP)",
            "max (ULP)",
            "abs err max",
            "rel err P99",
            "|reference| at the max is below",
            "fused = eager",
        ],
        table,
        caption=f"f32 floor control. Eager and fused store the same fp32 values, so they agree. The maxima reach "
        f"{num(worst[1]['eager_ulp_max'])} ULP while the absolute error stays at most "
        f"{num(max(b['eager_abs_err_max'] for _, b in floor))}. At the worst element |y − ref| ≤ abs err max "
        "and ULP error = |y − ref| ÷ spacing(ref), so |ref| < abs err max ÷ ULP max × 2²⁴ (last column, from "
        f"this run's counters). In {len(tight)} of the {len(large)} rows above 1,000 ULP that bound is below "
        "10⁻³ against inputs of order 1: the worst element is an output near zero, where an earlier op's fp32 "
        "rounding error — absolute in size — is many of the tiny result's ULPs (cancellation in x·a + b, or "
        "x − mean in layernorm). Where the bound is large it says nothing: the largest absolute error may sit at "
        "another, larger output than the worst-ULP element.",
    )


def _b_plots(s, evidence, chain_order):
    import numpy as np
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    evidence = [e for e in evidence if e["dtype"] in ("f16", "bf16")]
    if not evidence:
        s.paragraph("No B evidence files in the dump directory (tools/run writes them).")
        return
    chains = [c for c in chain_order if any(e["chain"] == c for e in evidence)]
    dtypes = [d for d in ("f16", "bf16") if any(e["dtype"] == d for e in evidence)]
    # At least 6.4 in wide: the shared legend and the axis label must fit above and below one panel
    # (a filtered run may hold a single chain and dtype).
    fig, axes = figure(min(10.8, max(6.4, 2.2 * len(chains) + 0.6)), 2.35 * len(dtypes) + 0.7, len(dtypes), len(chains))
    handles = {}
    for row, dtype in enumerate(dtypes):
        for col, chain in enumerate(chains):
            ax = axes[row][col]
            coincide, values = [], []
            for e in evidence:
                if e["chain"] != chain or e["dtype"] != dtype:
                    continue
                dist = _dist(e["distribution"])
                style = "-" if dist == "uniform" else "--"
                if e["eager_set_max_ulp"] == e["fused_set_max_ulp"]:
                    coincide.append(dist)
                for path, color in (("eager", EAGER), ("fused", FUSED)):
                    xs = np.sort(np.maximum(np.asarray(e[f"{path}_set_max_ulp"], dtype=float), 1e-2))
                    values.append(xs)
                    (h,) = ax.plot(
                        xs,
                        np.arange(1, len(xs) + 1) / len(xs),
                        style,
                        color=color,
                        linewidth=2.6 if path == "eager" else 1.4,
                        drawstyle="steps-post",
                    )
                    handles[f"{path}, {dist} inputs"] = h
            if values:
                lo, hi = min(v.min() for v in values), max(v.max() for v in values)
                if hi / lo > 20:  # log only where the values span decades
                    ax.set_xscale("log")
                    ax.xaxis.set_minor_formatter(NullFormatter())
                else:
                    formatter = ScalarFormatter(useOffset=False)
                    ax.xaxis.set_major_formatter(formatter)
                    ax.locator_params(axis="x", nbins=3)
            if coincide:
                ax.text(
                    0.04,
                    0.96,
                    "fused = eager:\ncurves coincide",
                    transform=ax.transAxes,
                    va="top",
                    fontsize=9.5,
                    bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"},
                )
            ax.set_title(f"{chain}\n{dtype}" if row == 0 else dtype)
            if col == 0:
                ax.set_ylabel("share of sets (CDF)")
            else:
                ax.tick_params(labelleft=False)
    fig.supxlabel("per-set max ULP error against fp64 (log axis where the values span decades)", fontsize=10)
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncol=min(4, max(2, len(chains) + 1)))
    s.figure(
        fig,
        "b_set_maxima",
        "B: distribution (CDF) of each input set's maximum ULP error against fp64, eager "
        "(thick) vs fused (thin); further left is better.",
    )
    close(fig)


def _b_counterexamples(s, evidence):
    rows = []
    for e in evidence:
        for c in e["counterexamples"]:
            rows.append((c["fused_ulp_max"] - c["eager_ulp_max"], e, c))
    if not rows:
        s.paragraph("Counter-examples: none (no input set where the fused max ULP error exceeds eager's).")
        return
    rows.sort(key=lambda r: -r[0])
    groups = {}
    for severity, e, c in rows:
        groups.setdefault((e["chain"], e["dtype"], _dist(e["distribution"])), []).append((severity, e, c))

    def line(severity, e, c):
        return [
            e["chain"],
            e["dtype"],
            _dist(e["distribution"]),
            num(c["set"]),
            num(c["seed"]),
            num(c["element"]),
            num(c.get("reference_value")),
            num(c["fused_ulp_max"]),
            num(c["eager_ulp_max"]),
            num(severity),
            c.get("conditioning", "—"),
            c["first_divergent_op"],
            mechanism_text(c),
        ]

    header = [
        "chain",
        "dtype",
        "inputs",
        "set",
        "seed",
        "element",
        "reference value",
        "fused (ULP)",
        "eager (ULP)",
        "fused − eager (ULP)",
        "conditioning",
        "first divergent op",
        "mechanism",
    ]
    s.table(
        ["chain", "dtype", "inputs", "counter-example sets", "of them ill-conditioned", "worst fused − eager (ULP)"],
        [
            [k[0], k[1], k[2], num(len(v)), num(sum(c.get("conditioning") == "ill" for _, _, c in v)), num(v[0][0])]
            for k, v in sorted(groups.items(), key=lambda kv: -kv[1][0][0])
        ],
        caption=f"Counter-examples: {num(len(rows))} input sets where the fused max ULP error exceeds eager's, by "
        "chain, dtype and input distribution, worst first:",
    )
    worst = sorted([r for v in groups.values() for r in v[:3]], key=lambda r: -r[0])
    s.table(
        header,
        [line(*r) for r in worst],
        caption="The three most severe of each group, by severity (fused − eager). 'first divergent op' is the first op, "
        "in graph order, whose fused intermediate (from a probe run storing every op) has a larger max ULP "
        "error against fp64 than eager's. 'mechanism': the mechanism, and the ops, whose switch to eager's "
        "behaviour removes the counter-example (section 'Attribution of counter-examples'; — where the "
        "evidence has no attribution):",
        wrap=("mechanism",),
    )
    s.table(
        header,
        [line(*r) for r in rows[:200]],
        summary=f"All {num(len(rows))} counter-examples by severity"
        + (" (the first 200)" if len(rows) > 200 else "")
        + "; per-op errors are in the dump directory",
        wrap=("mechanism",),
    )


# ---- a suite this report has no renderer for (E's training suite, until it has one)
def render_unjudged(s, run):
    rows = [b for b in benchmarks(run) if not b.get("error_occurred")]
    s.paragraph(
        f"The suite ran ({len(rows)} benchmarks), but this report has no renderer for it yet: no verdict is drawn. "
        "Its counters as recorded:"
    )
    skip = {
        "name",
        "run_name",
        "run_type",
        "family_index",
        "per_family_instance_index",
        "repetitions",
        "repetition_index",
        "threads",
        "iterations",
        "time_unit",
        "cpu_time",
    }
    for b in rows:
        s.table(
            ["counter", "value"],
            [[k, num(v) if isinstance(v, (int, float)) else str(v)] for k, v in b.items() if k not in skip],
            summary=b["name"],
        )
