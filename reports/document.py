"""The report's document backend: Markdown and HTML written side by side from one set of parts
(paragraphs, verdicts, tables, figures), the page's CSS, and the files it writes. What the parts say
is the sections' (reports/sections/); which verdict goes in which matrix cell is reports/matrix.py's."""

from __future__ import annotations

import base64
import html
import io
import os
import pathlib
import tempfile
from dataclasses import dataclass, field

from reports import claims
from reports.claims.verdict import Verdict, Wording, settle

FIGURE_DPI = 100  # CSS pixels per figure inch: a figure W inches wide shows W*100 px wide, unscaled
PNG_SCALE = 2  # PNGs carry twice that, for sharp text on high-density screens
PAGE_WIDTH_PX = 1100  # max-width of the page body: figures must stay within it


def atomic_write(path: pathlib.Path, data: bytes | str):
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the report from other users of a shared results folder
        os.replace(tmp, path)
    except OSError as e:  # the file it was for, not the temporary's (a full disk fails the write, not the open)
        os.unlink(tmp)
        raise OSError(e.errno, e.strerror, str(path)) from e
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
    """One verdict shown in a section, as the claims × devices matrix reads it: the task and the claim
    (its id, and the member of a claim judged once per member), the claim in words, the verdict's
    wording, the device."""

    task: str
    claim: str
    member: str | None
    statement: str
    wording: Wording
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
    # verdicts given and not yet recorded (settle), each with the device it was given for
    pending: list[tuple[str, Verdict, str, bool]] = field(default_factory=list)

    def verdict(self, statement: str, v: Verdict):
        """A verdict: the claim in words, its outcome, then what decided it (the matrix reads it too).
        Held until settle(), when the failed cases that bear on it are known."""
        self.pending.append((statement, v, self.device, self.show_device))

    def settle(self, failed: list[tuple[str, str]] = ()):
        """Records the verdicts given since the last settle (the current device's), each settled with the
        failed cases that bear on it (claims.verdict.settle, on the verdicts' data), and only then puts
        them into words."""
        settled = settle([v for _, v, _, _ in self.pending], failed)
        for (statement, _, device, show_device), v in zip(self.pending, settled):
            self._record(v.claim, v.member, statement, claims.words(v), device, show_device)
        self.pending = []

    def _record(self, claim: str, member: str | None, statement: str, wording: Wording, device: str, show_device: bool):
        self.doc.verdicts.append(Cell(self.task, claim, member, statement, wording, device))
        label = f"{statement}{f' [{device}]' if show_device else ''}: {wording.label}."
        text = wording.sentence()
        self.verdicts.append(
            (
                [f"**Verdict — {label}** {text}\n"],
                [
                    f'<p class="verdict {wording.outcome.css}"><b>Verdict — {html.escape(label)}</b> '
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

    def settle(self):
        """Records every section's pending verdicts (no failed case bears on them)."""
        for s in self.sections:
            s.settle()

    def section(self, task: str, title: str) -> Section:
        s = Section(task, title, self)
        self.sections.append(s)
        return s

    def write(self, first_screen: tuple[list[str], list[str]]) -> tuple[pathlib.Path, pathlib.Path]:
        """report.md and report.html: the first screen (its Markdown lines and HTML elements), then every
        section: its title, its verdicts, its figures, the rest."""
        self.settle()
        md, body = ["# fusebench report\n", *first_screen[0]], ["<h1>fusebench report</h1>", *first_screen[1]]
        for s in self.sections:
            md.append(f'<a id="{anchor(s.task)}"></a>\n\n## {s.title}\n')
            body.append(f"<h2 id='{anchor(s.task)}'>{html.escape(s.title)}</h2>")
            for part_md, part_html in s.verdicts + s.figures + s.body:
                md += part_md
                body += part_html
        md_path, html_path = self.out_dir / "report.md", self.out_dir / "report.html"
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


def anchor(task: str) -> str:
    return "task-" + task.lower()


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
