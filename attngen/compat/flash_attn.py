"""flash_attn 2.x's functions on attngen's kernels: `flash_attn_func`, `flash_attn_varlen_func` and
`flash_attn_with_kvcache`, with flash_attn's signatures, defaults, layouts and conventions.

Each call maps its options (head dim, dtype, causal, window, softcap, ALiBi, deterministic) to an AttentionSpec
(`attngen.compat.options.spec_for`), compiles it on first use for the GPU the tensors are on and keeps the
kernel (`attngen.compat.kernels`). Arguments attngen cannot honour raise a ValueError naming them.
"""

from __future__ import annotations

from typing import Any

from ..planning.planner_decode import MAX_DECODE_QUERY
from . import arguments as args
from .kernels import kernel_for
from .options import make_options


def flash_attn_func(q: Any, k: Any, v: Any, dropout_p: float = 0.0, softmax_scale: float | None = None,
                    causal: bool = False, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Any = None, deterministic: bool = False, return_attn_probs: bool = False) -> Any:
    """Attention of q (batch, seqlen_q, heads, head_dim) over k, v (batch, seqlen_k, kv_heads, head_dim), as
    flash_attn.flash_attn_func computes it; differentiable.

    - GQA/MQA when heads % kv_heads == 0; causal and windows are aligned bottom-right: query i sees keys
      i + seqlen_k - seqlen_q - window_size[0] ..= i + seqlen_k - seqlen_q + window_size[1] (-1 unbounded;
      causal sets the right side to 0). A row that sees no key gives 0.
    - softcap > 0: scores become softcap * tanh(score / softcap); alibi_slopes (fp32, (heads,) or
      (batch, heads)) add -slope * |i + seqlen_k - seqlen_q - j|.
    - deterministic=True compiles a spec with `deterministic: true`: the backward runs without floating-point
      atomics, so gradients are bitwise reproducible (the forward always is).
    - dropout_p must be 0.0 (attngen has no attention dropout); q, k and v must be fp16 or bf16 CUDA tensors
      with a head dim attngen ships (64, 96, 128, 192, 256); other values raise a ValueError naming them.
    - return_attn_probs=True returns (out, softmax_lse, None): softmax_lse float32 (batch, heads, seqlen_q) as
      flash_attn's (under causal ALiBi flash_attn's convention, +slope * j), and S_dmask None: attngen never
      forms the probabilities.
    """
    args.check_dropout(dropout_p)
    args.tensor_of("q", q, (4,))
    options = make_options(head_dim=q.shape[-1], dtype=args.dtype_name(q), causal=causal, window_size=window_size,
                           softcap=softcap, alibi=args.alibi_form(alibi_slopes), deterministic=deterministic)
    kernel = kernel_for(options, q.device)
    result = kernel(q, k, v, softmax_scale=softmax_scale, return_lse=return_attn_probs,
                    **args.variant_kwargs(options, alibi_slopes))
    if not return_attn_probs:
        return result
    out, lse = result
    if options.causal and alibi_slopes is not None:
        rows = args.dense_rows(q.shape[0], q.shape[1], k.shape[1], q.device)
        lse = lse + args.causal_alibi_offset(alibi_slopes, rows)
    return out, lse, None


def flash_attn_varlen_func(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                           max_seqlen_k: int, dropout_p: float = 0.0, softmax_scale: float | None = None,
                           causal: bool = False, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Any = None, deterministic: bool = False, return_attn_probs: bool = False,
                           block_table: Any = None) -> Any:
    """Attention of packed sequences, as flash_attn.flash_attn_varlen_func computes it; differentiable.

    q (total_q, heads, head_dim), k and v (total_k, kv_heads, head_dim); cu_seqlens_q / cu_seqlens_k int32
    (batch + 1,) cumulative lengths on q's device; max_seqlen_q / max_seqlen_k the longest sequences. Masks,
    windows and ALiBi apply per sequence, aligned bottom-right within each (a sequence may be empty). With
    block_table (batch, max_blocks) int32, k and v are paged pools (num_blocks, page_size, kv_heads, head_dim):
    each sequence's keys are gathered from its pages (a copy) before the packed call. Returns out
    (total_q, heads, head_dim), or (out, softmax_lse (heads, total_q), None) with return_attn_probs. Every
    other argument as flash_attn_func.
    """
    args.check_dropout(dropout_p)
    args.tensor_of("q", q, (3,))
    options = make_options(head_dim=q.shape[-1], dtype=args.dtype_name(q), causal=causal, window_size=window_size,
                           softcap=softcap, alibi=args.alibi_form(alibi_slopes), deterministic=deterministic)
    if block_table is not None:
        args.tensor_of("k", k, (4,))
        k, v = (args.gather_pages(t, block_table, cu_seqlens_k) for t in (k, v))
    kernel = kernel_for(options, q.device)
    result = kernel(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, max_seqlen_q=max_seqlen_q,
                    max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, return_lse=return_attn_probs,
                    **args.variant_kwargs(options, alibi_slopes))
    if not return_attn_probs:
        return result
    out, lse = result
    if options.causal and alibi_slopes is not None:
        lse = lse + args.packed_alibi_offset(alibi_slopes, cu_seqlens_q, cu_seqlens_k, q.shape[0])
    return out, lse, None


def flash_attn_with_kvcache(q: Any, k_cache: Any, v_cache: Any, k: Any = None, v: Any = None, rotary_cos: Any = None,
                            rotary_sin: Any = None, cache_seqlens: Any = None, cache_batch_idx: Any = None,
                            cache_leftpad: Any = None, block_table: Any = None, softmax_scale: float | None = None,
                            causal: bool = False, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Any = None, num_splits: int = 0,
                            return_softmax_lse: bool = False) -> Any:
    """Attention over a KV cache, as flash_attn.flash_attn_with_kvcache computes it (no autograd).

    q (batch, seqlen_q, heads, head_dim); k_cache, v_cache (batch, seqlen_cache, kv_heads, head_dim), or with
    block_table (batch, max_blocks) int32 a paged pool (num_blocks, page_size, kv_heads, head_dim);
    cache_seqlens an int or int32 (batch,): the keys each sequence holds (None: the whole cache). k, v
    (batch, seqlen_new, kv_heads, head_dim), when given, are written into the cache in place at
    cache_seqlens[b] onwards, and attention runs over the first cache_seqlens[b] + seqlen_new keys, causal and
    windows aligned bottom-right to them. Returns out like q, or (out, softmax_lse (batch, heads, seqlen_q)).

    Not supported (a ValueError names them): rotary_cos / rotary_sin (apply rotary embeddings before the
    call; rotary_interleaved is then unused), cache_batch_idx, cache_leftpad. num_splits (0: attngen's choice)
    sets the KV splits of the split-KV decode kernels, which run queries of at most 16 rows; longer queries
    run the forward kernels and ignore it.
    """
    _refuse_kvcache_extras(rotary_cos, rotary_sin, cache_batch_idx, cache_leftpad)
    args.check_num_splits(num_splits)
    args.tensor_of("q", q, (4,))
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (the new keys and values), or neither")
    lengths = args.cache_lengths(cache_seqlens, k_cache, block_table, has_new=k is not None)
    options = make_options(head_dim=q.shape[-1], dtype=args.dtype_name(q), causal=causal, window_size=window_size,
                           softcap=softcap, alibi=args.alibi_form(alibi_slopes))
    kernel = kernel_for(options, q.device)
    result = kernel.with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, k_new=k, v_new=v,
                                 block_table=block_table, softmax_scale=softmax_scale, return_lse=return_softmax_lse,
                                 num_splits=num_splits if q.shape[1] <= MAX_DECODE_QUERY else 0,
                                 **args.variant_kwargs(options, alibi_slopes))
    if not return_softmax_lse:
        return result
    out, lse = result
    if options.causal and alibi_slopes is not None:
        seqlen_k = lengths + (0 if k is None else k.shape[1])
        rows = args.dense_rows(q.shape[0], q.shape[1], seqlen_k, q.device)
        lse = lse + args.causal_alibi_offset(alibi_slopes, rows)
    return out, lse


def _refuse_kvcache_extras(rotary_cos: Any, rotary_sin: Any, cache_batch_idx: Any, cache_leftpad: Any) -> None:
    args.refuse("rotary_cos", rotary_cos, "apply the rotary embedding to q and k before the call")
    args.refuse("rotary_sin", rotary_sin, "apply the rotary embedding to q and k before the call")
    args.refuse("cache_batch_idx", cache_batch_idx, "index the cache yourself (k_cache[idx]) and pass None")
    args.refuse("cache_leftpad", cache_leftpad, "keep each sequence's keys at the start of its cache row")
