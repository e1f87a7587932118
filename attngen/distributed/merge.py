"""Partial attentions merged by their log-sum-exp.

Attention of a row over a key set split in parts is the LSE-weighted mean of the parts' outputs: with
L = logaddexp(L_1, L_2), out = exp(L_1 - L) out_1 + exp(L_2 - L) out_2. A row that sees no key has LSE -inf
and output 0 in every part, and keeps both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def merge_into(acc_out: torch.Tensor, acc_lse: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
               start: int, length: int) -> None:
    """Fold the part (out (batch, length, heads, d), lse (batch, heads, length)) into rows [start, start +
    length) of the running fp32 accumulators (acc_out (batch, rows, heads, d), acc_lse (batch, heads, rows))."""
    import torch

    a_out = acc_out.narrow(1, start, length)
    a_lse = acc_lse.narrow(2, start, length)
    lse = lse.to(acc_lse.dtype)
    new = torch.logaddexp(a_lse, lse)
    safe = torch.where(torch.isfinite(new), new, torch.zeros_like(new))
    w_acc = torch.exp(a_lse - safe).transpose(1, 2).unsqueeze(-1)
    w_part = torch.exp(lse - safe).transpose(1, 2).unsqueeze(-1)
    a_out.mul_(w_acc).add_(out.to(acc_out.dtype) * w_part)
    a_lse.copy_(new)


def add_sinks(acc_out: torch.Tensor, acc_lse: torch.Tensor, sinks: torch.Tensor) -> None:
    """A per-head sink logit joins every row's denominator once: the LSE grows to logaddexp(lse, sink) and the
    output shrinks by exp(lse - that)."""
    import torch

    sink = sinks.to(acc_lse.dtype).view(1, -1, 1).expand_as(acc_lse)
    new = torch.logaddexp(acc_lse, sink)
    acc_out.mul_(torch.exp(acc_lse - new).transpose(1, 2).unsqueeze(-1))
    acc_lse.copy_(new)

