"""The Hopper forward's launch, prepared once per call geometry (runtime.prepared): the parameter block's
shape-dependent fields, the tensor maps' prototypes, the grid (a packed batch's flat grid bound included) and the
launch configuration. A call writes its pointers into a copy of the block, looks its maps up by address (an 8-bit
V's after transposing it), builds a packed batch's tile table and launches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..codegen.abi import tile_table_entry, vt_entry, with_variant
from ..planning.ir import KernelPlan
from ..runtime import fp8_layout, tile_table, tma
from ..runtime.driver import PreparedLaunch
from ..runtime.forward import FwdCall, call_fields, param_template
from ..runtime.prepared import ParamTemplate, copied
from .sm90_tail_order import call_tail_chains, fwd_tail_cap

#: The call's tensors TMA reads (FwdCall's attributes).
TMA_INPUTS = ("q", "k", "v")


@dataclass(frozen=True)
class ReadyHopperForward:
    """The forward of one geometry, ready to run (families/sm90_fwd.py plans it)."""

    #: TMA_INPUTS a map cannot address in place (a stride-0 broadcast, say): they go in as contiguous copies.
    copies: tuple[str, ...]
    params: ParamTemplate
    #: The maps of the call's tensors; V's is absent when V goes in transposed.
    maps: tuple[tma.MapSlot, ...]
    launch: PreparedLaunch
    #: An 8-bit V's transpose entry point and the box rows of its map, else None.
    transpose: tuple[Any, int] | None
    #: A packed batch's flat grid: the tile table builder and its side, else None.
    tiles: tuple[Any, tile_table.TileSide] | None

    def run(self, call: FwdCall, stream: int) -> None:
        call = copied(call, self.copies)
        params = self.params.make(lambda p: call_fields(p, call, order=self.tiles is None))
        for slot in self.maps:
            slot.fill(params, call)
        if self.transpose is not None:
            # An 8-bit V goes in transposed (keys contiguous), as (batch, head_dim, kv_heads, keys) for the map: rows
            # of the box are head-dim rows, its 128-byte columns keys.
            fn, rows = self.transpose
            vt = fp8_layout.transpose(fn, stream, call.v)
            tma.fill(params, "tma_v", tma.tensor_map(tma.map_key(vt.permute(0, 2, 1, 3), rows)))
        if self.tiles is not None:
            builder, side = self.tiles
            tile_table.build(builder, stream, call.seqs, side).attach(params, call.seqs.batch)
        self.launch(stream, params)


def prepare(plan: KernelPlan, fn: Any, call: FwdCall, fields: tuple[Any, ...], v_keys: int) -> ReadyHopperForward:
    """The ready forward of calls like `call`: `fields` the family's parameter block before the variant's, `v_keys`
    the keys per box of a transposed V (0: V as it is)."""
    copies = tma.needs_copy(call, TMA_INPUTS)
    call = copied(call, copies)
    seqs = call.seqs
    maps = [tma.MapSlot("tma_q", "q", tma.map_key(call.q, plan.block_m)),
            tma.MapSlot("tma_k", "k", tma.map_key(call.k, plan.block_n))]
    transpose = None
    if v_keys:
        transpose = (fn.sibling(vt_entry(plan.kernel_name)), plan.spec.head_dim)
    else:
        maps.append(tma.MapSlot("tma_v", "v", tma.map_key(call.v, plan.block_n)))
    grid, tiles = seqs.grid(plan.block_m), None
    if tile_table.serves(seqs, call.args):   # packed: a flat grid of the entries' query tiles
        side = tile_table.TileSide(key_side=False, tile_rows=plan.block_m)
        tiles = (fn.sibling(tile_table_entry(plan.kernel_name)), side)
        grid = (tile_table.blocks(seqs, side, seqs.heads, call.q.shape[1]), 1, 1)
    params = param_template(with_variant(fields, call.args.fields), call)
    if plan.tail_waves and tiles is None:
        most = fwd_tail_cap(seqs.seqlen_k, plan.spec.head_dim, call.k.element_size())
        tail = call_tail_chains(grid[0], grid[1] * grid[2], call.q, plan.tail_waves, most)
        params = ParamTemplate(params.make(lambda p: setattr(p, "tail_chains", tail)))
    return ReadyHopperForward(copies=copies, params=params,
                              maps=tuple(maps), launch=PreparedLaunch(fn, grid, plan.threads), transpose=transpose,
                              tiles=tiles)
