"""Checks of a call's tensors that every entry point (dense, packed, KV cache) shares."""

from __future__ import annotations

import math
from typing import Any

from ..features.dtype import dtype_trait
from ..spec.model import AttentionSpec


def softmax_scale_of(softmax_scale: Any, head_dim: int) -> float:
    """The softmax scale to use: 1/sqrt(head_dim) for None, else a positive finite float."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if not isinstance(softmax_scale, (int, float)) or not math.isfinite(softmax_scale) or softmax_scale <= 0:
        raise ValueError(f"softmax_scale must be a positive finite float, got {softmax_scale!r}")
    return float(softmax_scale)


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
