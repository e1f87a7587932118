"""The Hopper backward's launches, prepared once per call geometry (runtime.prepared): the two parameter blocks'
shape-dependent fields, the tensor maps' prototypes, the grids and launch configurations of the preprocess, the
dK/dV kernel and dq_convert. A call allocates its buffers, writes its pointers into copies of the blocks, looks its
maps up by address and launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..codegen.abi import BWD_PARAMS, HOPPER_BWD_PARAMS, tile_table_entry, with_variant
from ..planning.ir_bwd import HopperBwdPlan
from ..planning.planner_bwd import LoadFunction
from ..runtime import backward as rt
from ..runtime import tile_table, tma
from ..runtime.device import sm_count
from ..runtime.driver import PreparedLaunch
from ..runtime.prepared import ParamTemplate, copied
from .sm90_dq_tiles import DQ_CONVERT_THREADS, dq_chains
from .sm90_tail_order import call_tail_chains

if TYPE_CHECKING:
    import torch

#: The call's tensors TMA reads (BwdCall's attributes), in the order a describability check copies them.
TMA_INPUTS = ("q", "k", "v", "dout")


@dataclass(frozen=True)
class ReadyHopperBackward:
    """The backward of one geometry, ready to run (families/sm90_bwd.py plans it)."""

    plan: HopperBwdPlan
    #: TMA_INPUTS a map cannot address in place (a stride-0 broadcast, say): they go in as contiguous copies.
    copies: tuple[str, ...]
    pre: ParamTemplate
    hopper: ParamTemplate
    #: The maps of the call's tensors, then those of its buffers.
    maps: tuple[tma.MapSlot, ...]
    buffer_maps: tuple[tma.MapSlot, ...]
    preprocess: rt.Preprocess
    #: On a packed batch's flat preprocess grid: its table's entry order is the dK/dV kernel's batch_order.
    flat: bool
    dkdv: PreparedLaunch | None
    convert: PreparedLaunch | None

    def run(self, call: rt.BwdCall, stream: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """dq, dk, dv of `call` (of this geometry), queued on `stream`."""
        call = copied(call, self.copies)
        b = _buffers(self.plan, call)
        params = self.pre.make(lambda p: rt.call_fields(p, b, call, order=False))
        hopper = self.hopper.make(lambda p: rt.call_fields(p, b, call, order=not self.flat))
        for slot in self.maps:
            slot.fill(hopper, call)
        for slot in self.buffer_maps:
            slot.fill(hopper, b)
        table = self.preprocess(params, stream, call.seqs)
        if self.flat:
            order = table.order if table is not None else call.seqs.batch_order
            hopper.batch_order = order.data_ptr() if order is not None else 0
        if self.dkdv is not None:
            self.dkdv(stream, hopper)
        if self.convert is not None:
            self.convert(stream, hopper)
        return rt.finish(b, call.seqs.seqlen_k, call.softmax_scale, converted=self.plan.dkdv_wgmma.dq_red)


def prepare(plan: HopperBwdPlan, function: LoadFunction, call: rt.BwdCall) -> ReadyHopperBackward:
    """The ready backward of calls like `call`."""
    copies = tma.needs_copy(call, TMA_INPUTS)
    call = copied(call, copies)
    h, seqs = plan.dkdv_wgmma, call.seqs
    b = _buffers(plan, call)
    # Packed: the preprocess runs on a flat grid of the entries' tiles (runtime/tile_table.py).
    tiles_entry = tile_table_entry(plan.kernel_name) if tile_table.serves(seqs, call.args) else None
    maps = tuple(tma.MapSlot(field, n, tma.map_key(getattr(call, n), rows))
                 for field, n, rows in (("tma_q", "q", h.block_m), ("tma_do", "dout", h.block_m),
                                        ("tma_k", "k", h.block_n), ("tma_v", "v", h.block_n)))
    buffer_maps: tuple[tma.MapSlot, ...] = ()
    if not h.dq_red and not h.split:
        # dQ boxes: one warpgroup's wgmma rows (64) by 128 bytes of fp32 columns (the split's v2 reductions and a
        # tile-ordered accumulator need no map: the kernels leave it unread).
        from ..codegen import wgmma

        buffer_maps = (tma.MapSlot("tma_dq_accum", "dq_accum", tma.map_key(b.dq_accum, wgmma.M)),)
    pre, dkdv = plan.entry_names[:2]
    fields = call.args.fields
    dkdv_launch = convert = None
    hopper = rt.param_template(with_variant(HOPPER_BWD_PARAMS, fields), b, call)
    if seqs.seqlen_k:
        grid = (-(-seqs.seqlen_k // h.block_n), call.k.shape[2], seqs.batch)
        dkdv_launch = PreparedLaunch(function(dkdv, h.smem_bytes), grid, h.threads, dependent=plan.dependent_launch)
        if h.ordered_dq:
            chains = dq_chains(grid[0], grid[1] * grid[2], sm_count(call.q.device.index))
            hopper = ParamTemplate(hopper.make(lambda p: setattr(p, "dq_chains", chains)))
        elif plan.tail_waves:
            tail = call_tail_chains(grid[0], grid[1] * grid[2], call.q, plan.tail_waves)
            hopper = ParamTemplate(hopper.make(lambda p: setattr(p, "tail_chains", tail)))
    if h.dq_red and seqs.seqlen_q:
        # One block per (query tile, head, entry) of the tile-ordered accumulator: dQ scaled, in the input dtype.
        # With dq_overlap its blocks start under the dK/dV kernel's last wave and wait for their (entry, KV head).
        convert = PreparedLaunch(function(plan.entry_names[2], 0), seqs.grid(h.block_m), DQ_CONVERT_THREADS,
                                 dependent=plan.dependent_launch or h.dq_overlap)
    return ReadyHopperBackward(
        plan=plan, copies=copies, pre=rt.param_template(with_variant(BWD_PARAMS, fields), b, call),
        hopper=hopper, maps=maps,
        buffer_maps=buffer_maps,
        preprocess=rt.preprocess(function, pre, plan.preprocess_rows, seqs, b, tiles_entry,
                                 dependent=plan.dependent_launch),
        flat=tiles_entry is not None, dkdv=dkdv_launch, convert=convert)


def _buffers(plan: HopperBwdPlan, call: rt.BwdCall) -> rt.Buffers:
    """D and the LSE padded per entry to whole query tiles (the producer bulk-copies a tile's row values), and so is
    a tile-ordered dQ accumulator (dq_red), whose tiles the consumers add in fragment order and the preprocess
    zeroes."""
    h = plan.dkdv_wgmma
    return rt.buffers(call.q, call.k, call.v, accumulate=True, entries=call.seqs.batch, pad_rows=h.block_m,
                      dlse=call.dlse, semaphores=h.ordered_dq, tiled_dq=h.dq_red, zeroed=not h.dq_red,
                      done_counters=h.dq_overlap)
