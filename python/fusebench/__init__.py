"""fusebench's precision toolkit for Python: bit equality, integer ULP distance, fractional ULP
error and error statistics of low-precision results, computed by the C++ toolkit (the same code
the fusebench suites and `fusebench-diff` use).

Operands: numpy arrays (float16, float32, float64, ml_dtypes.bfloat16) and CPU tensors exposing
DLPack or the array interface (PyTorch, JAX), read in place without a copy.

The two ULP measures (never mixed):
  ulp_diff   the integer number of representable values between two values of one format
             (+0/-0 are 0 apart, +-inf one step beyond the largest finite value; NaN pairs have
             no distance and are counted apart). For A-vs-B comparisons.
  ulp_error  |y - ref| / spacing of y's format at ref, fractional; ref normally float64. Only
             against a reference.

PyTorch helpers (torch optional): judge (is a compiled model less accurate than eager? a verdict
over many input sets), explain (where and why it differs, and the switches that undo it),
apply_switches, fp64_reference, compare_fused (one input, the plan's literal rule). pytest plugin:
the `fusebench` fixture (see fusebench.pytest_plugin). Command line: python -m fusebench judge.
"""

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
from ._judge import Inputs, JudgeError, Judgment, ModelError
from ._operands import Operand, check_same_dtype, check_same_shape, operand
from ._results import (
    AgainstRef,
    BitEqualResult,
    Diff,
    ErrorStats,
    ErrorSummary,
    UlpDiffResult,
    UlpDiffSummary,
    UlpDiffToRef,
    UlpHistogram,
)
from ._torch import FusedComparison, compare_fused, fp64_reference

__all__ = [
    "bit_equal",
    "ulp_diff",
    "ulp_error",
    "error_stats",
    "diff",
    "fp64_reference",
    "compare_fused",
    "judge",
    "explain",
    "apply_switches",
    "Inputs",
    "Judgment",
    "JudgeError",
    "ModelError",
    "BitEqualResult",
    "UlpDiffResult",
    "UlpHistogram",
    "ErrorStats",
    "ErrorSummary",
    "UlpDiffToRef",
    "Diff",
    "UlpDiffSummary",
    "AgainstRef",
    "FusedComparison",
]
__version__ = "0.1.0"

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


def judge(fn, sample, *, sets=32, compile="inductor", options=None, seed=0, dtype=None, perturbation=0.5,
          speed_rounds=15, name=None, compiled=None, tolerance=None, loss=None) -> Judgment:  # fmt: skip
    """Is fn compiled less accurate than fn eager? A verdict over many input sets.

    fn: an nn.Module (judged in the mode it is in: call .eval() first) or a callable.
    sample: example inputs (a tensor, a tuple of arguments, a dict of keyword arguments or
      fusebench.Inputs(args, kwargs)); set 0 is the sample, set i > 0 perturbs it from a generator
      seeded by (seed, i) alone: floating tensors x + perturbation * std(x) * N(0, 1), integer
      tensors with each element redrawn from [min, max] with probability perturbation, constant
      tensors and booleans kept. Or a sampler: a callable taking (set_index, torch.Generator) and
      returning one set's inputs.
    compile: a torch.compile backend name ("inductor", "aot_eager", ...), a backend callable
      `backend(gm, example_inputs)` (passed as torch.compile(fn, backend=...)), or a compiler of the
      model `compiler(fn)` returning the compiled callable. The two callables are told apart by their
      signatures: exactly two required positional parameters make a backend; one positional
      parameter, at most one required (torch.compile itself), a compiler; anything else is a
      JudgeError. options: Inductor's config options ({"cpp.simdlen": 1}); compiled: an already
      compiled callable (then compile only names it).
    dtype: bf16 / f16 / f32 to judge a copy of the model and the sample cast to it. A float64 model
      is refused (JudgeError): torch has no more precise dtype for its reference.
    tolerance: the relative change of a statistic's mean over sets that still counts as "not
      worse" (task B's 0.05 by default); the share of sets worse stands beside it and decides only
      where eager's figure is 0 in every set.
    loss: judge the training step: loss(output, sample) returns a scalar tensor (sample: the set's
      inputs in the form given); the loss and the gradient of every parameter that requires grad
      (`grad:layer.weight`) and of every floating input (`grad:input[0]`) are judged as outputs of
      their own beside the forward's, eager's backward against the compiled backward (AOTAutograd's,
      compiled by the backend), both against an fp64 backward with running error bounds.

    Raises JudgeError for bad input, ModelError when the model raises in one of its runs. A
    judgment that has run 10 s reports its progress on stderr (sets done, time left).

    Every output is judged, whatever its dtype: integer and bool outputs exactly (a differing
    element is CONTRADICTED); a floating output that is non-finite where eager is finite is
    CONTRADICTED, naming the count and the first element, before any statistic.
    For every set: eager, compiled, and float64 with a running error bound per ATen op
    (docs/conditioned-error.md); each floating output's conditioned error and ULP error per set; a
    paired bootstrap over sets decides, with task B's tolerances and Holm's rule across outputs
    and statistics: SUPPORTED, CONTRADICTED or INCONCLUSIVE (bool(judgment) is True only for
    SUPPORTED; judgment.exit_status is 0 / 1 / 3). Beside it: the ULP measure's verdict, the plan's
    literal rule, torch._dynamo.utils.same's result per set, msprobe's metrics, eager-vs-compiled bit equality
    and ulp_diff, sanity checks (eager twice bit-equal, else JudgeError naming train mode / dropout /
    nondeterminism; cancellation at the worst elements), compile time and speed from interleaved
    runs. print(judgment), judgment.to_dict(), judgment.report(directory)."""
    from ._judge import judge as _judge

    return _judge(fn, sample, sets=sets, compile=compile, options=options, seed=seed, dtype=dtype,
                  perturbation=perturbation, speed_rounds=speed_rounds, name=name, compiled=compiled, tolerance=tolerance, loss=loss)  # fmt: skip


def explain(fn, sample, *, judgment=None, criterion="auto", outputs=None, sets=4, seed=0, dtype=None, options=None,
            perturbation=0.5, budget=12, cost_rounds=7, switches=None):  # fmt: skip
    """Where and why Inductor's compiled fn differs from eager, and the switches that undo it.

    criterion: "worse" (compiled's conditioned error max exceeds eager's on a set; ULP error
    where no bound) or "differs" (not bit-equal); "auto" takes "worse" when judgment is
    CONTRADICTED (and explains its contradicted outputs), else "differs". Localises the first node
    of Dynamo's graph whose compiled value meets the criterion (the graph's prefix up to a node
    compiled alone, bisection over the nodes); then searches the switches (graph breaks at the
    node, decompositions and lowerings of its ATen ops left out, Inductor's numerics options: see
    fusebench._explain) for the smallest set that removes it, at most `budget` compiled sets, and
    times each switch found against plain compiled. The Explanation prints the node, the
    mechanism and the switch list with costs; apply_switches(fn, explanation) compiles with it.
    The search runs on the localised node's prefix of the graph; whether the switches also remove
    the difference at the outputs is checked and said (removes_at_outputs). switches: a previous
    Explanation (or switch list) applied first, to search on from it for the next mechanism.
    Calls torch._dynamo.reset() between compiles."""
    from ._explain import explain as _explain

    result = _explain(fn, sample, judgment=judgment, criterion=criterion, outputs=outputs, sets=sets, seed=seed,
                      dtype=dtype, options=options, perturbation=perturbation, budget=budget, cost_rounds=cost_rounds,
                      switches=switches)  # fmt: skip
    if judgment is not None:
        judgment.explanation = result
    return result


def apply_switches(fn, switches, *, options=None, dynamic=False):
    """fn compiled by Inductor with the switches applied: an Explanation, its switch_list, or
    tokens ("compiler:emulate_precision_casts=True", "split:after=NODE", "decomposition:off=OP",
    "lowering:off=OP"). See fusebench._explain."""
    from ._explain import apply_switches as _apply

    return _apply(fn, switches, options=options, dynamic=dynamic)
