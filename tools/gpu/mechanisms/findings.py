"""Findings: sentences computed from the recorded numbers, one per case and one per experiment."""

from __future__ import annotations

from .records import fmt_int


def _ok(variants):
    return [v for v in variants if v.get("status") == "ok"]


def _find(variants, name):
    for v in variants:
        if v.get("name") == name:
            return v
    return None


def _src_summary(src: dict) -> str:
    if not src:
        return ""
    bits = [f"{src.get('kernel_count', 0)} kernel(s)"]
    if src.get("decorators"):
        bits.append("/".join(src["decorators"]))
    if src.get("R0_BLOCK"):
        bits.append("R0_BLOCK " + ",".join(map(str, src["R0_BLOCK"])))
    for key, label in (
        ("libdevice_rsqrt", "libdevice.rsqrt"),
        ("div_rn", "div_rn"),
        ("slash_div", "'/'"),
        ("fma", "fma"),
        ("sqrt", "sqrt"),
    ):
        if src.get(key):
            bits.append(f"{label} x{src[key]}")
    if src.get("rsqrt") and not src.get("libdevice_rsqrt"):
        bits.append(f"rsqrt x{src['rsqrt']}")
    if src.get("to_fp16") or src.get("to_bf16"):
        bits.append(f"lowp casts x{src.get('to_fp16', 0) + src.get('to_bf16', 0)}")
    if src.get("enable_fp_fusion"):
        bits.append("enable_fp_fusion=" + "/".join(src["enable_fp_fusion"]))
    if src.get("extern_kernel_calls"):
        bits.append(f"extern x{src['extern_kernel_calls']}")
    return ", ".join(bits)


def _chosen(v: dict) -> str:
    out = []
    for k in v.get("runtime_configs") or []:
        for launcher in k.get("launchers", [])[:1]:
            kw = launcher.get("kwargs", {})
            r = kw.get("R0_BLOCK", kw.get("RBLOCK"))
            s = f"{k['kernel']}: " + ", ".join(f"{a}={b}" for a, b in kw.items())
            if launcher.get("num_warps") is not None:
                s += f", num_warps={launcher['num_warps']}"
            if r is not None or launcher.get("num_warps") is not None:
                out.append(s)
    return "; ".join(out)


def _ptx_summary(v: dict) -> str:
    p = v.get("ptx")
    if not p:
        return ""
    t = p["totals"]
    keys = [k for k in ("fma.rn", "div.full.f32", "div.rn.f32", "rsqrt.approx", "sqrt.rn", "rcp.rn", "ftz") if t.get(k)]
    return f"PTX ({p['n_ptx']} file(s)): " + (", ".join(f"{k} x{t[k]}" for k in keys) or "none of fma.rn/div/rsqrt/ftz")


def variant_sentence(v: dict, n: int, default: bool) -> str:
    st = v.get("status")
    if st != "ok":
        why = (
            v.get("reason")
            or (v.get("error") or {}).get("type", "") + ": " + (v.get("error") or {}).get("message", "")[:160]
        )
        return f"{v['name']}: {st} ({why})"
    u = v["ulp_vs_fp64"]
    s = f"{v['name']}: "
    if v["bit_equal_eager"]:
        s += "bit-equal to eager"
    else:
        s += f"differs from eager in {fmt_int(v['n_diff_eager'])} of {fmt_int(n)} elements (up to {v['ulp_vs_eager'].get('max')} ULP apart)"
    s += f"; max/p99 ULP vs fp64 {u.get('max')}/{u.get('p99')}"
    if u.get("nan_mismatch"):
        s += f", {fmt_int(u['nan_mismatch'])} NaN mismatches"
    if not default and "bit_equal_default" in v:
        s += (
            "; bits same as default"
            if v["bit_equal_default"]
            else f"; differs from default in {fmt_int(v['n_diff_default'])}"
        )
    if not v.get("rerun_bit_equal", True):
        s += "; a second call gave different bits"
    src = _src_summary(v.get("source"))
    if src:
        s += f"; source: {src}"
    ch = _chosen(v)
    if ch:
        s += f"; launch: {ch}"
    px = _ptx_summary(v)
    if px:
        s += f"; {px}"
    return s


def case_finding(case: dict) -> str:
    if case.get("status") in ("skipped", "error"):
        return f"{case['id']}: {case['status']}"
    n = case["output"]["n_elements"]
    e = case["eager"]["ulp_vs_fp64"]
    parts = [f"{case['id']} ({fmt_int(n)} elements): eager max/p99 ULP vs fp64 {e.get('max')}/{e.get('p99')}"]
    for v in case["variants"]:
        parts.append(variant_sentence(v, n, v["name"] == "default"))
    return ". ".join(parts)


def _cases_done(exp):
    return [c for c in exp["cases"] if c.get("status") == "done"]


def generic_experiment_finding(exp: dict) -> str:
    cases = _cases_done(exp)
    if not cases:
        return "no case ran"
    d_ok = [(c, _find(c["variants"], "default")) for c in cases]
    d_ok = [(c, d) for c, d in d_ok if d and d.get("status") == "ok"]
    eq = [c["id"] for c, d in d_ok if d["bit_equal_eager"]]
    neq = [(c["id"], d["n_diff_eager"], c["output"]["n_elements"]) for c, d in d_ok if not d["bit_equal_eager"]]
    if d_ok:
        s = f"default compiled is bit-equal to eager in {len(eq)} of {len(d_ok)} cases"
    else:
        s = "no case has a default compiled result"
    if neq:
        s += " (differs: " + "; ".join(f"{i} {fmt_int(a)}/{fmt_int(b)}" for i, a, b in neq) + ")"
    ulp = [(c["id"], d["ulp_vs_fp64"].get("max"), c["eager"]["ulp_vs_fp64"].get("max")) for c, d in d_ok]
    worse = [f"{i} {a} vs {b}" for i, a, b in ulp if a is not None and b is not None and a > b]
    better = [f"{i} {a} vs {b}" for i, a, b in ulp if a is not None and b is not None and a < b]
    if worse:
        s += "; compiled max ULP vs fp64 above eager's in " + "; ".join(worse)
    if better:
        s += "; below eager's in " + "; ".join(better)
    fixes, changes, statuses = {}, {}, {}
    for c, d in d_ok:
        for v in _ok(c["variants"]):
            if v["name"] == "default":
                continue
            if v["bit_equal_eager"] and not d["bit_equal_eager"]:
                fixes.setdefault(v["name"], []).append(c["id"])
            if not v.get("bit_equal_default", True):
                changes.setdefault(v["name"], []).append(c["id"])
    for c in cases:
        for v in c["variants"]:
            if v.get("status") in ("absent", "n/a", "error", "skipped"):
                statuses.setdefault(v["status"], set()).add(v["name"])
    if fixes:
        s += "; variants that reach bit equality with eager where default does not: " + "; ".join(
            f"{k} ({len(v)}: {', '.join(v)})" for k, v in fixes.items()
        )
    if changes:
        s += "; variants that change the bits vs default: " + "; ".join(
            f"{k} ({len(v)} case(s))" for k, v in changes.items()
        )
    else:
        s += "; no variant changed the bits vs default"
    for st, names in statuses.items():
        s += f"; {st}: " + ", ".join(sorted(names))
    return s


def finding_c3(exp: dict) -> str:
    s = generic_experiment_finding(exp)
    facts = []
    for c in _cases_done(exp):
        d = _find(c["variants"], "default")
        if d and d.get("status") == "ok":
            src = d["source"]
            what = []
            if src.get("libdevice_rsqrt"):
                what.append("libdevice.rsqrt")
            elif src.get("rsqrt"):
                what.append("rsqrt")
            if src.get("sqrt") and src.get("slash_div"):
                what.append("1/sqrt")
            if src.get("div_rn"):
                what.append("div_rn")
            elif src.get("slash_div"):
                what.append("'/'")
            px = (d.get("ptx") or {}).get("totals", {})
            ptx = [k for k in ("div.full.f32", "div.rn.f32", "rsqrt.approx", "rcp.rn") if px.get(k)]
            facts.append(
                f"{c['id']}: {'+'.join(what) or 'none of rsqrt/div'}" + (f" (PTX {', '.join(ptx)})" if ptx else "")
            )
        for v in _ok(c["variants"]):
            if v["name"] != "default" and d and d.get("status") == "ok":
                a, b = v["source"], d["source"]
                delta = [k for k in ("libdevice_rsqrt", "rsqrt", "div_rn", "slash_div", "sqrt") if a.get(k) != b.get(k)]
                if delta:
                    facts.append(
                        f"{c['id']} {v['name']} changes source "
                        + ", ".join(f"{k} {b.get(k)}->{a.get(k)}" for k in delta)
                    )
    if facts:
        s += ". Default source: " + "; ".join(facts)
    return s


def finding_fma(exp: dict) -> str:
    parts = []
    for c in _cases_done(exp):
        bits = []
        for v in c["variants"]:
            if v.get("status") != "ok":
                bits.append(f"{v['name']}: {v.get('status')}")
                continue
            p = (v.get("ptx") or {}).get("totals", {})
            fma = p.get("fma.rn")
            eq = "== eager" if v["bit_equal_eager"] else f"!= eager in {fmt_int(v['n_diff_eager'])}"
            fus = "/".join(v["source"].get("enable_fp_fusion") or []) or "unset"
            b = f"{v['name']}: {eq}, max ULP vs fp64 {v['ulp_vs_fp64'].get('max')}, triton_meta enable_fp_fusion={fus}"
            if fma is not None:
                b += f", PTX fma.rn x{fma}"
            if v["name"] != "default" and "bit_equal_default" in v:
                b += (
                    ", same bits as default"
                    if v["bit_equal_default"]
                    else f", {fmt_int(v['n_diff_default'])} differ from default"
                )
            bits.append(b)
        parts.append(f"{c['id']} (eager max ULP vs fp64 {c['eager']['ulp_vs_fp64'].get('max')}): " + "; ".join(bits))
    for ch in exp.get("children", []):
        if ch.get("status") != "done":
            why = ch.get("reason") or (ch.get("error") or {}).get("message", "")
            parts.append(f"child {ch.get('variant')}: {ch.get('status')}" + (f" ({why})" if why else ""))
    return " | ".join(parts) if parts else "no case ran"


def finding_c1(exp: dict) -> str:
    parts = []
    for cmp in exp.get("comparisons", []):
        if "n_diff" in cmp:
            same = cmp["n_diff"] == 0
            parts.append(
                f"{cmp['what']}: "
                + (
                    f"identical in all {fmt_int(cmp['n'])}"
                    if same
                    else f"differ in {fmt_int(cmp['n_diff'])} of {fmt_int(cmp['n'])}"
                )
            )
        else:
            parts.append(f"{cmp['what']}: {cmp.get('status', 'not compared')}")
    consts = []
    for c in _cases_done(exp):
        d = _find(c["variants"], "default")
        if d and d.get("status") == "ok" and d["source"].get("float_constants"):
            consts.append(f"{c['id']}: {', '.join(d['source']['float_constants'])}")
    s = "; ".join(parts) or "no comparison ran"
    if consts:
        s += ". Float constants in the compiled code: " + "; ".join(consts)
    return s + ". " + generic_experiment_finding(exp)


def finding_c2(exp: dict) -> str:
    s = generic_experiment_finding(exp)
    launch = []
    for c in _cases_done(exp):
        for v in _ok(c["variants"]):
            if v["name"] in ("default", "triton.persistent_reductions=False", "split_reductions=False"):
                ch = _chosen(v) or _src_summary(v["source"])
                launch.append(f"{c['id']} {v['name']}: {ch}")
    if launch:
        s += ". Launch/blocking: " + " | ".join(launch)
    return s


def finding_strict(exp: dict) -> str:
    s = generic_experiment_finding(exp)
    rows = []
    for c in _cases_done(exp):
        rows.append(f"{c['id']}: " + ", ".join(f"{v['name']} {fmt_int(v['n_diff_eager'])}" for v in _ok(c["variants"])))
    if rows:
        s += ". Elements differing from eager: " + " | ".join(rows)
    return s


FINDERS = {"c3": finding_c3, "fma": finding_fma, "c1": finding_c1, "c2": finding_c2, "strict": finding_strict}
