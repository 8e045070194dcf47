"""A case that errors is a result: the cases that failed (errored for a reason other than a declared
n/a) are listed beside their task, the verdicts they bear on read INCONCLUSIVE naming them (a
CONTRADICTED one stands and names them), the first screen counts them, and a declared n/a is never
taken for a failure."""

from __future__ import annotations

import json

from reports import claims, report
from reports.claims import d
from reports.claims.verdict import NotApplicable, Outcome, Verdict, not_applicable, with_failures
from reports.document import Document
from reports.results import is_failure
from reports.tests.fixture_runs import make_run

WORKER_DIED = "the run's worker server closed the session (its log is in /tmp/tmp.x1/torch.log)"


def test_a_declared_na_is_not_a_failure():
    assert not is_failure({"error_occurred": True, "error_message": "n/a on torch: no tile size"})
    assert not is_failure({"error_occurred": True, "error_message": "n/a in the quick profile on xla: f16"})
    assert is_failure({"error_occurred": True, "error_message": WORKER_DIED})
    assert not is_failure({"error_message": WORKER_DIED})  # no error occurred


def _bit_equal(cases: int, differing: int = 0) -> Verdict:
    """Task D's verdict over `cases` data-movement cases, `differing` of them not bit-equal."""
    rows = tuple(
        ({"subgraph": f"s{k}"}, {"name": f"D/subgraph:s{k}/dtype:f16", "bit_equal": int(k >= differing)})
        for k in range(cases)
    )
    return d.decide(d.Facts(rows, {}))


def test_failures_turn_a_verdict_inconclusive_in_its_data_and_name_them():
    supported = _bit_equal(3)
    failed = [(f"D/subgraph:s{k}/dtype:f16", WORKER_DIED) for k in range(15)]
    v = with_failures(supported, failed)
    assert v.outcome is Outcome.INCONCLUSIVE and v.cases == 18 and v.figures.judged is supported
    shown = claims.words(v)
    assert shown.key_figure == f"15 failed; on the 3 cases judged: SUPPORTED {claims.words(supported).key_figure}"
    assert "15 cases failed: the run's worker server closed the session" in shown.interval
    contradicted = with_failures(_bit_equal(3, differing=1), failed[:1])
    assert contradicted.outcome is Outcome.CONTRADICTED
    assert "also 1 case failed" in claims.words(contradicted).evidence
    na = not_applicable("C1", "no inexact-scalar f16/bf16 case in this run", "no inexact-scalar case")
    v = with_failures(na, [("C1/dtype:f16/scalar:0.7", "filesystem error: cannot create directories")])
    assert v.outcome is Outcome.INCONCLUSIVE and claims.words(v).key_figure == "1 failed; none judged"
    assert claims.words(v).interval.endswith("Judged without them: N/A no inexact-scalar case")
    assert with_failures(supported, []) is supported


def test_a_failure_bears_on_the_member_it_names_else_on_every_member(tmp_path):
    ok = {m: Verdict("B", Outcome.NA, NotApplicable("no per-set figures"), member=m) for m in ("attention", "softmax")}
    s = Document(tmp_path).section("B", "B")
    for member in ("attention", "softmax"):
        s.verdict(member, ok[member])
    s.settle([("B/chain:attention/dtype:f16/dist:uniform", "boom")])
    assert [c.wording.outcome for c in s.doc.verdicts] == [Outcome.INCONCLUSIVE, Outcome.NA]
    for member in ("attention", "softmax"):
        s.verdict(member, ok[member])
    s.settle([("B/setup", "boom")])  # names no member: it may hide any of them
    assert [c.wording.outcome for c in s.doc.verdicts[2:]] == [Outcome.INCONCLUSIVE, Outcome.INCONCLUSIVE]


def test_the_report_lists_failed_cases_and_the_verdict_says_so(tmp_path):
    run = make_run("run_ok", tmp_path)
    path = run / "bench_data_movement.json"
    data = json.loads(path.read_text())
    failed = dict(data["benchmarks"][0])
    failed |= {"name": "D/subgraph:transpose/dtype:bf16/shape:2x16x32/device:cpu", "run_name": "D/x"}
    failed |= {"error_occurred": True, "error_message": WORKER_DIED}
    na = dict(failed, name="D/subgraph:transpose/dtype:f32/shape:2x16x32/device:cpu")
    na["error_message"] = "n/a on cpu: no such layout"
    data["benchmarks"] += [failed, na]
    path.write_text(json.dumps(data))
    md_path, _ = report.render(run)
    md = md_path.read_text()
    first_screen = md.split("Contents:", 1)[0]
    assert (
        "| [D](#task-d) | pure data movement is bit-identical between eager and fused | **INCONCLUSIVE** 1 failed" in md
    )
    assert f"Failed: 1 case errored (data_movement: 1); first error: {WORKER_DIED}" in first_screen
    section = md.split("## D —", 1)[1].split("\n## ", 1)[0]
    assert "Failed cases: 1 cases of this task errored" in section
    assert f"| D/subgraph:transpose/dtype:bf16/shape:2x16x32/device:cpu | {WORKER_DIED} |" in section
    assert "no such layout" not in section.split("Failed cases", 1)[1]  # the n/a is not a failure


def test_a_verdict_keeps_the_device_it_was_given_for_until_settled(tmp_path):
    doc = Document(tmp_path)
    section = doc.section("E", "E — training")
    na = not_applicable("E-gap", "the training suite did not run", "not run")
    for device in ("cpu", "torch", "xla"):  # as E's not-run path gives them: one settle for all
        section.device, section.show_device = device, True
        section.verdict("training metrics align", na)
    section.settle()
    assert [cell.device for cell in doc.verdicts] == ["cpu", "torch", "xla"]
    assert [md[0].split("]")[0].split("[")[-1] for md, _ in section.verdicts] == ["cpu", "torch", "xla"]
