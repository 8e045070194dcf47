"""Renders report.html from a checked-in fixture run and loads it in headless Chromium at 1280 px. Fails
when a table or figure is wider than the page, the page scrolls sideways, an image does not load, or
the verdict table is not on the first screen. Two runs (fixture_runs): report_run (a real quick run
on cpu, trimmed) and three_devices (the same with torch and xla beside it, from a real quick run
without dumps): the main job's three-device matrix, whose claims that differ only in their chain,
dtype or kernel share a row, must still fit the first screen.

Screenshots (first screen, whole page) are left in FUSEBENCH_BROWSER_WORK/<run> for a person to look
at (pytest's temporary directory when unset). Skipped where no Chromium is installed."""

from __future__ import annotations

import html
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from reports.tests.fixture_runs import make_run

ROOT = pathlib.Path(__file__).resolve().parents[2]
WIDTH, FIRST_SCREEN = 1280, 800

# Runs in the page after load: every <details> opened, so collapsed tables are measured too.
CHECK_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const W = document.documentElement.clientWidth, H = window.innerHeight, problems = [];
  const v = document.getElementById('verdicts');
  if (!v) problems.push('no verdict table (id=verdicts)');
  else {
    const r = v.getBoundingClientRect();
    if (r.top < 0 || r.bottom > H) problems.push(`verdict table spans ${Math.round(r.top)}-${Math.round(r.bottom)} px, `
                                                 + `not within the first screen (${H} px)`);
  }
  const collapsed = document.documentElement.scrollHeight;
  document.querySelectorAll('details').forEach(d => d.open = true);
  document.querySelectorAll('table, figure, img').forEach((el, i) => {
    const r = el.getBoundingClientRect();
    const what = el.tagName.toLowerCase() + ' #' + i + ' (' + (el.alt || el.innerText || '').slice(0, 60).replace(/\\s+/g, ' ') + ')';
    if (r.right > W + 0.5) problems.push(`${what} is ${Math.round(r.width)} px wide, ends at ${Math.round(r.right)} > ${W}`);
  });
  document.querySelectorAll('img').forEach((img, i) => {
    if (!img.complete || img.naturalWidth === 0) problems.push(`image #${i} (${img.alt}) did not load`);
  });
  if (document.documentElement.scrollWidth > W) problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${W} px`);
  const out = document.createElement('pre');
  out.id = 'fb-check';
  out.textContent = 'FBCHECK' + JSON.stringify({problems, width: W, height: collapsed,
      opened_height: document.documentElement.scrollHeight,
      images: document.images.length, tables: document.querySelectorAll('table').length}) + 'FBCHECK';
  document.body.appendChild(out);
});
</script>
"""


def chromium() -> str | None:
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def browse(browser: str, page: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--virtual-time-budget=15000",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", ["report_run", "three_devices"])
def test_report_in_browser(name, tmp_path):
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (tools/bootstrap installs Debian's chromium)")
    work = pathlib.Path(os.environ.get("FUSEBENCH_BROWSER_WORK") or tmp_path) / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run_dir = make_run(name, work)
    r = subprocess.run(
        [sys.executable, "-m", "reports.report", str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, f"report.py exit {r.returncode}: {r.stderr}"
    md = (run_dir / "report.md").read_text()
    # what the first screen must say, whatever the layout: B's verdicts with their interval beside the
    # plan's rule, and a verdict (or N/A with its reason) in every cell
    several = name == "three_devices"
    matrix_b = "fused error ≤ eager error (" if several else "plan's rule: "  # a chain per row on one device
    for needed in ("paired-bootstrap interval", matrix_b):
        assert needed in md, f"the report lacks {needed!r} (task B's verdicts)"
    assert "no verdict" not in md.lower(), "a cell reads 'no verdict'"
    page = run_dir / "report.html"
    checked = work / "checked.html"
    checked.write_text(page.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    r = browse(browser, checked, f"--window-size={WIDTH},{FIRST_SCREEN}", "--dump-dom")
    found = re.search(r'<pre id="fb-check">FBCHECK(.*?)FBCHECK</pre>', r.stdout, re.S)
    assert found, f"chromium printed no check result (exit {r.returncode}):\n{r.stderr[-2000:]}"
    result = json.loads(html.unescape(found.group(1)))
    # Screenshots for a person: the first screen, and the whole page at 1280 px.
    browse(browser, page, f"--window-size={WIDTH},{FIRST_SCREEN}", f"--screenshot={work / 'first_screen.png'}")
    browse(browser, page, f"--window-size={WIDTH},{min(result['height'], 16000)}", f"--screenshot={work / 'page.png'}")
    print(
        f"report in chromium at {WIDTH} px: {result['tables']} tables, {result['images']} images, page "
        f"{result['height']} px tall ({result['opened_height']} px with every table expanded); screenshots in {work}"
    )
    assert result["images"] > 0, "the fixture report has no image"
    assert not result["problems"], "\n".join(result["problems"])
