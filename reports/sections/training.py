"""Task E: end-to-end training alignment, eager vs fused (bench_training_alignment).

render_e(doc, runs, results_dir) has the shape of the other plan sections: the suite's JSON
(counters per dtype), its evidence files and the per-run CSVs in dumps/bench_training_alignment/."""
from __future__ import annotations

import csv
import json
import pathlib

from .common import benchmarks, name_fields, suite_run

SUITE = "training_alignment"
DUMPS = "bench_training_alignment"


def _read_csv(path: pathlib.Path) -> dict[str, list[float]]:
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return {key: [float(r[key]) for r in rows] for key in (rows[0].keys() if rows else [])}


def _runs_for(dump_dir: pathlib.Path, dtype: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """CSV columns of the eager and fused runs of one dtype, by seed."""
    eager, fused = {}, {}
    for path in sorted(dump_dir.glob(f"*_{dtype}_seed*.csv")):
        parts = path.stem.split("_")  # <config>_<device>_<mode>_<dtype>_seed<N>
        if len(parts) < 5 or parts[-2] != dtype:
            continue
        seed = int(parts[-1].removeprefix("seed"))
        (fused if parts[-3] == "fused" else eager)[seed] = _read_csv(path)
    return eager, fused


def _plot(doc, dtype: str, eager: dict[int, dict], fused: dict[int, dict]):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    metrics = [("train_loss", "train loss"), ("eval_loss", "eval loss"), ("grad_norm", "grad norm")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 3.6))
    for ax, (key, label) in zip(axes, metrics):
        if eager:
            steps = np.asarray(next(iter(eager.values()))["step"])
            stack = np.asarray([run[key] for run in eager.values() if len(run[key]) == len(steps)])
            ax.fill_between(steps, stack.min(axis=0), stack.max(axis=0), color="#f5b7b1", alpha=0.6,
                            label=f"eager seed band ({len(stack)} seeds)")
            for seed, run in sorted(eager.items()):
                ax.plot(run["step"], run[key], color="#c0392b", lw=0.8, label=f"eager seed {seed}")
        for seed, run in sorted(fused.items()):
            ax.plot(run["step"], run[key], color="#2471a3", lw=1.2, ls="--", label=f"fused seed {seed}")
        ax.set_xlabel("step")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"E ({dtype} activations): eager and fused training curves overlaid")
    fig.tight_layout()
    doc.figure(fig, f"e_curves_{dtype}", f"E {dtype}: train loss, eval loss and grad norm, eager seeds vs fused")
    plt.close(fig)


def render_e(doc, runs, results_dir: pathlib.Path):
    doc.heading("E — end-to-end training alignment (claim §3.2 in practice)")
    run = suite_run(doc, runs, SUITE)
    if run is None:
        return
    c = run["context"]
    doc.paragraph(f"Profile {c.get('fusebench_profile', '?')}, device {c.get('fusebench_device', '?')}, "
                  f"{c.get('compiler', '?')}, {c.get('cpu_model', '?')}, commit {c.get('git_revision', '?')}.")
    dump_dir = results_dir / "dumps" / DUMPS
    evidence = {}
    for path in sorted(dump_dir.glob("E_alignment_*.json")):
        e = json.loads(path.read_text())
        evidence[e["dtype"]] = e
    if evidence:
        e = next(iter(evidence.values()))
        cfg, data = e["config"], e["data"]
        m = cfg["model"]
        doc.paragraph(
            f"Model: GPT-2-style decoder ({m['layers']} layers, {m['heads']} heads, width {m['width']}, context "
            f"{m['context']}, {cfg['parameters']:,} parameters, tied output projection), batch {cfg['batch']}, AdamW "
            f"(lr {cfg['lr']}, warm-up {cfg['warmup_steps']} steps then cosine to {cfg['min_lr_fraction']}×, weight decay "
            f"{cfg['weight_decay']}, betas {cfg['beta1']}/{cfg['beta2']}), gradient clipping at {cfg['grad_clip']}; "
            f"fp32 master weights, activations in the dtype named, fp16 with dynamic loss scaling. {e['steps']} steps, "
            f"a CSV row every {e['csv_every']} step(s). Data: {', '.join(pathlib.Path(f).name for f in data['files'])} "
            f"(Debian's fortunes, byte-level tokens): {data['train_tokens']:,} training tokens, {data['eval_tokens']:,} "
            "evaluation tokens (the text's tail). Eager and fused of one seed see the same batches in the same order.")
    rows = [(name_fields(b["name"]), b) for b in benchmarks(run, "E/") if not b.get("error_occurred")]
    errors = [b for b in benchmarks(run, "E/") if b.get("error_occurred")]
    for b in errors:
        doc.paragraph(f"{b['name']}: did not run ({b.get('error_message', '?')}).")
    table, speed, kinds = [], [], []
    for f, b in rows:
        if f["family"] != "E" or "Alignment" not in b["name"]:
            continue
        dtype = f["dtype"]
        eager, fused = _runs_for(dump_dir, dtype)
        if eager or fused:
            _plot(doc, dtype, eager, fused)
        table.append([dtype, int(b["steps"]), f"{b['eager_final_eval_loss']:.4f}", f"{b['fused_final_eval_loss']:.4f}",
                      f"{b['final_eval_loss_diff']:+.2e}", f"{b['seed_band_final']:.2e}", f"{b['max_gap']:.2e}",
                      f"{b['max_gap_over_band']:.3g}", int(b["excursions"]),
                      "—" if b["first_excursion_step"] < 0 else
                      f"step {int(b['first_excursion_step'])}, {b['first_excursion_size']:.2e} beyond"])
        speed.append([dtype, f"{b['eager_tokens_per_s']:.0f}", f"{b['fused_tokens_per_s']:.0f}", f"{b['fused_speedup']:.2f}×",
                      f"{b['fused_first_step_s']:.1f} s"])
        for mode in ("eager", "fused"):
            parts = {k.removeprefix(f"{mode}_ms_"): v for k, v in b.items() if k.startswith(f"{mode}_ms_")}
            total = sum(parts.values())
            kinds.append([dtype, mode] + [f"{parts.get(k, 0):.2f}" for k in ("matmul", "rowwise", "reduction", "pointwise", "copy", "executor_overhead")]
                         + [f"{total:.2f}"])
        ok = b["excursions"] == 0
        where = ("" if ok else f" First excursion at step {int(b['first_excursion_step'])}, "
                 f"{b['first_excursion_size']:.2e} beyond the band; {int(b['excursions'])} of {int(b['rows'])} rows outside.")
        doc.verdict(f"{dtype}: the eager-vs-fused eval-loss gap stays within the eager seed-to-seed band",
                    "supported" if ok else "contradicted",
                    f"max gap {b['max_gap']:.2e} = {b['max_gap_over_band']:.3g}× the band at its row; final eval loss "
                    f"eager {b['eager_final_eval_loss']:.4f} vs fused {b['fused_final_eval_loss']:.4f}, seed band "
                    f"{b['seed_band_final']:.2e}.{where}")
    if table:
        doc.table(["dtype", "steps", "eager final eval loss", "fused final eval loss", "fused − eager", "seed band (final)",
                   "max gap", "max gap / band", "rows outside band", "first excursion"], table)
        doc.paragraph("Tokens per second (steps after the first, evaluations excluded; eager is the mean of its seeds) "
                      "and the first fused step, which compiles the kernels (zero on a warm kernel cache).")
        doc.table(["dtype", "eager tokens/s", "fused tokens/s", "fused speed-up", "fused first step"], speed)
        doc.paragraph("Executor time per training step (ms) by kernel kind (eager ops binned by the kind of kernel they "
                      "would be in; 'copy' is eager's materialised views; the rest of a step is host work: one-hot "
                      "batches, gradient gathering, and the fused executor's planning and emission).")
        doc.table(["dtype", "mode", "matmul", "rowwise", "reduction", "pointwise", "copy", "executor overhead", "total"], kinds)
    for f, b in rows:
        if "Control" in b["name"]:
            doc.verdict("fp32 control: eager and fused agree to about 1e-6 relative over the first steps",
                        "supported" if b["max_rel_loss_diff"] <= 1e-5 else "contradicted",
                        f"max relative train-loss difference {b['max_rel_loss_diff']:.2e} over {int(b['steps'])} steps "
                        f"(first step that differs at all: {int(b['first_step_differing'])}, -1 = none).")
    peers = [b for f, b in rows if "Peer" in b["name"]]
    if peers:
        doc.table(["peer", "tokens/s"], [[b["name"], f"{b.get('tokens_per_s', 0):.0f}"] for b in peers])
