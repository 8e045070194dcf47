"""The fixture runs the report's tests render: each checked-in fixture directory as it is;
"three_devices", the cpu fixture run with the framework fixture's torch and xla beside it (the main
job's matrix); and "report_run_attributed", the cpu fixture run whose B evidence carries
switch_evidence's attribution (the attribution section, the switch file and its table)."""

from __future__ import annotations

import json
import pathlib
import shutil

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
# name -> (the fixture copied, the fixture whose devices join it, or None)
RUNS = {
    "quick_a": ("quick_a", None),
    "quick_b": ("quick_b", None),
    "report_frameworks": ("report_frameworks", None),
    "report_run": ("report_run", None),
    "run_ok": ("run_ok", None),
    "three_devices": ("report_run", "report_frameworks"),
    "report_run_attributed": ("report_run", None),
}


def add_devices(run_dir: pathlib.Path, more: pathlib.Path):
    """Copies `more`'s suite files into run_dir and joins the two manifests' devices, runs and times."""
    manifest = json.loads((run_dir / "run.json").read_text())
    added = json.loads((more / "run.json").read_text())
    for f in more.glob("*@*.json"):
        shutil.copy(f, run_dir / f.name)
    manifest["devices"] += added["devices"]
    manifest["ran"] += added["ran"]
    manifest["seconds"] += added["seconds"]
    (run_dir / "run.json").write_text(json.dumps(manifest, indent=1))


def make_run(name: str, into: pathlib.Path) -> pathlib.Path:
    """A fresh copy of the fixture run `name` (RUNS) at into/name."""
    base, more = RUNS[name]
    run_dir = into / name
    shutil.copytree(FIXTURES / base, run_dir)
    if more:
        add_devices(run_dir, FIXTURES / more)
    if name == "report_run_attributed":
        from reports.tests.switch_evidence import add_attribution

        add_attribution(run_dir)
    return run_dir
