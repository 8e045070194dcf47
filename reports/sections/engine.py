"""The system under test: eager vs fused speed against the memory copy and fp32 peak of the same run."""
from __future__ import annotations

from .common import benchmarks, copy_bandwidth, gbps, name_fields, suite_run

SUITE = "engine_throughput"


def _by_family(run: dict) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for b in benchmarks(run):
        f = name_fields(b["name"])
        out.setdefault(f["family"], {})[f.get("path", "-")] = b
    return out


def _seconds(b: dict) -> float:
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


PATHS = ["eager", "fused", "fused_fma"]
TARGETS = {"Chain": 0.70, "LayerNorm": 0.50, "Softmax": 0.50}


def _kernels(b: dict) -> list[tuple[str, float]]:
    """(kernel name, its own bytes_per_second) from the benchmark's label and k<i> counters."""
    names = dict(item.split("=", 1) for item in b.get("label", "").split() if "=" in item)
    return [(names.get(f"k{i}", f"k{i}"), b[f"k{i}_bytes_per_second"])
            for i in range(int(b.get("kernels", 0))) if f"k{i}_bytes_per_second" in b]


def render(doc, runs: dict[str, dict]):
    doc.heading("Engine — eager vs fused speed")
    run = suite_run(doc, runs, SUITE)
    if run is None:
        return
    fam = _by_family(run)
    copy_bw = copy_bandwidth(run)
    peak = fam.get("Fp32Peak", {}).get("-")
    doc.paragraph(f"Yardsticks of this run: memory copy {gbps(copy_bw) if copy_bw else '?'} GB/s of traffic (read + "
                  "written, on the kernels' threads); fp32 FMA peak "
                  f"{peak['gflops'] if peak else float('nan'):.0f} GFLOP/s on all threads. Bandwidth counts the "
                  "bytes each path moves (fused: kernel inputs and outputs; eager: every op's operands and result). "
                  "fused_fma is the fused path with the FMA-contraction knob on (off by default).")
    rows = []
    verdict_lines = []
    for family in ["Chain", "LayerNorm", "Softmax", "Matmul"]:
        paths = fam.get(family, {})
        for path in PATHS:
            b = paths.get(path)
            if b is None:
                continue
            share = b["bytes_per_second"] / copy_bw if copy_bw and "bytes_per_second" in b else None
            extra = ""
            if family == "Matmul" and peak:
                extra = f"{b['gflops']:.0f} GFLOP/s = {100 * b['gflops'] / peak['gflops']:.0f} % of peak"
            rows.append([b["name"], f"{_seconds(b) * 1e3:.2f} ms", gbps(b.get("bytes_per_second", 0)),
                         f"{100 * share:.0f} %" if share is not None else "—", int(b.get("kernels", 0)),
                         f"{b.get('ulp_max', float('nan')):.3g}", f"{b.get('ulp_p99', float('nan')):.3g}", extra])
            if path == "fused" and family in TARGETS and share is not None:
                verdict_lines.append((family, share, TARGETS[family]))
    doc.table(["benchmark", "time", "GB/s", "of copy", "kernels", "ULP max vs fp64", "ULP P99", "GEMM"], rows)
    chain = fam.get("Chain", {})
    if "eager" in chain and "fused" in chain:
        speedup = _seconds(chain["eager"]) / _seconds(chain["fused"])
        bytes_ratio = chain["eager"]["bytes_moved"] / chain["fused"]["bytes_moved"]
        doc.paragraph(f"Fusion speed-up on the element-wise chain: {speedup:.2f}x against a ratio of bytes moved of "
                      f"{bytes_ratio:.2f}x.")
        if copy_bw:
            eager_kernels = _kernels(chain["eager"])
            listing = ", ".join(f"{name} {gbps(bw)} GB/s ({100 * bw / copy_bw:.0f} %)" for name, bw in eager_kernels)
            doc.paragraph(f"Eager kernels of the chain, each against the copy: {listing}.")
            gelu = [bw for name, bw in eager_kernels if "gelu" in name]
            fused_kernels = _kernels(chain["fused"])
            if gelu and fused_kernels:
                # Element rates: the eager gelu kernel reads and writes one f16 per element (4 bytes),
                # the fused kernel bytes_moved / n.
                n = float(name_fields(chain["fused"]["name"])["n"])
                gelu_rate = gelu[0] / 4
                fused_rate = fused_kernels[0][1] / (chain["fused"]["bytes_moved"] / n)
                doc.paragraph(f"Element rates: eager gelu kernel {gelu_rate / 1e9:.2f} G/s, fused chain kernel "
                              f"{fused_rate / 1e9:.2f} G/s ({100 * fused_rate / gelu_rate:.0f} % of gelu alone). A fused "
                              "kernel that runs at about gelu's own element rate is bound by gelu's arithmetic, not by "
                              "memory; fused_fma shows what the same kernel reaches with contracted multiply-adds.")
    ceilings = {name_fields(b["name"]).get("op"): b for b in benchmarks(run, "ComputeCeiling/")}
    if ceilings and copy_bw:
        doc.paragraph("Arithmetic ceilings (`ComputeCeiling`): each fused kernel's per-element work — f16 widening, the "
                      "shared math, f16 narrowing — on L1-resident rows on the kernels' threads, counted in the bytes "
                      "the kernel moves per element. A kernel cannot beat its ceiling however fast memory is.")
        doc.table(["kernel", "ceiling GB/s", "of copy", "fused GB/s", "fused share of its ceiling"],
                  [[op, gbps(c["bytes_per_second"]), f"{100 * c['bytes_per_second'] / copy_bw:.0f} %",
                    gbps(fam[op]["fused"]["bytes_per_second"]) if "fused" in fam.get(op, {}) else "—",
                    f"{100 * fam[op]['fused']['bytes_per_second'] / c['bytes_per_second']:.0f} %"
                    if "fused" in fam.get(op, {}) else "—"] for op, c in sorted(ceilings.items())])
    for family, share, target in verdict_lines:
        evidence = f"measured {100 * share:.0f} % of the copy bandwidth in the same run"
        if "fused_fma" in fam.get(family, {}):
            evidence += f" (fused_fma: {100 * fam[family]['fused_fma']['bytes_per_second'] / copy_bw:.0f} %)"
        if family in ceilings:
            ceiling = ceilings[family]["bytes_per_second"] / copy_bw
            evidence += (f"; the kernel's arithmetic ceiling is {100 * ceiling:.0f} % of the copy"
                         + (", below the target: the target needs cheaper per-element math, "
                            "not better memory access" if ceiling < target else ""))
        doc.verdict(f"fused {family} reaches {100 * target:.0f} % of the copy bandwidth",
                    "supported" if share >= target else "contradicted", evidence + ".")
    cold, hit = fam.get("CompileCold", {}).get("-"), fam.get("CacheHit", {}).get("-")
    if cold and hit:
        doc.paragraph(f"Cold compile of one fused kernel: {cold['compile_ms']:.0f} ms; warm cache hit "
                      f"(key + artifact SHA-256 check): {_seconds(hit) * 1e6:.0f} µs.")
