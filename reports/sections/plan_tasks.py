"""Tasks A, C1, C2, C3 and D of the plan: one render function each, over their suites' JSON and
the evidence files the suites write to the dump directory."""
from __future__ import annotations

import json
import pathlib

from .common import benchmarks, name_fields, suite_run


def _rows(run: dict, prefix: str) -> list[tuple[dict, dict]]:
    return [(name_fields(b["name"]), b) for b in benchmarks(run, prefix) if not b.get("error_occurred")]


def _profile_line(doc, run):
    c = run["context"]
    doc.paragraph(f"Profile {c.get('fusebench_profile', '?')}, device {c.get('fusebench_device', '?')}, "
                  f"{c.get('compiler', '?')}, {c.get('cpu_model', '?')} ({c.get('cpu_isa', '?')}), commit "
                  f"{c.get('git_revision', '?')}.")


# ---- A
def render_a(doc, runs, results_dir: pathlib.Path):
    doc.heading("A — determinism of fused execution (claim §3.3)")
    run = suite_run(doc, runs, "fusion_determinism")
    if run is None:
        return
    _profile_line(doc, run)
    rows, ok = [], True
    for f, b in _rows(run, "A/"):
        good = (b["distinct_hashes"] == 1 and b["kernel_hash_stable"] == 1 and b["max_ulp_vs_round1"] == 0
                and b["negative_control_detected"] == 1)
        ok &= good
        rows.append([f["dtype"], f["threads"], int(b["runs"]), int(b["distinct_hashes"]), int(b["kernel_hash_stable"]),
                     int(b["max_ulp_vs_round1"]), int(b["negative_control_detected"]),
                     int(b.get("negative_control_outputs_differ", -1)), f"{b['real_time']:.2f} ms"])
    doc.paragraph("Graph matmul → add → layernorm → gelu. Round 1 and round 2 (after clearing the kernel cache, in a "
                  "fresh process) each run the graph; the negative control recompiles with FMA contraction flipped.")
    doc.table(["dtype", "threads", "runs", "distinct output MD5s", "kernel hash stable", "max ULP vs round 1",
               "control caught (kernel hash)", "control outputs differ", "time / run"], rows)
    if rows:
        doc.verdict("fused execution and its compilation are bit-deterministic", "supported" if ok else "contradicted",
                    f"{len(rows)} configurations; expected runs / 1 distinct hash / kernel hash stable / 0 ULP, and every "
                    "negative control caught." if ok else "see the rows that deviate above.")


# ---- C1
def render_c1(doc, runs, results_dir: pathlib.Path):
    doc.heading("C1 — tensor × scalar lowering (claim §1.2 (2))")
    run = suite_run(doc, runs, "scalar_lowering")
    if run is None:
        return
    _profile_line(doc, run)
    rows = []
    differs_inexact, agree_exact, instructions = [], [], []
    for f, b in _rows(run, "C1/"):
        if f["lowering"] != "immediate":
            continue
        other = next((ob for of, ob in _rows(run, "C1/") if of["lowering"] == "broadcast" and
                      all(of[k] == f[k] for k in ["dtype", "scalar", "shape", "exec"])), None)
        rows.append([f["dtype"], f["scalar"], f["shape"], f["exec"], f"{100 * b['frac_ulp0']:.2f} %",
                     f"{100 * b['frac_ulp1']:.2f} %", f"{100 * b['frac_ulp_ge2']:.2f} %", int(b["ulp_max_between"]),
                     f"{b['ulp_p99']:.3f} / {b['ulp_max']:.3f}",
                     f"{other['ulp_p99']:.3f} / {other['ulp_max']:.3f}" if other else "—",
                     {1: "yes", 0: "no", -1: "n/a"}[int(b["instructions_differ"])]])
        if float(f["scalar"]) == 0.5:
            agree_exact.append(b["frac_ulp0"] == 1.0)
        elif f["dtype"] != "f32":
            differs_inexact.append(b["frac_ulp0"] < 1.0)
        if f["exec"] == "fused":
            instructions.append(b["instructions_differ"] == 1)
    doc.paragraph("Shares of elements whose two lowerings are 0, 1 and ≥ 2 ULP apart; error of each lowering against "
                  "fp64 as P99 / max ULP. 0.5 is exactly representable: a control whose lowerings must agree. In f32 "
                  "the broadcast tensor holds the same fp32 constant as the immediate.")
    doc.table(["dtype", "scalar", "shape", "exec", "ULP = 0", "ULP = 1", "ULP ≥ 2", "max ULP apart",
               "immediate vs fp64", "broadcast vs fp64", "instructions differ"], rows)
    _c1_evidence(doc, results_dir)
    _c1_plot(doc, run)
    if rows:
        ok = all(differs_inexact) and all(agree_exact) and all(instructions)
        verdict = "supported" if ok else ("inconclusive" if not all(instructions) else "contradicted")
        doc.verdict("instruction selection (immediate vs broadcast tensor) changes last bits", verdict,
                    f"{sum(differs_inexact)}/{len(differs_inexact)} inexact f16/bf16 cases differ, "
                    f"{sum(agree_exact)}/{len(agree_exact)} exact controls agree, fused instruction histograms differ "
                    f"in {sum(instructions)}/{len(instructions)}.")


def _c1_evidence(doc, results_dir: pathlib.Path):
    files = sorted((results_dir / "dumps" / "bench_scalar_lowering").glob("C1_dtype-f16_scalar-0.7_*exec-fused*.json"))
    if not files:
        doc.paragraph("No C1 evidence files in dumps/ (run with a dump directory, as tools/run does).")
        return
    evidence = json.loads(files[0].read_text())
    a, b = evidence["immediate"], evidence["broadcast"]
    doc.paragraph("Trace of the two fused kernels (f16, 0.7): immediate — " + "; ".join(a["notes"][:1]) +
                  ". broadcast — " + "; ".join(b["notes"][:1]) + ".")
    mnemonics = sorted(set(a["instructions"]) | set(b["instructions"]))
    changed = [[m, a["instructions"].get(m, 0), b["instructions"].get(m, 0)] for m in mnemonics
               if a["instructions"].get(m, 0) != b["instructions"].get(m, 0)]
    doc.paragraph(f"Instructions whose counts differ between the two kernels (objdump of {pathlib.Path(a['source']).name} "
                  f"and {pathlib.Path(b['source']).name}):")
    doc.table(["mnemonic", "immediate", "broadcast"], changed[:20] if changed else [["(none)", "", ""]])


def _c1_plot(doc, run):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = [(f, b) for f, b in _rows(run, "C1/") if f["exec"] == "fused" and f["lowering"] == "immediate"
            and f["dtype"] in ("f16", "bf16")]
    shapes = sorted({f["shape"] for f, _ in data})
    if not data:
        return
    data = [(f, b) for f, b in data if f["shape"] == shapes[-1]]
    labels = [f"{f['dtype']} × {f['scalar']}" for f, _ in data]
    fig, ax = plt.subplots(figsize=(10, 4))
    bottom = [0.0] * len(data)
    for key, name, color in [("frac_ulp0", "ULP = 0", "#4c9a2a"), ("frac_ulp1", "ULP = 1", "#e3a21a"),
                             ("frac_ulp_ge2", "ULP ≥ 2", "#c0392b")]:
        values = [100 * b[key] for _, b in data]
        ax.bar(labels, values, bottom=bottom, label=name, color=color)
        bottom = [x + y for x, y in zip(bottom, values)]
    ax.set_ylabel("% of elements")
    ax.set_title(f"C1: immediate vs broadcast-tensor lowering, fused, shape {shapes[-1]}")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    doc.figure(fig, "c1_ulp_shares", "C1 ULP histogram between the two lowerings")
    plt.close(fig)


# ---- C2
def render_c2(doc, runs, results_dir: pathlib.Path):
    doc.heading("C2 — reduction accumulation order (claim §1.2 (3))")
    run = suite_run(doc, runs, "reduction_order")
    if run is None:
        return
    _profile_line(doc, run)
    rows = _rows(run, "C2/")
    configs = sorted({(f["out"], f["acc"], f["shape"]) for f, _ in rows})
    all_deterministic = all(b["self_deterministic"] == 1 for _, b in rows)
    any_differs = False
    for out, acc, shape in configs:
        group = sorted([(int(f["tile"]), b) for f, b in rows if (f["out"], f["acc"], f["shape"]) == (out, acc, shape)],
                       key=lambda t: t[0])
        tiles = [t for t, _ in group]
        doc.paragraph(f"sum over the last axis of f16 input {shape}, output {out}, accumulator {acc}: max ULP between "
                      "tiles (row: tile, column: other tile), and each tile against fp64.")
        matrix = [[t] + [int(b.get(f"ulp_vs_tile{o}", -1)) for o in tiles] for t, b in group]
        any_differs |= any(v >= 1 for row in matrix for v in row[1:])
        doc.table(["tile"] + [str(t) for t in tiles], matrix)
        doc.table(["tile", "self-deterministic", "runs", "ULP P50", "ULP P99", "ULP max", "abs err max"],
                  [[t, "yes" if b["self_deterministic"] == 1 else "NO", int(b["runs"]), f"{b['ulp_p50']:.3f}",
                    f"{b['ulp_p99']:.3f}", f"{b['ulp_max']:.3f}", f"{b['abs_err_max']:.3g}"] for t, b in group])
    if rows:
        doc.verdict("reduction order (tile size) changes last bits, each order is self-deterministic",
                    "supported" if all_deterministic and any_differs else "contradicted",
                    f"self-deterministic: {'all' if all_deterministic else 'not all'} configurations; tiles differ by "
                    f"≥ 1 ULP somewhere: {'yes' if any_differs else 'no'}.")


# ---- C3
def render_c3(doc, runs, results_dir: pathlib.Path):
    doc.heading("C3 — rsqrt / division iteration count (claim §1.2 (4))")
    run = suite_run(doc, runs, "approximations")
    if run is None:
        return
    _profile_line(doc, run)
    rows = _rows(run, "C3/")
    table = [[f["op"], f["dtype"], f["mode"], f["iters"] if f["mode"] != "ieee" else "—", f"{b['ulp_p50']:.3g}",
              f"{b['ulp_p99']:.3g}", f"{b['ulp_max']:.3g}", f"{100 * b['frac_correctly_rounded']:.1f} %"] for f, b in rows]
    doc.paragraph("Input U(0.01, 100); ULP error against fp64 in the result's format; 'correctly rounded' is the share "
                  "whose result equals the fp64 value rounded to the dtype.")
    doc.table(["op", "dtype", "mode", "iterations", "ULP P50", "ULP P99", "ULP max", "correctly rounded"], table)
    _c3_plot(doc, rows)
    _c3_histograms(doc, results_dir)
    improving, differs = [], []
    for op in ("rsqrt", "div"):
        for dtype in ("f16", "bf16", "f32"):
            for mode in ("newton-bittrick", "newton-hw"):
                p99 = {int(f["iters"]): b["ulp_p99"] for f, b in rows if (f["op"], f["dtype"], f["mode"]) == (op, dtype, mode)}
                ieee = next((b for f, b in rows if (f["op"], f["dtype"], f["mode"]) == (op, dtype, "ieee")), None)
                if len(p99) == 4:
                    improving.append(p99[1] < p99[0] and p99[3] <= p99[1])
                if ieee is not None and 0 in p99:
                    differs.append(p99[0] != ieee["ulp_p99"])
    if rows:
        ok = all(improving) and all(differs)
        doc.verdict("iterative approximations differ from IEEE and more iterations lower the error",
                    "supported" if ok else "contradicted",
                    f"error falls from 0 to 1 iteration and does not rise by 3 in {sum(improving)}/{len(improving)} "
                    f"series; 0-iteration seeds differ from IEEE in {sum(differs)}/{len(differs)}.")


def _c3_plot(doc, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, op in zip(axes, ("rsqrt", "div")):
        for dtype in ("f16", "bf16", "f32"):
            for mode, style in (("newton-bittrick", "-o"), ("newton-hw", "--s")):
                series = sorted((int(f["iters"]), b["ulp_max"]) for f, b in rows
                                if (f["op"], f["dtype"], f["mode"]) == (op, dtype, mode))
                if series:
                    ax.plot([s[0] for s in series], [max(s[1], 1e-3) for s in series], style, label=f"{dtype} {mode}")
        ax.set_yscale("log")
        ax.set_xlabel("Newton iterations")
        ax.set_ylabel("max ULP error vs fp64")
        ax.set_title(op)
        ax.set_xticks([0, 1, 2, 3])
    axes[1].legend(fontsize=8)
    doc.figure(fig, "c3_iterations", "C3 max ULP error against iterations")
    plt.close(fig)


def _c3_histograms(doc, results_dir: pathlib.Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    files = sorted((results_dir / "dumps" / "bench_approximations").glob("C3_op-rsqrt_dtype-f32_mode-newton-bittrick_*.json"))
    if not files:
        return
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(files)
    for i, path in enumerate(files):
        counts = json.loads(path.read_text())["integer_ulp_histogram"]
        total = sum(counts)
        iters = path.name.split("iters-")[1].split("_")[0]
        xs = [k + i * width for k in range(len(counts))]
        ax.bar(xs, [100 * c / total for c in counts], width=width, label=f"{iters} iterations")
    ax.set_xticks(range(len(counts)), [str(k) for k in range(len(counts) - 1)] + [f">={len(counts) - 1}"])
    ax.set_xlabel("integer ULP distance to the correctly rounded result")
    ax.set_ylabel("% of elements")
    ax.set_title("C3: rsqrt f32, Newton from the bit-trick seed")
    ax.legend()
    doc.figure(fig, "c3_histograms", "C3 ULP histograms per iteration count")
    plt.close(fig)


# ---- D
def render_d(doc, runs, results_dir: pathlib.Path):
    doc.heading("D — pure data movement (claim §2)")
    run = suite_run(doc, runs, "data_movement")
    if run is None:
        return
    _profile_line(doc, run)
    rows = _rows(run, "D/")
    shapes = sorted({f["shape"] for f, _ in rows})
    subgraphs = list(dict.fromkeys(f["subgraph"] for f, _ in rows))
    table = []
    for sub in subgraphs:
        for dtype in ("f16", "bf16", "f32"):
            cells = []
            for shape in shapes:
                b = next((b for f, b in rows if (f["subgraph"], f["dtype"], f["shape"]) == (sub, dtype, shape)), None)
                cells.append("—" if b is None else ("bit-equal" if b["bit_equal"] == 1 else f"DIFFERS ({int(b['mismatches'])})"))
            table.append([sub, dtype] + cells)
    doc.table(["subgraph", "dtype"] + shapes, table)
    counter = [(f, b) for f, b in rows if b["bit_equal"] != 1]
    if counter:
        doc.paragraph("Counter-examples (evidence in dumps/bench_data_movement/):")
        doc.table(["benchmark", "mismatches"], [[b["name"], int(b["mismatches"])] for _, b in counter])
    else:
        doc.paragraph("Counter-examples: none. The promotion chains (concat of the dtype with f32; f16 with bf16, which "
                      "promotes to f32) widen exactly in both executors, so they stay bit-equal here.")
    if rows:
        doc.verdict("pure data movement is bit-identical between eager and fused", "supported" if not counter else "contradicted",
                    f"{len(rows) - len(counter)}/{len(rows)} subgraph × dtype × shape checks bit-equal.")


# ---- B
def render_b(doc, runs, results_dir: pathlib.Path):
    doc.heading("B — eager vs fused accumulated error (claim §3.2)")
    run = suite_run(doc, runs, "accumulated_error")
    if run is None:
        return
    _profile_line(doc, run)
    rows = _rows(run, "B/")
    doc.paragraph("Per chain × dtype × input distribution: ULP error against fp64 over all elements of all input sets "
                  "(P50 / P99 / max), the P99 of the per-set maxima, counter-examples (sets where the fused max exceeds "
                  "eager's) and the control: fused with per-op rounding emulated against eager (max ULP apart). "
                  "f32 is the floor control.")
    table, verdicts = [], {}
    for f, b in rows:
        table.append([f["chain"], f["dtype"], f["dist"], int(b["sets"]),
                      f"{b['eager_ulp_p50']:.3g} / {b['eager_ulp_p99']:.3g} / {b['eager_ulp_max']:.4g}",
                      f"{b['fused_ulp_p50']:.3g} / {b['fused_ulp_p99']:.3g} / {b['fused_ulp_max']:.4g}",
                      f"{b['eager_setmax_p99']:.4g} / {b['fused_setmax_p99']:.4g}",
                      "yes" if b["fused_le_eager_p99"] == 1 else "NO", "yes" if b["fused_le_eager_max"] == 1 else "NO",
                      int(b["counterexamples"]), f"{b['emulated_vs_eager_max_ulp']:.4g}"])
        if f["dtype"] != "f32":
            ok = verdicts.setdefault(f["chain"], [True, []])
            ok[0] &= b["fused_le_eager_p99"] == 1 and b["fused_le_eager_max"] == 1
            ok[1].append(f"{f['dtype']}/{f['dist']}: P99 {b['fused_ulp_p99']:.3g} vs {b['eager_ulp_p99']:.3g}, "
                         f"max {b['fused_ulp_max']:.4g} vs {b['eager_ulp_max']:.4g}")
    doc.table(["chain", "dtype", "inputs", "sets", "eager ULP P50 / P99 / max", "fused ULP P50 / P99 / max",
               "per-set max P99 eager / fused", "fused ≤ eager P99", "fused ≤ eager max", "counter-examples",
               "emulated vs eager"], table)
    _b_plots(doc, results_dir)
    _b_counterexamples(doc, results_dir)
    for chain, (ok, evidence) in verdicts.items():
        doc.verdict(f"{chain}: fused error ≤ eager error (P99 and max)", "supported" if ok else "contradicted",
                    "; ".join(evidence) + ".")


def _b_evidence(results_dir: pathlib.Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results_dir / "dumps" / "bench_accumulated_error").glob("B_*.json"))]


def _b_plots(doc, results_dir: pathlib.Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    evidence = [e for e in _b_evidence(results_dir) if e["dtype"] == "f16"]
    if not evidence:
        doc.paragraph("No B evidence files in dumps/ (run with a dump directory, as tools/run does).")
        return
    chains = list(dict.fromkeys(e["chain"] for e in evidence))
    fig, axes = plt.subplots(2, len(chains), figsize=(4 * len(chains), 7), squeeze=False)
    for col, chain in enumerate(chains):
        for e in evidence:
            if e["chain"] != chain:
                continue
            style = "-" if e["distribution"].startswith("U") else "--"
            for path, color in (("eager", "#c0392b"), ("fused", "#2471a3")):
                values = np.maximum(np.asarray(e[f"{path}_set_max_ulp"]), 1e-3)
                label = f"{path}, {'uniform' if style == '-' else 'heavy'}"
                axes[0][col].hist(np.log10(values), bins=30, histtype="step", color=color, linestyle=style, label=label)
                xs = np.sort(values)
                axes[1][col].plot(xs, np.arange(1, len(xs) + 1) / len(xs), style, color=color, label=label)
        axes[0][col].set_title(chain)
        axes[0][col].set_xlabel("log10 per-set max ULP")
        axes[1][col].set_xscale("log")
        axes[1][col].set_xlabel("per-set max ULP")
        axes[1][col].set_ylabel("CDF")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("B (f16): per-set maximum ULP error against fp64, eager vs fused")
    fig.tight_layout()
    doc.figure(fig, "b_set_maxima", "B histograms and CDFs of the per-set maxima")
    plt.close(fig)


def _b_counterexamples(doc, results_dir: pathlib.Path):
    rows = []
    for e in _b_evidence(results_dir):
        for c in e["counterexamples"]:
            rows.append([e["chain"], e["dtype"], "uniform" if e["distribution"].startswith("U") else "heavy", c["set"],
                         c["seed"], c["element"], f"{c['fused_ulp_max']:.4g}", f"{c['eager_ulp_max']:.4g}",
                         c["first_divergent_op"]])
    doc.paragraph(f"Counter-examples: {len(rows)} input sets where the fused max ULP error exceeds eager's (the full "
                  "list with per-op errors is in dumps/bench_accumulated_error/; the first 25 below). 'first divergent "
                  "op' is the first op, in graph order, whose fused intermediate (stored by a probe run with every op "
                  "as an output) has a larger max ULP error against fp64 than eager's.")
    if rows:
        doc.table(["chain", "dtype", "inputs", "set", "seed", "element", "fused ULP", "eager ULP", "first divergent op"],
                  rows[:25])


# ---- E
def render_e(doc, runs, results_dir: pathlib.Path):
    doc.heading("E — end-to-end training alignment (claim §3.2 in practice)")
    if "training_alignment" not in runs:
        doc.paragraph("Not measured: this build has no training suite (task E needs a model, data and an optimizer on the "
                      "engine, and an accelerator for the plan's GPT-2 run). No curves, no final table, no verdict.")
