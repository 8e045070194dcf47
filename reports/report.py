"""Turns a results directory (Google Benchmark JSON files, one per suite and device, plus dumps) into
report.md and report.html (plots embedded).

The page opens with the verdicts: a claims × devices table, each cell the verdict and its key figure,
linked to its section; then the contents and one line about the run. Each section opens with its
verdicts, then its figures, then its tables (long ones collapsed). Results are found by their context
(suite, device), so a device that appears in the results appears as a column with no change here.

Usage: python -m reports.report RESULTS_DIR   (from the repository root, or with it on PYTHONPATH)
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import os
import pathlib
import re
import sys
import tempfile
from dataclasses import dataclass, field

from reports import claims, fusion_switches
from reports.numbers import num
from reports.results import InputError, Results, load_results
from reports.sections import attribution, engine, plan_tasks, toolkit, training

# (task id, title, suite, render function(section, result, results_dir)); the plan's order.
TASKS = [
    ("A", "A — determinism of fused execution (claim §3.3)", "fusion_determinism", plan_tasks.render_a),
    ("B", "B — eager vs fused accumulated error (claim §3.2)", "accumulated_error", plan_tasks.render_b),
    ("C1", "C1 — tensor × scalar lowering (claim §1.2 (2))", "scalar_lowering", plan_tasks.render_c1),
    ("C2", "C2 — reduction accumulation order (claim §1.2 (3))", "reduction_order", plan_tasks.render_c2),
    ("C3", "C3 — rsqrt / division iteration count (claim §1.2 (4))", "approximations", plan_tasks.render_c3),
    ("D", "D — pure data movement (claim §2)", "data_movement", plan_tasks.render_d),
    ("E", "E — end-to-end training alignment (claim §3.2 in practice)", "training_alignment", training.render),
    ("S", "S — precision toolkit throughput", "precision_toolkit", toolkit.render),
    ("Engine", "Engine — eager vs fused speed", "engine_throughput", engine.render),
]
FIGURE_DPI = 100  # CSS pixels per figure inch: a figure W inches wide shows W*100 px wide, unscaled
PNG_SCALE = 2  # PNGs carry twice that, for sharp text on high-density screens
PAGE_WIDTH_PX = 1100  # max-width of the page body: figures must stay within it


def matrix_reason(reason: str) -> str:
    """A skip reason short enough for a matrix cell: the filter's regex is printed once, in the
    run line under the matrix, not in every cell it skipped."""
    if reason.startswith("no benchmark matches --filter"):
        return "outside the run's --filter"
    independent = re.fullmatch(r"device-independent: its figures are the (\S+) column's", reason)
    if independent:
        return f"device-independent: see the {independent[1]} column"
    return reason


class ResultsError(Exception):
    """A results directory or file that cannot be read; the message names it."""


def atomic_write(path: pathlib.Path, data: bytes | str):
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the report from other users of a shared results folder
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _is_number(cell: str) -> bool:
    s = str(cell).replace("\u00a0%", "").replace(",", "").replace("−", "-").strip()
    if s in ("—", ""):
        return True
    try:
        float(s.split()[0])
        return True
    except ValueError:
        return False


def _table_html(header: list[str], rows: list[list], wrap: frozenset[int] = frozenset()) -> str:
    numeric = [all(_is_number(r[i]) for r in rows if i < len(r)) for i in range(len(header))]
    head = "".join(f'<th class="{"num" if numeric[i] else "txt"}">{html.escape(h)}</th>' for i, h in enumerate(header))

    def cell(i, c):
        text = str(c)
        if numeric[i]:
            return f'<td class="num">{html.escape(text)}</td>'
        if i in wrap:  # short phrases in a wide table: they may break at their spaces
            return f'<td class="txt wrap">{html.escape(text)}</td>'
        if len(text) > 32:  # long text (benchmark names, notes) may wrap, after a '/' where it has one
            return f'<td class="txt long">{html.escape(text).replace("/", "/&#8203;")}</td>'
        return f'<td class="txt">{html.escape(text)}</td>'

    body = "".join("<tr>" + "".join(cell(i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _table_md(header: list[str], rows: list[list]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return out + [""]


UNITS = {"\u00a0%": "%", "×": "×"}


def _units_to_header(header: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    header = list(header)
    for i in range(len(header)):
        values = [r[i] for r in rows if i < len(r) and r[i] not in ("—", "")]
        for suffix, unit in UNITS.items():
            if values and all(v.endswith(suffix) for v in values):
                header[i] = f"{header[i]} ({unit})"
                for r in rows:
                    if i < len(r) and r[i].endswith(suffix):
                        r[i] = r[i][: -len(suffix)]
    return header, rows


@dataclass
class Cell:
    """One claims × devices cell: the claim (device-independent: one row of the table) and its verdict."""

    task: str
    claim: str
    verdict: claims.Verdict
    device: str


@dataclass
class Section:
    """One task's section; parts are kept apart so that the verdicts come first, then the figures,
    then the tables and notes, whatever order the section's code produced them in."""

    task: str
    title: str
    doc: Document
    verdicts: list[tuple[list[str], list[str]]] = field(default_factory=list)
    figures: list[tuple[list[str], list[str]]] = field(default_factory=list)
    body: list[tuple[list[str], list[str]]] = field(default_factory=list)
    device: str = "cpu"
    show_device: bool = False

    def _device_tag(self) -> str:
        return f" [{self.device}]" if self.show_device else ""

    def verdict(self, claim: str, verdict: claims.Verdict):
        """Renders a verdict decided in reports.claims: its outcome, then what decided it."""
        self.doc.verdicts.append(Cell(self.task, claim, verdict, self.device))
        label = f"{claim}{self._device_tag()}: {verdict.label}."
        text = verdict.sentence()
        self.verdicts.append(
            (
                [f"**Verdict — {label}** {text}\n"],
                [
                    f'<p class="verdict {verdict.outcome.css}"><b>Verdict — {html.escape(label)}</b> '
                    f"{html.escape(text)}</p>"
                ],
            )
        )

    def paragraph(self, text: str):
        self.body.append(([text + "\n"], [f"<p>{html.escape(text)}</p>"]))

    def link(self, text: str, href: str):
        """A paragraph ending in a link to a file of the run directory (relative: it moves with the run)."""
        self.body.append(
            (
                [f"{text}[{href}]({href})\n"],
                [f"<p>{html.escape(text)}<a href='{html.escape(href)}'>{html.escape(href)}</a></p>"],
            )
        )

    def table(
        self,
        header: list[str],
        rows: list[list],
        summary: str | None = None,
        caption: str | None = None,
        wrap: tuple[str, ...] = (),
    ):
        """A table; with `summary` it is collapsed under that line (a <details> element). A column whose
        every value carries the same unit (%, ×) shows it once, in its header. The columns named in
        `wrap` break their text at spaces, so that a wide table keeps within the page."""
        wrap_columns = frozenset(i for i, h in enumerate(header) if h in wrap)
        header, rows = _units_to_header(header, [[str(c) for c in r] for r in rows])
        if self.show_device:  # several devices share the section: every table says whose it is
            if summary:
                summary = f"{summary} [{self.device}]"
            else:
                caption = f"[{self.device}] {caption}" if caption else f"On {self.device}:"
        md, h = [], []
        if caption:
            md.append(caption + "\n")
            h.append(f"<p class='caption'>{html.escape(caption)}</p>")
        if summary:
            md += [f"<details><summary>{summary}</summary>\n"] + _table_md(header, rows) + ["</details>\n"]
            h.append(
                f"<details><summary>{html.escape(summary)}</summary>{_table_html(header, rows, wrap_columns)}</details>"
            )
        else:
            md += _table_md(header, rows)
            h.append(_table_html(header, rows, wrap_columns))
        self.body.append((md, h))

    def figure(self, fig, name: str, caption: str):
        """A matplotlib figure, shown at FIGURE_DPI px per inch (never scaled down on the page, so
        its font sizes in points are what the reader sees)."""
        if self.show_device:
            caption = f"[{self.device}] {caption}"
        width_in, height_in = fig.get_size_inches()
        width_px, height_px = round(width_in * FIGURE_DPI), round(height_in * FIGURE_DPI)
        if width_px > PAGE_WIDTH_PX:
            raise ValueError(f"figure {name} is {width_px} px wide, wider than the page ({PAGE_WIDTH_PX} px)")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=FIGURE_DPI * PNG_SCALE)
        png = buffer.getvalue()
        suffix = "" if self.device == "cpu" else "_" + self.device.replace(":", "-").replace("/", "-")
        atomic_write(self.doc.out_dir / f"{name}{suffix}.png", png)
        encoded = base64.b64encode(png).decode()
        self.figures.append(
            (
                [f"![{caption}]({name}{suffix}.png)\n", f"*{caption}*\n"],
                [
                    f'<figure><img src="data:image/png;base64,{encoded}" width="{width_px}" '
                    f'height="{height_px}" alt="{html.escape(caption)}">'
                    f"<figcaption>{html.escape(caption)}</figcaption></figure>"
                ],
            )
        )


class Document:
    def __init__(self, out_dir: pathlib.Path):
        self.out_dir = out_dir
        self.verdicts: list[Cell] = []
        self.sections: list[Section] = []

    def section(self, task: str, title: str) -> Section:
        s = Section(task, title, self)
        self.sections.append(s)
        return s


def anchor(task: str) -> str:
    return "task-" + task.lower()


# Worst first: a claim judged more than once on one device shows its worst outcome in the matrix.
VERDICT_ORDER = {
    claims.Outcome.CONTRADICTED: 0,
    claims.Outcome.INCONCLUSIVE: 1,
    claims.Outcome.SUPPORTED: 2,
    claims.Outcome.ABSENT: 3,
    claims.Outcome.NA: 4,
}


# A run on several devices groups the claims that differ only in their subject (a chain, a dtype,
# a kernel) into one row, so that the matrix stays on the first screen: (pattern, the row's claim).
# Each cell then combines its members' verdicts and names the members that differ.
CLAIM_GROUPS = [
    (
        re.compile(r"^fused (?P<member>\w+) reaches .+ of the copy bandwidth$"),
        "fused kernels reach their share of the copy bandwidth",
    ),
    (re.compile(r"^fused (?P<member>\w+) is faster than eager$"), "fused is faster than eager"),
    (re.compile(r"^(?P<member>\w+) keeps up with memory \(.*\)$"), "the toolkit keeps up with memory"),
    (re.compile(r"^(?P<member>[\w+-]+): (?P<claim>.+)$"), None),  # "<chain or dtype>: <claim>"
]


GROUP_NOUN = {"B": "chains", "E": "dtypes", "S": "measures", "Engine": "kernels"}


def claim_group(claim: str) -> tuple[str, str | None]:
    """(the row's claim, the member) for a claim of a group; (claim, None) for a claim of its own."""
    for pattern, row in CLAIM_GROUPS:
        m = pattern.match(claim)
        if m:
            return (row or m.group("claim")), m.group("member")
    return claim, None


def grouped_verdict(members: list[tuple[str, claims.Verdict]]) -> claims.Verdict:
    """One cell for a group: CONTRADICTED if a judged member is, SUPPORTED if all judged members are,
    else INCONCLUSIVE; ABSENT or N/A when no member was judged. Its figure names the members of the
    cell's outcome (counts them where SUPPORTED), then the others by outcome."""
    judged = [v for _, v in members if v.outcome in claims.JUDGED]
    if judged:
        outcome = claims.combine(judged)
    elif all(v.outcome is claims.Outcome.ABSENT for _, v in members):
        outcome = claims.Outcome.ABSENT
    else:
        outcome = claims.Outcome.NA
    if len({(v.outcome, v.key_figure) for _, v in members}) == 1:
        figure = members[0][1].key_figure  # all alike: their own figure
    elif outcome not in claims.JUDGED and all(v.outcome is outcome for _, v in members):
        # nothing judged: each member's reason, shortened (the section has them whole)
        figure = "; ".join(f"{m}: {' '.join(v.key_figure.split(';')[0].split()[:6])}" for m, v in members)
    else:
        parts = []
        for o in sorted({v.outcome for _, v in members}, key=lambda o: (o is not outcome, VERDICT_ORDER[o])):
            named = [m for m, v in members if v.outcome is o]
            if o is claims.Outcome.SUPPORTED:
                # of the judged members: an N/A one is named after, not counted as unsupported
                parts.append(f"{len(named)}/{len(judged)}" if o is outcome else f"{len(named)} SUPPORTED")
            else:
                parts.append(", ".join(named) if o is outcome else f"{o.value.upper()}: {', '.join(named)}")
        figure = "; ".join(parts)
    if outcome in claims.JUDGED:
        return claims.Verdict(
            outcome,
            figure,
            "each member's own condition (the task's section)",
            cases=sum(v.cases for v in judged),
            interval="; ".join(v.interval for v in judged if v.interval) or "a member is undecided",
        )
    return claims.Verdict(outcome, figure, reason="; ".join(v.reason for _, v in members if v.reason) or "—")


def verdict_table(doc: Document, results: Results) -> tuple[list[str], list[str]]:
    """Claims × devices: each cell the verdict, its key figure, a link to the section."""
    devices = results.devices
    rows_of: list[tuple[str, str]] = []
    cells: dict[tuple[str, str, str], Cell] = {}
    for v in doc.verdicts:
        if (v.task, v.claim) not in rows_of:
            rows_of.append((v.task, v.claim))
        held = cells.get((v.task, v.claim, v.device))
        if held is None or VERDICT_ORDER[v.verdict.outcome] < VERDICT_ORDER[held.verdict.outcome]:
            cells[(v.task, v.claim, v.device)] = v  # one claim judged twice on a device: the cell shows the worse
    order = [t[0] for t in TASKS]
    # A task with no verdict on any device still gets its row: not run, or ran without a verdict.
    rows_of += [(t[0], t[1].split(" — ", 1)[1]) for t in TASKS if not any(c[0] == t[0] for c in rows_of)]
    rows_of.sort(key=lambda c: order.index(c[0]))
    suite_of = {t[0]: t[2] for t in TASKS}

    def cell_verdict(task: str, claim: str, device: str) -> claims.Verdict:
        c = cells.get((task, claim, device))
        if c is not None:
            return c.verdict
        # the claim was judged on another device only: this one gives no figure for it
        ran = results.get(suite_of[task], device) is not None
        reason = next((r for su, d, r in results.not_run() if (su, d) == (suite_of[task], device)), "no result file")
        return claims.not_applicable(
            "the suite ran, but gave no case of this claim on this device"
            if ran
            else f"not run: {matrix_reason(reason)}"
        )

    # rows: (task, the row's claim, [(member, claim), ...]); one member per row on a single device
    rows: list[tuple[str, str, list[tuple[str | None, str]]]] = []
    for task, claim in rows_of:
        row_claim, member = claim_group(claim) if len(devices) > 1 else (claim, None)
        held = next((r for r in rows if r[0] == task and r[1] == row_claim and member is not None), None)
        if held is not None and all(m is not None for m, _ in held[2]):
            held[2].append((member, claim))
        else:
            rows.append((task, row_claim if member is not None else claim, [(member, claim)]))
    md = ["| task | claim | " + " | ".join(devices) + " |", "|---|---|" + "---|" * len(devices)]
    head = "".join(f"<th class='txt'>{html.escape(d)}</th>" for d in devices)
    rows_html = []
    for task, claim, members in rows:
        md_cells, html_cells = [], []
        if len(members) == 1:
            claim = members[0][1]  # a group of one keeps its own claim, subject included
        else:
            names = ", ".join(m for m, _ in members)
            if len(names) > 32:
                names = f"{len(members)} {GROUP_NOUN.get(task, 'cases')}"
            claim = f"{claim} ({names})"
        for device in devices:
            if len(members) == 1:
                v = cell_verdict(task, members[0][1], device)
            else:
                v = grouped_verdict([(m, cell_verdict(task, c, device)) for m, c in members])
            text, cls, fig = v.label, v.outcome.css, v.key_figure
            md_cells.append(f"**{text}** {fig}".strip().replace("|", "\\|"))
            html_cells.append(
                f"<td class='cell {cls}'><a href='#{anchor(task)}'><b>{html.escape(text)}</b></a>"
                f"{' · ' + html.escape(fig) if fig else ''}</td>"
            )
        md.append(f"| [{task}](#{anchor(task)}) | {claim} | " + " | ".join(md_cells) + " |")
        rows_html.append(
            f"<tr><td class='txt'><a href='#{anchor(task)}'>{html.escape(task)}</a></td>"
            f"<td class='txt claim'>{html.escape(claim)}</td>{''.join(html_cells)}</tr>"
        )
    narrow = " class='many'" if len(devices) >= 3 else ""
    h = (
        f"<table id='verdicts'{narrow}><thead><tr><th class='txt'>task</th><th class='txt'>claim</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows_html)}</tbody></table>"
    )
    return md + [""], [h]


def run_line(results: Results) -> str:
    """Machine, compiler, commit, profile, total time and per-suite times, once."""
    contexts = [r.context for r in results.by_key.values()]

    def one(key: str) -> str:
        values = sorted({str(c.get(key, "?")) for c in contexts})
        return " / ".join(values) if values else "?"

    manifest = results.manifest or {}
    times = {(e["suite"], e["device"]): e.get("seconds") for e in manifest.get("ran", [])}
    if times:
        per_suite = ", ".join(f"{s}{'' if d == 'cpu' else '@' + d} {num(t)} s" for (s, d), t in times.items())
        total = f"total {num(manifest.get('seconds', sum(times.values())))} s ({per_suite})"
    else:
        total = "suite times not recorded (a run made before tools/run wrote run.json)"
    filt = f", filter {manifest['filter']!r}" if manifest.get("filter") else ""
    timing = manifest.get("timing") or {}
    if timing and any(claims.is_framework(d) for d in results.devices) and timing["framework"] != timing["engine"]:
        filt += f" (timed with {timing['engine']}; framework devices {timing['framework']})"
    elif timing:
        filt += f" (timed with {timing['engine']})"
    return (
        f"Run: {one('cpu_model')} ({one('hardware_threads')} hardware threads; {one('cpu_isa')}), "
        f"{one('compiler')}, commit {one('git_revision')}, profile {one('fusebench_profile')}{filt}, "
        f"devices {', '.join(results.devices)}; {total}.{compile_counts(manifest)}{not_available(manifest)}"
        f"{shard_origin(manifest)}"
    )


def shard_origin(manifest: dict) -> str:
    """A merged run (tools/merge): its shards, their machine time, and the machines they ran on."""
    shards = manifest.get("merged_from", [])
    if not shards:
        return ""
    hosts = sorted({(s.get("machine") or {}).get("host", "?") for s in shards})
    times = ", ".join(f"{s['index']}: {num(s['seconds'])} s" for s in shards)
    where = f"on {hosts[0]}" if len(hosts) == 1 else f"on {len(hosts)} machines ({', '.join(hosts)})"
    return f" Merged from {len(shards)} shards {where} (tools/merge; shard times {times}; the total sums them)."


def not_available(manifest: dict) -> str:
    """The devices a run on every available device left out, with the reason each gave."""
    missing = manifest.get("unavailable", {})
    return (" Not available here: " + "; ".join(f"{d} ({why})" for d, why in missing.items()) + ".") if missing else ""


def compile_counts(manifest: dict) -> str:
    """Per framework device: the graphs its workers compiled, their time, and how many of those its
    persistent cache (Inductor's FX graph cache, JAX's compilation cache) served."""
    by_device: dict[str, dict[str, float]] = {}
    for e in manifest.get("ran", []):
        for k, v in e.get("framework_compiles", {}).items():
            by_device.setdefault(e["device"], {}).setdefault(k, 0)
            by_device[e["device"]][k] += v
    parts = []
    for device, c in by_device.items():
        looked_up = c.get("cache_hits", 0) + c.get("cache_misses", 0)
        cache = (
            f" ({num(c['cache_hits'])} of {num(looked_up)} persistent-cache lookups hit: a hit loads the compiled "
            "code instead of generating it)"
            if looked_up
            else ""
        )
        n = c.get("compiles", 0)
        parts.append(
            f"{device}: {num(n)} graph{'' if n == 1 else 's'} compiled in {num(c.get('compile_s', 0))} s{cache}"
        )
    return (" Compiles: " + "; ".join(parts) + ".") if parts else ""


STYLE = """<style>
body{font-family:sans-serif;font-size:15px;max-width:1100px;margin:1em auto;padding:0 12px;line-height:1.35}
h1{font-size:1.5em;margin:.3em 0}h2{margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.6em 0;font-size:14px}td,th{border:1px solid #bbb;padding:2px 7px}
th{background:#eee;font-weight:600;vertical-align:bottom}td.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
th.num{text-align:right}.txt{text-align:left}td.txt{white-space:nowrap}td.long{white-space:normal;min-width:12em}
td.wrap{white-space:normal;min-width:7em}
.verdict.supported{color:#060}.verdict.contradicted{color:#a00}.verdict.inconclusive{color:#a60}
.verdict.absent{color:#245}.verdict.not-applicable{color:#555}
#verdicts{font-size:13px;line-height:1.25}#verdicts td,#verdicts th{padding:2px 6px;vertical-align:top}
#verdicts a{color:inherit;text-decoration:none}#verdicts td.claim{white-space:normal}#verdicts.many td.claim{max-width:24em;min-width:17em}
td.cell{text-align:left}td.cell b{white-space:nowrap}td.supported{background:#dff0d8;color:#060}
td.contradicted{background:#f6d5d5;color:#a00}td.inconclusive{background:#fcebcc;color:#8a5a00}
td.absent{background:#dde8f3;color:#245}td.not-applicable{background:#eee;color:#555}
figure{margin:.8em 0}figcaption{font-size:13px;color:#444}img{max-width:100%;height:auto}
details{margin:.5em 0}summary{cursor:pointer;color:#225}.caption{margin-bottom:0;font-size:14px}
.runline,.contents{font-size:13px;color:#333}
</style>"""


ATTRIBUTION_TASK = "attribution"  # a section of its own after B's, without verdicts (no row in the matrix)


def attribution_part(doc: Document, results: Results) -> list[tuple[str, str]]:
    """Writes the run's switch files (tools/fusion_switches.py), adds the attribution section after B's
    where a device's B evidence has attribution data, and returns the first screen's lines with the task
    whose section each links to: one per such device, then one per device whose D mismatches, and one
    per device whose E excursions, were attributed."""
    written = fusion_switches.write_switch_files(results)
    for path, _, problems in written:
        for p in problems:
            print(f"report: warning: {path.name}: {p}", file=sys.stderr)
    switch_docs = {switch_doc["device"]: (switch_doc, path.name) for path, switch_doc, _ in written}
    evidence = {d: e for d, e in fusion_switches.b_evidence(results).items() if attribution.has_attribution(e)}
    lines = []
    if evidence:
        s = Section(ATTRIBUTION_TASK, attribution.TITLE, doc)
        after_b = next((i + 1 for i, section in enumerate(doc.sections) if section.task == "B"), len(doc.sections))
        doc.sections.insert(after_b, s)
        for device, device_evidence in evidence.items():
            s.device, s.show_device = device, len(evidence) > 1
            switch_doc, switch_file = switch_docs.get(device, (None, None))
            attribution.render(s, device_evidence, switch_doc, switch_file)
            lines.append((attribution.first_screen_line(device, device_evidence), ATTRIBUTION_TASK))
    # Each attributed D mismatch and E run as a counter-example of its "chain" (subgraph; dtype's training).
    tasks = (
        ("D", fusion_switches.D_SUITE, "D_*.json", "attribution", lambda e: e.get("subgraph", "?")),
        (
            "E",
            fusion_switches.E_SUITE,
            "E_alignment_*.json",
            "excursion_attribution",
            lambda e: f"{e.get('dtype', '?')} training",
        ),
    )
    for task, suite, pattern, key, chain in tasks:
        for device, documents in fusion_switches.evidence_files(results, suite, pattern).items():
            cases = [{"chain": chain(e), "counterexamples": [{"attribution": e[key]}]} for e in documents if key in e]
            if cases:
                lines.append((attribution.first_screen_line(f"{device}, task {task}", cases), task))
    return lines


def render(results_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    if not results_dir.is_dir():
        raise ResultsError(f"{results_dir}: not a results directory")
    try:
        results = load_results(results_dir)
    except InputError as e:
        raise ResultsError(str(e)) from e
    doc = Document(results_dir)
    for task, title, suite, render_task in TASKS:
        ran = [d for d in results.devices if results.get(suite, d) is not None]
        if task == "E" and not ran:  # no training suite in these results: said once per device
            s = doc.section(task, title)
            reason = next((r for su, d, r in results.not_run() if su == suite), "no result file")
            for device in results.devices:
                s.device = device
                s.verdict(
                    "training metrics of eager and fused align",
                    claims.not_applicable(
                        f"the training suite did not run ({reason}); no curves, no table",
                        key_figure=f"not run: {matrix_reason(reason)}",
                    ),
                )
            continue
        s = doc.section(task, title)
        if not ran:
            reason = next((r for su, d, r in results.not_run() if su == suite), "no result file")
            s.paragraph(f"Not run in this results directory ({reason}).")
            continue
        for device in ran:
            s.device, s.show_device = device, len(ran) > 1
            result = results.get(suite, device)
            render_task(s, result.data, result)
    attribution_lines = attribution_part(doc, results)
    verdict_md, verdict_html = verdict_table(doc, results)
    not_run = results.not_run()
    by_reason: dict[str, list[str]] = {}
    for su, d, r in not_run:
        by_reason.setdefault(r, []).append(su + ("" if len(results.devices) == 1 else f" on {d}"))
    not_run_text = (
        ("Not run: " + "; ".join(f"{', '.join(names)} ({r})" for r, names in by_reason.items()) + ".")
        if not_run
        else ""
    )
    line = run_line(results)
    contents = " · ".join(f"[{s.title.split(' — ')[0]}](#{anchor(s.task)})" for s in doc.sections)
    contents_html = " · ".join(f"<a href='#{anchor(s.task)}'>{html.escape(s.title)}</a>" for s in doc.sections)
    md = [
        "# fusebench report\n",
        *verdict_md,
        *(text + "\n" for text, _ in attribution_lines),
        f"Contents: {contents}\n",
        line + "\n",
    ]
    body = [
        "<h1>fusebench report</h1>",
        *verdict_html,
        *attribution.first_screen_html([(text, anchor(task)) for text, task in attribution_lines]),
        f"<p class='contents'><b>Contents:</b> {contents_html}</p>",
        f"<p class='runline'>{html.escape(line)}</p>",
    ]
    if not_run_text:
        md.append(not_run_text + "\n")
        body.append(f"<p class='runline'>{html.escape(not_run_text)}</p>")
    for s in doc.sections:
        md.append(f'<a id="{anchor(s.task)}"></a>\n\n## {s.title}\n')
        body.append(f"<h2 id='{anchor(s.task)}'>{html.escape(s.title)}</h2>")
        for part_md, part_html in s.verdicts + s.figures + s.body:
            md += part_md
            body += part_html
    md_path, html_path = results_dir / "report.md", results_dir / "report.html"
    atomic_write(md_path, "\n".join(md) + "\n")
    atomic_write(
        html_path,
        "<!doctype html><html><head><meta charset='utf-8'><title>fusebench report</title>"
        + STYLE
        + "</head><body>"
        + "\n".join(body)
        + "</body></html>\n",
    )
    return md_path, html_path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        md_path, html_path = render(args.results_dir)
    except ResultsError as e:
        print(f"report: error: {e}", file=sys.stderr)
        return 2
    print(f"report: {md_path}\nreport: {html_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
