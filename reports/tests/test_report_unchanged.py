"""Every fixture run's report against the one checked in (expected/<run>.md, and the SHA-256 of its
report.html with the embedded images left out, whose bytes depend on the matplotlib version): nothing
a reader sees changes by accident. After an intended change, rewrite them with
FUSEBENCH_UPDATE_EXPECTED=1 pytest reports/tests/test_report_unchanged.py and name the difference in
the commit."""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import pathlib
import re

import pytest

from reports import report
from reports.tests.fixture_runs import RUNS, make_run

EXPECTED = pathlib.Path(__file__).resolve().parent / "expected"
HTML_HASHES = EXPECTED / "html.sha256.json"
UPDATE = os.environ.get("FUSEBENCH_UPDATE_EXPECTED") == "1"


def html_without_images(text: str) -> str:
    return re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "data:image/png;base64,IMAGE", text)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_report_unchanged(name, tmp_path):
    run_dir = make_run(name, tmp_path)
    md_path, html_path = report.render(run_dir)
    md = md_path.read_text()
    html_hash = hashlib.sha256(html_without_images(html_path.read_text()).encode()).hexdigest()
    expected_md = EXPECTED / f"{name}.md"
    hashes = json.loads(HTML_HASHES.read_text()) if HTML_HASHES.exists() else {}
    if UPDATE:
        EXPECTED.mkdir(exist_ok=True)
        expected_md.write_text(md)
        hashes[name] = html_hash
        HTML_HASHES.write_text(json.dumps(dict(sorted(hashes.items())), indent=1) + "\n")
        return
    want = expected_md.read_text()
    if md != want:
        diff = difflib.unified_diff(want.splitlines(), md.splitlines(), "expected", "now", lineterm="", n=1)
        pytest.fail(f"{name}: report.md differs from {expected_md.name}:\n" + "\n".join(list(diff)[:80]))
    assert html_hash == hashes.get(name), f"{name}: report.html (images left out) differs from the checked-in hash"
