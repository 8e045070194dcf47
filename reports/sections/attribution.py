"""Attribution of task B's counter-examples: which mechanism at which op makes the fused path worse than
eager on an input set, as the suite's delta-debugging search found it (the smallest set of switches,
each setting one mechanism at one op to eager's behaviour, that removes the difference). The evidence
keys are optional: evidence written before the attribution existed renders as "—" and adds no section
or first-screen line. Format of the switch files: docs/fusion-switches.md."""

from __future__ import annotations

import html

from reports.fusion_switches import MECHANISMS, STATUSES, WHOLE_GRAPH, candidate, mechanisms_at, status
from reports.numbers import num
from reports.results import b_distribution

TITLE = "Attribution of counter-examples (task B)"
MAX_OPS_IN_LINE = 4  # the first-screen line stays one line; the section names every op


def has_attribution(evidence: list[dict]) -> bool:
    """Whether a device's B evidence was written with the attribution (any of its keys present)."""
    return any(
        "attribution_summary" in e or "switches" in e or any("attribution" in c for c in e.get("counterexamples", []))
        for e in evidence
    )


def _mechanism_order(m: str) -> tuple[int, str]:
    return (MECHANISMS.index(m) if m in MECHANISMS else len(MECHANISMS), m)


def _ops_text(ops: list[str], noun: str = "ops") -> str:
    if len(ops) <= MAX_OPS_IN_LINE:
        return ", ".join(ops)
    return f"{', '.join(ops[:MAX_OPS_IN_LINE])} and {len(ops) - MAX_OPS_IN_LINE} more {noun}"


def _only(values: list[str]) -> str | None:
    distinct = list(dict.fromkeys(v for v in values if v))
    return distinct[0] if len(distinct) == 1 else None


def first_screen_line(device: str, evidence: list[dict]) -> str | None:
    """'cpu: 12 counter-examples: 7 explained by per-op rounding at gelu3; 3 by FMA contraction at
    mul1; 2 unexplained', or None for a device without attribution data. Counter-examples whose
    minimal sets combine mechanisms are counted once, under the combination."""
    if not has_attribution(evidence):
        return None
    counterexamples = [c for e in evidence for c in e.get("counterexamples", [])]
    chain_of = {id(c): e.get("chain", "?") for e in evidence for c in e.get("counterexamples", [])}
    if not counterexamples:
        sets = sum(int((e.get("per_set") or {}).get("sets") or 0) for e in evidence)
        judged = f" in {num(sets)} input sets" if sets else ""
        return f"{device}: 0 counter-examples{judged}" + _not_counted(evidence)
    groups: dict[tuple[str, ...], list[dict]] = {}
    by_status: dict[str, list[dict]] = {s: [] for s in STATUSES}
    for c in counterexamples:
        st = status(c)
        by_status[st].append(c)
        if st == "explained":
            groups.setdefault(tuple(mechanisms_at(c)), []).append(c)
    parts = []
    for i, (mechanisms, members) in enumerate(sorted(groups.items(), key=lambda g: -len(g[1]))):
        # an op's name is its chain's: "matmul5 (matmul_add_layernorm)"; a graph-wide switch names the chain
        places = [(op, chain_of[id(c)]) for c in members for m in mechanisms for op in mechanisms_at(c)[m]]
        ops = list(dict.fromkeys(f"{op} ({chain})" for op, chain in places if op != WHOLE_GRAPH))
        chains = list(dict.fromkeys(chain for op, chain in places if op == WHOLE_GRAPH))
        where = [f"at {_ops_text(ops)}"] if ops else []
        if chains:
            where.append(f"over the whole graph of {_ops_text(chains, 'chains')} (not localised{_candidates(members)})")
        verb = "explained by" if i == 0 else "by"
        # another mechanism that removes them on its own (a graph break and a rewrite turned off)
        also: dict[str, int] = {}
        for c in members:
            for m in dict.fromkeys(sw.get("mechanism") or "?" for sw in c["attribution"].get("also_removed_by") or []):
                also[m] = also.get(m, 0) + 1
        ranked = sorted(also.items(), key=lambda a: -a[1])
        alone = (
            " ("
            + ", ".join(f"{k} {'of them also ' if i == 0 else ''}by {m} alone" for i, (m, k) in enumerate(ranked))
            + ")"
            if ranked
            else ""
        )
        parts.append(f"{len(members)} {verb} {' + '.join(mechanisms)} {' and '.join(where)}{alone}")

    def in_chains(members):
        counts: dict[str, int] = {}
        for c in members:
            counts[chain_of[id(c)]] = counts.get(chain_of[id(c)], 0) + 1
        return "in " + _ops_text(sorted(counts, key=lambda chain: -counts[chain]), "chains")

    if by_status["unexplained"]:
        parts.append(f"{len(by_status['unexplained'])} unexplained ({in_chains(by_status['unexplained'])})")
    if by_status["n/a"]:
        # reasons name their ops ("split at matmul5: xla realises no per-op switch"): their common tail
        tails = [str(c["attribution"].get("reason") or "").rsplit(": ", 1)[-1] for c in by_status["n/a"]]
        reason = _only(tails)
        where = in_chains(by_status["n/a"])
        parts.append(f"{len(by_status['n/a'])} n/a ({where}" + (f": {reason})" if reason else ")"))
    if by_status["not attempted"]:
        # the note is said only where every case with such counter-examples gives that same one
        notes = {
            (e.get("attribution_summary") or {}).get("budget_note") or ""
            for e in evidence
            if any(status(c) == "not attempted" for c in e.get("counterexamples", []))
        }
        note = notes.pop() if len(notes) == 1 else None
        parts.append(f"{len(by_status['not attempted'])} not attempted" + (f" ({note})" if note else ""))
    n = len(counterexamples)
    if by_status["explained"]:
        localised = [c for c in by_status["explained"] if is_localised(c)]
        # the others' first divergent op, where the suite's experiment there confirms the mechanism
        at_op = {id(c) for c in localised}
        named = sum(1 for c in counterexamples if id(c) not in at_op and (candidate(c) or ("", "", False))[2])
        parts.append(
            f"{len(localised)} of {n} explained at an op"
            + (f", {named} more named at an op by a confirmed candidate" if named else "")
        )
    return f"{device}: {n} counter-example{'' if n == 1 else 's'}: " + "; ".join(parts) + _not_counted(evidence)


def _candidates(members: list[dict]) -> str:
    """'; candidate: function evaluation at gelu6, confirmed in 98 of 98', for counter-examples no
    switch at an op explains: the mechanism the suite names at their first divergent op."""
    counts: dict[tuple[str, str], list[bool]] = {}
    for c in members:
        found = candidate(c)
        if found is not None:
            counts.setdefault(found[:2], []).append(found[2])
    return "".join(
        f"; candidate: {mechanism} at {op}, confirmed in {sum(confirmed)} of {len(confirmed)}"
        for (op, mechanism), confirmed in sorted(counts.items(), key=lambda kv: -len(kv[1]))
    )


def is_localised(c: dict) -> bool:
    """Whether an explained counter-example's minimal set names ops only (no graph-wide switch)."""
    a = c.get("attribution") or {}
    if "localised" in a:
        return bool(a["localised"])
    return all(sw.get("op") != WHOLE_GRAPH for sw in a.get("switches") or [])


def _not_counted(evidence: list[dict]) -> str:
    """What the evidence sets beside the counter-examples, never counted among them (those it found): ULP-only
    differences at cancellation, and sets where both paths miss fp64 far beyond the bound."""

    def count(key: str) -> int:
        return sum(int((e.get(key) or {}).get("count") or 0) for e in evidence)

    parts = []
    if count("at_cancellation"):
        parts.append(
            f"{num(count('at_cancellation'))} sets worse fused in ULP only, at cancellation (neither path accurate)"
        )
    if count("shared_errors"):
        parts.append(
            f"{num(count('shared_errors'))} sets where both paths miss fp64 far beyond the bound "
            "(the kernels', not fusion's)"
        )
    return " — not counter-examples: " + "; ".join(parts) if parts else ""


def counts_table(evidence: list[dict]) -> tuple[list[str], list[list]]:
    """Chain × dtype rows, one column per mechanism found, then unexplained / n/a / not attempted:
    counter-examples whose minimal set includes the mechanism (one may count under several)."""
    cells: dict[tuple[str, str], dict[str, int]] = {}
    for e in evidence:
        cell = cells.setdefault((e["chain"], e["dtype"]), {"counter-examples": 0})
        for c in e.get("counterexamples", []):
            cell["counter-examples"] += 1
            st = status(c)
            for key in mechanisms_at(c) if st == "explained" else [st]:
                cell[key] = cell.get(key, 0) + 1
    found = {k for cell in cells.values() for k in cell}
    mechanisms = sorted((k for k in found if k not in STATUSES and k != "counter-examples"), key=_mechanism_order)
    statuses = [s for s in STATUSES[1:] if s in found or s == "unexplained"]
    header = ["chain", "dtype", "counter-examples", *mechanisms, *statuses]
    rows = [
        [chain, dtype, *(num(cell.get(k, 0)) for k in header[2:])]
        for (chain, dtype), cell in cells.items()
        if cell["counter-examples"]
    ]
    return header, rows


def render(s, evidence: list[dict], switch_doc: dict | None, switch_file: str | None):
    """One device's part of the attribution section."""
    counterexamples = [(e, c) for e in evidence for c in e.get("counterexamples", [])]
    if not counterexamples:
        s.paragraph("No counter-example in this device's B evidence: nothing to attribute.")
    else:
        explained = [c for _, c in counterexamples if status(c) == "explained"]
        bit_equal = sum((c["attribution"].get("bit_equal_to_eager") is True) for c in explained)
        criterion = _only([(c.get("attribution") or {}).get("criterion", "") for _, c in counterexamples])
        s.paragraph(
            f"{len(counterexamples)} counter-examples, {len(explained)} explained: for each, the suite reran the "
            "fused path with switches (one mechanism set to eager's behaviour at one op) and kept the smallest "
            "set after which the counter-example is gone"
            + (f" ({criterion})" if criterion else "")
            + ". "
            + (
                f"With its set applied, {bit_equal} of the {len(explained)} explained ones are bit-equal to eager. "
                if explained
                else ""
            )
            + (
                "Unexplained: no switch the engine has removes it."
                if s.device == "cpu"
                else f"Unexplained: none of the switches {s.device} realises (graph breaks, its compile options: "
                "devices/README.md) removes it, even all together; the difference lies in a lowering no "
                "exposed switch reaches."
            )
        )
        header, rows = counts_table(evidence)
        s.table(
            header,
            rows,
            caption="Counter-examples by mechanism: a counter-example counts under every mechanism of its minimal "
            "switch set (a set of two mechanisms needs both), so a row may sum to more than its total; chains "
            "and dtypes without counter-examples are left out.",
        )
    if switch_doc is not None:
        _switch_table(s, switch_doc)
    if switch_file:
        s.link(
            "The switch list as a file (tools/fusion_switches.py; the format is docs/fusion-switches.md): ",
            switch_file,
        )
    _unexplained_table(s, counterexamples)
    _applied(s, evidence)


def _switch_table(s, doc: dict):
    def ratio(value, interval):
        if value is None:
            return "—"
        text = f"{num(value)}×"
        return text + (f" [{num(interval[0])}, {num(interval[1])}]" if interval else "")

    def row(entry: dict) -> list[str]:
        cost = entry.get("cost") or {}
        answers = entry.get("answers")
        return [
            entry["chain"],
            entry["op"],
            entry.get("kind", "—"),
            entry.get("op_dtype", entry["dtype"]),
            entry["switch"],
            num(len(entry["removes"])),
            num(cost.get("fused_ms")),
            num(cost.get("fused_with_switch_ms")),
            num(cost.get("eager_ms")),
            ratio(cost.get("slowdown"), cost.get("slowdown_ci95")),
            ratio(cost.get("aa_ratio"), cost.get("aa_ratio_ci95")),
            cost.get("resolved", "—"),
            f"{entry['dtype']}: {answers['outcome']} ({answers['figure']})" if answers else "no verdict",
        ]

    header = [
        "chain",
        "op",
        "kind",
        "dtype",
        "switch",
        "counter-examples removed",
        "fused (ms)",
        "fused with switch (ms)",
        "eager (ms)",
        "slowdown [95 %]",
        "A/A control [95 %]",
        "cost",
        "verdict it answers",
    ]
    costs = (
        "Times are medians of interleaved rounds in this run (from the distribution with the most rounds); "
        "slowdown is the median per-round ratio of fused with the switch over fused, with its 95 % sign-test "
        "interval. The A/A control is a second plain fused executor timed in the same rounds: a cost reads "
        "'slower' or 'faster' only where the slowdown's interval lies outside the control's, else 'not "
        "resolved' (the switch costs less than the timing can tell). The verdict is task B's over the chain "
        "× dtype's parts (both distributions)."
    )
    recommended, others = doc["entries"], doc.get("not_recommended", [])
    if recommended:
        s.table(
            header,
            [row(e) for e in recommended],
            caption="The switch list, one entry per chain × dtype × op × switch over both input distributions: "
            "switches that remove counter-examples on the deciding measure (beyond the margin) of a chain × "
            "dtype whose verdict is not SUPPORTED, the counter-examples each removes and what it costs. " + costs,
        )
    else:
        s.paragraph(
            f"No switch is recommended on {doc['device']}: no switch found removes a counter-example on the deciding "
            "measure of a chain × dtype whose verdict is not SUPPORTED."
        )
    if others:
        s.table(
            [*header, "why not recommended"],
            [[*row(e), e.get("why_not_recommended", "—")] for e in others],
            caption="Switches found but not recommended (in the switch file under not_recommended, which "
            "--fusion-switches does not apply): each removes counter-examples, but the evidence does not show "
            "that fusion made the chain × dtype less accurate. " + costs,
        )


def _unexplained_table(s, counterexamples: list[tuple[dict, dict]]):
    rows = [
        [
            e["chain"],
            e["dtype"],
            b_distribution(e.get("distribution", "")),
            num(c.get("set")),
            status(c),
            (c.get("attribution") or {}).get("reason") or "—",
            num((c.get("attribution") or {}).get("reruns")),
        ]
        for e, c in counterexamples
        if status(c) in ("unexplained", "n/a")
    ]
    if rows:
        s.table(
            ["chain", "dtype", "inputs", "set", "status", "reason", "reruns"],
            rows,
            summary=f"{len(rows)} counter-examples no switch explains, with the reason",
        )


def _applied(s, evidence: list[dict]):
    """A run made with --fusion-switches FILE: the switches it applied to the fused path."""
    applied = list(
        dict.fromkeys(
            f"{e['chain']} {e['dtype']}: {a.get('op', '?')} {a.get('switch', '?')}"
            for e in evidence
            for a in e.get("applied_switches") or []
        )
    )
    if applied:
        s.paragraph(
            f"This run applied {len(applied)} switches to the fused path (--fusion-switches): "
            + "; ".join(applied)
            + ". Its fused figures are those of the switched path; the benchmark counter fused_ms_without_switches "
            "keeps the unswitched time."
        )


def first_screen_html(lines: list[tuple[str, str]]) -> list[str]:
    """Each (line, anchor of the section it summarises) as a linked paragraph."""
    return [f"<p class='runline attribution'><a href='#{anchor}'>{html.escape(line)}</a></p>" for line, anchor in lines]
