"""A paired bootstrap over input sets: the uncertainty of "fused − eager" when both paths ran on the
same sets.

Each input set i gives one figure per path (its P99 ULP error, its max, any per-set statistic):
fused f_i and eager e_i. Resampling the *sets* with replacement, the same draw for both paths, keeps
the pairing: a hard set is hard for both. The vectorised form draws the resamples as a
(resamples × sets) matrix of set indices, in blocks of at most a few million draws, and sums each
row of the gathered figures.

Effects (each 0 when fused and eager are alike, positive when fused is worse):
  - "relative": mean(f) / mean(e) − 1, the relative change of the statistic's mean over sets;
  - "share_worse": share of sets where fused is worse − share where eager is worse (ties count for
    neither), in [−1, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 20261201


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
        the side facing the tolerance shrinks as 1/√n, so it excludes the tolerance once
        n' = n · (half-width / |estimate − tolerance|)². None when the interval already decides;
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


def paired_draws(fused, eager, effect: str = "relative", *, resamples: int = RESAMPLES, seed: int = SEED):
    """(draws, estimate): the `resamples` bootstrap draws of `effect` (see the module's docstring) over
    paired resamples of the sets, and its value on the sets themselves. Raises ValueError on no sets
    or unequal lengths: an interval over nothing is not a result."""
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
    if effect == "share_worse":
        sign = np.sign(f - e)
        return _resampled_sums(sign[:, None], resamples, rng)[:, 0] / n, float(sign.mean())
    raise ValueError(f"paired bootstrap: unknown effect {effect!r} (relative, share_worse)")


def paired_interval(
    fused,
    eager,
    effect: str = "relative",
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Interval:
    """The percentile interval of `effect` over `resamples` paired resamples of the sets
    (paired_draws)."""
    draws, estimate = paired_draws(fused, eager, effect, resamples=resamples, seed=seed)
    return interval_of(draws, estimate, effect, np.asarray(fused).size, confidence)


def interval_of(draws: np.ndarray, estimate: float, effect: str, sets: int, confidence: float = CONFIDENCE) -> Interval:
    """The two-sided percentile interval at `confidence` of an effect's bootstrap draws over `sets` sets."""
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return Interval(effect, float(estimate), float(low), float(high), sets, int(draws.size))
