"""Tiny random-weight causal LMs from Transformers configs (no downloads) for the backend's tests: two layers,
head dim 64, GQA, and each family's own attention features (sliding windows short enough to bind, Gemma 2's
softcap, gpt-oss's sinks)."""

from __future__ import annotations

from typing import Any

import torch

MODELS = ["llama", "mistral", "qwen2", "gemma2", "gpt_oss"]
COMMON = {"vocab_size": 96, "hidden_size": 128, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 256,
          "initializer_range": 0.1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
#: Each family's config class and what sets its attention apart.
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {"sliding_window": 6}),
    "qwen2": ("Qwen2Config", {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1}),
    "gemma2": ("Gemma2Config", {"sliding_window": 6, "query_pre_attn_scalar": 64, "attn_logit_softcapping": 2.0,
                                "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh"}),
    "gpt_oss": ("GptOssConfig", {"sliding_window": 6, "num_local_experts": 4, "num_experts_per_tok": 2,
                                 "layer_types": ["sliding_attention", "full_attention"]}),
}


def config(transformers: Any, name: str) -> Any:
    import pytest

    cls_name, extra = CONFIGS[name]
    cls = getattr(transformers, cls_name, None)
    if cls is None:
        pytest.skip(f"this transformers ({transformers.__version__}) has no {cls_name}")
    return cls(**{**COMMON, **extra})


def build(transformers: Any, name: str, dtype: Any, device: str = "cpu", seed: int = 0) -> tuple[Any, Any]:
    """(the model with eager attention, in eval mode, and random input ids (2, 20) with no pad or eos token)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config(transformers, name), attn_implementation="eager",
                                                          dtype=dtype)
    model = model.to(device).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, COMMON["vocab_size"], (2, 20), generator=gen).to(device)
    return model, ids


def greedy(model: Any, ids: Any, mask: Any, steps: int) -> Any:
    """The tokens greedy decoding appends (batch, steps), through the model's KV cache."""
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=steps, min_new_tokens=steps,
                             do_sample=False, pad_token_id=0)
    return out[:, ids.shape[1]:]


def packed_logits(model: Any, ids: Any, lengths: tuple[int, ...]) -> tuple[Any, Any]:
    """(logits of sequences packed into one row with restarting position_ids, under the model's attention;
    logits of each sequence run alone under eager), both (total, vocab)."""
    seqs = [ids[i % ids.shape[0], i:i + n] for i, n in enumerate(lengths)]
    positions = torch.cat([torch.arange(n, device=ids.device) for n in lengths])[None]
    implementation = model.config._attn_implementation
    with torch.no_grad():
        got = model(input_ids=torch.cat(seqs)[None], position_ids=positions, use_cache=False).logits[0]
        model.set_attn_implementation("eager")
        want = torch.cat([model(input_ids=s[None], use_cache=False).logits[0] for s in seqs])
        model.set_attn_implementation(implementation)
    return got, want
