"""Task C2's section: each reduction tile's sum against every other's and against fp64, or the same sum at
1 and 2 threads where the thread count is the order knob."""

from __future__ import annotations

from reports.claims import c2 as claim
from reports.numbers import num, pct, yesno
from reports.sections import show
from reports.sections.plots import close, figure


def render(s, result):
    facts = claim.facts(result)
    show(s, claim.verdicts(facts))
    if facts.framework or not facts.tiles:
        _c2_threads_table(s, facts.threads)
        return
    shown, dropped, groups, where = facts.shown, facts.dropped, facts.groups, facts.apart
    _c2_heatmaps(s, shown, groups, where)
    _c2_threads_table(s, facts.threads)
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
