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

from ._explain import apply_switches as _switched
from ._explain import explain as _explained
from ._judge import Inputs, JudgeError, Judgment, ModelError
from ._judge import judge as _judged
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
from ._toolkit import bit_equal, diff, error_stats, ulp_diff, ulp_error
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


def judge(fn, sample, *, sets=32, compile=None, options=None, seed=0, dtype=None, perturbation=0.5,
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
      JudgeError. None: Inductor. options: Inductor's config options ({"cpp.simdlen": 1}); compiled: an
      already compiled callable (then compile only names it; left out, the callable's own name does).
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
    return _judged(fn, sample, sets=sets, compile=compile, options=options, seed=seed, dtype=dtype,
                  perturbation=perturbation, speed_rounds=speed_rounds, name=name, compiled=compiled, tolerance=tolerance, loss=loss)  # fmt: skip


def explain(fn, sample, *, judgment=None, criterion="auto", outputs=None, sets=4, seed=0, dtype=None, options=None,
            perturbation=0.5, budget=12, cost_rounds=7, switches=None, loss=None, compile=None):  # fmt: skip
    """Where and why Inductor's compiled fn differs from eager, and the switches that undo it.

    criterion: "worse" (compiled's conditioned error max exceeds eager's on a set; on an output
    the judge decides by its ULP error, as where the conditioned error cannot resolve it, the
    judge's ULP statistic over the sets CONTRADICTED against its tolerance, at the outputs and at
    the nodes searched) or "differs" (not bit-equal); "auto" takes "worse" when judgment is
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
    loss: explains the training step (judge's loss=; a judgment with loss needs it): the loss and
    gradients are outputs beside the forward's, and the node is localised first in AOTAutograd's
    backward graph (run on the values eager's forward saved; its prefixes compiled by Inductor),
    named with the forward node and module whose backward it is; the forward graph where no
    backward node meets the criterion; the gradients that meet it are searched one at a time, each
    among the nodes it is computed from. compile: the backend whose difference is localised
    (default Inductor; another torch.compile backend, an aot_autograd one included, is localised
    only: switches are Inductor's). Calls torch._dynamo.reset() between compiles."""
    result = _explained(fn, sample, judgment=judgment, criterion=criterion, outputs=outputs, sets=sets, seed=seed,
                      dtype=dtype, options=options, perturbation=perturbation, budget=budget, cost_rounds=cost_rounds,
                      switches=switches, loss=loss, compile=compile)  # fmt: skip
    if judgment is not None:
        judgment.explanation = result
    return result


def apply_switches(fn, switches, *, options=None, dynamic=False):
    """fn compiled by Inductor with the switches applied: an Explanation, its switch_list, or
    tokens ("compiler:emulate_precision_casts=True", "split:after=NODE", "decomposition:off=OP",
    "lowering:off=OP"). See fusebench._explain."""
    return _switched(fn, switches, options=options, dynamic=dynamic)
