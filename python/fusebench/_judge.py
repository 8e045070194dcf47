"""judge: is a compiled PyTorch function less accurate than eager? Task B's method for any model.

For many input sets (the sample perturbed from a seed, counter-based, or a sampler's sets) the
function runs eagerly, compiled and in float64 with a running error bound (fusebench._bounds).
Every floating output gets, per set, its conditioned error and ULP error against fp64 for both
paths; a paired bootstrap over the sets decides SUPPORTED / CONTRADICTED / INCONCLUSIVE with the
suite's tolerances, and Holm's rule across the judgment's parts (fusebench.decision). Beside the
verdict, each labelled: the ULP measure's verdict, the plan's literal rule, torch._dynamo.utils.same's
rule and msprobe's metrics; always eager-vs-compiled bit equality and ULP distance; sanity checks
(eager twice bit-equal, train mode, cancellation at the worst elements); compile time and speed from
interleaved runs.
"""

from __future__ import annotations

import contextlib
import copy
import html
import json
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import decision as D
from ._inductor import SwitchedInductor
from ._inputs import Inputs, JudgeError, ModelError, compiled_parts, eager_stance
from ._toolkit import ulp_diff, ulp_error
from .decision import Outcome, Part

ILL_CONDITIONED = 100.0  # kIllConditioned of suites/accumulated_error: kappa above it is cancellation


# ---- inputs
def as_inputs(sample: Any) -> Inputs:
    """A tensor is one argument, a tuple or list the positional arguments, a dict the keyword
    arguments, an Inputs itself."""
    import torch

    if isinstance(sample, Inputs):
        return sample
    if isinstance(sample, torch.Tensor):
        return Inputs((sample,), {})
    if isinstance(sample, (tuple, list)):
        return Inputs(tuple(sample), {})
    if isinstance(sample, dict):
        return Inputs((), dict(sample))
    raise JudgeError(
        f"judge: sample is a {type(sample).__name__}; give a tensor, a tuple of arguments, a dict of keyword "
        "arguments, fusebench.Inputs(args, kwargs), or a sampler (a callable taking (set_index, generator))"
    )


def set_generator(seed: int, index: int):
    """The generator of input set `index`: seeded from (seed, index) alone, so any set can be made
    again without the others (counter-based)."""
    import torch

    state = np.random.SeedSequence([int(seed), int(index)]).generate_state(2, np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 31 ^ int(state[1]))


def perturb(sample: Inputs, generator, scale: float) -> Inputs:
    """A new input set from the sample: floating tensors x + scale * std(x) * N(0, 1) (a constant
    tensor is kept), integer tensors with each element redrawn uniformly from [min, max] of the
    sample's tensor with probability scale (a constant tensor such as an all-ones attention mask is
    kept), booleans kept. Every tensor of the set is on the CPU, computed there from the sample's
    values (set_maker moves the set to the judgment's device)."""
    import torch

    def one(t):
        t = t.detach().cpu()  # the CPU's arithmetic: a set is the same whatever device it goes to
        if t.is_floating_point():
            std = t.detach().double().std().item() if t.numel() > 1 else 0.0
            if not math.isfinite(std) or std == 0:
                return t
            noise = torch.randn(t.shape, generator=generator, dtype=torch.float64)
            return (t.double() + scale * std * noise).to(t.dtype)
        if t.dtype == torch.bool or t.numel() == 0 or t.is_complex():
            return t
        lo, hi = int(t.min()), int(t.max())
        if lo == hi:
            return t
        draw = torch.randint(lo, hi + 1, t.shape, generator=generator, dtype=t.dtype)
        take = torch.rand(t.shape, generator=generator) < scale
        return torch.where(take, draw, t)

    return sample.map(one)


def set_maker(sample: Any, *, seed: int, dtype, perturbation: float, device, torch) -> Callable[[int], Inputs]:
    """make_set(index): input set `index` of a judgment, on `device` (None: where the sample is). Set 0
    is the sample (its floating tensors cast to dtype when one is given); set i > 0 is perturb(sample)
    from set_generator(seed, i), or a sampler's set i from that generator. The generator is a CPU
    one and perturb computes on the CPU; the set moves to the device last, so a CUDA judgment sees
    the CPU judgment's inputs value for value."""
    sampler = sample if callable(sample) and not isinstance(sample, torch.Tensor) else None
    base = None if sampler is not None else as_inputs(sample)
    if base is not None and dtype is not None:
        base = base.map(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def make_set(index: int) -> Inputs:
        if sampler is not None:
            made = as_inputs(sampler(index, set_generator(seed, index)))
            if dtype is not None:
                made = made.map(lambda t: t.to(dtype) if t.is_floating_point() else t)
        else:
            made = base if index == 0 else perturb(base, set_generator(seed, index), perturbation)
        return made if device is None else made.map(lambda t: t.to(device))

    return make_set


def judgment_device(fn, inputs: Inputs, torch):
    """The device a judgment runs on (eager, compiled and the fp64 reference): that of a module's
    parameters and buffers, else that of the inputs' tensors, else the CPU. A model or inputs spread
    over several devices are refused: one judgment runs on one device."""
    held, what = set(), "its inputs"
    if isinstance(fn, torch.nn.Module):
        held = {t.device for t in (*fn.parameters(), *fn.buffers())}
        what = "its parameters and buffers"
    if not held:
        held = {t.device for t in inputs.tensors()}
        what = "its inputs"
    if len(held) > 1:
        raise JudgeError(
            f"judge: {what} lie on {len(held)} devices ({', '.join(sorted(map(str, held)))}); a judgment runs on "
            "one device: move the model and the sample to one (model.to(device))"
        )
    return held.pop() if held else torch.device("cpu")


def device_sets(fn, sample: Any, *, seed: int, dtype, perturbation: float, torch):
    """(make_set, device): the judgment's device (judgment_device, from the model or from set 0 where
    the sample is) and set_maker's sets on it."""
    here = set_maker(sample, seed=seed, dtype=dtype, perturbation=perturbation, device=None, torch=torch)
    device = judgment_device(fn, here(0), torch)
    return set_maker(sample, seed=seed, dtype=dtype, perturbation=perturbation, device=device, torch=torch), device


def synchronizer(device, torch) -> Callable[[], None]:
    """Waits for the device's queued work (a CUDA launch returns before its kernel ends, so a wall
    clock read without it times the launch); nothing to wait for on the CPU."""
    if device is not None and torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def autocast_off(stack: contextlib.ExitStack, devices, torch) -> None:
    """Autocast off on the CPU and on every device among `devices`, inside stack: a reference run in
    the caller's autocast region would compute in autocast's lower precision."""
    for kind in dict.fromkeys(["cpu", *(torch.device(d).type for d in devices)]):
        if torch.amp.is_autocast_available(kind):
            stack.enter_context(torch.autocast(kind, enabled=False))


def device_text(device, torch) -> str:
    """The device in words for the judgment's environment: 'cuda:0 (NVIDIA H100 80GB HBM3)', 'cpu'."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def _short_dtype(dtype) -> str:
    return {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32", "torch.float64": "f64"}.get(
        str(dtype), str(dtype).replace("torch.", "")
    )


# ---- the fp64 run with bounds
class Reference:
    """fn in float64 (a float64 copy of a module, made once) under BoundMode."""

    def __init__(self, fn, model_dtype, torch):
        self.torch = torch
        self.model_dtype = model_dtype
        self.params: list[tuple[Any, Any]] = []
        self.target = fn
        if isinstance(fn, torch.nn.Module):
            self.target = copy.deepcopy(fn).to(torch.float64)
            originals = dict(fn.named_parameters(remove_duplicate=False)) | dict(
                fn.named_buffers(remove_duplicate=False)
            )
            copies = dict(self.target.named_parameters(remove_duplicate=False)) | dict(
                self.target.named_buffers(remove_duplicate=False)
            )
            self.params = [(copies[name], originals[name].dtype) for name in copies if name in originals]

    def run(self, inputs: Inputs, call: Callable | None = None):
        """fn on the inputs in float64 under a fresh BoundMode, with grad disabled; or, with call,
        call(target, float64 inputs, mode) with grad enabled (the training step: its backward runs
        under the same mode)."""
        torch = self.torch
        from ._bounds import BoundMode

        mode = BoundMode(self.model_dtype)
        for p, dtype in self.params:
            mode.register(p, dtype)
        originals = inputs.tensors()
        up = inputs.map(lambda t: t.detach().to(torch.float64) if t.is_floating_point() else t.detach())
        for t, o in zip(up.tensors(), originals):
            mode.register(t, o.dtype)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.no_grad() if call is None else torch.enable_grad())
                autocast_off(stack, {t.device for t in up.tensors()} | {p.device for p, _ in self.params}, torch)
                stack.enter_context(mode)
                stack.enter_context(eager_stance(torch))
                out = up.call(self.target) if call is None else call(self.target, up, mode)
        finally:
            torch.set_default_dtype(previous)
        return out, mode


# ---- per-set figures of one output
COLUMNS = (
    "cond_p99",
    "cond_max",
    "ulp_p99",
    "ulp_max",
    "cosine",
    "max_abs_err",
    "max_rel_err",
    "one_thousandth_err_ratio",
    "five_thousandths_err_ratio",
    "rmse_vs_fp64",
)


def _percentile(x: np.ndarray, q: float) -> float:
    """numpy's percentile ("linear") of a 1-D array, by one partial sort."""
    n = x.size
    if n == 0:
        return math.nan
    pos = q / 100 * (n - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    part = np.partition(x, [lo, hi] if hi != lo else lo)
    a, b = float(part[lo]), float(part[hi])
    t = pos - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)  # numpy's _lerp


def path_figures(y64: np.ndarray, ref: np.ndarray, ulp: np.ndarray, floor: np.ndarray | None) -> dict[str, float]:
    """One path's figures on one set (docs/conditioned-error.md, "Per-set dump"), against the fp64
    reference: ULP error, conditioned error (|y - ref| / floor, floor = max(bound, eta); None: no
    bound), msprobe's metrics and the RMSE. Only finite pairs enter the metrics."""
    if not (np.isfinite(y64).all() and np.isfinite(ref).all()):
        finite = np.isfinite(y64) & np.isfinite(ref)
        y64, ref, ulp = y64[finite], ref[finite], ulp[finite]
        floor = floor[finite] if floor is not None else None
    out: dict[str, float] = {}
    n = y64.size
    if n == 0:
        return dict.fromkeys(COLUMNS, math.nan)
    diff = np.subtract(y64, ref)
    np.abs(diff, out=diff)
    out["ulp_p99"], out["ulp_max"] = _percentile(ulp, 99), float(ulp.max())
    if floor is not None:
        cond = np.divide(diff, floor)
        out["cond_p99"], out["cond_max"] = _percentile(cond, 99), float(cond.max())
        del cond
    else:
        out["cond_p99"] = out["cond_max"] = math.nan
    ny, nr = math.sqrt(float(np.dot(y64, y64))), math.sqrt(float(np.dot(ref, ref)))
    eps = float(np.finfo(np.float64).eps)
    if ny <= eps and nr <= eps:
        out["cosine"] = 1.0
    elif ny <= eps or nr <= eps:
        out["cosine"] = math.nan
    else:
        out["cosine"] = float(np.dot(y64, ref)) / (ny * nr)
    out["max_abs_err"] = float(diff.max())
    denominator = np.abs(ref)
    zero = denominator == 0
    if zero.any():  # msprobe adds machine epsilon (2^-52) to both sides where the reference is 0
        denominator[zero] = 2.0**-52
    rel = np.divide(diff, denominator)
    out["max_rel_err"] = float(rel.max())
    out["one_thousandth_err_ratio"] = float(np.count_nonzero(rel < 0.001)) / n
    out["five_thousandths_err_ratio"] = float(np.count_nonzero(rel < 0.005)) / n
    out["rmse_vs_fp64"] = math.sqrt(float(np.dot(diff, diff)) / n)
    return out


@dataclass
class Worst:
    """One element where the compiled result is far from fp64."""

    set: int
    index: int
    compiled: float
    eager: float
    ref: float
    bound: float | None
    compiled_ulp: float
    eager_ulp: float
    compiled_cond: float | None
    eager_cond: float | None
    condition: float | None  # kappa = bound / (u |ref|)

    @property
    def cancellation(self) -> bool:
        return self.condition is not None and self.condition > ILL_CONDITIONED

    def to_dict(self) -> dict:
        return {k: _json_number(v) for k, v in self.__dict__.items()} | {"cancellation": self.cancellation}


def _json_tree(value):
    """value with every non-finite float written as a string ("inf", "nan"): JSON has neither."""
    if isinstance(value, dict):
        return {k: _json_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_tree(v) for v in value]
    return _json_number(value)


def _json_number(x):
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


@dataclass
class Element:
    """One element named in a finding: where, and both paths' values."""

    set: int
    index: int
    compiled: Any
    eager: Any

    def text(self) -> str:
        return f"set {self.set}, index {self.index}: compiled {_value(self.compiled)}, eager {_value(self.eager)}"

    def to_dict(self) -> dict:
        return {k: _json_number(v) for k, v in self.__dict__.items()}


def _value(x) -> str:
    return f"{x:.7g}" if isinstance(x, float) else str(x)


@dataclass
class OutputJudgment:
    name: str
    dtype: str
    shape: tuple
    measure: str  # "conditioned", "ulp" (no bound: an op without a rule) or "exact" (integer, bool)
    parts: list[Part] = field(default_factory=list)
    outcome: Outcome | None = None
    other_parts: list[Part] = field(default_factory=list)  # the other measure's parts (not deciding)
    other_outcome: Outcome | None = None
    compiled: dict[str, list[float]] = field(default_factory=dict)  # column -> per-set values
    eager: dict[str, list[float]] = field(default_factory=dict)
    bit_equal_sets: int = 0
    mismatches: list[int] = field(default_factory=list)  # elements differing eager vs compiled, per set
    first_mismatch: Element | None = None  # an exact output's first differing element
    ulp_diff_max: int = 0
    # compiled non-finite where eager is finite, per set (a finding of its own, decided before any
    # statistic), and the first such element; eager non-finite where compiled is finite (noted only)
    nonfinite: list[int] = field(default_factory=list)
    first_nonfinite: Element | None = None
    eager_only_nonfinite: list[int] = field(default_factory=list)
    same: list[bool] = field(default_factory=list)  # torch._dynamo.utils.same(eager, compiled, fp64), per set
    same_message: str = ""  # what same() logged on its first failing set
    worst: list[Worst] = field(default_factory=list)
    no_bound_reason: str = ""
    finding: str = ""  # what decided the output when no statistic did (exact, non-finite, another form)
    # sets in which compiled returned it in another dtype or shape than eager (nothing pairs), and the first
    other_form_sets: int = 0
    first_other_form: str = ""
    numel: int = 0

    @property
    def sets(self) -> int:
        return len(self.mismatches)

    @property
    def bit_equal(self) -> bool:
        return self.bit_equal_sets == self.sets

    @property
    def exact(self) -> bool:
        return self.measure == "exact"

    # -- rules shown beside the verdict
    def plan_rule(self, pooled: dict[str, tuple[float, float]]) -> tuple[bool, str]:
        (cp99, ep99), (cmax, emax) = pooled["p99"], pooled["max"]
        ok = cp99 <= ep99 and cmax <= emax
        sampled = " (P99 from a strided sample of each set)" if pooled.get("sampled") else ""
        return ok, f"P99 {_num(cp99)} vs {_num(ep99)}{sampled}, max {_num(cmax)} vs {_num(emax)} ULP"


def torch_same(eager, compiled, fp64, torch) -> tuple[bool, str]:
    """torch._dynamo.utils.same(eager, compiled, fp64) with its defaults, as Dynamo's accuracy
    checks call it: (its result, what it logged)."""
    from torch._dynamo.utils import same

    logged: list[str] = []

    def log_error(message, *args):
        logged.append(str(message) % args if args else str(message))

    import logging

    logger = logging.getLogger("torch._dynamo.utils")  # its warnings per call ("Found nan in reference")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        passed = bool(same(eager, compiled, fp64, log_error=log_error))
    except Exception as error:  # its own refusal of a pair (a layout it does not handle): said, not fatal
        passed = False
        logged.append(f"same() raised {type(error).__name__}: {error}")
    finally:
        logger.setLevel(level)
    return passed, "; ".join(logged)


def _num(x, sig: int = 3) -> str:
    return D.num(x, sig)


# ---- progress
class Progress:
    """Progress lines on stderr once a judgment has run PROGRESS_AFTER_S seconds: sets done of all,
    the time so far and the time left at the pace so far; at most one line every PROGRESS_EVERY_S."""

    PROGRESS_AFTER_S = 10.0
    PROGRESS_EVERY_S = 10.0

    def __init__(self, title: str, sets: int, start: float, stream=None):
        self.title, self.sets, self.start = title, sets, start
        self.loop_start = time.perf_counter()
        self.last = -math.inf
        self.stream = stream
        self.shown = 0

    def _elapsed(self) -> float:
        return time.perf_counter() - self.start

    def say(self, text: str) -> None:
        if self._elapsed() < self.PROGRESS_AFTER_S:
            return
        import sys

        print(f"fusebench judge: {self.title}: {text} ({self._elapsed():.0f} s so far)", file=self.stream or sys.stderr,
              flush=True)  # fmt: skip
        self.last = time.perf_counter()
        self.shown += 1

    def set_done(self, done: int) -> None:
        now = time.perf_counter()
        if self._elapsed() < self.PROGRESS_AFTER_S or (now - self.last < self.PROGRESS_EVERY_S and done < self.sets):
            return
        left = (now - self.loop_start) / done * (self.sets - done)
        self.say(f"{done} of {self.sets} sets done, about {left:.0f} s left for the sets")


# ---- speed
@dataclass
class Speed:
    compile_s: float
    eager_ms: float
    compiled_ms: float
    speedup: float  # eager time / compiled time, geometric mean over rounds
    low: float
    high: float
    rounds: int

    def text(self) -> str:
        """One measure with its interval: the per-round ratio of eager's time to compiled's (the
        medians of each path's times are in to_dict; a ratio of medians can disagree with the
        geometric mean of ratios when rounds vary, so the line shows only the latter and eager's
        time beside it for scale)."""
        if self.rounds == 0:
            return f"compile {self.compile_s:.1f} s (first call); speed not measured"
        return (
            f"compile {self.compile_s:.1f} s (first call); compiled {self.speedup:.2f}x eager's speed "
            f"[{self.low:.2f}, {self.high:.2f}] (geometric mean over {self.rounds} interleaved rounds of eager's "
            f"time / compiled's, 95 % interval); eager {self.eager_ms:.3g} ms per call (median of the rounds)"
        )

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def measure_speed(eager: Callable, compiled: Callable, compile_s: float, rounds: int, torch, device=None) -> Speed:
    """Interleaved rounds, the order alternating: each round times one eager and one compiled call
    (each the mean of back-to-back calls lasting about 20 ms); the speedup is the geometric mean of
    the per-round ratios with a 95 % t interval of their logarithms. On a CUDA device the calls are
    timed by CUDA events on the device's stream (the GPU's time from the first launch to the last
    kernel's end); elsewhere by the wall clock."""
    if rounds <= 0:
        return Speed(compile_s, math.nan, math.nan, math.nan, math.nan, math.nan, 0)

    if device is not None and torch.device(device).type == "cuda":

        def timed(f, repeat):
            with torch.cuda.device(device):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(repeat):
                    f()
                end.record()
                end.synchronize()
            return start.elapsed_time(end) / 1e3 / repeat  # elapsed_time is in milliseconds

    else:

        def timed(f, repeat):
            start = time.perf_counter()
            for _ in range(repeat):
                f()
            return (time.perf_counter() - start) / repeat

    with torch.no_grad():
        once = max(timed(eager, 1), timed(compiled, 1), 1e-6)
        repeat = max(1, min(50, int(0.02 / once)))
        e_times, c_times = [], []
        for r in range(rounds):
            if r % 2:
                c_times.append(timed(compiled, repeat))
                e_times.append(timed(eager, repeat))
            else:
                e_times.append(timed(eager, repeat))
                c_times.append(timed(compiled, repeat))
    logs = np.log(np.asarray(e_times) / np.asarray(c_times))
    mean = float(logs.mean())
    if rounds > 1:
        half = t_quantile_975(rounds - 1) * float(logs.std(ddof=1)) / math.sqrt(rounds)
    else:
        half = math.inf
    return Speed(
        compile_s,
        1e3 * float(np.median(e_times)),
        1e3 * float(np.median(c_times)),
        math.exp(mean),
        math.exp(mean - half),
        math.exp(mean + half),
        rounds,
    )


# Student's t, 0.975 quantile, for 1..30 degrees of freedom (scipy is not a dependency)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t_quantile_975(dof: int) -> float:
    """The 0.975 quantile of Student's t (a table to 30 degrees of freedom, then 1.96 + 2.4 / dof)."""
    return _T975[dof - 1] if dof <= len(_T975) else 1.96 + 2.4 / dof


# ---- the judgment
@dataclass
class Judgment:
    """judge's result: print() it for a table, .to_dict() for JSON, .report(dir) for Markdown + HTML."""

    name: str
    dtype: str
    backend: str
    sets: int
    seed: int
    outcome: Outcome
    outputs: list[OutputJudgment]
    speed: Speed | None
    eager_repeatable: bool
    notes: list[str] = field(default_factory=list)  # sanity flags (train mode, cancellation, unknown ops)
    unknown_ops: dict[str, int] = field(default_factory=dict)
    decomposed_ops: dict[str, int] = field(default_factory=dict)
    pooled: dict[str, dict] = field(default_factory=dict)  # output -> plan's pooled ULP figures
    seconds: dict[str, float] = field(default_factory=dict)
    explanation: Any = None  # set by explain
    environment: dict[str, str] = field(default_factory=dict)
    tolerance: float = D.STATISTICS["cond_p99"]["relative_tolerance"]
    loss: str | None = None  # the loss function's name: the training step was judged (loss and gradients)
    writes: list[Write] = field(default_factory=list)  # what compiled wrote that eager leaves as it was

    def __bool__(self) -> bool:
        return self.outcome is Outcome.SUPPORTED

    @property
    def exit_status(self) -> int:
        return {Outcome.SUPPORTED: 0, Outcome.CONTRADICTED: 1, Outcome.INCONCLUSIVE: 3}[self.outcome]

    @property
    def bit_equal(self) -> bool:
        return all(o.bit_equal for o in self.outputs)

    @property
    def parts(self) -> list[Part]:
        return [p for o in self.outputs for p in o.parts]

    def deciding_parts(self) -> list[Part]:
        """The parts that reached the overall outcome (for SUPPORTED: the one closest to its tolerance)."""
        parts = self.parts
        if self.outcome is Outcome.SUPPORTED:
            return sorted(parts, key=lambda p: p.tolerance - p.interval.high)[:1]
        return [p for p in parts if p.final is self.outcome]

    def headline(self) -> str:
        if self.writes:
            return f"{self.outcome.label}: {self.writes[0].text()}"
        if self.bit_equal:
            return f"{self.outcome.label}: compiled = eager, bit-equal on every output in all {self.sets} sets"
        what = {
            Outcome.SUPPORTED: "compiled is not less accurate than eager",
            Outcome.CONTRADICTED: "compiled is less accurate than eager",
            Outcome.INCONCLUSIVE: "the sets cannot tell whether compiled is less accurate than eager",
        }[self.outcome]
        found = [o for o in self.outputs if o.finding and o.outcome is self.outcome]
        deciding = self.deciding_parts()
        if found and (self.outcome is not Outcome.SUPPORTED or not deciding):
            figure = f" ({found[0].name}: {found[0].finding})"
        else:
            figure = f" ({deciding[0].output}: {deciding[0].shown})" if deciding else ""
        return f"{self.outcome.label}: {what}{figure}"

    def rule_text(self) -> str:
        return (
            f"the {D.CONFIDENCE * 100:.0f} % paired-bootstrap interval over input sets ({D.RESAMPLES:,} resamples, seed "
            f"{D.SEED}) of compiled − eager, per output and statistic: SUPPORTED when its upper end ≤ the tolerance "
            f"({D.effect_text('relative', self.tolerance)} on the mean of the per-set figure), CONTRADICTED when its "
            "lower end exceeds it (Holm's rule across all parts), else INCONCLUSIVE; the share of sets worse stands "
            "beside it and decides only where eager's figure is 0 in every set; the conditioned error decides "
            "(ULP error where an output has no bound), as task B's verdict; CONTRADICTED on the conditioned error "
            "needs compiled's mean minus eager's beyond the fp64 reference's resolution too "
            f"({D.num(D.RESOLUTION_FLOOR)} of the bound), else INCONCLUSIVE, unresolved where the whole interval lies "
            "within it"
        )

    # -- text
    def lines(self) -> list[str]:
        out = [
            f"fusebench judgment: {self.name}, {self.dtype}, {self.backend} vs eager, {self.sets} input sets (seed "
            f"{self.seed})"
            + (
                f"; the training step: outputs, loss={self.loss} and every gradient, the backward compiled too"
                if self.loss
                else ""
            ),
            f"verdict: {self.headline()}",
            f"  decided by {self.rule_text()}",
        ]
        eq = "compiled = eager, bit-equal" if self.bit_equal else "compiled differs from eager"
        out.append(f"eager vs compiled: {eq}")
        for w in self.writes:
            out.append(f"  CONTRADICTED, {w.text()} (decided before any statistic)")
        for o in self.outputs:
            if o.exact:
                out.append(f"  {o.name}: {o.finding}")
            elif not o.bit_equal and not o.other_form_sets:
                out.append(
                    f"  {o.name}: differs in {o.sets - o.bit_equal_sets} of {o.sets} sets, median "
                    f"{_num(float(np.median(o.mismatches)))} of {_num(o.numel)} elements per set, max ulp_diff "
                    f"{_num(o.ulp_diff_max)}"
                )
            if any(o.nonfinite):
                out.append(f"  {o.name}: CONTRADICTED, {o.finding} (decided before any statistic)")
            elif not o.exact and o.finding:
                out.append(f"  {o.name}: {o.outcome.label}, {o.finding}")
            if any(o.eager_only_nonfinite):
                out.append(
                    f"  {o.name}: eager non-finite where compiled is finite: {_num(sum(o.eager_only_nonfinite))} "
                    "elements (left out of the statistics)"
                )
        header = ("output", "measure", "statistic", "compiled − eager [95 % interval]", "tol", "verdict")
        rows = []
        for o in self.outputs:
            if o.finding:
                rows.append(_finding_row(o))
            for p in o.parts:
                row = _part_row(o, p, o.measure)
                rows.append(row[:-1] + (row[-1] + " (not deciding)",) if o.finding else row)
        out.append("")
        out += _table(header, rows)
        for o in self.outputs:
            for p in o.parts:
                if p.final is Outcome.INCONCLUSIVE and not o.finding:
                    out.append(f"  undecided, {o.name}: {p.sentence()}")
        out.append("")
        out.append("beside the verdict (not deciding):")
        for o in self.outputs:
            if o.other_parts:
                other = "ULP error" if o.measure == "conditioned" else "conditioned error"
                figures = "; ".join(p.shown for p in o.other_parts)
                out.append(f"  {o.name}, {other}: {o.other_outcome.label} ({figures})")
            if o.name in self.pooled:
                ok, text = o.plan_rule(self.pooled[o.name])
                out.append(
                    f"  {o.name}, the plan's literal rule (pooled over sets, compiled ≤ eager at P99 and max of ULP "
                    f"error, no uncertainty): {'holds' if ok else 'fails'} ({text})"
                )
            failed = f" (it logged on {o.same_message})" if o.same_message else ""
            out.append(
                f"  {o.name}, torch._dynamo.utils.same(eager, compiled, fp64) per set: passes {sum(o.same)} of "
                f"{len(o.same)} sets{failed}"
            )
            if not o.exact and not o.other_form_sets:
                out.append(f"  {o.name}, msprobe (median over sets, compiled / eager): " + _msprobe_text(o))
        out.append("")
        out.append("sanity:")
        out.append("  eager run twice: " + ("bit-equal" if self.eager_repeatable else "NOT bit-equal (see the notes)"))
        for note in self.notes:
            out.append(f"  {note}")
        if self.speed is not None:
            out.append("")
            out.append("speed: " + self.speed.text())
        if self.seconds:
            sec = self.seconds
            out.append(
                f"time: {sec.get('total', 0):.0f} s in all (eager {sec.get('eager', 0):.1f} s, compiled "
                f"{sec.get('compiled', 0):.1f} s, each with its copy of the sets and the checks of what it wrote; "
                f"fp64 with bounds {sec.get('fp64_with_bounds', 0):.1f} s, statistics "
                f"{sec.get('statistics', 0):.1f} s over the sets)"
            )
        if self.explanation is not None:
            out.append("")
            out += self.explanation.lines()
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return f"<Judgment {self.name} {self.dtype} {self.backend}: {self.outcome.label}, {self.sets} sets>"

    def to_dict(self) -> dict:
        outputs = []
        for o in self.outputs:
            d = {
                "name": o.name,
                "dtype": o.dtype,
                "shape": list(o.shape),
                "measure": o.measure,
                "outcome": o.outcome.value,
                "parts": [p.to_dict() for p in o.parts],
                "other_measure_outcome": o.other_outcome.value if o.other_outcome else None,
                "other_measure_parts": [p.to_dict() for p in o.other_parts],
                "bit_equal_sets": o.bit_equal_sets,
                "mismatches_per_set": o.mismatches,
                "ulp_diff_max": o.ulp_diff_max,
                "finding": o.finding,
                "first_mismatch": o.first_mismatch.to_dict() if o.first_mismatch else None,
                "nonfinite_where_eager_finite_per_set": o.nonfinite,
                "first_nonfinite": o.first_nonfinite.to_dict() if o.first_nonfinite else None,
                "eager_only_nonfinite_per_set": o.eager_only_nonfinite,
                "per_set": {
                    "compiled": {k: [_json_number(v) for v in vs] for k, vs in o.compiled.items()},
                    "eager": {k: [_json_number(v) for v in vs] for k, vs in o.eager.items()},
                },
                "torch_same_per_set": o.same,
                "torch_same_message": o.same_message,
                "worst": [w.to_dict() for w in o.worst],
                "no_bound_reason": o.no_bound_reason,
            }
            if o.name in self.pooled:
                ok, text = o.plan_rule(self.pooled[o.name])
                d["plan_rule"] = {"holds": ok, "figures": text, "pooled": _json_tree(self.pooled[o.name])}
            outputs.append(d)
        return {
            "schema": "fusebench.judgment/1",
            "name": self.name,
            "dtype": self.dtype,
            "backend": self.backend,
            "sets": self.sets,
            "seed": self.seed,
            "loss": self.loss,
            "outcome": self.outcome.value,
            "headline": self.headline(),
            "rule": self.rule_text(),
            "bit_equal": self.bit_equal,
            "eager_repeatable": self.eager_repeatable,
            "notes": self.notes,
            "unknown_ops": self.unknown_ops,
            "decomposed_ops": self.decomposed_ops,
            "outputs": outputs,
            "writes": [w.to_dict() for w in self.writes],
            "speed": _json_tree(self.speed.to_dict()) if self.speed else None,
            "seconds": self.seconds,
            "environment": self.environment,
            "explanation": self.explanation.to_dict() if self.explanation is not None else None,
        }

    def report(self, directory: str | os.PathLike) -> str:
        """Writes judgment.md, judgment.html and judgment.json into directory (and fusion_switches.json,
        the switch list, when explain found one); returns the HTML path."""
        os.makedirs(directory, exist_ok=True)
        text = "\n".join(self.lines())
        md = [f"# fusebench judgment: {self.name}", "", f"**{self.headline()}**", "", "```", text, "```", ""]
        _write(os.path.join(directory, "judgment.md"), "\n".join(md))
        _write(os.path.join(directory, "judgment.json"), json.dumps(self.to_dict(), indent=1, allow_nan=False))
        if self.explanation is not None and self.explanation.switch_list:
            switches = {
                "schema": "fusebench.model_switches/1",
                "model": self.name,
                "dtype": self.dtype,
                "backend": self.backend,
                "apply": "fusebench.apply_switches(model, [entry['switch'] for entry in entries])",
                "entries": [e.to_dict() for e in self.explanation.switch_list],
            }
            _write(os.path.join(directory, "fusion_switches.json"), json.dumps(switches, indent=1, allow_nan=False))
        page = _html(self, text)
        path = os.path.join(directory, "judgment.html")
        _write(path, page)
        return path


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.write("\n")
    os.replace(tmp, path)


def _msprobe_text(o: OutputJudgment) -> str:
    bits = []
    for key, label in (
        ("cosine", "cosine"),
        ("max_abs_err", "max abs err"),
        ("max_rel_err", "max rel err"),
        ("one_thousandth_err_ratio", "1/1000 err ratio"),
    ):
        c, e = _median_of_finite(o.compiled.get(key)), _median_of_finite(o.eager.get(key))
        sig = 7 if key == "cosine" else 3
        bits.append(f"{label} {_num(float(c), sig)} / {_num(float(e), sig)}")
    return ", ".join(bits)


def _median_of_finite(values) -> float:
    finite = [v for v in values or () if math.isfinite(v)]
    return float(np.median(finite)) if finite else math.nan


def _part_row(o: OutputJudgment, p: Part, measure: str) -> tuple:
    i = p.interval
    e = i.effect
    figure = (
        "= eager in all sets"
        if p.shown.endswith(f"all {i.sets} sets")
        else f"{D.effect_text(e, i.estimate)} [{D.effect_text(e, i.low)}, {D.effect_text(e, i.high)}]"
    )
    verdict = p.final.label
    if p.holm_note:
        verdict += " (Holm)"
    if p.unresolved:
        verdict += " (unresolved)"
    return (
        o.name,
        "cond" if measure == "conditioned" else "ULP",
        p.label,
        figure,
        D.effect_text(e, p.tolerance),
        verdict,
    )


def _finding_row(o: OutputJudgment) -> tuple:
    """The table's row of an output decided by a finding rather than a statistic."""
    if o.other_form_sets:
        return (
            o.name,
            "form",
            "dtype and shape = eager's",
            f"differ in {o.other_form_sets} sets",
            "0",
            o.outcome.label,
        )
    if o.exact:
        differing = sum(m > 0 for m in o.mismatches)
        figure = f"{_num(sum(o.mismatches))} elements differ in {differing} sets" if differing else "equal in all sets"
        return (o.name, "exact", f"elements ≠ eager ({o.dtype})", figure, "0", o.outcome.label)
    if any(o.nonfinite):
        figure = f"{_num(sum(o.nonfinite))} elements in {sum(k > 0 for k in o.nonfinite)} sets"
        return (o.name, "finite", "non-finite where eager is finite", figure, "0", o.outcome.label)
    return (o.name, "finite", "finite pairs", o.finding, "—", o.outcome.label)


def _table(header: tuple, rows: list[tuple]) -> list[str]:
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*header), fmt.format(*("-" * w for w in widths))] + [fmt.format(*map(str, r)) for r in rows]


STYLE = """<style>
body{font-family:sans-serif;font-size:15px;max-width:1100px;margin:1em auto;padding:0 12px;line-height:1.35}
table{border-collapse:collapse;margin:.6em 0;font-size:14px}td,th{border:1px solid #bbb;padding:2px 7px}
th{background:#eee}td.supported{background:#dff0d8;color:#060}td.contradicted{background:#f6d5d5;color:#a00}
td.inconclusive{background:#fcebcc;color:#8a5a00}.verdict.supported{color:#060}.verdict.contradicted{color:#a00}
.verdict.inconclusive{color:#a60}pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:13px}
</style>"""


def _html(j: Judgment, text: str) -> str:
    esc = html.escape
    rows = []
    for o in j.outputs:
        if o.finding:
            cells = _finding_row(o)
            rows.append(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells[:-1]) + f'<td class="{o.outcome.value}">'
                f"{esc(cells[-1])}</td></tr>"
            )
        for p in o.parts:
            cells = _part_row(o, p, o.measure)
            rows.append(
                "<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in cells[:-1]) + f'<td class="{p.final.value}">'
                f"{esc(cells[-1])}</td></tr>"
            )
    table = (
        "<table><tr><th>output</th><th>measure</th><th>statistic</th><th>compiled − eager [95 % interval]</th>"
        "<th>tolerance</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>fusebench judgment: {esc(j.name)}</title>{STYLE}"
        f"</head><body><h1>fusebench judgment: {esc(j.name)}</h1>"
        f'<p class="verdict {j.outcome.value}"><b>{esc(j.headline())}</b></p>'
        f"<p>Decided by {esc(j.rule_text())}.</p>{table}"
        f"<h2>Everything judge printed</h2><pre>{esc(text)}</pre></body></html>"
    )


# ---- compilers
def make_compiler(compile: Any, options: dict | None, torch) -> tuple[Callable, str]:
    """(compiler, its name): compile is a torch.compile backend name ("inductor", "aot_eager", ...),
    a backend callable (gm, example_inputs) or a compiler of the model (compiler_kind tells the two
    callables apart by their signatures); options are Inductor's (config
    names as torch._inductor.config spells them, e.g. "cpp.simdlen")."""
    if compile is None:
        compile = "inductor"
    if isinstance(compile, str):
        if options and compile != "inductor":
            raise JudgeError(f"judge: options={options!r} are Inductor's; backend {compile!r} takes none")
        if compile == "inductor" and options:
            backend = SwitchedInductor(config=dict(options))
            name = "inductor (" + ", ".join(f"{k}={v}" for k, v in options.items()) + ")"
            return (lambda f: torch.compile(f, backend=backend, dynamic=False)), name
        if compile not in torch._dynamo.list_backends(exclude_tags=()) and compile != "inductor":
            raise JudgeError(
                f"judge: unknown torch.compile backend {compile!r}; known: {', '.join(torch._dynamo.list_backends())}"
            )
        return (lambda f: torch.compile(f, backend=compile, dynamic=False)), compile
    if callable(compile):
        if options:
            raise JudgeError(f"judge: options={options!r} are Inductor's; a callable compile= takes none")
        name = getattr(compile, "__name__", type(compile).__name__)
        if compiler_kind(compile) == "backend":
            return (lambda f: torch.compile(f, backend=compile, dynamic=False)), name
        return compile, name
    raise JudgeError(
        f"judge: compile={compile!r}; give a backend name, a backend callable (gm, example_inputs) or a compiler "
        "of the model (model -> compiled callable)"
    )


def compiler_kind(compile: Callable) -> str:
    """What compile= is: "backend" for a torch.compile backend, called as backend(gm, example_inputs): its signature
    requires exactly two positional arguments; "model" for a compiler of the model, called as
    compiler(model): one positional argument it can take, at most one it requires (torch.compile
    itself, a lambda f: ...). Anything else is refused, naming the signature."""
    import inspect

    try:
        signature = inspect.signature(compile)
    except (TypeError, ValueError):
        raise JudgeError(
            f"judge: compile={compile!r}: its signature cannot be read, so judge cannot tell a backend "
            "(gm, example_inputs) from a compiler of the model; wrap it in a def with named arguments"
        ) from None
    positional = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values())
    if len(required) == 2:
        return "backend"
    if len(required) <= 1 and (positional or varargs):
        return "model"
    raise JudgeError(
        f"judge: compile={getattr(compile, '__name__', compile)!r} has the signature {signature}: a backend takes "
        "(gm, example_inputs), a compiler of the model takes (model)"
    )


def _model_dtype(fn, inputs: Inputs, torch):
    if isinstance(fn, torch.nn.Module):
        for p in fn.parameters():
            if p.is_floating_point():
                return p.dtype
    for t in inputs.tensors():
        if t.is_floating_point():
            return t.dtype
    return torch.get_default_dtype()


def training_reasons(fn, torch) -> list[str]:
    """What in a module makes eager random or stateful: train mode with dropout of p > 0, batch
    norm updating its statistics."""
    if not isinstance(fn, torch.nn.Module):
        return []
    reasons = []
    dropouts = [
        n or type(m).__name__
        for n, m in fn.named_modules()
        if m.training and isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
    ]
    if dropouts:
        reasons.append(
            f"train mode with dropout active in {len(dropouts)} modules ({', '.join(dropouts[:3])}"
            + (", …" if len(dropouts) > 3 else "")
            + "): call model.eval()"
        )
    norms = [n for n, m in fn.named_modules() if m.training and isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if norms:
        reasons.append(f"train mode: batch norm updates its running statistics in {len(norms)} modules")
    if fn.training and not reasons:
        reasons.append("the module is in train mode (no dropout or batch norm found, so eager is not affected)")
    return reasons


def _bits_equal(a, b, torch) -> int:
    """Number of differing elements (bitwise, NaN payload included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return a.numel() or 1
    return int(_differing_bits(a, b, torch).sum())


def _differing_bits(a, b, torch):
    """Per element (flattened), whether two tensors of one shape and dtype differ bitwise, NaN payload included
    (compared as integers of the element's size; complex and bool by value)."""
    view = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
    x, y = a.detach().contiguous().reshape(-1), b.detach().contiguous().reshape(-1)
    if view is None or a.dtype == torch.bool:
        return x != y
    return x.view(view) != y.view(view)


# ---- what a run writes besides its outputs
@dataclass
class Write:
    """compiled changed a tensor that eager leaves as it was: an input of the set, or a parameter or buffer of the
    model. Its results then rest on other data than eager's, and the caller's data is overwritten: a finding of
    its own, CONTRADICTED before any statistic (a compiler that writes into its inputs could otherwise make the
    fp64 reference, run on them afterwards, agree with its own error)."""

    what: str  # "input[0]", "parameter 0.weight", "buffer bn.running_mean", "torch.backends.cudnn.allow_tf32"
    calls: list[str] = field(default_factory=list)  # "set 3", "the first call"
    elements: int = 0  # 0 for a global setting
    first: str = ""  # the first changed element of the first such call: where, and its values

    def text(self) -> str:
        where = ", ".join(self.calls[:3]) + (f" and {len(self.calls) - 3} more" if len(self.calls) > 3 else "")
        calls = f"{len(self.calls)} call{'s' if len(self.calls) != 1 else ''} ({where})"
        if self.what in SETTINGS:
            return (
                f"compiled changes torch's global setting {self.what}, under which eager and the fp64 reference run "
                f"next, in {calls}; first {self.first} (put back after each call)"
            )
        return (
            f"compiled writes into {self.what}, which eager leaves as it was: {_num(self.elements)} elements "
            f"changed in {calls}; first {self.first}"
        )

    def to_dict(self) -> dict:
        return {"what": self.what, "calls": self.calls, "elements": self.elements, "first": self.first}


def _backends_attribute(path: str):
    """(getter, setter) of an attribute under torch.backends, such as 'mkldnn.matmul.fp32_precision'."""
    import torch

    *parents, leaf = path.split(".")

    def owner():
        o = torch.backends
        for part in parents:
            o = getattr(o, part)
        return o

    return (lambda: getattr(owner(), leaf)), (lambda value: setattr(owner(), leaf, value))


def _global_settings() -> dict[str, tuple[Callable, Callable]]:
    """torch's process-wide settings that change what eager computes: the float32 precision of matmuls and
    convolutions per backend (read through the fp32_precision API, which reads whichever API set them), reduced
    precision reductions, the default dtype, deterministic algorithms, the CPU's thread count (it splits
    reductions). Those this torch lacks are left out."""
    import torch

    settings = {
        "torch.get_default_dtype()": (torch.get_default_dtype, torch.set_default_dtype),
        "torch.are_deterministic_algorithms_enabled()": (
            torch.are_deterministic_algorithms_enabled,
            torch.use_deterministic_algorithms,
        ),
        "torch.get_num_threads()": (torch.get_num_threads, torch.set_num_threads),
    }
    for path in (
        "fp32_precision",
        "cuda.matmul.fp32_precision",
        "cudnn.fp32_precision",
        "cudnn.conv.fp32_precision",
        "cudnn.rnn.fp32_precision",
        "mkldnn.fp32_precision",
        "mkldnn.matmul.fp32_precision",
        "mkldnn.conv.fp32_precision",
        "mkldnn.rnn.fp32_precision",
        "cuda.matmul.allow_fp16_reduced_precision_reduction",
        "cuda.matmul.allow_bf16_reduced_precision_reduction",
    ):
        get, set_ = _backends_attribute(path)
        try:
            get()
        except (AttributeError, RuntimeError):
            continue
        settings[f"torch.backends.{path}"] = (get, set_)
    return settings


SETTINGS: dict[str, tuple[Callable, Callable]] = {}  # filled by the first WriteWatch (torch is imported late)


class WriteWatch:
    """Runs eager and compiled each on its own copy of a set's inputs, so that neither sees what the other wrote
    and the fp64 reference runs on the set itself; and finds what compiled writes that eager does not (Write):
    in its copy of the inputs, and in the model's parameters and buffers, compared after each compiled call with
    their values when the judgment began and put back where they changed (later calls, and the caller, get the
    model as it was given). What eager writes (a running mean in train mode, an input updated in place) is the
    model's own behaviour: not judged, and named in the notes. The model's state is held twice meanwhile. So for
    torch's global settings (SETTINGS): one that compiled changes would set how eager and the reference compute
    next (bf16 matmuls for all, say), so that they agree with it; it is a finding, and put back."""

    def __init__(self, fn, torch):
        self.torch = torch
        if not SETTINGS:
            SETTINGS.update(_global_settings())
        self.initial_settings = self._settings()
        self.state: dict[str, Any] = {}
        if isinstance(fn, torch.nn.Module):
            self.state = {f"parameter {n}": t for n, t in fn.named_parameters()}
            self.state |= {f"buffer {n}": t for n, t in fn.named_buffers() if t is not None}
        with torch.no_grad():
            self.initial = {name: t.detach().clone() for name, t in self.state.items()}
        self.eager_writes: set[str] = set()  # the state and inputs that eager changed in some call
        self.writes: dict[str, Write] = {}

    @staticmethod
    def copy(inputs: Inputs) -> Inputs:
        return inputs.map(lambda t: t.detach().clone())

    def eager(self, run: Callable[[Inputs], Any], inputs: Inputs) -> Any:
        copied = self.copy(inputs)
        settings = self._settings()
        out = run(copied)
        self.eager_writes |= {name for name, value in self._settings().items() if value != settings[name]}
        # by value, as for compiled: a write through .data bumps no version counter
        self.eager_writes |= {
            name
            for name, t in self.state.items()
            if name not in self.eager_writes and _bits_equal(self.initial[name], t.detach(), self.torch)
        }
        for name, before, after in zip(inputs.names(), inputs.tensors(), copied.tensors()):
            if _bits_equal(before, after, self.torch):
                self.eager_writes.add(name)
        return out

    def compiled(self, run: Callable[[Inputs], Any], inputs: Inputs, call: str) -> Any:
        copied = self.copy(inputs)
        settings = self._settings()
        try:
            out = run(copied)
        finally:
            self._put_back_settings(settings, call)
        # compiled code may write through a raw pointer, which no version counter sees: the values are compared
        for name, before, after in zip(inputs.names(), inputs.tensors(), copied.tensors()):
            if name not in self.eager_writes:
                self._compare(name, before, after, call)
        self._put_back(call)
        return out

    @staticmethod
    def _settings() -> dict[str, Any]:
        return {name: get() for name, (get, _) in SETTINGS.items()}

    def _put_back_settings(self, before: dict[str, Any], call: str | None) -> None:
        for name, value in self._settings().items():
            if value == before[name] or name in self.eager_writes:
                continue
            if call is not None:
                w = self.writes.setdefault(name, Write(name))
                w.calls.append(call)
                w.first = w.first or f"in {call}: {before[name]!r} became {value!r}"
            SETTINGS[name][1](before[name])

    def restore(self) -> None:
        """The model's state as it was when the judgment began, where compiled changed it outside the judged calls
        (the speed rounds), and its global settings as they were."""
        self._put_back(None)
        self._put_back_settings(self.initial_settings, None)

    def _put_back(self, call: str | None) -> None:
        for name, t in self.state.items():
            if name in self.eager_writes:
                continue
            changed = (
                self._compare(name, self.initial[name], t.detach(), call)
                if call
                else _bits_equal(self.initial[name], t.detach(), self.torch)
            )
            if changed:
                with self.torch.no_grad():
                    t.copy_(self.initial[name])

    def _compare(self, name: str, before, after, call: str) -> bool:
        changed = _bits_equal(before, after, self.torch)
        if not changed:
            return False
        w = self.writes.setdefault(name, Write(name))
        w.calls.append(call)
        w.elements += changed
        if not w.first:
            if before.shape != after.shape or before.dtype != after.dtype:
                w.first = f"in {call}: {before.dtype}{list(before.shape)} became {after.dtype}{list(after.shape)}"
            else:
                k = _first_differing(before, after, self.torch)
                was, now = before.reshape(-1)[k].item(), after.reshape(-1)[k].item()
                w.first = f"in {call}, index {k}: {_value(now)} where it held {_value(was)}"
        return True

    def notes(self) -> list[str]:
        return [
            f"eager writes into {name}: each run gets its own copy of the set, and what it leaves there is not judged"
            if name.startswith("input")
            else f"eager changes torch's global setting {name}: not judged"
            if name in SETTINGS
            else f"eager writes into the model's {name} (as in train mode): not judged"
            for name in sorted(self.eager_writes)
        ]


def _first_differing(a, b, torch) -> int:
    """The first index (flattened) at which two tensors of one shape and dtype differ bitwise."""
    return int(_differing_bits(a, b, torch).nonzero()[0, 0])


# ---- judge
def judge(
    fn: Callable,
    sample: Any,
    *,
    sets: int = 32,
    compile: Any = None,
    options: dict | None = None,
    seed: int = 0,
    dtype: Any = None,
    perturbation: float = 0.5,
    speed_rounds: int = 15,
    name: str | None = None,
    compiled: Callable | None = None,
    tolerance: float | None = None,
    loss: Callable | None = None,
) -> Judgment:
    """Judges fn compiled against fn eager, both against an fp64 run with a running error bound,
    over `sets` input sets. See fusebench.judge's docstring (the package's __init__)."""
    import torch

    t_start = time.perf_counter()
    if not isinstance(sets, int) or isinstance(sets, bool) or sets < 2:
        raise JudgeError(f"judge: sets={sets!r}; a paired bootstrap needs at least 2 input sets (32 by default)")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and 0 <= tolerance < 10):
        raise JudgeError(f"judge: tolerance={tolerance!r}; a relative change such as 0.05 (+5 %)")
    if not callable(fn):
        raise JudgeError(f"judge: fn is a {type(fn).__name__}, not a callable or an nn.Module")
    if dtype is not None:
        dtype = _parse_dtype(dtype, torch)
        if isinstance(fn, torch.nn.Module):
            fn = copy.deepcopy(fn).to(dtype)
    # a model on the GPU is judged there: every set is made on the CPU and moved to the model's device
    make_set, device = device_sets(fn, sample, seed=seed, dtype=dtype, perturbation=perturbation, torch=torch)
    sync = synchronizer(device, torch)
    first = make_set(0)
    model_dtype = _model_dtype(fn, first, torch)
    title = name or (type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", "fn"))
    if model_dtype == torch.float64:
        where = (
            "its parameters are"
            if isinstance(fn, torch.nn.Module) and any(p.dtype == torch.float64 for p in fn.parameters())
            else "its floating inputs are"
        )
        raise JudgeError(
            f"judge: {title} computes in float64 ({where} float64): the reference is a float64 run, and PyTorch "
            "has no more precise floating dtype on the CPU, so no reference more precise than the model exists "
            "and its error could not be measured; judge it in a lower precision (dtype='f32', --dtype f32)"
        )
    notes: list[str] = []

    from ._training import ForwardStep, TrainingStep, sample_form

    def make_step(compiled_fn):
        if loss is None:
            return ForwardStep(fn, compiled_fn, title, torch)
        return TrainingStep(fn, compiled_fn, loss, sample_form(sample, torch), title, torch)

    # sanity: eager twice, bit-equal
    reasons = training_reasons(fn, torch)
    watch = WriteWatch(fn, torch)
    a = watch.eager(lambda copied: make_step(None).eager(copied, 0), first)
    b = watch.eager(lambda copied: make_step(None).eager(copied, 0), first)
    if not a:
        raise JudgeError(f"judge: {title} returned no tensor to judge")
    differing = [n for (n, x), (_, y) in zip(a, b) if _bits_equal(x, y, torch)]
    eager_repeatable = not differing
    if not eager_repeatable:
        why = "; ".join(reasons) or "a nondeterministic op (random numbers, or an op without a deterministic kernel)"
        raise JudgeError(
            f"judge: {title} run eagerly twice on the same input gives different results ({', '.join(differing)} "
            f"differ), so no difference can be attributed to compilation: {why}"
        )
    notes += [f"flagged: {r}" for r in reasons]
    holds = compiled_parts(fn, torch)
    if holds:
        where = (
            "fn is torch.compile's output"
            if holds == ["fn"]
            else f"fn holds torch.compile's output ({', '.join(holds)})"
        )
        notes.append(
            f"{where}: eager and the fp64 reference ran it op by op (torch.compiler.set_stance('force_eager')), "
            "compiled as the judgment compiles it"
        )

    # compile, first call timed
    if compiled is None:
        compiler, backend_name = make_compiler(compile, options, torch)
        compiled = compiler(fn)
    else:
        backend_name = name_of_compiled(compile, options, compiled)
    step = make_step(compiled)
    t0 = time.perf_counter()
    watch.compiled(
        lambda copied: step.compiled(copied, 0, "compiled (first call: the compile)"),
        first,
        "the first call",
    )
    sync()
    compile_s = time.perf_counter() - t0

    reference = Reference(fn, model_dtype, torch)
    outputs: dict[str, OutputJudgment] = {}
    pooled_ulp: dict[str, tuple[list, list]] = {}
    unknown: dict[str, int] = {}
    decomposed: dict[str, int] = {}
    seconds = {"eager": 0.0, "compiled": 0.0, "fp64_with_bounds": 0.0, "statistics": 0.0}
    worst_cands: dict[str, list[Worst]] = {}
    progress = Progress(title, sets, t_start)
    for index in range(sets):
        inputs = first if index == 0 else make_set(index)
        t = time.perf_counter()
        e_out = watch.eager(lambda copied, i=index: step.eager(copied, i), inputs)
        sync()
        seconds["eager"] += time.perf_counter() - t
        t = time.perf_counter()
        c_out = watch.compiled(lambda copied, i=index: step.compiled(copied, i), inputs, f"set {index}")
        sync()
        seconds["compiled"] += time.perf_counter() - t
        t = time.perf_counter()
        try:
            r_out, mode = step.reference(reference, inputs, index)
        except (JudgeError, ModelError):
            raise
        except Exception as error:
            raise ModelError(
                f"judge: {title} raised in its float64 run with error bounds on input set {index}: "
                f"{type(error).__name__}: {error}"
            ) from error
        seconds["fp64_with_bounds"] += time.perf_counter() - t
        for k, v in mode.unknown.items():
            unknown[k] = max(unknown.get(k, 0), v)
        for k, v in mode.decomposed.items():
            decomposed[k] = max(decomposed.get(k, 0), v)
        if [n for n, _ in e_out] != [n for n, _ in c_out] or len(r_out) != len(e_out):
            raise JudgeError(
                f"judge: eager, compiled and fp64 runs of {title} returned different output structures "
                f"({[n for n, _ in e_out]} / {[n for n, _ in c_out]} / {[n for n, _ in r_out]})"
            )
        t = time.perf_counter()
        for (oname, e), (_, c), (_, r) in zip(e_out, c_out, r_out):
            # the statistics run on the CPU (the toolkit reads host memory): a CUDA model's outputs move
            bound = mode.bound(r).detach().cpu() if r.is_floating_point() else None  # keyed by r itself
            e, c, r = e.detach().cpu(), c.detach().cpu(), r.detach().cpu()
            o = outputs.get(oname)
            if o is None:
                measure = "conditioned" if e.is_floating_point() else "exact"
                o = outputs[oname] = OutputJudgment(
                    oname, _short_dtype(e.dtype), tuple(e.shape), measure, numel=e.numel()
                )
                for col in COLUMNS:
                    o.compiled[col], o.eager[col] = [], []
            if c.dtype != e.dtype or c.shape != e.shape:
                # the compiler's result, not the user's input: a finding, with nothing of this set to pair
                o.other_form_sets += 1
                o.first_other_form = o.first_other_form or (
                    f"set {index}: compiled {_short_dtype(c.dtype)}{list(c.shape)}, eager "
                    f"{_short_dtype(e.dtype)}{list(e.shape)}"
                )
                o.mismatches.append(e.numel())
                o.nonfinite.append(0)
                o.eager_only_nonfinite.append(0)
                o.same.append(False)
                continue
            passed, logged = torch_same(e, c, r, torch)
            o.same.append(passed)
            if not passed and not o.same_message:
                o.same_message = f"set {index}: {logged}" if logged else f"set {index}"
            if o.exact:  # integers and booleans: compiled must equal eager element for element
                differ = (e != c).reshape(-1)
                mism = int(differ.sum())
                o.mismatches.append(mism)
                o.bit_equal_sets += mism == 0
                if mism and o.first_mismatch is None:
                    k = int(differ.nonzero()[0, 0])
                    o.first_mismatch = Element(index, k, c.reshape(-1)[k].item(), e.reshape(-1)[k].item())
                continue
            mism = _bits_equal(e, c, torch)
            o.mismatches.append(mism)
            o.bit_equal_sets += mism == 0
            e_finite, c_finite = torch.isfinite(e).reshape(-1), torch.isfinite(c).reshape(-1)
            lost = e_finite & ~c_finite
            o.nonfinite.append(int(lost.sum()))
            o.eager_only_nonfinite.append(int((c_finite & ~e_finite).sum()))
            if o.nonfinite[-1] and o.first_nonfinite is None:
                k = int(lost.nonzero()[0, 0])
                o.first_nonfinite = Element(index, k, float(c.reshape(-1)[k]), float(e.reshape(-1)[k]))
            if mism and e.dtype != torch.float64:
                distance = ulp_diff(e.contiguous(), c.contiguous()).max  # None: every pair holds a NaN
                if distance is not None:
                    o.ulp_diff_max = max(o.ulp_diff_max, int(distance))
            r64 = r.to(torch.float64).contiguous()
            ref_np = r64.numpy().reshape(-1)
            e_ulp = np.asarray(ulp_error(e.contiguous(), r64)).reshape(-1)
            c_ulp = e_ulp if mism == 0 else np.asarray(ulp_error(c.contiguous(), r64)).reshape(-1)
            b_np = bound.detach().to(torch.float64).contiguous().numpy().reshape(-1)
            from ._bounds import conditioning_floor

            floor = conditioning_floor(bound, e.dtype)
            has_bound = floor is not None
            if not has_bound:
                ops = ", ".join(sorted(mode.unknown)) or "an op without a rule"
                o.no_bound_reason = f"no error bound (depends on {ops}): ULP error decides"
            e64 = e.double().numpy().reshape(-1)
            c64 = e64 if mism == 0 else c.double().numpy().reshape(-1)
            ef = path_figures(e64, ref_np, e_ulp, floor)
            cf = ef if mism == 0 else path_figures(c64, ref_np, c_ulp, floor)
            for col in COLUMNS:
                o.eager[col].append(ef[col])
                o.compiled[col].append(cf[col])
            pooled = pooled_ulp.setdefault(oname, ([], []))
            pooled[0].append(_pooled_sample(c_ulp, index))
            pooled[1].append(_pooled_sample(e_ulp, index))
            # the worst element among the finite pairs: a non-finite one is the finding above, not an error size
            finite_pair = np.isfinite(c64) & np.isfinite(ref_np)
            if finite_pair.any():
                k = int(np.argmax(np.where(finite_pair, np.nan_to_num(c_ulp, nan=-1.0), -1.0)))
                u = {"f16": 2.0**-11, "bf16": 2.0**-8, "f32": 2.0**-24, "f64": 2.0**-53}.get(o.dtype, 0.0)
                with np.errstate(all="ignore"):
                    kappa = (
                        (float(b_np[k] / (u * abs(ref_np[k]))) if ref_np[k] != 0 else math.inf) if has_bound else None
                    )
                worst_cands.setdefault(oname, []).append(
                    Worst(
                        index,
                        k,
                        float(c64[k]),
                        float(e64[k]),
                        float(ref_np[k]),
                        float(b_np[k]) if has_bound else None,
                        float(c_ulp[k]),
                        float(e_ulp[k]),
                        abs(float(c64[k]) - float(ref_np[k])) / float(floor[k]) if floor is not None else None,
                        abs(float(e64[k]) - float(ref_np[k])) / float(floor[k]) if floor is not None else None,
                        kappa,
                    )
                )
        seconds["statistics"] += time.perf_counter() - t
        progress.set_done(index + 1)

    # decide: exact outputs and non-finite findings first, then the statistics of the others
    if not outputs:
        raise JudgeError(f"judge: {title} returned no tensor to judge")
    all_parts: list[Part] = []
    for o in outputs.values():
        if o.exact or o.other_form_sets:
            continue
        if o.no_bound_reason or not all(np.isfinite(v) for v in o.eager["cond_max"]):
            o.measure = "ulp"
            o.no_bound_reason = o.no_bound_reason or "the bound is 0 or missing on some set: ULP error decides"
        figures = {s: (o.compiled[s], o.eager[s]) for s in D.STATISTICS}
        measure, o.parts, unresolved = D.output_parts(o.name, figures, o.measure, tolerance)
        if measure != o.measure:
            o.measure, o.no_bound_reason = measure, unresolved
        for s in (s for s, spec in D.STATISTICS.items() if spec["measure"] != o.measure):
            o.other_parts += D.judge_statistic(o.name, s, o.compiled[s], o.eager[s], tolerance)
        if not any(o.nonfinite):  # an output with non-finite values is decided by that finding alone
            all_parts += o.parts
    if all_parts:
        D.holm(all_parts)
    other_all = [p for o in outputs.values() for p in o.other_parts]
    if other_all:
        D.holm(other_all)
    for o in outputs.values():
        o.outcome, o.finding = _finding(o)
        if o.outcome is None:
            o.outcome = D.combine([p.final for p in o.parts])
        o.other_outcome = D.combine([p.final for p in o.other_parts]) if o.other_parts else None
        cands = sorted(worst_cands.get(o.name, []), key=lambda w: -w.compiled_ulp)
        o.worst = cands[:3]
        if o.worst and o.worst[0].cancellation:
            w = o.worst[0]
            notes.append(
                f"cancellation: {o.name}'s worst compiled element (set {w.set}, index {w.index}: compiled "
                f"{w.compiled:.7g}, eager {w.eager:.7g}, fp64 {w.ref:.7g}, {_num(w.compiled_ulp)} ULP) sits where the "
                f"computation cancels (condition κ = {w.condition:.3g} > {ILL_CONDITIONED:g}): its ULP error says "
                "little; the conditioned error weighs it by the bound"
            )
        if o.no_bound_reason:
            notes.append(f"{o.name}: {o.no_bound_reason}")
    outcome = D.combine([o.outcome for o in outputs.values()])
    if watch.writes:  # decided before any statistic, as a non-finite output is
        outcome = Outcome.CONTRADICTED
    notes += watch.notes()
    if unknown:
        notes.append(
            "ops without a bound rule (their outputs fall back to ULP error): "
            + ", ".join(f"{k} ×{v}" for k, v in sorted(unknown.items()))
        )
    pooled_figures = {}
    for oname, (cs, es) in pooled_ulp.items():
        c_all, e_all = np.concatenate(cs), np.concatenate(es)
        pooled_figures[oname] = {
            "p99": (_percentile(c_all[np.isfinite(c_all)], 99), _percentile(e_all[np.isfinite(e_all)], 99)),
            "max": (_max_of_finite(c_all), _max_of_finite(e_all)),
            "sampled": any(x.size > POOLED_LIMIT for x in cs),
        }

    # speed
    if speed_rounds > 0:
        progress.say(f"timing eager against compiled, {speed_rounds} interleaved rounds")
    timed = WriteWatch.copy(first)  # a model that writes into its inputs writes into this copy, never the sample
    speed = measure_speed(
        lambda: step.eager(timed, 0), lambda: step.compiled(timed, 0), compile_s, speed_rounds, torch, device=device
    )
    watch.restore()
    seconds["total"] = time.perf_counter() - t_start
    environment = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": str(torch.get_num_threads()),
        "device": device_text(device, torch),
    }
    return Judgment(
        title,
        _short_dtype(model_dtype),
        backend_name,
        sets,
        seed,
        outcome,
        list(outputs.values()),
        speed,
        eager_repeatable,
        notes,
        unknown,
        decomposed,
        pooled_figures,
        seconds,
        environment=environment,
        tolerance=D.STATISTICS["cond_p99"]["relative_tolerance"] if tolerance is None else float(tolerance),
        loss=step.loss_name,
        writes=list(watch.writes.values()),
    )


def _max_of_finite(x: np.ndarray) -> float:
    """The largest ULP error (an element that is non-finite where fp64 is finite counts as +inf;
    NaN where both are NaN is left out); NaN when nothing is left."""
    x = x[~np.isnan(x)]
    return float(x.max()) if x.size else math.nan


def _finding(o: OutputJudgment) -> tuple[Outcome | None, str]:
    """The outcome of an output that no statistic decides, and the words for it; (None, "") when
    its statistics decide. Integer and bool outputs are compared exactly; a floating output with
    non-finite values where eager's are finite is CONTRADICTED before any statistic."""
    n = o.sets
    if o.other_form_sets:
        return Outcome.CONTRADICTED, (
            f"compiled returns it in another dtype or shape than eager in {o.other_form_sets} of {n} sets; first at "
            f"{o.first_other_form}"
        )
    if o.exact:
        differing = sum(m > 0 for m in o.mismatches)
        if differing:
            return Outcome.CONTRADICTED, (
                f"compared exactly ({o.dtype}): compiled differs from eager in {differing} of {n} sets, "
                f"{_num(sum(o.mismatches))} elements in all; first at {o.first_mismatch.text()}"
            )
        return Outcome.SUPPORTED, f"compared exactly ({o.dtype}): compiled equals eager in all {n} sets"
    if any(o.nonfinite):
        sets_with = sum(k > 0 for k in o.nonfinite)
        return Outcome.CONTRADICTED, (
            f"non-finite where eager is finite: {_num(sum(o.nonfinite))} elements in {sets_with} of {n} sets; first at "
            f"{o.first_nonfinite.text()}"
        )
    if not o.parts:
        if any(o.eager_only_nonfinite):
            return Outcome.INCONCLUSIVE, (
                "no finite pair of eager and compiled to compare: eager is non-finite where compiled is finite "
                f"({_num(sum(o.eager_only_nonfinite))} elements)"
            )
        return Outcome.SUPPORTED, (
            f"no finite element to compare in any of {n} sets: compiled is non-finite exactly where eager is"
        )
    return None, ""


POOLED_LIMIT = 1 << 18  # elements kept per set for the plan's pooled P99 (a strided sample beyond)


def _pooled_sample(x: np.ndarray, index: int) -> np.ndarray:
    """The set's ULP errors for the pooled P99: all of them up to POOLED_LIMIT, else every k-th from
    a seeded offset, and the maximum always."""
    if x.size <= POOLED_LIMIT:
        return x.astype(np.float32)
    step = math.ceil(x.size / POOLED_LIMIT)
    offset = int(np.random.default_rng([D.SEED, index]).integers(step))
    return np.append(x[offset::step].astype(np.float32), np.float32(np.nanmax(x)))


def name_of_compiled(compile, options, compiled) -> str:
    """The name a judgment gives a callable passed as compiled=: compile's where given (a backend name, or the
    compiler's name), else the callable's own (never Inductor's by default: nothing says Inductor made it)."""
    if isinstance(compile, str):
        return compile + (f" ({options})" if options else "")
    named = compile if compile is not None else compiled
    if type(named).__name__ == "OptimizedModule":  # torch.compile(model)
        return "torch.compile"
    return getattr(named, "__name__", type(named).__name__)


def _parse_dtype(dtype, torch):
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "bf16": torch.bfloat16,
        "bfloat16": torch.bfloat16,
        "f16": torch.float16,
        "fp16": torch.float16,
        "float16": torch.float16,
        "half": torch.float16,
        "f32": torch.float32,
        "fp32": torch.float32,
        "float32": torch.float32,
        "float": torch.float32,
    }
    if str(dtype) not in names:
        raise JudgeError(f"judge: dtype={dtype!r}; give bf16, f16 or f32 (or a torch.dtype)")
    return names[str(dtype)]
