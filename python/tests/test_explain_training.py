"""fusebench.explain(..., loss=fn): a difference in the training step's gradients localised to the
node of AOTAutograd's backward graph where it starts, named by the forward node and module whose
backward it is. Planted: an AOTAutograd backend whose backward rounds one op's output to bf16 is
localised to that op; aot_eager's step is bit-equal (nothing to explain); Inductor's on the tiny
MLP (the finding: its layer norm's weight gradient) is localised to the layer norm's backward."""

import operator
import os
import shutil
import time

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
import training_models  # noqa: E402
from functorch.compile import make_boxed_func  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from training_models import MLP, cross_entropy  # noqa: E402
from training_models import labelled_sample as _sample  # noqa: E402

aten = torch.ops.aten


def rounding_backward_of(op, index=None):
    """An AOTAutograd backend: the forward as traced, the backward with the output of every `op`
    node (element `index` of its tuple, for an op returning several) rounded to bf16 and back."""

    def produced(n):
        if index is None:
            return n.op == "call_function" and n.target is op
        return (
            n.op == "call_function"
            and n.target is operator.getitem
            and getattr(n.args[0], "target", None) is op
            and n.args[1] == index
        )

    def bw_compiler(gm, example_inputs):
        for n in [n for n in gm.graph.nodes if produced(n)]:
            with gm.graph.inserting_after(n):
                down = gm.graph.call_function(aten._to_copy.default, (n,), {"dtype": torch.bfloat16})
            with gm.graph.inserting_after(down):
                up = gm.graph.call_function(aten._to_copy.default, (down,), {"dtype": torch.float32})
            n.replace_all_uses_with(up, delete_user_cb=lambda user, down=down: user is not down)
        gm.recompile()
        return make_boxed_func(gm)

    return aot_autograd(fw_compiler=lambda gm, example_inputs: make_boxed_func(gm), bw_compiler=bw_compiler)


def _explain(**kw):
    t = time.perf_counter()
    e = fb.explain(MLP(), _sample(), loss=cross_entropy, cost_rounds=0, **kw)
    print(f"{e}\n({time.perf_counter() - t:.1f} s)")
    return e


PLANTED = [
    # (op rounded, element, the backward node's target, its forward node, the gradient searched)
    (
        aten.native_layer_norm_backward.default,
        1,
        "aten.native_layer_norm_backward.default[1]",
        "layer_norm (net.2, LayerNorm)",
        "grad:net.2.weight",
    ),
    (aten.gelu_backward.default, None, "aten.gelu_backward.default", "gelu (net.1, GELU)", "grad:net.0.weight"),
]


@pytest.mark.parametrize("case", range(len(PLANTED)), ids=["layer norm weight gradient", "gelu backward"])
def test_a_rounded_backward_op_is_localised_to_it_and_its_forward_node(case):
    op, index, target, forward, gradient = PLANTED[case]
    e = _explain(compile=rounding_backward_of(op, index), criterion="differs", sets=2)
    loc = e.localisation
    assert loc is not None and loc.phase == "backward", str(e)
    assert loc.target == target and loc.backward_of == forward and loc.gradient == gradient, str(e)
    assert f"the backward of {forward}" in str(e)
    # bf16 rounding: beyond the node's bound, and far beyond eager's error there
    assert loc.beyond_bound and loc.compiled_cond_max > 100 * loc.eager_cond_max, str(e)
    assert e.status == "unexplained" and not e.tried and "is not Inductor" in str(e)


def test_aot_eager_training_step_is_nothing_to_explain():
    e = _explain(compile="aot_eager", sets=2)
    assert e.status == "nothing to explain" and e.localisation is None, str(e)
    assert "grad:net.2.weight" in e.outputs and "loss" in e.outputs


def test_a_loss_that_is_not_a_scalar_is_refused_naming_its_shape():
    with pytest.raises(fb.JudgeError, match=r"shape \[8, 4\].*scalar"):
        fb.explain(MLP(), _sample(), loss=lambda output, sample: output, compile="aot_eager", sets=2)


def test_a_training_step_judgment_needs_its_loss():
    j = fb.judge(MLP(), _sample(), loss=cross_entropy, compile="aot_eager", sets=2, speed_rounds=0)
    with pytest.raises(fb.JudgeError, match="pass its loss function too"):
        fb.explain(MLP(), _sample(), judgment=j)


def test_switches_with_another_backend_are_refused():
    with pytest.raises(fb.JudgeError, match="Inductor's"):
        fb.explain(MLP(), _sample(), loss=cross_entropy, compile="aot_eager", switches=["compiler:numerics='strict'"])


def test_inductor_layer_norm_weight_gradient_is_localised_to_its_backward_decomposition(monkeypatch):
    """The finding (judge: grad:net.2.weight CONTRADICTED on this MLP): Inductor decomposes
    aten.native_layer_norm_backward and sums dy * ((x - mean) * rstd) over the rows, each product
    rounded before it is added; ATen's CPU kernel accumulates with FMA, fewer roundings. Run with
    CI=true, as CI runners set it: Inductor then refuses the implicit fallback that the switch
    leaving out the decomposition relies on, unless the switched compile hides it."""
    monkeypatch.setenv("CI", "true")
    e = _explain(outputs=["grad:net.2.weight"], criterion="worse", sets=4, budget=6)
    assert os.environ["CI"] == "true"
    if e.status == "nothing to explain":
        pytest.skip("Inductor's layer norm weight gradient is not less accurate than eager's on this machine")
    loc = e.localisation
    assert loc is not None and loc.phase == "backward", str(e)
    assert loc.target == "aten.native_layer_norm_backward.default[1]", str(e)
    assert loc.backward_of == "layer_norm (net.2, LayerNorm)" and loc.gradient == "grad:net.2.weight"
    assert e.status == "explained" and e.minimal == ["decomposition:off=aten.native_layer_norm_backward.default"]


def test_cli_explain_with_loss_localises_in_the_backward(tmp_path, monkeypatch, capsys):
    from fusebench.__main__ import main

    shutil.copy(training_models.__file__, tmp_path / "factories.py")
    monkeypatch.chdir(tmp_path)
    status = main(["judge", "factories.py:mlp", "--loss", "factories.py:cross_entropy", "--sets", "4",
                   "--speed-rounds", "0", "--explain", "--budget", "2"])  # fmt: skip
    captured = capsys.readouterr()
    assert status in (0, 1, 3), captured.err
    assert "explanation (" in captured.out, captured.out
    if "nothing to explain" not in captured.out:
        assert "backward node" in captured.out or "searched the forward" in captured.out, captured.out


def test_switches_reach_the_backward_graph(monkeypatch):
    """AOTAutograd lowers a backward graph at its first backward call: the switches of
    apply_switches (and of explain's trials) must be in force then too, not only for the forward.
    Recorded at Inductor's lowering of each convolution_backward node: whether the lowering switch
    makes it a fallback, and the layout_optimization config switch's value."""
    import torch._inductor.config as inductor_config
    import torch._inductor.graph as inductor_graph

    decided = []
    run_node = inductor_graph.GraphLowering.run_node

    def recording_run_node(self, n):
        if n.op == "call_function" and n.target is aten.convolution_backward.default:
            decided.append(
                (inductor_graph.fallback_node_due_to_unsupported_type(n), inductor_config.layout_optimization)
            )
        return run_node(self, n)

    monkeypatch.setattr(inductor_graph.GraphLowering, "run_node", recording_run_node)
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))
    switches = ["lowering:off=aten.convolution_backward.default", "compiler:layout_optimization=False"]
    compiled = fb.apply_switches(net, switches)
    compiled(torch.randn(2, 3, 16, 16, requires_grad=True)).sum().backward()
    torch._dynamo.reset()
    assert decided == [(True, False), (True, False)], decided
