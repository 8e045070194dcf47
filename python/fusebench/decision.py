"""The decision core: task B's rule, the one fusebench.judge applies and the report and the gate apply
to the suite's chains. A paired bootstrap over input sets, one outcome per statistic, Holm's
step-down rule across a judgment's parts and the combination of the parts, with the settings of
the thresholds file's "B" block (resamples, confidence, seed, statistics and their tolerances).

One module, pure Python (numpy only), imported three ways: as fusebench.decision by the installed
package, and as reports.decision (a link to this file) by the report and the gate, which run from
the checkout without the package installed (its __init__ needs the compiled toolkit). The
thresholds are one file, tools/thresholds.json: the wheel carries it beside this module
(python/CMakeLists.txt installs it there), a checkout reads it where it is.

The rule (for every output or chain, every statistic of the deciding measure):
  - magnitude decides: the 95 % interval of the relative change of the statistic's mean over sets,
    compiled (fused) against eager. SUPPORTED when its upper end <= the tolerance, CONTRADICTED
    when its lower end > it, else INCONCLUSIVE;
  - the share of sets worse (compiled worse minus eager worse) stands beside the magnitude, never
    deciding on its own: a few per cent more sets worse by a tiny margin is no loss of accuracy,
    and deciding on it flipped a model whose magnitude lay well inside the tolerance between
    CONTRADICTED and INCONCLUSIVE from seed to seed. It decides only where the magnitude has no
    finite value, eager's statistic being 0 in every set while compiled's is not (a magnitude
    beyond any tolerance);
  - the fp64 reference's resolution (conditioned error only): the reference is itself rounded, so a
    conditioned figure is known to within REFERENCE_RESOLUTION of the bound and a difference of two
    paths' figures to within twice it (RESOLUTION_FLOOR). CONTRADICTED needs the difference beyond
    that floor as well as the relative change beyond its tolerance: the 95 % interval of compiled's
    mean minus eager's, from the same resampled sets, must have its lower end above the floor, else
    the part reads INCONCLUSIVE. Where the whole interval lies within the floor the part is
    unresolved and says so: the bound is too loose there (deep cancellation, or first-order bounds
    compounded through many layers) to tell compiled from eager, whatever the number of sets. It is
    never SUPPORTED on that account, and the output is decided by the other measure (output_parts):
    a real loss at such an output (a gradient rounded to bf16) shows on the ULP error;
  - Holm's step-down rule for CONTRADICTED across the deciding parts: a part's one-sided p-value is
    the bootstrap share of its draws at or below the tolerance; the part ranked j (0-based,
    smallest p first) of m stays CONTRADICTED while the alpha / (m - j) quantile of its draws
    exceeds the tolerance, alpha = (1 - confidence) / 2, stopping at the first that does not. With
    one part that is the plain rule. A part CONTRADICTED alone but not after Holm reads
    INCONCLUSIVE, saying so. SUPPORTED needs every deciding part SUPPORTED (the intersection of
    per-part tests at 95 % each, which needs no correction);
  - combined: CONTRADICTED if any deciding part is, SUPPORTED if all are, else INCONCLUSIVE.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import pathlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np


# ---- the thresholds file
class ThresholdsError(ValueError):
    """The thresholds file cannot be read, or its "B" block lacks a setting the rule needs."""


def thresholds_path() -> pathlib.Path:
    """The one thresholds file: beside this module in an installed package, tools/thresholds.json in
    a checkout (this file resolved through the reports' link is python/fusebench/decision.py)."""
    here = pathlib.Path(__file__).resolve()
    beside = here.with_name("thresholds.json")
    return beside if beside.is_file() else here.parents[2] / "tools" / "thresholds.json"


@functools.lru_cache(maxsize=4)
def _read(path: str) -> dict:
    try:
        data = json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ThresholdsError(f"{path}: cannot read the thresholds ({e})") from e
    if not isinstance(data, dict):
        raise ThresholdsError(f"{path}: cannot read the thresholds (a JSON object expected, got {type(data).__name__})")
    return data


def load_thresholds(path: str | pathlib.Path | None = None) -> dict:
    """The whole thresholds file (the gate's checks, the targets, each claim's block)."""
    return _read(str(path or thresholds_path()))


B_SETTINGS = ("resamples", "confidence", "seed", "deciding_measure", "measures", "statistics", "torch_same")


def settings(path: str | pathlib.Path | None = None) -> dict:
    """The "B" block: the bootstrap, the measures, the statistics and their tolerances, torch's rule."""
    block = load_thresholds(path).get("B")
    where = path or thresholds_path()
    if not isinstance(block, dict):
        raise ThresholdsError(f'{where}: no "B" block (the decision rule\'s settings)')
    missing = [k for k in B_SETTINGS if k not in block]
    if missing:
        raise ThresholdsError(f'{where}: the "B" block lacks {", ".join(missing)}')
    for name, spec in block["statistics"].items():
        if spec.get("measure") not in block["measures"]:
            raise ThresholdsError(
                f"{where}: statistic {name!r} has measure {spec.get('measure')!r}, not one of the measures"
            )
        if spec.get("relative_tolerance") is None and spec.get("share_worse_tolerance") is None:
            raise ThresholdsError(f"{where}: statistic {name!r} has no tolerance")
    return block


_B = settings()
RESAMPLES: int = _B["resamples"]
CONFIDENCE: float = _B["confidence"]
SEED: int = _B["seed"]
DECIDING_MEASURE: str = _B["deciding_measure"]
STATISTICS: dict = _B["statistics"]

# The fp64 reference's own error is bounded by the same running bound counted at f64's unit roundoff
# (2^-53). Every rounding term of a bound for a graph computed at f32 or below carries a unit of at
# least f32's (2^-24), so the reference may be off by 2^-29 of the bound E, to first order: a
# conditioned figure (|y - ref| / E) is known only to within that, whatever the statistic (a P99, a
# maximum or a mean moves by at most as much as every element does), and a difference between
# compiled's figure and eager's to within twice it. fusebench.judge refuses float64 models, and task
# B's chains are f32, f16 and bf16, so the premise holds wherever the conditioned error decides.
REFERENCE_RESOLUTION: float = 2.0**-53 / 2.0**-24
RESOLUTION_FLOOR: float = 2 * REFERENCE_RESOLUTION
TORCH_SAME: dict = {k: v for k, v in _B["torch_same"].items() if k != "about"}


# ---- outcomes
class Outcome(str, enum.Enum):
    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    INCONCLUSIVE = "inconclusive"

    @property
    def label(self) -> str:
        return self.value.upper()


def combine(outcomes: Iterable[Outcome]) -> Outcome:
    """CONTRADICTED if any part is, SUPPORTED if all are, else INCONCLUSIVE."""
    outcomes = [Outcome(o) for o in outcomes]
    if not outcomes:
        raise ValueError("no judged part to combine")
    if Outcome.CONTRADICTED in outcomes:
        return Outcome.CONTRADICTED
    if all(o is Outcome.SUPPORTED for o in outcomes):
        return Outcome.SUPPORTED
    return Outcome.INCONCLUSIVE


# ---- the paired bootstrap
# Each input set i gives one figure per path (its P99 error, its max, any per-set statistic): fused
# (compiled) f_i and eager e_i. Resampling the *sets* with replacement, the same draw for both paths,
# keeps the pairing: a hard set is hard for both. Effects, 0 when the paths are alike, positive when
# fused is worse: "relative", mean(f) / mean(e) - 1; "difference", mean(f) - mean(e) (drawn from the
# same resamples as "relative" under the same seed); "share_worse", the share of sets where fused is
# worse minus the share where eager is (ties count for neither), in [-1, 1].
@dataclass(frozen=True)
class Interval:
    """A bootstrap interval of an effect, with the point estimate it surrounds."""

    effect: str  # "relative" or "share_worse"
    estimate: float
    low: float
    high: float
    sets: int
    resamples: int

    def sets_to_decide(self, tolerance: float) -> float | None:
        """About how many sets would decide it at the observed effect: the interval's half-width on
        the side facing the tolerance shrinks as 1/sqrt(n), so it excludes the tolerance once
        n' = n * (half-width / |estimate - tolerance|)^2. None when the interval already decides;
        inf when the estimate sits on the tolerance (no number of sets decides it)."""
        if self.high <= tolerance or self.low > tolerance:
            return None
        gap = abs(self.estimate - tolerance)
        if gap == 0:
            return math.inf
        half = (self.high - self.estimate) if self.estimate <= tolerance else (self.estimate - self.low)
        return self.sets * (half / gap) ** 2


BLOCK_DRAWS = 4_000_000  # set indices drawn per block: bounds the memory at any number of sets


def _resampled_sums(columns: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, k): for each resample of the n rows of `columns` (n, k), the column sums."""
    n = columns.shape[0]
    rows = max(1, BLOCK_DRAWS // n)
    columns = np.ascontiguousarray(columns.T).T  # each column contiguous, for the gathers
    out = np.empty((resamples, columns.shape[1]))
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        index = rng.integers(0, n, size=(stop - start, n), dtype=np.int32 if n < 2**31 else np.int64)
        for k in range(columns.shape[1]):
            out[start:stop, k] = np.take(columns[:, k], index).sum(axis=1)
    return out


def paired_draws(
    fused, eager, effect: str = "relative", *, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[np.ndarray, float]:
    """(draws, estimate): the `resamples` bootstrap draws of `effect` over paired resamples of the
    sets, and its value on the sets themselves. Raises ValueError on no sets or unequal lengths: an
    interval over nothing is not a result."""
    f = np.asarray(fused, dtype=np.float64)
    e = np.asarray(eager, dtype=np.float64)
    if f.ndim != 1 or f.shape != e.shape:
        raise ValueError(
            f"paired bootstrap: fused and eager need one figure per set each, got shapes {f.shape} and {e.shape}"
        )
    n = f.size
    if n == 0:
        raise ValueError("paired bootstrap over zero input sets")
    if resamples < 1:
        raise ValueError(f"paired bootstrap: {resamples} resamples")
    rng = np.random.default_rng(seed)
    if effect == "relative":
        if e.sum() <= 0:
            raise ValueError("paired bootstrap: eager's statistic is 0 in every set, so a relative change is undefined")
        sums = _resampled_sums(np.stack([f, e], axis=1), resamples, rng)
        with np.errstate(divide="ignore", invalid="ignore"):
            draws = sums[:, 0] / sums[:, 1] - 1.0
        draws = np.where(sums[:, 1] > 0, draws, np.where(sums[:, 0] > 0, np.inf, 0.0))
        return draws, float(f.sum() / e.sum() - 1.0)
    if effect == "difference":
        sums = _resampled_sums(np.stack([f, e], axis=1), resamples, rng)
        return (sums[:, 0] - sums[:, 1]) / n, float((f.sum() - e.sum()) / n)
    if effect == "share_worse":
        sign = np.sign(f - e)
        return _resampled_sums(sign[:, None], resamples, rng)[:, 0] / n, float(sign.mean())
    raise ValueError(f"paired bootstrap: unknown effect {effect!r} (relative, difference, share_worse)")


def interval_of(draws: np.ndarray, estimate: float, effect: str, sets: int, confidence: float = CONFIDENCE) -> Interval:
    """The two-sided percentile interval at `confidence` of an effect's bootstrap draws over `sets` sets."""
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return Interval(effect, float(estimate), float(low), float(high), sets, int(draws.size))


def paired_interval(
    fused,
    eager,
    effect: str = "relative",
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """The percentile interval of `effect` over `resamples` paired resamples of the sets."""
    draws, estimate = paired_draws(fused, eager, effect, resamples=resamples, seed=seed)
    return interval_of(draws, estimate, effect, np.asarray(fused).size, confidence)


# ---- one statistic's parts
def statistic_outcome(interval: Interval, tolerance: float) -> Outcome:
    """SUPPORTED when the interval's upper end <= the tolerance, CONTRADICTED when its lower end > it,
    else INCONCLUSIVE."""
    if interval.high <= tolerance:
        return Outcome.SUPPORTED
    if interval.low > tolerance:
        return Outcome.CONTRADICTED
    return Outcome.INCONCLUSIVE


def median_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(median, low, high): the median of paired rounds' figures and its distribution-free interval from
    sign-test order statistics, [x_(k), x_(n-k+1)] with the largest k for which P(Binomial(n, 1/2) < k)
    stays within (1 - confidence) / 2; suites/support/interleaved.cpp computes the same in the suites."""
    x = sorted(float(v) for v in values)
    n = len(x)
    if n == 0:
        raise ValueError("median_interval: no rounds")
    k, below, term = 0, 0.0, 2.0**-n  # term: P(Binomial(n, 1/2) = k)
    while k < n // 2 and below + term <= (1 - confidence) / 2:
        below += term
        term *= (n - k) / (k + 1)
        k += 1
    median = x[n // 2] if n % 2 else 0.5 * (x[n // 2 - 1] + x[n // 2])
    return median, (x[k - 1] if k else x[0]), (x[n - k] if k else x[-1])


def num(x, sig: int = 3) -> str:
    """Integers exactly, with thousands separators; other values to `sig` significant figures, in
    scientific notation only below 0.001; '—' for a missing value."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "−∞"
    x = float(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}".replace("-", "−")
    magnitude = math.floor(math.log10(abs(x)))
    if abs(x) < 1e-3:
        return f"{x:.{sig - 1}e}".replace("-", "−")
    decimals = max(0, sig - 1 - magnitude)
    return f"{x:,.{decimals}f}".replace("-", "−")


def effect_text(effect: str, x: float) -> str:
    """An effect with its sign: a relative change as a percentage, a share of sets as a number."""
    if effect == "relative":
        if math.isinf(x):
            return "+∞" if x > 0 else "−∞"
        return ("+" if x >= 0 else "−") + num(abs(x) * 100) + "\u00a0%"
    return ("+" if x >= 0 else "−") + num(abs(x))


@dataclass
class Part:
    """One statistic of one output (or chain cell), judged: its interval against its tolerance, the
    rule's outcome alone, then (holm) the family-wise outcome. decides: whether it votes (the
    magnitude does; the share of sets worse stands beside it, in `beside`); left_out: sets where
    either path has no finite figure, of `sets` in all."""

    output: str
    statistic: str  # cond_max, ulp_p99, ... (with " share" for the share-worse effect)
    label: str
    interval: Interval
    tolerance: float
    outcome: Outcome  # the rule alone
    shown: str
    p_value: float = 1.0  # one-sided: the bootstrap share of draws <= tolerance
    holm: Outcome | None = None  # after Holm's rule across the judgment's deciding parts
    holm_note: str = ""
    draws: np.ndarray | None = field(default=None, repr=False)
    left_out: int = 0
    sets: int = 0
    decides: bool = True
    beside: list[Part] = field(default_factory=list)
    holm_rule: tuple[float, int] | None = None  # (level, parts) where Holm demoted it
    # compiled's mean minus eager's against the reference's resolution (conditioned error only)
    difference: Interval | None = None
    difference_draws: np.ndarray | None = field(default=None, repr=False)
    floor: float | None = None

    @property
    def unresolved(self) -> bool:
        """Not SUPPORTED, and the whole difference interval within the reference's resolution: no
        number of sets decides it."""
        d = self.difference
        return d is not None and d.high <= self.floor and self.interval.high > self.tolerance

    def resolution_text(self) -> str:
        d = self.difference
        return (
            f"compiled − eager {effect_text('difference', d.estimate)} [{effect_text('difference', d.low)}, "
            f"{effect_text('difference', d.high)}] of the bound, against the fp64 reference's resolution "
            f"{num(self.floor)}"
        )

    @property
    def final(self) -> Outcome:
        return self.holm or self.outcome

    @property
    def identical(self) -> bool:
        i = self.interval
        return i.low == i.high == i.estimate == 0 and self.draws is None

    @property
    def to_decide(self) -> float | None:
        """About how many sets would decide it (None: decided; inf: never)."""
        if self.final is not Outcome.INCONCLUSIVE:
            return None
        return math.inf if self.unresolved else self.interval.sets_to_decide(self.tolerance)

    def sentence(self) -> str:
        tol = effect_text(self.interval.effect, self.tolerance)
        text = f"{self.shown}; tolerance {tol}"
        if self.final is Outcome.INCONCLUSIVE:
            need = self.interval.sets_to_decide(self.tolerance)
            d = self.difference
            if self.unresolved:
                text += (
                    f"; unresolved: {self.resolution_text()}, so no number of sets decides it (noise at "
                    "cancellation, or a bound too loose there to tell compiled from eager; the ULP error stands beside)"
                )
            elif d is not None and self.interval.low > self.tolerance and d.low <= self.floor:
                text += f"; not CONTRADICTED: {self.resolution_text()} reaches down to it"
            elif self.holm_note:
                text += f"; {self.holm_note}"
            elif need is None or math.isinf(need):
                text += "; no number of sets decides it: the estimate equals the tolerance"
            else:
                text += f"; about {num(round(need))} sets would decide it at the observed effect"
        for other in self.beside:
            text += f"; beside it, not deciding: {other.shown} ({other.outcome.label} against {effect_text(other.interval.effect, other.tolerance)})"
        return text

    def to_dict(self) -> dict:
        i = self.interval
        return {
            "output": self.output,
            "statistic": self.statistic,
            "label": self.label,
            "effect": i.effect,
            "estimate": _finite(i.estimate),
            "low": _finite(i.low),
            "high": _finite(i.high),
            "sets": i.sets,
            "tolerance": self.tolerance,
            "outcome": self.outcome.value,
            "p_value": self.p_value,
            "family_wise": self.final.value,
            "holm_note": self.holm_note,
            "sets_to_decide": _finite(math.inf if self.unresolved else i.sets_to_decide(self.tolerance)),
            "decides": self.decides,
            "beside": [b.to_dict() for b in self.beside],
            "difference": None
            if self.difference is None
            else {
                "estimate": self.difference.estimate,
                "low": self.difference.low,
                "high": self.difference.high,
                "floor": self.floor,
                "unresolved": self.unresolved,
            },
        }


def _finite(x):
    if x is None:
        return None
    return x if math.isfinite(x) else str(x)


def resolved_outcome(interval: Interval, tolerance: float, difference: Interval | None, floor: float | None) -> Outcome:
    """statistic_outcome, with the reference's resolution where a floor applies: never CONTRADICTED
    while the difference's lower end <= the floor."""
    outcome = statistic_outcome(interval, tolerance)
    if difference is None:
        return outcome
    if outcome is Outcome.CONTRADICTED and difference.low <= floor:
        return Outcome.INCONCLUSIVE
    return outcome


def _part(output, statistic, label, interval, tolerance, draws, *, left_out, sets, decides, difference=None) -> Part:
    e = interval.effect
    shown = (
        f"{label} {effect_text(e, interval.estimate)} [{effect_text(e, interval.low)}, {effect_text(e, interval.high)}]"
    )
    if draws is None:
        shown = f"{label}: compiled = eager in all {interval.sets} sets"
    floor, difference_draws = (None, None) if difference is None else (RESOLUTION_FLOOR, difference[1])
    difference = None if difference is None else difference[0]
    p = float(np.mean(draws <= tolerance)) if draws is not None and draws.size else 1.0
    if difference_draws is not None:  # CONTRADICTED needs both: the larger p-value is the pair's
        p = max(p, float(np.mean(difference_draws <= floor)))
    outcome = resolved_outcome(interval, tolerance, difference, floor)
    if difference is not None and difference.high <= floor and interval.high > tolerance:
        shown += f" (unresolved: {effect_text('difference', difference.estimate)} of the bound, within the fp64 reference's resolution)"
    return Part(
        output,
        statistic,
        label,
        interval,
        tolerance,
        outcome,
        shown,
        p,
        draws=draws,
        left_out=left_out,
        sets=sets,
        decides=decides,
        difference=difference,
        difference_draws=difference_draws,
        floor=floor,
    )


def judge_statistic(
    output: str, name: str, compiled, eager, tolerance: float | None = None, *, config: dict | None = None
) -> list[Part]:
    """The deciding parts of one statistic (see the module's docstring): normally its magnitude, with
    the share of sets worse beside it (part.beside); the share of sets worse alone where the
    magnitude has no finite value. Pairs where either path has no finite figure are left out, and
    the parts count them. `tolerance` overrides the statistic's relative tolerance; `config` is a
    "B" block (default: the thresholds file's)."""
    cfg = config or _B
    spec = cfg["statistics"][name]
    c = np.asarray(compiled, dtype=float)
    e = np.asarray(eager, dtype=float)
    if c.shape != e.shape or c.ndim != 1:
        raise ValueError(
            f"{output} {name}: compiled and eager need one figure per set each, got {c.shape} and {e.shape}"
        )
    finite = np.isfinite(c) & np.isfinite(e)
    left_out, sets = int((~finite).sum()), int(c.size)
    c, e = c[finite], e[finite]
    if c.size == 0:
        return []
    identical = bool(np.array_equal(c, e))
    resamples, seed, confidence = cfg["resamples"], cfg["seed"], cfg["confidence"]

    def judged(effect: str) -> tuple[Interval, np.ndarray | None]:
        if identical:
            return Interval(effect, 0.0, 0.0, 0.0, int(c.size), resamples), None
        draws, estimate = paired_draws(c, e, effect, resamples=resamples, seed=seed)
        return interval_of(draws, estimate, effect, int(c.size), confidence), draws

    # the conditioned error is known to within the reference's resolution (RESOLUTION_FLOOR)
    difference = judged("difference") if spec["measure"] == "conditioned" and not identical else None
    magnitude = None
    if spec.get("relative_tolerance") is not None and (identical or e.sum() > 0):
        tol = spec["relative_tolerance"] if tolerance is None else tolerance
        interval, draws = judged("relative")
        magnitude = _part(
            output,
            name,
            spec["label"],
            interval,
            tol,
            draws,
            left_out=left_out,
            sets=sets,
            decides=True,
            difference=difference,
        )
    share = None
    if spec.get("share_worse_tolerance") is not None:
        interval, draws = judged("share_worse")
        share = _part(
            output,
            name + " share",
            f"sets worse ({spec['label']})",
            interval,
            spec["share_worse_tolerance"],
            draws,
            left_out=left_out,
            sets=sets,
            decides=magnitude is None,
            difference=difference,
        )
    if magnitude is None:
        return [share] if share is not None else []
    if share is not None:
        magnitude.beside.append(share)
    return [magnitude]


def output_parts(
    output: str, figures: dict, measure: str, tolerance: float | None = None, *, config: dict | None = None
) -> tuple[str, list[Part], str]:
    """(the measure that decides, its deciding parts, why it is not `measure`, or ""): one output's
    (or chain cell's) statistics of `measure` judged by judge_statistic, figures mapping a
    statistic's name to its (compiled, eager) per-set figures. Where a part of the conditioned error
    is unresolved (the bound cannot resolve the output: the difference lies within the reference's
    resolution), the other measure's statistics decide this output instead, and the reason says so:
    a loss at such an output (a gradient rounded to bf16 in a deep network) shows on the ULP error,
    which needs no bound, while noise at cancellation stays within its interval."""
    cfg = config or _B

    def judged(m: str) -> list[Part]:
        return [
            part
            for name, spec in cfg["statistics"].items()
            if spec["measure"] == m and name in figures
            for part in judge_statistic(output, name, *figures[name], tolerance, config=cfg)
        ]

    parts = judged(measure)
    unresolved = [p for p in parts if p.unresolved]
    if not unresolved:
        return measure, parts, ""
    for other in (m for m in cfg["measures"] if m != measure):
        alternative = judged(other)
        if alternative:
            why = (
                f"{unresolved[0].label}: {unresolved[0].resolution_text()}: the bound cannot resolve compiled "
                f"against eager at this output, so the {cfg['measures'][other]['label']} decides it"
            )
            return other, alternative, why
    return measure, parts, ""


def holm(parts: list[Part], confidence: float = CONFIDENCE) -> None:
    """Holm's step-down rule for CONTRADICTED across a judgment's deciding parts (see the module's
    docstring); sets part.holm on every part, and holm_rule and holm_note on a part it demotes."""
    alpha = (1.0 - confidence) / 2.0
    m = len(parts)
    order = sorted(range(m), key=lambda k: parts[k].p_value)
    rejecting = True
    for rank, k in enumerate(order):
        part = parts[k]
        level = alpha / (m - rank)
        rejecting = (
            rejecting
            and part.draws is not None
            and part.draws.size > 1
            and float(np.quantile(part.draws, level)) > part.tolerance
            and (part.difference_draws is None or float(np.quantile(part.difference_draws, level)) > part.floor)
        )
        if part.outcome is Outcome.CONTRADICTED and not rejecting:
            part.holm = Outcome.INCONCLUSIVE
            part.holm_rule = (level, m)
            part.holm_note = (
                f"CONTRADICTED on its own (lower end above the tolerance), not after Holm's rule over {m} parts "
                f"(its {num(level, 2)} quantile does not exceed the tolerance)"
            )
        else:
            part.holm = part.outcome


def decide(parts: list[Part], confidence: float = CONFIDENCE) -> Outcome:
    """A judgment's outcome over its deciding parts: Holm's rule across them, then combined."""
    deciding = [p for p in parts if p.decides]
    holm(deciding, confidence)
    return combine(p.final for p in deciding)
