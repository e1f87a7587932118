"""Checks of a call's tensors that every entry point (dense, packed, KV cache) shares."""

from __future__ import annotations

from typing import Any

from ..features.dtype import dtype_trait
from ..spec.model import AttentionSpec


def check_tensor(name: str, t: Any, spec: AttentionSpec, packed: bool = False) -> None:
    import torch

    want = getattr(torch, dtype_trait(spec.dtype).torch)
    if t.device.type != "cuda":
        raise ValueError(f"{name} must be a CUDA tensor, got a tensor on {t.device}")
    if t.dtype != want:
        raise ValueError(f"{name} must have dtype {want} (spec '{spec.name}' is {spec.dtype.value}), got {t.dtype}")
    if packed and t.dim() != 3:
        raise ValueError(f"{name} must have 3 dims (total_tokens, heads, head_dim) with cu_seqlens, got shape "
                         f"{tuple(t.shape)}")
    if not packed and t.dim() != 4:
        raise ValueError(f"{name} must have 4 dims (batch, seqlen, heads, head_dim), got shape {tuple(t.shape)}")
    if t.shape[-1] != spec.head_dim:
        raise ValueError(f"{name} must have head_dim {spec.head_dim} (its last dim), got {t.shape[-1]}")
    if t.stride(-1) != 1:
        raise ValueError(f"{name}'s last dim must be contiguous (stride 1), got stride {t.stride(-1)}; "
                         f"call {name}.contiguous()")
