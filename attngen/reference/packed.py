"""Float64 attention of packed (varlen) sequences and of a KV cache, sequence by sequence through the dense
reference (variant.py): what the packed and cache kernels are checked against.

Packed: q (total_q, heads, d), k and v (total_k, kv_heads, d), int cumulative lengths cu_seqlens_q / cu_seqlens_k
of batch + 1 entries; every mask and score mod applies to each sequence alone (bottom-right aligned within it).
Out is (total_q, heads, d), the LSE (heads, total_q) as flash_attn's varlen functions return it. Runtime tensors
with a batch dimension are indexed by the sequence's entry, their seqlen dimensions from the sequence's start.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..features.variant import variant_of
from ..spec.model import AttentionSpec
from ..spec.variant import TensorDecl
from .variant import _array, attention, grads


def _bounds(cu: Any) -> list[tuple[int, int]]:
    values = [int(x) for x in _array(cu).reshape(-1)]
    if len(values) < 2 or values[0] != 0 or any(b < a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"cumulative lengths must start at 0 and never decrease, got {values}")
    return list(zip(values, values[1:], strict=False))


def _entry_tensors(spec: AttentionSpec, tensors: dict[str, Any], b: int, sq: int, sk: int) -> dict[str, Any]:
    """Entry b's slice of each runtime tensor: its batch index, the first sq / sk of its seqlen dimensions."""
    decls = {a.name: a.decl for a in variant_of(spec).arguments()
             if isinstance(a.decl, TensorDecl) and not a.computed}
    out: dict[str, Any] = {}
    for name, value in tensors.items():
        decl = decls.get(name)
        if decl is None:
            out[name] = value
            continue
        arr = _array(value)
        index = tuple({"batch": slice(b, b + 1), "seqlen_q": slice(0, sq), "seqlen_k": slice(0, sk)}.get(d, slice(None))
                      if isinstance(d, str) else slice(None) for d in decl.shape)
        out[name] = arr[index]
    return out


def attention_packed(spec: AttentionSpec, q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *,
                     softmax_scale: float | None = None, **tensors: Any) -> tuple[np.ndarray, np.ndarray]:
    """Float64 (out (total_q, heads, d), lse (heads, total_q)) of packed sequences."""
    q, k, v = (_array(x) for x in (q, k, v))
    rows_q, rows_k = _bounds(cu_seqlens_q), _bounds(cu_seqlens_k)
    if len(rows_q) != len(rows_k):
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must have one length, got {len(rows_q) + 1} and "
                         f"{len(rows_k) + 1}")
    out = np.zeros(q.shape)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(rows_q, rows_k, strict=True)):
        part = _entry_tensors(spec, tensors, b, q1 - q0, k1 - k0)
        o, s = attention(spec, q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], softmax_scale=softmax_scale, **part)
        out[q0:q1] = o[0]
        lse[:, q0:q1] = s[0]
    return out, lse


def grads_packed(spec: AttentionSpec, q: Any, k: Any, v: Any, dout: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, *,
                 softmax_scale: float | None = None, **tensors: Any) -> dict[str, np.ndarray]:
    """Float64 gradients {dq, dk, dv[, dsinks]} of sum(out * dout) over packed sequences (dsinks summed)."""
    q, k, v, do = (_array(x) for x in (q, k, v, dout))
    result: dict[str, np.ndarray] = {"dq": np.zeros(q.shape), "dk": np.zeros(k.shape), "dv": np.zeros(v.shape)}
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(_bounds(cu_seqlens_q), _bounds(cu_seqlens_k), strict=True)):
        part = _entry_tensors(spec, tensors, b, q1 - q0, k1 - k0)
        g = grads(spec, q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], do[None, q0:q1], softmax_scale=softmax_scale,
                  **part)
        result["dq"][q0:q1] = g["dq"][0]
        result["dk"][k0:k1] = g["dk"][0]
        result["dv"][k0:k1] = g["dv"][0]
        if "dsinks" in g:
            result["dsinks"] = result.get("dsinks", 0.0) + g["dsinks"]
    return result


def attention_cache(spec: AttentionSpec, q: Any, k_cache: Any, v_cache: Any, cache_used: Any, *,
                    softmax_scale: float | None = None, **tensors: Any) -> tuple[np.ndarray, np.ndarray]:
    """Float64 (out, lse) of dense q (batch, seqlen_q, heads, d) over each entry's first cache_used[b] keys of a
    contiguous cache (batch, capacity, kv_heads, d)."""
    q, k, v = (_array(x) for x in (q, k_cache, v_cache))
    used = [int(x) for x in _array(cache_used).reshape(-1)]
    out = np.zeros(q.shape)
    lse = np.full((q.shape[0], q.shape[2], q.shape[1]), -np.inf)
    for b, n in enumerate(used):
        part = _entry_tensors(spec, tensors, b, q.shape[1], n)
        o, s = attention(spec, q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], softmax_scale=softmax_scale, **part)
        out[b], lse[b] = o[0], s[0]
    return out, lse
