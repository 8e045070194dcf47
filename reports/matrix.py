"""The claims × devices matrix the report opens with: one row per claim, one column per device that
has results, each cell the verdict and the figure that decided it, linked to the claim's section.

Rows are claims by id (reports/claims/), never by their words. With several devices, a claim judged
once per member (B's chains, E's dtypes, S's measures, the engine's kernels) gets one row for all its
members: its cell is CONTRADICTED if a judged member is, SUPPORTED if all judged ones are, else
INCONCLUSIVE (claims.verdict.group_outcome decides it), and names the members that differ (each has its
own verdict in the section). A claim judged twice on one device shows its worse verdict. A task without
any verdict keeps a row: not run, or ran without a case."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from reports.claims import FAMILIES, claim
from reports.claims.verdict import JUDGED, SEVERITY, Outcome, Wording, group_outcome, short
from reports.document import Cell, Document, anchor
from reports.results import Results

# Worst first: a claim judged more than once on one device shows its worst outcome in the matrix.
VERDICT_ORDER = SEVERITY


def matrix_reason(reason: str) -> str:
    """A skip reason short enough for a matrix cell: the filter's regex is printed once, in the
    run line under the matrix, not in every cell it skipped."""
    if reason.startswith("no benchmark matches --filter"):
        return "outside the run's --filter"
    independent = re.fullmatch(r"device-independent: its figures are the (\S+) column's", reason)
    if independent:
        return f"device-independent: see the {independent[1]} column"
    return reason


def not_judged(reason: str) -> Wording:
    """A cell with no verdict of its own, and why."""
    words = reason.split()
    return Wording(Outcome.NA, " ".join(words[:8]) + (" …" if len(words) > 8 else ""), reason=reason)


def suite_failed(suite: str, device: str, why: str) -> Wording:
    """A claim none of whose cases finished because its suite failed as a whole (a crash, a signal)."""
    return Wording(
        Outcome.INCONCLUSIVE,
        f"suite failed: {short(why, 6)}",
        "the claim's condition over every case of the task",
        f"{suite} on {device} failed as a whole ({why}) before any case of this claim finished",
        1,
        interval=f"no case was judged: the suite failed ({why})",
    )


def grouped_verdict(members: list[tuple[str, Wording]]) -> Wording:
    """One cell for a group: CONTRADICTED if a judged member is, SUPPORTED if all judged members are,
    else INCONCLUSIVE; ABSENT or N/A when no member was judged. Its figure names the members of the
    cell's outcome (counts them where SUPPORTED), then the others by outcome."""
    judged = [v for _, v in members if v.outcome in JUDGED]
    outcome = group_outcome([v.outcome for _, v in members])
    if len({(v.outcome, v.key_figure) for _, v in members}) == 1:
        figure = members[0][1].key_figure  # all alike: their own figure
    elif outcome not in JUDGED and all(v.outcome is outcome for _, v in members):
        # nothing judged: each member's reason, shortened (the section has them whole)
        figure = "; ".join(f"{m}: {' '.join(v.key_figure.split(';')[0].split()[:6])}" for m, v in members)
    else:
        parts = []
        for o in sorted({v.outcome for _, v in members}, key=lambda o: (o is not outcome, VERDICT_ORDER[o])):
            named = [m for m, v in members if v.outcome is o]
            if o is Outcome.SUPPORTED:
                # of the judged members: an N/A one is named after, not counted as unsupported
                text = f"{len(named)}/{len(judged)}" if o is outcome else f"{len(named)} SUPPORTED"
                closest = max(
                    ((m, v.decider) for m, v in members if v.outcome is o and v.decider),
                    key=lambda d: d[1][1],
                    default=None,
                )
                if closest is not None and o is outcome:
                    text += f" (closest to its tolerance: {closest[0]} {closest[1][0]})"
                parts.append(text)
            elif o is outcome:
                parts.append(
                    ", ".join(f"{m} ({v.decider[0]})" if v.decider else m for m, v in members if v.outcome is o)
                )
            else:
                parts.append(f"{o.value.upper()}: {', '.join(named)}")
        figure = "; ".join(parts)
    if outcome in JUDGED:
        return Wording(
            outcome,
            figure,
            "each member's own condition (the task's section)",
            cases=sum(v.cases for v in judged),
            interval="; ".join(v.interval for v in judged if v.interval) or "a member is undecided",
        )
    return Wording(outcome, figure, reason="; ".join(v.reason for _, v in members if v.reason) or "—")


Key = tuple[str, str, "str | None"]  # (task, claim id, member)


@dataclass
class Row:
    """One row: its task and claim, and the verdicts' keys it shows (several: a claim's members)."""

    task: str
    claim: str
    statement: str
    members: list[tuple[str | None, Key]] = field(default_factory=list)
    grouped: bool = False


def rows(doc: Document, several_devices: bool) -> tuple[list[Row], dict[tuple, Cell]]:
    """The matrix's rows in the plan's order, and the cell of each (task, claim, member, device)."""
    keys: list[Key] = []
    statements: dict[Key, str] = {}
    cells: dict[tuple, Cell] = {}
    for c in doc.verdicts:
        key = (c.task, c.claim, c.member)
        if key not in statements:
            keys.append(key)
            statements[key] = c.statement
        held = cells.get((*key, c.device))
        if held is None or VERDICT_ORDER[c.wording.outcome] < VERDICT_ORDER[held.wording.outcome]:
            cells[(*key, c.device)] = c  # one claim judged twice on a device: the cell shows the worse
    tasks = [f.TASK for f in FAMILIES]
    # A task with no verdict on any device still gets its row, named by its task: not run, or ran without a verdict.
    for t in tasks:
        if not any(k[0] == t.id for k in keys):
            keys.append((t.id, t.id, None))
            statements[(t.id, t.id, None)] = t.subject
    order = [t.id for t in tasks]
    keys.sort(key=lambda k: order.index(k[0]))
    out: list[Row] = []
    for key in keys:
        task, claim_id, member = key
        if several_devices and member is not None:
            held = next((r for r in out if r.grouped and (r.task, r.claim) == (task, claim_id)), None)
            if held is not None:
                held.members.append((member, key))
                continue
            out.append(Row(task, claim_id, claim(claim_id).statement, [(member, key)], grouped=True))
        else:
            out.append(Row(task, claim_id, statements[key], [(None, key)]))
    for r in out:
        if len(r.members) == 1:
            r.statement = statements[r.members[0][1]]  # a group of one keeps its own claim, subject included
        else:
            names = ", ".join(m for m, _ in r.members)
            if len(names) > 32:
                names = f"{len(r.members)} {claim(r.claim).noun or 'cases'}"
            r.statement = f"{r.statement} ({names})"
    return out, cells


def verdict_table(doc: Document, results: Results) -> tuple[list[str], list[str]]:
    """Claims × devices: each cell the verdict, its key figure, a link to the section."""
    devices = results.devices
    suite_of = {f.TASK.id: f.TASK.suite for f in FAMILIES}
    table, cells = rows(doc, len(devices) > 1)

    def cell_wording(key: Key, device: str) -> Wording:
        c = cells.get((*key, device))
        if c is not None:
            return c.wording
        # the claim was judged on another device only: this one gives no figure for it
        suite = suite_of[key[0]]
        ran = results.get(suite, device) is not None
        crash = next((why for su, d, why in results.failed_suites() if (su, d) == (suite, device)), None)
        if crash is not None:  # a failure is not an n/a: undecided, naming it
            return suite_failed(suite, device, crash)
        reason = next((r for su, d, r in results.not_run() if (su, d) == (suite, device)), "no result file")
        return not_judged(
            "the suite ran, but gave no case of this claim on this device"
            if ran
            else f"not run: {matrix_reason(reason)}"
        )

    md = ["| task | claim | " + " | ".join(devices) + " |", "|---|---|" + "---|" * len(devices)]
    head = "".join(f"<th class='txt'>{html.escape(d)}</th>" for d in devices)
    rows_html = []
    for row in table:
        md_cells, html_cells = [], []
        for device in devices:
            if len(row.members) == 1:
                v = cell_wording(row.members[0][1], device)
            else:
                v = grouped_verdict([(m, cell_wording(key, device)) for m, key in row.members])
            text, cls, fig = v.label, v.outcome.css, v.key_figure
            md_cells.append(f"**{text}** {fig}".strip().replace("|", "\\|"))
            html_cells.append(
                f"<td class='cell {cls}'><a href='#{anchor(row.task)}'><b>{html.escape(text)}</b></a>"
                f"{' · ' + html.escape(fig) if fig else ''}</td>"
            )
        md.append(f"| [{row.task}](#{anchor(row.task)}) | {row.statement} | " + " | ".join(md_cells) + " |")
        rows_html.append(
            f"<tr><td class='txt'><a href='#{anchor(row.task)}'>{html.escape(row.task)}</a></td>"
            f"<td class='txt claim'>{html.escape(row.statement)}</td>{''.join(html_cells)}</tr>"
        )
    narrow = " class='many'" if len(devices) >= 3 else ""
    h = (
        f"<table id='verdicts'{narrow}><thead><tr><th class='txt'>task</th><th class='txt'>claim</th>{head}</tr></thead>"
        f"<tbody>{''.join(rows_html)}</tbody></table>"
    )
    return md + [""], [h]
