"""Third-party models for judge's tests, built from small configs with random weights (nothing is
downloaded): HF transformers GPT-2 and BERT, timm ViT-tiny. Each factory returns (model, sample)
as `python -m fusebench judge models.py:gpt2` expects."""

from __future__ import annotations

import torch


def gpt2(layers: int = 2, width: int = 64, heads: int = 2, vocab: int = 512, batch: int = 2, tokens: int = 32):
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=width, n_head=heads, vocab_size=vocab, n_positions=max(64, tokens), use_cache=False,
        bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids}


def bert(layers: int = 2, width: int = 64, heads: int = 2, vocab: int = 512, batch: int = 2, tokens: int = 32):
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=layers, hidden_size=width, num_attention_heads=heads, intermediate_size=4 * width,
        vocab_size=vocab, max_position_embeddings=max(64, tokens), pad_token_id=0,
    )  # fmt: skip
    model = transformers.BertModel(config).eval()
    ids = torch.randint(1, vocab, (batch, tokens), generator=torch.Generator().manual_seed(1))
    return model, {"input_ids": ids}


def vit_tiny(depth: int = 2, image: int = 32, batch: int = 2):
    import timm

    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=image, patch_size=8, depth=depth, num_classes=10
    ).eval()
    x = torch.randn(batch, 3, image, image, generator=torch.Generator().manual_seed(1))
    return model, (x,)


def gpt2_budget():
    """The issue's budget model: 2 layers, width 256, 2 x 64 tokens (vocabulary 8,192)."""
    return gpt2(layers=2, width=256, heads=4, vocab=8192, batch=2, tokens=64)
