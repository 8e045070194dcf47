"""PyTorch helpers: an fp64 reference of a function, and the plan's eager-vs-compiled verdict.

PyTorch is optional: importing fusebench never imports torch; these functions import it when
called and say what is missing when it is not installed.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._operands import element_bits_and_values, operand
from ._toolkit import error_stats, ulp_error


def _require_torch(fn: str):
    try:
        import torch
    except ImportError as error:  # the message names what to install
        raise ImportError(
            f"{fn} needs PyTorch, which is not installed in this environment ({error}); "
            "install it (pip install torch) or use fusebench's array functions, which do not need it"
        ) from None
    return torch


def _map_tensors(value: Any, convert: Callable[[Any], Any], torch) -> Any:
    if isinstance(value, torch.Tensor):
        return convert(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_map_tensors(v, convert, torch) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_map_tensors(v, convert, torch) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, convert, torch) for k, v in value.items()}
    return value


def _flatten_tensors(value: Any, torch, path: str = "out") -> list[tuple]:
    if isinstance(value, torch.Tensor):
        return [(path, value)]
    if isinstance(value, (list, tuple)):
        out = []
        for i, v in enumerate(value):
            out += _flatten_tensors(v, torch, f"{path}[{i}]")
        return out
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += _flatten_tensors(v, torch, f"{path}[{k!r}]")
        return out
    return []


def fp64_reference(fn: Callable, *inputs: Any) -> Any:
    """Runs fn with every floating tensor among the inputs upcast to float64 (and, when fn is an
    nn.Module, a float64 copy of it: parameters and buffers), with float64 as the default dtype for
    tensors fn creates, autocast off and gradients off. Returns fn's outputs with every floating
    tensor in float64 (same structure). fn itself and the inputs are left untouched; casts that fn
    writes explicitly (x.half()) still happen and are part of what it computes."""
    torch = _require_torch("fusebench.fp64_reference")

    def upcast(t):
        return t.detach().to(torch.float64) if t.is_floating_point() else t.detach()

    target = fn
    if isinstance(fn, torch.nn.Module):
        target = copy.deepcopy(fn).to(torch.float64)
    args = _map_tensors(list(inputs), upcast, torch)
    previous_default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    # autocast off on the CPU and on the devices the run touches (a CUDA model under the caller's
    # torch.autocast("cuda") would otherwise compute its reference in half precision)
    held = [t for _, t in _flatten_tensors(args, torch)]
    held += list(target.parameters()) if isinstance(target, torch.nn.Module) else []
    kinds = dict.fromkeys(["cpu", *(t.device.type for t in held)])
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            for kind in kinds:
                if torch.amp.is_autocast_available(kind):
                    stack.enter_context(torch.autocast(kind, enabled=False))
            out = target(*args)
    finally:
        torch.set_default_dtype(previous_default)
    return _map_tensors(out, upcast, torch)


@dataclass(frozen=True)
class OutputComparison:
    """One output tensor of fn: eager and compiled against the fp64 reference."""

    name: str
    eager: Any  # ErrorStats
    compiled: Any  # ErrorStats
    not_worse: bool  # compiled ulp_error P99 and max <= eager's
    worst: list[dict[str, Any]] = field(repr=False)  # the compiled result's worst elements

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "eager": self.eager.to_dict(),
            "compiled": self.compiled.to_dict(),
            "not_worse": self.not_worse,
            "worst": copy.deepcopy(self.worst),
        }


@dataclass(frozen=True)
class FusedComparison:
    """compare_fused's result. not_worse is the plan's literal rule (task B), not a verdict: for every output, the
    compiled function's ULP error against fp64 is at most eager's at P99 and at the maximum."""

    outputs: list[OutputComparison]
    not_worse: bool

    def __bool__(self) -> bool:
        return self.not_worse

    def to_dict(self) -> dict[str, Any]:
        return {"not_worse": self.not_worse, "outputs": [o.to_dict() for o in self.outputs]}


def _le(x: float | None, y: float | None) -> bool:
    if x is None:  # nothing compared on the compiled side
        return y is None
    return y is not None and x <= y


def worst_elements(y, eager, ref, count: int) -> list[dict[str, Any]]:
    """The count elements of y with the largest ULP error against ref, with eager's and ref's values
    and the bit patterns (y's format)."""
    errors = np.asarray(ulp_error(y, ref)).reshape(-1)
    count = min(count, errors.size)
    if count == 0:
        return []
    order = np.argsort(-np.nan_to_num(errors, nan=np.inf), kind="stable")[:count]
    oy, oe = operand(y, "y", "worst_elements"), operand(eager, "eager", "worst_elements")
    y_bits, y_values = element_bits_and_values(oy, order)
    e_bits, e_values = element_bits_and_values(oe, order)
    r_bits, r_values = element_bits_and_values(operand(ref, "ref", "worst_elements"), order)
    width = 2 * y_bits.dtype.itemsize
    rows = []
    for k, index in enumerate(order):
        rows.append(
            {
                "index": int(index),
                "compiled": float(y_values[k]),
                "compiled_bits": f"0x{int(y_bits[k]):0{width}x}",
                "eager": float(e_values[k]),
                "eager_bits": f"0x{int(e_bits[k]):0{width}x}",
                "ref": float(r_values[k]),
                "ref_bits": f"0x{int(r_bits[k]):016x}",
                "compiled_ulp_error": float(errors[index]),
            }
        )
    return rows


def compare_fused(fn: Callable, *inputs: Any, compile: Callable | None = None, worst: int = 8) -> FusedComparison:
    """Runs fn eagerly, compiled (compile(fn), default torch.compile) and in fp64
    (fp64_reference) on one input, and returns both results' error statistics against fp64, the
    plan's literal rule (compiled <= eager at P99 and max of ulp_error, per output, strictly, with
    no tolerance, no uncertainty and no conditioning) and the compiled result's worst elements.
    Every output tensor of fn is compared (a tensor, or tuples / lists / dicts of them).

    This is one input's figures, not a verdict: the rule flips with the input (one element near
    zero sets the max). For a verdict use fusebench.judge (many input sets, conditioned error, a
    paired bootstrap with a tolerance)."""
    torch = _require_torch("fusebench.compare_fused")

    compiler = torch.compile if compile is None else compile
    with torch.no_grad():
        eager_out = fn(*inputs)
        compiled_out = compiler(fn)(*inputs)
    ref_out = fp64_reference(fn, *inputs)
    eager_list = _flatten_tensors(eager_out, torch)
    compiled_list = _flatten_tensors(compiled_out, torch)
    ref_list = _flatten_tensors(ref_out, torch)
    if not eager_list:
        raise TypeError("fusebench.compare_fused: fn returned no tensor to compare")
    if [n for n, _ in eager_list] != [n for n, _ in compiled_list] or len(ref_list) != len(eager_list):
        raise ValueError("fusebench.compare_fused: eager, compiled and fp64 runs returned different output structures")
    outputs = []
    for (name, e), (_, c), (_, r) in zip(eager_list, compiled_list, ref_list):
        e, c, r = e.detach().cpu(), c.detach().cpu(), r.detach().cpu()  # the toolkit reads host memory
        if not e.is_floating_point():
            continue
        eager_stats, compiled_stats = error_stats(e, r), error_stats(c, r)
        not_worse = _le(compiled_stats.ulp_error.p99, eager_stats.ulp_error.p99) and _le(
            compiled_stats.ulp_error.max, eager_stats.ulp_error.max
        )
        outputs.append(OutputComparison(name, eager_stats, compiled_stats, not_worse, worst_elements(c, e, r, worst)))
    return FusedComparison(outputs, all(o.not_worse for o in outputs))
