"""The engine's speed (fusebench's own fuser, and a framework's compiler on its device): fused kernels
reach their target share of a memory copy measured in the same run (the issues' targets, the engine's
own), and fused is faster than eager.

A share is decided on interleaved rounds where the run has them (reports/claims/shares.py: each round
the fused kernel and a memcpy of the same bytes on the same threads; the median share's 95 % interval
against the target).

Speed is decided on the interleaved rounds where the run has them (the median per-round eager/fused
time ratio and its distribution-free 95 % interval): SUPPORTED when the interval lies above 1,
CONTRADICTED when below, INCONCLUSIVE when it holds 1. Older runs without them: one timed run of
each, within SPEEDUP_NOISE of 1 not judged. The gate's checks filed under "Engine" (the fused
chain's ULP P99 against eager's) are the task's own, not judged in the report."""

from __future__ import annotations

from dataclasses import dataclass

from reports.claims import shares, thresholds
from reports.claims.verdict import Claim, Outcome, Task, Verdict, Wording, na_wording, not_applicable
from reports.numbers import gbps, num, pct
from reports.results import SuiteResult, axes, benchmarks, copy_bandwidth, is_framework, is_gpu_run, seconds

TASK = Task("Engine", "Engine — eager vs fused speed", "engine_throughput")
CLAIMS = {
    "Engine-target": Claim("Engine-target", "fused kernels reach their share of the copy bandwidth", noun="kernels"),
    "Engine-speed": Claim("Engine-speed", "fused is faster than eager", noun="kernels"),
    # the gate's own check of the task (the fused chain's ULP P99 no worse than eager's), not judged in the report
    "Engine": Claim("Engine", "the fused chain's ULP P99 is no worse than eager's"),
}
# one run of each on a shared machine: a ratio within this share of 1 is not read as faster or slower
SPEEDUP_NOISE = thresholds.of("Engine-speed").settings["speedup_noise"]


def targets() -> dict[str, float]:
    """family -> the engine's target share of the copy bandwidth."""
    return thresholds.of("Engine-target").targets


# ---- facts
@dataclass(frozen=True)
class Facts:
    """paths: family -> path -> benchmark (the engine's own, or on a framework device its own run's);
    frameworks: family -> device -> the framework device's fused benchmark timed in the engine's run;
    copy: the run's copy bandwidth; ceilings: op -> its arithmetic ceiling; peak: the fp32 FMA peak."""

    framework: bool
    paths: dict[str, dict[str, dict]]
    frameworks: dict[str, dict[str, dict]]
    copy: float | None
    ceilings: dict[str, dict]
    peak: dict | None
    gpu: bool = False  # a GPU device's run: its copy yardstick is the GPU's own or none


def by_family(run: dict) -> dict[str, dict[str, dict]]:
    """family -> path -> the engine's own benchmark. The same run also times the framework devices'
    fused kernels (names with a device field, e.g. .../device:torch): those are _frameworks'."""
    out: dict[str, dict[str, dict]] = {}
    for b in benchmarks(run):
        f = axes(run, b)
        if b.get("error_occurred") or "device" in f:
            continue
        out.setdefault(f["family"], {})[f.get("path", "-")] = b
    return out


def _frameworks(run: dict) -> dict[str, dict[str, dict]]:
    """family -> device -> the framework device's fused benchmark measured in this run."""
    out: dict[str, dict[str, dict]] = {}
    for b in benchmarks(run):
        f = axes(run, b)
        if not b.get("error_occurred") and "device" in f and f.get("path") == "fused":
            out.setdefault(f["family"], {})[f["device"]] = b
    return out


def _device_paths(run: dict) -> dict[str, dict[str, dict]]:
    """family -> path -> benchmark, on a framework device's own run (names end in /device:NAME)."""
    out: dict[str, dict[str, dict]] = {}
    for b in benchmarks(run):
        f = axes(run, b)
        if not b.get("error_occurred") and "device" in f and "path" in f:
            out.setdefault(f["family"], {})[f["path"]] = b
    return out


def facts(result: SuiteResult) -> Facts:
    run = result.data
    copy = copy_bandwidth(run)
    gpu = is_gpu_run(run)
    if is_framework(result.device):
        return Facts(True, _device_paths(run), {}, copy, {}, None, gpu)
    # the cpu device's benchmarks carry no device field; another engine device's (cuda) do
    fam = by_family(run) if result.device == "cpu" else {**by_family(run), **_device_paths(run)}
    frameworks = _frameworks(run) if result.device == "cpu" else {}
    ceilings = {axes(run, b).get("op"): b for b in benchmarks(run, "ComputeCeiling/")}
    return Facts(False, fam, frameworks, copy, ceilings, fam.get("Fp32Peak", {}).get("-"), gpu)


# ---- decision
@dataclass(frozen=True)
class Target:
    """A fused kernel's share of the copy against its target: with FMA contraction, the framework
    devices' fused kernels of the same run (device, share, time against fusebench's), the kernel's
    arithmetic ceiling as a share of the copy; suspect: why the yardsticks are suspect, or ""."""

    family: str
    bytes_per_second: float
    share: float
    target: float
    fma_share: float | None
    frameworks: tuple[tuple[str, float, float], ...]
    ceiling: float | None
    suspect: str
    rounds: shares.Rounds | None = None


@dataclass(frozen=True)
class Speedup:
    """A fuser's compiled kernel against its own eager ops: each timed apart (time, unit, runs), the
    ratio, their shares of the copy; the interleaved rounds where the run has them (median ratio, its
    95 % interval, rounds fused won)."""

    family: str
    eager: tuple[float, str, float | None]
    fused: tuple[float, str, float | None]
    speedup: float
    shares: tuple[float, float] | None
    rounds: int = 0
    median: float = 0.0
    low: float = 0.0
    high: float = 0.0
    wins: int = 0
    pairs: int = 1  # eager and fused runs per round, alternating run by run


def decide_target(family: str, facts: Facts) -> Verdict | None:
    """The engine's fused kernel of one family against its target; None where the run lacks it."""
    target = targets()[family]
    fam, copy = facts.paths, facts.copy
    b = fam.get(family, {}).get("fused")
    # interleaved rounds hold their own copy (on a GPU, the GPU's device-to-device copy): a run whose filter
    # left out the copy timed apart still decides
    rounds = shares.rounds_of(b) if b is not None else None
    if b is not None and not copy and not rounds and facts.gpu:
        return not_applicable(
            "Engine-target",
            "this run measured no GPU copy (neither interleaved rounds nor DeviceMemoryCopy), the yardstick a GPU "
            "kernel's share is taken of; the host's memcpy is not one",
            key_figure="no GPU copy measured",
            member=family,
        )
    if b is None or "bytes_per_second" not in b or not (copy or rounds):
        return None

    share = _share(b, copy)
    fma = _share(fam[family]["fused_fma"], copy) if "fused_fma" in fam.get(family, {}) else None
    frameworks = tuple(
        (device, _share(fb, copy), seconds(fb) / seconds(b))
        for device, fb in sorted(facts.frameworks.get(family, {}).items())
        if "bytes_per_second" in fb and _share(fb, copy) is not None
    )
    ceiling = facts.ceilings[family]["bytes_per_second"] / copy if family in facts.ceilings and copy else None
    above_ceiling = (
        family in facts.ceilings and b["bytes_per_second"] > 1.05 * facts.ceilings[family]["bytes_per_second"]
    )
    if rounds:
        # the copy ran in the same rounds as the kernel: no change of load between them to suspect
        figures = Target(family, b["bytes_per_second"], share, target, fma, frameworks, ceiling, "", rounds)
        return Verdict("Engine-target", shares.rounds_outcome(rounds, target), figures, rounds.rounds, member=family)
    # A kernel that reads and writes its bytes cannot outrun a copy of them, nor its own arithmetic
    # ceiling: the yardsticks were measured under a different load than the kernel.
    suspect = "above the copy" if share > 1.0 else "above its own arithmetic ceiling" if above_ceiling else ""
    figures = Target(family, b["bytes_per_second"], share, target, fma, frameworks, ceiling, suspect)
    return Verdict("Engine-target", shares.outcome(share, target, suspect), figures, 1, member=family)


def _share(b: dict, copy: float | None) -> float | None:
    """A path's share of the copy: the median of its interleaved rounds where the run has them, else its
    rate over the run's copy timed apart; None with neither."""
    rounds = shares.rounds_of(b)
    if rounds:
        return rounds.median
    return b["bytes_per_second"] / copy if copy else None


def decide_speedup(family: str, eager: dict, fused: dict, copy_bw: float | None) -> Verdict:
    speedup = eager["real_time"] / fused["real_time"]
    both = copy_bw and "bytes_per_second" in fused and "bytes_per_second" in eager
    rounds = int(fused.get("interleaved_rounds", 0))
    median, lo, hi = (fused[f"interleaved_speedup{k}"] for k in ("", "_lo", "_hi")) if rounds else (0.0, 0.0, 0.0)
    figures = Speedup(
        family,
        (eager["real_time"], eager.get("time_unit", ""), eager.get("iterations")),
        (fused["real_time"], fused.get("time_unit", ""), fused.get("iterations")),
        speedup,
        (_share(fused, copy_bw), _share(eager, copy_bw)) if both else None,
        rounds,
        median,
        lo,
        hi,
        int(fused["interleaved_fused_wins"]) if rounds else 0,
        int(fused.get("interleaved_pairs_per_round", 1)),
    )
    if rounds:
        outcome = Outcome.SUPPORTED if lo > 1 else Outcome.CONTRADICTED if hi < 1 else Outcome.INCONCLUSIVE
        return Verdict("Engine-speed", outcome, figures, rounds, member=family)
    if abs(speedup - 1) < SPEEDUP_NOISE:
        return Verdict("Engine-speed", Outcome.INCONCLUSIVE, figures, 1, member=family)
    return Verdict(
        "Engine-speed", Outcome.SUPPORTED if speedup > 1 else Outcome.CONTRADICTED, figures, 1, member=family
    )


# A path whose time is this many times what its bytes need at the copy bandwidth is not a
# memory-bound kernel at its best: per-call work or a slow kernel sets it.
OVERHEAD_BOUND = thresholds.of("Engine-speed").settings["overhead_bound"]


@dataclass(frozen=True)
class Overhead:
    """A family whose eager and fused times are both over OVERHEAD_BOUND times its fused bytes'
    time at the GPU's copy bandwidth (floor): at this size, its speed verdict does not compare
    memory-bound kernels at their best."""

    family: str
    megabytes: float
    floor_s: float
    fused_times_floor: float
    eager_times_floor: float


def overheads(facts: Facts) -> list[Overhead]:
    """On a GPU run with its own copy only: a CPU's kernel slower than memcpy may simply be arithmetic."""
    out = []
    if not facts.gpu:
        return out
    for family in targets():
        eager, fused = facts.paths.get(family, {}).get("eager"), facts.paths.get(family, {}).get("fused")
        if eager is None or fused is None or not facts.copy or "bytes_moved" not in fused:
            continue
        floor = fused["bytes_moved"] / facts.copy
        if seconds(fused) > OVERHEAD_BOUND * floor and seconds(eager) > OVERHEAD_BOUND * floor:
            out.append(
                Overhead(family, fused["bytes_moved"] / 1e6, floor, seconds(fused) / floor, seconds(eager) / floor)
            )
    return out


def not_this_devices_target(family: str) -> Verdict:
    target = targets()[family]
    return not_applicable(
        "Engine-target",
        f"Not a claim about this device: the {pct(target, 2)} target is fusebench's own engine's. This "
        f"device's fused {family} as a share of the copy is in the speed-up verdict and the table",
        key_figure="the target is the engine's own",
        member=family,
    )


def verdicts(facts: Facts) -> list[Verdict]:
    """On the engine: each fused kernel against its target, then fused against eager. On a framework:
    fused against eager, then the targets named as the engine's own."""
    speed = [
        decide_speedup(family, facts.paths[family]["eager"], facts.paths[family]["fused"], facts.copy)
        for family in targets()
        if "eager" in facts.paths.get(family, {}) and "fused" in facts.paths.get(family, {})
    ]
    if facts.framework:
        return speed + [
            not_this_devices_target(family) for family in targets() if "fused" in facts.paths.get(family, {})
        ]
    return [v for v in (decide_target(family, facts) for family in targets()) if v is not None] + speed


# ---- words
def statement(v: Verdict) -> str:
    if v.claim == "Engine-target":
        return f"fused {v.member} reaches {pct(targets()[v.member], 2)} of the copy bandwidth"
    if v.claim == "Engine-speed":
        return f"fused {v.member} is faster than eager"
    return CLAIMS[v.claim].statement


def words(v: Verdict) -> Wording:
    f = v.figures
    if isinstance(f, Target):
        if f.rounds:
            details = f"fused {f.family} moves {gbps(f.bytes_per_second)} GB/s timed apart"
        else:
            details = f"fused {f.family} moves {gbps(f.bytes_per_second)} GB/s, {pct(f.share)} of the copy (target {pct(f.target, 2)})"
        if f.fma_share is not None:
            details += f"; with FMA contraction {pct(f.fma_share)}"
        for device, share, time in f.frameworks:
            details += f"; {device}'s fused kernel {pct(share)} of the same copy ({num(time)}× fusebench's time)"
        if f.ceiling is not None:
            timed_apart = " timed apart" if f.rounds else ""
            details += f"; its arithmetic ceiling is {pct(f.ceiling)} of the copy{timed_apart}" + (
                ", below the target: reaching it needs cheaper per-element math, not better memory access"
                if f.ceiling < f.target
                else ""
            )
        if f.rounds:
            return shares.rounds_wording(v.outcome, f"fused {f.family}", f.rounds, f.target, details)
        return shares.wording(v.outcome, f"fused {f.family}", f.share, f.target, details, f.suspect)
    if isinstance(f, Speedup):
        return _speedup_words(v)
    return na_wording(f)


def _speedup_words(v: Verdict) -> Wording:
    f: Speedup = v.figures
    (eager_t, eager_unit, eager_runs), (fused_t, fused_unit, fused_runs) = f.eager, f.fused
    shares_text = ""
    if f.shares:
        shares_text = f"; fused {pct(f.shares[0])} of the copy, eager {pct(f.shares[1])}"
    facts_text = (
        f"eager {num(eager_t)} {eager_unit}, fused {num(fused_t)} {fused_unit} per run timed apart "
        f"({num(f.speedup)}×){shares_text}"
    )
    if f.rounds:
        figure = f"{num(f.median)}× eager [{num(f.low)}, {num(f.high)}]"
        per_round = (
            f"{f.pairs} runs of each per round, alternating run by run"
            if f.pairs > 1
            else "one run of each per round, alternating order"
        )
        condition = (
            f"the 95 % interval of the median eager/fused time ratio over {f.rounds} interleaved rounds ({per_round}; "
            "sign-test order statistics) lies above 1 (below: CONTRADICTED)"
        )
        facts_text = (
            f"interleaved: fused faster in {f.wins} of {f.rounds} rounds, median ratio {num(f.median)}× "
            f"[{num(f.low)}, {num(f.high)}]; {facts_text}"
        )
        if (f.low > 1 and f.speedup < 1) or (f.high < 1 and f.speedup > 1):
            # The timed-apart figure is the mean of a short loop of each path, the two loops taken
            # apart (on a framework device in the quick profile, a dozen runs each); the rounds pair
            # each eager run with a fused one, so a change of load hits both.
            runs = (
                f" over {num(eager_runs)} eager and {num(fused_runs)} fused runs"
                if eager_runs is not None and fused_runs is not None
                else ""
            )
            facts_text += (
                f". The two measurements disagree in direction ({num(f.speedup)}× timed apart{runs}): the "
                "interleaved rounds decide, since each pairs an eager run with a fused one under the same load; "
                "repetitions (full profile) would show how far the timed-apart figure moves"
            )
        interval = (
            f"the median ratio's 95 % interval [{num(f.low)}, {num(f.high)}] holds 1"
            if v.outcome is Outcome.INCONCLUSIVE
            else ""
        )
        return Wording(v.outcome, figure, condition, facts_text, v.cases, interval=interval)
    condition = f"fused {f.family}'s time per run more than {pct(SPEEDUP_NOISE, 2)} below eager's (one run of each)"
    interval = (
        f"{num(f.speedup)}× is within {pct(SPEEDUP_NOISE, 2)} of eager's time: not judged"
        if v.outcome is Outcome.INCONCLUSIVE
        else ""
    )
    return Wording(v.outcome, f"{num(f.speedup)}× eager", condition, facts_text, v.cases, interval=interval)
