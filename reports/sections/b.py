"""Task B's section: how a chain is decided, each judged part's interval, the conditioned and pooled
errors, the metrics neighbouring tools use, the f32 floor control, the per-set maxima and the
counter-examples with their mechanisms."""

from __future__ import annotations

from reports.claims import b as claim
from reports.fusion_switches import mechanism_text
from reports.numbers import num, pct, yesno
from reports.results import b_distribution, evidence, rows
from reports.sections import show
from reports.sections.plots import EAGER, FUSED, close, figure

_dist = b_distribution


def render(s, result):
    run = result.data
    facts = claim.facts(result)
    verdicts = claim.verdicts(facts)
    show(s, verdicts)
    rows_ = rows(run, "B/")
    if facts.nothing is not None:
        return
    evidence_files = [e for _, e in evidence(result, "B_*.json")]
    chains = list(dict.fromkeys(f["chain"] for f, _ in rows_))
    cfg = claim.config()
    deciding = cfg["measures"][cfg["deciding_measure"]]
    s.paragraph(
        f"How a chain is decided: on the {deciding['label']}, because {deciding['why']}. The ULP error, the plan's "
        "pooled rule and torch's accuracy rule are judged beside it, each with its own outcome; the intervals "
        "of every part are in the table below the verdicts."
    )
    _b_intervals(s, verdicts)
    _b_conditioned(s, rows_)
    _b_neighbour_metrics(s, {chain.chain: chain.cells for chain in facts.chains})
    _b_plots(s, evidence_files, chains)
    s.paragraph(
        "Per chain × dtype × input distribution: ULP error against fp64 pooled over all elements of all input "
        "sets, the P99 of the per-set maxima, and counter-example sets ("
        + (
            "fused's set max conditioned error above eager's beyond the margin"
            if _on_deciding_measure(evidence_files)
            else "the set's fused max ULP above its eager max"
        )
        + "). "
        "'emulated vs eager' is the control: fused with per-op rounding emulated, max ULP apart from eager "
        "(0 = the fused and eager difference is rounding between ops and nothing else)."
    )
    table = []
    for f, b in rows_:
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
            for f, b in rows_
            if f["dtype"] != "f32"
        ],
        summary="Medians, absolute and relative errors of the same rows",
    )
    _b_floor(s, rows_)
    _b_counterexamples(s, evidence_files)


def _b_intervals(s, verdicts):
    """Each chain's judged parts on every measure (the deciding one first): statistic, interval of
    fused − eager, outcome (a share of sets worse stands beside its magnitude, not deciding), and
    for an undecided part the sets that would decide it."""
    table = []
    for v in verdicts:
        if not isinstance(v.figures, claim.Figures):
            continue
        for rank, (measure, verdict) in enumerate(v.figures.measures):
            label = claim.measures()[measure]["label"]
            label = f"{label} (deciding)" if rank == 0 else label[:1].upper() + label[1:]
            m = verdict.figures
            rows = []
            for where, part in m.parts:
                rows.append((where, part, False))
                rows += [(f"{b.output} {b.label}", claim.part_verdict(b), True) for b in part.figures.beside]
            for where, part, beside in rows:
                shown = claim.words(part)
                outcome = f"({shown.label})" if beside else shown.label
                table.append([v.member, label, where, shown.key_figure, outcome, claim.to_decide_text(part)])
    if not table:
        return
    cfg = claim.config()
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
        + " (tools/thresholds.json). The share of sets worse stands beside its statistic's magnitude: its "
        "outcome, in parentheses, does not decide. An undecided part's sets to decide: n · (half-width ÷ |estimate − "
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
        if "eager_cond_p99" in b
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
            same = claim.torch_same_sets(c)

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
    tol = claim.config()["torch_same"]
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
    alike = 0
    for f, b in floor:
        same = all(b[f"eager_{k}"] == b[f"fused_{k}"] for k in ("ulp_max", "ulp_p99", "abs_err_max"))
        alike += same
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
        caption="f32 floor control: eager's own ULP figures, "
        + (
            "and fused's are the same in every row. "
            if alike == len(floor)
            else f"and fused's differ in {len(floor) - alike} of {len(floor)} rows (judged with the other "
            "dtypes in the verdicts above). "
        )
        + f"The maxima reach "
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

    if not evidence:
        s.paragraph("No B evidence files in the dump directory (tools/run writes them).")
        return
    # the deciding measure's set maxima where every file carries them, else the ULP error's
    columns = [claim.per_set_statistics(e) for e in evidence]
    name = "cond_max" if all("cond_max" in c for c in columns) else "ulp_max"
    measured = [(e, c[name]) for e, c in zip(evidence, columns) if name in c]
    if not measured:
        s.paragraph("No per-set figures in the B evidence files (tools/run writes them).")
        return
    evidence = [e for e, _ in measured]
    set_maxima = {id(e): pair for e, pair in measured}
    label = "conditioned error (units of the error bound)" if name == "cond_max" else "ULP error"
    chains = [c for c in chain_order if any(e["chain"] == c for e in evidence)]
    dtypes = [d for d in ("f32", "f16", "bf16") if any(e["dtype"] == d for e in evidence)]
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
                fused, eager = set_maxima[id(e)]
                if np.array_equal(fused, eager, equal_nan=True):
                    coincide.append(dist)
                for path, color, values_of_path in (("eager", EAGER, eager), ("fused", FUSED, fused)):
                    finite = values_of_path[np.isfinite(values_of_path)]
                    if finite.size == 0:
                        continue
                    xs = np.sort(np.maximum(finite, 1e-2))
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
    fig.supxlabel(f"per-set max {label} against fp64 (log axis where the values span decades)", fontsize=10)
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncol=min(4, max(2, len(chains) + 1)))
    s.figure(
        fig,
        "b_set_maxima",
        f"B: distribution (CDF) of each input set's maximum {label} against fp64, eager (thick) vs fused "
        "(thin), every dtype judged; further left is better.",
    )
    close(fig)


def _on_deciding_measure(evidence: list[dict]) -> bool:
    """Whether the evidence takes counter-examples on the deciding measure (it states its margin);
    older evidence took them on the ULP error."""
    return any("counterexample_margin" in e for e in evidence)


def _b_counterexamples(s, evidence):
    conditioned = _on_deciding_measure(evidence)
    rule = next((e["counterexample_margin"].get("rule") for e in evidence if "counterexample_margin" in e), None)
    rows = []
    for e in evidence:
        for c in e["counterexamples"]:
            if conditioned:
                severity = (c.get("fused_cond_max") or 0.0) - (c.get("eager_cond_max") or 0.0)
            else:
                severity = c["fused_ulp_max"] - c["eager_ulp_max"]
            rows.append((severity, e, c))
    if not rows:
        s.paragraph(
            f"Counter-examples: none (no input set where {rule})."
            if conditioned
            else "Counter-examples: none (no input set where the fused max ULP error exceeds eager's)."
        )
        _b_beside_counterexamples(s, evidence)
        return
    rows.sort(key=lambda r: -r[0])
    groups = {}
    for severity, e, c in rows:
        groups.setdefault((e["chain"], e["dtype"], _dist(e["distribution"])), []).append((severity, e, c))

    def line(severity, e, c):
        figures = [num(c.get("fused_cond_max")), num(c.get("eager_cond_max")), num(severity)] if conditioned else []
        return [
            e["chain"],
            e["dtype"],
            _dist(e["distribution"]),
            num(c["set"]),
            num(c["seed"]),
            num(c["element"]),
            num(c.get("reference_value")),
            *figures,
            num(c["fused_ulp_max"]),
            num(c["eager_ulp_max"]),
            *([] if conditioned else [num(severity)]),
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
        *(["fused (cond)", "eager (cond)", "fused − eager (units of bound)"] if conditioned else []),
        "fused (ULP)",
        "eager (ULP)",
        *([] if conditioned else ["fused − eager (ULP)"]),
        "conditioning",
        "first divergent op",
        "mechanism",
    ]
    what = (
        f"input sets where {rule} (the set-max conditioned error, the deciding measure)"
        if conditioned
        else "input sets where the fused max ULP error exceeds eager's (evidence written before counter-examples "
        "were taken on the deciding measure)"
    )
    unit = "units of bound" if conditioned else "ULP"
    s.table(
        [
            "chain",
            "dtype",
            "inputs",
            "counter-example sets",
            "of them ill-conditioned",
            f"worst fused − eager ({unit})",
        ],
        [
            [k[0], k[1], k[2], num(len(v)), num(sum(c.get("conditioning") == "ill" for _, _, c in v)), num(v[0][0])]
            for k, v in sorted(groups.items(), key=lambda kv: -kv[1][0][0])
        ],
        caption=f"Counter-examples: {num(len(rows))} {what}, by chain, dtype and input distribution, worst first:",
    )
    worst = sorted([r for v in groups.values() for r in v[:3]], key=lambda r: -r[0])
    s.table(
        header,
        [line(*r) for r in worst],
        caption="The three most severe of each group, by severity (fused − eager). 'first divergent op' is the first op, "
        "in graph order, whose fused intermediate (from a probe run storing every op) is worse than eager's "
        + ("beyond the margin on that op's own value and bound" if conditioned else "in max ULP error against fp64")
        + ". 'mechanism': the mechanism, and the ops, whose switch to eager's "
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
    _b_beside_counterexamples(s, evidence)


def _b_beside_counterexamples(s, evidence):
    """What the evidence sets beside the counter-examples and never counts among them: sets worse fused
    in ULP only at cancellation, or within the margin; sets where both paths miss fp64 far beyond the
    bound (a finding about the kernels, not about fusion), with where it arises and the bound checked."""
    keys = ("at_cancellation", "ulp_within_margin", "shared_errors")
    cases = [e for e in evidence if any(k in e for k in keys)]
    if not cases:
        return

    def count(e, key):
        return num((e.get(key) or {}).get("count"))

    s.table(
        [
            "chain",
            "dtype",
            "inputs",
            "at cancellation: neither path accurate",
            "ULP-worse within the margin",
            "shared errors",
        ],
        [[e["chain"], e["dtype"], _dist(e["distribution"]), *(count(e, k) for k in keys)] for e in cases],
        caption="Not counter-examples, per case: sets where fused's set max ULP error exceeds eager's at an "
        "ill-conditioned output (the result cancels, so neither path can be accurate there: never a "
        "counter-example, never on the switch list); sets worse fused in ULP but not beyond the margin on "
        "the conditioned error; and sets where both paths' set max conditioned error exceeds the threshold "
        + num(next((e["shared_errors"].get("threshold") for e in cases if e.get("shared_errors")), None))
        + " (shared errors: a finding about the kernels, eager's as much as fused's, not about fusion).",
    )
    shared = [
        (e, x) for e in cases for x in (e.get("shared_errors") or {}).get("examples") or [] if isinstance(x, dict)
    ]
    if shared:
        rows = []
        for e, x in sorted(shared, key=lambda ex: -(ex[1].get("eager_cond_max") or 0)):
            check = x.get("bound_check") or {}
            rows.append(
                [
                    e["chain"],
                    e["dtype"],
                    _dist(e["distribution"]),
                    num(x.get("set")),
                    num(x.get("eager_cond_max")),
                    num(x.get("fused_cond_max")),
                    num(x.get("eager_ulp_max")),
                    num(x.get("fused_ulp_max")),
                    str(x.get("arises_at") or check.get("op") or "—"),
                    str(check.get("finding") or "—"),
                ]
            )
        s.table(
            [
                "chain",
                "dtype",
                "inputs",
                "set",
                "eager (cond)",
                "fused (cond)",
                "eager (ULP)",
                "fused (ULP)",
                "arises at",
                "the bound checked there",
            ],
            rows,
            caption="Shared errors, the worst sets of each case: both paths miss fp64 by far more than the bound "
            "allows. 'arises at' is the op where eager's error first exceeds the threshold; the bound is checked "
            "there (subnormal values, the function's own condition, its argument's rounding).",
            wrap=("the bound checked there",),
        )
