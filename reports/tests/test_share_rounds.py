"""Shares of the copy decided from interleaved rounds (reports/claims/shares.py), replayed from recorded
rounds (fixtures/share_rounds.json: the copy_share dumps of two back-to-back runs of one commit on this
project's loaded two-core machine, and rounds constructed around a target). suites/support/tests/
test_interleaved.cpp checks that every interval in the fixture is what the suites' helper computes
from the recorded times, so these decisions are the decisions on those rounds."""

from __future__ import annotations

import json
import pathlib
import statistics
from types import SimpleNamespace

import pytest

from reports.claims import engine, s, shares, words
from reports.claims.verdict import Outcome
from reports.matrix import grouped_verdict
from reports.results import EARLIER_COPY_RATES, EARLIER_REFERENCE_RUNS

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "share_rounds.json").read_text())


def benchmark(dump: dict) -> dict:
    """A benchmark's JSON as the suites write it: its rate timed apart (here the rounds' median kernel
    time) and the interleaved share's counters."""
    share = dump["share"]
    out = {
        "bytes_per_second": dump["traffic_bytes"] / statistics.median(dump["kernel_seconds"]),
        "copy_share": share["median"],
        "copy_share_lo": share["low"],
        "copy_share_hi": share["high"],
        "copy_share_rounds": share["rounds"],
    }
    if dump.get("copy_waits"):  # dumps from before the waits were measured have none
        out["copy_share_wait"] = statistics.median(dump["copy_waits"])
    return out


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


@pytest.mark.parametrize("first,second", [("a", "b"), ("c", "d"), ("e", "f")])
def test_two_runs_of_the_same_code_give_the_same_verdict_or_inconclusive(first, second):
    run_a, run_b = FIXTURE["runs"][first], FIXTURE["runs"][second]
    judged = sorted(set(run_a) & set(run_b))
    assert len(judged) >= 6, judged  # Chain, LayerNorm, Softmax; UlpDiff, ErrorStats, ErrorStatsVsF64
    for name in judged:
        a, b = verdict(name, run_a[name]).outcome, verdict(name, run_b[name]).outcome
        assert a is b or Outcome.INCONCLUSIVE in (a, b), (name, a, b, run_a[name]["share"], run_b[name]["share"])


def with_copy_waits(dump: dict, wait: float) -> dict:
    """The dump with every round's copy threads waiting `wait` of their time for a CPU."""
    return {**dump, "copy_waits": [wait] * dump["share"]["rounds"]}


@pytest.mark.parametrize("label", ["chain supported", "chain contradicted", "softmax contradicted"])
def test_rounds_on_a_loaded_machine_decide_nothing(label):
    """Under load the share moves with the load (fused Chain read 82.6 % of the copy loaded and 55.0 %
    quiet, one build five minutes apart): a loaded run's interval, however narrow, is INCONCLUSIVE and
    says why."""
    dump = FIXTURE["constructed"][label]
    loaded = verdict(dump["benchmark"], with_copy_waits(dump, 2 * shares.LOADED_COPY_WAIT))
    assert loaded.outcome is Outcome.INCONCLUSIVE
    assert "waited" in words(loaded).interval and "quiet machine" in words(loaded).interval
    quiet = verdict(dump["benchmark"], with_copy_waits(dump, shares.LOADED_COPY_WAIT / 10))
    assert quiet.outcome is Outcome(dump["expected"])
    assert "waited" in words(quiet).evidence


def test_a_loaded_and_a_quiet_run_never_give_opposite_verdicts():
    """The pair the flip came from, with its recorded figures (docs/claims.md): loaded 82.6 % [72.7,
    101 %], quiet 55.0 % [52.6, 57.8 %] against the 70 % target. Those runs predate the wait's
    measurement: here the loaded one is given a wait past the limit, the quiet one a tenth of it."""
    target = engine.targets()["Chain"]
    loaded = shares.Rounds(0.826, 0.727, 1.01, 31, 9.0e9, copy_wait=2 * shares.LOADED_COPY_WAIT)
    quiet = shares.Rounds(0.550, 0.526, 0.578, 31, 20.4e9, copy_wait=shares.LOADED_COPY_WAIT / 10)
    assert shares.rounds_outcome(quiet, target) is Outcome.CONTRADICTED
    assert shares.rounds_outcome(loaded, target) is Outcome.INCONCLUSIVE
    # without the wait, as before: SUPPORTED against CONTRADICTED
    assert shares.rounds_outcome(shares.Rounds(0.826, 0.727, 1.01, 31), target) is Outcome.SUPPORTED


def test_recorded_loaded_runs_carry_their_wait_and_decide_nothing():
    """Runs c and d measured each round's copy-thread wait, on a machine at a load average of 12 to 14:
    every share is INCONCLUSIVE, and says the wait."""
    for run in ("c", "d"):
        for name, dump in FIXTURE["runs"][run].items():
            assert len(dump["copy_waits"]) == dump["share"]["rounds"], (run, name)
            v = verdict(name, dump)
            assert v.outcome is Outcome.INCONCLUSIVE, (run, name)
            assert "waited" in words(v).interval, (run, name)


# ---- the copy between runs (reports/yardsticks.py)
def rounds_with_history(dump: dict, earlier: list[dict], references: int = 0) -> shares.Rounds:
    """A run's rounds, with the copy rates the `earlier` runs measured for the same benchmark (the last
    `references` of them reference runs of the machine class)."""
    b = benchmark(dump)
    b[EARLIER_REFERENCE_RUNS] = references
    b["copy_bytes_per_second"] = 2 * dump["copied_bytes"] / statistics.median(dump["copy_seconds"])
    b[EARLIER_COPY_RATES] = tuple(2 * e["copied_bytes"] / statistics.median(e["copy_seconds"]) for e in earlier)
    return shares.rounds_of(b)


QUIET_RUNS = ("e", "f")  # one build back to back on the quiet machine; the copy moved 27.9 -> 36.7 GB/s


def test_a_copy_that_moves_between_runs_cannot_give_opposite_verdicts():
    """Runs e and f, replayed: each alone, the fused Chain's interval lies above 62.5 % in e and below 58.6 %
    in f, so any target between them is met in one run and missed in the other. Set against the other
    run's copy (the history the later run is given), no target gives opposite verdicts, in either order."""
    run_e, run_f = (FIXTURE["runs"][r] for r in QUIET_RUNS)
    opposite_alone = 0
    for name in sorted(set(run_e) & set(run_f)):
        for first, second in ((run_e[name], run_f[name]), (run_f[name], run_e[name])):
            alone_first = rounds_with_history(first, [])
            alone_second = rounds_with_history(second, [])
            later = rounds_with_history(second, [first])
            for target in [t / 100 for t in range(10, 130)]:
                a = shares.rounds_outcome(alone_first, target)
                b = shares.rounds_outcome(alone_second, target)
                opposite_alone += {a, b} == {Outcome.SUPPORTED, Outcome.CONTRADICTED}
                c = shares.rounds_outcome(later, target)
                assert a is c or Outcome.INCONCLUSIVE in (a, c), (name, target, a, c)
    assert opposite_alone > 0  # without the earlier run's copy, the two runs do contradict each other


def test_first_runs_set_against_one_reference_cannot_give_opposite_verdicts():
    """Two first runs (a fresh clone each: no earlier run in their folders) on machines of one class, each set
    against the class's reference run only (results/reference/yardsticks.jsonl): whichever quiet runs they
    are and whichever run is the reference, no target gives opposite verdicts. Each interval holds its own
    share and the share against the common reference copy, so one cannot lie wholly above a target while the
    other lies wholly below."""
    runs = {r: FIXTURE["runs"][r] for r in QUIET_RUNS}
    checked = 0
    for name in sorted(set.intersection(*(set(run) for run in runs.values()))):
        for reference in runs.values():
            for x in runs.values():
                for y in runs.values():
                    first = rounds_with_history(x[name], [reference[name]], references=1)
                    second = rounds_with_history(y[name], [reference[name]], references=1)
                    for target in [t / 100 for t in range(10, 130)]:
                        pair = {shares.rounds_outcome(first, target), shares.rounds_outcome(second, target)}
                        assert pair != {Outcome.SUPPORTED, Outcome.CONTRADICTED}, (name, target)
                        checked += 1
    assert checked > 0


def test_a_reference_run_is_named_as_one():
    run_e, run_f = (FIXTURE["runs"][r] for r in QUIET_RUNS[:2])
    name = next(n for n in run_e if n.startswith("Chain/"))
    first = rounds_with_history(run_f[name], [run_e[name]], references=1)
    shown = shares.rounds_wording(Outcome.INCONCLUSIVE, "fused Chain", first, 0.60, "")
    assert "the 1 reference run of this machine class (results/reference/yardsticks.jsonl)" in shown.evidence
    assert "earlier run on this machine" not in shown.evidence
    both = rounds_with_history(run_f[name], [run_e[name], run_e[name]], references=1)
    assert "the 1 earlier run on this machine and the 1 reference run" in shares.earlier_runs_text(both)


def test_the_later_run_says_the_memory_between_runs_decided():
    run_e, run_f = (FIXTURE["runs"][r] for r in QUIET_RUNS)
    name = next(n for n in run_e if n.startswith("Chain/"))
    target = 0.60  # between the two runs' intervals: SUPPORTED in e alone, CONTRADICTED in f alone
    later = rounds_with_history(run_f[name], [run_e[name]])
    assert later.low < later.high < target
    assert shares.rounds_outcome(later, target) is Outcome.INCONCLUSIVE
    shown = shares.rounds_wording(Outcome.INCONCLUSIVE, "fused Chain", later, target, "")
    assert "memory speed between runs decides it" in shown.interval
    assert "(27.9 GB/s) the share spans" in shown.interval and "in the 1 earlier run on this machine" in shown.evidence
    assert shares.interval_text(later) in shown.key_figure
    low, high = later.decided
    assert low == later.low and high > target  # widened upward only: the earlier copy was slower
    alone = rounds_with_history(run_f[name], [])
    assert (
        "no earlier run on this machine"
        in shares.rounds_wording(Outcome.CONTRADICTED, "fused Chain", alone, target, "").evidence
    )


@pytest.mark.parametrize("planted", [1.0, 1e6, 1e15, 1e300])
def test_a_planted_history_can_only_undecide_a_share(planted):
    """A history edited by hand (an absurdly slow or fast copy) widens the interval, never narrows it: it can
    turn a decided share INCONCLUSIVE, never into the other decided verdict."""
    for run in QUIET_RUNS:
        for name, dump in FIXTURE["runs"][run].items():
            alone = rounds_with_history(dump, [])
            b = benchmark(dump)
            b["copy_bytes_per_second"] = alone.copy_bytes_per_second
            b[EARLIER_COPY_RATES] = (planted,)
            planted_rounds = shares.rounds_of(b)
            low, high = planted_rounds.decided
            assert low <= alone.low and high >= alone.high
            for target in [t / 100 for t in range(10, 130)]:
                a, p = shares.rounds_outcome(alone, target), shares.rounds_outcome(planted_rounds, target)
                assert p is a or p is Outcome.INCONCLUSIVE, (name, planted, target, a, p)


def test_rounds_decide_without_the_copy_timed_apart():
    """A run whose filter left MemoryCopy out (tools/run --filter '^Chain/path:fused/') still has each share's
    copy in its rounds: the claim is decided on them, not left as 'the suite ran, but gave no case'."""
    run = FIXTURE["runs"]["e"]
    for name, dump in run.items():
        family = name.split("/")[0]
        b = benchmark(dump)
        if family in engine.targets():
            v = engine.decide_target(family, engine.Facts(False, {family: {"fused": b}}, {}, None, {}, None))
        else:
            row = {**b, "name": f"{name}/real_time", "run_name": f"{name}/real_time", "threads": dump["threads"]}
            (v,) = s.verdicts(s.facts(SimpleNamespace(data={"context": {}, "benchmarks": [row]})))
        assert v is not None and v.outcome is verdict(name, dump).outcome, name
        assert v.cases == dump["share"]["rounds"]
        shown = words(v)
        assert "[" in shown.key_figure, name
