"""The split-KV decode (sm80 and later): short queries (MAX_DECODE_QUERY at most) over a KV cache.

Decoding reads the whole cache per generated token while doing little arithmetic on it: the kernel is bound by
memory, and what matters is that every SM keeps enough bytes in flight and that each K/V byte is read once.
So a block packs the query heads of one KV head (a GQA group) times the query positions into the 16 rows of
one mma.sync tile, its warps split every K/V tile by keys, and blocks take each entry's key tiles in turn (split
s reads tiles s, s + splits, ...: planning.splits) into fp32 partials that a combine kernel merges by their LSE.
K/V rows come from a contiguous cache or, through the block table, from a paged pool, by cp.async; a paged tile's
table entries (one per page it touches) are copied by cp.async with the K/V of the tile `stages` before it, so the
loop never waits on the table.

The budget lives here: `smem_layout` (bytes), `register_estimate`, and the in-flight bytes each candidate keeps
per SM (`evaluate`). Template attn_decode.cu.j2, parameter block abi.DECODE_PARAMS.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..codegen.abi import DECODE_PARAMS, layout
from ..errors import PlanError
from ..features.dtype import dtype_trait, with_backward
from ..features.kv_layout import KV_LAYOUTS
from ..features.mask import MASKS
from ..features.variant import params_with_variant, variant_of
from ..planning.archs import ArchInfo, arch_info
from ..planning.ir import SmemRegions
from ..planning.ir_decode import DecodeCandidate, DecodePlan, DecodeRole, DecodeTiling
from ..planning.planner_decode import MAX_DECODE_QUERY, PAGE_SIZES, DecodeFamily, DecodeShape, LaunchStep
from ..planning.shared import resident_blocks, swizzle_chunks
from ..planning.splits import MAX_SPLITS, RoleChoice, SplitChoice, choose_role, choose_splits
from ..spec.model import HEAD_DIMS, Arch, AttentionSpec, SeqlensKind
from .base import Coverage

#: Packed query rows of a block: one mma.sync m16 tile.
BLOCK_M = 16
#: Warps of a block; each takes a quarter of every K/V tile's keys.
DECODE_WARPS = 4
#: Keys of one warp's slice of a tile (the softmax block), and ring depths, the search space.
WARP_KEYS = (16, 32, 64)
STAGES = (2, 3, 4, 5)
#: K/V bytes each SM should keep in flight. Little's law on the H100 (3.0 TB/s x ~1.5 us of loaded DRAM latency
#: over 132 SMs) asks ~34 KB; the sweep (benchmarks/results/h100/decode/sweep_1, NOTES.md) measured 64 KB (64-key
#: tiles, 2 stages, 2-3 blocks/SM) 1-13% slower than 128 KB (128-key tiles, 3 stages, 1 block/SM) at b64 x 4k,
#: b64 x 32k and b1 x 32k.
INFLIGHT_TARGET = 128 * 1024
#: Registers beside O, S and the packed P: pointers and strides of the cache and the table, loop state, the
#: two rows' variants, ldmatrix offsets.
REG_OVERHEAD = 64
#: Fp32 words of padding per staged output row of the warp merge (bank spread).
MERGE_PAD = 4
#: Blocks of the combine kernel: a warp per output row.
COMBINE_THREADS = 128


def smem_layout(spec: AttentionSpec, t: DecodeTiling) -> SmemRegions:
    """The Q tile, the K/V stages (which the warp merge reuses: fp32 rows of every warp), the merge statistics,
    two slots of a paged tile's rows (K and V element offsets: 16 bytes a key), and the ring of table entries
    (4 bytes per page a tile touches) that cp.async fills `stages` tiles ahead of their tile's copies."""
    e = dtype_trait(spec.dtype).size
    stages = t.stages * 2 * t.tile_keys * spec.head_dim * e
    merge = t.num_warps * BLOCK_M * (spec.head_dim + MERGE_PAD) * 4
    return SmemRegions.stack([("Q", BLOCK_M * spec.head_dim * e), ("Stages", max(stages, merge)),
                              ("Stats", 2 * t.num_warps * BLOCK_M * 4), ("Pages", 2 * t.tile_keys * 16),
                              ("Table", t.stages * table_entries(t) * 4)])


def table_entries(t: DecodeTiling) -> int:
    """Block-table entries one K/V tile's keys touch at most: pages hold at least min(PAGE_SIZES) keys, and a tile that
    starts inside a page touches one more."""
    return t.tile_keys // min(PAGE_SIZES) + 1


def register_estimate(spec: AttentionSpec, t: DecodeTiling, info: ArchInfo) -> int:
    """O (16 x d fp32 over 32 lanes), S and its packed P (16 x warp_keys), the overhead and the arch's reserve."""
    return spec.head_dim // 2 + t.warp_keys // 2 * 3 // 2 + REG_OVERHEAD + info.extra_registers


def evaluate(spec: AttentionSpec, info: ArchInfo, t: DecodeTiling) -> DecodeCandidate:
    smem = smem_layout(spec, t).total_bytes
    regs = register_estimate(spec, t, info)
    stage = 2 * t.tile_keys * spec.head_dim * dtype_trait(spec.dtype).size

    def reject(reason: str) -> DecodeCandidate:
        return DecodeCandidate(tiling=t, smem_bytes=smem, regs_estimate=regs, fits=False, reason=reason)

    if smem > info.smem_per_block:
        return reject(f"{t.stages} stages of {t.tile_keys}-key K/V tiles need {smem} B of shared memory; "
                      f"{info.arch.value} allows {info.smem_per_block} B per block")
    if regs > info.max_regs_per_thread:
        return reject(f"needs ~{regs} registers per thread; at most {info.max_regs_per_thread}")
    threads = t.num_warps * 32
    blocks = resident_blocks(info, smem, regs, threads)
    if blocks == 0:
        return reject("no block of this size can be resident on one SM")
    inflight = blocks * (t.stages - 1) * stage
    return DecodeCandidate(tiling=t, smem_bytes=smem, regs_estimate=regs, blocks_per_sm=blocks,
                           inflight_bytes=inflight, fits=True,
                           reason=f"{blocks} blocks/SM keep {inflight // 1024} KB of K/V in flight")


def rank_key(c: DecodeCandidate) -> tuple[int, int, int]:
    """Enough bytes in flight first (up to INFLIGHT_TARGET), then larger tiles (one barrier and one softmax
    rescale per tile: the sweep measured 128-key tiles 1-3% faster than 64-key ones at equal bytes in flight),
    then less shared memory."""
    return (-min(c.inflight_bytes, INFLIGHT_TARGET), -c.tiling.tile_keys, c.smem_bytes)


def decode_spec(spec: AttentionSpec) -> AttentionSpec:
    """The spec a decode kernel is built from: per-entry key lengths (the cache's used keys) always."""
    return spec.with_seqlens(SeqlensKind.varlen)


class Sm80Decode(DecodeFamily):
    name = "sm80_decode"
    path = "mma.sync + cp.async, split-KV, GQA rows packed"
    template = "attn_decode.cu.j2"

    def coverage(self) -> Coverage:
        return Coverage(archs=tuple(a.value for a in Arch), head_dims=HEAD_DIMS, dtypes=with_backward(),
                        masks=tuple(m.value for m in MASKS), kv_layouts=tuple(KV_LAYOUTS),
                        pipelines=("splitkv",),
                        notes=f"KV-cache calls with at most {MAX_DECODE_QUERY} queries per entry; contiguous or "
                              f"paged caches")

    def serves(self, spec: AttentionSpec, arch: Arch) -> str | None:
        return self.trait_refusal(spec)

    def plan(self, spec: AttentionSpec, info: ArchInfo, exclude: Mapping[Any, str] | None = None,
             role: DecodeRole = DecodeRole.stream) -> DecodePlan:
        """The stream plan (the best-ranked tiling, rank_key), noting the waves tiling: the best-ranked one that
        holds more blocks per SM and keeps as many K/V bytes in flight (up to INFLIGHT_TARGET). With `role` waves, the
        plan of that tiling; PlanError where there is none."""
        spec = decode_spec(spec)
        cands = [evaluate(spec, info, DecodeTiling(warp_keys=wk, num_warps=DECODE_WARPS, stages=st))
                 for wk, st in itertools.product(WARP_KEYS, STAGES)]
        fitting = sorted((c for c in cands if c.fits), key=rank_key)
        if not fitting:
            raise PlanError(f"no decode tiling of spec '{spec.name}' fits {info.arch.value}: "
                            + "; ".join(f"{c.tiling.tile_keys} keys x {c.tiling.stages}: {c.reason}" for c in cands))
        stream = fitting[0]
        waves = next((c for c in fitting if _overlaps_without_losing_flight(c, stream)), None)
        reason = (f"{stream.reason} (target {INFLIGHT_TARGET // 1024} KB), the largest tile among those that reach "
                  f"it")
        best, note = stream, waves
        if role is DecodeRole.waves:
            if waves is None:
                raise PlanError(f"no decode tiling of spec '{spec.name}' holds more than the stream tiling's "
                                f"{stream.blocks_per_sm} blocks per SM with as many bytes in flight "
                                f"({min(stream.inflight_bytes, INFLIGHT_TARGET) // 1024} KB) on {info.arch.value}: "
                                f"the stream tiling serves every call")
            best, note = waves, None
            reason = (f"{waves.reason}: the best-ranked tiling of more blocks per SM than the stream tiling's "
                      f"{stream.blocks_per_sm}, for calls whose blocks fill whole waves")
        t = best.tiling
        return DecodePlan(spec=spec, arch=info.arch, family=self.name, kernel_name=kernel_name(spec, info.arch, role),
                          tiling=t, threads=t.num_warps * 32, smem=smem_layout(spec, t),
                          min_blocks_per_sm=best.blocks_per_sm, blocks_per_sm=best.blocks_per_sm,
                          num_sms=info.num_sms_hint, reason=reason, candidates=tuple(cands),
                          overlap_combine=info.programmatic_launch, role=role,
                          waves_tiling=note.tiling if note else None)

    def role(self, plan: DecodePlan, *, batch: int, kv_heads: int, heads: int, seqlen_q: int, keys: int,
             num_sms: int | None = None) -> RoleChoice:
        return choose_role(blocks=batch * kv_heads * _row_blocks(heads, kv_heads, seqlen_q),
                           tiles=-(-keys // plan.tiling.tile_keys), num_sms=num_sms or plan.num_sms,
                           stream_blocks_per_sm=plan.blocks_per_sm, waves_blocks_per_sm=plan.waves_blocks_per_sm)

    def splits(self, plan: DecodePlan, *, batch: int, kv_heads: int, heads: int, seqlen_q: int, keys: int,
               num_sms: int | None = None, dram_gbps: float | None = None, paged: bool = False) -> SplitChoice:
        return _splits(batch=batch, kv_heads=kv_heads, row_blocks=_row_blocks(heads, kv_heads, seqlen_q), keys=keys,
                       tile_keys=plan.tiling.tile_keys, num_sms=num_sms or plan.num_sms,
                       blocks_per_sm=plan.blocks_per_sm, dram_gbps=dram_gbps or arch_info(plan.arch).hbm_gbps,
                       paged=paged)

    def plan_line(self, plan: DecodePlan) -> str:
        t = plan.tiling
        return (f"splitkv rows={BLOCK_M} tile_keys={t.tile_keys} warps={t.num_warps} warp_keys={t.warp_keys} "
                f"stages={t.stages} smem={plan.smem_bytes}B blocks/SM={plan.blocks_per_sm}"
                + (" combine=overlapped" if plan.overlap_combine else ""))

    def role_plan(self, plan: DecodePlan, role: DecodeRole) -> DecodePlan:
        """The plan a call of `role` runs: the stream plan itself, or the spec's waves plan."""
        return plan if role is plan.role else self.plan(plan.spec, arch_info(plan.arch), role=role)

    def explain_lines(self, plan: DecodePlan) -> list[str]:
        waves = (f"{plan.waves_tiling.tile_keys}-key tiles x {plan.waves_tiling.stages} stages, "
                 f"{plan.waves_blocks_per_sm} blocks/SM" if plan.waves_tiling else "none")
        lines = [f"decode ({self.name}, {self.path}): {self.plan_line(plan)}", f"  why: {plan.reason}",
                 f"  waves tiling (calls whose blocks fill whole waves): {waves}",
                 f"  tiling and splits: chosen per call from its shape and its GPU's SMs and DRAM bandwidth; below "
                 f"for {plan.num_sms} SMs and {arch_info(plan.arch).hbm_gbps} GB/s (the arch's flagship)"]
        for batch, keys in ((1, 4096), (1, 131072), (8, 1024), (8, 32768), (12, 32768), (32, 1024), (64, 4096),
                            (64, 32768)):
            role = self.role(plan, batch=batch, kv_heads=8, heads=32, seqlen_q=1, keys=keys)
            choice = self.splits(self.role_plan(plan, role.role), batch=batch, kv_heads=8, heads=32, seqlen_q=1,
                                 keys=keys)
            lines.append(f"  at batch {batch}, 32 heads / 8 KV heads, {keys} keys: the {role.role.value} tiling "
                         f"({role.reason}), {choice.splits} splits ({choice.reason})")
        if plan.arch is Arch.sm90:
            choice = self.splits(plan, batch=8, kv_heads=8, heads=32, seqlen_q=1, keys=32768, dram_gbps=H200_GBPS)
            lines.append(f"  splits at batch 8, 32 heads / 8 KV heads, 32768 keys on an H200 ({H200_GBPS:.0f} GB/s): "
                         f"{choice.splits} ({choice.reason})")
        return lines

    def context(self, plan: DecodePlan) -> dict[str, object]:
        from ..codegen.renderer import common_context

        fields = params_with_variant(DECODE_PARAMS, plan.spec)
        return {**common_context(plan, self.plan_line(plan)), "tiling": plan.tiling, "smem": plan.smem,
                "swizzle_chunks": swizzle_chunks(plan.spec.head_dim, dtype_trait(plan.spec.dtype).size),
                "min_blocks_per_sm": plan.min_blocks_per_sm, "combine_threads": COMBINE_THREADS,
                "overlap_combine": plan.overlap_combine, "max_splits": MAX_SPLITS,
                "table_entries": table_entries(plan.tiling), "params": fields,
                "params_layout": layout(fields)}

    def steps(self, plan: DecodePlan, shape: DecodeShape) -> tuple[LaunchStep, ...]:
        split_entry, combine_entry = plan.entry_names
        rows = shape.heads // shape.kv_heads * shape.seqlen_q
        split = LaunchStep(split_entry, plan.smem_bytes, (-(-rows // BLOCK_M), shape.num_splits,
                                                          shape.batch * shape.kv_heads), plan.threads)
        if shape.num_splits == 1:
            return (split,)
        total = shape.batch * shape.heads * shape.seqlen_q
        combine = LaunchStep(combine_entry, 0, (-(-total // (COMBINE_THREADS // 32)), 1, 1), COMBINE_THREADS,
                             dependent=plan.overlap_combine)
        return split, combine


#: The H200's peak DRAM bandwidth (3201 MHz x 6144 bits), explain's example of a faster memory on the same SMs.
H200_GBPS = 4917.0
#: choose_splits, remembered per shape (every decode call asks; a server repeats a few shapes).
_splits = lru_cache(maxsize=4096)(choose_splits)


def kernel_name(spec: AttentionSpec, arch: Arch, role: DecodeRole = DecodeRole.stream) -> str:
    """attn_decode_<variant>_hd<d>_<dtype>_<arch>_splitkv, with _waves for the waves tiling's kernels."""
    suffix = "" if role is DecodeRole.stream else f"_{role.value}"
    return (f"attn_decode_{variant_of(spec).name_part}_hd{spec.head_dim}_{spec.dtype.value}_{arch.value}_splitkv"
            f"{suffix}")


def _overlaps_without_losing_flight(c: DecodeCandidate, stream: DecodeCandidate) -> bool:
    """Whether candidate `c` may be the waves tiling: more blocks per SM than the stream tiling's, and as many K/V
    bytes in flight per SM (up to INFLIGHT_TARGET), so that overlapping blocks costs no streaming rate. Measured where
    both hold (sm90 hd128: 128 KB each; results/h200/decode_tiles); a tiling with less in flight (sm80 hd128: 64 KB
    at two blocks against 96 KB at one) is not measured, so it is not taken."""
    flight = min(stream.inflight_bytes, INFLIGHT_TARGET)
    return c.blocks_per_sm > stream.blocks_per_sm and min(c.inflight_bytes, INFLIGHT_TARGET) >= flight


def _row_blocks(heads: int, kv_heads: int, seqlen_q: int) -> int:
    """16-row blocks of one KV head's packed query rows (its query heads times the query positions)."""
    return -(-(heads // max(1, kv_heads) * seqlen_q) // BLOCK_M)

