"""Task E: end-to-end training alignment, eager against fused (plan §3.2 in practice): per dtype, the
eval-loss gap stays within the eager seed-to-seed band and fused training steps are faster; in fp32,
eager and fused losses agree over the first steps (the control)."""

from __future__ import annotations

import csv
import json
import math
import pathlib
from dataclasses import dataclass

import numpy as np

from reports.claims import thresholds
from reports.claims.verdict import (
    Claim,
    NotApplicable,
    Outcome,
    Task,
    Verdict,
    Wording,
    all_pass,
    na_wording,
    not_applicable,
)
from reports.decision import median_interval
from reports.numbers import num
from reports.results import SuiteResult, axes, benchmarks, dump_dir, rows

# the one-sided sign test's level for the speed verdict (tools/thresholds.json "E-speed")
SIGN_TEST_ALPHA = thresholds.of("E-speed").settings["sign_test_alpha"]

TASK = Task("E", "E — end-to-end training alignment (claim §3.2 in practice)", "training_alignment")
CLAIMS = {
    "E-speed": Claim("E-speed", "fused training steps are faster than eager", noun="dtypes"),
    "E-gap": Claim("E-gap", "the eager-vs-fused eval-loss gap stays within the eager seed-to-seed band", noun="dtypes"),
    "E-control": Claim("E-control", "fp32 control: eager and fused agree to about 1e-6 relative over the first steps"),
    "E": Claim("E", "training metrics of eager and fused align"),  # where the suite did not run
}


# ---- facts
def read_csv(path: pathlib.Path) -> dict[str, list]:
    """Columns of a run's CSV: numbers as floats, text (overflow_node) as strings."""
    with path.open() as f:
        lines = list(csv.DictReader(f))
    out = {}
    for key in lines[0].keys() if lines else []:
        try:
            out[key] = [float(r[key]) for r in lines]
        except ValueError:
            out[key] = [r[key] for r in lines]
    return out


def runs_for(folder: pathlib.Path, dtype: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """CSV columns of the eager and fused runs of one dtype, by seed."""
    eager, fused = {}, {}
    for path in sorted(folder.glob(f"*_{dtype}_seed*.csv")):
        parts = path.stem.split("_")  # <config>_<device>_<mode>_<dtype>_seed<N>
        if len(parts) < 5 or parts[-2] != dtype:
            continue
        seed = int(parts[-1].removeprefix("seed"))
        (fused if parts[-3] == "fused" else eager)[seed] = read_csv(path)
    return eager, fused


@dataclass(frozen=True)
class Alignment:
    """One dtype's alignment case: its benchmark row, its eager and fused runs' CSV columns by seed, its
    evidence file ({} where none)."""

    dtype: str
    row: dict
    eager: dict[int, dict]
    fused: dict[int, dict]
    evidence: dict


@dataclass(frozen=True)
class Facts:
    """evidence: the alignment evidence files by dtype; skipped: every E benchmark that did not run
    (axes, row); alignments: the alignment cases that ran; controls: the fp32 control rows; rows:
    every E row that ran (axes, row)."""

    evidence: dict[str, dict]
    skipped: tuple[tuple[dict, dict], ...]
    alignments: tuple[Alignment, ...]
    controls: tuple[dict, ...]
    rows: tuple[tuple[dict, dict], ...]


def facts(result: SuiteResult) -> Facts:
    run = result.data
    folder = dump_dir(result)
    evidence = {}
    for path in sorted(folder.glob("E_alignment_*.json")):
        e = json.loads(path.read_text())
        evidence[e["dtype"]] = e
    ran = tuple(rows(run, "E/"))
    skipped = tuple((axes(run, b), b) for b in benchmarks(run, "E/") if b.get("error_occurred"))
    alignments = []
    for f, b in ran:
        if f["family"] != "E" or "Alignment" not in b["name"]:
            continue
        eager, fused = runs_for(folder, f["dtype"])
        alignments.append(Alignment(f["dtype"], b, eager, fused, evidence.get(f["dtype"], {})))
    controls = tuple(b for _, b in ran if "Control" in b["name"])
    return Facts(evidence, skipped, tuple(alignments), controls, ran)


# ---- decision
@dataclass(frozen=True)
class BandRule:
    """The plan's literal rule: every CSV row's gap within the range of the eager seeds."""

    rows: int
    excursions: int
    max_gap_over_band: float


@dataclass(frozen=True)
class Gap:
    """The fused final eval loss against the 95 % prediction interval of one more eager run from the k
    seeds (mean ± t·s·√(1 + 1/k)); without enough CSVs, how many eager and fused finals were found."""

    dtype: str
    band_rule: Verdict
    eager_finals: int
    fused_finals: int
    mean: float = 0.0
    sd: float = 0.0
    half: float = 0.0
    gaps: tuple[float, ...] = ()


@dataclass(frozen=True)
class Speed:
    """Interleaved rounds of eager and fused training steps: median step times, the ratio of medians,
    the rounds the fused turn won with the one-sided sign test each way, the A/A control's ratio."""

    rounds: int
    steps_per_turn: int
    eager_ms: float
    fused_ms: float
    speedup: float
    wins: int
    p_faster: float
    p_slower: float
    control: float
    noise: float
    # the per-round eager/fused ratio of median step times: its median and 95 % interval (sign-test order
    # statistics), from the evidence file's step times; None where the evidence does not hold them
    round_ratio: tuple[float, float, float] | None = None
    round_ratio_missing: str = ""  # why there is no round_ratio
    # where timed steps were skipped: how many, in which rounds, and the rounds left out of round_ratio
    round_skips: str = ""
    skipped_steps: int = 0


@dataclass(frozen=True)
class RoundRatios:
    """Each round's median eager step over its median fused step, from the steps each round kept."""

    ratios: tuple[float, ...]  # the rounds in which both modes kept a step, in round order
    rounds: int
    skipped: dict[str, tuple[int, ...]]  # per mode, the round (counted from 0) of each skipped step
    left_out: tuple[int, ...]  # rounds in which a mode kept no step


def _int_list(value, name: str, rounds: int) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(r, int) and 0 <= r < rounds for r in value):
        raise ValueError(f"the evidence's {name} is not a list of rounds 0 to {rounds - 1}")
    return value


def round_ratios(timing: dict) -> RoundRatios:
    """The per-round ratios from the evidence's step times and the round of each step (eager_step_round,
    fused_step_round; skipped_step_rounds for the steps left out). Evidence written before the suite
    recorded the rounds: rounds × steps per turn of each mode in round order, which holds only where no
    step was skipped. ValueError naming what is missing or inconsistent."""
    rounds, per_turn = timing.get("rounds"), timing.get("timed_steps_per_turn")
    steps = {mode: timing.get(f"{mode}_step_s") for mode in ("eager", "fused")}
    if not (isinstance(rounds, int) and isinstance(per_turn, int) and rounds > 0 and per_turn > 0):
        raise ValueError("the evidence file holds no step times of every round")
    if not all(isinstance(v, list) and all(isinstance(x, (int, float)) for x in v) for v in steps.values()):
        raise ValueError("the evidence file holds no step times of every round")
    step_rounds = {mode: timing.get(f"{mode}_step_round") for mode in steps}
    skipped: dict[str, list[int]] = {mode: [] for mode in steps}
    if all(v is None for v in step_rounds.values()):
        counts = timing.get("skipped_steps") or {}
        if any(counts.values()):
            raise ValueError(
                f"{counts.get('eager', 0)} eager and {counts.get('fused', 0)} fused steps were skipped "
                "(non-finite gradient) and the evidence's step times do not say in which rounds"
            )
        if not all(len(v) == rounds * per_turn for v in steps.values()):
            raise ValueError("the evidence file holds no step times of every round")
        step_rounds = {mode: [i // per_turn for i in range(rounds * per_turn)] for mode in steps}
    else:
        recorded = timing.get("skipped_step_rounds") or {}
        for mode in steps:
            step_rounds[mode] = _int_list(step_rounds[mode], f"{mode}_step_round", rounds)
            skipped[mode] = _int_list(recorded.get(mode, []), f"skipped_step_rounds.{mode}", rounds)
            if len(step_rounds[mode]) != len(steps[mode]):
                raise ValueError(
                    f"the evidence's {mode}_step_round names {len(step_rounds[mode])} rounds for "
                    f"{len(steps[mode])} step times"
                )
            for r in range(rounds):
                taken = step_rounds[mode].count(r) + skipped[mode].count(r)
                if taken != per_turn:
                    raise ValueError(
                        f"round {r + 1} of the evidence holds {taken} {mode} steps, kept or skipped, not {per_turn}"
                    )
    ratios, left_out = [], []
    for r in range(rounds):
        medians = {}
        for mode in steps:
            kept = [t for t, round_ in zip(steps[mode], step_rounds[mode], strict=True) if round_ == r]
            medians[mode] = float(np.median(kept)) if kept else None
        if medians["eager"] is None or medians["fused"] is None:
            left_out.append(r)
            continue
        if not medians["fused"] > 0:
            raise ValueError(f"round {r + 1}'s median fused step is {medians['fused']} s")
        ratios.append(medians["eager"] / medians["fused"])
    return RoundRatios(tuple(ratios), rounds, {m: tuple(v) for m, v in skipped.items()}, tuple(left_out))


def _rounds_text(rounds: list[int]) -> str:
    """'round 4', 'rounds 4 and 9', '2 in round 4, 1 in round 9': 1-based, with counts where a round
    lost more than one step."""
    counted = sorted({r: rounds.count(r) for r in rounds}.items())
    if len(counted) == 1:
        return f"round {counted[0][0] + 1}"
    if any(n > 1 for _, n in counted):
        return ", ".join(f"{n} in round {r + 1}" for r, n in counted)
    listed = [str(r + 1) for r, _ in counted]
    return "rounds " + ", ".join(listed[:-1]) + " and " + listed[-1]


def skipped_text(r: RoundRatios) -> str:
    """How many timed steps were skipped, in which rounds, and the rounds that kept no step of a mode."""
    said = [
        f"{len(rounds)} {mode} step{'s' if len(rounds) > 1 else ''} ({_rounds_text(list(rounds))})"
        for mode, rounds in r.skipped.items()
        if rounds
    ]
    if not said:
        return ""
    text = f"skipped for a non-finite gradient: {' and '.join(said)}, of {r.rounds} rounds; each round's medians are "
    if r.left_out:
        return text + (
            f"taken from the steps it kept, and {_rounds_text(list(r.left_out))}, where a mode kept no step, "
            f"{'is' if len(r.left_out) == 1 else 'are'} left out"
        )
    return text + "taken from the steps it kept"


@dataclass(frozen=True)
class Control:
    check: dict
    max_rel_loss_diff: float
    steps: int
    first_step_differing: int


def _t_quantile(p: float, dof: int) -> float:
    from scipy.stats import t

    return float(t.ppf(p, dof))


def band_rule(row: dict) -> Verdict:
    n, out = int(row["rows"]), int(row["excursions"])
    outcome = all_pass(n - out, n)
    if outcome is Outcome.NA:
        return Verdict("E-gap", outcome, NotApplicable("no CSV rows", "0 cases"))
    return Verdict("E-gap", outcome, BandRule(n, out, row["max_gap_over_band"]), n)


def decide_gap(dtype: str, eager: dict[int, dict], fused: dict[int, dict], row: dict) -> Verdict:
    """The eager-vs-fused eval-loss gap against the eager seed-to-seed spread, at the final evaluation.
    A band that is the range of k eager seeds is itself uncertain: a fifth run from the same
    distribution as k = 3 seeds falls outside their range with probability 2/(k+1) = 50 %. So the
    band is the 95 % prediction interval for one more run from the seeds' mean and standard deviation
    (Student t with k−1 degrees of freedom: mean ± t·s·√(1 + 1/k)). CONTRADICTED when the fused
    final eval loss lies outside it, SUPPORTED when inside. The plan's literal rule (every row within
    the range of the seeds) is shown beside it."""
    literal = band_rule(row)
    finals = []
    for runs in (eager, fused):
        vals = {}
        for seed, run in runs.items():
            losses = [x for x in run.get("eval_loss", []) if isinstance(x, float) and math.isfinite(x)]
            if losses:
                vals[seed] = losses[-1]
        finals.append(vals)
    eager_final, fused_final = finals
    if len(eager_final) < 2 or not fused_final:
        return Verdict("E-gap", Outcome.NA, Gap(dtype, literal, len(eager_final), len(fused_final)), member=dtype)
    k = len(eager_final)
    values = np.asarray(list(eager_final.values()))
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    half = _t_quantile(0.975, k - 1) * sd * math.sqrt(1 + 1 / k)
    gaps = tuple(f - mean for f in fused_final.values())
    outside = [g for g in gaps if abs(g) > half]
    figures = Gap(dtype, literal, k, len(fused_final), mean, sd, half, gaps)
    return Verdict("E-gap", Outcome.CONTRADICTED if outside else Outcome.SUPPORTED, figures, len(gaps), member=dtype)


def _sign_test(wins: int, rounds: int) -> float:
    """One-sided sign test: the chance of at least `wins` of `rounds` paired rounds going one way
    if neither mode were faster."""
    return sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds


def decide_speed(dtype: str, b: dict, timing: dict | None = None) -> Verdict:
    """Fused training steps faster: the interleaved ratio of medians beyond the A/A control's spread
    (two identical eager trainers measured the same way), and a one-sided sign test over the rounds."""
    rounds = int(b["timing_rounds"])
    fused_ms = b.get("fused_median_step_ms")
    if not (isinstance(fused_ms, (int, float)) and math.isfinite(fused_ms) and fused_ms > 0):
        # a skipped step (non-finite gradient, no optimizer update) is left out of the timing
        return not_applicable(
            "E-speed",
            f"no fused step time to compare: every fused step of the {rounds} interleaved rounds was skipped for "
            "a non-finite gradient (no optimizer update); the band verdict and the skipped steps say why",
            key_figure="every fused step skipped (non-finite)",
            member=dtype,
        )
    wins = round(b["fused_faster_rounds"] * rounds)
    p_faster, p_slower = _sign_test(wins, rounds), _sign_test(rounds - wins, rounds)
    speedup = b["fused_speedup"]
    control = b.get("control_ratio", 1.0) or 1.0
    noise = max(control, 1 / control)
    outcome = (
        Outcome.SUPPORTED
        if speedup > noise and p_faster < SIGN_TEST_ALPHA
        else Outcome.CONTRADICTED
        if speedup < 1 / noise and p_slower < SIGN_TEST_ALPHA
        else Outcome.INCONCLUSIVE
    )
    figures = Speed(
        rounds,
        int(b["timing_steps_per_turn"]),
        b["eager_median_step_ms"],
        b["fused_median_step_ms"],
        speedup,
        wins,
        p_faster,
        p_slower,
        control,
        noise,
        *_round_ratio(timing or {}),
    )
    return Verdict("E-speed", outcome, figures, rounds, member=dtype)


def _round_ratio(timing: dict) -> tuple[tuple[float, float, float] | None, str, str, int]:
    try:
        r = round_ratios(timing)
    except ValueError as why:
        return None, f"not computed: {why}", "", 0
    skipped = sum(len(v) for v in r.skipped.values())
    if not r.ratios:
        return None, f"not computed: no round kept a step of both modes ({skipped_text(r)})", "", skipped
    return median_interval(r.ratios), "", skipped_text(r), skipped


def decide_control(b: dict) -> Verdict:
    check = thresholds.of("E-control").check()
    ok = thresholds.counter_passes(check, b)
    figures = Control(check, b["max_rel_loss_diff"], int(b["steps"]), int(b["first_step_differing"]))
    return Verdict("E-control", Outcome.SUPPORTED if ok else Outcome.CONTRADICTED, figures, int(b["steps"]))


def not_run(reason: str, key_figure: str) -> Verdict:
    """The claim where the training suite did not run at all."""
    return not_applicable("E", reason, key_figure)


def verdicts(facts: Facts) -> list[Verdict]:
    """In the section's order: the alignment cases that did not run (both claims N/A with the suite's
    reason), then per dtype its speed (where timed interleaved) and its gap, then the fp32 control."""
    out = []
    for f, b in facts.skipped:
        if f.get("family") == "E" and "Alignment" in b["name"]:
            why = b.get("error_message", "the benchmark did not run")
            # the matrix cell says what the profile left out, the section the whole reason
            key = "not in the quick profile" if "quick profile" in why else ""
            out += [not_applicable(claim, why, key, member=f["dtype"]) for claim in ("E-speed", "E-gap")]
    for a in facts.alignments:
        if "fused_faster_rounds" in a.row:
            out.append(decide_speed(a.dtype, a.row, a.evidence.get("timing")))
        out.append(decide_gap(a.dtype, a.eager, a.fused, a.row))
    out += [decide_control(b) for b in facts.controls]
    return out


# ---- task E on a GPU (suites/training_alignment/gpu_alignment.py's gpu_alignment.json)
def gpu_band_row(data: dict) -> dict:
    """The plan's literal rule over every evaluation of a GPU training run: the compiled run's held-out
    loss within the range of the eager seeds' at the same step (rows, excursions, max gap / band)."""
    runs = [r for r in data.get("runs", []) if "eval" in r]
    eager = [r for r in runs if r["mode"] == "eager"]
    rows = excursions = 0
    worst = 0.0
    for compiled in (r for r in runs if r["mode"] == "compiled"):
        for point in compiled["eval"]:
            band = [p["loss"] for r in eager for p in r["eval"] if p["step"] == point["step"]]
            if len(band) < 2:
                continue
            low, high = min(band), max(band)
            width = max(high - low, 1e-12)
            gap = max(low - point["loss"], point["loss"] - high, 0.0)
            rows += 1
            excursions += gap > 0
            worst = max(worst, gap / width)
    return {"rows": rows, "excursions": excursions, "max_gap_over_band": worst}


def gpu_facts(data: dict) -> Alignment:
    """A GPU training run's eval losses per seed and mode, and its band row."""

    def losses(mode: str) -> dict[int, dict]:
        return {
            r["seed"]: {"eval_loss": [p["loss"] for p in r["eval"]]}
            for r in data.get("runs", [])
            if r["mode"] == mode and "eval" in r
        }

    return Alignment(data.get("dtype", "bf16"), gpu_band_row(data), losses("eager"), losses("compiled"), {})


def gpu_verdicts(facts: Alignment) -> list[Verdict]:
    """Task E on the GPU: the compiled run's final held-out loss against the eager seeds' prediction
    interval (decide_gap), the plan's literal rule beside it."""
    return [decide_gap(facts.dtype, facts.eager, facts.fused, facts.row)]


# ---- words
def statement(v: Verdict) -> str:
    statement = CLAIMS[v.claim].statement
    return f"{v.member}: {statement}" if v.member else statement


def words(v: Verdict) -> Wording:
    f = v.figures
    if isinstance(f, BandRule):
        return Wording(
            v.outcome,
            f"max gap {num(f.max_gap_over_band)}× the band",
            "every CSV row's gap within the range of the eager seeds",
            f"{f.excursions} of {f.rows} rows outside",
            v.cases,
        )
    if isinstance(f, Gap):
        literal = words(f.band_rule)
        beside = [("The plan's rule (range of the seeds)", literal)]
        if v.outcome is Outcome.NA:
            return Wording(
                v.outcome,
                f"no eval-loss CSVs; plan's rule: {literal.label}",
                reason=f"{f.dtype}: the prediction interval needs ≥ 2 eager seeds and a fused run with eval-loss CSVs "
                f"(found {f.eager_finals} and {f.fused_finals}); the plan's rule alone: {literal.label}",
                beside=beside,
            )
        k = f.eager_finals
        return Wording(
            v.outcome,
            f"gap {num(max(f.gaps, key=abs))} vs ±{num(f.half)}",
            f"the fused final eval loss within the 95 % prediction interval of one more eager run from the {k} seeds "
            f"(mean ± t₀.₉₇₅,{k - 1}·s·√(1 + 1/{k}))",
            f"eager seeds mean {f.mean:.4f}, s {f.sd:.2e}, interval ±{f.half:.2e}; fused − mean "
            + ", ".join(f"{g:+.2e}" for g in f.gaps),
            v.cases,
            beside=beside,
        )
    if isinstance(f, Speed):
        spread = f"{100 * (f.noise - 1):.1f} %"
        rounds_text = ""
        if f.round_ratio:
            median, low, high = f.round_ratio
            rounds_text = f"; per round {num(median)}× [{num(low)}, {num(high)}]"
        cell_skips = f" ({f.skipped_steps} skipped steps left out)" if rounds_text and f.skipped_steps else ""
        return Wording(
            v.outcome,
            f"{num(f.speedup)}×{rounds_text}{cell_skips}",
            f"speed-up beyond the A/A control's {spread} and a sign test p < {SIGN_TEST_ALPHA:g}",
            f"median step {num(f.eager_ms)} ms eager vs {num(f.fused_ms)} ms fused, "
            f"interleaved ({f.rounds} rounds of {f.steps_per_turn} timed steps per mode): "
            f"{num(f.speedup)}×; the fused turn was faster in {f.wins} of {f.rounds} rounds (sign test p = "
            f"{(f.p_faster if f.speedup >= 1 else f.p_slower):.2g}); the eager/fused ratio of each round's median "
            f"steps{rounds_text.replace('; per round', ':') if rounds_text else ' ' + f.round_ratio_missing}"
            f"{' (95 % interval, sign-test order statistics)' if rounds_text else ''}"
            f"{'; ' + f.round_skips if f.round_skips else ''}. A/A control: {num(f.control)}×",
            v.cases,
            interval=f"{num(f.speedup)}× against the A/A spread 1 ± {spread}, sign test p = "
            f"{min(f.p_faster, f.p_slower):.2g}",
        )
    if isinstance(f, Control):
        return Wording(
            v.outcome,
            f"max rel. diff {num(f.max_rel_loss_diff)}",
            thresholds.check_text(f.check),
            f"max relative train-loss difference {f.max_rel_loss_diff:.2e} over {f.steps} steps "
            f"(first step that differs at all: {f.first_step_differing}, -1 = none)",
            v.cases,
        )
    return na_wording(f)
