"""Task D's section: bit equality of eager and fused per subgraph × dtype × shape, and each mismatch's
mechanism."""

from __future__ import annotations

from reports.claims import d as claim
from reports.numbers import num
from reports.sections import DTYPES, show


def render(s, result):
    facts = claim.facts(result)
    show(s, claim.verdicts(facts))
    rows = facts.cases
    if not rows:
        return
    counter = [(f, b) for f, b in rows if b["bit_equal"] != 1]
    mechanisms = claim.mechanisms(facts)
    shapes = list(dict.fromkeys(f["shape"] for f, _ in rows))
    subgraphs = list(dict.fromkeys(f["subgraph"] for f, _ in rows))
    table = []
    for sub in subgraphs:
        for dtype in DTYPES:
            cells = []
            for shape in shapes:
                b = next((b for f, b in rows if (f["subgraph"], f["dtype"], f["shape"]) == (sub, dtype, shape)), None)
                cells.append("—" if b is None else ("yes" if b["bit_equal"] == 1 else f"no ({num(b['mismatches'])})"))
            if any(c != "—" for c in cells):
                table.append([sub, dtype] + cells)
    if counter:
        s.table(
            ["benchmark", "mismatches", "mechanism"],
            [[b["name"], num(b["mismatches"]), mechanisms.get(b["name"], "—")] for _, b in counter],
            caption="Counter-examples (evidence in the dump directory). The mechanism is the smallest set of "
            "switches after which fused is bit-equal to eager, found as for task B (its attribution section "
            "says how); '—' where the evidence has no attribution:",
        )
    else:
        s.paragraph(
            "The promotion chains (concat of the dtype with f32; f16 with bf16, which promotes to f32) widen "
            "exactly in both executors, so they stay bit-equal too."
        )
    s.table(
        ["subgraph", "dtype"] + [f"bit-equal {sh}" for sh in shapes],
        table,
        summary=f"Every check: {len(subgraphs)} subgraphs × dtypes × {len(shapes)} shapes",
    )
