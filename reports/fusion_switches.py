"""The switch file of a run: per device, every switch that task B's attribution found (one mechanism set
to eager's behaviour at one op of the fused path), which counter-examples it removes, and what it costs.

Reads each device's B evidence (`<run>/dumps/<device>/bench_accumulated_error/B_*.json`, keys
`switches` per case) and writes `fusion_switches.<device>.json` into the run directory, one entry per
(chain, dtype, op, switch) with both input distributions merged. An entry is recommended (`entries`,
what `--fusion-switches` applies) only where the counter-examples it removes are on the deciding
measure beyond the stated margin and the chain × dtype's verdict (task B's rule over that dtype's
parts) is not SUPPORTED; the others are listed under `not_recommended`, each with why. A device whose evidence lists no
switch (older evidence, or a device the attribution does not apply to) gets no file. The format is
docs/fusion-switches.md's; `validate` checks a document against it. The report writes the files
(reports/report.py) and reads them back; `python -m tools.fusion_switches RUN_DIR` writes them alone.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from collections.abc import Callable

from reports.results import Results, dump_dir, file_device_name
from reports.results import b_distribution as distribution

SCHEMA = "fusebench.fusion_switches/1"
SUITE = "accumulated_error"
D_SUITE = "data_movement"  # task D: its mismatches are attributed too
E_SUITE = "training_alignment"  # task E: its excursions beyond the seed band too
DISTRIBUTIONS = ("uniform", "heavy")
MECHANISMS = (
    "per-op rounding",
    "scalar lowering",
    "FMA contraction",
    "accumulator dtype",
    "reduction order",
    "rsqrt approximation",
    "division approximation",
    "kernel split",
    # a framework's compile options (Device::compiler_switches)
    "pattern rewrite",
    "variance algorithm",
    "fusion extent",
    "reduction split",
    "vectorised code",
    "fusion pass",
)
APPROXIMATIONS = ("ieee", "newton-bittrick", "newton-hw")
# key -> the values a token `key=value` may take; a callable checks a numeric value. The engine's
# parse_switch (common/src/engine/attribution.cpp) accepts the same tokens.
SWITCH_VALUES = {
    "rounding": ("on", "off"),
    "fma": ("on", "off"),
    "scalar": ("immediate", "broadcast"),
    "tile": lambda v: v.isdigit() and int(v) >= 1,
    "acc": ("f32", "storage"),
    "rsqrt": APPROXIMATIONS,
    "div": APPROXIMATIONS,
    "rsqrt_iters": lambda v: v.isdigit() and int(v) <= 3,
    "div_iters": lambda v: v.isdigit() and int(v) <= 3,
}
ENTRY_FIELDS = ("chain", "dtype", "op", "kind", "switch", "mechanism", "removes", "cost")
COST_FIELDS = ("fused_ms", "fused_with_switch_ms", "eager_ms", "slowdown")


def b_evidence(results: Results) -> dict[str, list[dict]]:
    """device -> its B evidence documents, in file-name order; devices without the suite are left out."""
    out = {}
    for device in results.devices:
        result = results.get(SUITE, device)
        if result is None:
            continue
        out[device] = [json.loads(p.read_text()) for p in sorted(dump_dir(result).glob("B_*.json"))]
    return out


def evidence_files(results: Results, suite: str, pattern: str) -> dict[str, list[dict]]:
    """device -> the suite's evidence documents matching `pattern`, in file-name order (task D writes
    one per mismatch; task E one per alignment dtype)."""
    out = {}
    for device in results.devices:
        result = results.get(suite, device)
        if result is not None:
            out[device] = [json.loads(p.read_text()) for p in sorted(dump_dir(result).glob(pattern))]
    return out


# (answers, why not recommended) for one chain × dtype's evidence: reports/claims/b.py
# switch_recommendation, passed in by the callers above the claims
Recommend = Callable[[list[dict]], tuple[dict | None, str]]


def switch_document(device: str, run: str, evidence: list[dict], recommend: Recommend) -> dict | None:
    """The switch file's document for one device, or None when its evidence lists no switch: the
    recommended entries under `entries`, the others under `not_recommended` with why (`recommend`
    judges each chain × dtype; see the module's docstring)."""
    entries: dict[tuple[str, str, str, str], dict] = {}
    costs: dict[tuple[str, str, str, str], list[tuple[str, dict]]] = {}
    for e in evidence:
        dist = distribution(e.get("distribution", ""))
        for sw in e.get("switches") or []:
            key = (e["chain"], e["dtype"], sw["op"], sw["switch"])
            entry = entries.setdefault(
                key,
                {
                    "chain": e["chain"],
                    "dtype": e["dtype"],
                    "op": sw["op"],
                    "kind": sw.get("kind", ""),
                    "op_dtype": sw.get("dtype", e["dtype"]),
                    "switch": sw["switch"],
                    "mechanism": sw.get("mechanism", ""),
                    "removes": [],
                },
            )
            entry["removes"] += [{"dist": dist, "set": int(s)} for s in sw.get("removes_sets", [])]
            costs.setdefault(key, []).append((dist, sw))
    if not entries:
        return None
    by_case: dict[tuple[str, str], list[dict]] = {}
    for e in evidence:
        by_case.setdefault((e["chain"], e["dtype"]), []).append(e)
    recommendations = {case: recommend(docs) for case, docs in by_case.items()}
    for key, entry in entries.items():
        answers, why = recommendations[key[:2]]
        entry["removes_count"] = len(entry["removes"])
        entry["answers"] = answers
        if why:
            entry["why_not_recommended"] = why
        entry["removes"].sort(key=lambda r: (_dist_order(r["dist"]), r["set"]))
        # The most rounds give the steadiest median; on a tie the first distribution's is kept.
        dist, sw = max(costs[key], key=lambda c: c[1].get("rounds") or 0)
        fused, with_switch = sw.get("fused_ms"), sw.get("fused_with_switch_ms")
        # the suite's slowdown is the median of per-round ratios; older evidence has only medians
        slowdown = sw.get("slowdown")
        if slowdown is None and fused and with_switch is not None:
            slowdown = with_switch / fused
        entry["cost"] = {
            "fused_ms": fused,
            "fused_with_switch_ms": with_switch,
            "eager_ms": sw.get("eager_ms"),
            "slowdown": slowdown,
            "slowdown_ci95": sw.get("slowdown_ci95"),
            "aa_ratio": sw.get("aa_ratio"),
            "aa_ratio_ci95": sw.get("aa_ratio_ci95"),
            "resolved": cost_resolution(sw.get("slowdown_ci95"), sw.get("aa_ratio_ci95")),
            "rounds": sw.get("rounds"),
        }
        entry["cost_from"] = dist
    recommended = [e for e in entries.values() if "why_not_recommended" not in e]
    others = [e for e in entries.values() if "why_not_recommended" in e]
    return {"schema": SCHEMA, "device": device, "run": run, "entries": recommended, "not_recommended": others}


def cost_resolution(slowdown_ci, aa_ci) -> str:
    """Whether a switch's cost is told apart from the timing's own spread: 'slower' or 'faster' when the
    slowdown's 95 % interval lies wholly above or below the A/A control's (a second plain fused executor
    timed in the same rounds), else 'not resolved'; 'no control' without both intervals."""
    if not slowdown_ci or not aa_ci:
        return "no control"
    if slowdown_ci[0] > aa_ci[1]:
        return "slower"
    if slowdown_ci[1] < aa_ci[0]:
        return "faster"
    return "not resolved"


def _dist_order(dist: str) -> int:
    return DISTRIBUTIONS.index(dist) if dist in DISTRIBUTIONS else len(DISTRIBUTIONS)


def token_problem(token: str) -> str | None:
    """Why one switch token is not one the engine accepts, or None."""
    if token == "split":
        return None
    key, eq, value = token.partition("=")
    if key.startswith("compiler:"):  # a framework compile option: the device checks its name
        ok = len(key) > len("compiler:") and bool(value)
        return None if ok else f"switch token {token!r}: expected compiler:NAME=VALUE"
    allowed = SWITCH_VALUES.get(key)
    if not eq or allowed is None:
        return f"unknown switch token {token!r}"
    ok = allowed(value) if callable(allowed) else value in allowed
    return None if ok else f"switch token {token!r}: bad value {value!r}"


def validate(doc) -> list[str]:
    """Every problem of a switch file's document, each naming its entry (index, op, switch)."""
    if not isinstance(doc, dict):
        return ["the document is not a JSON object"]
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema: expected {SCHEMA!r}, got {doc.get('schema')!r}")
    for name in ("device", "run"):
        if not isinstance(doc.get(name), str) or not doc.get(name):
            problems.append(f"{name}: missing or not a string")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        return problems + ["entries: missing or not a list"]
    others = doc.get("not_recommended", [])
    if not isinstance(others, list):
        return problems + ["not_recommended: not a list"]
    listed = [(f"entries[{i}]", e) for i, e in enumerate(entries)]
    listed += [(f"not_recommended[{i}]", e) for i, e in enumerate(others)]
    for name, entry in listed:
        if not isinstance(entry, dict):
            problems.append(f"{name}: not an object")
            continue
        where = f"{name} (op {entry.get('op')!r}, switch {entry.get('switch')!r})"
        missing = [f for f in ENTRY_FIELDS if f not in entry]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
        switch = entry.get("switch")
        if "switch" in entry:
            if not isinstance(switch, str) or not switch.split():
                problems.append(f"{where}: empty switch")
            else:
                problems += [f"{where}: {p}" for p in map(token_problem, switch.split()) if p]
        mechanism = entry.get("mechanism")
        if "mechanism" in entry:
            unknown = [m for m in str(mechanism).split(" + ") if m not in MECHANISMS]
            if unknown:
                problems.append(f"{where}: unknown mechanism {' + '.join(unknown)!r}")
        removes = entry.get("removes")
        if "removes" in entry and (
            not isinstance(removes, list)
            or not all(
                isinstance(r, dict)
                and r.get("dist") in DISTRIBUTIONS
                and isinstance(r.get("set"), int)
                and r["set"] >= 0
                for r in removes
            )
        ):
            problems.append(f"{where}: removes must list {{dist: uniform|heavy, set: N}}")
        cost = entry.get("cost")
        if "cost" in entry:
            if not isinstance(cost, dict):
                problems.append(f"{where}: cost is not an object")
            else:
                absent = [f for f in COST_FIELDS if f not in cost]
                if absent:
                    problems.append(f"{where}: cost lacks {', '.join(absent)}")
                bad = [f for f in COST_FIELDS if f in cost and not _number_or_none(cost[f])]
                if bad:
                    problems.append(f"{where}: cost {', '.join(bad)} not a number")
    return problems


def _number_or_none(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def switch_file_name(device: str) -> str:
    return f"fusion_switches.{file_device_name(device)}.json"


def _atomic_write_json(path: pathlib.Path, doc: dict):
    # A reader (tools/run --fusion-switches, a browser following the report's link) never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from other users of a shared results folder
        os.replace(tmp, path)
    except OSError as e:  # the file it was for, not the temporary's (a full disk fails the write, not the open)
        os.unlink(tmp)
        raise OSError(e.errno, e.strerror, str(path)) from e
    except BaseException:
        os.unlink(tmp)
        raise


def write_switch_files(
    results: Results, recommend: Recommend, out_dir: pathlib.Path | None = None
) -> list[tuple[pathlib.Path, dict, list[str]]]:
    """Writes one switch file per device whose B evidence lists switches; (path, document, problems)
    for each written. Nothing is written when no device has switches."""
    out_dir = pathlib.Path(out_dir or results.root)
    docs = []
    for device, evidence in b_evidence(results).items():
        doc = switch_document(device, pathlib.Path(results.root).resolve().name, evidence, recommend)
        if doc is not None:
            docs.append((device, doc))
    written = []
    for device, doc in docs:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / switch_file_name(device)
        _atomic_write_json(path, doc)
        written.append((path, doc, validate(doc)))
    return written


# ---- one counter-example's attribution record (B's, D's and E's evidence carry the same)
WHOLE_GRAPH = "(whole graph)"  # the op of a graph-wide switch (a framework's compile option)
STATUSES = ("explained", "unexplained", "n/a", "not attempted")


def status(c: dict) -> str:
    """One counter-example's attribution status; a counter-example the search did not reach (its
    budget spent, or evidence older than the attribution) is 'not attempted'."""
    a = c.get("attribution")
    if not isinstance(a, dict) or a.get("status") not in STATUSES[:3]:
        return "not attempted"
    if a["status"] == "explained" and not a.get("switches"):
        return "unexplained"  # 'explained' with no switch named explains nothing
    return a["status"]


def mechanisms_at(c: dict) -> dict[str, list[str]]:
    """mechanism -> ops of the counter-example's minimal switch set, in the set's order. A switch that
    sets several mechanisms ("per-op rounding + kernel split") counts under each."""
    out: dict[str, list[str]] = {}
    for sw in (c.get("attribution") or {}).get("switches") or []:
        for m in str(sw.get("mechanism") or "?").split(" + "):
            ops = out.setdefault(m, [])
            if sw.get("op") not in ops:
                ops.append(sw.get("op", "?"))
    return out


def candidate(c: dict) -> tuple[str, str, bool] | None:
    """(op, mechanism in a few words, confirmed) of the candidate mechanism the suite names where no
    switch at an op removes a counter-example, or None."""
    cm = (c.get("attribution") or {}).get("candidate_mechanism")
    if not isinstance(cm, dict) or not cm.get("op"):
        return None
    return cm["op"], str(cm.get("mechanism") or "?").split(":", 1)[0], bool(cm.get("confirmed"))


def candidate_text(c: dict, lead: str = "") -> str:
    """'candidate: function evaluation at gelu6, confirmed' ('' without one)."""
    found = candidate(c)
    if found is None:
        return ""
    op, mechanism, confirmed = found
    return f"{lead}candidate: {mechanism} at {op}, {'confirmed' if confirmed else 'not confirmed'}"


def _without_na_prefix(reason: str) -> str:
    # reasons read "n/a on torch: ..."; the cell already says n/a
    return reason.removeprefix("n/a").strip() or reason


def mechanism_text(c: dict) -> str:
    """The counter-example table's mechanism cell: 'per-op rounding at mul1 + add2', 'unexplained',
    'n/a (reason)', or '—' where the evidence carries no attribution."""
    st = status(c)
    if st == "explained":
        tokens = {sw.get("mechanism"): sw.get("switch", "?") for sw in c["attribution"]["switches"]}

        def where(m: str, ops: list[str], token: str) -> str:
            # a graph-wide switch is a compile option: its token says which
            if ops == [WHOLE_GRAPH]:
                return f"{m} over the whole graph ({token})"
            return f"{m} at {' + '.join(ops)}"

        text = " and ".join(where(m, ops, tokens.get(m, "?")) for m, ops in mechanisms_at(c).items())
        if not c["attribution"].get("localised", True):
            text += f" (not localised{candidate_text(c, '; ')})"
        also = [
            where(sw.get("mechanism") or "?", [sw.get("op", "?")], sw.get("switch", "?"))
            + ("" if sw.get("op") == WHOLE_GRAPH else f" ({sw.get('switch', '?')})")
            for sw in c["attribution"].get("also_removed_by") or []
        ]
        return f"{text}; also removed alone by {', '.join(also)}" if also else text
    if st == "unexplained":
        return "unexplained" + (f" ({candidate_text(c)})" if candidate_text(c) else "")
    if st == "n/a":
        reason = _without_na_prefix(str(c["attribution"].get("reason") or ""))
        return f"n/a ({reason})" if reason else "n/a"
    return "—"
