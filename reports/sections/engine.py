"""The engine's section: eager vs fused speed against the memory copy, each kernel's arithmetic ceiling
and the fp32 peak, all measured in the same run; on a framework device, its own run's paths."""

from __future__ import annotations

from reports.claims import engine as claim
from reports.claims import shares
from reports.numbers import gbps, num, pct
from reports.results import axes, copy_source, seconds
from reports.sections import show
from reports.sections.plots import EAGER, FUSED, close, figure

PATHS = ["eager", "fused", "fused_fma"]
KERNEL_THREADS = "on the kernels' threads"  # where the host's memcpy yardstick runs
KERNELS = ["Chain", "LayerNorm", "Softmax", "Matmul"]


def _shape(run: dict, b: dict) -> str:
    f = axes(run, b)
    if "shape" in f:
        return f["shape"]
    return f"n = {num(int(f['n']))}" if f.get("n", "").isdigit() else "—"


def _kernels(b: dict) -> list[tuple[str, float]]:
    """(kernel name, its own bytes_per_second) from the benchmark's label and k<i> counters."""
    names = dict(item.split("=", 1) for item in b.get("label", "").split() if "=" in item)
    return [
        (names.get(f"k{i}", f"k{i}"), b[f"k{i}_bytes_per_second"])
        for i in range(int(b.get("kernels", 0)))
        if f"k{i}_bytes_per_second" in b
    ]


def _overhead_note(s, facts: claim.Facts):
    """Where both paths take many times what their bytes need at the copy bandwidth, the speed
    verdict compares what surrounds the kernels at this size: said beside it."""
    notes = [
        f"{o.family}: the fused kernel's {num(o.megabytes)} MB need {num(o.floor_s * 1e6)} µs at the copy bandwidth; "
        f"fused took {num(o.fused_times_floor)}× that and eager {num(o.eager_times_floor)}×"
        for o in claim.overheads(facts)
    ]
    if notes:
        s.paragraph(
            "At these sizes both paths take many times what their bytes need at the GPU's copy bandwidth, so the "
            "speed verdicts do not measure memory-bound kernels at their best: per-call overhead (launches, the "
            "framework's own work around its kernels) or slow kernels decide them: " + "; ".join(notes) + ". "
            "Larger shapes (the full profile) or kernel-level timings decide what the kernels themselves gain."
        )


def render_framework(s, run: dict, facts: claim.Facts):
    """A framework device's run: its compiled and eager paths against the same run's copy."""
    paths, copy_bw = facts.paths, facts.copy
    rows = []
    for family in KERNELS:
        eager = paths.get(family, {}).get("eager")
        for path, b in sorted(paths.get(family, {}).items()):
            speedup = seconds(eager) / seconds(b) if eager is not None and path != "eager" else None
            rows.append(
                [
                    family,
                    path,
                    _shape(run, b),
                    num(seconds(b) * 1e3),
                    f"{num(speedup)}×" if speedup else "—",
                    gbps(b.get("bytes_per_second")),
                    pct(b["bytes_per_second"] / copy_bw) if copy_bw and "bytes_per_second" in b else "—",
                    num(b.get("bridge_overhead_ms")),
                    num(b.get("ulp_max")),
                ]
            )
    s.table(
        [
            "kernel",
            "path",
            "shape",
            "time (ms)",
            "speed-up vs eager",
            "GB/s",
            "of copy",
            "bridge overhead (ms)",
            "ULP max vs fp64",
        ],
        rows,
        caption=f"The framework's own run times (measured inside it); copy {gbps(copy_bw)} GB/s"
        + (f" ({copy_source(run)}):" if copy_source(run) else ":"),
    )
    _compile_costs(s, claim.by_family(run), framework=True)


def render(s, result):
    run = result.data
    facts = claim.facts(result)
    show(s, claim.verdicts(facts))
    _overhead_note(s, facts)
    if facts.framework:
        render_framework(s, run, facts)
        return
    fam, frameworks, copy_bw, peak, ceilings = facts.paths, facts.frameworks, facts.copy, facts.peak, facts.ceilings
    _plot(s, fam, copy_bw, ceilings)
    s.paragraph(
        f"Yardsticks of this run: memory copy {gbps(copy_bw)} GB/s of traffic (read + written, "
        f"{copy_source(run) or KERNEL_THREADS}); fp32 FMA peak {num(peak['gflops']) if peak else '—'} GFLOP/s on all threads. Bandwidth counts "
        "the bytes each path moves (fused: kernel inputs and outputs; eager: every op's operands and result). "
        "fused_fma is the fused path with the FMA-contraction knob on (off by default)."
        + (
            f" The shares of the copy with an interval are medians of {_rounds(fam, frameworks)} interleaved rounds with "
            "their 95 % interval: each round the path and a memcpy of the bytes it counts on the kernels' threads, "
            "alternating run by run for at least 40 ms, so that kernel and yardstick see the same load; the verdicts "
            "rest on them."
            if _rounds(fam, frameworks)
            else ""
        )
    )
    rows = []
    for family in KERNELS:
        paths = fam.get(family, {})
        eager = paths.get("eager")
        for path in PATHS:
            b = paths.get(path)
            if b is None:
                continue
            ceiling = ceilings.get(family)
            speedup = seconds(eager) / seconds(b) if eager is not None and path != "eager" else None
            rows.append(
                [
                    family,
                    path,
                    b.get("label", "").split("=")[-1]
                    if path != "eager" or int(b.get("kernels", 0)) == 1
                    else f"{num(b.get('kernels', 0))} kernels",
                    _shape(run, b),
                    num(seconds(b) * 1e3),
                    f"{num(speedup)}×" if speedup else "—",
                    gbps(b.get("bytes_per_second")),
                    _share_cell(b, copy_bw),
                    pct(b["bytes_per_second"] / ceiling["bytes_per_second"]) if ceiling and path == "fused" else "—",
                    num(b.get("ulp_max")),
                    num(b.get("ulp_p99")),
                    f"{num(b['gflops'])} ({pct(b['gflops'] / peak['gflops'])} of peak)"
                    if "gflops" in b and peak
                    else "—",
                ]
            )
        for device, b in sorted(frameworks.get(family, {}).items()):
            rows.append(
                [
                    family,
                    f"fused on {device}",
                    "framework",
                    _shape(run, b),
                    num(seconds(b) * 1e3),
                    "—",
                    gbps(b.get("bytes_per_second")),
                    _share_cell(b, copy_bw),
                    "—",
                    num(b.get("ulp_max")),
                    num(b.get("ulp_p99")),
                    "—",
                ]
            )
    s.table(
        [
            "kernel",
            "path",
            "kernels run",
            "shape",
            "time (ms)",
            "speed-up vs eager",
            "GB/s",
            "of copy",
            "of its ceiling",
            "ULP max vs fp64",
            "ULP P99 vs fp64",
            "GEMM GFLOP/s",
        ],
        rows,
    )
    mm = fam.get("Matmul", {})
    if "eager" in mm and "fused" in mm:
        ratio = seconds(mm["fused"]) / seconds(mm["eager"])
        s.paragraph(
            f"Matmul: fused takes {num(ratio)}× eager's time ({'slower' if ratio > 1 else 'faster'} in this run). "
            "Both paths call the same GEMM (Eigen, fp32 "
            "accumulation, the same thread pool); a plain matmul has nothing to fuse, and the paths differ only in "
            "how the f16 operands are widened and the result narrowed (eager: whole-tensor conversions; fused: "
            "one task per row inside the kernel). So the gap is that conversion work or the machine's state during "
            "the run (whole-op rates: eager "
            f"{num(mm['eager'].get('gflops'))}, fused {num(mm['fused'].get('gflops'))} GFLOP/s); tools/compare "
            "on a second run tells which."
        )
    chain = fam.get("Chain", {})
    if "eager" in chain and "fused" in chain:
        speedup = seconds(chain["eager"]) / seconds(chain["fused"])
        bytes_ratio = chain["eager"]["bytes_moved"] / chain["fused"]["bytes_moved"]
        s.paragraph(
            f"Fusion speed-up on the element-wise chain: {num(speedup)}× against a ratio of bytes moved of "
            f"{num(bytes_ratio)}×."
        )
        if copy_bw:
            listing = [[name, gbps(bw), pct(bw / copy_bw)] for name, bw in _kernels(chain["eager"])]
            s.table(
                ["eager kernel of the chain", "GB/s", "of copy"],
                listing,
                summary=f"The chain's {len(listing)} eager kernels, each against the copy",
            )
    if ceilings and copy_bw:
        s.table(
            ["kernel", "ceiling GB/s", "ceiling of copy", "fused GB/s", "fused share of its ceiling"],
            [
                [
                    op,
                    gbps(c["bytes_per_second"]),
                    pct(c["bytes_per_second"] / copy_bw),
                    gbps(fam[op]["fused"]["bytes_per_second"]) if "fused" in fam.get(op, {}) else "—",
                    pct(fam[op]["fused"]["bytes_per_second"] / c["bytes_per_second"])
                    if "fused" in fam.get(op, {})
                    else "—",
                ]
                for op, c in sorted(ceilings.items())
            ],
            caption="Arithmetic ceilings (ComputeCeiling): each fused kernel's per-element work — f16 widening, the "
            "shared math, f16 narrowing — on L1-resident rows on the kernels' threads, counted in the bytes "
            "the kernel moves per element. A kernel cannot beat its ceiling however fast memory is.",
        )
    _compile_costs(s, fam, framework=False)


def _share_cell(b: dict, copy_bw: float | None) -> str:
    """The path's share of the copy: the median of its interleaved rounds with the 95 % interval where
    the run has them, else its rate over the copy timed apart."""
    rounds = shares.rounds_of(b)
    if rounds:
        return shares.interval_text(rounds)
    return pct(b["bytes_per_second"] / copy_bw) if copy_bw and "bytes_per_second" in b else pct(None)


def _rounds(fam: dict[str, dict[str, dict]], frameworks: dict[str, dict[str, dict]]) -> int:
    """The interleaved rounds behind the shares of the copy (0: the run has none)."""
    every = [b for paths in (*fam.values(), *frameworks.values()) for b in paths.values()]
    return max((r.rounds for r in map(shares.rounds_of, every) if r), default=0)


def _compile_costs(s, fam: dict[str, dict[str, dict]], framework: bool):
    """CompileCold and CacheHit: what a fused kernel's first compile costs, and a warm one."""
    cold, hit = fam.get("CompileCold", {}).get("-"), fam.get("CacheHit", {}).get("-")
    if not (cold and hit):
        return
    rounds = int(cold.get("iterations", 0))
    if not framework:
        s.paragraph(
            f"Cold compile of one fused kernel: {num(cold['compile_ms'])} ms; warm cache hit (key + artifact "
            f"SHA-256 check): {num(seconds(hit) * 1e6)} µs."
        )
        return
    s.paragraph(
        f"Cold compile of one fused kernel (the chain on 1,024 elements) in a fresh worker with an empty cache "
        f"directory: {num(cold['compile_ms'])} ms of compile and first call, {num(seconds(cold))} s a round "
        f"with the worker's start ({rounds} round{'s' if rounds != 1 else ''}). The compiled graph again, from "
        f"a new executor in the same worker: {num(seconds(hit) * 1e3)} ms a run, the bridge's round trip "
        "included."
    )


def _plot(s, fam, copy_bw, ceilings):
    import numpy as np

    if not copy_bw:
        return
    families = [f for f in KERNELS if f in fam and f != "Matmul"]
    if not families:
        return
    fig, axes = figure(8, 0.9 + 0.75 * len(families))
    ax = axes[0][0]
    colors = {"eager": EAGER, "fused": FUSED, "fused_fma": "#5dade2"}
    height = 0.8 / len(PATHS)
    for i, path in enumerate(PATHS):
        ys = np.arange(len(families)) + i * height
        values = [fam[f][path]["bytes_per_second"] / 1e9 if path in fam[f] else 0 for f in families]
        ax.barh(ys, values, height=height, color=colors[path], label=path)
    ax.axvline(copy_bw / 1e9, color="black", linestyle="--", label=f"memory copy {gbps(copy_bw)} GB/s")
    for k, f in enumerate(families):
        if f in ceilings:
            ax.plot([ceilings[f]["bytes_per_second"] / 1e9] * 2, [k - 0.15, k + 0.8], color="#a00", linewidth=2.5)
        if f in claim.targets():
            ax.plot(
                [claim.targets()[f] * copy_bw / 1e9] * 2,
                [k - 0.15, k + 0.8],
                color="#888",
                linewidth=2.5,
                linestyle=":",
            )
    ax.plot([], [], color="#a00", linewidth=2.5, label="kernel's arithmetic ceiling")
    ax.plot([], [], color="#888", linewidth=2.5, linestyle=":", label="target share of copy")
    ax.set_yticks(np.arange(len(families)) + 0.4 - height / 2, families)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s of traffic")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    s.figure(
        fig,
        "engine_bandwidth",
        "Engine: each path's bandwidth against the copy and the kernel's arithmetic "
        "ceiling, measured in the same run (Matmul is compute-bound: see its GFLOP/s in the table)",
    )
    close(fig)
