"""Task A: fused execution and its compilation are bit-deterministic (plan §3.3).

A kernel is the same when its generated code is (the source with its compile command, or XLA's HLO
without metadata) and so is its machine code where the device has any (.text); a binary differing
only outside .text, where it names its cache directory, is reported as debug paths, not as another
kernel. The output checks are the gate's (claim "A" in the thresholds)."""

from __future__ import annotations

from dataclasses import dataclass

from reports.claims import thresholds
from reports.claims.verdict import (
    Claim,
    NothingMeasured,
    Outcome,
    Task,
    Untestable,
    Verdict,
    Wording,
    na_wording,
    nothing_measured,
)
from reports.numbers import num
from reports.results import SuiteResult, axes, benchmarks, na_reasons, rows

TASK = Task("A", "A — determinism of fused execution (claim §3.3)", "fusion_determinism")
CLAIMS = {"A": Claim("A", "fused execution and its compilation are bit-deterministic")}
CONTROLS = {1: "FMA contraction flipped", 2: "per-op rounding flipped (XLA: xla_allow_excess_precision)"}


def config_name(axes_of_row: dict) -> str:
    """An A configuration as the report names it: "bf16, 1 thread"."""
    threads = axes_of_row["threads"]
    return f"{axes_of_row['dtype']}, {threads} thread{'' if str(threads) == '1' else 's'}"


# ---- facts
@dataclass(frozen=True)
class Facts:
    """configs: (configuration, its benchmark row) of every configuration that ran; refused: why the
    device skipped configurations (or what was measured, where none ran); not_in_profile: the
    configurations this profile leaves out ("bf16, 1 thread")."""

    configs: tuple[tuple[str, dict], ...]
    refused: tuple[str | NothingMeasured, ...] = ()
    not_in_profile: tuple[str, ...] = ()


def facts(result: SuiteResult) -> Facts:
    run = result.data
    ran = rows(run, "A/")
    refused = na_reasons(benchmarks(run, "A/"))
    if not ran:
        return Facts((), tuple(refused) or (nothing_measured(benchmarks(run, "A/"), "A/"),))
    not_in_profile = [
        config_name(axes(run, b))
        for b in benchmarks(run, "A/")
        if b.get("error_occurred") and "quick profile" in b.get("error_message", "")
    ]
    return Facts(tuple((config_name(f), b) for f, b in ran), tuple(refused), tuple(not_in_profile))


# ---- decision
@dataclass(frozen=True)
class Figures:
    """failures: (configuration, the check it failed); notes, in the configurations' order:
    ("debug paths", configuration, how often each binary names its cache directory, -1 unknown) where
    the binaries differ outside .text only, ("artifact only", configuration, whether the outputs
    stayed the same) where the control changed only the compiled artifact's hash; no_control and
    blind: the configurations without a negative control and those where it changed nothing."""

    configs: int
    output_checks: tuple[dict, ...]
    failures: tuple[tuple[str, str], ...]
    notes: tuple[tuple[str, str, float | bool], ...]
    no_control: tuple[str, ...]
    blind: tuple[str, ...]
    control_knobs: tuple[int, ...]
    machine_code: bool  # any configuration compared machine code (.text)
    not_in_profile: tuple[str, ...]


def output_checks() -> tuple[dict, ...]:
    return tuple(c for c in thresholds.of("A").checks if c["counter"] in ("distinct_hashes", "max_ulp_vs_round1"))


def decide(facts: Facts) -> Verdict:
    if not facts.configs:
        return Verdict("A", Outcome.NA, Untestable("no A configuration ran", facts.refused, "no configuration"))
    checks = output_checks()
    failures, notes, no_control, blind = [], [], [], []
    for config, b in facts.configs:
        source_same = b.get("kernel_source_stable", b["kernel_hash_stable"]) == 1
        text = b.get("kernel_text_stable", -1)
        debug = b["kernel_hash_stable"] != 1 and source_same and text == 1
        if debug:
            notes.append(("debug paths", config, b.get("artifact_cache_dir_mentions", -1)))
        passed = {thresholds.check_text(c): thresholds.counter_passes(c, b) is True for c in checks}
        passed.update(
            {
                "generated code stable": source_same,
                "machine code (.text) stable": text != 0,
                "binary stable or differing only in debug paths": b["kernel_hash_stable"] == 1 or debug,
            }
        )
        failures += [(config, what) for what, ok in passed.items() if not ok]
        if b.get("control_artifact_differs", -1) == 1 and b.get("control_source_differs", -1) == 0:
            notes.append(("artifact only", config, b.get("negative_control_outputs_differ", -1) == 0))
        if b.get("negative_control_detected", -1) == -1:
            no_control.append(config)
        elif b["negative_control_detected"] != 1:
            blind.append(config)
    figures = Figures(
        len(facts.configs),
        checks,
        tuple(failures),
        tuple(notes),
        tuple(no_control),
        tuple(blind),
        tuple(sorted({int(b.get("negative_control_knob", 1)) for _, b in facts.configs} - {-1})),
        any(b.get("kernel_text_stable", -1) == 1 for _, b in facts.configs),
        facts.not_in_profile,
    )
    outcome = Outcome.CONTRADICTED if failures else Outcome.INCONCLUSIVE if blind else Outcome.SUPPORTED
    return Verdict("A", outcome, figures, len(facts.configs))


def verdicts(facts: Facts) -> list[Verdict]:
    return [decide(facts)]


# ---- words
def statement(v: Verdict) -> str:
    return CLAIMS[v.claim].statement


def words(v: Verdict) -> Wording:
    shared = na_wording(v.figures)
    if shared is not None:
        return shared
    f: Figures = v.figures
    notes = [
        f"{config}: the binaries differ outside their machine code (.text identical)"
        + (f"; each names its cache directory {num(value)} times in its debug sections (-g1)" if value > 0 else "")
        if kind == "debug paths"
        else f"{config}: the control changed only the compiled artifact's hash (XLA: the executable fingerprint, "
        "which covers the compile options), not the generated code" + (" nor the outputs" if value else "")
        for kind, config, value in f.notes
    ]
    condition = (
        "in every dtype × threads configuration: "
        + ", ".join(thresholds.check_text(c) for c in f.output_checks)
        + " between cold compiles in fresh processes, the same generated code and machine code (.text) where the "
        "device has any, the binary the same or differing only in debug paths; and the negative control, where the "
        "device realises one, changes the kernel"
        + (f" (not run in this profile: {', '.join(f.not_in_profile)})" if f.not_in_profile else "")
    )
    n = f.configs
    control = (
        f"the negative control ({', '.join(CONTROLS.get(k, str(k)) for k in f.control_knobs)}) changed the kernel "
        f"in {n - len(f.no_control) - len(f.blind)}/{n - len(f.no_control)} configurations"
        if f.control_knobs
        else ""
    )
    if f.no_control:
        control += (
            ("; " if control else "") + f"no negative control in {len(f.no_control)}/{n} configurations: "
            "the device realises no option that changes the kernel"
        )
    if v.outcome is Outcome.CONTRADICTED:
        return Wording(
            v.outcome,
            f"{len(f.failures)} failed checks",
            condition,
            "Failed: " + "; ".join(f"{config}: {what}" for config, what in f.failures),
            v.cases,
        )
    summary = (
        ("in the one configuration run" if n == 1 else f"in all {n} configurations")
        + ": 1 distinct output MD5, 0 ULP between cold compiles in fresh processes, "
        "the same generated code"
        + (" and machine code (.text)" if f.machine_code else " (no machine code to compare on this device)")
    )
    if v.outcome is Outcome.INCONCLUSIVE:
        return Wording(
            v.outcome,
            f"control missed in {len(f.blind)}",
            condition,
            summary + (f"; {'; '.join(notes)}" if notes else ""),
            v.cases,
            interval=f"the negative control changed neither code nor artifact in {', '.join(f.blind)}, so the "
            "identity check could not have failed there",
        )
    return Wording(
        v.outcome,
        f"{n}/{n} configs"
        + (f" ({len(f.not_in_profile)} not in this profile)" if f.not_in_profile else "")
        + ": 1 hash, 0 ULP"
        + ("; no control" if len(f.no_control) == n else ""),
        condition,
        f"{summary}; {control}" + (f"; {'; '.join(notes)}" if notes else ""),
        v.cases,
    )
