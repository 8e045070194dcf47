"""pytest plugin (registered under the pytest11 entry point "fusebench").

The `fusebench` fixture:
    fusebench.assert_bit_equal(a, b, nan="bitwise", signed_zero="bitwise")
    fusebench.assert_ulp_within(a, b, max_ulp)                   # integer ulp_diff, same format
    fusebench.assert_error_within(y, ref, ulp_max=None, ulp_p99=None, rel_max=None, rel_p99=None,
                                  abs_max=None, abs_p99=None, allow_nonfinite_mismatches=False)
    fusebench.assert_fused_not_worse(model, sample, sets=16, tolerance=None, compile="inductor",
                                     explain=False)   # PyTorch: fusebench.judge's verdict
A failure message names what was compared and lists the worst elements with their index, both
values and both bit patterns.

`pytest --fusebench-report=PATH` writes a JSON summary of every assertion made through the fixture:
test id, assertion, measure, figure, limit and verdict (pass / fail); for assert_fused_not_worse
also the judgment's outcome (supported, contradicted, inconclusive, or "bad input" / "failure"
when judge raised) and its exit status as python -m fusebench gives it (0, 1, 3; 2 bad input; 4 a
failure inside the model or the judge), and per outcome a count of the judgments.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
import pytest

import fusebench as _fb
from fusebench._operands import element_bits_and_values, operand

SHOWN_ELEMENTS = 8
EXIT_BAD_INPUT = 2  # python -m fusebench's exit statuses, recorded beside a judgment in the report


# ---- failure messages
def _describe(op_actual, op_expected, indices, actual_label="actual", expected_label="expected") -> str:
    indices = list(indices)[:SHOWN_ELEMENTS]
    if not indices:
        return ""
    a_bits, a_values = element_bits_and_values(op_actual, indices)
    e_bits, e_values = element_bits_and_values(op_expected, indices)
    a_width, e_width = 2 * a_bits.dtype.itemsize, 2 * e_bits.dtype.itemsize
    lines = []
    for k, index in enumerate(indices):
        lines.append(
            f"\n  [{index}] {actual_label}={a_values[k]:.9g} (0x{int(a_bits[k]):0{a_width}x}) "
            f"{expected_label}={e_values[k]:.17g} (0x{int(e_bits[k]):0{e_width}x})"
        )
    return "".join(lines)


def _what(op) -> str:
    return f"{op.dtype}{list(op.shape)}"


class FusebenchFixture:
    """The assertions; each records (measure, figure, limit, verdict) for --fusebench-report."""

    def __init__(self, nodeid: str, records: list[dict[str, Any]] | None):
        self._nodeid = nodeid
        self._records = records

    def _record(self, assertion: str, measure: str, figure: Any, limit: Any, passed: bool, **judged: Any) -> None:
        """One record; judged adds a judgment's fields (outcome, exit_status) beside pass / fail."""
        if isinstance(figure, float) and not np.isfinite(figure):
            figure = str(figure)  # JSON has no inf / NaN
        if self._records is not None:
            self._records.append(
                {
                    "test": self._nodeid,
                    "assertion": assertion,
                    "measure": measure,
                    "figure": figure,
                    "limit": limit,
                    "verdict": "pass" if passed else "fail",
                    **judged,
                }
            )

    def assert_bit_equal(self, a: Any, b: Any, *, nan: str = "bitwise", signed_zero: str = "bitwise") -> None:
        result = _fb.bit_equal(a, b, nan=nan, signed_zero=signed_zero, max_indices=SHOWN_ELEMENTS)
        self._record("assert_bit_equal", "mismatches", result.mismatches, 0, result.bit_equal)
        if not result.bit_equal:
            oa, ob = operand(a, "a", "assert_bit_equal"), operand(b, "b", "assert_bit_equal")
            raise AssertionError(
                f"fusebench: {_what(oa)} is not bit-equal to {_what(ob)} (nan={nan}, signed_zero={signed_zero}): "
                f"{result.mismatches} of {result.n} elements differ; first ones:"
                + _describe(oa, ob, result.first_mismatch_indices, "a", "b")
            )

    def assert_ulp_within(self, a: Any, b: Any, max_ulp: int) -> None:
        if isinstance(max_ulp, bool) or not isinstance(max_ulp, (int, np.integer)) or max_ulp < 0:
            raise ValueError(
                f"assert_ulp_within: max_ulp={max_ulp!r}; expected an integer >= 0 (ulp_diff is an integer distance)"
            )
        result = _fb.ulp_diff(a, b, max_indices=SHOWN_ELEMENTS)
        oa, ob = operand(a, "a", "assert_ulp_within"), operand(b, "b", "assert_ulp_within")
        distance = result.distance.reshape(-1)
        offending = np.flatnonzero(distance > max_ulp) if result.nan_pairs == 0 else None
        nan_against_number: list[int] = []
        if result.nan_pairs:
            # A NaN pair's distance entry is the type's maximum: tell NaN-vs-NaN (fine) from
            # NaN-vs-number (a failure) by the values.
            candidates = np.flatnonzero(distance > max_ulp)
            _, a_values = element_bits_and_values(oa, candidates)
            _, b_values = element_bits_and_values(ob, candidates)
            a_nan, b_nan = np.isnan(a_values), np.isnan(b_values)
            nan_against_number = [int(i) for i in candidates[a_nan != b_nan]]
            offending = candidates[~(a_nan & b_nan)]
        passed = offending.size == 0
        self._record("assert_ulp_within", "ulp_diff.max", result.max, int(max_ulp), passed)
        if not passed:
            worst = offending[np.argsort(-distance[offending].astype(np.int64), kind="stable")]
            raise AssertionError(
                f"fusebench: {_what(oa)} is not within {max_ulp} ULP of {_what(ob)}: {offending.size} of "
                f"{distance.size} elements beyond; max distance {result.max} ULP at [{result.max_index}]; "
                f"{result.nan_pairs} NaN pairs ({len(nan_against_number)} NaN against a number); worst elements:"
                + _describe(oa, ob, worst, "a", "b")
            )

    def assert_error_within(
        self,
        y: Any,
        ref: Any,
        *,
        ulp_max: float | None = None,
        ulp_p99: float | None = None,
        ulp_mean: float | None = None,
        rel_max: float | None = None,
        rel_p99: float | None = None,
        abs_max: float | None = None,
        abs_p99: float | None = None,
        allow_nonfinite_mismatches: bool = False,
    ) -> None:
        limits = {
            "ulp_error.max": ulp_max,
            "ulp_error.p99": ulp_p99,
            "ulp_error.mean": ulp_mean,
            "rel.max": rel_max,
            "rel.p99": rel_p99,
            "abs.max": abs_max,
            "abs.p99": abs_p99,
        }
        if all(v is None for v in limits.values()):
            raise ValueError("assert_error_within: give at least one limit (ulp_max=, rel_p99=, ...)")
        stats = _fb.error_stats(y, ref, max_indices=SHOWN_ELEMENTS)
        broken = []
        for measure, limit in limits.items():
            if limit is None:
                continue
            group, stat = measure.split(".")
            figure = getattr(getattr(stats, group), stat)
            passed = figure is not None and figure <= limit
            self._record("assert_error_within", measure, figure, limit, passed)
            if not passed:
                broken.append(
                    f"{measure} = {figure:.6g} > {limit:.6g}"
                    if figure is not None
                    else f"{measure}: nothing compared (limit {limit:.6g})"
                )
        if not allow_nonfinite_mismatches:
            self._record("assert_error_within", "nonfinite_mismatches", stats.mismatches, 0, stats.mismatches == 0)
            if stats.mismatches:
                broken.append(f"{stats.mismatches} non-finite mismatches")
        if broken:
            oy, oref = operand(y, "y", "assert_error_within"), operand(ref, "ref", "assert_error_within")
            worst: list[int] = []
            for index in (
                stats.ulp_error.max_index,
                stats.abs.max_index,
                stats.rel.max_index,
                *stats.first_mismatch_indices,
            ):
                if index >= 0 and index not in worst:
                    worst.append(index)
            raise AssertionError(
                f"fusebench: {_what(oy)} against reference {_what(oref)}: "
                + "; ".join(broken)
                + " ; worst elements (max ulp_error, abs, rel, then non-finite mismatches):"
                + _describe(oy, oref, worst, "y", "ref")
            )

    def assert_fused_not_worse(
        self,
        fn,
        sample: Any,
        *,
        sets: int = 16,
        tolerance: float | None = None,
        compile: Any = "inductor",
        options: dict | None = None,
        seed: int = 0,
        dtype: Any = None,
        explain: bool = False,
        inconclusive: str = "pass",
    ) -> Any:
        """fusebench.judge(fn, sample, ...): fails when the verdict is CONTRADICTED (and, with
        inconclusive="fail", INCONCLUSIVE), naming the output, the criterion and its interval, and
        with explain=True the node, the mechanism and the switch. Returns the Judgment."""
        __tracebackhide__ = True
        if inconclusive not in ("pass", "fail"):
            raise ValueError(f"assert_fused_not_worse: inconclusive={inconclusive!r}; expected 'pass' or 'fail'")
        try:
            judgment = _fb.judge(
                fn,
                sample,
                sets=sets,
                compile=compile,
                options=options,
                seed=seed,
                dtype=dtype,
                tolerance=tolerance,
                speed_rounds=0,
            )
        except Exception as error:
            # bad input (exit status 2) or a failure inside the model or the judge (4): recorded as
            # what it is, never as a verdict
            kind, status = ("bad input", EXIT_BAD_INPUT) if isinstance(error, _fb.JudgeError) else ("failure", 4)
            self._record(
                "assert_fused_not_worse", "outcome", f"{type(error).__name__}: {error}", "supported", False,
                outcome=kind, exit_status=status,
            )  # fmt: skip
            raise
        failing = {"contradicted"} | ({"inconclusive"} if inconclusive == "fail" else set())
        self._record(
            "assert_fused_not_worse",
            "outcome",
            judgment.headline(),
            "supported",
            judgment.outcome.value not in failing,
            outcome=judgment.outcome.value,
            exit_status=judgment.exit_status,
        )
        for w in judgment.writes:
            self._record(
                "assert_fused_not_worse", f"writes into {w.what}", w.text(), "—", False, outcome="contradicted"
            )  # fmt: skip
        for o in judgment.outputs:
            if o.finding:
                self._record(
                    "assert_fused_not_worse", f"{o.name} ({o.measure if o.exact else 'finite'})", o.finding, "—",
                    o.outcome.value not in failing, outcome=o.outcome.value,
                )  # fmt: skip
        for part in judgment.parts:
            self._record(
                "assert_fused_not_worse",
                f"{part.output}.{part.statistic} (upper end of compiled − eager)",
                part.interval.high,
                part.tolerance,
                part.final.value not in failing,
                outcome=part.final.value,
            )
        if judgment.outcome.value not in failing:
            return judgment
        explanation = ""
        if explain and judgment.backend.startswith("inductor"):
            e = _fb.explain(fn, sample, judgment=judgment, dtype=dtype, options=options, seed=seed)
            explanation = "\n" + "\n".join(e.lines())
        lines = [f"  CONTRADICTED: {w.text()}" for w in judgment.writes]
        for o in judgment.outputs:
            if o.finding and o.outcome.value in failing:
                lines.append(f"  {o.name}: {o.outcome.label}: {o.finding}")
            for part in o.parts:
                if part.final.value in failing and not o.finding:
                    lines.append(f"  {o.name}: {part.final.label} on the {o.measure} error: {part.sentence()}")
            w = o.worst[0] if o.worst else None
            if w is not None and o.outcome.value in failing:
                lines.append(
                    f"    worst compiled element: set {w.set} [{w.index}] compiled={w.compiled:.9g} eager={w.eager:.9g} "
                    f"fp64={w.ref:.17g} ({w.compiled_ulp:.4g} vs {w.eager_ulp:.4g} ULP)"
                )
        raise AssertionError(
            f"fusebench: that {judgment.name} compiled ({judgment.backend}) is not less accurate than eager is "
            f"{judgment.outcome.label} over {judgment.sets} input sets (seed {judgment.seed}); decided by "
            f"{judgment.rule_text()}:\n" + "\n".join(lines) + explanation
        )


# ---- pytest hooks
_REPORT_KEY = pytest.StashKey[list[dict[str, Any]] | None]()  # the records, None without the option


def pytest_addoption(parser):
    group = parser.getgroup("fusebench")
    group.addoption(
        "--fusebench-report",
        metavar="PATH",
        default=None,
        help="write a JSON summary of every fusebench assertion (test id, measure, figure, verdict) to PATH",
    )


def pytest_configure(config):
    config.stash[_REPORT_KEY] = [] if config.getoption("--fusebench-report") else None


@pytest.fixture
def fusebench(request) -> FusebenchFixture:
    """Precision assertions on arrays and tensors (bit equality, ULP distance, error statistics,
    fused-vs-eager); see fusebench.pytest_plugin."""
    return FusebenchFixture(request.node.nodeid, request.config.stash[_REPORT_KEY])


def pytest_unconfigure(config):
    path = config.getoption("--fusebench-report", default=None)
    records = config.stash.get(_REPORT_KEY, None)
    if not path or records is None:
        return
    judged = [r for r in records if r["assertion"] == "assert_fused_not_worse" and r["measure"] == "outcome"]
    summary = {
        "assertions": records,
        "passed": sum(r["verdict"] == "pass" for r in records),
        "failed": sum(r["verdict"] == "fail" for r in records),
        # judgments by outcome (an INCONCLUSIVE one passes under inconclusive="pass", and is counted here)
        "judgments": {
            outcome: sum(r["outcome"] == outcome for r in judged)
            for outcome in ("supported", "contradicted", "inconclusive", "bad input", "failure")
        },
        "exit_statuses": "0 supported, 1 contradicted, 3 inconclusive, 2 bad input, 4 a failure inside the model "
        "or the judge",
    }
    # Written whole or not at all: a temporary file in the same folder, then rename.
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".fusebench-report-", dir=directory)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(summary, out, indent=1, allow_nan=False, default=str)
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
