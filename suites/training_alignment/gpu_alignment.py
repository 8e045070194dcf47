"""Task E on a GPU, in PyTorch alone: the engine trainer's GPT-2-style model (peer_torch.py's, the same
math) trained eagerly with several seeds (the seed band) and through torch.compile (Inductor ->
Triton) from the same seeds, for the config's steps, with bf16 autocast as the plan's candidate 1.
Every step's training loss and, every `log_every` steps, the loss on fixed held-out batches are
written, so the report can place the compiled run inside or outside the eager seeds' band.

The seed fixes the initial weights (torch.manual_seed) and the batch order (numpy's generator), so
eager and compiled runs of one seed see the same data from the same start. Runs go in the order
eager 1, compiled 1, eager 2, compiled 2, ..., and a run starts only when the budget leaves room for
it (from the first run's time); the JSON is rewritten after each run, so a cut keeps the finished ones.

Usage: python gpu_alignment.py --config gpt2-124m.json --out FILE [--steps N] [--seeds 1,2,3]
       [--compiled-seeds 1,2] [--device cuda] [--budget-s SECONDS]   (an empty list: none of that mode)"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

# run as a script, Python puts this folder first on the path: peer_torch is its sibling
from peer_torch import initialise, learning_rate, model_class, optimizer


def seed_list(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"gpu_alignment: seeds {text!r}: expected integers separated by commas") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, help="default: the config's steps")
    parser.add_argument("--seeds", default=None, help="eager seeds, the band (default: the config's)")
    parser.add_argument("--compiled-seeds", default=None, help="default: the first two eager seeds")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    parser.add_argument("--budget-s", type=float, default=600)
    args = parser.parse_args()
    started = time.monotonic()
    import numpy as np
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_alignment: torch.cuda.is_available() is False: no CUDA GPU here", file=sys.stderr)
        return 2
    cfg = json.load(open(args.config))
    steps = args.steps or cfg["steps"]
    cfg = dict(cfg, steps=steps)  # the schedule's length follows the run's
    # an empty list runs none of that mode: tools/device-run runs one (seed, mode) at a time, so
    # that a lent device's call keeps each finished run and the next call starts the rest
    seeds = seed_list(args.seeds if args.seeds is not None else ",".join(str(s) for s in cfg["seeds"]))
    compiled_seeds = seed_list(
        args.compiled_seeds if args.compiled_seeds is not None else ",".join(str(s) for s in seeds[:2])
    )
    if not seeds and not compiled_seeds:
        print("gpu_alignment: --seeds and --compiled-seeds are both empty: nothing to run", file=sys.stderr)
        return 2
    m = cfg["model"]
    L, T, B = m["layers"], m["context"], cfg["batch"]
    text = b"".join(open(f, "rb").read() for f in cfg["data_files"])
    split = len(text) - int(len(text) * cfg.get("eval_fraction", 0.1))
    train = np.frombuffer(text[:split], dtype=np.uint8)
    held_out = np.frombuffer(text[split:], dtype=np.uint8)
    device = torch.device(args.device)
    GPT = model_class(cfg)

    def batch(data, rng):
        starts = rng.integers(0, len(data) - T - 1, size=B)
        idx = torch.from_numpy(np.stack([data[s : s + T] for s in starts]).astype(np.int64))
        tgt = torch.from_numpy(np.stack([data[s + 1 : s + T + 1] for s in starts]).astype(np.int64))
        return idx.to(device, non_blocking=True), tgt.to(device, non_blocking=True)

    eval_rng = np.random.default_rng(0)  # the same held-out batches for every run
    eval_batches = [batch(held_out, eval_rng) for _ in range(cfg.get("eval_batches", 4))]
    log_every = cfg.get("log_every", 50)
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def run(seed: int, compiled: bool) -> dict:
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        model = GPT().to(device)
        initialise(model, L)
        opt = optimizer(model, cfg)

        def forward(idx, tgt):
            with torch.autocast(**autocast):
                return model(idx, tgt)

        fn = torch.compile(forward, fullgraph=True, dynamic=False) if compiled else forward
        losses, evals, step_s = [], [], []
        compile_s = 0.0
        for step in range(steps):
            idx, tgt = batch(train, rng)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = learning_rate(cfg, step)
            opt.zero_grad(set_to_none=True)
            loss = fn(idx, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.get("grad_clip", 1.0))
            opt.step()
            losses.append(float(loss.detach()))  # synchronises
            dt = time.perf_counter() - t0
            if step == 0 and compiled:
                compile_s = dt
            step_s.append(dt)
            if (step + 1) % log_every == 0 or step + 1 == steps:
                with torch.no_grad():
                    held = [float(fn(i, t)) for i, t in eval_batches]
                evals.append({"step": step + 1, "loss": sum(held) / len(held)})
        steady = sorted(step_s[2:]) if len(step_s) > 2 else step_s
        return {
            "seed": seed,
            "mode": "compiled" if compiled else "eager",
            "train_loss": losses,
            "eval": evals,
            "median_step_s": steady[len(steady) // 2] if steady else None,
            "first_step_s": step_s[0] if step_s else None,
            "compile_s": compile_s,
            "tokens_per_s": B * T / steady[len(steady) // 2] if steady else None,
        }

    result = {
        "config": cfg.get("name", os.path.basename(args.config)),
        "model": m,
        "batch": B,
        "steps": steps,
        "dtype": args.dtype,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else device.type,
        "torch": torch.__version__,
        "seeds": seeds,
        "compiled_seeds": compiled_seeds,
        "runs": [],
        "not_run": [],
    }
    order = []
    for seed in seeds:
        order.append((seed, False))
        if seed in compiled_seeds:
            order.append((seed, True))
    order += [(s, True) for s in compiled_seeds if s not in seeds]
    slowest = 0.0
    for seed, compiled in order:
        left = args.budget_s - (time.monotonic() - started)
        needed = slowest * (1.5 if compiled else 1.1)  # a compiled run also compiles
        if left < needed:
            result["not_run"].append({"seed": seed, "mode": "compiled" if compiled else "eager",
                                      "reason": f"budget: {left:.0f} s left, a run takes about {needed:.0f} s"})  # fmt: skip
            continue
        t0 = time.monotonic()
        try:
            r = run(seed, compiled)
        except Exception as e:  # a compile failure is a finding, written down
            r = {"seed": seed, "mode": "compiled" if compiled else "eager", "error": f"{type(e).__name__}: {e}"[:500]}
        r["wall_s"] = time.monotonic() - t0
        slowest = max(slowest, r["wall_s"])
        result["runs"].append(r)
        last = r.get("eval", [{}])[-1].get("loss") if "eval" in r else None
        print(f"gpu_alignment: {r['mode']} seed {seed}: {r['wall_s']:.0f} s, final held-out loss {last}", flush=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, args.out)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, args.out)
    return 0 if result["runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
