"""explain: where and why a compiled PyTorch function differs from eager, and the switches that
undo it (docs/fusion-switches.md's method, for any model compiled by Inductor).

Localise: the graph Dynamo captured is run in segments: the prefix of the graph that ends at one
node is compiled alone and that node's compiled value compared with its eager value and its fp64
value and bound (fusebench._bounds run over the same graph). Bisection over the nodes in graph
order finds a node whose compiled value meets the criterion while the node before it does not.

Attribute: switches, each setting one of Inductor's mechanisms to eager's behaviour:
  split:before=NODE / split:after=NODE     a graph break there (kernel split: the value is stored)
  decomposition:off=OP                     Inductor's decomposition of one ATen op left out (the
                                           op is then lowered or runs as ATen's kernel), as
                                           torch's compiler_bisector does
  lowering:off=OP                          Inductor's lowering of one ATen op left out: ATen's own
                                           kernel runs (compiler_bisector's "lowerings")
  triton:enable_fp_fusion=False            on CUDA, Triton's FMA contraction off alone (its
                                           CUDA backend's parse_options patched while compiling)
  compiler:NAME=VALUE                      one of Inductor's options, introspected (hasattr) since
                                           versions differ: emulate_precision_casts (per-op
                                           rounding; on CUDA also Triton's enable_fp_fusion, which
                                           Inductor sets to not emulate_precision_casts), numerics,
                                           cpp.enable_floating_point_contract_flag (FMA
                                           contraction), cpp.simdlen (vectorised code),
                                           cpp.use_two_step_variance_threshold (variance algorithm),
                                           pattern_matcher (pattern rewrites), max_fusion_size
                                           (fusion extent), layout_optimization (a graph with
                                           convolutions: Inductor's convolutions, forward and
                                           backward, on channels-last operands where eager's are
                                           NCHW); on CUDA eager_numerics.division_rounding,
                                           eager_numerics.disable_ftz, triton.persistent_reductions
The search is the suite's: all candidates together, then each alone; if several are needed,
Zeller's ddmin, each distinct set compiled once, within a budget of compiles that the result
states. A difference that no switch removes reads "unexplained", with what was tried.
"""

from __future__ import annotations

import ast
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import decision as D
from ._inductor import SwitchedInductor, triton_fp_fusion_patchable
from ._inputs import JudgeError, flatten_outputs
from ._judge import (
    Reference,
    _bits_equal,
    _model_dtype,
    _parse_dtype,
    _percentile,
    device_sets,
    measure_speed,
    name_of_compiled,
    path_figures,
)
from ._toolkit import ulp_error
from .decision import num

MECHANISMS = {
    "split": "kernel split (per-op rounding at a boundary)",
    "decomposition": "decomposition",
    "lowering": "lowering",
    "emulate_precision_casts": "per-op rounding",
    "numerics": "eager numerics (strict)",
    "cpp.enable_floating_point_contract_flag": "FMA contraction",
    "cpp.simdlen": "vectorised code",
    "cpp.use_two_step_variance_threshold": "variance algorithm",
    "pattern_matcher": "pattern rewrite",
    "max_fusion_size": "fusion extent",
    "layout_optimization": "layout optimisation (channels-last convolutions)",
    "eager_numerics.division_rounding": "division rounding",
    "eager_numerics.disable_ftz": "flush to zero",
    "triton.persistent_reductions": "reduction config",
}


# ---- switches
@dataclass(frozen=True)
class Switch:
    kind: str  # split, decomposition, lowering, compiler
    name: str  # before / after, off, or the option's name
    value: Any  # node name, op name, or the option's value

    @property
    def token(self) -> str:
        if self.kind == "split":
            return f"split:{self.name}={self.value}"
        if self.kind in ("decomposition", "lowering"):
            return f"{self.kind}:off={self.value}"
        if self.kind == "triton":
            return f"triton:{self.name}={self.value}"
        return f"compiler:{self.name}={self.value!r}"

    @property
    def mechanism(self) -> str:
        key = self.name if self.kind == "compiler" else self.kind
        if self.kind == "triton":
            return "FMA contraction (Triton)"
        return MECHANISMS.get(key, self.name)

    @staticmethod
    def parse(token: str) -> Switch:
        kind, _, rest = str(token).partition(":")
        name, _, value = rest.partition("=")
        if kind == "split" and name in ("before", "after") and value:
            return Switch("split", name, value)
        if kind in ("decomposition", "lowering") and name == "off" and value:
            return Switch(kind, "off", value)
        if kind == "triton" and name == "enable_fp_fusion" and value in ("False", "false", "0"):
            return Switch("triton", "enable_fp_fusion", False)
        if kind == "compiler" and name and value:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                parsed = value
            return Switch("compiler", name, parsed)
        raise JudgeError(
            f"apply_switches: {token!r} is not a switch (split:before=NODE, split:after=NODE, decomposition:off=OP, "
            "lowering:off=OP, compiler:NAME=VALUE, triton:enable_fp_fusion=False)"
        )

    def __str__(self) -> str:
        return self.token


def _as_switches(switches) -> list[Switch]:
    if switches is None:
        return []
    if hasattr(switches, "switch_list"):
        switches = switches.switch_list
    out = []
    for s in switches:
        if isinstance(s, Switch):
            out.append(s)
        elif isinstance(s, SwitchEntry):
            out += [Switch.parse(t) for t in s.switch.split()]
        elif isinstance(s, dict):
            out += [Switch.parse(t) for t in str(s["switch"]).split()]
        else:
            out += [Switch.parse(t) for t in str(s).split()]
    return out


def apply_switches(fn: Callable, switches, *, options: dict | None = None, dynamic: bool = False) -> Callable:
    """fn compiled by Inductor with the switches applied (an Explanation, its switch_list, Switch
    objects or tokens such as "compiler:emulate_precision_casts=True"), on top of Inductor options.
    Judge the result again (fusebench.judge(fn, sample, compile=lambda f: switched)) to see what
    remains."""
    import torch

    backend = SwitchedInductor(_as_switches(switches), options)
    return torch.compile(fn, backend=backend, dynamic=dynamic)


# ---- explanation
@dataclass
class Trial:
    switches: list[str]
    removed: bool
    seconds: float
    error: str = ""


@dataclass
class Localisation:
    graph: int
    node: str
    target: str
    position: int  # in graph order, of `nodes` nodes
    nodes: int
    source: str  # the model's line, from the node's stack trace
    compiled_cond_max: float | None
    eager_cond_max: float | None
    compiled_ulp_max: float
    eager_ulp_max: float
    beyond_bound: bool | None
    previous: str
    compiles: int
    phase: str = "forward"  # or "backward": a node of AOTAutograd's backward graph
    backward_of: str = ""  # the backward's forward node and its module: "layer_norm (net.2, LayerNorm)"
    gradient: str = ""  # the gradient output whose computation was searched: "grad:net.2.weight"
    measure: str = "conditioned"  # what "worse" was decided on: the conditioned error or a ULP statistic
    statistic: str = ""  # for measure "ulp": the judge's statistic (decision.STATISTICS), e.g. ulp_p99
    compiled_statistic: float | None = None  # its mean over the sets, compiled and eager, at the node
    eager_statistic: float | None = None

    def text(self) -> str:
        where = f"node {self.node} ({self.target}, {self.position + 1} of {self.nodes} in graph {self.graph})"
        if self.phase == "backward":
            where = (
                f"backward node {self.node} ({self.target}, {self.position + 1} of {self.nodes} in backward graph "
                f"{self.graph})"
                + (f", the backward of {self.backward_of}" if self.backward_of else "")
                + (f", computing {self.gradient}" if self.gradient else "")
            )
        figures = (
            f"conditioned error max compiled {_n(self.compiled_cond_max)} vs eager {_n(self.eager_cond_max)}"
            if self.compiled_cond_max is not None
            else ""
        )
        figures += ("; " if figures else "") + (
            f"ULP error max compiled {_n(self.compiled_ulp_max)} vs eager {_n(self.eager_ulp_max)}"
        )
        if self.measure == "ulp":
            figures = (
                f"{D.STATISTICS[self.statistic]['label']} (mean over the sets) compiled {_n(self.compiled_statistic)} "
                f"vs eager {_n(self.eager_statistic)}; " + figures
            )
        bound = ""
        if self.beyond_bound is not None:
            bound = "; beyond its bound (conditioned error > 1)" if self.beyond_bound else "; within its bound"
        return f"{where}: {figures}{bound}" + (f"; source: {self.source}" if self.source else "")


def _n(x) -> str:
    return num(x)


@dataclass
class SwitchEntry:
    switch: str
    mechanism: str
    node: str
    op: str
    removes: list[int]
    cost: dict | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Explanation:
    criterion: str
    outputs: list[str]
    sets: list[int]  # the sets where the criterion held before any switch
    localisation: Localisation | None
    status: str  # explained, unexplained, not attempted
    minimal: list[str]
    mechanism: str
    also_removed_by: list[str]
    tried: list[Trial]
    budget: int
    switch_list: list[SwitchEntry] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    removes_at_outputs: bool | None = None  # the minimal switches, on the whole function
    measures: dict[str, Measure] = field(default_factory=dict)  # per output, what "worse" is decided on

    def lines(self) -> list[str]:
        out = [f"explanation ({self.criterion}; outputs {', '.join(self.outputs)}; sets {self.sets}):"]
        if self.criterion == "worse":
            out += [f"  {name}: {m.sentence()}" for name, m in self.measures.items() if m.name == "ulp"]
        if self.localisation is not None:
            out.append("  first node: " + self.localisation.text())
        if self.status == "explained":
            where = self.localisation.node if self.localisation else "?"
            at = {True: " (and at the outputs)", False: " at the node (not at the outputs)", None: ""}
            out.append(
                f"  explained: {self.mechanism} at {where}: {' + '.join(self.minimal)} removes it"
                + at[self.removes_at_outputs]
            )
            if self.also_removed_by:
                out.append("  also removed by (alone): " + ", ".join(self.also_removed_by))
        else:
            out.append(
                f"  {self.status}: tried "
                + "; ".join(
                    (" + ".join(t.switches) or "(none)") + (f" (failed: {t.error})" if t.error else "")
                    for t in self.tried
                )
            )
        for e in self.switch_list:
            cost = ""
            if e.cost and not e.cost.get("rounds"):
                cost = f"; cost {e.cost.get('resolved', 'not measured')}"
            elif e.cost:
                cost = (
                    f"; cost: {e.cost['slowdown']:.2f}x the compiled time [{e.cost['low']:.2f}, {e.cost['high']:.2f}] "
                    f"over {e.cost['rounds']} interleaved rounds ({e.cost.get('resolved', '')})"
                )
            out.append(f"  switch {e.switch} ({e.mechanism} at {e.node}, {e.op}){cost}")
        out.append(
            f"  budget: {len(self.tried)} of at most {self.budget} switch sets compiled, {self.seconds:.0f} s in all"
        )
        out += [f"  note: {n}" for n in self.notes]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict:
        return {
            "schema": "fusebench.explanation/1",
            "criterion": self.criterion,
            "outputs": self.outputs,
            "sets": self.sets,
            "localisation": None if self.localisation is None else dict(self.localisation.__dict__),
            "status": self.status,
            "minimal": self.minimal,
            "mechanism": self.mechanism,
            "also_removed_by": self.also_removed_by,
            "tried": [dict(t.__dict__) for t in self.tried],
            "budget": self.budget,
            "switch_list": [e.to_dict() for e in self.switch_list],
            "notes": self.notes,
            "seconds": self.seconds,
            "removes_at_outputs": self.removes_at_outputs,
            "measures": {name: m.to_dict() for name, m in self.measures.items()},
        }


# ---- capture
class _Recorder:
    """A backend that keeps Dynamo's graphs and, per call, their inputs; runs them eagerly."""

    def __init__(self):
        self.graphs: list = []
        self.calls: list[list[list]] = []  # per graph, per call: the inputs

    def __call__(self, gm, example_inputs):
        index = len(self.graphs)
        self.graphs.append(gm)
        self.calls.append([])

        def run(*args):
            self.calls[index].append([a.detach().clone() if hasattr(a, "detach") else a for a in args])
            return gm(*args)

        return run


def _capture_backward(fn, explain_sets, make_step, torch) -> _Recorder:
    """AOTAutograd's backward graph(s) of fn's training step and, per set, their inputs (the values
    the forward saved and the incoming gradient). The forward runs as traced and the backward is
    traced without decompositions, so that run node by node it computes eager's backward: each of
    its ATen ops is the one autograd calls, and its nodes keep their forward node's module
    (fwd_nn_module_stack, fwd_source_fn_stack)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo import reset
    from torch._dynamo.backends.common import aot_autograd

    recorder = _Recorder()
    backend = aot_autograd(
        fw_compiler=lambda gm, example_inputs: make_boxed_func(gm),
        bw_compiler=lambda gm, example_inputs: make_boxed_func(recorder(gm, example_inputs)),
    )
    reset()
    captured = torch.compile(fn, backend=backend, dynamic=False)
    for s, inputs in enumerate(explain_sets):
        make_step(captured).compiled(inputs, s)
    return recorder


def _gradient_ancestors(gm, args, gradient, torch) -> set | None:
    """The names of the backward graph's nodes that one gradient is computed from: the graph's
    outputs whose eager values (the graph run node by node on one set) are bit-equal to eager's
    gradient, and their ancestors; None where no output is (the gradient is not this graph's)."""
    values = _interpret(gm, args, torch)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    found = [
        r
        for r in results
        if isinstance(r, torch.fx.Node)
        and isinstance(values.get(r.name), torch.Tensor)
        and values[r.name].shape == gradient.shape
        and values[r.name].dtype == gradient.dtype
        and not _bits_equal(values[r.name], gradient, torch)
    ]
    if not found:
        return None
    among, stack = set(), list(found)
    while stack:
        n = stack.pop()
        if n.name not in among:
            among.add(n.name)
            stack += n.all_input_nodes
    return among


def _forward_origin(node) -> str:
    """The forward node whose backward a backward node is, with its module: "layer_norm (net.2,
    LayerNorm)", from the metadata AOTAutograd copies onto backward nodes."""
    sources = node.meta.get("fwd_source_fn_stack") or []
    modules = list((node.meta.get("fwd_nn_module_stack") or {}).values())
    name = str(sources[-1][0]) if sources else ""
    module = ""
    if modules:
        path, cls = modules[-1]
        path = str(path).replace("L['self'].", "").replace("L['self']", "self").replace("L['fn'].", "")
        module = f"{path}, {getattr(cls, '__name__', cls)}"
    if name and module:
        return f"{name} ({module})"
    return name or module


def _backward_target(node) -> str:
    """The ATen op a backward node computes; for an element of an op's tuple, the op and the index
    (aten.native_layer_norm_backward.default[1], the weight's gradient)."""
    import operator

    if node.target is operator.getitem and node.args and getattr(node.args[0], "op", "") == "call_function":
        return f"{node.args[0].target}[{node.args[1]}]"
    return str(node.target) if node.op == "call_function" else _target_name(node)


def _interpret(gm, args, torch, mode=None) -> dict:
    """node name -> value, running gm's nodes one by one (under mode when given). Each value is
    a copy taken when its node ran: an in-place op further on (ReLU(inplace=True) after a batch
    norm, as ResNet and MobileNet write it) mutates the tensor a node returned, and the node's value
    must be the one its out-of-place twin would keep (under mode, the copy keeps the bound of that
    moment too). The graph's inputs are copied too, so that a graph mutating one leaves the set as
    it was."""
    values: dict[str, Any] = {}

    def snapshot(value):
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, (list, tuple)):
            return value if hasattr(value, "_fields") else type(value)([snapshot(v) for v in value])
        return value

    class Keep(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n.name] = snapshot(result)
            return result

    ctx = mode if mode is not None else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        Keep(gm).run(*_fresh(args, torch))
    return values


def _fresh(args, torch) -> list:
    """Copies of a call's tensor arguments: a compiled graph may mutate its inputs in place."""
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _prefix(gm, node_name: str, torch):
    """A copy of gm that computes up to node_name and returns its value."""
    graph = torch.fx.Graph()
    env = {}
    for n in gm.graph.nodes:
        if n.op == "output":
            break
        env[n.name] = graph.node_copy(n, lambda m: env[m.name])
        if n.name == node_name:
            break
    graph.output(env[node_name])
    graph.eliminate_dead_code()
    # placeholders are kept even when unused: the compiled prefix takes the graph's inputs
    return torch.fx.GraphModule(gm, graph)


def _floating_tensor(x, torch) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0


def _cond_max(y, ref, bound, torch) -> float | None:
    from ._bounds import conditioning_floor

    floor = conditioning_floor(bound, y.dtype)
    if floor is None:
        return None
    difference = (y.detach().double() - ref.to(y.device)).abs().cpu().numpy().reshape(-1)
    return float((difference / floor).max())


def _ulp_max(y, ref) -> float:
    return float(np.nanmax(np.asarray(ulp_error(y.detach().cpu().contiguous(), ref.detach().cpu().contiguous()))))


def _meets(criterion: str, c, e, ref, bound, torch) -> bool:
    """Does the compiled value c meet the criterion against eager's e on one set (the conditioned
    error's max where there is a bound, else the ULP error's)?"""
    if c.shape != e.shape or c.dtype != e.dtype:
        return True
    if criterion == "differs":
        return _bits_equal(c, e, torch) > 0
    cc, ce = _cond_max(c, ref, bound, torch), _cond_max(e, ref, bound, torch)
    if cc is not None and ce is not None:
        return cc > ce
    return _ulp_max(c, ref) > _ulp_max(e, ref)


UNRESOLVED = "the conditioned error cannot resolve this output"


@dataclass(frozen=True)
class Measure:
    """What "worse" is decided on at one output, and at the nodes localised for it: the judge's
    deciding measure there. "conditioned": the conditioned error's max on a set (the ULP error's
    where a value has no bound). "ulp": the judge's ULP statistic (decision.STATISTICS), worse
    where the judge's rule over the sets reads CONTRADICTED against its tolerance, so that noise
    (a reordered sum's own rounding) is not "worse"."""

    name: str  # "conditioned" or "ulp"
    statistic: str = ""  # for "ulp": ulp_p99 or ulp_max
    reason: str = ""  # why the conditioned error does not decide it

    @property
    def label(self) -> str:
        return D.STATISTICS[self.statistic]["label"] if self.name == "ulp" else "conditioned error max"

    def sentence(self) -> str:
        tolerance = D.STATISTICS[self.statistic]["relative_tolerance"] if self.name == "ulp" else None
        rule = f" (compiled's mean over the sets more than {num(tolerance * 100)} % above eager's, the judge's rule)"
        return f"localised on the {self.label} error{rule if tolerance is not None else ''}: {self.reason}"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _ulp_statistic(y, ref, statistic: str) -> float:
    """One path's ULP statistic on one set, as the judge computes it (finite elements only)."""
    ulp = np.asarray(ulp_error(y.detach().cpu().contiguous(), ref.detach().cpu().contiguous()), dtype=float)
    ulp = ulp.reshape(-1)[np.isfinite(ulp.reshape(-1))]
    if ulp.size == 0:
        return math.nan
    return _percentile(ulp, 99) if statistic == "ulp_p99" else float(ulp.max())


def _meeting(criterion: str, measure: Measure | None, values: list, torch) -> list[int]:
    """The positions in values (per set: compiled, eager, fp64, bound) where the compiled value meets
    the criterion. On a ULP measure, the sets together decide (the judge's rule on the statistic's
    per-set figures: CONTRADICTED, or eager's 0 in every set where compiled's is not); where they
    do, the sets meeting it are those where compiled's figure exceeds eager's."""
    mismatched = [k for k, (c, e, _, _) in enumerate(values) if c.shape != e.shape or c.dtype != e.dtype]
    if mismatched or criterion != "worse" or measure is None or measure.name != "ulp":
        return mismatched or [k for k, v in enumerate(values) if _meets(criterion, *v, torch)]
    compiled = [_ulp_statistic(c, ref, measure.statistic) for c, _, ref, _ in values]
    eager = [_ulp_statistic(e, ref, measure.statistic) for _, e, ref, _ in values]
    pairs = [(c, e) for c, e in zip(compiled, eager) if math.isfinite(c) and math.isfinite(e)]
    if not pairs:
        return []
    if sum(e for _, e in pairs) == 0:
        worse = any(c > 0 for c, _ in pairs)
    else:
        parts = D.judge_statistic("", measure.statistic, compiled, eager)
        worse = any(p.outcome is D.Outcome.CONTRADICTED for p in parts)
    return [k for k, (c, e) in enumerate(zip(compiled, eager)) if c > e] if worse else []


def _decided_measure(name: str, values: list, torch) -> Measure:
    """One output's deciding measure as fusebench.judge decides it (decision.output_parts) from the
    per-set figures of compiled and eager against the fp64 reference (values: per set compiled,
    eager, fp64, bound): the ULP error where a set has no bound or where the conditioned difference
    lies within the fp64 reference's resolution (decision.RESOLUTION_FLOOR of the bound)."""
    from ._bounds import conditioning_floor

    figures: dict[str, tuple[list, list]] = {s: ([], []) for s in D.STATISTICS}
    no_bound = False
    for c, e, ref, bound in values:
        floor = conditioning_floor(bound, e.dtype)
        no_bound = no_bound or floor is None
        floor = None if no_bound else floor
        r = ref.detach().cpu().double().contiguous()
        for path, y in ((0, c), (1, e)):
            y = y.detach().cpu()
            ulp = np.asarray(ulp_error(y.contiguous(), r), dtype=float).reshape(-1)
            row = path_figures(y.double().numpy().reshape(-1), r.numpy().reshape(-1), ulp, floor)
            for s in D.STATISTICS:
                figures[s][path].append(row[s])
    if no_bound:
        return _ulp_measure(D.output_parts(name, figures, "ulp")[1], "a set has no bound (an op without a rule)")
    measure, parts, _ = D.output_parts(name, figures, "conditioned")
    if measure != "ulp":
        return Measure("conditioned")
    return _ulp_measure(parts, UNRESOLVED + " (compiled − eager lies within the fp64 reference's resolution)")


def _ulp_measure(parts: list, reason: str) -> Measure:
    """A ULP measure on the statistic of the first of the judge's ULP parts that is CONTRADICTED
    (the per-set P99 ULP where none is)."""
    contradicted = [p.statistic.split()[0] for p in parts if (p.holm or p.outcome) is D.Outcome.CONTRADICTED]
    statistic = next((s for s in contradicted if D.STATISTICS.get(s, {}).get("measure") == "ulp"), "ulp_p99")
    return Measure("ulp", statistic, reason)


def _judged_measure(o) -> Measure:
    """One output's deciding measure from fusebench.judge's OutputJudgment."""
    if o.measure != "ulp":
        return Measure("conditioned")
    why = o.no_bound_reason or ""
    reason = UNRESOLVED + " (the judge: compiled − eager lies within the fp64 reference's resolution)"
    if "cannot resolve" not in why:
        reason = f"the judge decided it on the ULP error ({why})" if why else "the judge decided it on the ULP error"
    return _ulp_measure(o.parts, reason)


# ---- explain
def check_judgment_fits(judgment: Any, compile: Any) -> None:
    """A judgment explain can localise: of the backend explain compiles with, and decided by error sizes (a write
    into the inputs, or an output of another dtype or shape, is no numerical difference to localise)."""
    writes = getattr(judgment, "writes", None) or []
    if writes:
        raise JudgeError(
            f"explain: the judgment is decided by what compiled writes ({writes[0].text()}): no numerical difference "
            "to localise"
        )
    other_form = [o.name for o in judgment.outputs if getattr(o, "other_form_sets", 0)]
    if other_form:
        raise JudgeError(
            f"explain: compiled returns {', '.join(other_form)} in another dtype or shape than eager: no numerical "
            "difference to localise"
        )
    localised = name_of_compiled(compile, None, None)
    judged = judgment.backend.split(" (")[0]
    if judged != localised:
        raise JudgeError(
            f"explain: the judgment is of {judgment.backend}, and explain would localise {localised}'s difference; "
            f"pass compile= the torch.compile backend the judgment compiled with (explain localises backends, not "
            "a compiler of the model or a callable compiled elsewhere)"
        )


def explain(
    fn: Callable,
    sample: Any,
    *,
    judgment: Any = None,
    criterion: str = "auto",
    outputs: list[str] | None = None,
    sets: int = 4,
    seed: int = 0,
    dtype: Any = None,
    options: dict | None = None,
    perturbation: float = 0.5,
    budget: int = 12,
    cost_rounds: int = 7,
    switches: Any = None,
    loss: Callable | None = None,
    compile: Any = None,
) -> Explanation:
    """See fusebench.explain's docstring (the package's __init__). switches: applied first (a
    previous Explanation or a switch list), so that the search goes on from them. loss: the
    training step is explained (judge's loss=): its gradients and loss beside the outputs, localised
    in AOTAutograd's backward graph. compile: the torch.compile backend whose difference is
    localised (None or "inductor": Inductor, whose switches are then searched; another backend is
    localised only, its backward prefixes compiled by its AOTAutograd bw_compiler where it has one)."""
    import torch
    from torch._dynamo import reset

    from ._bounds import BoundMode

    t_start = time.perf_counter()
    judged_loss = getattr(judgment, "loss", None) if judgment is not None else None
    if judged_loss and loss is None:
        raise JudgeError(
            f"explain: the judgment is of the training step (loss={judged_loss}); pass its loss function too, "
            f"explain(fn, sample, judgment=judgment, loss={judged_loss}), to explain its gradients"
        )
    if loss is not None and not callable(loss):
        raise JudgeError(f"explain: loss is a {type(loss).__name__}, not a callable loss(output, sample)")
    inductor = compile is None or compile == "inductor"
    backend = None
    if not inductor:
        if switches or options:
            raise JudgeError(f"explain: switches= and options= are Inductor's; compile={compile!r} is another backend")
        try:
            backend = torch._dynamo.lookup_backend(compile) if isinstance(compile, str) else compile
        except Exception as error:
            raise JudgeError(f"explain: compile={compile!r} is not a torch.compile backend: {error}") from None
        if not callable(backend):
            raise JudgeError(f"explain: compile is a {type(compile).__name__}, not a torch.compile backend")
    if judgment is not None:
        check_judgment_fits(judgment, "inductor" if inductor else compile)
    if criterion == "auto":
        worse = judgment is not None and judgment.outcome.value == "contradicted"
        criterion = "worse" if worse else "differs"
    if criterion not in ("worse", "differs"):
        raise JudgeError(f"explain: criterion={criterion!r}; expected 'worse', 'differs' or 'auto'")
    if judgment is not None and outputs is None:
        outputs = [o.name for o in judgment.outputs if o.outcome.value == "contradicted"] or None
        seed = judgment.seed
    if dtype is not None:
        dtype = _parse_dtype(dtype, torch)
        if isinstance(fn, torch.nn.Module):
            import copy

            fn = copy.deepcopy(fn).to(dtype)
    # judge's sets, on the model's device
    make_set, device = device_sets(fn, sample, seed=seed, dtype=dtype, perturbation=perturbation, torch=torch)
    explain_sets = [make_set(i) for i in range(sets)]
    model_dtype = _model_dtype(fn, explain_sets[0], torch)
    notes: list[str] = []
    make_step = None
    if loss is not None:
        from ._training import TrainingStep, sample_form

        title = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", "fn")
        form = sample_form(sample, torch)

        def make_step(compiled=None):
            return TrainingStep(fn, compiled, loss, form, title, torch)

    def run_outputs(compiled, s: int) -> dict:
        """One set's named outputs: the forward's (grad off), or the training step's with loss=."""
        inputs = explain_sets[s]
        if make_step is not None:  # the step's forward outputs keep their autograd history: detached
            step = make_step(compiled)
            named = step.compiled(inputs, s) if compiled is not None else step.eager(inputs, s)
            return {n: t.detach() for n, t in named}
        with torch.no_grad():
            return dict(flatten_outputs(inputs.call(compiled if compiled is not None else fn), torch))

    # eager and fp64 outputs, once
    reference = Reference(fn, model_dtype, torch)
    eager_outs, refs = [], []
    for s, inputs in enumerate(explain_sets):
        eager_outs.append(run_outputs(None, s))
        if make_step is not None:
            r_outs, mode = make_step().reference(reference, inputs, s)
        else:
            r_tree, mode = reference.run(inputs)
            r_outs = flatten_outputs(r_tree, torch)
        refs.append({n: (t.detach(), mode.bound(t)) for n, t in r_outs if t.is_floating_point()})
    names = [n for n, t in eager_outs[0].items() if t.is_floating_point()]
    targets = [n for n in (outputs or names) if n in names]
    if not targets:
        raise JudgeError(f"explain: no floating output among {outputs}; outputs are {names}")

    meeting: dict[str, list[int]] = {}  # of the last criterion_sets: output -> the sets where it meets it

    def compared(got: list[dict], n: str) -> list:
        return [(got[s][n], eager_outs[s][n], *refs[s][n]) for s in range(len(explain_sets))]

    measures: dict[str, Measure] = {}  # per output, what "worse" is decided on (the judge's measure)

    def criterion_sets(compiled=None, got: list[dict] | None = None) -> list[int]:
        meeting.clear()
        if got is None:
            got = [run_outputs(compiled, s) for s in range(len(explain_sets))]
        for n in targets:
            sets_meeting = _meeting(criterion, measures.get(n), compared(got, n), torch)
            if sets_meeting:
                meeting[n] = sets_meeting
        return sorted({s for sets in meeting.values() for s in sets})

    base = _as_switches(switches)

    def compile_with(subset: list[Switch]):
        reset()
        return torch.compile(
            fn, backend=SwitchedInductor(base + subset, options) if inductor else backend, dynamic=False
        )

    compiled_at_start = compile_with([])
    got_at_start = [run_outputs(compiled_at_start, s) for s in range(len(explain_sets))]
    judged = {o.name: o for o in getattr(judgment, "outputs", None) or []}
    for n in targets if criterion == "worse" else []:
        # the judge's deciding measure: its judgment's where given, else decided as it decides
        measures[n] = (
            _judged_measure(judged[n]) if n in judged else _decided_measure(n, compared(got_at_start, n), torch)
        )
    baseline = criterion_sets(got=got_at_start)
    meeting_at_baseline = dict(meeting)
    if not baseline:
        return Explanation(
            criterion, targets, [], None, "nothing to explain", [], "", [], [], budget,
            notes=[f"compiled meets no '{criterion}' criterion on the {sets} sets: nothing to explain"],
            seconds=time.perf_counter() - t_start, measures=measures,
        )  # fmt: skip

    def capture_forward() -> _Recorder:
        """Dynamo's graph(s) and their inputs on the sets."""
        reset()
        recorder = _Recorder()
        captured = torch.compile(fn, backend=recorder, dynamic=False)  # whole: base splits apply to prefixes
        with torch.no_grad():
            for inputs in explain_sets:
                inputs.call(captured)
        return recorder

    def prefix_compiler(phase: str):
        """What compiles a graph's prefix: None for Inductor (_localise's own, with the switches);
        for another backend, its AOTAutograd bw_compiler for the backward (the backend itself would
        compile a prefix as inference, with its forward compiler), else the backend."""
        if inductor:
            return None
        kwargs = getattr(backend, "kwargs", None) or {}
        if phase == "backward" and (kwargs.get("bw_compiler") or kwargs.get("fw_compiler")):
            return kwargs.get("bw_compiler") or kwargs.get("fw_compiler")
        return backend

    def localise_in(recorder: _Recorder, phase: str):
        if len(recorder.graphs) > 1:
            notes.append(
                f"{'Dynamo' if phase == 'forward' else 'AOTAutograd'} captured {len(recorder.graphs)} {phase} graphs "
                "(graph breaks); localised in the first that meets it"
            )
        for g, gm in enumerate(recorder.graphs):
            calls = recorder.calls[g]
            if len(calls) < len(explain_sets):
                continue
            # in the backward, one gradient at a time (those that meet the criterion, in output order):
            # the gradients are branches of the graph, and the bisection needs a chain of nodes
            # along which a difference, once there, stays
            gradients = [n for n in targets if n.startswith("grad:") and n in meeting_at_baseline]
            for gradient in gradients if phase == "backward" else [None]:
                among = None
                if gradient is not None:
                    among = _gradient_ancestors(gm, calls[baseline[0]], eager_outs[baseline[0]][gradient], torch)
                    if among is None:
                        continue
                # a node is worse on the measure that decides the output searched (in the forward,
                # the first output that meets the criterion)
                measure = measures.get(gradient or next(iter(meeting_at_baseline)))
                loc, _, checker = _localise(
                    gm, g, calls, baseline, criterion, model_dtype, options, torch, BoundMode, base, among,
                    prefix_compiler(phase), measure,
                )  # fmt: skip
                if loc is not None:
                    if phase == "backward":
                        node = next(n for n in gm.graph.nodes if n.name == loc.node)
                        loc.phase, loc.target = phase, _backward_target(node)
                        loc.backward_of, loc.gradient = _forward_origin(node), gradient
                    return loc, checker
        return None, None

    if make_step is None:
        recorder = capture_forward()
        localisation, node_check = localise_in(recorder, "forward")
    else:
        # the backward first: its graph, run on the values eager's forward saved, compiled prefix by
        # prefix; where none of its nodes meets the criterion, the difference entered through the
        # values the compiled forward saved, and the forward graph is searched
        recorder = _capture_backward(fn, explain_sets, make_step, torch)
        localisation, node_check = localise_in(recorder, "backward")
        if localisation is None:
            notes.append(
                "no node of the backward graph, run on the values eager's forward saved, meets the criterion when "
                "its prefix is compiled alone: searched the forward, whose saved values feed the backward"
            )
            recorder = capture_forward()
            localisation, node_check = localise_in(recorder, "forward")
    if localisation is None:
        notes.append("no node of the captured graphs meets the criterion when its prefix is compiled alone")
    elif localisation.phase == "backward":
        forward_outputs = [n for n in meeting_at_baseline if not n.startswith("grad:")]
        if forward_outputs:
            notes.append(
                f"{', '.join(forward_outputs)} (not gradients) meet the criterion too: explain(..., outputs="
                f"{forward_outputs!r}) localises them in the forward"
            )

    # candidates
    candidates, candidate_nodes = _candidates(recorder, localisation, options, torch)
    if not inductor:
        candidates = []
        named = compile if isinstance(compile, str) else f"a {type(compile).__name__} backend"
        notes.append(f"compile={named} is not Inductor: its difference is localised, no switch is searched")
    if localisation is not None and localisation.phase == "backward":
        # a graph break cuts Dynamo's forward graph; nothing applies one inside AOTAutograd's backward
        splits = [c.token for c in candidates if c.kind == "split"]
        candidates = [c for c in candidates if c.kind != "split"]
        if splits:
            notes.append(
                f"kernel splits in the backward graph ({', '.join(splits)}) are not among the switches: no "
                "switch of torch.compile applies one there"
            )
    tried: list[Trial] = []
    results: dict[frozenset, bool] = {}

    def removes(subset: list[Switch]) -> bool:
        key = frozenset(s.token for s in subset)
        if key in results:
            return results[key]
        if len(tried) >= budget:
            raise _Budget()
        t = time.perf_counter()
        error = ""
        try:
            if node_check is not None:  # at the localised node: its graph's prefix, compiled alone
                ok = not node_check(subset)
            else:
                left = criterion_sets(compile_with(subset))
                ok = not any(s in left for s in baseline)
        except Exception as exc:  # a switch set Inductor cannot compile does not remove it
            ok, error = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        tried.append(Trial([s.token for s in subset], ok, time.perf_counter() - t, error))
        results[key] = ok
        return ok

    status, minimal, also = "unexplained", [], []
    try:
        # each alone first (most differences have one mechanism); then all together, and ddmin
        # when only a combination removes it (switches can interact, so both are needed)
        first = None
        for c in candidates:
            if removes([c]):
                first = c
                break
        if first is not None:
            minimal, status = [first], "explained"
            for c in candidates[candidates.index(first) + 1 :]:
                if len(tried) >= budget:
                    break
                if removes([c]):
                    also.append(c.token)
        elif len(candidates) > 1 and removes(candidates):
            minimal, status = _ddmin(candidates, removes), "explained"
        elif not candidates and inductor:
            notes.append("no switch applies to this graph")
    except _Budget:
        status = "explained" if minimal else "not attempted"
        notes.append(f"the budget of {budget} compiled switch sets ended the search")
    node = localisation.node if localisation else "(whole graph)"
    op = localisation.target if localisation else ""
    entries = []
    for s in minimal:
        where, what, mech = node, op, s.mechanism
        if s.token in candidate_nodes:
            where, what, label = candidate_nodes[s.token]
            mech = label or mech
        elif s.kind == "split":
            where = s.value
        entries.append(SwitchEntry(s.token, mech, str(where), what, list(baseline)))
    mechanism = " + ".join(dict.fromkeys(e.mechanism for e in entries))
    if localisation is not None and entries and entries[0].node != localisation.node:
        notes.append(f"the switch acts at {entries[0].node}, which feeds {localisation.node}")
    whole = None
    if minimal and node_check is not None:
        try:
            left = criterion_sets(compile_with(minimal))
            whole = not any(s in left for s in baseline)
        except Exception as exc:
            notes.append(f"the switch list does not compile on the whole function: {type(exc).__name__}: {exc}")
        if whole is False:
            still = "; ".join(f"{n} on sets {sets}" for n, sets in meeting.items())
            notes.append(
                f"the switch list removes the difference at {localisation.node}, not at the outputs (with it, "
                f"{still} still meet the criterion): another mechanism acts further on (explain(..., "
                "switches=explanation) searches on from this one)"
            )
    if entries and cost_rounds > 0:
        step = None if make_step is None else (lambda f: make_step(f).compiled(explain_sets[0], 0))
        _costs(fn, explain_sets[0], minimal, entries, options, cost_rounds, torch, base, device, step)
    reset()
    return Explanation(
        criterion,
        targets,
        baseline,
        localisation,
        status,
        [s.token for s in minimal],
        mechanism,
        also,
        tried,
        budget,
        entries,
        notes,
        time.perf_counter() - t_start,
        whole,
        measures,
    )


class _Budget(Exception):
    pass


def _ddmin(candidates: list, test: Callable[[list], bool]) -> list:
    """Zeller's ddmin: a 1-minimal subset of candidates for which test holds (test(candidates) does)."""
    current = list(candidates)
    n = 2
    while len(current) >= 2:
        size = math.ceil(len(current) / n)
        chunks = [current[i : i + size] for i in range(0, len(current), size)]
        reduced = False
        for chunk in chunks:
            if test(chunk):
                current, n, reduced = chunk, 2, True
                break
        if not reduced:
            for chunk in chunks:
                complement = [c for c in current if c not in chunk]
                if complement and test(complement):
                    current, n, reduced = complement, max(n - 1, 2), True
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    return current


def _localise(
    gm, g, calls, baseline, criterion, model_dtype, options, torch, BoundMode, base=(), among=None, compile_prefix=None,
    measure: Measure | None = None,
):  # fmt: skip
    """Bisection over gm's nodes (those named in `among`, when given) for the first whose compiled
    prefix meets the criterion, on `measure` (the deciding measure of the output searched: a ULP
    statistic where the conditioned error cannot resolve it) against the node's own fp64 value and
    bound. compile_prefix(prefix, example_inputs) compiles a prefix (Inductor with the base
    switches by default; with another, no switch can be checked at the node)."""
    nodes = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    sets = [calls[s] for s in baseline]
    eager_vals = [_interpret(gm, args, torch) for args in sets]
    ref_vals = []
    for args in sets:
        mode = BoundMode(model_dtype)
        up = []
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_floating_point():
                t = a.detach().to(torch.float64)
                mode.register(t, a.dtype)
                up.append(t)
            else:
                up.append(a)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            vals = _interpret(gm, up, torch, mode)
        finally:
            torch.set_default_dtype(previous)
        ref_vals.append({k: (v, mode.bound(v)) for k, v in vals.items() if _floating_tensor(v, torch)})
    nodes = [
        n
        for n in nodes
        if _floating_tensor(eager_vals[0].get(n.name), torch)
        and n.name in ref_vals[0]
        and (among is None or n.name in among)
    ]
    if not nodes:
        return None, 0, None
    switched = SwitchedInductor(list(base), options)
    compiles = 0
    cache: dict[int, tuple[bool, list]] = {}

    def node_meets(name: str, switches: list[Switch]) -> bool:
        """Does the prefix up to node `name`, compiled with the switches, meet the criterion at
        that node on any of the sets?"""
        prefix = _prefix(gm, name, torch)
        compiled = SwitchedInductor(list(base) + switches, options)(prefix, list(sets[0]))
        values = []
        for s, args in enumerate(sets):
            with torch.no_grad():
                out = compiled(*_fresh(args, torch))
            c = out[0] if isinstance(out, (list, tuple)) else out
            values.append((c, eager_vals[s][name], *ref_vals[s][name]))
        return bool(_meeting(criterion, measure, values, torch))

    def probe(k: int):
        nonlocal compiles
        if k in cache:
            return cache[k]
        name = nodes[k].name
        prefix = _prefix(gm, name, torch)
        compiled = (compile_prefix or switched)(prefix, list(sets[0]))
        compiles += 1
        values = []
        for s, args in enumerate(sets):
            with torch.no_grad():
                fresh = _fresh(args, torch)
                # an AOTAutograd compiler's function may take its arguments boxed, as one list
                # (Inductor's takes them unboxed, though functools.wraps copies the attribute)
                boxed = compile_prefix is not None and getattr(compiled, "_boxed_call", False)
                out = compiled(fresh) if boxed else compiled(*fresh)
            c = out[0] if isinstance(out, (list, tuple)) else out
            e = eager_vals[s][name]
            ref, bound = ref_vals[s][name]
            values.append((c, e, ref, bound))
        cache[k] = (bool(_meeting(criterion, measure, values, torch)), values)
        return cache[k]

    last = len(nodes) - 1
    if not probe(last)[0]:
        return None, compiles, None
    lo, hi = -1, last  # probe(hi) holds; probe(lo) does not (lo = -1: before the first node)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid)[0]:
            hi = mid
        else:
            lo = mid
    node = nodes[hi]
    values = cache[hi][1]
    c, e, ref, bound = max(values, key=lambda v: _ulp_max(v[0], v[2]))
    cc, ce = _cond_max(c, ref, bound, torch), _cond_max(e, ref, bound, torch)
    source = _source_line(node)
    on_ulp = criterion == "worse" and measure is not None and measure.name == "ulp"
    statistic = {}
    if on_ulp:
        statistic = {
            "measure": "ulp",
            "statistic": measure.statistic,
            "compiled_statistic": float(np.mean([_ulp_statistic(v[0], v[2], measure.statistic) for v in values])),
            "eager_statistic": float(np.mean([_ulp_statistic(v[1], v[2], measure.statistic) for v in values])),
        }
    return (
        Localisation(
            g,
            node.name,
            _target_name(node),
            hi,
            len(nodes),
            source,
            cc,
            ce,
            _ulp_max(c, ref),
            _ulp_max(e, ref),
            None if cc is None else cc > 1,
            nodes[lo].name if lo >= 0 else "",
            compiles,
            **statistic,
        ),
        compiles,
        None if compile_prefix is not None else (lambda switches: node_meets(node.name, switches)),
    )


def _source_line(node) -> str:
    """'file:line: code' of the model's line that made the node (its stack trace's last frame)."""
    trace = (node.meta.get("stack_trace") or "").rstrip().splitlines()
    for k in range(len(trace) - 1, -1, -1):
        line = trace[k].strip()
        if line.startswith("File "):
            parts = line.split('"')
            where = parts[1] if len(parts) > 2 else line
            number = line.split("line ")[-1].split(",")[0] if "line " in line else "?"
            code = next((c.strip() for c in trace[k + 1 :] if c.strip() and set(c.strip()) - set("~^ ")), "")
            return f"{where}:{number}: {code}" if code else f"{where}:{number}"
    return ""


def _target_name(node) -> str:
    t = node.target
    if isinstance(t, str):
        return f"{node.op} {t}"
    if type(t).__name__ == "OpOverload":  # a node of an ATen graph (AOTAutograd's backward)
        return str(t)
    module = getattr(t, "__module__", "") or ""
    name = getattr(t, "__name__", str(t))
    if module.startswith("torch") or module.startswith("_operator"):
        short = module.replace("torch._C._nn", "torch.nn.functional").replace("torch._C._VariableFunctions", "torch")
        short = "operator" if short.startswith("_operator") else short
        return f"{short}.{name}"
    return str(t)


def _own_aten_ops(gm, node, values: dict, torch) -> list:
    """The ATen ops that one node of Dynamo's graph turns into: the node alone in a graph of its
    own, its inputs as placeholders (their eager values), traced with make_fx."""
    from torch.fx.experimental.proxy_tensor import make_fx

    graph = torch.fx.Graph()
    env = {}
    inputs = []
    for p in node.all_input_nodes:
        env[p.name] = graph.placeholder(p.name)
        inputs.append(values[p.name])
    graph.output(graph.node_copy(node, lambda m: env[m.name]))
    try:
        traced = make_fx(torch.fx.GraphModule(gm, graph))(*inputs)
    except Exception:
        return []
    return [
        n.target for n in traced.graph.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    ]


# The ops whose graphs get a candidate switch of their own, by name (_op_name): convolutions
# (Inductor's layout optimisation) and the norms' and reductions' variance (its Welford reduction),
# as Dynamo's graphs call them (torch functions, tensor methods, modules) and AOTAutograd's (ATen)
CONVOLUTIONS = frozenset(
    {
        *(f"conv{d}d" for d in (1, 2, 3)),
        *(f"conv_transpose{d}d" for d in (1, 2, 3)),
        *("convolution", "_convolution", "convolution_backward", "conv_tbc"),
        *("mkldnn_convolution", "cudnn_convolution", "cudnn_convolution_transpose", "miopen_convolution"),
    }
)
VARIANCES = frozenset(
    {
        *("layer_norm", "native_layer_norm", "native_layer_norm_backward"),
        *("batch_norm", "native_batch_norm", "native_batch_norm_backward", "cudnn_batch_norm"),
        *("_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional"),
        *("group_norm", "native_group_norm", "native_group_norm_backward", "instance_norm"),
        *("var", "var_mean", "std", "std_mean"),
    }
)


def _op_name(gm, node, torch) -> str:
    """The name of the op one node of a captured graph calls: an ATen overload's packet, a torch
    function's, a tensor method's; a module's kind for a module Dynamo kept ("convolution",
    "batch_norm", "layer_norm", "group_norm"), else its class name. "" for other nodes."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        kinds = {
            torch.nn.modules.conv._ConvNd: "convolution",
            torch.nn.modules.batchnorm._NormBase: "batch_norm",
            torch.nn.LayerNorm: "layer_norm",
            torch.nn.GroupNorm: "group_norm",
        }
        return next((name for kind, name in kinds.items() if isinstance(module, kind)), type(module).__name__)
    if node.op not in ("call_function", "call_method"):
        return ""
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target.overloadpacket.__name__
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


def _candidates(recorder, localisation, options, torch) -> tuple[list[Switch], dict]:
    import torch._inductor.config as c
    from torch._inductor.decomposition import select_decomp_table
    from torch._inductor.lowering import lowerings

    out: list[Switch] = []
    where: dict[str, tuple[str, str, str | None]] = {}  # token -> (node, its target, what the switch does there)
    if localisation is not None:
        gm = recorder.graphs[localisation.graph]
        node = next(n for n in gm.graph.nodes if n.name == localisation.node)
        values = _interpret(gm, recorder.calls[localisation.graph][0], torch)
        table = select_decomp_table()
        producers = [p for p in node.all_input_nodes if p.op in ("call_function", "call_method", "call_module")]
        for n in [node, *producers]:
            ops = _own_aten_ops(gm, n, values, torch)
            for op in dict.fromkeys(ops):
                for kind, present in (("lowering", op in lowerings), ("decomposition", op in table)):
                    if present:
                        switch = Switch(kind, "off", _op_token(op))
                        if switch not in out:
                            out.append(switch)
                            label = _lowering_label(n, op, torch) if kind == "lowering" else None
                            where[switch.token] = (n.name, _target_name(n), label)
        out.append(Switch("split", "before", node.name))
        users = [u for u in node.users if u.op != "output"]
        if users:
            out.append(Switch("split", "after", node.name))
    ops = {_op_name(gm, n, torch) for gm in recorder.graphs for n in gm.graph.nodes}
    has_norm = not ops.isdisjoint(VARIANCES)
    cuda = torch.cuda.is_available() and any(
        isinstance(a, torch.Tensor) and a.is_cuda for calls in recorder.calls for args in calls[:1] for a in args
    )
    options = options or {}

    def option(name, value):
        obj = c
        for part in name.split("."):
            if not hasattr(obj, part):
                return
            obj = getattr(obj, part)
        current = options.get(name, obj)
        if current != value:
            out.append(Switch("compiler", name, value))

    # order: switches that name one mechanism first, then the node's own ops, then kernel splits,
    # then the generic ones (pattern rewrites, fusion extent); the first that removes the
    # difference alone is the explanation, the others that also do are listed beside it
    node_level = out[:]
    out.clear()
    option("emulate_precision_casts", True)
    option("cpp.enable_floating_point_contract_flag", "off")
    if cuda and triton_fp_fusion_patchable()[0]:
        out.append(Switch("triton", "enable_fp_fusion", False))
    if cuda:
        option("eager_numerics.division_rounding", True)
        option("eager_numerics.disable_ftz", True)
        option("triton.persistent_reductions", False)
    if has_norm:
        option("cpp.use_two_step_variance_threshold", 0)
    if not cuda:
        option("cpp.simdlen", 1)
    if not ops.isdisjoint(CONVOLUTIONS):
        # Inductor lays a convolution graph's tensors out channels-last (its convolution and
        # convolution_backward lowerings convert the operands), and ATen's kernels on channels-last
        # operands sum in another order than on eager's NCHW ones
        option("layout_optimization", False)
    out += [s for s in node_level if s.kind != "split"]
    out += [s for s in node_level if s.kind == "split"]
    option("pattern_matcher", False)
    option("max_fusion_size", 1)
    if cuda:
        option("numerics", "strict")
    return out, where


def _lowering_label(node, op, torch) -> str:
    """What lowering:off=op does at node: where op is pointwise and the node passes it a Python
    number (x * 0.7), ATen's kernel takes the scalar as ATen does instead of Inductor's lowering of
    it (the scalar lowering); elsewhere ATen's kernel for op runs instead of Inductor's lowering. An
    integer attribute (a convolution's groups, a reduction's dim) is no scalar operand."""
    pointwise = torch.Tag.pointwise in getattr(op, "tags", ())
    operands = [*node.args, *node.kwargs.values()]
    if pointwise and any(isinstance(a, (float, int)) and not isinstance(a, bool) for a in operands):
        return "scalar lowering"
    return f"lowering of {_op_token(op)} (ATen's kernel instead)"


def _op_token(op) -> str:
    return f"{op.namespace}.{op._schema.name.split('::')[1]}.{op._overloadname}"


def _costs(fn, inputs, minimal, entries, options, rounds, torch, base=(), device=None, step=None) -> None:
    """Each switch's cost: plain compiled vs compiled with the switch, interleaved rounds; the
    slowdown is the geometric mean of per-round ratios with a 95 % t interval. step(compiled) runs
    what is timed (the training step); by default the forward on inputs."""
    torch._dynamo.reset()
    run = step if step is not None else inputs.call
    plain = torch.compile(fn, backend=SwitchedInductor(list(base), options), dynamic=False)
    with torch.no_grad():
        run(plain)
    from torch._dynamo.utils import counters

    for switch, entry in zip(minimal, entries):
        switched = torch.compile(fn, backend=SwitchedInductor([*base, switch], options), dynamic=False)
        with torch.no_grad():
            run(switched)
        # both compiled forms are timed as compiled: a recompile inside the rounds (a guard failing,
        # Dynamo's cache limit reached and eager run instead) would price the compiler, not the switch
        compiles = counters["stats"]["unique_graphs"]
        with torch._dynamo.config.patch(recompile_limit=64, accumulated_recompile_limit=1024):
            s = measure_speed(lambda f=switched: run(f), lambda: run(plain), 0.0, rounds, torch, device=device)
        if counters["stats"]["unique_graphs"] != compiles:
            entry.cost = {
                "rounds": 0,
                "resolved": "not measured: Dynamo compiled again during the timed rounds",
            }
            continue
        # measure_speed's speedup is first / second: switched time relative to plain compiled
        entry.cost = {
            "slowdown": s.speedup,
            "low": s.low,
            "high": s.high,
            "rounds": s.rounds,
            "compiled_ms": s.compiled_ms,
            "switched_ms": s.eager_ms,
            # the interval must exclude 1 for the timing to tell a cost from noise
            "resolved": "slower" if s.low > 1 else ("faster" if s.high < 1 else "not resolved"),
        }
