"""The decision rule of task B, for judge: a paired bootstrap over input sets, SUPPORTED /
CONTRADICTED / INCONCLUSIVE per statistic, and a family-wise rule across statistics and outputs.

Ported from the repository's reports/bootstrap.py (paired_interval, Interval.sets_to_decide),
reports/claims/b.py (statistic_verdict, holm) and reports/claims/verdict.py (combine), with the
constants of tools/thresholds.json "B" (statistics, tolerances, resamples, confidence, seed): the
installed package cannot import the repository's reports/. python/tests/test_decide.py checks, from a checkout, that the port gives the
same intervals and verdicts as those functions and that the constants equal thresholds.json.

As in the suite (reports/claims/b.py holm, across a chain's parts), Holm's step-down rule for
CONTRADICTED across all the parts of one judgment (outputs x statistics). A part's one-sided
p-value is the bootstrap share of resampled effects at or below the tolerance; the part ranked j
(0-based, smallest p first) of m stays CONTRADICTED while the (alpha / (m - j)) quantile of its
draws exceeds the tolerance, alpha = (1 - confidence) / 2, stopping at the first that does not.
With m = 1 that is exactly the plain rule (the lower end of the 95 % interval above the
tolerance). A part CONTRADICTED alone but not after Holm reads INCONCLUSIVE, saying so. SUPPORTED
needs every part SUPPORTED (the intersection of per-part tests at 95 % each, which needs no
correction).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 20261201
DECIDING_MEASURE = "conditioned"
# tools/thresholds.json "B" / "statistics" (label, measure, tolerances)
STATISTICS = {
    "cond_p99": {"label": "per-set P99 conditioned error", "measure": "conditioned", "relative_tolerance": 0.05},
    "cond_max": {
        "label": "set-max conditioned error",
        "measure": "conditioned",
        "relative_tolerance": 0.05,
        "share_worse_tolerance": 0.1,
    },
    "ulp_p99": {"label": "per-set P99 ULP", "measure": "ulp", "relative_tolerance": 0.05},
    "ulp_max": {"label": "set-max ULP", "measure": "ulp", "relative_tolerance": 0.05, "share_worse_tolerance": 0.1},
}
TORCH_SAME = {"tol": 1e-4, "multiplier": 2.0, "multiplier_low_precision": 3.0}


class Outcome(str, enum.Enum):
    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    INCONCLUSIVE = "inconclusive"

    @property
    def label(self) -> str:
        return self.value.upper()


# ---- reports/bootstrap.py
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
        """About how many sets would decide it at the observed effect (reports/bootstrap.py)."""
        if self.high <= tolerance or self.low > tolerance:
            return None
        gap = abs(self.estimate - tolerance)
        if gap == 0:
            return math.inf
        half = (self.high - self.estimate) if self.estimate <= tolerance else (self.estimate - self.low)
        return self.sets * (half / gap) ** 2


BLOCK_DRAWS = 4_000_000


def _resampled_sums(columns: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    n = columns.shape[0]
    rows = max(1, BLOCK_DRAWS // n)
    columns = np.ascontiguousarray(columns.T).T
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
    """(the resampled effects, the point estimate): reports/bootstrap.py's paired_interval before
    its quantiles."""
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
        estimate = f.sum() / e.sum() - 1.0
    elif effect == "share_worse":
        sign = np.sign(f - e)
        draws = _resampled_sums(sign[:, None], resamples, rng)[:, 0] / n
        estimate = float(sign.mean())
    else:
        raise ValueError(f"paired bootstrap: unknown effect {effect!r} (relative, share_worse)")
    return draws, float(estimate)


def paired_interval(
    fused,
    eager,
    effect: str = "relative",
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """The percentile interval of the effect over paired resamples of the sets."""
    draws, estimate = paired_draws(fused, eager, effect, resamples=resamples, seed=seed)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return Interval(effect, float(estimate), float(low), float(high), int(np.asarray(fused).size), resamples)


# ---- reports/claims/b.py: one statistic's verdict
def _num(x, sig: int = 3) -> str:
    """reports/sections/common.py num: integers exactly, with thousands separators; other values to
    `sig` significant figures, in scientific notation only below 0.001; '—' for a missing value."""
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


def _signed_pct(x: float) -> str:
    if math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return ("+" if x >= 0 else "−") + _num(abs(x) * 100) + "\u00a0%"


def effect_text(effect: str, x: float) -> str:
    return _signed_pct(x) if effect == "relative" else (("+" if x >= 0 else "−") + _num(abs(x)))


@dataclass
class Part:
    """One statistic of one output, judged: the suite's rule, then (holm) the family-wise rule."""

    output: str
    statistic: str  # cond_max, ulp_p99, ... (with " share" for the share-worse effect)
    label: str
    interval: Interval
    tolerance: float
    outcome: Outcome  # the suite's rule alone
    shown: str
    p_value: float = 1.0  # one-sided: bootstrap share of draws <= tolerance
    holm: Outcome | None = None  # after Holm's rule across the judgment's parts
    holm_note: str = ""
    draws: np.ndarray | None = field(default=None, repr=False)

    @property
    def final(self) -> Outcome:
        return self.holm or self.outcome

    def sentence(self) -> str:
        tol = effect_text(self.interval.effect, self.tolerance)
        text = f"{self.shown}; tolerance {tol}"
        if self.final is Outcome.INCONCLUSIVE:
            need = self.interval.sets_to_decide(self.tolerance)
            if self.holm_note:
                text += f"; {self.holm_note}"
            elif need is None or math.isinf(need):
                text += "; no number of sets decides it: the estimate equals the tolerance"
            else:
                text += f"; about {_num(round(need))} sets would decide it at the observed effect"
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
            "sets_to_decide": _finite(i.sets_to_decide(self.tolerance)),
        }


def _finite(x):
    if x is None:
        return None
    return x if math.isfinite(x) else str(x)


def statistic_outcome(interval: Interval, tolerance: float) -> Outcome:
    """reports/claims/b.py statistic_verdict: SUPPORTED when the interval's upper end <= the
    tolerance, CONTRADICTED when its lower end > it, else INCONCLUSIVE."""
    if interval.high <= tolerance:
        return Outcome.SUPPORTED
    if interval.low > tolerance:
        return Outcome.CONTRADICTED
    return Outcome.INCONCLUSIVE


def judge_statistic(output: str, name: str, compiled, eager, tolerance: float | None = None) -> list[Part]:
    """The parts of one statistic (reports/claims/b.py cell_verdicts): the relative change of its
    mean over sets, and for set maxima the share of sets worse. Non-finite pairs are left out."""
    spec = STATISTICS[name]
    c = np.asarray(compiled, dtype=float)
    e = np.asarray(eager, dtype=float)
    finite = np.isfinite(c) & np.isfinite(e)
    c, e = c[finite], e[finite]
    if c.size == 0:
        return []
    identical = bool(np.array_equal(c, e))
    parts = []
    if spec.get("relative_tolerance") is not None and (identical or e.sum() > 0):
        tol = spec["relative_tolerance"] if tolerance is None else tolerance
        if identical:
            interval, draws = Interval("relative", 0.0, 0.0, 0.0, c.size, RESAMPLES), np.zeros(1)
        else:
            draws, estimate = paired_draws(c, e, "relative")
            low, high = np.quantile(draws, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
            interval = Interval("relative", estimate, float(low), float(high), c.size, RESAMPLES)
        parts.append(_part(output, name, spec["label"], interval, tol, draws, identical))
    if spec.get("share_worse_tolerance") is not None:
        tol = spec["share_worse_tolerance"]
        draws, estimate = paired_draws(c, e, "share_worse")
        low, high = np.quantile(draws, [(1 - CONFIDENCE) / 2, 1 - (1 - CONFIDENCE) / 2])
        interval = Interval("share_worse", estimate, float(low), float(high), c.size, RESAMPLES)
        parts.append(_part(output, name + " share", f"sets worse ({spec['label']})", interval, tol, draws, identical))
    return parts


def _part(output, name, label, interval, tol, draws, identical) -> Part:
    e = interval.effect
    shown = (
        f"{label} {effect_text(e, interval.estimate)} [{effect_text(e, interval.low)}, {effect_text(e, interval.high)}]"
    )
    if identical:
        shown = f"{label}: compiled = eager in all {interval.sets} sets"
    p = float(np.mean(draws <= tol)) if draws is not None and draws.size else 1.0
    return Part(output, name, label, interval, tol, statistic_outcome(interval, tol), shown, p, draws=draws)


def holm(parts: list[Part]) -> None:
    """Holm's step-down rule for CONTRADICTED across parts (see the module's docstring); sets
    part.holm on every part."""
    alpha = (1 - CONFIDENCE) / 2
    m = len(parts)
    order = sorted(range(m), key=lambda k: parts[k].p_value)
    rejecting = True
    for rank, k in enumerate(order):
        part = parts[k]
        level = alpha / (m - rank)
        reject = False
        if rejecting and part.draws is not None and part.draws.size > 1:
            reject = float(np.quantile(part.draws, level)) > part.tolerance
        if not reject:
            rejecting = False
        if part.outcome is Outcome.CONTRADICTED and not reject:
            part.holm = Outcome.INCONCLUSIVE
            part.holm_note = (
                f"CONTRADICTED on its own (lower end above the tolerance), not after Holm's rule over {m} parts "
                f"(its {_num(level, 2)} quantile does not exceed the tolerance)"
            )
        elif part.outcome is not Outcome.CONTRADICTED and reject:  # a deeper quantile cannot exceed
            part.holm = part.outcome  # when the 2.5 % one does not; kept for clarity
        else:
            part.holm = part.outcome


def combine(outcomes: list[Outcome]) -> Outcome:
    """reports/claims/verdict.py combine: CONTRADICTED if any part is, SUPPORTED if all are, else INCONCLUSIVE."""
    if not outcomes:
        raise ValueError("no judged part to combine")
    if Outcome.CONTRADICTED in outcomes:
        return Outcome.CONTRADICTED
    if all(o is Outcome.SUPPORTED for o in outcomes):
        return Outcome.SUPPORTED
    return Outcome.INCONCLUSIVE
