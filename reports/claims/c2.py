"""Task C2: the reduction order (tile size) changes the last bits, and each order is
self-deterministic (plan §1.2 (3)).

The tile sums are deterministic functions of one seeded input, so "tiles differ" is an existence
claim with no sampling noise: one configuration whose tiles differ by ≥ 1 ULP shows it (no interval
is needed, the self-determinism check shows the figure repeats). Where no tile can be set (a
framework), the thread count is the order knob a framework exposes (Inductor splits a long row
between its OpenMP threads)."""

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
from reports.numbers import num, pct
from reports.results import SuiteResult, benchmarks, is_framework, na_reasons, rows

TASK = Task("C2", "C2 — reduction accumulation order (claim §1.2 (3))", "reduction_order")
CLAIMS = {"C2": Claim("C2", "reduction order (tile size) changes last bits; each order is self-deterministic")}


# ---- facts
@dataclass(frozen=True)
class Facts:
    """tiles: every tile benchmark (axes, row); configs: the distinct (out, acc, shape) configurations,
    groups: each one's (tile, row) by tile, shown: those shown (dropped: identical tile by tile to the
    same output with the other accumulator), apart: the max ULP between any two tiles of each;
    threads: the same sum at 1 and 2 threads (axes, row), where a thread count is the order knob;
    refused: why the device skipped cases; framework: the device runs a framework's compiler."""

    framework: bool
    tiles: tuple[tuple[dict, dict], ...]
    threads: tuple[tuple[dict, dict], ...]
    refused: tuple[str, ...]
    groups: dict
    shown: tuple[tuple[str, str, str], ...]
    dropped: tuple[tuple[str, str, str], ...]
    apart: dict
    nothing: NothingMeasured | None = None


def facts(result: SuiteResult) -> Facts:
    run = result.data
    threads = tuple(rows(run, "C2/knob:threads/"))
    tiles = tuple((f, b) for f, b in rows(run, "C2/") if "tile" in f)
    refused = tuple(na_reasons(benchmarks(run, "C2/")))
    framework = is_framework(result.device)
    nothing = nothing_measured(benchmarks(run, "C2/"), "C2/")
    if framework or not tiles:
        return Facts(framework, tiles, threads, refused, {}, (), (), {}, nothing)
    configs = list(dict.fromkeys((f["out"], f["acc"], f["shape"]) for f, _ in tiles))
    groups = {
        c: sorted([(int(f["tile"]), b) for f, b in tiles if (f["out"], f["acc"], f["shape"]) == c], key=lambda t: t[0])
        for c in configs
    }

    # An f32 output with an "f32" accumulator repeats the storage-accumulator run (the storage dtype is f32):
    # keep one of two identical groups.
    def signature(group):
        return [
            (
                t,
                b.get("ulp_max"),
                b.get("ulp_p99"),
                tuple(sorted((k, v) for k, v in b.items() if k.startswith("ulp_vs_tile"))),
            )
            for t, b in group
        ]

    shown, dropped = [], []
    for c in configs:
        twin = next(
            (o for o in shown if o[0] == c[0] and o[2] == c[2] and signature(groups[o]) == signature(groups[c])), None
        )
        (dropped if twin else shown).append(c)
    apart = {
        c: max((b.get(f"ulp_vs_tile{o}", 0) for t, b in groups[c] for o, _ in groups[c]), default=0) for c in configs
    }
    return Facts(framework, tiles, threads, refused, groups, tuple(shown), tuple(dropped), apart)


# ---- decision
@dataclass(frozen=True)
class TileFigures:
    """Of the tile benchmarks, how many are self-deterministic; the configurations shown whose tiles
    differ by ≥ 1 ULP, and those whose tiles all agree, each with its max ULP apart."""

    check: dict
    benchmarks: int
    nondeterministic: int
    configs: int
    differ: tuple[tuple[tuple[str, str, str], float], ...]
    agree: tuple[tuple[tuple[str, str, str], float], ...]


@dataclass(frozen=True)
class ThreadsFigures:
    """The same sum at 1 and 2 threads: per case (out, shape, max ULP apart, share of sums that
    differ); how many changed, whether every order is self-deterministic, in how many the thread
    count changed the generated code; refused: why the tile cannot be set."""

    check: dict
    cases: tuple[tuple[str, str, float, float], ...]
    changed: int
    deterministic: bool
    recompiled: int
    refused: tuple[str, ...]


def decide(facts: Facts) -> Verdict:
    check = thresholds.of("C2").check()
    if facts.framework or not facts.tiles:
        if not (facts.threads or facts.refused):
            return Verdict("C2", Outcome.NA, facts.nothing)
        return _decide_threads(facts, check)
    nondeterministic = [b["name"] for _, b in facts.tiles if thresholds.counter_passes(check, b) is not True]
    figures = TileFigures(
        check,
        len(facts.tiles),
        len(nondeterministic),
        len(facts.shown),
        tuple((c, facts.apart[c]) for c in facts.shown if facts.apart[c] >= 1),
        tuple((c, facts.apart[c]) for c in facts.shown if facts.apart[c] == 0),
    )
    ok = not nondeterministic and bool(figures.differ)
    return Verdict("C2", Outcome.SUPPORTED if ok else Outcome.CONTRADICTED, figures, len(facts.tiles))


def _decide_threads(facts: Facts, check: dict) -> Verdict:
    if not facts.threads:
        what = "neither a reduction tile nor a thread count can be set"
        return Verdict("C2", Outcome.NA, Untestable(what, facts.refused, "no order knob"))
    changed = [b for _, b in facts.threads if b["ulp_between_orders"] >= 1]
    figures = ThreadsFigures(
        check,
        tuple(
            (f["out"], f["shape"], b["ulp_between_orders"], b["frac_differ_between_orders"]) for f, b in facts.threads
        ),
        len(changed),
        all(thresholds.counter_passes(check, b) is True for _, b in facts.threads),
        sum(b.get("sources_differ", -1) == 1 for _, b in facts.threads),
        facts.refused,
    )
    if not figures.deterministic:
        return Verdict("C2", Outcome.CONTRADICTED, figures, len(facts.threads))
    if not changed:
        return Verdict("C2", Outcome.ABSENT, figures)
    return Verdict("C2", Outcome.SUPPORTED, figures, len(facts.threads))


def verdicts(facts: Facts) -> list[Verdict]:
    return [decide(facts)]


# ---- words
def statement(v: Verdict) -> str:
    return CLAIMS[v.claim].statement


def words(v: Verdict) -> Wording:
    shared = na_wording(v.figures)
    if shared is not None:
        return shared
    if isinstance(v.figures, ThreadsFigures):
        return _threads_words(v)
    f: TileFigures = v.figures

    def describe(configs):
        return (
            ", ".join(
                f"out {o}/acc {a}/{sh}" + (f" (up to {num(ulp)} ULP)" if ulp else "") for (o, a, sh), ulp in configs
            )
            or "none"
        )

    condition = (
        f"every configuration self-deterministic ({thresholds.check_text(f.check)}, repeated runs of one tile) and "
        "tiles differ by ≥ 1 ULP in at least one configuration (a deterministic sum: one difference is proof)"
    )
    deterministic = f.benchmarks - f.nondeterministic
    evidence = (
        f"self-deterministic in {deterministic}/{f.benchmarks}; tiles differ in "
        f"{describe(f.differ)}; every tile agrees at 0 ULP in {describe(f.agree)}"
    )
    return Wording(
        v.outcome,
        f"tiles differ in {len(f.differ)}/{f.configs} configs; {deterministic}/{f.benchmarks} self-deterministic",
        condition,
        evidence,
        v.cases,
    )


def _threads_words(v: Verdict) -> Wording:
    f: ThreadsFigures = v.figures
    n = len(f.cases)
    describe = "; ".join(
        f"out {out} {shape}: {num(ulp)} ULP, {pct(share)} of sums differ" for out, shape, ulp, share in f.cases
    )
    figure = f"1 vs 2 threads differ in {f.changed}/{n}"
    facts_text = (
        f"the same sum at 1 and at 2 threads ({describe}); every order self-deterministic: "
        f"{'yes' if f.deterministic else 'no'}"
        + (
            f"; the thread count changed the generated code in {f.recompiled}/{n} (so the order "
            "knob reached the compiler" + (", and the sums stayed bit-identical" if not f.changed else "") + ")"
            if f.recompiled
            else ""
        )
        + ". The reduction tile cannot be set here"
        + (f" ({f.refused[0]})" if f.refused else "")
    )
    condition = (
        f"every order self-deterministic ({thresholds.check_text(f.check)}) and the sums at 1 and 2 threads differ "
        "by ≥ 1 ULP in at least one case (ABSENT where they never do)"
    )
    if v.outcome is Outcome.ABSENT:
        return Wording(v.outcome, figure, reason=f"The thread count never changed a sum's bits: {facts_text}")
    return Wording(v.outcome, figure, condition, facts_text, v.cases)
