"""The five experiments, most valuable first: each builds its cases (an op, seeded inputs, variants)
and hands them to the runner; fma also runs child processes of the command under Triton's
environment settings and compares their outputs with its own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

from .catalogue import (
    FMA_CHILDREN,
    FP_FUSION_ENV,
    NA_TRITON,
    Variant,
    dtype_of,
    inp_f32_subnormal,
    inp_log_uniform,
    inp_normal,
    inp_uniform,
    op_div,
    op_fma,
    op_gelu_chain,
    op_layer_norm,
    op_rmsnorm,
    op_rsqrt,
    op_scalar_full_like,
    op_scalar_immediate,
    op_scalar_input,
    op_sum_f32,
    opt,
    variants_c3,
)
from .findings import _find, case_finding
from .measures import bits_equal_count
from .process import _progress
from .records import _fname, error_record
from .runner import Runner

# the command the fma experiment's child processes run: this package's command, with --child
COMMAND = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "inductor_mechanisms.py")


def exp_c3(r: Runner, exp: dict):
    torch = r.torch
    ew, rms, sub = r.sizes["ew"], r.sizes["rms"], r.sizes["subnormal"]
    specs = []
    specs.append(
        (
            "div/f32/normal",
            op_div,
            lambda s: [inp_normal(ew, torch.float32, s), inp_log_uniform(ew, -8, 8, torch.float32, s + 1, signed=True)],
            variants_c3("div", "f32"),
            "a/b, a ~ N(0,1), |b| = 2^U(-8,8) random sign",
        )
    )
    specs.append(
        (
            "rsqrt/f32/normal",
            op_rsqrt,
            lambda s: [inp_log_uniform(ew, -60, 60, torch.float32, s)],
            variants_c3("rsqrt", "f32"),
            "rsqrt(x), x = 2^U(-60,60)",
        )
    )
    specs.append(
        (
            "rmsnorm/f32",
            op_rmsnorm,
            lambda s: [inp_normal(rms, torch.float32, s)],
            variants_c3("rmsnorm", "f32"),
            "x*rsqrt(mean(x^2,-1)+1e-6), x ~ N(0,1)",
        )
    )
    specs.append(
        (
            "div/f32/subnormal",
            op_div,
            lambda s: [
                inp_f32_subnormal(sub, s, signed=True),
                inp_log_uniform(sub, -1, 2, torch.float32, s + 1, signed=True),
            ],
            variants_c3("div_subnormal", "f32"),
            "a/b, a float32 subnormal, |b| = 2^U(-1,2)",
        )
    )
    specs.append(
        (
            "rsqrt/f32/subnormal",
            op_rsqrt,
            lambda s: [inp_f32_subnormal(sub, s)],
            variants_c3("rsqrt_subnormal", "f32"),
            "rsqrt(x), x float32 subnormal",
        )
    )
    for dn, lo, hi in (("f16", -14, 15), ("bf16", -100, 100)):
        dt = dtype_of(dn)
        specs.append(
            (
                f"rsqrt/{dn}",
                op_rsqrt,
                lambda s, dt=dt, lo=lo, hi=hi: [inp_log_uniform(ew, lo, hi, dt, s)],
                variants_c3("rsqrt", dn),
                f"rsqrt(x), x = 2^U({lo},{hi})",
            )
        )
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        specs.append(
            (
                f"div/{dn}",
                op_div,
                lambda s, dt=dt: [inp_normal(ew, dt, s, scale=4.0), inp_log_uniform(ew, -4, 4, dt, s + 1, signed=True)],
                variants_c3("div", dn),
                "a/b, a ~ N(0,16), |b| = 2^U(-4,4)",
            )
        )
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        specs.append(
            (
                f"rmsnorm/{dn}",
                op_rmsnorm,
                lambda s, dt=dt: [inp_normal(rms, dt, s)],
                variants_c3("rmsnorm", dn),
                "x*rsqrt(mean(x^2,-1)+1e-6), x ~ N(0,1)",
            )
        )
    for cid, fn, inputs, variants, desc in specs:
        r.run_case(exp, {"id": cid, "fn": fn, "inputs": inputs, "variants": variants, "desc": desc})


def fma_variants(r: Runner, child: bool):
    if child:
        return [Variant("default")]
    v = [Variant("default")]
    # Inductor options about FP contraction, whatever this torch calls them
    for key in sorted(r.config_keys()):
        low = key.lower()
        if ("fp_fusion" in low or "fma" in low or "fp_contract" in low) and not key.startswith(
            ("cpp.", "cuda.", "rocm.", "xpu.", "cutlass.")
        ):
            try:
                val = r.config_get(key)
            except Exception:
                continue
            if isinstance(val, bool):
                v.append(opt(key, not val, triton=True, note="found by introspection"))
    v.append(
        opt(
            "emulate_precision_casts",
            True,
            note="recent Inductor sets Triton's enable_fp_fusion = not emulate_precision_casts",
        )
    )
    v.append(
        Variant(
            "triton parse_options enable_fp_fusion=False",
            patch="triton_parse_options",
            triton_only="n/a on cpu: patches Triton's CUDA option parser",
            note="Triton's CUDABackend.parse_options patched to force enable_fp_fusion=False (overrides Inductor's explicit value)",
        )
    )
    return v


def exp_fma(r: Runner, exp: dict):
    torch = r.torch
    ew = r.sizes["ew"]
    child = r.args.child
    specs = [
        (
            "fma/f32",
            lambda s: [
                inp_normal(ew, torch.float32, s),
                inp_normal(ew, torch.float32, s + 1),
                inp_normal(ew, torch.float32, s + 2),
            ],
            "a*b+c, all ~ N(0,1) float32",
        ),
        (
            "fma/f16",
            lambda s: [
                inp_normal(ew, torch.float16, s),
                inp_normal(ew, torch.float16, s + 1),
                inp_normal(ew, torch.float16, s + 2),
            ],
            "a*b+c, all ~ N(0,1) float16",
        ),
    ]
    procs = []
    if not child:
        procs = start_fma_children(r, exp)
    keep = {}
    for cid, inputs, desc in specs:
        r.run_case(
            exp,
            {"id": cid, "fn": op_fma, "inputs": inputs, "variants": fma_variants(r, child), "desc": desc},
            keep=keep,
            digest=True,
        )
    if not child:
        finish_fma_children(r, exp, procs, keep)


def triton_language_knob(name: str) -> bool:
    try:
        import triton

        return hasattr(triton.knobs.language, name)
    except Exception:
        return False


def start_fma_children(r: Runner, exp: dict) -> list:
    procs = []
    for val in FMA_CHILDREN:
        env_desc = " ".join(f"{k}={v}" for k, v in FP_FUSION_ENV[val].items())
        rec = {"fp_fusion": val, "env": FP_FUSION_ENV[val], "variant": f"env {env_desc}"}
        exp.setdefault("children", []).append(rec)
        if r.dev.type == "cpu" and not r.args.dry_run_children:
            rec["status"] = "n/a"
            rec["reason"] = (
                "n/a on cpu: Triton's environment variables do not reach the C++ backend (--dry-run-children runs them anyway)"
            )
            continue
        knob = {"force-off": "force_disable_fp_fusion", "0": "default_fp_fusion", "1": "default_fp_fusion"}.get(val)
        if knob and not triton_language_knob(knob):
            rec["status"] = "absent"
            rec["reason"] = f"this Triton has no knobs.language.{knob}, so {env_desc} does nothing"
            continue
        remaining = r.budget.remaining()
        if remaining <= 5:
            rec["status"] = "skipped"
            rec["reason"] = f"budget spent ({r.budget.used():.1f} s of {r.budget.seconds:.0f} s)"
            continue
        cdir = tempfile.mkdtemp(prefix=f"child_{_fname(val)}_", dir=r.work)
        out = os.path.join(cdir, "child.json")
        cmd = [
            sys.executable,
            COMMAND,
            "--child",
            "--only",
            "fma",
            "--fp-fusion",
            val,
            "--device",
            r.args.device,
            "--sizes",
            r.args.sizes,
            "--seed",
            str(r.args.seed),
            "--budget-s",
            f"{remaining:.1f}",
            "--out",
            out,
            "--save-outputs",
            os.path.join(cdir, "outputs"),
            "--work-dir",
            cdir,
            "--variant-timeout-s",
            str(r.args.variant_timeout_s),
        ]
        try:
            log = open(os.path.join(cdir, "child.log"), "w")  # closed in finish_fma_children
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            rec["status"] = "started"
            rec["pid"] = p.pid
            procs.append((rec, p, log, cdir, out, time.monotonic(), remaining))
            _progress(f"fma child started: {env_desc} (pid {p.pid})")
        except Exception as exc:
            rec["status"] = "error"
            rec["error"] = error_record(exc)
    return procs


def finish_fma_children(r: Runner, exp: dict, procs: list, keep: dict):
    torch = r.torch
    for rec in exp.get("children", []):
        if rec.get("status") in ("n/a", "absent", "skipped", "error"):
            for pcase in exp["cases"]:
                if pcase.get("status") == "done":
                    not_run = {"name": rec["variant"], "process": "child", "env": rec["env"], "status": rec["status"]}
                    not_run["reason"] = rec.get("reason") or (rec.get("error") or {}).get("message", "")
                    if rec.get("error"):
                        not_run["error"] = rec["error"]
                    pcase["variants"].append(not_run)
    for rec, p, log, cdir, out, t0, _remaining in procs:
        wait = max(10.0, r.budget.remaining() + 60.0)
        try:
            p.wait(timeout=wait)
            rec["returncode"] = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rec["returncode"] = "killed"
            rec["reason"] = f"killed after waiting {wait:.0f} s past its start"
        log.close()
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        try:
            with open(os.path.join(cdir, "child.log"), errors="replace") as f:
                rec["log_tail"] = f.read().splitlines()[-12:]
        except OSError:
            pass
        try:
            with open(out) as f:
                child = json.load(f)
        except Exception as exc:
            rec["status"] = "error"
            rec["error"] = error_record(exc)
            continue
        rec["status"] = "done"
        rec["child_header"] = {
            k: child["header"].get(k) for k in ("versions", "triton_knobs", "elapsed_s", "fp_fusion_env")
        }
        cexp = child.get("experiments", {}).get("fma", {})
        for ccase in cexp.get("cases", []):
            pcase = next((c for c in exp["cases"] if c["id"] == ccase["id"]), None)
            cv = _find(ccase.get("variants", []), "default")
            if pcase is None or cv is None:
                continue
            v = dict(cv)
            v["name"] = rec["variant"]
            v["process"] = "child"
            v["env"] = rec["env"]
            cd, pd = ccase.get("eager", {}).get("digest"), pcase.get("eager", {}).get("digest")
            v["eager_digest_same_as_parent"] = None if cd is None or pd is None else cd == pd
            for k in ("bit_equal_default", "n_diff_default"):
                v.pop(k, None)
            path = os.path.join(cdir, "outputs", _fname(ccase["id"], "default") + ".pt")
            dflt = keep.get((ccase["id"], "default"))
            if v.get("status") == "ok" and os.path.exists(path) and dflt is not None:
                try:
                    cout = torch.load(path).to(dflt.device)
                    n = bits_equal_count(cout, dflt)
                    v["n_diff_default"] = n
                    v["bit_equal_default"] = n == 0
                    eager = keep.get((ccase["id"], "eager"))
                    if eager is not None:
                        n_e = bits_equal_count(cout, eager)
                        v["n_diff_eager_parent"] = n_e
                except Exception as exc:
                    v["compare_error"] = error_record(exc)
            if r.dev.type == "cpu" and v.get("status") == "ok":
                v["status"] = "n/a"
                v["reason"] = (
                    "n/a on cpu: Triton's environment variables do not reach the C++ backend (ran only to test the subprocess path)"
                )
            elif v.get("status") == "ok":
                r.n_ok += 1
            pcase["variants"].append(v)
        if not r.args.keep_work:
            shutil.rmtree(cdir, ignore_errors=True)
        r.save()
    for pcase in exp["cases"]:
        if pcase.get("status") == "done":
            pcase["finding"] = case_finding(pcase)
    r.save()


def exp_c1(r: Runner, exp: dict):
    torch = r.torch
    ew = r.sizes["ew"]
    keep = {}
    forms = [
        ("immediate", op_scalar_immediate, "x*0.7+y (Python scalar)"),
        ("full_like", op_scalar_full_like, "x*full_like(x,0.7)+y (in-graph tensor)"),
        ("input_tensor", op_scalar_input, "x*s+y, s = full(0.7) passed as an input (control: cannot be folded)"),
    ]
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        for form, fn, desc in forms:

            def inputs(s, dt=dt, form=form, dn=dn):
                base = (r.args.seed + zlib.crc32(f"c1/{dn}".encode())) % (2**31)  # same x, y for every form
                xs = [inp_normal(ew, dt, base), inp_normal(ew, dt, base + 1)]
                if form == "input_tensor":
                    xs.append(torch.full(ew, 0.7, dtype=dt))
                return xs

            variants = [Variant("default"), opt("emulate_precision_casts", True)]
            r.run_case(
                exp,
                {"id": f"c1/{dn}/{form}", "fn": fn, "inputs": inputs, "variants": variants, "desc": desc},
                keep=keep,
            )
    comps = []
    for dn in ("f16", "bf16"):
        pairs = [
            ("eager immediate vs eager full_like", ("immediate", "eager"), ("full_like", "eager")),
            ("eager full_like vs eager input_tensor", ("full_like", "eager"), ("input_tensor", "eager")),
            ("compiled immediate vs compiled full_like", ("immediate", "default"), ("full_like", "default")),
            ("compiled immediate vs eager immediate", ("immediate", "default"), ("immediate", "eager")),
            ("compiled full_like vs eager full_like", ("full_like", "default"), ("full_like", "eager")),
            ("compiled full_like vs compiled input_tensor", ("full_like", "default"), ("input_tensor", "default")),
            ("compiled immediate vs eager full_like", ("immediate", "default"), ("full_like", "eager")),
            (
                "emulate_precision_casts: compiled immediate vs compiled full_like",
                ("immediate", "emulate_precision_casts=True"),
                ("full_like", "emulate_precision_casts=True"),
            ),
            (
                "emulate_precision_casts: compiled immediate vs eager immediate",
                ("immediate", "emulate_precision_casts=True"),
                ("immediate", "eager"),
            ),
            (
                "emulate_precision_casts: compiled full_like vs eager full_like",
                ("full_like", "emulate_precision_casts=True"),
                ("full_like", "eager"),
            ),
        ]
        for what, (fa, va), (fb, vb) in pairs:
            a, b = keep.get((f"c1/{dn}/{fa}", va)), keep.get((f"c1/{dn}/{fb}", vb))
            rec = {"what": f"{dn} {what}"}
            if a is None or b is None:
                rec["status"] = "not compared (an output is missing)"
            else:
                rec["n_diff"] = bits_equal_count(a, b)
                rec["n"] = a.numel()
            comps.append(rec)
    exp["comparisons"] = comps


def exp_c2(r: Runner, exp: dict):
    torch = r.torch
    red = r.sizes["red"]
    tri = "n/a on cpu: {what} only reaches Triton reductions (Inductor's C++ backend has a fixed per-thread cascade)"
    variants = [
        Variant("default"),
        Variant(
            "numerics=strict_reduction",
            {"numerics": "strict_reduction"},
            triton_only="n/a on cpu: strict reduction ordering needs Triton (has_triton_reduction_ordering)",
        ),
    ]
    variants += [opt("deterministic", True), opt("batch_invariant", True)]
    variants += [
        Variant(
            "triton.persistent_reductions=False",
            {"triton.persistent_reductions": False},
            tri.format(what="triton.persistent_reductions"),
        )
    ]
    variants += [Variant("split_reductions=False", {"split_reductions": False}, tri.format(what="split_reductions"))]
    variants += [
        Variant(
            "triton.cooperative_reductions=True",
            {"triton.cooperative_reductions": True},
            tri.format(what="triton.cooperative_reductions"),
        )
    ]
    variants += [
        Variant(
            "triton.force_cooperative_reductions=True",
            {"triton.cooperative_reductions": True, "triton.force_cooperative_reductions": True},
            tri.format(what="triton.force_cooperative_reductions"),
        )
    ]
    for mk in (1, 2, 3):
        variants.append(
            Variant(f"triton.multi_kernel={mk}", {"triton.multi_kernel": mk}, tri.format(what="triton.multi_kernel"))
        )
    variants.append(
        Variant("dynamic_scale_rblock=False", {"dynamic_scale_rblock": False}, tri.format(what="dynamic_scale_rblock"))
    )
    order = [
        ("sum", 65536),
        ("layer_norm", 8192),
        ("sum", 8192),
        ("layer_norm", 65536),
        ("sum", 1024),
        ("layer_norm", 1024),
    ]
    # Two tiers: the options most likely to matter on every case first, then the rest, so that a
    # spent budget drops the least valuable variants rather than whole cases.
    tier1, tier2 = variants[:7], variants[7:]
    # layer_norm only: Welford vs two-step variance (recent Inductor picks by row length on CUDA)
    tri_var = tri.format(what="triton.use_two_step_variance_*")
    variance = [
        Variant(
            "welford (triton.use_two_step_variance_threshold=0)", {"triton.use_two_step_variance_threshold": 0}, tri_var
        ),
        Variant(
            "two-step variance (min_numel=0, threshold=2**31-1)",
            {"triton.use_two_step_variance_min_numel": 0, "triton.use_two_step_variance_threshold": 2**31 - 1},
            tri_var,
        ),
    ]
    states = []
    for op, n in order:
        rows = red[n]
        shape = (rows, n)
        if op == "sum":
            spec = {
                "id": f"sum/f16->f32/{rows}x{n}",
                "fn": op_sum_f32,
                "inputs": lambda s, shape=shape: [inp_uniform(shape, torch.float16, s)],
                "variants": variants,
                "desc": "x.sum(-1, dtype=float32), x ~ U(0,1) float16",
            }
        else:
            spec = {
                "id": f"layer_norm/f16/{rows}x{n}",
                "fn": op_layer_norm,
                "inputs": lambda s, shape=shape, n=n: [
                    inp_normal(shape, torch.float16, s, scale=2.0, shift=0.5),
                    inp_normal((n,), torch.float16, s + 1, scale=0.2, shift=1.0),
                    inp_normal((n,), torch.float16, s + 2, scale=0.2),
                ],
                "variants": variants + variance,
                "desc": "layer_norm over the last dim, eps 1e-5, float16 weight and bias",
            }
        st = r.prepare_case(exp, spec)
        if st is not None:
            r.run_variants(exp, st, tier1)
            states.append(st)
    for st in states:
        r.run_variants(exp, st, tier2 + (variance if st["spec"]["fn"] is op_layer_norm else []))
        r.finish_case(st)
        st.clear()


def exp_strict(r: Runner, exp: dict):
    ew, ln = r.sizes["ew"], r.sizes["ln"]
    variants = [
        Variant("default"),
        Variant("numerics=strict_pointwise", {"numerics": "strict_pointwise"}),
        Variant("numerics=strict", {"numerics": "strict"}),
        opt("emulate_precision_casts", True),
        Variant(
            "emulate_precision_casts+use_pytorch_libdevice",
            {"emulate_precision_casts": True, "eager_numerics.use_pytorch_libdevice": True},
            NA_TRITON.format(what="eager_numerics.use_pytorch_libdevice"),
        ),
        Variant(
            "emulate_precision_casts+eager_numerics.division_rounding+disable_ftz",
            {
                "emulate_precision_casts": True,
                "eager_numerics.division_rounding": True,
                "eager_numerics.disable_ftz": True,
            },
            NA_TRITON.format(what="eager_numerics.*"),
            note="what numerics=strict_pointwise implies in torch 2.15, spelled out for a torch without numerics",
        ),
        Variant(
            "emulate_precision_casts+emulate_divison_rounding",
            {"emulate_precision_casts": True, "emulate_divison_rounding": True},
            NA_TRITON.format(what="emulate_divison_rounding"),
        ),
    ]
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        r.run_case(
            exp,
            {
                "id": f"gelu_chain/{dn}",
                "fn": op_gelu_chain,
                "inputs": lambda s, dt=dt: [
                    inp_normal(ew, dt, s),
                    inp_normal(ew, dt, s + 1),
                    inp_normal(ew, dt, s + 2),
                ],
                "variants": variants,
                "desc": "gelu(x*0.7+y)*z, all ~ N(0,1)",
            },
        )
    for dn in ("f16", "bf16"):
        dt = dtype_of(dn)
        n = ln[1]
        r.run_case(
            exp,
            {
                "id": f"layer_norm/{dn}/{ln[0]}x{n}",
                "fn": op_layer_norm,
                "inputs": lambda s, dt=dt, n=n: [
                    inp_normal(ln, dt, s, scale=2.0, shift=0.5),
                    inp_normal((n,), dt, s + 1, scale=0.2, shift=1.0),
                    inp_normal((n,), dt, s + 2, scale=0.2),
                ],
                "variants": variants,
                "desc": "layer_norm over the last dim, eps 1e-5",
            },
        )


RUNNERS = {"c3": exp_c3, "fma": exp_fma, "c1": exp_c1, "c2": exp_c2, "strict": exp_strict}
