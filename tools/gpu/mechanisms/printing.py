"""The table printed at the end of a run: one row per variant that ran, the rest counted, then each
experiment's finding."""

from __future__ import annotations

import sys

from .findings import _src_summary
from .records import fmt_int


def print_table(data: dict, out=None):
    """One row per variant that ran (or failed); variants absent, n/a or skipped are counted under
    each experiment instead."""
    out = out or sys.stdout
    rows = [
        ("exp", "case", "variant", "status", "maxULP", "p99", "diff vs eager", "=eager", "=dflt", "compile_s", "source")
    ]
    others = {}
    for eid in data["header"]["order"]:
        exp = data["experiments"].get(eid)
        if not exp:
            continue
        for c in exp.get("cases", []):
            if c.get("status") == "done":
                e = c["eager"]["ulp_vs_fp64"]
                rows.append((eid, c["id"], "(eager)", "ok", str(e.get("max")), str(e.get("p99")), "", "", "", "", ""))
            elif c.get("status") == "error":
                rows.append(
                    (
                        eid,
                        c["id"],
                        "(inputs/eager)",
                        "error",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        (c.get("error") or {}).get("type", ""),
                    )
                )
            for v in c.get("variants", []):
                st = v.get("status", "?")
                if st == "ok":
                    u = v["ulp_vs_fp64"]
                    cs = v.get("compile_s")
                    rows.append(
                        (
                            eid,
                            c["id"],
                            v["name"][:44],
                            "ok",
                            str(u.get("max")),
                            str(u.get("p99")),
                            f"{fmt_int(v['n_diff_eager'])}/{fmt_int(c['output']['n_elements'])}",
                            "yes" if v["bit_equal_eager"] else "no",
                            "" if "bit_equal_default" not in v else ("yes" if v["bit_equal_default"] else "no"),
                            f"{cs:.2f}" if isinstance(cs, float) else "",
                            _src_summary(v.get("source"))[:60],
                        )
                    )
                elif st == "error":
                    err = v.get("error") or {}
                    rows.append(
                        (
                            eid,
                            c["id"],
                            v["name"][:44],
                            "error",
                            "",
                            "",
                            "",
                            "",
                            "",
                            "",
                            f"{err.get('type', '')}: {err.get('message', '')}"[:60],
                        )
                    )
                else:
                    others.setdefault(eid, {}).setdefault(st, set()).add(v["name"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out)
    print(file=out)
    for eid in data["header"]["order"]:
        for st, names in sorted(others.get(eid, {}).items()):
            print(f"[{eid}] {st}: {', '.join(sorted(names))}", file=out)
    print(file=out)
    for eid in data["header"]["order"]:
        exp = data["experiments"].get(eid)
        if exp:
            print(f"[{eid}] {exp.get('status')}: {exp.get('finding', '')}", file=out)
            print(file=out)
