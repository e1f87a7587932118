"""The decode launcher: short queries over a KV cache through the split-KV kernels (families/sm80_decode.py).

`DecodeKernels` compiles the decode cubin of an arch and tiling (DecodeRole) on first use and loads its entry
points once per device; a call's shapes become a `ReadyDecode`: the tiling and split count the family chose, its
launches with their loaded entry points, and a parameter block holding every field that depends only on the
shapes. Running it allocates the outputs, writes the call's pointers into a copy of that block and launches, so a
caller that repeats a shape (a decode loop) keeps the ReadyDecode and pays only that (runtime.kvcache). The cache
is read where it is: contiguous (batch, capacity, kv_heads, d) or a paged pool (num_blocks, page_size, kv_heads,
d) through its block table.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import env
from ..codegen.abi import DECODE_PARAMS, set_strides, struct_of, with_variant
from ..planning.ir_decode import DecodeRole
from ..planning.planner_decode import DecodeShape, decode_family, plan_decode
from ..spec.model import AttentionSpec
from . import device_checks
from .backward import LazyKernels
from .device import current_arch, dram_gbps, sm_count, stream_handle
from .driver import PreparedLaunch
from .variant_args import VariantArgs, prepare

if TYPE_CHECKING:
    import torch

    from ..planning.ir_decode import DecodePlan
    from ..spec.model import Arch
    from ..toolchain.artifacts import Cubin

_LOG2E = math.log2(math.e)


def page_divisor(page: int) -> tuple[int, int]:
    """(magic, shift) with key // page == umulhi(key, magic) >> shift for every key below 2**31 (the kernels'
    page_of): shift = ceil(log2(page)) - 1 and magic = ceil(2**(31 + ceil(log2(page))) / page), which fits 32
    bits. Why it is exact: magic * page = 2**(32 + shift) + e with 0 <= e < page, so the product exceeds key / page
    by key * e / (page * 2**(32 + shift)) < 1 / page, which cannot carry key / page past the next integer."""
    if page < 2:
        raise ValueError(f"a page holds at least 2 keys for its divisor, got {page}")
    bits = (page - 1).bit_length()
    return -(-(1 << (31 + bits)) // page), bits - 1


@dataclass(frozen=True)
class ReadyDecode:
    """A decode call's shape-dependent work, done once: q (batch, seqlen_q, heads, d) over a contiguous cache
    (batch, capacity, kv_heads, d) or a paged pool through a (batch, blocks) table of `page_size`-row blocks, with
    the strides it was made for. `template` is the parameter block with every field but the pointers, the scale
    and the variant's filled; `launches` pairs each step with its loaded entry point."""

    device: Any
    shape: DecodeShape
    role: DecodeRole
    head_dim: int
    struct: type[ctypes.Structure]
    template: bytes
    launches: tuple[PreparedLaunch, ...]

    def run(self, q: Any, k: Any, v: Any, used: Any, table: Any, softmax_scale: float, args: VariantArgs) -> Any:
        """(out, lse) of one call of the shapes this was made for (the caller checked them): out like q,
        lse (batch, heads, seqlen_q) in fp32."""
        import torch

        s = self.shape
        out = torch.empty((s.batch, s.seqlen_q, s.heads, self.head_dim), dtype=q.dtype, device=self.device)
        lse = torch.empty((s.batch, s.heads, s.seqlen_q), dtype=torch.float32, device=self.device)
        rows = s.batch * s.heads * s.seqlen_q
        # The splits' partials, o_part (splits, batch, heads, seqlen_q, d) then lse_part (splits, batch, heads,
        # seqlen_q), in one fp32 allocation.
        part = torch.empty(s.num_splits * rows * (self.head_dim + 1), dtype=torch.float32, device=self.device) \
            if s.num_splits > 1 else None
        if env.poison_outputs():
            for t in (out, lse, part):
                if t is not None:
                    t.fill_(math.nan)
        if not out.numel():
            return out, lse
        p = self.struct.from_buffer_copy(self.template)
        p.q, p.k, p.v, p.o, p.lse, p.seqused_k = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                                  lse.data_ptr(), used.data_ptr())
        p.scale_log2 = softmax_scale * _LOG2E
        if table is not None:
            p.block_table = table.data_ptr()
        if part is not None:
            p.o_part = part.data_ptr()
            p.lse_part = part.data_ptr() + s.num_splits * rows * self.head_dim * part.element_size()
        args.fill(p)
        stream = stream_handle(self.device.index)
        for launch in self.launches:
            launch(stream, p)
        return out, lse


class DecodeKernels(LazyKernels):
    """Compiles the decode cubin of `spec` for an arch and tiling on first use, loads its entry points once per
    device."""

    def __init__(self, spec: AttentionSpec) -> None:
        from ..toolchain.builder import build_decode

        super().__init__(spec, build_decode)
        self._role_cubins: dict[tuple[Arch, DecodeRole], Cubin] = {}
        self._plans: dict[Arch, DecodePlan] = {}

    def role_cubin(self, arch: Arch, role: DecodeRole) -> Cubin:
        """The cubin of the tiling `role` (the stream one is the arch's cubin)."""
        if role is DecodeRole.stream:
            return self.cubin(arch)
        from ..toolchain.builder import build_decode

        with self._lock:
            if (arch, role) not in self._role_cubins:
                self._role_cubins[(arch, role)] = build_decode(self.spec, arch, role)
            return self._role_cubins[(arch, role)]

    def stream_plan(self, arch: Arch) -> DecodePlan:
        """The stream plan of the arch (which names the waves tiling), planned without compiling."""
        with self._lock:
            if arch not in self._plans:
                self._plans[arch] = plan_decode(self.spec, arch)
            return self._plans[arch]

    def ready(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor | None,
              num_splits: int = 0) -> ReadyDecode:
        """The shape-dependent work of calls like this one: the tiling the family chooses for the shape, and
        `num_splits` 0: the family's split count (planning.splits), else that many."""

        arch = current_arch(q.device)
        stream = self.stream_plan(arch)
        family = decode_family(stream.family)
        device = q.device.index or 0
        sms = sm_count(device)
        batch, seqlen_q, heads, d = q.shape
        page = k.shape[1] if table is not None else 0
        capacity = table.shape[1] * page if table is not None else k.shape[1]
        role = family.role(stream, batch=batch, kv_heads=k.shape[2], heads=heads, seqlen_q=seqlen_q, keys=capacity,
                           num_sms=sms).role
        cubin = self.role_cubin(arch, role)
        plan: DecodePlan = cubin.source.plan
        splits = num_splits or family.splits(plan, batch=batch, kv_heads=k.shape[2], heads=heads,
                                             seqlen_q=seqlen_q, keys=capacity, num_sms=sms,
                                             dram_gbps=dram_gbps(device), paged=table is not None).splits
        shape = DecodeShape(batch=batch, heads=heads, kv_heads=k.shape[2], seqlen_q=seqlen_q, num_splits=splits)
        struct = struct_of(with_variant(DECODE_PARAMS, self.variant.fields))
        p = struct(seqlen_q=seqlen_q, seqlen_k=capacity, heads=heads, kv_heads=k.shape[2], batch=batch,
                   num_splits=splits, page_size=page)
        set_strides(p, q=q, k=k, v=v)
        # out is a fresh contiguous tensor shaped like q.
        p.o_batch_stride, p.o_row_stride, p.o_head_stride = seqlen_q * heads * d, heads * d, d
        p.lse_batch_stride, p.lse_head_stride = heads * seqlen_q, seqlen_q
        if table is not None:
            p.table_stride = table.stride(0)
            p.page_magic, p.page_shift = page_divisor(page)
            p.num_blocks = k.shape[0]
        p.check_counts = device_checks.counters(device).device
        launches = tuple(PreparedLaunch(self._function(device, arch, step.entry, step.smem_bytes, cubin), step.grid,
                                        step.threads, step.dependent) for step in family.steps(plan, shape))
        return ReadyDecode(device=q.device, shape=shape, role=role, head_dim=d, struct=struct,
                           template=bytes(p), launches=launches)

    def args(self, q: torch.Tensor, extras: list[torch.Tensor], scalars: list[float]) -> VariantArgs:
        """The variant's runtime arguments of a call, prepared for the parameter block."""
        return prepare(self.variant, q, extras, scalars, q.shape[0])

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, used: torch.Tensor,
                 table: torch.Tensor | None, softmax_scale: float, extras: list[torch.Tensor],
                 scalars: list[float], num_splits: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """(out, lse) of q over the cache; out like q, lse (batch, heads, seqlen_q)."""
        return self.ready(q, k, v, table, num_splits).run(q, k, v, used, table, softmax_scale,
                                                          self.args(q, extras, scalars))

