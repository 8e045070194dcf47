"""explain's price of a switch (_costs): a recompile inside the timed rounds is reported as such,
never priced. Dynamo's real recompiles, with a backend that runs the captured graph as it is (the
guard is Dynamo's, not Inductor's: nothing is compiled, and a test takes well under a second once
Dynamo is loaded)."""

import fusebench as fb
import pytest

torch = pytest.importorskip("torch")
from fusebench import _explain, _judge  # noqa: E402
from fusebench._explain import Switch, SwitchEntry, _costs  # noqa: E402


class Flip(torch.nn.Module):
    """Its forward depends on a Python attribute: Dynamo guards on it, so changing it recompiles."""

    def __init__(self):
        super().__init__()
        self.mode = 0

    def forward(self, x):
        return x * 2 + 1 if self.mode == 0 else x * 3 + 1


def graph_as_is(switches=(), options=None):
    def backend(gm, example_inputs):
        return gm.forward

    return backend


def price(monkeypatch, flip_inside_rounds: bool) -> dict:
    """entry.cost of one switch on Flip, the model's attribute changed (or not) once the timed
    rounds begin. Dynamo's recompile limit is set to 2, the two compiled forms that _costs makes
    before the rounds: a recompile inside them is then one past the limit, which _costs must lift so
    that Dynamo compiles (and is seen to) instead of running the frame eagerly unseen."""
    monkeypatch.setattr(_explain, "SwitchedInductor", graph_as_is)
    model = Flip().eval()
    timed = _judge.measure_speed

    def rounds(*args, **kwargs):
        if flip_inside_rounds:
            model.mode = 1
        return timed(*args, **kwargs)

    # _costs takes measure_speed from _judge: patched where it is looked up, at _explain's import or at the call
    monkeypatch.setattr(_judge, "measure_speed", rounds)
    monkeypatch.setattr(_explain, "measure_speed", rounds, raising=False)
    switch = Switch("compiler", "max_fusion_size", 1)
    entry = SwitchEntry(switch.token, "fusion extent", "(whole graph)", "", [0])
    with torch._dynamo.config.patch(recompile_limit=2):
        _costs(model, fb.Inputs((torch.randn(256),), {}), [switch], [entry], None, 3, torch)
    return entry.cost


def test_a_switch_is_priced_when_nothing_recompiles(monkeypatch):
    cost = price(monkeypatch, flip_inside_rounds=False)
    assert cost["rounds"] == 3 and cost["slowdown"] > 0 and not cost["resolved"].startswith("not measured")


def test_a_recompile_inside_the_timed_rounds_is_named_not_priced(monkeypatch):
    cost = price(monkeypatch, flip_inside_rounds=True)
    assert cost == {"rounds": 0, "resolved": "not measured: Dynamo compiled again during the timed rounds"}
