"""A CPU stand-in for AttentionKernel in the compat and Transformers tests: the runtime's calling contract (dense,
packed varlen, KV cache with paged pools) computed by attngen.reference, float64, from the spec itself.

`install(monkeypatch)` makes attngen.compat compile these instead of CUDA kernels; `CALLS` records which entry
each call took.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

import attngen
from attngen.compat import kernels
from attngen.compat.options import KernelOptions, spec_for
from attngen.features.variant import variant_of

CALLS: list[str] = []
#: The num_splits each with_kvcache call passed (the compat layer forwards flash_attn's).
KVCACHE_SPLITS: list[int] = []


class FakeKernel:
    """The contract of AttentionKernel on any device and dtype (float64 inside, q's dtype out)."""

    def __init__(self, spec: attngen.AttentionSpec) -> None:
        self.spec = spec
        self.batched = {a.name for a in variant_of(spec).arguments() if a.is_tensor and a.decl.shape[0] == "batch"}

    def __call__(self, q: Any, k: Any, v: Any, *, cu_seqlens_q: Any = None, cu_seqlens_k: Any = None,
                 max_seqlen_q: int | None = None, max_seqlen_k: int | None = None, softmax_scale: float | None = None,
                 return_lse: bool = False, **variant_args: Any) -> Any:
        if cu_seqlens_q is None:
            CALLS.append("dense")
            out, lse = self.dense(q, k, v, softmax_scale, variant_args)
        else:
            CALLS.append("varlen")
            assert cu_seqlens_q.dtype == torch.int32 and cu_seqlens_k.dtype == torch.int32
            lengths = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max().item(), (cu_seqlens_k[1:] - cu_seqlens_k[:-1])
            assert max_seqlen_q >= lengths[0] and max_seqlen_k >= lengths[1].max().item()
            out, lse = self.varlen(q, k, v, cu_seqlens_q.tolist(), cu_seqlens_k.tolist(), softmax_scale, variant_args)
        return (out, lse) if return_lse else out

    def dense(self, q: Any, k: Any, v: Any, scale: float | None, variant_args: dict[str, Any]) -> tuple[Any, Any]:
        assert q.dim() == 4 and k.shape == v.shape and q.shape[0] == k.shape[0] and q.shape[2] % k.shape[2] == 0
        out, lse = attngen.reference(self.spec, q, k, v, softmax_scale=scale, **variant_args)
        return torch.from_numpy(out).to(q.dtype), torch.from_numpy(lse).float()

    def varlen(self, q: Any, k: Any, v: Any, cu_q: list[int], cu_k: list[int], scale: float | None,
               variant_args: dict[str, Any]) -> tuple[Any, Any]:
        out = torch.zeros_like(q)
        lse = torch.full((q.shape[1], q.shape[0]), -torch.inf)
        for b in range(len(cu_q) - 1):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            o, s = self.dense(q[qs][None], k[ks][None], v[ks][None], scale, self._entry(variant_args, b))
            out[qs], lse[:, qs] = o[0], s[0]
        return out, lse

    def with_kvcache(self, q: Any, k_cache: Any, v_cache: Any, *, cache_seqlens: Any, k_new: Any = None,
                     v_new: Any = None, block_table: Any = None, softmax_scale: float | None = None,
                     return_lse: bool = False, split_kv: bool | None = None, num_splits: int = 0,
                     **variant_args: Any) -> Any:
        CALLS.append("kvcache")
        KVCACHE_SPLITS.append(num_splits)
        batch, new = q.shape[0], 0 if k_new is None else k_new.shape[1]
        lengths = [cache_seqlens] * batch if isinstance(cache_seqlens, int) else cache_seqlens.tolist()
        outs, lses = [], []
        for b in range(batch):
            rows = _rows(b, torch.arange(lengths[b] + new), k_cache.shape[1], block_table)
            if new:
                k_cache[rows[0][-new:], rows[1][-new:]] = k_new[b]
                v_cache[rows[0][-new:], rows[1][-new:]] = v_new[b]
            keys, values = k_cache[rows][None], v_cache[rows][None]
            o, s = self.dense(q[b:b + 1], keys, values, softmax_scale, self._entry(variant_args, b))
            outs.append(o)
            lses.append(s)
        out, lse = torch.cat(outs), torch.cat(lses)
        return (out, lse) if return_lse else out

    def _entry(self, variant_args: dict[str, Any], b: int) -> dict[str, Any]:
        return {n: t[b:b + 1] if n in self.batched else t for n, t in variant_args.items()}


def _rows(b: int, positions: Any, cache_rows: int, block_table: Any) -> tuple[Any, Any]:
    """(cache entries, rows) of sequence b's positions: its own entry, or its pages."""
    if block_table is None:
        return torch.full_like(positions, b), positions
    return block_table[b].long()[positions // cache_rows], positions % cache_rows


def fake_compile(options: KernelOptions, arch: str) -> FakeKernel:
    """spec_for(options) as a FakeKernel; float32/float64 tensors stand for bf16 (the reference is float64)."""
    if options.dtype in ("float32", "float64"):
        options = dataclasses.replace(options, dtype="bfloat16")
    return FakeKernel(spec_for(options))


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels.clear_cache()
    CALLS.clear()
    monkeypatch.setattr(kernels, "compile_kernel", fake_compile)
