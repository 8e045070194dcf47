"""Task E's peer: the same GPT-2-style model, config, optimizer and shapes trained by PyTorch on the
CPU, eagerly and through torch.compile; prints one JSON object with tokens/s per mode.

Same math as the engine's trainer (gpt2_graph.cpp): pre-norm blocks, causal attention, tanh-GELU
MLP, tied output projection, cross-entropy in fp32, AdamW with decay on matrices and embeddings
only, warm-up + cosine, clipping; activations in bf16 under autocast (fp32 master weights). The
batches are drawn with numpy from the same text (speed only: the alignment verdict is the
engine's). Exit 3 with a message when torch is not installed.

Usage: python peer_torch.py --config default.json --steps 20 [--dtype bf16|f32] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time


def model_class(cfg: dict):
    """The GPT-2-style model of the engine's trainer (gpt2_graph.cpp), as a torch.nn.Module class for
    the config's shapes. `forward(idx, targets)` returns the mean cross-entropy in fp32."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    m = cfg["model"]
    V, L, H, C, T, B = m.get("vocab", 256), m["layers"], m["heads"], m["width"], m["context"], cfg["batch"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf")).softmax(
                -1
            )
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
            for b in self.blocks:
                x = b(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    return GPT


def initialise(model, layers: int) -> None:
    """GPT-2's initialisation, as the engine's trainer has it."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                std = 0.01 if name == "wpe.weight" else 0.02
                if name.endswith("proj.weight"):
                    std = 0.02 / math.sqrt(2 * layers)
                p.normal_(0.0, std)
            elif "ln" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()


def optimizer(model, cfg: dict):
    """AdamW with weight decay on matrices and embeddings only, as the engine's trainer has it."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.get("weight_decay", 0.1)}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg["lr"],
        betas=(cfg.get("beta1", 0.9), cfg.get("beta2", 0.95)),
        eps=cfg.get("adam_eps", 1e-8),
    )


def learning_rate(cfg: dict, step: int) -> float:
    """Linear warm-up, then cosine decay to min_lr_fraction of the peak."""
    warm, total, lr = cfg.get("warmup_steps", 50), cfg["steps"], cfg["lr"]
    if step < warm:
        return lr * (step + 1) / warm
    p = min(1.0, (step - warm) / max(1, total - warm))
    low = lr * cfg.get("min_lr_fraction", 0.1)
    return low + 0.5 * (lr - low) * (1 + math.cos(math.pi * p))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--steps", type=int, default=20)  # tokens/s over steps 3..N
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--modes", default="eager,compile")
    args = parser.parse_args()
    try:
        import numpy as np
        import torch
    except ImportError as e:
        print(json.dumps({"skipped": f"torch is not installed in this Python ({e})"}))
        return 3
    torch.set_num_threads(args.threads)
    cfg = json.load(open(args.config))
    m = cfg["model"]
    L, T, B = m["layers"], m["context"], cfg["batch"]
    text = b"".join(open(f, "rb").read() for f in cfg["data_files"])
    train = np.frombuffer(text[: len(text) - int(len(text) * cfg.get("eval_fraction", 0.1))], dtype=np.uint8)

    GPT = model_class(cfg)

    def lr_at(step):
        return learning_rate(cfg, step)

    def run(mode: str) -> dict:
        torch.manual_seed(1)
        rng = np.random.default_rng(1)
        model = GPT()
        initialise(model, L)
        opt = optimizer(model, cfg)

        def step_fn(idx, tgt):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
                loss = model(idx, tgt)
            loss.backward()
            return loss

        fn = torch.compile(step_fn) if mode == "compile" else step_fn
        losses, timed, first = [], 0.0, 0.0
        for step in range(args.steps):
            starts = rng.integers(0, len(train) - T - 1, size=B)
            idx = torch.from_numpy(np.stack([train[s : s + T] for s in starts]).astype(np.int64))
            tgt = torch.from_numpy(np.stack([train[s + 1 : s + T + 1] for s in starts]).astype(np.int64))
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            opt.zero_grad(set_to_none=True)
            loss = fn(idx, tgt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.get("grad_clip", 1.0))
            opt.step()
            dt = time.perf_counter() - t0
            if step == 0:
                first = dt
            elif step >= 2:  # torch.compile may recompile on the second call (gradients now exist)
                timed += dt
            losses.append(float(loss.detach()))
        return {
            "tokens_per_s": (args.steps - 2) * B * T / timed if timed > 0 else 0.0,
            "first_step_s": first,
            "first_loss": losses[0],
            "last_loss": losses[-1],
        }

    out = {"torch": torch.__version__, "dtype": args.dtype, "steps": args.steps, "threads": args.threads}
    for mode in args.modes.split(","):
        try:
            out[mode] = run(mode)
        except Exception as e:  # torch.compile needs a working C++ toolchain; say so instead of failing E
            out[mode] = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(f"peer {mode}: {out[mode]}", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
