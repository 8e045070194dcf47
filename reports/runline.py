"""The line under the matrix that says what ran: machine, compiler, commit, profile, filter and timing,
devices, total and per-suite seconds, the framework devices' compiles, the devices not available,
and the shards a merged run was made of."""

from __future__ import annotations

from reports.numbers import num
from reports.results import Results, is_framework


def run_line(results: Results) -> str:
    """Machine, compiler, commit, profile, total time and per-suite times, once."""
    contexts = [r.context for r in results.by_key.values()]

    def one(key: str) -> str:
        values = sorted({str(c.get(key, "?")) for c in contexts})
        return " / ".join(values) if values else "?"

    manifest = results.manifest or {}
    times = {(e["suite"], e["device"]): e.get("seconds") for e in manifest.get("ran", [])}
    if times:
        per_suite = ", ".join(f"{s}{'' if d == 'cpu' else '@' + d} {num(t)} s" for (s, d), t in times.items())
        total = f"total {num(manifest.get('seconds', sum(times.values())))} s ({per_suite})"
    else:
        total = "suite times not recorded (a run made before tools/run wrote run.json)"
    filt = f", filter {manifest['filter']!r}" if manifest.get("filter") else ""
    timing = manifest.get("timing") or {}
    if timing and any(is_framework(d) for d in results.devices) and timing["framework"] != timing["engine"]:
        filt += f" (timed with {timing['engine']}; framework devices {timing['framework']})"
    elif timing:
        filt += f" (timed with {timing['engine']})"
    return (
        f"Run: {one('cpu_model')} ({one('hardware_threads')} hardware threads; {one('cpu_isa')}), "
        f"{one('compiler')}{benchmark_library(contexts)}, commit {tree(contexts)}, "
        f"profile {one('fusebench_profile')}{filt}, "
        f"devices {devices(results)}; {total}.{compile_counts(manifest)}{not_available(manifest)}"
        f"{shard_origin(manifest)}{copy_history(results)}"
    )


def copy_history(results: Results) -> str:
    """Which copies the shares of the copy are set against: this run's rounds, the earlier runs on this machine
    (into this results folder, or any folder of the machine's record) and the reference runs of its machine
    class, where run.json has their rates (reports/yardsticks.py). Nothing where no row has rounds."""
    interleaved = any(b.get("copy_share_rounds") for r in results.by_key.values() for b in r.data.get("benchmarks", []))
    if not interleaved:
        return ""
    if (results.manifest or {}).get("merged_from"):
        return (
            " Shares of the copy: a merged run, so each interval holds its shard's rounds only, not the copy's speed "
            "between runs."
        )
    history = (results.manifest or {}).get("yardstick_history") or {}
    earlier = history.get("earlier_runs") or []
    reference = history.get("reference_runs") or []
    problem = f" ({history['problem']})" if history.get("problem") else ""
    anchors = []
    if earlier:
        anchors.append(f"the {len(earlier)} earlier run{'s' if len(earlier) != 1 else ''} on this machine")
    if reference:
        anchors.append(
            f"the {len(reference)} reference run{'s' if len(reference) != 1 else ''} of this machine class "
            "(results/reference/yardsticks.jsonl)"
        )
    if anchors:
        return (
            f" Shares of the copy: each interval is set against the copy as fast and as slow as "
            f"{' and '.join(anchors)} measured it (run.json yardstick_history){problem}."
        )
    return (
        " Shares of the copy: no earlier run on this machine and no reference run of this machine class, so each "
        f"interval holds this run's rounds only, not the copy's speed between runs{problem}."
    )


def devices(results: Results) -> str:
    """The devices run, each with what its eager path is where its suites' context says
    (`fusebench_eager`: xla's "one jax.jit per op ...")."""
    described = []
    for device in results.devices:
        eager = sorted(
            {
                str(r.context["fusebench_eager"])
                for r in results.by_key.values()
                if r.device == device and r.context.get("fusebench_eager")
            }
        )
        described.append(f"{device} (eager: {' / '.join(eager)})" if eager else device)
    return ", ".join(described)


def benchmark_library(contexts: list[dict]) -> str:
    """The Google Benchmark release that timed the run and how its library was built: its own
    library_build_type ('debug' for a library built without NDEBUG, as Debian's package is, whose
    timings it warns may be affected), beside the optimisation the suites themselves were built with
    (their compile_flags), so that a debug timing library is not read as debug suites. Suites built
    before they recorded the release say nothing."""
    if not any(c.get("benchmark_version") for c in contexts):
        return ""
    parts = sorted(
        {
            f"Google Benchmark {c.get('benchmark_version') or '(release not recorded)'} "
            f"(the library a {c.get('library_build_type', '?')} build{suite_optimisation(c)})"
            for c in contexts
        }
    )
    return ", " + " / ".join(parts)


def suite_optimisation(context: dict) -> str:
    """'; the suites -O3 -DNDEBUG': the optimisation level and NDEBUG from the suites' compile flags."""
    flags = [f for f in str(context.get("compile_flags", "")).split() if f.startswith("-O") or f == "-DNDEBUG"]
    return f"; the suites {' '.join(flags)}" if flags else ""


def tree(contexts: list[dict]) -> str:
    """The committed tree the suites name: a commit; '-dirty' where a checkout's tracked files
    differed from it (what differed is not recorded); '+tree-HASH' where a device run's tree differed and the bundle recorded the
    difference (its diff comes back under device/provenance/)."""
    revisions = sorted({str(c.get("git_revision", "?")) for c in contexts})
    text = " / ".join(revisions) if revisions else "?"
    if any("+tree-" in r for r in revisions):
        text += " (with uncommitted changes: their diff is in device/provenance/tree.diff)"
    return text


def shard_origin(manifest: dict) -> str:
    """A merged run (tools/merge): its shards, their machine time, and the machines they ran on."""
    shards = manifest.get("merged_from", [])
    if not shards:
        return ""
    hosts = sorted({(s.get("machine") or {}).get("host", "?") for s in shards})
    times = ", ".join(f"{s['index']}: {num(s['seconds'])} s" for s in shards)
    where = f"on {hosts[0]}" if len(hosts) == 1 else f"on {len(hosts)} machines ({', '.join(hosts)})"
    return f" Merged from {len(shards)} shards {where} (tools/merge; shard times {times}; the total sums them)."


def not_available(manifest: dict) -> str:
    """The devices a run on every available device left out, with the reason each gave."""
    missing = manifest.get("unavailable", {})
    return (" Not available here: " + "; ".join(f"{d} ({why})" for d, why in missing.items()) + ".") if missing else ""


def compile_counts(manifest: dict) -> str:
    """Per framework device: the graphs its workers compiled, their time, and how many of those its
    persistent cache (Inductor's FX graph cache, JAX's compilation cache) served."""
    by_device: dict[str, dict[str, float]] = {}
    for e in manifest.get("ran", []):
        for k, v in e.get("framework_compiles", {}).items():
            by_device.setdefault(e["device"], {}).setdefault(k, 0)
            by_device[e["device"]][k] += v
    parts = []
    for device, c in by_device.items():
        looked_up = c.get("cache_hits", 0) + c.get("cache_misses", 0)
        cache = (
            f" ({num(c['cache_hits'])} of {num(looked_up)} persistent-cache lookups hit: a hit loads the compiled "
            "code instead of generating it)"
            if looked_up
            else ""
        )
        n = c.get("compiles", 0)
        parts.append(
            f"{device}: {num(n)} graph{'' if n == 1 else 's'} compiled in {num(c.get('compile_s', 0))} s{cache}"
        )
    return (" Compiles: " + "; ".join(parts) + ".") if parts else ""
