"""The decode launcher: short queries over a KV cache through the split-KV kernels (families/sm80_decode.py).

`DecodeKernels` compiles the decode cubin of an arch on first use and loads its entry points once per device;
a call becomes a `DecodeCall` (the tensors, the shape, the split count the family chose and the buffers of the
splits' partials) that the family launches. The cache is read where it is: contiguous (batch, capacity,
kv_heads, d) or a paged pool (num_blocks, page_size, kv_heads, d) through its block table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

from .. import env
from ..codegen.abi import Field, set_strides, struct_of
from ..spec.model import AttentionSpec
from .backward import LazyKernels
from .device import current_arch
from .variant_args import VariantArgs

if TYPE_CHECKING:
    import torch

    from ..planning.ir import DecodePlan


@dataclass(frozen=True)
class DecodeCall:
    """One decode launch: q (batch, seqlen_q, heads, d) over k, v (a contiguous cache or a paged pool) of which
    entry b uses `used[b]` keys; `table` the block table (None: contiguous) of `page_size`-row blocks."""

    q: Any
    k: Any
    v: Any
    out: Any
    lse: Any
    used: Any
    table: Any
    page_size: int
    capacity: int
    softmax_scale: float
    args: VariantArgs
    num_splits: int
    o_part: Any
    lse_part: Any

    @property
    def batch(self) -> int:
        return int(self.q.shape[0])

    @property
    def seqlen_q(self) -> int:
        return int(self.q.shape[1])

    @property
    def heads(self) -> int:
        return int(self.q.shape[2])

    @property
    def kv_heads(self) -> int:
        return int(self.k.shape[2])

    def params(self, fields: tuple[Field, ...]) -> Any:
        """The decode parameter block of `fields` (abi.DECODE_PARAMS and the variant's)."""
        p = struct_of(fields)(q=self.q.data_ptr(), k=self.k.data_ptr(), v=self.v.data_ptr(), o=self.out.data_ptr(),
                              lse=self.lse.data_ptr(), seqused_k=self.used.data_ptr(), seqlen_q=self.seqlen_q,
                              seqlen_k=self.capacity, heads=self.heads, kv_heads=self.kv_heads,
                              scale_log2=self.softmax_scale * math.log2(math.e), batch=self.batch,
                              num_splits=self.num_splits, page_size=self.page_size,
                              o_part=self.o_part.data_ptr() if self.o_part is not None else 0,
                              lse_part=self.lse_part.data_ptr() if self.lse_part is not None else 0)
        set_strides(p, q=self.q, k=self.k, v=self.v, o=self.out)
        p.lse_batch_stride, p.lse_head_stride = self.heads * self.seqlen_q, self.seqlen_q
        if self.table is not None:
            p.block_table, p.table_stride = self.table.data_ptr(), self.table.stride(0)
        self.args.fill(p)
        return p


@cache
def _sm_count(device_index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(device_index).multi_processor_count)


class DecodeKernels(LazyKernels):
    """Compiles the decode cubin of `spec` for an arch on first use, loads its entry points once per device."""

    def __init__(self, spec: AttentionSpec) -> None:
        from ..toolchain.builder import build_decode

        super().__init__(spec, build_decode)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, used: torch.Tensor,
                 table: torch.Tensor | None, softmax_scale: float, extras: list[torch.Tensor],
                 scalars: list[float], num_splits: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, lse) of q over the cache; out like q, lse (batch, heads, seqlen_q). `num_splits` 0: the family's
        choice (planning.splits), else that many."""
        import torch

        from ..planning.planner_decode import decode_family
        from .variant_args import prepare

        arch = current_arch(q.device)
        plan: DecodePlan = self.cubin(arch).source.plan
        family = decode_family(plan.family)
        device = q.device.index or 0
        batch, seqlen_q, heads, d = q.shape
        page = k.shape[1] if table is not None else 0
        capacity = table.shape[1] * page if table is not None else k.shape[1]
        choice = family.splits(plan, batch=batch, kv_heads=k.shape[2], heads=heads, seqlen_q=seqlen_q,
                               keys=capacity, num_sms=_sm_count(device))
        if num_splits:
            choice = replace(choice, splits=num_splits, reason="the caller's num_splits")
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
        o_part = lse_part = None
        if choice.splits > 1:
            o_part = torch.empty((choice.splits, batch, heads, seqlen_q, d), dtype=torch.float32, device=q.device)
            lse_part = torch.empty((choice.splits, batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
        if env.poison_outputs():
            for t in (out, lse, o_part, lse_part):
                if t is not None:
                    t.fill_(math.nan)
        call = DecodeCall(q=q, k=k, v=v, out=out, lse=lse, used=used, table=table, page_size=page, capacity=capacity,
                          softmax_scale=softmax_scale, args=prepare(self.variant, q, extras, scalars, batch),
                          num_splits=choice.splits, o_part=o_part, lse_part=lse_part)
        if out.numel():
            stream = torch.cuda.current_stream(q.device).cuda_stream
            family.launch(plan, lambda entry, smem: self._function(device, arch, entry, smem), stream, call)
        return out, lse
