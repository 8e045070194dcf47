"""Turns a results directory (Google Benchmark JSON files, one per suite and device, plus dumps) into
report.md and report.html (plots embedded).

The page opens with the verdicts: a claims × devices table (reports/matrix.py), each cell the verdict
and its key figure, linked to its section; then the first screen's attribution lines, the contents
and one line about the run (reports/runline.py). Each section (reports/sections/) opens with its
verdicts, then its figures, then its tables (long ones collapsed). Results are found by their context
(suite, device), so a device that appears in the results appears as a column with no change here.
The claims are decided in reports/claims/; the page is written by reports/document.py.

Usage: python -m reports.report [--allow-incomplete] RESULTS_DIR   (from the repository root, or with it on
PYTHONPATH). An incomplete run (reports/results.py incomplete_reason) is exit 2 unless --allow-incomplete; the
report then says so first. A file that cannot be written is exit 1 naming it; nothing half-written is left.
"""

from __future__ import annotations

import argparse
import html
import pathlib
import sys

from reports import claims, fusion_switches
from reports.document import Document, Section, anchor
from reports.matrix import matrix_reason, verdict_table
from reports.results import INTEGRITY_PREFIX, InputError, Results, failures, is_failure, load_results
from reports.runline import run_line
from reports.sections import a, attribution, b, c1, c2, c3, d, e, engine, gpu_mechanisms, s, show

# The sections in the plan's order: each task (id, title, suite: its claim family's) and its renderer.
SECTIONS = [
    (claims.a.TASK, a.render),
    (claims.b.TASK, b.render),
    (claims.c1.TASK, c1.render),
    (claims.c2.TASK, c2.render),
    (claims.c3.TASK, c3.render),
    (claims.d.TASK, d.render),
    (claims.e.TASK, e.render),
    (claims.s.TASK, s.render),
    (claims.engine.TASK, engine.render),
]
ATTRIBUTION_TASK = "attribution"  # a section of its own after B's, without verdicts (no row in the matrix)


class ResultsError(Exception):
    """A results directory or file that cannot be read; the message names it."""


def attribution_part(doc: Document, results: Results) -> list[tuple[str, str]]:
    """Writes the run's switch files (reports/fusion_switches.py), adds the attribution section after B's
    where a device's B evidence has attribution data, and returns the first screen's lines with the task
    whose section each links to: one per such device, then one per device whose D mismatches, and one
    per device whose E excursions, were attributed."""
    written = fusion_switches.write_switch_files(results, claims.b.switch_recommendation)
    for path, _, problems in written:
        for p in problems:
            print(f"report: warning: {path.name}: {p}", file=sys.stderr)
    switch_docs = {switch_doc["device"]: (switch_doc, path.name) for path, switch_doc, _ in written}
    evidence = {dev: ev for dev, ev in fusion_switches.b_evidence(results).items() if attribution.has_attribution(ev)}
    lines = []
    if evidence:
        section = Section(ATTRIBUTION_TASK, attribution.TITLE, doc)
        after_b = next((i + 1 for i, other in enumerate(doc.sections) if other.task == "B"), len(doc.sections))
        doc.sections.insert(after_b, section)
        for device, device_evidence in evidence.items():
            section.device, section.show_device = device, len(evidence) > 1
            switch_doc, switch_file = switch_docs.get(device, (None, None))
            attribution.render(section, device_evidence, switch_doc, switch_file)
            lines.append((attribution.first_screen_line(device, device_evidence), ATTRIBUTION_TASK))
    # Each attributed D mismatch and E run as a counter-example of its "chain" (subgraph; dtype's training).
    tasks = (
        ("D", fusion_switches.D_SUITE, "D_*.json", "attribution", lambda doc: doc.get("subgraph", "?")),
        (
            "E",
            fusion_switches.E_SUITE,
            "E_alignment_*.json",
            "excursion_attribution",
            lambda doc: f"{doc.get('dtype', '?')} training",
        ),
    )
    for task, suite, pattern, key, chain in tasks:
        for device, documents in fusion_switches.evidence_files(results, suite, pattern).items():
            cases = [{"chain": chain(x), "counterexamples": [{"attribution": x[key]}]} for x in documents if key in x]
            if cases:
                lines.append((attribution.first_screen_line(f"{device}, task {task}", cases), task))
    return lines


def failed_cases(result) -> list[dict]:
    return [b for b in result.data.get("benchmarks", []) if is_failure(b)]


def load(results_dir: pathlib.Path, allow_incomplete: bool = False, completing: bool = False) -> Results:
    """The run as the report reads it: what is not what the run wrote becomes failures (Results.integrity)."""
    if not results_dir.is_dir():
        raise ResultsError(f"{results_dir}: not a results directory")
    try:
        return load_results(results_dir, allow_incomplete, completing, strict=False)
    except InputError as err:
        raise ResultsError(str(err)) from err


def render(
    results_dir: pathlib.Path, allow_incomplete: bool = False, completing: bool = False, results: Results | None = None
) -> tuple[pathlib.Path, pathlib.Path]:
    results = results or load(results_dir, allow_incomplete, completing)
    doc = Document(results_dir)
    for task, render_task in SECTIONS:
        ran = [device for device in results.devices if results.get(task.suite, device) is not None]
        section = doc.section(task.id, task.title)
        reason = next((r for su, _, r in results.not_run() if su == task.suite), "no result file")
        if task.id == "E" and not ran:  # no training suite in these results: said once per device
            gpu_training = gpu_mechanisms.load_alignment(results_dir)
            for device in results.devices:
                section.device, section.show_device = device, len(results.devices) > 1
                if gpu_training is not None and device == "torch:cuda":  # a device run's E (gpu_alignment.py)
                    gpu_mechanisms.render_alignment(section, gpu_training)
                    continue
                why = f"the training suite did not run ({reason}); no curves, no table"
                show(section, [claims.e.not_run(why, f"not run: {matrix_reason(reason)}")])
            continue
        if not ran:
            section.paragraph(f"Not run in this results directory ({reason}).")
            continue
        for device in ran:
            section.device, section.show_device = device, len(ran) > 1
            result = results.get(task.suite, device)
            render_task(section, result)
            failed = [(b["name"], b.get("error_message", "")) for b in failed_cases(result)]
            # a suite that failed as a whole after these cases: the cases it never reached bear on every verdict
            failed += [
                (f"{su} on {dev} (the suite as a whole)", why)
                for su, dev, why in results.failed_suites()
                if (su, dev) == (task.suite, device)
            ]
            section.settle(failed)
            if failed:
                section.table(
                    ["case", "error"],
                    [[name, message] for name, message in failed],
                    caption=f"Failed cases: {len(failed)} cases of this task errored (something broke; a case the "
                    "device cannot realise is a declared n/a, not a failure). The verdicts they bear on say so.",
                    wrap=("error",),
                )
    attribution_lines = attribution_part(doc, results)
    mechanisms = gpu_mechanisms.load(results_dir)
    if mechanisms is not None:  # a device run's probe of Inductor -> Triton (tools/gpu/inductor_mechanisms.py)
        gpu_mechanisms.render(doc.section("GPU", "GPU mechanisms — Inductor → Triton on the device"), mechanisms)
        attribution_lines.append((gpu_mechanisms.first_screen_line(mechanisms), "GPU"))
    device_run = gpu_mechanisms.load_summary(results_dir)
    if device_run is not None:
        gpu_mechanisms.render_run(
            doc.section("DeviceRun", "Device run — what ran on the accelerator machine"), device_run
        )
    doc.settle()
    verdict_md, verdict_html = verdict_table(doc, results)
    not_run = results.not_run()
    by_reason: dict[str, list[str]] = {}
    for su, device, r in not_run:
        by_reason.setdefault(r, []).append(su + ("" if len(results.devices) == 1 else f" on {device}"))
    not_run_text = (
        ("Not run: " + "; ".join(f"{', '.join(names)} ({r})" for r, names in by_reason.items()) + ".")
        if not_run
        else ""
    )
    line = run_line(results)
    # what integrity made failures is said once, on its own line below
    failed = [f for f in failures(results) if not f[3].startswith(INTEGRITY_PREFIX)]
    failed_suites = [f for f in results.failed_suites() if not f[2].startswith(INTEGRITY_PREFIX)]
    if failed_suites:
        attribution_lines.insert(
            0,
            (
                "Failed suites: "
                + "; ".join(
                    f"{su}{'' if len(results.devices) == 1 else f' on {dev}'} ({why})" for su, dev, why in failed_suites
                ),
                next((t.id for t, _ in SECTIONS if t.suite == failed_suites[0][0]), failed_suites[0][0]),
            ),
        )
    if results.integrity:
        first = results.integrity[0]
        attribution_lines.insert(
            0,
            (
                f"Results integrity: {len(results.integrity)} "
                f"{'problem makes' if len(results.integrity) == 1 else 'problems make'} the verdicts they bear on "
                f"INCONCLUSIVE (not what the run wrote); first: {first}",
                next((t.id for t, _ in SECTIONS if (t.suite + "@") in first.file), SECTIONS[0][0].id),
            ),
        )
    if failed:
        by_place: dict[str, int] = {}
        for suite, device, _, _ in failed:
            place = suite + ("" if len(results.devices) == 1 else f" on {device}")
            by_place[place] = by_place.get(place, 0) + 1
        first = failed[0][3]
        attribution_lines.insert(
            0,
            (
                f"Failed: {len(failed)} {'case' if len(failed) == 1 else 'cases'} errored ("
                + ", ".join(f"{place}: {n}" for place, n in by_place.items())
                + f"); first error: {first}",
                next((t.id for t, _ in SECTIONS if t.suite == failed[0][0]), failed[0][0]),
            ),
        )
    contents = " · ".join(f"[{x.title.split(' — ')[0]}](#{anchor(x.task)})" for x in doc.sections)
    contents_html = " · ".join(f"<a href='#{anchor(x.task)}'>{html.escape(x.title)}</a>" for x in doc.sections)
    incomplete_md, incomplete_html = [], []
    if results.incomplete:
        warning = f"Incomplete run: {results.incomplete}. Its verdicts cover only what finished."
        incomplete_md, incomplete_html = (
            [f"**{warning}**\n"],
            [f"<p class='incomplete'><b>{html.escape(warning)}</b></p>"],
        )
    md = [
        *incomplete_md,
        *verdict_md,
        *(text + "\n" for text, _ in attribution_lines),
        f"Contents: {contents}\n",
        line + "\n",
    ]
    body = [
        *incomplete_html,
        *verdict_html,
        *attribution.first_screen_html([(text, anchor(task)) for text, task in attribution_lines]),
        f"<p class='contents'><b>Contents:</b> {contents_html}</p>",
        f"<p class='runline'>{html.escape(line)}</p>",
    ]
    if not_run_text:
        md.append(not_run_text + "\n")
        body.append(f"<p class='runline'>{html.escape(not_run_text)}</p>")
    return doc.write((md, body))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir", type=pathlib.Path)
    parser.add_argument(
        "--allow-incomplete", action="store_true", help="report on a run that did not finish, saying so first"
    )
    # tools/run writing the report of its own run, whose .in-progress marker it removes once this succeeds
    parser.add_argument("--completing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        results = load(args.results_dir, args.allow_incomplete, args.completing)
        md_path, html_path = render(args.results_dir, results=results)
    except ResultsError as err:
        print(f"report: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a full disk: atomic_write left nothing under the final name
        print(f"report: error: cannot write {err.filename or args.results_dir}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"report: {md_path}\nreport: {html_path}")
    problems = results.integrity
    for problem in problems:
        print(f"report: results integrity: {problem}", file=sys.stderr)
    # A run's own report counts these as failed cases (tools.run_manifest --failures: exit 3); a report of a
    # directory read afterwards is bad input.
    return 2 if problems and not args.completing else 0


if __name__ == "__main__":
    sys.exit(main())
