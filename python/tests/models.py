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


def decoder(family: str, attention: str = "sdpa", layers: int = 2, width: int = 64, heads: int = 4,
            kv_heads: int = 2, vocab: int = 256, batch: int = 2, tokens: int = 16):  # fmt: skip
    """A causal LM of HF transformers' family ("Llama", "Mistral", "Qwen2": grouped-query attention
    with kv_heads < heads) with the attention implementation given ("sdpa" or "eager"), random
    weights; the sample left-pads its second row (attention_mask 0 on 4 tokens), so the masks
    have rows with no key kept."""
    import transformers

    torch.manual_seed(0)
    config = getattr(transformers, f"{family}Config")(
        hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=128, use_cache=False,
    )  # fmt: skip
    config._attn_implementation = attention
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    ids = torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, tokens, dtype=torch.long)
    mask[1, :4] = 0
    return model, {"input_ids": ids, "attention_mask": mask}
