"""Typed results. Each is built from the JSON object the C++ toolkit produced (fusebench/json.hpp,
fusebench/diff.hpp), and to_dict() returns that object itself: the field names and values are
exactly those of `fusebench-diff --json` and of the suites' dumps."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class _FromJson:
    _json: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The toolkit's JSON object for this result (a fresh copy)."""
        return copy.deepcopy(self._json)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)  # null when nothing was compared


def _attach(result: _FromJson, json: dict[str, Any]) -> _FromJson:
    object.__setattr__(result, "_json", json)
    return result


@dataclass(frozen=True)
class UlpHistogram(_FromJson):
    """Counts of integer ULP distances: bins[k] pairs at distance k for k < at_least_ulp, then
    at_least_count pairs at distance >= at_least_ulp. NaN pairs are never binned."""

    bins: tuple[int, ...]
    at_least_ulp: int
    at_least_count: int
    nan_pairs: int

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> UlpHistogram:
        bins = tuple(int(b["count"]) for b in json["bins"])
        return _attach(
            cls(bins, int(json["at_least"]["ulp"]), int(json["at_least"]["count"]), int(json["nan_pairs"])), json
        )


@dataclass(frozen=True)
class ErrorSummary(_FromJson):
    """max (first index where it occurs), mean, exact P50 / P99 (numpy's "linear"); None when
    nothing was compared."""

    max: float | None
    max_index: int
    mean: float | None
    p50: float | None
    p99: float | None

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> ErrorSummary:
        return _attach(cls(json["max"], int(json["max_index"]), json["mean"], json["p50"], json["p99"]), json)


@dataclass(frozen=True)
class BitEqualResult(_FromJson):
    bit_equal: bool
    n: int
    mismatches: int
    first_mismatch_indices: tuple[int, ...]

    def __bool__(self) -> bool:
        return self.bit_equal

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> BitEqualResult:
        return _attach(
            cls(
                bool(json["bit_equal"]), int(json["n"]), int(json["mismatches"]), tuple(json["first_mismatch_indices"])
            ),
            json,
        )


@dataclass(frozen=True)
class UlpDiffResult(_FromJson):
    """Integer ULP distances of a against b (same format). distance is a numpy array of the
    operands' width (uint16 for f16/bf16, uint32 for f32, uint64 for f64); a pair with a NaN has
    no distance (its entry holds the type's maximum: read nan_pairs first). to_dict() leaves the
    per-element distances out."""

    distance: np.ndarray = field(repr=False, compare=False)
    max: int | None
    max_index: int
    mean: float | None
    p50: float | None
    p99: float | None
    compared: int
    nan_pairs: int
    first_nan_indices: tuple[int, ...]
    hist: UlpHistogram

    @classmethod
    def from_json(cls, distance: np.ndarray, json: dict[str, Any]) -> UlpDiffResult:
        return _attach(
            cls(
                distance,
                _optional_int(json["max"]),
                int(json["max_index"]),
                json["mean"],
                json["p50"],
                json["p99"],
                int(json["compared"]),
                int(json["nan_pairs"]),
                tuple(json["first_nan_indices"]),
                UlpHistogram.from_json(json["hist"]),
            ),
            json,
        )


@dataclass(frozen=True)
class UlpDiffToRef(_FromJson):
    """Integer distance of y to ref rounded to y's format (0 = correctly rounded)."""

    max: int | None
    max_index: int
    hist: UlpHistogram

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> UlpDiffToRef:
        return _attach(
            cls(_optional_int(json["max"]), int(json["max_index"]), UlpHistogram.from_json(json["hist"])), json
        )


@dataclass(frozen=True)
class ErrorStats(_FromJson):
    """Error statistics of y against a reference, over the pairs where both are finite: abs, rel
    (|y - ref| / max(|ref|, rel_floor)), ulp_error (fractional, in spacings of y's format at ref);
    ulp_diff is the integer distance to ref rounded to y's format. Non-finite values are counted
    apart (nan_y, inf_ref, ...; mismatches)."""

    n: int
    compared: int
    dtype: str
    ref_dtype: str
    nan_y: int
    nan_ref: int
    inf_y: int
    inf_ref: int
    mismatches: int
    first_mismatch_indices: tuple[int, ...]
    rel_floor: float
    abs: ErrorSummary
    rel: ErrorSummary
    ulp_error: ErrorSummary
    ulp_diff: UlpDiffToRef

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> ErrorStats:
        return _attach(
            cls(
                int(json["n"]),
                int(json["compared"]),
                json["dtype"],
                json["ref_dtype"],
                int(json["nan"]["y"]),
                int(json["nan"]["ref"]),
                int(json["inf"]["y"]),
                int(json["inf"]["ref"]),
                int(json["mismatches"]),
                tuple(json["first_mismatch_indices"]),
                float(json["rel_floor"]),
                ErrorSummary.from_json(json["abs"]),
                ErrorSummary.from_json(json["rel"]),
                ErrorSummary.from_json(json["ulp_error"]),
                UlpDiffToRef.from_json(json["ulp_diff"]),
            ),
            json,
        )


@dataclass(frozen=True)
class UlpDiffSummary(_FromJson):
    """A-vs-B integer distances as fusebench-diff reports them (no per-element array)."""

    max: int | None
    max_index: int
    mean: float | None
    p50: float | None
    p99: float | None
    compared: int
    nan_pairs: int
    hist: UlpHistogram

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> UlpDiffSummary:
        return _attach(
            cls(
                _optional_int(json["max"]),
                int(json["max_index"]),
                json["mean"],
                json["p50"],
                json["p99"],
                int(json["compared"]),
                int(json["nan_pairs"]),
                UlpHistogram.from_json(json["hist"]),
            ),
            json,
        )


@dataclass(frozen=True)
class AgainstRef(_FromJson):
    ref: str
    ref_dtype: str
    a: ErrorStats
    b: ErrorStats

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> AgainstRef:
        return _attach(
            cls(json["ref"], json["ref_dtype"], ErrorStats.from_json(json["a"]), ErrorStats.from_json(json["b"])), json
        )


@dataclass(frozen=True)
class Diff(_FromJson):
    """A against B (and each against a reference): the object `fusebench-diff --json` prints,
    computed by the same C++ function (fusebench::diff_json). to_dict() is that object."""

    a: str
    b: str
    shape: tuple[int, ...]
    dtype: str
    dtype_b: str
    n: int
    bit_equal: bool
    mismatches: int
    first_mismatch_indices: tuple[int, ...]
    policies: dict[str, str]
    ulp_diff: UlpDiffSummary
    compared: int
    abs: ErrorSummary
    rel: ErrorSummary
    rel_floor: float
    nan: dict[str, int]
    inf: dict[str, int]
    nonfinite_mismatches: int
    first_nonfinite_mismatch_indices: tuple[int, ...]
    against_ref: AgainstRef | None

    @classmethod
    def from_json(cls, json: dict[str, Any]) -> Diff:
        return _attach(
            cls(
                json["a"],
                json["b"],
                tuple(json["shape"]),
                json["dtype"],
                json["dtype_b"],
                int(json["n"]),
                bool(json["bit_equal"]),
                int(json["mismatches"]),
                tuple(json["first_mismatch_indices"]),
                dict(json["policies"]),
                UlpDiffSummary.from_json(json["ulp_diff"]),
                int(json["compared"]),
                ErrorSummary.from_json(json["abs"]),
                ErrorSummary.from_json(json["rel"]),
                float(json["rel_floor"]),
                dict(json["nan"]),
                dict(json["inf"]),
                int(json["nonfinite_mismatches"]),
                tuple(json["first_nonfinite_mismatch_indices"]),
                AgainstRef.from_json(json["against_ref"]) if "against_ref" in json else None,
            ),
            json,
        )
