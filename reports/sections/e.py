"""Task E's section: the model and data, each dtype's curves of eager seeds against fused, the skipped
steps, the gap to the seed band, the speed measured interleaved, the executor time by kernel kind,
GPT-2 small's projected step time and the peer trainers (bench_training_alignment's JSON, its
evidence files and the per-run CSVs in its dump directory)."""

from __future__ import annotations

import pathlib

from reports.claims import e as claim
from reports.fusion_switches import mechanism_text
from reports.numbers import num
from reports.sections import show
from reports.sections.plots import EAGER, FUSED, close, figure

# the trainer's step time by kernel kind (KernelTrace::kind); a framework device's whole compiled
# graph is one "graph" kernel
KERNEL_KINDS = ("matmul", "rowwise", "reduction", "pointwise", "indexed", "copy", "graph", "executor_overhead")


def _plot(s, dtype: str, eager: dict[int, dict], fused: dict[int, dict]):
    import numpy as np

    metrics = [("train_loss", "train loss"), ("eval_loss", "eval loss"), ("grad_norm", "grad norm")]
    fig, axes = figure(10.5, 3.4, 1, len(metrics))
    handles = {}
    for ax, (key, label) in zip(axes[0], metrics):
        if eager:
            steps = np.asarray(next(iter(eager.values()))["step"])
            stack = np.asarray([run[key] for run in eager.values() if len(run[key]) == len(steps)])
            handles[f"eager seed band ({len(stack)} seeds)"] = ax.fill_between(
                steps, stack.min(axis=0), stack.max(axis=0), color="#f5b7b1", alpha=0.6
            )
            for _seed, run in sorted(eager.items()):
                (handles["eager, one line per seed"],) = ax.plot(run["step"], run[key], color=EAGER, lw=0.8)
        for _seed, run in sorted(fused.items()):
            (handles["fused"],) = ax.plot(run["step"], run[key], color=FUSED, lw=1.2, ls="--")
        ax.set_xlabel("step")
        ax.set_title(label)
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncol=3)
    s.figure(fig, f"e_curves_{dtype}", f"E {dtype}: train loss, eval loss and grad norm, eager seeds vs fused")
    close(fig)


def _steps_text(steps: list[int]) -> str:
    """'step 3', or 'steps 1-40 (40 steps)' for a run of consecutive ones, else 'steps 3, 9, 12'."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps == list(range(steps[0], steps[0] + len(steps))):
        return f"steps {steps[0]}–{steps[-1]} ({len(steps)} steps)"
    return "steps " + ", ".join(map(str, steps[:8])) + (f" … ({len(steps)} steps)" if len(steps) > 8 else "")


def render(s, result):
    doc = s
    facts = claim.facts(result)
    show(s, claim.verdicts(facts))
    evidence = facts.evidence
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
            "evaluation tokens (the text's tail). Eager and fused of one seed see the same batches in the same order."
        )
    rows = facts.rows
    for _, b in facts.skipped:
        doc.paragraph(f"{b['name']}: did not run ({b.get('error_message', '?')}).")
    table, speed, kinds = [], [], []
    for alignment in facts.alignments:
        dtype, b, eager, fused, e = alignment.dtype, alignment.row, alignment.eager, alignment.fused, alignment.evidence
        if eager or fused:
            _plot(s, dtype, eager, fused)
        for mode in ("eager", "fused"):
            # per seed and first non-finite node: the steps it held (a node that breaks every step
            # is said once)
            skipped = []
            for seed, items in sorted(e.get(f"{mode}_skipped", {}).items()):
                by_node: dict[str, list[int]] = {}
                for x in items:
                    by_node.setdefault(x["first_nonfinite_node"] or "?", []).append(int(x["step"]))
                skipped += [f"seed {seed}, {_steps_text(steps)}: {node}" for node, steps in by_node.items()]
            if skipped:
                doc.paragraph(
                    f"{dtype} {mode}: steps skipped for a non-finite gradient (no optimizer update"
                    f"{'; dynamic loss scaling halves the scale' if dtype == 'f16' else ''}), with the first node in graph order that held inf/NaN: {'; '.join(skipped[:12])}"
                    f"{' …' if len(skipped) > 12 else ''}."
                )
        table.append(
            [
                dtype,
                int(b["steps"]),
                num(b["eager_final_eval_loss"], 4),
                num(b["fused_final_eval_loss"], 4),
                num(b["final_eval_loss_diff"]),
                num(b["seed_band_final"]),
                num(b["max_gap"]),
                num(b["max_gap_over_band"]),
                int(b["excursions"]),
                "—"
                if b["first_excursion_step"] < 0
                else f"step {int(b['first_excursion_step'])}, {b['first_excursion_size']:.2e} beyond",
            ]
        )
        # Older runs had no interleaved timing: their speed-up was the alignment runs' own ratio.
        interleaved = "fused_faster_rounds" in b
        runs_ratio = b.get("fused_speedup_runs", b["fused_speedup"] if "fused_median_step_ms" in b else None)
        speed.append(
            [
                dtype,
                num(round(b["eager_tokens_per_s"])),
                num(round(b["fused_tokens_per_s"])),
                f"{num(b['eager_median_step_ms'])} / {num(b['fused_median_step_ms'])}" if interleaved else "—",
                f"{num(b['fused_speedup'])}×" if interleaved else "—",
                f"{round(100 * b['fused_faster_rounds'])} % of {int(b['timing_rounds'])}" if interleaved else "—",
                f"{num(runs_ratio)}×" if runs_ratio is not None else "—",
                f"{num(b.get('fused_speedup_mean', b['fused_speedup']))}×",
                f"{num(b['fused_first_step_s'])} s",
            ]
        )
        for mode in ("eager", "fused"):
            parts = {k.removeprefix(f"{mode}_ms_"): v for k, v in b.items() if k.startswith(f"{mode}_ms_")}
            total = sum(parts.values())
            kinds.append([dtype, mode] + [num(parts.get(k, 0)) for k in KERNEL_KINDS] + [num(total)])
        if "excursion_attribution" in e:
            found = e["excursion_attribution"]
            doc.paragraph(
                f"{dtype}: the mechanism of the {num(found.get('excursions', '?'))} rows outside the band: "
                f"{mechanism_text({'attribution': found})}. The suite retrained fused with graph-wide switches (each "
                "sets one mechanism to eager's behaviour for the whole training graph: "
                f"{found.get('candidates', '?')} candidates, {found.get('reruns', '?')} training runs) and kept the "
                f"smallest set that meets the criterion ({found.get('criterion', 'no row outside the band')})."
            )
    if table:
        doc.table(
            [
                "dtype",
                "steps",
                "eager final eval loss",
                "fused final eval loss",
                "fused − eager",
                "seed band (final)",
                "max gap",
                "max gap / band",
                "rows outside band",
                "first excursion",
            ],
            table,
        )
        doc.paragraph(
            "Speed. The speed-up is measured with the two modes interleaved: rounds of one turn each of eager "
            "and fused training steps (one untimed step, which refills the caches the other mode's turn "
            "evicted, then the timed steps), the order alternating from round to round, so that a burst of "
            "other work on this shared machine falls on both modes alike. It is the ratio of the two modes' "
            "median step times over those turns; beside it, the share of rounds whose fused turn (its median "
            "step) beat the eager turn of the same round. The alignment runs (each mode's run after the "
            "other's) give tokens per second (steps after the first, evaluations excluded; eager is the mean "
            "of its seeds) and their own ratios, of the median step times (eager: every step of its seeds) and "
            "of the means; the first fused step compiles the kernels (near zero on a warm kernel cache)."
        )
        doc.table(
            [
                "dtype",
                "eager tokens/s",
                "fused tokens/s",
                "interleaved median step ms (eager / fused)",
                "fused speed-up",
                "rounds fused faster",
                "runs: ratio of medians",
                "runs: ratio of means",
                "fused first step",
            ],
            speed,
        )
        doc.paragraph(
            "Executor time per training step (ms) by kernel kind, over the interleaved timed steps (eager ops binned by the kind of kernel they "
            "would be in; 'indexed' is the token embedding's gather_rows and its scatter_add_rows backward; "
            "'copy' is eager's materialised views, which fused kernels fold into their index arithmetic (the "
            "matmul kernels' operand gathers); 'whole graph' is a framework device's compiled graph, one kernel to "
            "fusebench; 'executor overhead' is the executors' own time around their "
            "kernels: allocation, operand lookup and, for fused, finding the graph's prepared kernels; the rest "
            "of a step is host work: batches and gradient gathering)."
        )
        doc.table(
            [
                "dtype",
                "mode",
                "matmul",
                "rowwise",
                "reduction",
                "pointwise",
                "indexed",
                "copy",
                "whole graph",
                "executor overhead",
                "total",
            ],
            kinds,
        )
    steps = [(f, b) for f, b in rows if "StepTime" in b["name"]]
    if steps:
        doc.paragraph(
            "GPT-2 small's shape (gpt2-124m config: 12 layers, 12 heads, width 768, context 1024, byte-level "
            "vocabulary) is for an accelerator; here one bf16 training step is measured at batch 1 and the "
            "config's 1000 steps at its batch are projected linearly in the batch."
        )
        doc.table(
            [
                "mode",
                "parameters",
                "step (batch 1)",
                "first step",
                "tokens/s",
                f"projected 1000 steps at batch {int(steps[0][1]['batch_config'])}",
            ],
            [
                [
                    f["mode"],
                    f"{int(b['parameters']):,}",
                    f"{num(b['step_s_batch1'])} s",
                    f"{num(b['first_step_s'])} s",
                    num(round(b["tokens_per_s"])),
                    f"{num(b['projected_1000_steps_h'])} h",
                ]
                for f, b in steps
            ],
        )
    for b in [b for f, b in rows if "Peer" in b["name"]]:
        doc.paragraph(
            f"Peer (PyTorch on this CPU, same config and math, bf16 autocast, {int(b['steps'])} steps, tokens/s "
            "over steps 3 and on, after compilation and any recompilation; OpenMP waits passively): the "
            "engine's fused trainer against PyTorch eager and torch.compile."
        )
        table = []
        for mode in ("eager", "compile"):
            rate = b.get(f"torch_{mode}_tokens_per_s")
            if rate is None:
                table.append([f"torch {mode}", "did not run", "—", "—"])
                continue
            table.append(
                [
                    f"torch {mode}",
                    num(round(rate)),
                    f"{num(b.get(f'torch_{mode}_first_step_s', 0))} s",
                    f"{num(b.get(f'fused_over_torch_{mode}', 0))}×",
                ]
            )
        table.append(["fusebench fused", num(round(b["engine_fused_tokens_per_s"])), "—", "1×"])
        doc.table(["trainer", "tokens/s", "first step", "fusebench fused / this"], table)
