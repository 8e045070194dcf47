"""The runner: one case at a time, its inputs, eager output and fp64 reference, then each variant
compiled in a fresh cache, run twice, compared and its evidence read; the JSON file rewritten after
each."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import zlib

from .catalogue import SIZES, Variant
from .evidence import find_cuobjdump, ptx_facts, read_generated_code, runtime_configs, source_facts
from .findings import case_finding
from .measures import bits_equal_count, round_to_dtype, tensor_digest, ulp_stats
from .patches import PATCHES, triton_parse_options_available
from .process import Budget, _progress, env_vars, hard_timeout
from .records import _fname, error_record, write_json_atomic


class Runner:
    def __init__(self, args, budget: Budget, data: dict, work: str):
        import torch

        self.torch = torch
        self.args = args
        self.budget = budget
        self.data = data
        self.work = work
        self.dev = torch.device(args.device)
        self.sizes = SIZES[args.sizes]
        self.cuobjdump = find_cuobjdump() if args.device == "cuda" else None
        self._keys = None
        self.n_ok = 0
        self.n_variants = 0

    # ---- bookkeeping
    def save(self):
        self.data["header"]["elapsed_s"] = round(self.budget.used(), 2)
        write_json_atomic(self.args.out, self.data)

    def sync(self):
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()

    def config_keys(self):
        if self._keys is None:
            try:
                self._keys = set(self.torch._inductor.config.get_config_copy().keys())
            except Exception:
                self._keys = set()
        return self._keys

    def config_has(self, key: str) -> bool:
        if key in self.config_keys():
            return True
        obj = self.torch._inductor.config
        for part in key.split("."):
            try:
                obj = getattr(obj, part)
            except Exception:
                return False
        return True

    def config_get(self, key: str):
        obj = self.torch._inductor.config
        for part in key.split("."):
            obj = getattr(obj, part)
        return obj

    # ---- why a variant cannot run here (None: it can)
    def unavailable(self, v: Variant):
        for key in v.options:
            if not self.config_has(key):
                return "absent", f"torch._inductor.config has no '{key}' in torch {self.torch.__version__}"
        if v.patch == "triton_parse_options":
            ok, why = triton_parse_options_available()
            if not ok and self.dev.type == "cuda":
                return "absent", why
        if self.dev.type == "cpu" and v.triton_only:
            return "n/a", v.triton_only
        return None

    # ---- compile, run, gather evidence
    def compile_and_run(self, fn, args, v: Variant, tag: str, sass: bool = False):
        torch = self.torch
        vdir = tempfile.mkdtemp(prefix=re.sub(r"\W+", "_", tag)[:60] + "_", dir=self.work)
        tdir = os.path.join(vdir, "triton")
        from torch._dynamo.utils import counters

        def snapshot():
            return {g: dict(c) for g, c in counters.items()}

        clear = getattr(torch._inductor.utils, "clear_caches", None) or getattr(
            torch._inductor.utils, "clear_inductor_caches", None
        )
        with env_vars({"TORCHINDUCTOR_CACHE_DIR": vdir, "TRITON_CACHE_DIR": tdir}):
            if clear:
                clear()
            torch._dynamo.reset()
            before = snapshot()
            patch_cm = PATCHES[v.patch]() if v.patch else contextlib.nullcontext()
            with torch._inductor.config.patch(v.options), patch_cm, torch.no_grad():
                compiled = torch.compile(fn, fullgraph=True, dynamic=False)
                t0 = time.perf_counter()
                out = compiled(*args)
                self.sync()
                first_s = time.perf_counter() - t0
                t1 = time.perf_counter()
                out2 = compiled(*args)
                self.sync()
                second_s = time.perf_counter() - t1
            after = snapshot()
            code = read_generated_code(vdir)
            rcfg = runtime_configs(vdir) if self.dev.type == "cuda" else []
            ptx = ptx_facts(tdir, self.cuobjdump if sass else None) if self.dev.type == "cuda" else None
            torch._dynamo.reset()
            if clear:
                clear()
        diff = {}
        for g, keys in (
            ("stats", ("unique_graphs",)),
            ("frames", ("ok", "total")),
            ("inductor", ("fxgraph_cache_miss", "fxgraph_cache_hit", "fxgraph_cache_bypass")),
            ("aot_autograd", ("autograd_cache_miss", "autograd_cache_hit")),
        ):
            for k in keys:
                d = after.get(g, {}).get(k, 0) - before.get(g, {}).get(k, 0)
                if d:
                    diff[f"{g}.{k}"] = d
        info = {
            "compile_s": round(first_s - second_s, 4),
            "first_call_s": round(first_s, 4),
            "second_call_ms": round(second_s * 1e3, 3),
            "compiles": diff,
            "recompiled_on_second_call": diff.get("stats.unique_graphs", 1) > 1,
            "source": source_facts(code),
            "runtime_configs": rcfg,
        }
        if ptx is not None:
            info["ptx"] = ptx
        if not self.args.keep_work:
            shutil.rmtree(vdir, ignore_errors=True)
        else:
            info["cache_dir"] = vdir
        return out, out2, info

    def compare(self, out, eager, ref, default_out):
        r = {"ulp_vs_fp64": ulp_stats(out, ref)}
        n_eager = bits_equal_count(out, eager)
        r["n_diff_eager"] = n_eager
        r["bit_equal_eager"] = n_eager == 0
        r["ulp_vs_eager"] = ulp_stats(out, eager) if n_eager else {"max": 0, "p99": 0}
        if default_out is not None:
            n_def = bits_equal_count(out, default_out)
            r["n_diff_default"] = n_def
            r["bit_equal_default"] = n_def == 0
        return r

    # ---- one case: inputs, eager, reference, each variant
    def run_case(self, exp: dict, spec: dict, keep: dict | None = None, digest: bool = False):
        """spec: id, fn, inputs (callable seed -> list of CPU tensors), variants, desc."""
        state = self.prepare_case(exp, spec, keep, digest)
        if state is not None:
            self.run_variants(exp, state, spec["variants"])
            self.finish_case(state)
        return state

    def budget_reason(self) -> str:
        return f"budget spent ({self.budget.used():.1f} s of {self.budget.seconds:.0f} s)"

    def prepare_case(self, exp: dict, spec: dict, keep: dict | None = None, digest: bool = False):
        """Inputs, eager output and fp64 reference of one case (None when it cannot run)."""
        torch = self.torch
        case = {"id": spec["id"], "description": spec.get("desc", ""), "variants": [], "status": "running"}
        exp["cases"].append(case)
        if self.budget.spent():
            case["status"] = "skipped"
            case["reason"] = self.budget_reason()
            for v in spec["variants"]:
                case["variants"].append({"name": v.name, "status": "skipped", "reason": case["reason"]})
            self.save()
            return None
        try:
            seed = (self.args.seed + zlib.crc32(spec["id"].encode())) % (2**31)
            case["seed"] = seed
            cpu_args = spec["inputs"](seed)
            args = [a.to(self.dev) for a in cpu_args]
            case["inputs"] = [{"dtype": str(a.dtype).replace("torch.", ""), "shape": list(a.shape)} for a in args]
            with torch.no_grad():
                eager = spec["fn"](*args)
                self.sync()
                ref64 = spec["fn"](*[a.to(torch.float64) for a in args])
                ref = round_to_dtype(ref64, eager.dtype)
            del ref64
            case["output"] = {
                "dtype": str(eager.dtype).replace("torch.", ""),
                "shape": list(eager.shape),
                "n_elements": eager.numel(),
            }
            case["eager"] = {"ulp_vs_fp64": ulp_stats(eager, ref)}
            if digest:
                case["eager"]["digest"] = tensor_digest(eager)
            if keep is not None:
                keep[(spec["id"], "eager")] = eager
                keep[(spec["id"], "inputs")] = args
        except Exception as exc:
            case["status"] = "error"
            case["error"] = error_record(exc)
            self.save()
            return None
        self.save()
        return {
            "case": case,
            "spec": spec,
            "args": args,
            "eager": eager,
            "ref": ref,
            "default": None,
            "keep": keep,
            "digest": digest,
        }

    def run_variants(self, exp: dict, st: dict, variants: list):
        torch = self.torch
        case, spec = st["case"], st["spec"]
        for v in variants:
            rec = {"name": v.name, "options": v.options}
            if v.patch:
                rec["patch"] = v.patch
            if v.note:
                rec["note"] = v.note
            case["variants"].append(rec)
            self.n_variants += 1
            why = self.unavailable(v)
            if why:
                rec["status"], rec["reason"] = why
                continue
            if self.budget.spent():
                rec["status"] = "skipped"
                rec["reason"] = self.budget_reason()
                continue
            _progress(f"{exp['id']} {spec['id']} {v.name}")
            try:
                limit = min(self.args.variant_timeout_s, max(30.0, self.budget.remaining() + 30.0))
                with hard_timeout(limit):
                    out, out2, info = self.compile_and_run(
                        spec["fn"], st["args"], v, f"{spec['id']}_{v.name}", sass=exp["id"] in ("c3", "fma")
                    )
                rec.update(info)
                rec.update(self.compare(out, st["eager"], st["ref"], st["default"]))
                rec["rerun_bit_equal"] = bits_equal_count(out, out2) == 0
                if st["digest"]:
                    rec["digest"] = tensor_digest(out)
                rec["status"] = "ok"
                self.n_ok += 1
                if v.name == "default":
                    st["default"] = out
                if st["keep"] is not None:
                    st["keep"][(spec["id"], v.name)] = out
                if self.args.save_outputs:
                    os.makedirs(self.args.save_outputs, exist_ok=True)
                    torch.save(out.cpu(), os.path.join(self.args.save_outputs, _fname(spec["id"], v.name) + ".pt"))
            except Exception as exc:
                rec["status"] = "error"
                rec["error"] = error_record(exc)
                with contextlib.suppress(Exception):
                    torch._dynamo.reset()
            self.save()

    def finish_case(self, st: dict):
        st["case"]["status"] = "done"
        st["case"]["finding"] = case_finding(st["case"])
        self.save()
