"""fusebench.explain on an output the judge decides by its ULP error: where the conditioned error
cannot resolve compiled against eager (the paired difference within the fp64 reference's
resolution, as at a deep network's outputs), "worse" is the judge's ULP statistic against its
tolerance, at the outputs and at the nodes of the bisection. Planted on DeepLinear (24 linear maps,
whose bound ends up ~1e18 times its own rounding): a backend that computes every product in
another order (noise: as accurate as eager, not bit-equal) and rounds one of them to bf16 (a real
loss) is localised to that product; the reordering alone, and aot_eager, have nothing to explain.
Decided on the conditioned error's max per set, the reordering's noise made every node "worse" on
some set and the bisection stopped at the first product."""

import operator

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
from test_judge import DeepLinear  # noqa: E402

PLANTED = 15  # the product (0-based, of 24) whose value the plant rounds to bf16


def _reversed_matmul(x, w):
    """x @ w with its products summed in the reverse order: another rounding, as accurate."""
    return x.flip(-1) @ w.flip(0)


def _rounded_reversed_matmul(x, w):
    return _reversed_matmul(x, w).to(torch.bfloat16).to(x.dtype)


def reordering_backend(rounded: int | None):
    """A torch.compile backend: every product of the graph in another order, and product `rounded`
    (in graph order; a prefix of the graph keeps the products before its end) rounded to bf16."""

    def backend(gm, example_inputs):
        products = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.matmul]
        for k, n in enumerate(products):
            n.target = _rounded_reversed_matmul if k == rounded else _reversed_matmul
        gm.recompile()
        return gm

    return backend


def _sample():
    return torch.randn(8, 64, generator=torch.Generator().manual_seed(2))


def _explain(compile, **kw):
    e = fb.explain(DeepLinear().eval(), _sample(), compile=compile, criterion="worse", sets=6, cost_rounds=0, **kw)
    print(e)
    return e


def test_a_bf16_rounded_product_is_localised_on_the_ulp_error_where_the_bound_cannot_resolve():
    e = _explain(reordering_backend(PLANTED))
    loc = e.localisation
    assert loc is not None and loc.node == _product_names()[PLANTED], str(e)
    assert loc.measure == "ulp", str(e)
    measure = e.measures[e.outputs[0]]
    assert measure.name == "ulp" and measure.statistic in ("ulp_p99", "ulp_max"), str(e)
    assert "cannot resolve" in measure.reason
    # bf16 rounding at the node: its ULP statistic far above eager's there
    assert loc.compiled_statistic > 10 * loc.eager_statistic, str(e)
    assert "localised on the per-set P99 ULP error" in str(e) or "localised on the set-max ULP error" in str(e)
    assert "the conditioned error cannot resolve this output" in str(e)


def test_the_judgment_gives_the_measure_and_its_statistic():
    backend = reordering_backend(PLANTED)
    j = fb.judge(DeepLinear().eval(), _sample(), sets=6, compile=backend, speed_rounds=0)
    assert j.outcome.value == "contradicted" and j.outputs[0].measure == "ulp", str(j)
    e = fb.explain(DeepLinear().eval(), _sample(), judgment=j, compile=backend, sets=6, cost_rounds=0)
    assert e.criterion == "worse" and e.measures[e.outputs[0]].name == "ulp", str(e)
    assert "the judge" in e.measures[e.outputs[0]].reason
    assert e.localisation is not None and e.localisation.node == _product_names()[PLANTED], str(e)


@pytest.mark.parametrize("compile", ["reordered", "aot_eager"])
def test_noise_within_the_ulp_tolerance_and_aot_eager_have_nothing_to_explain(compile):
    e = _explain(reordering_backend(None) if compile == "reordered" else "aot_eager")
    assert e.status == "nothing to explain" and e.localisation is None, str(e)


def _product_names() -> list[str]:
    """The products' node names in Dynamo's graph of DeepLinear, in graph order."""
    names = []

    def backend(gm, example_inputs):
        names.extend(n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is operator.matmul)
        return gm

    torch._dynamo.reset()
    torch.compile(DeepLinear().eval(), backend=backend)(_sample())
    return names


CONVOLUTION_LAYERS = {
    "conv2d": (lambda: torch.nn.Conv2d(3, 4, 1), (2, 3, 4, 4)),
    "conv1d": (lambda: torch.nn.Conv1d(3, 4, 1), (2, 3, 4)),
    "conv3d": (lambda: torch.nn.Conv3d(3, 4, 1), (2, 3, 2, 2, 2)),
    "conv_transpose2d": (lambda: torch.nn.ConvTranspose2d(3, 4, 2), (2, 3, 4, 4)),
}


class Variance(torch.nn.Module):
    """No convolution; a variance (Inductor's Welford reduction is the candidate here)."""

    def forward(self, x):
        return (x.to(torch.float16).to(torch.float32) * 2).var(-1)


@pytest.mark.parametrize("layer", [*CONVOLUTION_LAYERS, "linear", "variance"])
def test_inductors_layout_optimisation_is_a_switch_where_the_graph_has_convolutions(layer):
    """The mechanism explain found on mobilenet_v3_small's training step (docs/fusion-switches.md):
    Inductor hands convolution_backward channels-last operands where eager's are NCHW, and ATen's
    kernel sums in another order on them. compiler:layout_optimization=False undoes it; it is a
    candidate where the captured graph has a convolution of any kind (Dynamo's torch functions,
    AOTAutograd's ATen backward), and only there."""
    from fusebench._explain import _candidates, _Recorder

    if layer in CONVOLUTION_LAYERS:
        make, shape = CONVOLUTION_LAYERS[layer]
        module, x = make(), torch.randn(*shape)
    else:
        module, x = (torch.nn.Linear(3, 4), torch.randn(2, 3)) if layer == "linear" else (Variance(), torch.randn(2, 3))
    recorder = _Recorder()
    torch._dynamo.reset()
    torch.compile(module, backend=recorder)(x)
    tokens = [s.token for s in _candidates(recorder, None, None, torch)[0]]
    assert ("compiler:layout_optimization=False" in tokens) == (layer in CONVOLUTION_LAYERS), tokens
    # the variance of Variance's var: Inductor's Welford reduction is a candidate there
    assert ("compiler:cpp.use_two_step_variance_threshold=0" in tokens) == (layer == "variance"), tokens


def test_a_backward_graphs_convolution_is_found_by_its_aten_op():
    """In AOTAutograd's backward graph a convolution is aten.convolution_backward: the candidate is
    offered from that graph alone."""
    from fusebench._explain import _candidates, _capture_backward

    class Step:
        def __init__(self, fn):
            self.fn = fn

        def compiled(self, inputs, s):
            self.fn(*inputs).sum().backward()

    conv = torch.nn.Conv2d(3, 4, 3)
    recorder = _capture_backward(conv, [(torch.randn(2, 3, 6, 6, requires_grad=True),)], Step, torch)
    assert any(n.target is torch.ops.aten.convolution_backward.default for n in recorder.graphs[0].graph.nodes)
    tokens = [s.token for s in _candidates(recorder, None, None, torch)[0]]
    assert "compiler:layout_optimization=False" in tokens, tokens
