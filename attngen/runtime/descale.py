"""Descale factors of 8-bit calls (FA3's flash_attn_func(q_descale=, k_descale=, v_descale=)): checked like q, k
and v, and packed into one fp32 tensor of three (batch, kv_heads) planes that the kernel's `descale` field points
at (abi.DESCALE_FIELDS)."""

from __future__ import annotations

from typing import Any

NAMES = ("q_descale", "k_descale", "v_descale")


def check_descale(name: str, value: Any, batch: int, kv_heads: int, device: Any) -> Any:
    """`value` (None: 1, a Python number, or an fp32 tensor of shape (batch, kv_heads) or a single element on q's
    device) as a (batch, kv_heads) fp32 tensor; ValueError naming the argument otherwise."""
    import torch

    want = (batch, kv_heads)
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.full(want, 1.0 if value is None else float(value), dtype=torch.float32, device=device)
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a float32 tensor of shape {want} (batch, kv_heads), a one-element "
                         f"tensor or a number, got {type(value).__name__}")
    if value.dtype != torch.float32:
        raise ValueError(f"{name} must have dtype torch.float32, got {value.dtype}")
    if value.device != device:
        raise ValueError(f"{name} must be on q's device {device}, got {value.device}")
    if value.numel() == 1:
        return value.reshape(1, 1).expand(want)
    if tuple(value.shape) != want:
        raise ValueError(f"{name} must have shape {want} (batch, kv_heads) or one element, got {tuple(value.shape)}")
    return value


def pack_descales(q: Any, k: Any, given: dict[str, Any]) -> Any:
    """The (3, batch, kv_heads) fp32 planes q, k, v of a dense call's descale arguments."""
    import torch

    planes = [check_descale(n, given.get(n), q.shape[0], k.shape[2], q.device) for n in NAMES]
    return torch.stack(planes).contiguous()
