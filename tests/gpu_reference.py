"""Float64 attention reference for the GPU tests (the conventions of attngen's design)."""

from __future__ import annotations

import math

import torch


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, left: int, right: int,
              scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Naive float64 attention: out (b, sq, h, d) and natural-log LSE (b, h, sq), -inf where no key is visible."""
    b, sq, h, d = q.shape
    sk, kvh = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = h // kvh
    q64 = q.double().permute(0, 2, 1, 3)
    k64 = k.double().permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    v64 = v.double().permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    rows = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    cols = torch.arange(sk, device=q.device)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if right >= 0:
        visible &= cols <= rows + right
    if left >= 0:
        visible &= cols >= rows - left
    scores = torch.einsum("bhqd,bhkd->bhqk", q64, k64) * scale
    scores = scores.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse[..., None].masked_fill(torch.isinf(lse[..., None]), 0.0))
    probs = probs.masked_fill(~visible, 0.0)
    out = torch.einsum("bhqk,bhkd->bhqd", probs, v64).permute(0, 2, 1, 3)
    return out, lse


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere gives inf (NaN never passes)."""
    diff = out.double() - ref
    if not torch.isfinite(out.double()).all():
        return math.inf
    denom = ref.norm().item()
    return diff.norm().item() / denom if denom > 0 else diff.norm().item()


def lse_error(lse: torch.Tensor, ref: torch.Tensor) -> float:
    """Max |lse − ref| where ref is finite; inf when -inf positions differ or NaN appears."""
    lse = lse.double()
    if torch.isnan(lse).any():
        return math.inf
    ref_inf, got_inf = torch.isinf(ref), torch.isinf(lse)
    if not torch.equal(ref_inf, got_inf):
        return math.inf
    finite = ~ref_inf
    return (lse[finite] - ref[finite]).abs().max().item() if finite.any() else 0.0
