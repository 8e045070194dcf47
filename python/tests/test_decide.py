"""The installed package carries the decision core whole: fusebench.decision reads the thresholds file
the wheel puts beside it, judge decides through that one module, and a judgment's verdict rests on
the magnitude with the share of sets worse beside it. (The rule itself is tested from the checkout,
reports/tests/test_decision.py: the report imports the same file.)"""

import json
import pathlib

import numpy as np
from fusebench import _judge, decision


def test_the_wheel_carries_the_thresholds_beside_the_module():
    path = decision.thresholds_path()
    assert path.parent == pathlib.Path(decision.__file__).resolve().parent, path
    b = json.loads(path.read_text())["B"]
    assert (decision.RESAMPLES, decision.CONFIDENCE, decision.SEED) == (b["resamples"], b["confidence"], b["seed"])
    assert decision.STATISTICS == b["statistics"]


def test_judge_decides_through_the_core():
    assert _judge.D is decision and _judge.Part is decision.Part and _judge.Outcome is decision.Outcome


def test_a_hair_worse_in_most_sets_is_supported_and_the_share_is_shown_beside_it():
    rng = np.random.default_rng(11)
    eager = rng.gamma(4.0, size=32)
    [part] = decision.judge_statistic("logits", "cond_max", eager * 1.003, eager)
    assert decision.decide([part]) is decision.Outcome.SUPPORTED
    [share] = part.beside
    assert share.outcome is decision.Outcome.CONTRADICTED and not share.decides
    assert part.to_dict()["beside"][0]["statistic"] == "cond_max share"
