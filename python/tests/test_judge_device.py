"""fusebench.judge on the model's device: the sets made on the CPU and moved, the statistics on the
CPU, the GPU's timing by CUDA events. The device-agnostic parts run here; the CUDA judgments run
where torch.cuda.is_available() (the device plan's judge-mlp@cuda step runs one on its GPU)."""

import contextlib
import json

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
from fusebench._judge import (  # noqa: E402
    JudgeError,
    judgment_device,
    measure_speed,
    set_maker,
    synchronizer,
)
from training_models import MLP  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(
    not CUDA,
    reason="no CUDA device here (torch.cuda.is_available() is False): the CUDA judgment runs on a GPU machine, "
    "e.g. the device plan's judge-mlp@cuda step",
)


def _sample():
    g = torch.Generator().manual_seed(11)
    return fb.Inputs(
        (torch.randn(8, 32, generator=g), torch.randint(0, 50, (8,), generator=g)),
        {"mask": torch.ones(8, dtype=torch.bool), "scale": torch.full((4,), 2.0)},
    )


def _sampler(index, generator):
    return (torch.randn(4, 16, generator=generator),)


def _mlp():
    """The shared MLP at the width of these tests' inputs (32 features)."""
    return MLP(features=32, hidden=64, classes=16)


class CausalAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def _tensors(inputs):
    return inputs.tensors()


# ---- the sets: built on the CPU, moved last
@pytest.mark.parametrize("sample", [_sample(), _sampler], ids=["perturbed sample", "sampler"])
def test_a_set_for_another_device_is_the_cpu_set_moved(sample):
    """set_maker(device=X) is set_maker(device='cpu') moved to X: the generator is a CPU one and the
    perturbation is computed on the CPU, so a CUDA judgment sees the CPU judgment's inputs. 'meta'
    stands for a device whose arithmetic is not the CPU's: its sets hold no values, so anything
    computed there instead of on the CPU could not be moved in."""
    kwargs = dict(seed=5, dtype=None, perturbation=0.5, torch=torch)
    on_cpu = set_maker(sample, device="cpu", **kwargs)
    where_given = set_maker(sample, device=None, **kwargs)
    on_meta = set_maker(sample, device="meta", **kwargs)
    for index in (0, 1, 3):
        cpu, given, meta = _tensors(on_cpu(index)), _tensors(where_given(index)), _tensors(on_meta(index))
        assert len(cpu) == len(given) == len(meta) > 0
        for c, g, m in zip(cpu, given, meta):
            assert c.device.type == "cpu" and torch.equal(c, g)
            assert m.device.type == "meta" and (m.dtype, m.shape) == (c.dtype, c.shape)
    assert not torch.equal(_tensors(on_cpu(1))[0], _tensors(on_cpu(0))[0])  # set 1 is perturbed
    assert torch.equal(_tensors(on_cpu(3))[0], _tensors(set_maker(sample, device="cpu", **kwargs)(3))[0])


def test_a_set_cast_to_the_judged_dtype_keeps_its_integers():
    make = set_maker(_sample(), seed=5, dtype=torch.bfloat16, perturbation=0.5, device="cpu", torch=torch)
    x, ids, mask, scale = _tensors(make(2))
    assert x.dtype == torch.bfloat16 and scale.dtype == torch.bfloat16
    assert ids.dtype == torch.int64 and mask.dtype == torch.bool


def test_the_judgment_runs_on_the_model_s_device_and_refuses_a_model_on_two():
    assert judgment_device(_mlp(), fb.Inputs((torch.randn(2, 32, device="meta"),), {}), torch).type == "cpu"
    assert judgment_device(lambda x: x, fb.Inputs((torch.randn(2, device="meta"),), {}), torch).type == "meta"
    assert judgment_device(lambda: 0, fb.Inputs((), {}), torch).type == "cpu"
    split = _mlp()
    split.net[3].to("meta")
    with pytest.raises(JudgeError, match=r"its parameters and buffers lie on 2 devices \(cpu, meta\)"):
        judgment_device(split, fb.Inputs((torch.randn(2, 32),), {}), torch)
    with pytest.raises(JudgeError, match="its inputs lie on 2 devices"):
        judgment_device(lambda a, b: a + b, fb.Inputs((torch.ones(2), torch.ones(2, device="meta")), {}), torch)
    with pytest.raises(JudgeError, match="lie on 2 devices"):
        fb.judge(split, torch.randn(4, 32), sets=2, speed_rounds=0)


# ---- waiting for the device and timing it
def _no_gpu_calls(monkeypatch):
    """A CUDA runtime that says it is there and fails every wait and event: what the CPU path must
    never touch, even on a machine that has a GPU."""

    def refuse(*args, **kwargs):
        raise AssertionError("a CPU judgment waited for or timed the GPU")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", refuse)
    monkeypatch.setattr(torch.cuda, "Event", refuse)


def test_a_cpu_model_never_waits_for_the_gpu(monkeypatch):
    _no_gpu_calls(monkeypatch)
    synchronizer(torch.device("cpu"), torch)()
    speed = measure_speed(lambda: None, lambda: None, 0.0, 3, torch, device=torch.device("cpu"))
    assert speed.rounds == 3
    j = fb.judge(_mlp().eval(), torch.randn(4, 32), sets=2, compile=lambda f: f, speed_rounds=2)
    assert j.environment["device"] == "cpu" and j.speed.rounds == 2


def test_a_cuda_model_is_timed_by_cuda_events(monkeypatch):
    """On a CUDA device each call's time is the events' elapsed time (milliseconds, converted):
    here a stand-in runtime whose clock moves 3 ms a call of eager and 1 ms a call of compiled,
    so the measure must read exactly 3 ms, 1 ms and 3x (the wall clock would read microseconds)."""
    clock = {"ms": 0.0}
    recorded = []

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.at = None

        def record(self):
            self.at = clock["ms"]
            recorded.append(self)

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())

    def eager():
        clock["ms"] += 3.0

    def compiled():
        clock["ms"] += 1.0

    speed = measure_speed(eager, compiled, 0.0, 4, torch, device=torch.device("cuda", 0))
    assert recorded and speed.rounds == 4
    assert speed.eager_ms == pytest.approx(3.0) and speed.compiled_ms == pytest.approx(1.0)
    assert speed.speedup == pytest.approx(3.0) and speed.low == pytest.approx(3.0)


# ---- on a GPU
@needs_cuda
def test_cuda_sets_are_the_cpu_sets():
    kwargs = dict(seed=3, dtype=None, perturbation=0.5, torch=torch)
    sample = _sample()
    on_cpu, on_cuda = set_maker(sample, device="cpu", **kwargs), set_maker(sample, device="cuda", **kwargs)
    for index in range(4):
        for c, g in zip(_tensors(on_cpu(index)), _tensors(on_cuda(index))):
            assert g.is_cuda and torch.equal(c, g.cpu())


@needs_cuda
def test_a_model_on_the_gpu_is_judged_there_with_inductor(tmp_path):
    model = _mlp().eval().cuda()
    j = fb.judge(model, torch.randn(16, 32), sets=6, speed_rounds=3)  # the sample moves to the model
    assert j.environment["device"].startswith("cuda")
    assert j.outcome.value in ("supported", "inconclusive", "contradicted") and j.speed.rounds == 3
    assert j.speed.eager_ms > 0 and j.speed.compiled_ms > 0
    assert len(j.outputs[0].compiled["cond_p99"]) == 6
    j.report(tmp_path)
    assert json.loads((tmp_path / "judgment.json").read_text())["environment"]["device"].startswith("cuda")


@needs_cuda
def test_a_rounding_compiler_on_the_gpu_is_contradicted():
    def rounding(fn):
        return lambda x: fn(x).to(torch.bfloat16).to(x.dtype)

    j = fb.judge(_mlp().eval().cuda(), torch.randn(16, 32, device="cuda"), sets=12, compile=rounding, speed_rounds=0)
    assert j.outcome.value == "contradicted" and j.outputs[0].measure == "conditioned"


@needs_cuda
def test_causal_attention_on_the_gpu_has_its_bound():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=g).cuda() for _ in range(3))
    j = fb.judge(CausalAttention(), (q, k, v), sets=4, compile=lambda f: f, speed_rounds=0)
    assert j.bit_equal and j.outputs[0].measure == "conditioned" and not j.unknown_ops


@needs_cuda
def test_the_training_step_on_the_gpu_is_judged_there():
    def mean_square(output, sample):
        return output.square().mean()

    j = fb.judge(
        _mlp().eval().cuda(), torch.randn(16, 32), loss=mean_square, compile="aot_eager", sets=4, speed_rounds=0
    )
    assert j.environment["device"].startswith("cuda")
    assert any(o.name.startswith("grad:") for o in j.outputs)
    assert j.bit_equal, [(o.name, o.mismatches) for o in j.outputs if not o.bit_equal]
