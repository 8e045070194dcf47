"""tools/cost: what a profile costs on this machine, from a timed sample of its benchmark instances.

The instances of a profile (`tools/run --list`) fall into families: a suite's benchmarks that share
the name's first component (`B`, `C1`, `MemoryCopy`, ...). From each family a deterministic sample
runs alone (evenly spaced through the family's listing, its first and last included), each in its
own suite process with tools/run's timing flags, and its wall time is what the suite's
--instance-times records (setup, reference and compiles included).

A sampled instance that outlives --limit-s is stopped. Its cost is then extrapolated from the last
progress line the suite printed for it ("<label>: <done>/<total> (<seconds> s)", read as it came,
so the loop's start is known): the loop's time to the stop divided by the fraction that line
reached, a lower bound for the instance when other phases follow; for task E's trainer, the end of
the training run it was in, from the trainer's ETA (a lower bound: a case trains several runs);
without a progress line, the limit itself, a lower bound.

Every instance that was not sampled costs the family sample nearest in size, scaled by the ratio of
the elements its `shape:` names (linear in the data; a matmul grows faster, so estimates of larger
matmul shapes are low), else the family's median sample.

Writes OUT/cost.json (every instance: measured, extrapolated or estimated, and how) and prints a
table per suite. Exit 2 on bad input."""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict

from tools.shards import exact_names_regex

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "release" / "bin"
TIMING = {"quick": ["--benchmark_min_time=0.2"], "full": ["--benchmark_min_time=1", "--benchmark_repetitions=5"]}
PROGRESS = re.compile(r"^\s*(?P<label>.+): (?P<done>\d+)/(?P<total>\d+) \((?P<s>[\d.]+) s\)\s*$")
# task E's trainer: "<label>: step <done>/<total> loss ... tokens/s ETA <seconds> s"
TRAINING = re.compile(r"^\s*(?P<label>.+): step (?P<done>\d+)/(?P<total>\d+) .* ETA (?P<eta>[\d.]+) s\s*$")


def listing(profile: str, device: str, filt: str | None) -> list[tuple[str, str]]:
    """(suite binary, benchmark name) in tools/run's order."""
    cmd = [str(ROOT / "tools" / "run"), "--list", "--profile", profile, "--device", device]
    if filt:
        cmd += ["--filter", filt]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"cost: tools/run --list failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    out = []
    for line in r.stdout.splitlines():
        suite_device, name = line.split(" ", 1)
        out.append((suite_device.split("@", 1)[0], name))
    return out


def family(suite: str, name: str) -> str:
    return f"{suite} {name.split('/', 1)[0]}"


def elements(name: str) -> int | None:
    match = re.search(r"shape:([\dx]+)", name)
    return math.prod(int(d) for d in match[1].split("x") if d) if match else None


def sample(members: list[str], per_family: int) -> list[str]:
    if len(members) <= per_family:
        return list(members)
    if per_family == 1:
        return [members[0]]
    step = (len(members) - 1) / (per_family - 1)
    return list(dict.fromkeys(members[round(i * step)] for i in range(per_family)))


def time_instance(suite: str, name: str, profile: str, device: str, limit_s: float) -> dict:
    pattern = exact_names_regex([name])
    with tempfile.TemporaryDirectory() as work:
        times = pathlib.Path(work) / "times.tsv"
        cmd = [
            str(BIN / suite),
            f"--profile={profile}",
            f"--device={device}",
            f"--benchmark_filter={pattern}",
            f"--instance-times={times}",
            f"--dump-dir={work}/dumps",
            *TIMING[profile],
        ]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # progress lines with the time each arrived, read as they come
        lines: list[tuple[float, str]] = []
        reader = threading.Thread(
            target=lambda: lines.extend((time.monotonic() - start, line) for line in proc.stderr), daemon=True
        )
        reader.start()
        try:
            proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            stopped = time.monotonic() - start
            proc.kill()
            proc.wait()
            reader.join(timeout=5)
            training = [(t, m) for t, line in lines if (m := TRAINING.match(line))]
            if training:
                arrived, last = training[-1]
                return {
                    "seconds": round(max(stopped, arrived + float(last["eta"])), 1),
                    "how": (
                        f"stopped at {limit_s:.0f} s in '{last['label']}' at step {last['done']}/{last['total']}; "
                        "that training run's end from the trainer's ETA (a lower bound: the case trains more runs)"
                    ),
                }
            progress = [(t, m) for t, line in lines if (m := PROGRESS.match(line))]
            if progress and int(progress[-1][1]["done"]) > 0:
                arrived, last = progress[-1]
                done, total = int(last["done"]), int(last["total"])
                loop_start = arrived - float(last["s"])
                # the loop's fraction at the stop is taken as the last line's: an over-estimate of
                # the loop's rate when it went on after that line, none when it had stalled there
                estimate = loop_start + (stopped - loop_start) * total / done
                return {
                    "seconds": round(estimate, 1),
                    "how": (
                        f"stopped at {limit_s:.0f} s in '{last['label']}' at {done}/{total}; its loop extrapolated "
                        "from that fraction (a lower bound if other phases follow)"
                    ),
                }
            return {
                "seconds": round(stopped, 1),
                "how": f"stopped at {limit_s:.0f} s, no progress line (a lower bound)",
            }
        reader.join(timeout=5)
        if proc.returncode != 0 or not times.exists():
            tail = "".join(line for _, line in lines).strip()[-300:]
            return {"seconds": None, "how": f"failed (exit {proc.returncode}): {tail}"}
        recorded = dict(line.split("\t") for line in times.read_text().splitlines())
        return {"seconds": round(float(recorded.get(name, time.monotonic() - start)), 2), "how": "measured"}


def estimate(name: str, samples: dict[str, dict]) -> dict:
    timed = {n: s for n, s in samples.items() if s["seconds"] is not None}
    if not timed:
        return {"seconds": None, "how": "no sample of its family finished"}
    size = elements(name)
    sized = {n: s for n, s in timed.items() if elements(n)}
    if size and sized:
        nearest = min(sized, key=lambda n: (abs(math.log(elements(n) / size)), n))
        scale = size / elements(nearest)
        return {
            "seconds": round(sized[nearest]["seconds"] * scale, 2),
            "how": f"from {nearest} scaled by elements ({scale:.3g}x)",
        }
    return {
        "seconds": round(statistics.median(s["seconds"] for s in timed.values()), 2),
        "how": "its family's median sample",
    }


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="full", choices=["quick", "full"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--filter", help="only these instances (a Google Benchmark regex, as tools/run --filter)")
    parser.add_argument("--per-family", type=int, default=2, help="instances timed per family (default 2)")
    parser.add_argument("--limit-s", type=float, default=120, help="stop a sampled instance after this (default 120)")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    args = parser.parse_args(argv)
    if args.per_family < 1 or args.limit_s <= 0:
        print("cost: --per-family and --limit-s must be positive", file=sys.stderr)
        return 2
    instances = listing(args.profile, args.device, args.filter)
    families: dict[str, list[str]] = defaultdict(list)
    for suite, name in instances:
        families[family(suite, name)].append(name)
    chosen = [(f, n) for f, members in families.items() for n in sample(members, args.per_family)]
    print(
        f"cost: {len(instances)} instances of --profile {args.profile} on {args.device}, {len(families)} families, "
        f"timing {len(chosen)} (limit {args.limit_s:.0f} s each)",
        flush=True,
    )
    samples: dict[str, dict[str, dict]] = defaultdict(dict)
    for i, (fam, name) in enumerate(chosen, 1):
        suite = fam.split(" ", 1)[0]
        result = time_instance(suite, name, args.profile, args.device, args.limit_s)
        samples[fam][name] = result
        print(f"cost: [{i}/{len(chosen)}] {suite} {name}: {result['seconds']} s ({result['how']})", flush=True)
    rows = []
    for suite, name in instances:
        fam = family(suite, name)
        entry = samples[fam].get(name) or estimate(name, samples[fam])
        rows.append({"suite": suite, "name": name, **entry, "sampled": name in samples[fam]})
    by_suite: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_suite[row["suite"]].append(row)
    summary = []
    for suite, members in by_suite.items():
        known = [r["seconds"] for r in members if r["seconds"] is not None]
        summary.append(
            {
                "suite": suite,
                "instances": len(members),
                "sampled": sum(r["sampled"] for r in members),
                "sampled_seconds": round(sum(r["seconds"] or 0 for r in members if r["sampled"]), 1),
                "estimated_seconds": round(sum(known), 1),
                "lower_bound": any("lower bound" in r["how"] for r in members),
                "unknown": sum(r["seconds"] is None for r in members),
            }
        )
    args.out.mkdir(parents=True, exist_ok=True)
    report = {
        "profile": args.profile,
        "device": args.device,
        "per_family": args.per_family,
        "limit_s": args.limit_s,
        "suites": summary,
        "instances": rows,
    }
    tmp = args.out / ".cost.json.tmp"
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(args.out / "cost.json")
    print("| suite | instances | timed | timed s | estimated total |")
    print("|---|---|---|---|---|")
    for s in summary:
        bound = " (at least)" if s["lower_bound"] else ""
        unknown = f", {s['unknown']} unknown" if s["unknown"] else ""
        print(
            f"| {s['suite']} | {s['instances']} | {s['sampled']} | {s['sampled_seconds']} | "
            f"{duration(s['estimated_seconds'])}{bound}{unknown} |"
        )
    total = sum(s["estimated_seconds"] for s in summary)
    print(f"cost: estimated total {duration(total)} -> {args.out / 'cost.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
