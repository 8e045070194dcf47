"""The toolkit's operations on arrays (bit equality, integer ULP distance, fractional ULP error,
error statistics, the diff of two results), computed by the C++ toolkit in fusebench._core: the
package's lowest layer, which everything that measures (judge, explain, compare_fused) calls."""

from __future__ import annotations

import json as _json
from typing import Any

import numpy as _np

try:
    from . import _core
except ImportError as _error:  # e.g. `import fusebench` from python/ in a checkout
    raise ImportError(
        f"fusebench: the compiled toolkit (fusebench._core) cannot be imported ({_error}); this is "
        "probably the source tree: install the package (pip install ./python from the repository root) "
        "and import it from elsewhere"
    ) from _error
from ._operands import Operand, check_same_dtype, check_same_shape, operand
from ._results import BitEqualResult, Diff, ErrorStats, UlpDiffResult

_NAN_POLICIES = {"bitwise": False, "any-nan-equal": True}
_ZERO_POLICIES = {"bitwise": False, "equal": True}


def _policy(fn: str, name: str, value: str, choices: dict) -> bool:
    if value not in choices:
        raise ValueError(f"{fn}: {name}={value!r}; expected one of {', '.join(map(repr, choices))}")
    return choices[value]


def _count(fn: str, name: str, value: int, minimum: int) -> int:
    if not isinstance(value, (int, _np.integer)) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{fn}: {name}={value!r}; expected an integer >= {minimum}")
    return int(value)


def _pair(
    fn: str, a: Any, b: Any, a_name: str, b_name: str, same_dtype: bool, hint: str = ""
) -> tuple[Operand, Operand]:
    oa, ob = operand(a, a_name, fn), operand(b, b_name, fn)
    check_same_shape(fn, oa, ob, a_name, b_name)
    if same_dtype:
        check_same_dtype(fn, oa, ob, a_name, b_name, hint)
    return oa, ob


def bit_equal(
    a: Any, b: Any, *, nan: str = "bitwise", signed_zero: str = "bitwise", max_indices: int = 16
) -> BitEqualResult:
    """Bitwise equality of two arrays of one format and shape.

    nan: "bitwise" (NaNs compare by their bits, payload and sign included) or "any-nan-equal".
    signed_zero: "bitwise" (+0 != -0) or "equal". The result is truthy when equal and lists the
    first max_indices mismatching (row-major flat) indices."""
    fn = "fusebench.bit_equal"
    nan_equal = _policy(fn, "nan", nan, _NAN_POLICIES)
    zeros_equal = _policy(fn, "signed_zero", signed_zero, _ZERO_POLICIES)
    oa, ob = _pair(fn, a, b, "a", "b", same_dtype=True)
    text = _core.bit_equal(
        oa.obj, ob.obj, oa.bf16_bits, ob.bf16_bits, nan_equal, zeros_equal, _count(fn, "max_indices", max_indices, 0)
    )
    return BitEqualResult.from_json(_json.loads(text))


def ulp_diff(a: Any, b: Any, *, bins: int = 16, max_indices: int = 16) -> UlpDiffResult:
    """Integer ULP distance between two arrays of one format and shape: per-element distances
    (numpy, uint16/32/64), max with its first index, exact mean / P50 / P99 (numpy "linear"), a
    histogram (0 .. bins-1, then >= bins) and the NaN pairs counted apart."""
    fn = "fusebench.ulp_diff"
    oa, ob = _pair(
        fn, a, b, "a", "b", same_dtype=True, hint=" (cast one, or use ulp_error / error_stats against a reference)"
    )
    distance, text = _core.ulp_diff(
        oa.obj,
        ob.obj,
        oa.bf16_bits,
        ob.bf16_bits,
        _count(fn, "bins", bins, 1),
        _count(fn, "max_indices", max_indices, 0),
    )
    return UlpDiffResult.from_json(distance, _json.loads(text))


def ulp_error(y: Any, ref: Any) -> _np.ndarray:
    """Fractional ULP error |y - ref| / (spacing of y's format at ref), per element, as float64.
    ref may have any floating dtype (normally float64). Non-finite pairs: 0 when both are the same
    infinity or both NaN, +inf otherwise."""
    fn = "fusebench.ulp_error"
    oy, oref = _pair(fn, y, ref, "y", "ref", same_dtype=False)
    return _core.ulp_error(oy.obj, oref.obj, oy.bf16_bits, oref.bf16_bits)


def error_stats(y: Any, ref: Any, *, bins: int = 16, max_indices: int = 16) -> ErrorStats:
    """Error statistics of y against a reference (any floating dtype, normally float64): abs, rel
    and ulp_error (max with index, mean, exact P50 / P99), the integer distance to ref rounded to
    y's format (ulp_diff: max and histogram), and the NaN / inf counts."""
    fn = "fusebench.error_stats"
    oy, oref = _pair(fn, y, ref, "y", "ref", same_dtype=False)
    text = _core.error_stats(
        oy.obj,
        oref.obj,
        oy.bf16_bits,
        oref.bf16_bits,
        _count(fn, "bins", bins, 1),
        _count(fn, "max_indices", max_indices, 0),
    )
    return ErrorStats.from_json(_json.loads(text))


def diff(
    a: Any,
    b: Any,
    ref: Any | None = None,
    *,
    names: tuple[str, str] = ("a", "b"),
    ref_name: str = "ref",
    bins: int = 16,
    nan: str = "bitwise",
    signed_zero: str = "bitwise",
) -> Diff:
    """Everything `fusebench-diff A B [--ref REF] --json` reports, from the same C++ function: bit
    equality, the integer ULP distance of a against b (b rounded to a's format when the formats
    differ), abs / rel error of a against b, non-finite counts, and with ref the error statistics
    of each against it. names label a and b in the result (fusebench-diff puts the file paths)."""
    fn = "fusebench.diff"
    nan_equal = _policy(fn, "nan", nan, _NAN_POLICIES)
    zeros_equal = _policy(fn, "signed_zero", signed_zero, _ZERO_POLICIES)
    a_name, b_name = names
    oa, ob = _pair(fn, a, b, a_name, b_name, same_dtype=False)
    oref = None
    if ref is not None:
        oref = operand(ref, ref_name, fn)
        check_same_shape(fn, oa, oref, a_name, ref_name)
    text = _core.diff(
        oa.obj,
        ob.obj,
        None if oref is None else oref.obj,
        oa.bf16_bits,
        ob.bf16_bits,
        False if oref is None else oref.bf16_bits,
        _count(fn, "bins", bins, 1),
        nan_equal,
        zeros_equal,
        str(a_name),
        str(b_name),
        str(ref_name),
    )
    return Diff.from_json(_json.loads(text))
