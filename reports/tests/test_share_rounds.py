"""Shares of the copy decided from interleaved rounds (reports/claims/shares.py), replayed from recorded
rounds (fixtures/share_rounds.json: the copy_share dumps of two back-to-back runs of one commit on this
project's loaded two-core machine, and rounds constructed around a target). suites/support/tests/
test_interleaved.cpp checks that every interval in the fixture is what the suites' helper computes
from the recorded times, so these decisions are the decisions on those rounds."""

from __future__ import annotations

import json
import pathlib
import statistics

import pytest

from reports.claims import engine, s, shares, words
from reports.claims.verdict import Outcome
from reports.matrix import grouped_verdict

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "share_rounds.json").read_text())


def benchmark(dump: dict) -> dict:
    """A benchmark's JSON as the suites write it: its rate timed apart (here the rounds' median kernel
    time) and the interleaved share's counters."""
    share = dump["share"]
    return {
        "bytes_per_second": dump["traffic_bytes"] / statistics.median(dump["kernel_seconds"]),
        "copy_share": share["median"],
        "copy_share_lo": share["low"],
        "copy_share_hi": share["high"],
        "copy_share_rounds": share["rounds"],
    }


def verdict(name: str, dump: dict):
    """The claim's verdict on one benchmark: Engine-target for the engine's fused kernels, S for the
    toolkit's f16 operations."""
    family = name.split("/")[0]
    b = benchmark(dump)
    copy = 2 * dump["copied_bytes"] / statistics.median(dump["copy_seconds"])
    if family in engine.targets():
        facts = engine.Facts(False, {family: {"fused": b}}, {}, copy, {}, None)
        return engine.decide_target(family, facts)
    measured = s.Measured(
        family,
        "f16",
        "33554432",
        dump["threads"],
        b["bytes_per_second"],
        copy,
        b["bytes_per_second"] / copy,
        s.targets()[family],
        None,
        shares.rounds_of(b),
    )
    return s.decide(measured)


CONSTRUCTED = sorted(FIXTURE["constructed"].items())


@pytest.mark.parametrize("label,dump", CONSTRUCTED, ids=[label for label, _ in CONSTRUCTED])
def test_constructed_rounds_decide_by_the_interval(label, dump):
    v = verdict(dump["benchmark"], dump)
    assert v.outcome is Outcome(dump["expected"]), (label, dump["share"])
    assert v.cases == dump["share"]["rounds"]
    shown = words(v)
    # the interval is the matrix cell's figure and the section's
    assert "[" in shown.key_figure and "of copy" in shown.key_figure
    assert f"{dump['share']['rounds']} interleaved rounds" in shown.condition
    if v.outcome is Outcome.INCONCLUSIVE:
        assert "holds the" in shown.interval


def test_the_band_between_the_ends_is_inconclusive_even_with_the_median_past_the_target():
    """The single-figure rule said SUPPORTED for a median at or above the target; the interval does not."""
    dump = FIXTURE["constructed"]["chain median above target, lower end below"]
    assert dump["share"]["median"] >= engine.targets()["Chain"] > dump["share"]["low"]
    assert verdict(dump["benchmark"], dump).outcome is Outcome.INCONCLUSIVE
    assert shares.outcome(dump["share"]["median"], engine.targets()["Chain"]) is Outcome.SUPPORTED


def test_a_share_above_the_copy_is_explained_not_suspected():
    dump = FIXTURE["constructed"]["ulpdiff above the copy"]
    v = verdict(dump["benchmark"], dump)
    assert v.outcome is Outcome.SUPPORTED
    assert "write-allocate" in words(v).evidence


def test_the_matrix_cell_names_the_undecided_member_with_its_interval():
    members = []
    for label in ("chain supported", "chain median above target, lower end below"):
        dump = FIXTURE["constructed"][label]
        v = verdict(dump["benchmark"], dump)
        members.append((label, words(v)))
    cell = grouped_verdict(members)
    assert cell.outcome is Outcome.INCONCLUSIVE
    low = shares.interval_text(shares.rounds_of(benchmark(FIXTURE["constructed"][members[1][0]])))
    assert low in cell.key_figure


def test_two_runs_of_the_same_code_give_the_same_verdict_or_inconclusive():
    run_a, run_b = FIXTURE["runs"]["a"], FIXTURE["runs"]["b"]
    judged = sorted(set(run_a) & set(run_b))
    assert len(judged) >= 6, judged  # Chain, LayerNorm, Softmax; UlpDiff, ErrorStats, ErrorStatsVsF64
    for name in judged:
        a, b = verdict(name, run_a[name]).outcome, verdict(name, run_b[name]).outcome
        assert a is b or Outcome.INCONCLUSIVE in (a, b), (name, a, b, run_a[name]["share"], run_b[name]["share"])
