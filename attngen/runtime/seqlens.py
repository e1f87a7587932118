"""Seqlens: where each batch entry's query and key sequences sit, for the launchers and the kernels' SeqLens.

Three shapes of a call share one description:
- dense: q (batch, seqlen_q, heads, d), k and v (batch, seqlen_k, kv_heads, d), every entry of full length;
- packed (varlen, flash_attn_varlen_func): q (total_q, heads, d), k and v (total_k, kv_heads, d) and int32
  cumulative lengths `cu_seqlens_q`/`cu_seqlens_k` of batch + 1 entries; the launchers see the packed tensors
  as one-entry batches (total, heads, d)[None], the kernels add each sequence's first row;
- a KV cache: dense q, a dense cache of `seqlen_k` rows per entry of which entry b uses `seqused_k[b]`.

The LSE is flash_attn's: (batch, heads, seqlen_q) dense, (heads, total_q) packed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

#: The tensors of the query side and of the key side of the parameter blocks: a packed side's tensors are one
#: entry (batch stride 0); the kernels step to a sequence through its first row.
Q_SIDE = ("q", "o", "dout", "dq")
K_SIDE = ("k", "v", "dk", "dv")


@dataclass(frozen=True)
class Seqlens:
    batch: int
    #: The longest query and key sequence (the grid's extent; every entry's length when dense).
    seqlen_q: int
    seqlen_k: int
    heads: int
    #: Rows of the query tensor: batch x seqlen_q dense, total_q packed.
    total_q: int
    cu_seqlens_q: Any = None
    cu_seqlens_k: Any = None
    seqused_k: Any = None

    @classmethod
    def dense(cls, q: Any, k: Any, seqused_k: Any = None) -> Seqlens:
        """A dense batch: q (batch, seqlen_q, heads, d), k (batch, seqlen_k, kv_heads, d)."""
        return cls(batch=q.shape[0], seqlen_q=q.shape[1], seqlen_k=k.shape[1], heads=q.shape[2],
                   total_q=q.shape[0] * q.shape[1], seqused_k=seqused_k)

    @classmethod
    def packed(cls, q: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int, max_seqlen_k: int) -> Seqlens:
        """Packed sequences: q (total_q, heads, d) with cumulative lengths of batch + 1 entries."""
        return cls(batch=cu_seqlens_q.shape[0] - 1, seqlen_q=max_seqlen_q, seqlen_k=max_seqlen_k, heads=q.shape[1],
                   total_q=q.shape[0], cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)

    def sizes(self, kv_heads: int) -> dict[str, int]:
        """The named sizes a spec's runtime tensors are declared in (variant_args.sizes_of for a dense call)."""
        return {"batch": self.batch, "heads": self.heads, "kv_heads": kv_heads, "seqlen_q": self.seqlen_q,
                "seqlen_k": self.seqlen_k}

    @property
    def is_packed(self) -> bool:
        return self.cu_seqlens_q is not None

    def lse_shape(self) -> tuple[int, ...]:
        return (self.heads, self.total_q) if self.is_packed else (self.batch, self.heads, self.seqlen_q)

    def entries(self, t: Any) -> Any:
        """`t` as the launchers see it: a packed (total, heads, d) tensor as a one-entry batch."""
        return t.unsqueeze(0) if self.is_packed else t

    def lse_entries(self, lse: Any) -> Any:
        """The LSE (or D) as (entries, heads, rows): a packed (heads, total_q) one as a one-entry batch."""
        return lse.unsqueeze(0) if self.is_packed else lse

    @cached_property
    def batch_order(self) -> Any:
        """Packed entries in order of decreasing work (query rows x keys), an int32 tensor the kernels map their
        grid's batch index through (longest sequences first: the heaviest blocks start first and the last wave
        holds short ones); None for one entry or a dense batch. Computed on the GPU, without a sync."""
        if not self.is_packed or self.batch < 2:
            return None
        import torch

        cq, ck = self.cu_seqlens_q, self.cu_seqlens_k
        work = (cq[1:] - cq[:-1]).to(torch.int64) * (ck[1:] - ck[:-1]).to(torch.int64)
        return torch.argsort(work, descending=True).to(torch.int32)

    def grid(self, block_rows: int, rows: int | None = None) -> tuple[int, int, int]:
        """(row blocks of the longest sequence, heads, batch): `rows` the longest sequence's rows (seqlen_q)."""
        rows = self.seqlen_q if rows is None else rows
        return (-(-rows // block_rows), self.heads, self.batch)

    def fill(self, params: Any, order: bool = True) -> None:
        """The SeqLens fields of a parameter block whose strides are set (set_strides): lengths, the
        cumulative-length pointers, the LSE's strides, and batch strides 0 on a packed side. `order`: the entries'
        order for a 3-D grid (batch_order; a kernel on a flat grid reads its tile table instead)."""
        params.seqlen_q = self.seqlen_q
        params.seqlen_k = self.seqlen_k
        for name in ("cu_seqlens_q", "cu_seqlens_k", "seqused_k"):
            t = getattr(self, name)
            setattr(params, name, t.data_ptr() if t is not None else 0)
        names = {f[0] for f in params._fields_}
        if "batch_order" in names and order:
            entries = self.batch_order
            params.batch_order = entries.data_ptr() if entries is not None else 0
        if self.is_packed:
            params.lse_batch_stride, params.lse_head_stride = 0, self.total_q
            for side in (Q_SIDE, K_SIDE):
                for t in side:
                    if f"{t}_batch_stride" in names:
                        setattr(params, f"{t}_batch_stride", 0)
        else:
            params.lse_batch_stride, params.lse_head_stride = self.heads * self.seqlen_q, self.seqlen_q


def _int_vector(name: str, t: Any, device: Any, length: int | None = None) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    if t.dtype != torch.int32 or t.dim() != 1:
        raise ValueError(f"{name} must be a 1-D int32 tensor, got {t.dtype} of shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device} with q, got a tensor on {t.device}")
    if length is not None and t.shape[0] != length:
        raise ValueError(f"{name} must have {length} entries, got {t.shape[0]}")


def _max_seqlen(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def check_packed(q: Any, k: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: Any, max_seqlen_k: Any,
                 check_values: bool) -> None:
    """Packed (varlen) arguments as flash_attn_varlen_func takes them; with `check_values` the lengths themselves
    (one small copy to the host): cumulative from 0, nondecreasing, ending at the tensors' rows, no longer than
    the max_seqlen given (a longer one would be cut short, a wrong end would read out of bounds)."""
    if cu_seqlens_q is None or cu_seqlens_k is None:
        raise ValueError("packed sequences need both cu_seqlens_q and cu_seqlens_k (int32, batch + 1 entries)")
    _int_vector("cu_seqlens_q", cu_seqlens_q, q.device)
    if cu_seqlens_q.shape[0] < 2:
        raise ValueError(f"cu_seqlens_q must have batch + 1 >= 2 entries, got {cu_seqlens_q.shape[0]}")
    _int_vector("cu_seqlens_k", cu_seqlens_k, q.device, cu_seqlens_q.shape[0])
    limits = {"max_seqlen_q": _max_seqlen("max_seqlen_q", max_seqlen_q),
              "max_seqlen_k": _max_seqlen("max_seqlen_k", max_seqlen_k)}
    if not check_values:
        return
    for name, cu, rows, longest in (("cu_seqlens_q", cu_seqlens_q, q.shape[0], "max_seqlen_q"),
                                    ("cu_seqlens_k", cu_seqlens_k, k.shape[0], "max_seqlen_k")):
        values = cu.tolist()
        lengths = [b - a for a, b in zip(values, values[1:], strict=False)]
        if values[0] != 0 or min(lengths) < 0:
            raise ValueError(f"{name} must start at 0 and never decrease, got {values[:8]}...")
        if values[-1] != rows:
            raise ValueError(f"{name} must end at the {rows} rows of its tensor, got {values[-1]}")
        if max(lengths) > limits[longest]:
            raise ValueError(f"{longest} is {limits[longest]} but a sequence has {max(lengths)} rows; pass the "
                             f"longest length (or more)")


def check_used_keys(seqused_k: Any, batch: int, capacity: int, device: Any, check_values: bool) -> None:
    """A KV cache's used keys per entry: int32 (batch,), each in [0, capacity]."""
    _int_vector("cache_seqlens", seqused_k, device, batch)
    if check_values and batch:
        lo, hi = int(seqused_k.min()), int(seqused_k.max())
        if lo < 0 or hi > capacity:
            raise ValueError(f"cache_seqlens (plus the new keys) must lie in [0, {capacity}] (the cache's rows), "
                             f"got values from {lo} to {hi}")
