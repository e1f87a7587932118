"""The batch shapes a model hands its attention, as attngen calls: dense, padded (a 2D padding mask: the tokens
are unpadded into packed sequences and the output padded back with zeros, as flash_attention_2 does) and
packed padding-free (position_ids restarting, or cumulative lengths given). Tensors are (batch, seqlen, heads,
head_dim), the kernel's layout."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Packed:
    """Where the sequences of a packed call sit: int32 cumulative lengths and the longest lengths."""

    cu_seqlens_q: Any
    cu_seqlens_k: Any
    max_seqlen_q: int
    max_seqlen_k: int

    def kwargs(self) -> dict[str, Any]:
        return {"cu_seqlens_q": self.cu_seqlens_q, "cu_seqlens_k": self.cu_seqlens_k,
                "max_seqlen_q": self.max_seqlen_q, "max_seqlen_k": self.max_seqlen_k}


def lengths_of(mask: Any) -> tuple[Any, Any, int]:
    """(flat indices of the kept tokens, int32 cumulative lengths, the longest length) of a (batch, seqlen) mask."""
    import torch

    lengths = mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    return indices, cu, int(lengths.max().item())


def padded_call(kernel: Any, q: Any, k: Any, v: Any, mask: Any, **call: Any) -> Any:
    """Attention of a padded batch: mask (batch, kv_len) marks real keys (bool or 0/1); the queries are the last
    seqlen_q positions of it (left padding when they are fewer, as in generation). Padding rows give 0."""
    import torch

    mask = check_mask(mask, k.shape[1]).bool()
    k, v = k[:, : mask.shape[1]], v[:, : mask.shape[1]]
    batch, seqlen_q = q.shape[:2]
    idx_k, cu_k, max_k = lengths_of(mask)
    if seqlen_q == mask.shape[1]:
        idx_q, cu_q, max_q = idx_k, cu_k, max_k
    else:
        idx_q, cu_q, max_q = lengths_of(mask[:, -seqlen_q:])
    flat_q = q.reshape(-1, *q.shape[2:])[idx_q]
    flat_k, flat_v = (t.reshape(-1, *t.shape[2:])[idx_k] for t in (k, v))
    out = kernel(flat_q, flat_k, flat_v, **Packed(cu_q, cu_k, max_q, max_k).kwargs(), **call)
    full = torch.zeros(batch * seqlen_q, *out.shape[1:], dtype=out.dtype, device=out.device)
    return full.index_copy(0, idx_q, out).view(batch, seqlen_q, *out.shape[1:])


def check_mask(mask: Any, kv_len: int) -> Any:
    """A 2D padding mask (batch, <= kv_len); anything else is refused by name."""
    if mask.dim() != 2:
        raise ValueError(f"attention_mask must be a 2D padding mask (batch, kv_len), the kind attngen's mask function "
                         f"makes; got shape {tuple(mask.shape)} (a custom 4D mask cannot be mapped to a kernel: use "
                         f"attn_implementation='sdpa' for it)")
    if mask.shape[1] > kv_len:
        raise ValueError(f"attention_mask covers {mask.shape[1]} keys but the layer has {kv_len}")
    return mask


def packed_from(kwargs: dict[str, Any], q: Any, k: Any) -> Packed | None:
    """The packed layout of a padding-free batch (batch 1), from precomputed cumulative lengths (cu_seq_lens_q,
    cu_seq_lens_k, max_length_q, max_length_k) or from position_ids that restart; None when the batch is not
    packed."""
    import torch

    given: list[Any] = [kwargs.get(n) for n in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")]
    if all(g is not None for g in given):
        cu_q, cu_k, max_q, max_k = given
        return Packed(cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k))
    positions = kwargs.get("position_ids")
    if positions is None or q.shape[0] != 1 or not restarts(positions):
        return None
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"packed sequences (position_ids restarting) need as many keys as queries, got "
                         f"{k.shape[1]} keys for {q.shape[1]} queries (pass past_key_values=None, use_cache=False)")
    flat = positions.reshape(-1)
    starts = torch.nonzero(flat == flat.min()).flatten().to(torch.int32)
    cu = torch.cat([starts, torch.tensor([flat.numel()], dtype=torch.int32, device=flat.device)])
    longest = int(cu.diff().max().item())
    return Packed(cu, cu, longest, longest)


def restarts(positions: Any) -> bool:
    """Whether one row of position_ids holds several sequences (it is not first, first + 1, ...)."""
    import torch

    row = positions.reshape(-1)
    return bool((row != torch.arange(row.numel(), device=row.device) + row.min()).any())
