#!/usr/bin/env python3
"""What Inductor's code generation does to the numerics of a few small graphs, on one GPU.

One unattended run measures, for each case (an op, a dtype, a shape), eager ATen and
torch.compile(fullgraph=True, dynamic=False) under Inductor's default options and under
variants of them (options introspected from the installed torch, never assumed), every output
against an fp64 reference (the same ops on the inputs upcast to float64, correctly rounded to the
output dtype) in ULPs, against eager bit for bit, and against the default compiled variant. The
evidence is the generated code (read from a fresh TORCHINDUCTOR_CACHE_DIR per variant), the launch
configurations Inductor chose, and the PTX Triton wrote (a fresh TRITON_CACHE_DIR per variant).

Experiments, most valuable first (a spent budget drops the tail):
  c3      rsqrt and division: libdevice.rsqrt vs 1/sqrt, div_rn vs '/', FTZ, fast math
  fma     a*b+c: FMA contraction on and off (Triton env vars in child processes, Inductor options,
          a patched Triton option parser), PTX fma.rn counts
  c1      scalar lowering: x*0.7+y with an immediate, a full_like tensor, an input tensor
  c2      reduction blocking: sum and layer_norm at row lengths 1024, 8192, 65536 under persistent,
          split, cooperative, multi-kernel, deterministic and strict-reduction options
  strict  strict numerics control: numerics=strict*, emulate_precision_casts on gelu(x*0.7+y)*z
          and layer_norm

Usage (on the GPU machine; python3 with torch and triton; no network):
  python3 tools/gpu/inductor_mechanisms.py --out result.json --budget-s 420
  python3 tools/gpu/inductor_mechanisms.py --device cpu --sizes small --budget-s 60 --out dry.json
A full run at default sizes is about 150 compiles of small graphs under torch 2.11 (each in a
fresh cache). The budget is checked before every compile, so the run ends at most one compile
after it (--variant-timeout-s bounds that one; the fma child process gets 60 s of grace).
--keep-work keeps each variant's cache directory (generated code, PTX, cubins) for inspection.

The JSON file is rewritten (FILE.tmp, then renamed) after every variant, so a killed run keeps what
it measured. Exit 0 unless the arguments are bad (2) or no experiment could run at all (1).

This file is the command (its arguments and the run's order); what it runs is in tools/gpu/mechanisms/
(catalogue, measures, evidence, runner, experiments, findings, printing: its __init__ lists them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from mechanisms.catalogue import (
    DEFAULT_SEED,
    EXPERIMENT_TITLES,
    EXPERIMENTS,
    FP_FUSION_ENV,
    SCHEMA,
    SIZES,
    Variant,
    op_fma,
)
from mechanisms.experiments import RUNNERS
from mechanisms.findings import FINDERS
from mechanisms.header import build_header
from mechanisms.printing import print_table
from mechanisms.process import Budget, _progress, hard_timeout
from mechanisms.records import error_record, now_utc, write_json_atomic
from mechanisms.runner import Runner


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", required=True, help="JSON file to write (FILE.tmp, then renamed)")
    p.add_argument(
        "--budget-s",
        type=float,
        default=120.0,
        help="wall-clock budget from start; no new variant starts after it (default 120)",
    )
    p.add_argument(
        "--device",
        choices=["cuda", "cpu"],
        default="cuda",
        help="cuda (the measurement) or cpu (a dry run of the C++ backend)",
    )
    p.add_argument("--sizes", choices=sorted(SIZES), default="default", help="tensor sizes (small: for tests)")
    p.add_argument(
        "--only",
        default=",".join(EXPERIMENTS),
        help=f"comma-separated experiments, in the order run: {','.join(EXPERIMENTS)}",
    )
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--variant-timeout-s", type=float, default=120.0, help="hard limit of one compile+run (SIGALRM)")
    p.add_argument(
        "--work-dir",
        default=None,
        help="where per-variant cache directories go (default: a new temporary directory, removed at the end)",
    )
    p.add_argument(
        "--keep-work", action="store_true", help="keep the per-variant cache directories (generated code, PTX)"
    )
    p.add_argument(
        "--fp-fusion",
        choices=sorted(FP_FUSION_ENV),
        default="default",
        help="set Triton's FP-fusion environment before importing torch (used by the fma child processes)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--save-outputs", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--dry-run-children",
        action="store_true",
        help="on cpu, run the fma child processes anyway (tests the subprocess path)",
    )
    args = p.parse_args(argv)
    if not args.budget_s > 0:
        p.error("--budget-s must be > 0")
    if args.variant_timeout_s <= 0:
        p.error("--variant-timeout-s must be > 0")
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = [x for x in only if x not in EXPERIMENTS]
    if bad or not only:
        p.error(f"--only: unknown experiment(s) {bad}; choose from {EXPERIMENTS}")
    args.only = [x for x in EXPERIMENTS if x in only]
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        p.error(f"--out: directory {out_dir} does not exist")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    budget = Budget(args.budget_s)
    # Before torch is imported: Triton's FP fusion (child processes) and in-process compilation
    # (so per-variant TRITON_CACHE_DIR and the Triton option patch reach every compile).
    os.environ.update(FP_FUSION_ENV[args.fp_fusion])
    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    data = {
        "schema": SCHEMA,
        "status": "starting",
        "header": {
            "started_utc": now_utc(),
            "argv": sys.argv if argv is None else ["inductor_mechanisms.py", *argv],
            "device": args.device,
            "sizes": args.sizes,
            "size_table": SIZES[args.sizes],
            "seed": args.seed,
            "seed_note": "each case's inputs come from torch.Generator('cpu').manual_seed(seed + crc32(case id)) and are then moved to the device",
            "budget_s": args.budget_s,
            "order": args.only,
            "child": args.child,
            "fp_fusion_env": FP_FUSION_ENV[args.fp_fusion],
            "env_at_start": {
                k: v
                for k, v in os.environ.items()
                if k.startswith(("TORCHINDUCTOR_", "TRITON_", "TORCH_COMPILE", "CUDA_VISIBLE"))
            },
            "reference": "the same function on the inputs upcast to float64 (same device), rounded to the output dtype with round-to-odd through float32",
            "ulp": "distance between ordered integers of the output dtype (+0 == -0); NaN on one side only is counted as nan_mismatch and left out of max/p99",
        },
        "experiments": {},
    }
    write_json_atomic(args.out, data)
    try:
        import torch
        import torch._dynamo
        import torch._inductor.config
        import torch._inductor.utils
    except Exception as exc:
        data["status"] = "failed"
        data["error"] = error_record(exc)
        write_json_atomic(args.out, data)
        print(f"cannot import torch: {exc!r}", file=sys.stderr)
        return 1
    if args.device == "cuda" and not torch.cuda.is_available():
        data["status"] = "failed"
        data["error"] = {
            "type": "NoCuda",
            "message": f"torch.cuda.is_available() is False (torch {torch.__version__}, built for CUDA {torch.version.cuda})",
        }
        write_json_atomic(args.out, data)
        print(data["error"]["message"], file=sys.stderr)
        return 1
    own_work = args.work_dir is None
    work = args.work_dir or tempfile.mkdtemp(prefix="inductor_mechanisms_")
    os.makedirs(work, exist_ok=True)
    data["header"]["work_dir"] = work
    r = Runner(args, budget, data, work)
    torch._inductor.config.compile_threads = 1
    try:
        build_header(r)
    except Exception as exc:
        data["header"]["header_error"] = error_record(exc)
    data["status"] = "running"
    r.save()
    if not budget.spent():
        # One throwaway compile, so that the first variant's compile_s does not carry the
        # process's one-time costs (Triton and CUDA initialisation, precompiled headers).
        _progress("warm-up compile")
        t0 = time.monotonic()
        try:
            with hard_timeout(args.variant_timeout_s):
                r.compile_and_run(op_fma, [torch.ones(64, device=r.dev)] * 3, Variant("default"), "warmup")
            data["header"]["warmup_s"] = round(time.monotonic() - t0, 2)
        except Exception as exc:
            data["header"]["warmup_error"] = error_record(exc)
        r.save()
    for eid in args.only:
        exp = {"id": eid, "title": EXPERIMENT_TITLES[eid], "status": "running", "cases": []}
        data["experiments"][eid] = exp
        if budget.spent():
            exp["status"] = "skipped"
            exp["reason"] = f"budget spent ({budget.used():.1f} s of {budget.seconds:.0f} s)"
            exp["finding"] = "not run: " + exp["reason"]
            r.save()
            continue
        t0 = time.monotonic()
        try:
            RUNNERS[eid](r, exp)
            complete = all(
                c.get("status") == "done" and all(v.get("status") != "skipped" for v in c["variants"])
                for c in exp["cases"]
            )
            exp["status"] = "done" if complete else "partial"
        except Exception as exc:
            exp["status"] = "error"
            exp["error"] = error_record(exc)
        exp["elapsed_s"] = round(time.monotonic() - t0, 2)
        try:
            exp["finding"] = FINDERS[eid](exp)
        except Exception as exc:
            exp["finding"] = f"finding failed: {exc!r}"
        r.save()
    data["status"] = "budget_exhausted" if budget.spent() else "complete"
    data["header"]["finished_utc"] = now_utc()
    data["summary"] = summarize(data)
    r.save()
    if own_work and not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    if not args.child:
        print_table(data)
    print(f"wrote {args.out}: {json.dumps(data['summary'])}", file=sys.stderr)
    return 0 if r.n_ok > 0 else 1


def summarize(data: dict) -> dict:
    counts = {}
    for exp in data["experiments"].values():
        for c in exp.get("cases", []):
            for v in c.get("variants", []):
                counts[v.get("status", "?")] = counts.get(v.get("status", "?"), 0) + 1
    return {"variants_by_status": counts, "elapsed_s": data["header"].get("elapsed_s")}


if __name__ == "__main__":
    sys.exit(main())
