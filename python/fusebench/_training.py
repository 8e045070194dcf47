"""The runs judge makes per input set: the forward alone, or the training step (judge(..., loss=fn)).

A run returns named tensors, each judged as an output of its own by the same decision core. The
training step runs the forward, the loss `loss(output, sample)` (a scalar tensor) and the backward
by torch.autograd.grad, and returns the forward's outputs, `loss`, and the gradient of every
parameter that requires grad (`grad:layer.weight`) and of every floating input (`grad:input[0]`,
`grad:input.name` for a keyword argument). Eager runs the backward op by op; the compiled callable
is called with grad enabled, so torch.compile traces the backward with AOTAutograd and compiles it
with the chosen backend; the fp64 reference runs the backward under the same BoundMode as its
forward, so every ATen op of the backward carries its running error bound (or is named, and its
gradients fall back to ULP error, where no rule covers it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._inputs import Inputs, JudgeError, ModelError, eager_stance, flatten_outputs, run_model


def sample_form(sample: Any, torch) -> str:
    """How loss(output, sample) receives a set's inputs: in the form the sample was given ('inputs'
    for a fusebench.Inputs, 'tensor', 'kwargs' for a dict, 'args' for a tuple); a sampler's sets in
    the form it returns them (its set 0, drawn once more here: the form alone is kept)."""
    if isinstance(sample, Inputs):
        return "inputs"
    if callable(sample) and not isinstance(sample, torch.Tensor):
        made = sample(0, torch.Generator().manual_seed(0))
        return "inputs" if callable(made) and not isinstance(made, torch.Tensor) else sample_form(made, torch)
    if isinstance(sample, torch.Tensor):
        return "tensor"
    return "kwargs" if isinstance(sample, dict) else "args"


class ForwardStep:
    """The forward alone, with grad disabled: the outputs of fn."""

    loss_name = None

    def __init__(self, fn: Callable, compiled: Callable, title: str, torch):
        self.fn, self.compiled_fn, self.title, self.torch = fn, compiled, title, torch

    def eager(self, inputs: Inputs, index: int, what: str = "eager") -> list[tuple[str, Any]]:
        with self.torch.no_grad(), eager_stance(self.torch):
            return flatten_outputs(run_model(what, self.fn, inputs, index, self.title), self.torch)

    def compiled(self, inputs: Inputs, index: int, what: str = "compiled") -> list[tuple[str, Any]]:
        with self.torch.no_grad():
            return flatten_outputs(run_model(what, self.compiled_fn, inputs, index, self.title), self.torch)

    def reference(self, reference, inputs: Inputs, index: int):
        out, mode = reference.run(inputs)
        return flatten_outputs(out, self.torch), mode


def _input_leaves(inputs: Inputs, torch, make_leaf) -> tuple[Inputs, list[tuple[str, Any]]]:
    """inputs with every floating tensor replaced by make_leaf(tensor) (a leaf that requires grad),
    and (name, leaf) for each: input[i] for a positional argument, input.key for a keyword one,
    [j] / .key appended inside lists, tuples and dicts."""
    leaves: list[tuple[str, Any]] = []

    def to_leaf(t, name):
        if not t.is_floating_point():
            return t
        leaf = make_leaf(t)
        leaves.append((name, leaf))
        return leaf

    return inputs.map_named(to_leaf), leaves


class TrainingStep:
    """Forward, loss and backward: the outputs, `loss` and every gradient (see the module docstring).

    form says how the loss function receives the set's inputs as the sample: 'tensor' (the one
    argument), 'args' (the tuple of positional arguments), 'kwargs' (the dict), 'inputs' (the
    fusebench.Inputs itself)."""

    def __init__(self, fn: Callable, compiled: Callable, loss: Callable, form: str, title: str, torch):
        if not callable(loss):
            raise JudgeError(f"judge: loss is a {type(loss).__name__}, not a callable loss(output, sample)")
        self.fn, self.compiled_fn, self.loss, self.form, self.title, self.torch = (
            fn,
            compiled,
            loss,
            form,
            title,
            torch,
        )
        self.loss_name = getattr(loss, "__name__", type(loss).__name__)
        self.params = (
            [(n, p) for n, p in fn.named_parameters() if p.requires_grad] if isinstance(fn, torch.nn.Module) else []
        )

    def _sample(self, inputs: Inputs):
        return {"tensor": lambda: inputs.args[0], "args": lambda: inputs.args, "kwargs": lambda: inputs.kwargs}.get(
            self.form, lambda: inputs
        )()

    def _step(self, fn, params, inputs: Inputs, index: int, what: str, make_leaf):
        torch = self.torch
        with torch.enable_grad():
            leaf_inputs, leaves = _input_leaves(inputs, torch, make_leaf)
            out = run_model(what, fn, leaf_inputs, index, self.title)
            try:
                value = self.loss(out, self._sample(leaf_inputs))
            except (JudgeError, ModelError):
                raise
            except Exception as error:
                raise ModelError(
                    f"judge: the loss function {self.loss_name} raised in the {what} run on input set {index}: "
                    f"{type(error).__name__}: {error}"
                ) from error
            if not isinstance(value, torch.Tensor) or value.dim() != 0 or not value.is_floating_point():
                got = (
                    f"a {value.dtype} tensor of shape {list(value.shape)}"
                    if isinstance(value, torch.Tensor)
                    else f"a {type(value).__name__}"
                )
                raise JudgeError(
                    f"judge: loss={self.loss_name} returned {got} in the {what} run on input set {index}; a loss "
                    "is a floating scalar (a tensor of shape []): reduce it, e.g. with .mean() or .sum()"
                )
            if not value.requires_grad:
                raise JudgeError(
                    f"judge: loss={self.loss_name}'s value does not depend on any parameter or floating input of "
                    f"{self.title} that requires grad, so there is no gradient to judge"
                )
            targets = [p for _, p in params] + [leaf for _, leaf in leaves]
            try:
                grads = torch.autograd.grad(value, targets, allow_unused=True)
            except Exception as error:
                raise ModelError(
                    f"judge: the backward of {self.title} raised in its {what} run on input set {index}: "
                    f"{type(error).__name__}: {error}"
                ) from error
        names = [f"grad:{n}" for n, _ in params] + [f"grad:{n}" for n, _ in leaves]
        # a target the loss does not reach has no gradient (None): its gradient is exactly zero
        unreached = [g is None for g in grads]
        grads = [torch.zeros_like(t) if g is None else g.detach() for g, t in zip(grads, targets)]
        return flatten_outputs(out, torch) + [("loss", value.detach())] + list(zip(names, grads)), unreached

    def _leaf(self, t):
        return t.detach().clone().requires_grad_(True)

    def eager(self, inputs: Inputs, index: int, what: str = "eager") -> list[tuple[str, Any]]:
        with eager_stance(self.torch):
            outputs, self.eager_unreached = self._step(self.fn, self.params, inputs, index, what, self._leaf)
        return outputs

    def compiled(self, inputs: Inputs, index: int, what: str = "compiled") -> list[tuple[str, Any]]:
        outputs, unreached = self._step(self.compiled_fn, self.params, inputs, index, what, self._leaf)
        eager_unreached = getattr(self, "eager_unreached", unreached)
        lost = [n for (n, _), u, e in zip(outputs[-len(unreached) :], unreached, eager_unreached) if u and not e]
        if lost:
            # a compiled callable made from another copy of the model trains that copy's parameters,
            # not the judged model's: its gradients would read as zeros and be judged as errors
            raise JudgeError(
                f"judge: the compiled {self.title} gives no gradient for {', '.join(lost[:4])}"
                + (", …" if len(lost) > 4 else "")
                + " where eager gives one: the compiled callable does not use the judged model's parameters "
                "(compile the model passed as fn, or leave compiled= out)"
            )
        return outputs

    def reference(self, reference, inputs: Inputs, index: int):
        """The step in float64 under BoundMode: the backward's ATen ops carry their bounds too."""
        torch = self.torch
        step = {}

        def call(target, up, mode):
            params = (
                [(n, p) for n, p in target.named_parameters() if p.requires_grad]
                if isinstance(target, torch.nn.Module)
                else []
            )
            if isinstance(self.fn, torch.nn.Module) and [n for n, _ in params] != [n for n, _ in self.params]:
                raise JudgeError(
                    f"judge: the float64 copy of {self.title} has other trainable parameters than the model "
                    f"({[n for n, _ in params][:4]} vs {[n for n, _ in self.params][:4]})"
                )

            def leaf(t):  # exact, of the dtype the input has in eager
                out = t.detach().requires_grad_(True)
                mode.register(out, mode.vdtype(t))
                return out

            step["outputs"], _ = self._step(target, params, up, index, "float64", leaf)
            return None

        _, mode = reference.run(inputs, call=call)
        return step["outputs"], mode
