"""Turns a results directory (Google Benchmark JSON files, one per suite, plus dumps) into
report.md and report.html (plots embedded). Each plan task is a section module in sections/;
a section whose suite did not run says so.

Usage: python reports/report.py RESULTS_DIR
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import json
import os
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from sections import engine, plan_tasks, toolkit  # noqa: E402

SECTIONS = [toolkit, engine]
PLAN_SECTIONS = [plan_tasks.render_a, plan_tasks.render_b, plan_tasks.render_c1, plan_tasks.render_c2, plan_tasks.render_c3,
                 plan_tasks.render_d, plan_tasks.render_e]


class ResultsError(Exception):
    """A results directory or file that cannot be read; the message names it."""


def load_results(results_dir: pathlib.Path) -> dict[str, dict]:
    if not results_dir.is_dir():
        raise ResultsError(f"{results_dir}: not a results directory")
    runs = {}
    for path in sorted(results_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ResultsError(f"{path}: malformed JSON ({e})") from e
        if not isinstance(data, dict) or "benchmarks" not in data or "context" not in data:
            raise ResultsError(f"{path}: not a Google Benchmark JSON file (no 'context'/'benchmarks')")
        suite = data["context"].get("fusebench_suite", path.stem)
        runs[suite] = data
    if not runs:
        raise ResultsError(f"{results_dir}: no suite JSON files")
    return runs


class Document:
    """Collects Markdown and HTML side by side; figures are PNG files next to the Markdown and
    base64 images inside the HTML."""

    def __init__(self, out_dir: pathlib.Path):
        self.out_dir = out_dir
        self.md: list[str] = []
        self.html: list[str] = []

    def heading(self, text: str, level: int = 2):
        self.md.append(f"{'#' * level} {text}\n")
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def paragraph(self, text: str):
        self.md.append(text + "\n")
        self.html.append(f"<p>{html.escape(text)}</p>")

    def verdict(self, claim: str, verdict: str, evidence: str):
        self.md.append(f"**Verdict — {claim}: {verdict.upper()}.** {evidence}\n")
        self.html.append(f'<p class="verdict {verdict}"><b>Verdict — {html.escape(claim)}: {verdict.upper()}.</b> '
                         f"{html.escape(evidence)}</p>")

    def table(self, header: list[str], rows: list[list]):
        self.md.append("| " + " | ".join(header) + " |")
        self.md.append("|" + "---|" * len(header))
        for row in rows:
            self.md.append("| " + " | ".join(str(c) for c in row) + " |")
        self.md.append("")
        cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
        self.html.append(f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>")

    def figure(self, fig, name: str, caption: str):
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        png = buffer.getvalue()
        atomic_write(self.out_dir / f"{name}.png", png)
        self.md.append(f"![{caption}]({name}.png)\n")
        encoded = base64.b64encode(png).decode()
        self.html.append(f'<figure><img src="data:image/png;base64,{encoded}" alt="{html.escape(caption)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def atomic_write(path: pathlib.Path, data: bytes | str):
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def system_rows(runs: dict[str, dict]) -> list[list]:
    rows = []
    for suite, data in sorted(runs.items()):
        c = data["context"]
        rows.append([suite, c.get("fusebench_profile", "?"), c.get("fusebench_device", "?"),
                     c.get("compiler", "?"), c.get("cpu_model", "?"), c.get("cpu_isa", "?"),
                     c.get("num_cpus", "?"), c.get("git_revision", "?"), c.get("date", "?")])
    return rows


STYLE = """<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}
th{background:#eee}.verdict.supported{color:#060}.verdict.contradicted{color:#a00}
.verdict.inconclusive{color:#a60}img{max-width:100%}</style>"""


def render(results_dir: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    runs = load_results(results_dir)
    doc = Document(results_dir)
    doc.heading("fusebench report", 1)
    doc.paragraph(f"Results directory: {results_dir.resolve()}")
    doc.heading("System and run")
    doc.table(["suite", "profile", "device", "compiler", "CPU", "ISA", "CPUs", "commit", "date"], system_rows(runs))
    for render_task in PLAN_SECTIONS:
        render_task(doc, runs, results_dir)
    for section in SECTIONS:
        section.render(doc, runs)
    md_path, html_path = results_dir / "report.md", results_dir / "report.html"
    atomic_write(md_path, "\n".join(doc.md) + "\n")
    atomic_write(html_path, "<!doctype html><html><head><meta charset='utf-8'><title>fusebench report</title>"
                 + STYLE + "</head><body>" + "\n".join(doc.html) + "</body></html>\n")
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
