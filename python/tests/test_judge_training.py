"""fusebench.judge(..., loss=fn): the training step judged, its loss and every gradient as outputs of
their own, on tiny MLPs. Planted: a compiled backward that rounds its gradients to bf16 reads
CONTRADICTED on a gradient; aot_eager's backward is bit-equal to eager's."""

import time

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
from functorch.compile import make_boxed_func  # noqa: E402
from fusebench.decision import Outcome  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from training_models import MLP, cross_entropy, labelled_sample  # noqa: E402


def _round_to_bf16(outputs):
    return [
        o.to(torch.bfloat16).to(o.dtype) if isinstance(o, torch.Tensor) and o.is_floating_point() else o
        for o in outputs
    ]


def _forward_as_is(gm, example_inputs):
    return gm


def _backward_rounded(gm, example_inputs):
    return make_boxed_func(lambda *args: _round_to_bf16(gm(*args)))


# a torch.compile backend (gm, example_inputs): AOTAutograd with the forward as traced and a
# backward whose every gradient is rounded to bf16 and back
rounding_backward = aot_autograd(fw_compiler=_forward_as_is, bw_compiler=_backward_rounded)


def _judge(compile, **kw):
    t = time.perf_counter()
    j = fb.judge(MLP(), labelled_sample(), loss=cross_entropy, compile=compile, sets=8, speed_rounds=0, **kw)
    print(
        f"{compile if isinstance(compile, str) else 'rounding_backward'}: {j.headline()} ({time.perf_counter() - t:.1f} s)"
    )
    return j


def test_every_gradient_is_an_output_of_its_own():
    j = _judge("aot_eager")
    names = [o.name for o in j.outputs]
    assert names == [
        "out",
        "loss",
        "grad:net.0.weight",
        "grad:net.0.bias",
        "grad:net.2.weight",
        "grad:net.2.bias",
        "grad:net.3.weight",
        "grad:net.3.bias",
        "grad:input[0]",
    ]
    assert j.loss == "cross_entropy" and j.to_dict()["loss"] == "cross_entropy"
    assert "loss=cross_entropy" in str(j)


def test_a_samplers_sets_reach_the_loss_in_the_form_it_returns():
    """A sampler that returns keyword arguments (as a transformers model takes them): its loss reads
    the dict, not fusebench's Inputs."""

    def sampler(index, g):
        return {"x": torch.randn(8, 16, generator=g), "labels": torch.randint(0, 4, (8,), generator=g)}

    seen = []

    def loss(output, sample):
        seen.append(type(sample))
        return torch.nn.functional.cross_entropy(output, sample["labels"])

    j = fb.judge(MLP(), sampler, loss=loss, compile="aot_eager", sets=2, speed_rounds=0)
    assert j.outcome is Outcome.SUPPORTED and set(seen) == {dict}, seen


def test_aot_eager_backward_is_bit_equal():
    j = _judge("aot_eager")
    assert j.bit_equal, [(o.name, o.mismatches) for o in j.outputs if not o.bit_equal]
    assert j.outcome is Outcome.SUPPORTED and j.exit_status == 0
    assert "bit-equal on every output" in j.headline()


def test_rounding_backward_is_contradicted_on_a_gradient():
    j = _judge(rounding_backward)
    assert j.outcome is Outcome.CONTRADICTED and j.exit_status == 1, str(j)
    contradicted = [o.name for o in j.outputs if o.outcome is Outcome.CONTRADICTED]
    assert contradicted and all(n.startswith("grad:") for n in contradicted), contradicted
    assert j.headline().split("(")[1].startswith("grad:")
    # the forward is compiled as traced, so its output and the loss stay bit-equal to eager's
    by_name = {o.name: o for o in j.outputs}
    assert by_name["out"].bit_equal and by_name["loss"].bit_equal


def test_the_backward_carries_a_running_error_bound():
    """Every gradient has a bound (no op of this backward lacks a rule), and eager's gradients stay
    within it: eager rounds each op of its backward, which is what the bound bounds."""
    j = _judge("aot_eager")
    assert not j.unknown_ops, j.unknown_ops
    for o in j.outputs:
        assert o.measure == "conditioned", (o.name, o.no_bound_reason)
        assert max(o.eager["cond_max"]) <= 1.0, (o.name, o.eager["cond_max"])


def test_a_loss_that_is_not_a_scalar_is_refused_naming_its_shape():
    with pytest.raises(fb.JudgeError, match=r"shape \[8, 4\].*scalar"):
        fb.judge(MLP(), labelled_sample(), loss=lambda output, sample: output, sets=2, speed_rounds=0)


def test_a_compiled_copy_of_another_model_is_refused_naming_the_gradients():
    other = torch.compile(MLP(), backend="aot_eager")
    with pytest.raises(fb.JudgeError, match=r"no gradient for grad:net\.0\.weight"):
        fb.judge(MLP(), labelled_sample(), loss=cross_entropy, compiled=other, sets=2, speed_rounds=0)


def test_explain_of_a_training_step_judgment_needs_its_loss():
    j = _judge("aot_eager")
    with pytest.raises(fb.JudgeError, match=r"training step \(loss=cross_entropy\); pass its loss function too"):
        fb.explain(MLP(), labelled_sample(), judgment=j)


CLI_FACTORIES = """
import torch


def mlp():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    g = torch.Generator().manual_seed(1)
    return net, (torch.randn(8, 16, generator=g),)


def mean_square(output, sample):
    return (output * output).mean()


def per_row(output, sample):
    return output.sum(dim=1)
"""


def test_cli_loss_judges_the_training_step(tmp_path, monkeypatch, capsys):
    from fusebench.__main__ import main

    (tmp_path / "factories.py").write_text(CLI_FACTORIES)
    monkeypatch.chdir(tmp_path)
    status = main(["judge", "factories.py:mlp", "--loss", "factories.py:mean_square", "--backend", "aot_eager",
                   "--sets", "4", "--speed-rounds", "0"])  # fmt: skip
    out = capsys.readouterr().out
    assert status == 0, out
    assert "grad:0.weight" in out and "loss" in out
    for args, reason in (
        (["--loss", "factories.py:per_row"], "a loss is a floating scalar"),
        (["--loss", "factories.py:nothing"], "no callable 'nothing'"),
        (
            ["--loss", "factories.py:mean_square", "--explain", "--backend", "aot_eager"],
            "--explain attributes Inductor",
        ),
    ):
        status = main(["judge", "factories.py:mlp", "--sets", "4", "--speed-rounds", "0", *args])
        err = capsys.readouterr().err
        assert status == 2 and reason in err, (args, err)
