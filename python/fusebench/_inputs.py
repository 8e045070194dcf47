"""An input set and one run of the model on it: Inputs (positional and keyword arguments), run_model
(the model's own failure raised as ModelError, naming the run and the set), flatten_outputs (a
result's tensors by name); JudgeError and ModelError, the errors of judge and explain. The lowest
layer of judge: the per-set runs (fusebench._training), the judgment and explain build on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class JudgeError(ValueError):
    """Bad input for judge / explain (the CLI's exit status 2): the message says why."""


class ModelError(RuntimeError):
    """The model raised while judge ran it (eagerly, compiled, or in float64 with bounds): the CLI's
    exit status 4. The message names the run and the input set; the model's exception is the cause."""


def eager_stance(torch):
    """A context in which torch.compile's directives are ignored (torch.compiler.set_stance("force_eager")): eager
    and the fp64 reference run op by op even where fn is, or holds, torch.compile's output."""
    return torch.compiler.set_stance("force_eager")


def compiled_parts(fn, torch) -> list[str]:
    """Where fn holds torch.compile's output: 'fn' itself, or its submodules by name."""
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(fn, OptimizedModule) or hasattr(fn, "_torchdynamo_orig_callable"):
        return ["fn"]
    if isinstance(fn, torch.nn.Module):
        return [name for name, m in fn.named_modules() if isinstance(m, OptimizedModule)]
    return []


def run_model(what: str, fn, inputs: Inputs, set_index: int, title: str):
    """inputs.call(fn), a failure raised as ModelError naming the run (eager, compiled, fp64) and the set."""
    try:
        return inputs.call(fn)
    except (JudgeError, ModelError):
        raise
    except Exception as error:
        raise ModelError(
            f"judge: {title} raised in its {what} run on input set {set_index}: {type(error).__name__}: {error}"
        ) from error


@dataclass
class Inputs:
    """One input set: positional and keyword arguments."""

    args: tuple
    kwargs: dict

    def call(self, fn):
        return fn(*self.args, **self.kwargs)

    def map(self, convert) -> Inputs:
        return self.map_named(lambda t, name: convert(t))

    def map_named(self, convert) -> Inputs:
        """Every tensor t replaced by convert(t, name), name as names() gives it."""
        import torch

        def m(v, name):
            if isinstance(v, torch.Tensor):
                return convert(v, name)
            if isinstance(v, (list, tuple)):
                return type(v)(m(x, f"{name}[{i}]") for i, x in enumerate(v))
            if isinstance(v, dict):
                return {k: m(x, f"{name}.{k}") for k, x in v.items()}
            return v

        return Inputs(
            tuple(m(a, f"input[{i}]") for i, a in enumerate(self.args)),
            {k: m(v, f"input.{k}") for k, v in self.kwargs.items()},
        )

    def tensors(self) -> list:
        out = []
        self.map(lambda t: out.append(t) or t)
        return out

    def names(self) -> list[str]:
        """The names of tensors(), in its order: input[i] for a positional argument, input.key for a keyword one,
        [j] / .key appended inside lists, tuples and dicts."""
        names: list[str] = []
        self.map_named(lambda t, name: names.append(name) or t)
        return names


def flatten_outputs(value: Any, torch, path: str = "") -> list[tuple[str, Any]]:
    """(name, tensor) for every tensor of a result: a tensor is 'out', a dict's entries by key
    (HF ModelOutput: 'logits'), a tuple's by index."""
    if isinstance(value, torch.Tensor):
        return [(path or "out", value)]
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += flatten_outputs(v, torch, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            out += flatten_outputs(v, torch, f"{path}[{i}]" if path else f"out[{i}]")
    return out
