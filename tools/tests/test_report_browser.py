"""Renders report.html from the checked-in fixture run (fixtures/report_run: a real quick run, trimmed)
and loads it in headless Chromium at 1280 px. Fails when a table or figure is wider than the page, the
page scrolls sideways, an image does not load, or the verdict table is not on the first screen.
Screenshots (first screen, whole page) are left in --work for a person to look at. With
--add-devices DIR the run gains that fixture's devices (fixtures/report_frameworks: torch and xla
from a real quick run, without dumps): the main job's three-device matrix, whose claims that differ
only in their chain, dtype or kernel share a row, must still fit the first screen.

Usage: test_report_browser.py [--work DIR] [--fixture DIR] [--add-devices DIR]"""

from __future__ import annotations

import argparse
import html
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
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


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("test_report_browser: no chromium on PATH (tools/bootstrap installs Debian's chromium)")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/fusebench-report-browser"))
    parser.add_argument("--fixture", type=pathlib.Path, default=HERE / "fixtures" / "report_run")
    parser.add_argument("--add-devices", type=pathlib.Path, help="a fixture of more devices' suite JSONs")
    args = parser.parse_args()
    browser = chromium()
    run_dir = args.work / "run"
    shutil.rmtree(args.work, ignore_errors=True)
    shutil.copytree(args.fixture, run_dir)
    if args.add_devices:
        manifest = json.loads((run_dir / "run.json").read_text())
        more = json.loads((args.add_devices / "run.json").read_text())
        for f in args.add_devices.glob("*@*.json"):
            shutil.copy(f, run_dir / f.name)
        manifest["devices"] += more["devices"]
        manifest["ran"] += more["ran"]
        manifest["seconds"] += more["seconds"]
        (run_dir / "run.json").write_text(json.dumps(manifest, indent=1))
    r = subprocess.run(
        [sys.executable, "-m", "reports.report", str(run_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if r.returncode != 0:
        print(f"FAIL: report.py exit {r.returncode}: {r.stderr}")
        return 1
    md = (run_dir / "report.md").read_text()
    # what the first screen must say, whatever the layout: B's verdicts with their interval beside the
    # plan's rule, and a verdict (or N/A with its reason) in every cell
    matrix_b = "fused error ≤ eager error (" if args.add_devices else "plan's rule: "  # a chain per row on one device
    for needed in ("paired-bootstrap interval", matrix_b):
        if needed not in md:
            print(f"FAIL: the report lacks {needed!r} (task B's verdicts)")
            return 1
    if "no verdict" in md.lower():
        print("FAIL: a cell reads 'no verdict'")
        return 1
    page = run_dir / "report.html"
    checked = args.work / "checked.html"
    checked.write_text(page.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    r = browse(browser, checked, f"--window-size={WIDTH},{FIRST_SCREEN}", "--dump-dom")
    found = re.search(r'<pre id="fb-check">FBCHECK(.*?)FBCHECK</pre>', r.stdout, re.S)
    if not found:
        print(f"FAIL: chromium printed no check result (exit {r.returncode}):\n{r.stderr[-2000:]}")
        return 1
    result = json.loads(html.unescape(found.group(1)))
    # Screenshots for a person: the first screen, and the whole page at 1280 px.
    browse(browser, page, f"--window-size={WIDTH},{FIRST_SCREEN}", f"--screenshot={args.work / 'first_screen.png'}")
    browse(
        browser, page, f"--window-size={WIDTH},{min(result['height'], 16000)}", f"--screenshot={args.work / 'page.png'}"
    )
    print(
        f"report in chromium at {WIDTH} px: {result['tables']} tables, {result['images']} images, page "
        f"{result['height']} px tall ({result['opened_height']} px with every table expanded); screenshots in {args.work}"
    )
    for p in result["problems"]:
        print("FAIL:", p)
    if result["images"] == 0:
        print("FAIL: the fixture report has no image")
        return 1
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
