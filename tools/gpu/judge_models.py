"""Models for `python -m fusebench judge` in the device plan (tools/device_run.py's judge steps), each
as FACTORY_cuda for the GPU and FACTORY_cpu for the rehearsal here:
  mlp   a small MLP (Linear, GELU, LayerNorm, Linear) in f32: the GPU path of the judge in seconds
  gpt2  a transformers GPT-2 with GPT-2 small's shape (12 layers, width 768, 124M parameters) and
        random weights on the GPU; two layers of width 256 standing in on the CPU
Each factory returns (model, sample) as the judge asks; the model is in eval mode, judged as it is.
Weights and samples are drawn on the CPU from fixed seeds and then moved, so that the GPU's
judgment and the CPU's see the same model and the same inputs."""

from __future__ import annotations


def mlp(device: str):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.LayerNorm(1024), torch.nn.Linear(1024, 256)
    )
    sample = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    return model.eval().to(device), sample.to(device)


def gpt2(device: str, small: bool):
    import torch
    import transformers

    if small:
        config = transformers.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=8192, use_cache=False,
                                         bos_token_id=0, eos_token_id=0)  # fmt: skip
        batch, tokens = 2, 64
    else:  # GPT-2 small's shape: transformers' defaults
        config = transformers.GPT2Config(use_cache=False)
        batch, tokens = 4, 512
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).eval().to(device)
    ids = torch.randint(0, config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids.to(device)}


def mlp_cuda():
    return mlp("cuda")


def mlp_cpu():
    return mlp("cpu")


def gpt2_cuda():
    return gpt2("cuda", small=False)


def gpt2_cpu():
    return gpt2("cpu", small=True)
