"""flash_attn 2's forward written out in float64 torch, from its documentation and kernels (any device): the
oracle of the flash_attn-compatible functions' tests."""

from __future__ import annotations

import math
from typing import Any

import torch


def flash_reference(q: Any, k: Any, v: Any, *, causal: bool = False, window_size: tuple[int, int] = (-1, -1),
                    softcap: float = 0.0, alibi: Any = None, scale: float | None = None) -> tuple[Any, Any]:
    """flash_attn 2's forward from its documentation and kernels, float64: (out, lse (batch, heads, sq))."""
    b, sq, h, d = q.shape
    sk, group = k.shape[1], h // k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double().repeat_interleave(group, 2)) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    diag = torch.arange(sq, device=q.device)[:, None] + sk - sq
    j = torch.arange(sk, device=q.device)[None, :]
    left, right = window_size[0], 0 if causal else window_size[1]
    if alibi is not None:
        slopes = alibi.double().reshape(-1, h, 1, 1)
        pure_causal = left < 0 and right == 0
        s = s + (slopes * j if pure_causal else -slopes * (diag - j).abs())
    hidden = torch.zeros(sq, sk, dtype=torch.bool, device=q.device)
    if right >= 0:
        hidden |= j > diag + right
    if left >= 0:
        hidden |= j < diag - left
    s = s.masked_fill(hidden, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v.double().repeat_interleave(group, 2)), lse
