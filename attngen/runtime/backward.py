"""The backward launcher: the kernels of one spec's backward family, on PyTorch's stream.

`BackwardKernels` compiles the backward cubin of an arch on first use and hands the launch to the family
that planned it (`planner_bwd.backward_family(plan.family).launch`); the helpers below are what every
family's launch shares: the gradient buffers, the parameter block, the preprocess step and the end.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from ..codegen.abi import Field, ctypes_struct, set_strides
from ..features.score_mod import SINKS
from ..features.variant import variant_of
from ..spec.model import Arch, AttentionSpec
from ..toolchain.artifacts import Cubin
from .device import current_arch
from .driver import PreparedLaunch
from .prepared import CallGeometry, ParamTemplate, ReadyCache
from .seqlens import Seqlens
from .variant_args import KernelVariant, VariantArgs

if TYPE_CHECKING:
    import torch

    from .tile_table import TileSide, TileTable

#: Threads of a preprocess block (4 warps, BwdPlan.preprocess_rows query rows).
PRE_THREADS = 128


class LazyKernels:
    """The kernels of one spec that are built beside its forward on first use (`build(spec, arch)` gives the
    cubin of an arch), loaded once per device and entry point."""

    def __init__(self, spec: AttentionSpec, build: Callable[[AttentionSpec, Arch], Cubin]) -> None:
        self.spec = spec
        self.cubins: dict[Arch, Cubin] = {}
        self._build = build
        self._loaded: dict[tuple[int, str], Any] = {}
        self._lock = threading.Lock()
        self.variant = KernelVariant.of(variant_of(spec))

    def cubin(self, arch: Arch) -> Cubin:
        with self._lock:
            if arch not in self.cubins:
                self.cubins[arch] = self._build(self.spec, arch)
            return self.cubins[arch]

    def _function(self, device_index: int, arch: Arch, entry: str, smem: int, source: Cubin | None = None) -> Any:
        """The loaded entry point `entry` of the arch's cubin (or of `source`, one of this spec's other cubins)."""
        key = (device_index, entry)
        fn = self._loaded.get(key)
        if fn is None:
            from .driver import load_function

            fn = load_function((source or self.cubin(arch)).data, entry, smem, device_index)
            self._loaded[key] = fn
        return fn


class BackwardKernels(LazyKernels):
    """Compiles the backward cubin of `spec` for an arch on first use, loads it once per device; keeps the ready
    launches of the last few call geometries (runtime.prepared)."""

    def __init__(self, spec: AttentionSpec) -> None:
        from ..toolchain.builder import build_bwd

        super().__init__(spec, build_bwd)
        self.ready: ReadyCache[Any] = ReadyCache()

    def __call__(self, dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, dlse: torch.Tensor | None, softmax_scale: float, extras: list[torch.Tensor],
                 scalars: list[float], seqs: Seqlens) -> tuple[torch.Tensor, ...]:
        """(dq, dk, dv, dsinks); dsinks is empty without sinks."""
        from .device import stream_handle
        from .variant_args import prepare

        args = prepare(self.variant, q, extras, scalars, seqs.batch)
        call = BwdCall(dout=dout, q=q, k=k, v=v, out=out, lse=lse, dlse=dlse, softmax_scale=softmax_scale,
                       args=args, seqs=seqs)
        ready = self.ready.get(call.geometry(), lambda: self._prepare(call))
        dq, dk, dv = ready.run(call, stream_handle(q.device.index or 0))
        sinks = args.tensors.get(SINKS)
        dsinks = sinks_grad(sinks, dout, out, lse, dlse) if sinks is not None else _no_sinks(q)
        return dq, dk, dv, dsinks

    def replace(self, arch: Arch, cubin: Cubin) -> None:
        """Run `cubin` (another plan of this spec, for sweeps and tests) on `arch` from the next call on: the loaded
        functions and the ready launches of the previous one are dropped."""
        with self._lock:
            self.cubins[arch] = cubin
            self._loaded.clear()
        self.ready.clear()

    def _prepare(self, call: BwdCall) -> Any:
        """The ready launch of calls like `call`: its family's (ReadyBackward)."""
        from ..planning.planner_bwd import backward_family

        arch = current_arch(call.q.device)
        plan = self.cubin(arch).source.plan
        device = call.q.device.index or 0

        def function(entry: str, smem: int) -> Any:
            return self._function(device, arch, entry, smem)

        return backward_family(plan.family).prepare(plan, function, call)


def _no_sinks(q: torch.Tensor) -> torch.Tensor:
    import torch

    return q.new_empty((0,), dtype=torch.float32)


def sinks_grad(sinks: torch.Tensor, dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
               dlse: torch.Tensor | None) -> torch.Tensor:
    """d loss / d sinks[h] = -sum over rows of P_sink (D - dlse): the probability mass the sink took, times
    each row's D = rowsum(dO * O) (a sink adds to the denominator, never to the output)."""
    import torch

    wide = lse.dtype  # fp32 for the kernels, float64 for references
    delta = (dout.to(wide) * out.to(wide)).sum(-1).transpose(1, 2)  # (batch, heads, seqlen_q)
    if dlse is not None:
        delta = delta - dlse
    p_sink = torch.exp(sinks.to(wide)[None, :, None] - lse)
    p_sink = torch.where(torch.isfinite(lse), p_sink, torch.zeros_like(p_sink))
    return -(p_sink * delta).sum(dim=(0, 2))


@dataclass(frozen=True)
class Buffers:
    """What a backward writes: D per query row, the gradients, and (for a family that adds dQ up) its
    fp32 accumulator (else `delta` stands in for the unused pointer). With padded rows (`pad_rows` > 0) D and
    `lse_log2` (the LSE in log2 units) are (heads, rows_stride) buffers whose entries start at whole tiles
    (the preprocess's padded_rows_offset); `dlse`, the LSE's gradient in the LSE's layout, is held here until
    the preprocess that reads it has been queued."""

    delta: Any
    dq: Any
    dk: Any
    dv: Any
    dq_accum: Any
    accumulate: bool
    lse_log2: Any = None
    pad_rows: int = 0
    rows_stride: int = 0
    dlse: Any = None
    #: An ordered dQ's semaphores: (heads, rows_stride / pad_rows) int32 zeros, one per padded query tile.
    dq_sem: Any = None
    #: (entries, kv_heads) int32 the preprocess zeroes, for a dq_convert that overlaps the dK/dV kernel: each dK/dV
    #: block adds one once its dQ reductions are performed.
    dkdv_done: Any = None


def padded_rows(flat_rows: int, entries: int, tile: int) -> int:
    """Values per head of a padded row buffer: the flat query rows rounded up to a tile, and a tile per entry
    (each entry's rows start at a tile boundary at most its flat row + entry x tile)."""
    return -(-flat_rows // tile) * tile + entries * tile


def buffers(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, accumulate: bool, *, entries: int = 0,
            pad_rows: int = 0, dlse: torch.Tensor | None = None, semaphores: bool = False,
            tiled_dq: bool = False, zeroed: bool = True, done_counters: bool = False) -> Buffers:
    """The gradient buffers of one call: `entries` the batch's entries (packed or dense), `pad_rows` the query
    tile of a family that wants its row values padded per entry (0: flash_attn's LSE layout), `semaphores` one
    zeroed int32 per padded query tile for an ordered dQ (needs pad_rows), `tiled_dq` the fp32 dQ accumulator
    tile-ordered, (heads, rows_stride, head_dim) with the entries' query tiles where the row buffers have them, each
    tile's values in the family's order (families/sm90_dq_tiles.py; needs pad_rows), instead of (batch, seqlen_q, heads,
    head_dim). `zeroed` False: a tile-ordered accumulator is left unwritten (the family's preprocess zeroes every row
    its kernels read). `done_counters`: one int32 per (entry, KV head), left for the preprocess to zero."""
    import torch

    batch, seqlen_q, heads, _ = q.shape
    lse_log2, stride = None, 0
    if pad_rows:
        # Not zeroed: the preprocess writes every row a tile reads (each entry's rows and its last tile's padding).
        stride = padded_rows(batch * seqlen_q, entries, pad_rows)
        delta = torch.empty((heads, stride), dtype=torch.float32, device=q.device)
        lse_log2 = torch.empty_like(delta)
    else:
        delta = torch.empty((batch, heads, seqlen_q), dtype=torch.float32, device=q.device)
    if tiled_dq and not (pad_rows and accumulate):
        raise ValueError("a tile-ordered dQ accumulator is per padded query tile: pass pad_rows and accumulate")
    if tiled_dq:
        # Zeroed (here or by the family's preprocess): the tiles' padding rows get zero adds (their dS is 0) and
        # dq_convert reads only the entries' rows.
        alloc = torch.zeros if zeroed else torch.empty
        dq_accum = alloc((heads, stride, q.shape[-1]), dtype=torch.float32, device=q.device)
    elif accumulate:
        dq_accum = torch.zeros((batch, seqlen_q, heads, q.shape[-1]), dtype=torch.float32, device=q.device)
    else:
        dq_accum = delta
    if dlse is not None:
        dlse = dlse.to(torch.float32).contiguous()
    if semaphores and not pad_rows:
        raise ValueError("an ordered dQ's semaphores are per padded query tile: pass pad_rows")
    dq_sem = torch.zeros((heads, stride // pad_rows), dtype=torch.int32, device=q.device) if semaphores else None
    done = torch.empty((entries or batch, k.shape[2]), dtype=torch.int32, device=q.device) if done_counters else None
    return Buffers(delta=delta, dq=torch.empty_like(q, memory_format=torch.contiguous_format),
                   dk=torch.empty_like(k, memory_format=torch.contiguous_format),
                   dv=torch.empty_like(v, memory_format=torch.contiguous_format), dq_accum=dq_accum,
                   accumulate=accumulate, lse_log2=lse_log2, pad_rows=pad_rows, rows_stride=stride, dlse=dlse,
                   dq_sem=dq_sem, dkdv_done=done)


@cache
def _struct(fields: tuple[Field, ...]) -> type[Any]:
    return ctypes_struct(fields, "BwdParams")


@dataclass
class BwdCall:
    """One backward call as the families receive it: the tensors (as Seqlens.entries gives them), the LSE's
    gradient or None, the scale, the variant's prepared arguments and the sequences."""

    dout: Any
    q: Any
    k: Any
    v: Any
    out: Any
    lse: Any
    dlse: Any
    softmax_scale: float
    args: VariantArgs
    seqs: Seqlens

    def geometry(self) -> CallGeometry:
        """The key of this call's ready launch (runtime.prepared)."""
        return CallGeometry.of((self.dout, self.q, self.k, self.v, self.out, self.lse, self.dlse), self.seqs,
                               self.args)


def param_block(fields: tuple[Field, ...], b: Buffers, call: BwdCall, order: bool = True) -> Any:
    """A backward parameter block of `fields` (a family's: the common fields, maybe more in front) with the
    pointers, strides, shapes and scales every backward kernel reads; family-specific fields (TMA maps)
    are left for the family to fill. `order`: Seqlens.fill's."""
    params = _struct(fields)()
    shape_fields(params, b, call)
    call_fields(params, b, call, order)
    return params


def param_template(fields: tuple[Field, ...], b: Buffers, call: BwdCall) -> ParamTemplate:
    """The geometry's part of param_block, for calls like `call` whose buffers are like `b`; `call_fields` writes
    the rest."""
    params = _struct(fields)()
    shape_fields(params, b, call)
    return ParamTemplate(params)


def shape_fields(params: Any, b: Buffers, call: BwdCall) -> None:
    """The fields of a parameter block that follow from the call's geometry: sizes and strides."""
    q, k = call.q, call.k
    params.rows_stride = b.rows_stride
    params.seqlen_q, params.seqlen_k, params.heads, params.kv_heads = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    set_strides(params, q=q, k=k, v=call.v, o=call.out, dout=call.dout, dq=b.dq, dk=b.dk, dv=b.dv)


def call_fields(params: Any, b: Buffers, call: BwdCall, order: bool = True) -> None:
    """The fields of a parameter block that change between calls of one geometry: the pointers, the scales, the
    sequences (Seqlens.fill, with `order`) and the variant's arguments."""
    params.q, params.k, params.v = call.q.data_ptr(), call.k.data_ptr(), call.v.data_ptr()
    params.o, params.dout, params.lse = call.out.data_ptr(), call.dout.data_ptr(), call.lse.data_ptr()
    params.delta = b.delta.data_ptr()
    params.dlse = b.dlse.data_ptr() if b.dlse is not None else 0
    params.lse_log2 = b.lse_log2.data_ptr() if b.lse_log2 is not None else 0
    params.dq, params.dk, params.dv = b.dq.data_ptr(), b.dk.data_ptr(), b.dv.data_ptr()
    params.dq_accum = b.dq_accum.data_ptr()
    params.dq_sem = b.dq_sem.data_ptr() if b.dq_sem is not None else 0
    params.dkdv_done = b.dkdv_done.data_ptr() if b.dkdv_done is not None else 0
    params.scale_log2 = call.softmax_scale * math.log2(math.e)
    params.softmax_scale = call.softmax_scale
    call.seqs.fill(params, order=order)
    call.args.fill(params)


@dataclass(frozen=True)
class Preprocess:
    """The preprocess of one geometry: D = rowsum(dO * O) per query row, less the LSE's gradient when there is one
    (d lse / d S = P: the LSE's gradient enters dS = P (dP - D) as D - dlse); with padded rows also the LSE in log2
    units and the padding of each entry's last tile. `launch` is None without query rows; `tiles` the cubin's tile
    table builder and its side, for a packed batch's flat grid (runtime/tile_table.py)."""

    launch: PreparedLaunch | None
    tiles: tuple[Any, TileSide] | None = None

    def __call__(self, params: Any, stream: int, seqs: Seqlens) -> TileTable | None:
        """Queue it on `stream` with `params`; the tile table built, if any."""
        from . import tile_table

        if self.launch is None:
            return None
        table = None
        if self.tiles is not None:
            builder, side = self.tiles
            table = tile_table.build(builder, stream, seqs, side)
            table.attach(params, seqs.batch)
        self.launch(stream, params)
        return table


def preprocess(function: Any, entry: str, rows: int, seqs: Seqlens, b: Buffers, tiles_entry: str | None = None,
               dependent: bool = False) -> Preprocess:
    """The preprocess of calls like this one (`rows` query rows per block); `tiles_entry`: the cubin's tile table
    builder, for a packed batch's flat grid; `dependent`: a programmatic dependent launch (the kernel waits for the
    grid before it)."""
    from . import tile_table

    if not seqs.seqlen_q:
        return Preprocess(launch=None)
    # Padded rows: the grid covers the longest entry's rows rounded up to a tile.
    covered = -(-seqs.seqlen_q // b.pad_rows) * b.pad_rows if b.pad_rows else seqs.seqlen_q
    grid, tiles = seqs.grid(rows, covered), None
    if tiles_entry is not None:
        side = tile_table.TileSide(key_side=False, tile_rows=rows, pad_rows=b.pad_rows)
        tiles = (function(tiles_entry, 0), side)
        grid = (tile_table.blocks(seqs, side, seqs.heads, b.dq.shape[1]), 1, 1)
    return Preprocess(launch=PreparedLaunch(function(entry, 0), grid, PRE_THREADS, dependent), tiles=tiles)


def finish(b: Buffers, seqlen_k: int, softmax_scale: float,
           converted: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq from the fp32 accumulator (where the family adds dQ up in flash_attn's layout; `converted`: the family's
    own kernel has written dq from a tile-ordered one), zeros without keys; dq, dk, dv."""
    import torch

    if b.accumulate and not converted:
        # The scale and the conversion to the input dtype in one pass over the fp32 accumulator (two passes cost
        # 312 us of a 4.3 ms packed step over 32k tokens x 16 heads: results/h100/seqlens/kernel_times_1).
        torch.mul(b.dq_accum, softmax_scale, out=b.dq)
    if not seqlen_k:
        b.dq.zero_()  # no key: attention is constant 0, every gradient is 0
    return b.dq, b.dk, b.dv
