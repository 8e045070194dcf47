"""Models for `python -m fusebench judge` in the device plan (tools/device_run.py's judge@cuda step):
a transformers GPT-2 with GPT-2 small's shape (12 layers, width 768, 124M parameters) and random
weights on the GPU, and a two-layer one on the CPU for the rehearsal here. Each factory returns
(model, sample) as the judge asks; the model is in eval mode, judged as it is."""

from __future__ import annotations


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
    sample = {"input_ids": torch.randint(0, config.vocab_size, (batch, tokens), device=device)}
    return model, sample


def gpt2_124m_cuda():
    return gpt2("cuda", small=False)


def gpt2_two_layers_cpu():
    return gpt2("cpu", small=True)
