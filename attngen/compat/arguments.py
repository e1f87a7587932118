"""Checks and conversions of the compatible functions' arguments that are not the kernel's own: what flash_attn
takes and attngen does not, the ALiBi slopes, the KV cache's lengths, paged keys gathered for a packed call,
and flash_attn's LSE under causal ALiBi."""

from __future__ import annotations

from typing import Any

from .options import AlibiForm, KernelOptions


def refuse(name: str, value: Any, allowed: str) -> None:
    """A ValueError naming an argument attngen does not take, unless it has its default (None)."""
    if value is not None:
        raise ValueError(f"{name} is not supported by attngen's flash_attn-compatible functions; {allowed}")


def check_dropout(dropout_p: Any) -> None:
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or dropout_p != 0:
        raise ValueError(f"dropout_p must be 0.0: attngen's kernels have no attention dropout, got {dropout_p!r}")


def check_num_splits(num_splits: Any) -> None:
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits must be an int >= 0 (0: attngen chooses the decode kernels' KV splits), "
                         f"got {num_splits!r}")


def tensor_of(name: str, t: Any, dims: tuple[int, ...]) -> Any:
    """`t` checked to be a torch.Tensor with one of `dims` dimensions."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() not in dims:
        raise ValueError(f"{name} must have {' or '.join(map(str, dims))} dims, got shape {tuple(t.shape)}")
    return t


def dtype_name(t: Any) -> str:
    """'bfloat16' for torch.bfloat16."""
    return str(t.dtype).removeprefix("torch.")


def alibi_form(alibi_slopes: Any) -> AlibiForm:
    """Which ALiBi the call asks for: none, per head (heads,), or per sequence and head (batch, heads)."""
    import torch

    if alibi_slopes is None:
        return "none"
    if not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32:
        got = alibi_slopes.dtype if isinstance(alibi_slopes, torch.Tensor) else type(alibi_slopes).__name__
        raise ValueError(f"alibi_slopes must be a torch.float32 tensor of shape (heads,) or (batch, heads), got {got}")
    if alibi_slopes.dim() not in (1, 2):
        raise ValueError(f"alibi_slopes must have shape (heads,) or (batch, heads), got {tuple(alibi_slopes.shape)}")
    return "heads" if alibi_slopes.dim() == 1 else "batch_heads"


def variant_kwargs(options: KernelOptions, alibi_slopes: Any = None, sinks: Any = None) -> dict[str, Any]:
    """The kernel's keyword arguments for the options' runtime tensors (ALiBi slopes, sinks)."""
    kwargs: dict[str, Any] = {}
    name = options.slopes_kwarg
    if name is not None:
        kwargs[name] = alibi_slopes.detach().contiguous()
    if options.sinks:
        kwargs["sinks"] = sinks
    return kwargs


def cache_lengths(cache_seqlens: Any, k_cache: Any, block_table: Any, has_new: bool) -> Any:
    """`cache_seqlens` as the kernel takes it: an int32 tensor or an int; None is the whole cache (flash_attn's
    default), which leaves no room for new keys."""
    import torch

    if cache_seqlens is None:
        if has_new:
            raise ValueError("cache_seqlens is required with k and v: it says where the new keys are written")
        return k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
    if isinstance(cache_seqlens, bool) or not isinstance(cache_seqlens, (int, torch.Tensor)):
        raise ValueError(f"cache_seqlens must be an int or an int32 tensor of shape (batch,), got "
                         f"{type(cache_seqlens).__name__}")
    if isinstance(cache_seqlens, torch.Tensor) and cache_seqlens.dtype != torch.int32:
        raise ValueError(f"cache_seqlens must have dtype torch.int32, got {cache_seqlens.dtype}")
    return cache_seqlens


def gather_pages(pool: Any, block_table: Any, cu_seqlens_k: Any) -> Any:
    """A paged pool (num_blocks, page_size, kv_heads, d) as packed keys (total_k, kv_heads, d): sequence b's
    position p sits in page block_table[b, p // page_size] at row p % page_size."""
    import torch

    tensor_of("block_table", block_table, (2,))
    if block_table.dtype != torch.int32:
        raise ValueError(f"block_table must have dtype torch.int32, got {block_table.dtype}")
    page = pool.shape[1]
    lengths = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    total = int(cu_seqlens_k[-1].item())
    seq = torch.repeat_interleave(torch.arange(lengths.numel(), device=pool.device), lengths, output_size=total)
    pos = torch.arange(total, device=pool.device) - cu_seqlens_k.long()[seq]
    blocks = block_table.long()[seq, pos // page]
    return pool[blocks, pos % page]


def causal_alibi_offset(slopes: Any, rows: Any) -> Any:
    """What flash_attn's LSE adds under causal ALiBi: flash_attn biases key j by +slope * j there (the softmax
    is the same as with -slope * |i + sk - sq - j|, its LSE larger by slope * (i + sk - sq)). `rows` holds
    i + sk - sq per batch entry (batch, seqlen_q); slopes are (heads,) or (batch, heads). Returns
    (batch, heads, seqlen_q)."""
    s = slopes.float().reshape(-1 if slopes.dim() == 2 else 1, slopes.shape[-1], 1)
    return s * rows.float()[:, None, :]


def dense_rows(batch: int, seqlen_q: int, seqlen_k: Any, device: Any) -> Any:
    """i + sk - sq for every row: (batch, seqlen_q); seqlen_k an int or a (batch,) tensor."""
    import torch

    i = torch.arange(seqlen_q, device=device)[None, :]
    if isinstance(seqlen_k, int):
        return (i + (seqlen_k - seqlen_q)).expand(batch, seqlen_q)
    return i + (seqlen_k.long()[:, None] - seqlen_q)


def packed_alibi_offset(slopes: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, total_q: int) -> Any:
    """causal_alibi_offset for packed sequences: (heads, total_q), flash_attn's varlen LSE layout."""
    import torch

    device = cu_seqlens_q.device
    lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).long()
    lens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).long()
    seq = torch.repeat_interleave(torch.arange(lens_q.numel(), device=device), lens_q, output_size=total_q)
    rows = torch.arange(total_q, device=device) - cu_seqlens_q.long()[seq] + (lens_k - lens_q)[seq]
    per_token = slopes.float()[seq].T if slopes.dim() == 2 else slopes.float()[:, None]
    return per_token * rows.float()[None, :]

