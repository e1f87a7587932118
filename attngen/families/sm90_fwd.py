"""The Hopper forward (sm_90a): TMA and wgmma, warp-specialized or ping-pong.

A block is one producer warpgroup (TMA copies, few registers) and 1-3 consumer warpgroups of 64
query rows each (wgmma m64). The budget: Q + stages x (K + V) tiles + mbarriers within 227 KB of
shared memory, and the consumer's O, S and P registers within what `setmaxnreg` can give it. It runs
the `warp_specialized` and `pingpong` pipelines on sm90 for head dims that are multiples of 64; its
template is attn_fwd_hopper.cu.j2, its parameter block abi.HOPPER_FWD_PARAMS (TMA maps first).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, ClassVar

from ..codegen.abi import (
    HOPPER_FWD_PARAMS,
    VT_PARAMS,
    VT_TILE,
    Field,
    forward_base,
    layout,
    tile_table_entry,
    vt_entry,
)
from ..codegen.wgmma import WgmmaOp, attention_ops
from ..features.dtype import DTYPES, dtype_trait
from ..features.kv_layout import KV_LAYOUTS
from ..features.mask import MASKS
from ..features.variant import params_with_variant, variant_of
from ..features.variant_cxx import hides_keys
from ..planning import search_space
from ..planning.archs import ArchInfo, arch_info
from ..planning.ir import Candidate, KernelPlan, SmemLayout, Tiling, WarpRoles, WarpSpecializedTiling
from ..planning.planner import ForwardFamily, cost_terms, lowest_reason, predicted, rank_time
from ..planning.shared import (
    ALIGN_SLACK,
    PRODUCER_REGS,
    kernel_name,
    schedule_words,
    setmaxnreg_split,
)
from ..spec.model import HEAD_DIMS, Arch, AttentionSpec, PipelineKind
from .base import Coverage
from .sm90_fwd_cost import estimate_cost
from .sm90_fwd_measured import auto_pipeline, band_plain, measured_preference, measured_table, measured_tiles
from .sm90_tail_order import fwd_order_line, fwd_tail_waves

if TYPE_CHECKING:
    from ..toolchain.artifacts import KernelSource

#: Consumer registers beside O, S and P: descriptors, loop state, softmax statistics, addresses.
#: Calibrated with -Xptxas=-v (NVRTC 13.5, sm_90a) over hd 64/128/256, block_n 64-192, 2 and 3
#: consumer warpgroups: with the overlap, O + S + P = 196 spills 40 B at 240 registers and 188 does
#: not; 128 spills 12 B at 160 and 124 does not. Without it no tiling within the budget spilled.
CONSUMER_REG_OVERHEAD = 48
#: The same for band masks (none, causal, sliding windows: two integers a row, softmax.cuh.j2) without a score mod:
#: hd64's 192 x 128 tiles with the overlap (O + S + P = 128) compile without spills at 160 under NVRTC 13.0 and 13.5
#: for each (sinks and packed batches too); a chunked or prefix-LM mask (visible() per element) spills 224-824 B there,
#: a softcap 48 B or more.
BAND_CONSUMER_REG_OVERHEAD = 32
#: mbarriers: Q, and full/empty of K and V per stage, 8 bytes each.
BARRIER_BYTES_PER_STAGE = 4 * 8
#: The cost model (estimate_cost and its calibrated constants) is sm90_fwd_cost.py. The reference workload
#: (REF_SEQLEN, REF_HIDDEN), the producer's registers (PRODUCER_REGS) and the TMA alignment slack (ALIGN_SLACK) are
#: shared with the backward families: planning/shared.py.


def supports(spec: AttentionSpec, arch: Arch) -> str | None:
    """None when a Hopper pipeline can serve `spec` on `arch`, else why not."""
    if arch_info(arch).wgmma_flops_per_clk == 0:
        return f"{arch.value} has no wgmma (the Hopper pipelines need sm_90a)"
    if spec.head_dim % search_space.HOPPER_HEAD_DIM_MULTIPLE:
        return (f"head_dim {spec.head_dim} is not a multiple of {search_space.HOPPER_HEAD_DIM_MULTIPLE}: the "
                f"128-byte swizzled TMA boxes hold 64 columns each")
    trait = dtype_trait(spec.dtype)
    if trait.wgmma_row_bytes and spec.head_dim * trait.size % trait.wgmma_row_bytes:
        return (f"head_dim {spec.head_dim} gives {trait.name} rows of {spec.head_dim * trait.size} B: the 8-bit "
                f"wgmma tiles are whole {trait.wgmma_row_bytes}-byte swizzle rows")
    return None


def v_box_keys(spec: AttentionSpec) -> int:
    """Keys per TMA box of a transposed V tile, 0 when V is not transposed (dtype.DTypeTrait.wgmma_v_box_keys)."""
    return dtype_trait(spec.dtype).wgmma_v_box_keys


#: Conditional rescaling: O and the running sum are rescaled only when a row's max grows by more than this many
#: log2 units (FlashAttention-4's threshold: probabilities stay below 2^8, exact in fp32 and bf16's range).
#: Measured on the H100 (results/h100/softmax_rows_1/softmax_ab.txt): +5-10% at hd256, +1-3% at hd128, neutral at hd64.
RESCALE_THRESHOLD = 8.0
#: Score tiles (of block_n / 8) whose exp2 runs as a polynomial on the FMA pipe, per head dim. None by default: on
#: the H100 a quarter of hd64's tiles on the polynomial measured 4-10% slower, half of them 10-20% slower
#: (results/h100/softmax_rows_1/softmax_ab.txt); softmax_device.sh still ablates {64: 4}.
EXP2_POLY_TILES: dict[int, int] = {}
#: Each consumer warpgroup walks the KV tiles its own 64 query rows see (WarpRoles.own_ranges), not the whole block's
#: range: under a causal mask a 192-row block's (hd64) first tiles hold keys no row of its first warpgroup sees, and a
#: block past a sequence's last rows may leave a warpgroup no row at all, yet every warpgroup multiplied every tile.
#: Such tiles are passed (waited for and released). Predicted from the tile counts (benchmarks/NOTES.md): hd64
#: causal 10% / 8% / 3% / 2.3% fewer products at 2k / 4k / 8k / 16k, 3% of hd64's unmasked 2k and 4k; hd256's
#: 128 x 80 causal 2.9% at 2k. A module constant for the device A/B.
OWN_RANGES = True
#: A warpgroup's first tile (under a causal mask, the diagonal) at half width where its 64 rows see none of the
#: tile's second half (WarpRoles.half_tiles): at 128 x 128 the first warpgroup's diagonal tile is half masked keys.
#: Predicted from the tile counts: 2.9% / 1.5% / 0.8% of hd128's causal products at 2k / 4k / 8k, 2.7% / 1.4% /
#: 0.7% more of hd64's. A module constant for the device A/B.
HALF_TILES = True


def softmax_traits(spec: AttentionSpec, tiling: WarpSpecializedTiling) -> dict[str, float | int | bool]:
    """The consumers' traits of `spec`'s plan (WarpRoles.rescale_threshold, exp2_poly_tiles, own_ranges,
    half_tiles)."""
    return {"rescale_threshold": RESCALE_THRESHOLD, "exp2_poly_tiles": EXP2_POLY_TILES.get(spec.head_dim, 0),
            "own_ranges": OWN_RANGES, "half_tiles": HALF_TILES and OWN_RANGES and halves_fit(spec, tiling)}


def halves_fit(spec: AttentionSpec, tiling: WarpSpecializedTiling) -> bool:
    """Whether a tile can run at half width: a mask that hides keys, the intra-warpgroup overlap (the loop that takes
    it) and an even number of P V k-steps (block_n 80 at hd256 has five)."""
    even_steps = tiling.block_n % (2 * dtype_trait(spec.dtype).mma_k) == 0
    return hides_keys(variant_of(spec)) and tiling.intra_wg_overlap and even_steps


def half_qk_op(plan: KernelPlan) -> WgmmaOp | None:
    """S = Q K^T over half a tile's keys, where the plan takes half tiles."""
    r = plan.roles
    if r is None or not r.half_tiles:
        return None
    return WgmmaOp(plan.tiling.block_n // 2, a_in_regs=False, trans_b=False, k=dtype_trait(plan.spec.dtype).mma_k)


def own_ranges_line(r: WarpRoles) -> str:
    """What explain says of the consumers' KV ranges (WarpRoles.own_ranges)."""
    if r.own_ranges:
        return ("KV ranges: each consumer warpgroup multiplies only the KV tiles its own 64 query rows see; the "
                "block's others it waits for and releases (a causal 192-row block's first tiles, a warpgroup past "
                "the last row)" + ("; a first tile whose second half it does not see runs at half width"
                                   if r.half_tiles else ""))
    return "KV ranges: every consumer warpgroup multiplies every KV tile of the block's range"


def roles(info: ArchInfo, consumer_wgs: int, pingpong: bool, overlap: bool) -> WarpRoles:
    """The register split: what the producer gives up, shared by the consumers, in multiples of 8."""
    producer, consumer = setmaxnreg_split(info, consumer_wgs)
    return WarpRoles(consumer_warpgroups=consumer_wgs, producer_regs=producer, consumer_regs=consumer,
                     pingpong=pingpong, intra_wg_overlap=overlap)


def smem_layout(spec: AttentionSpec, tiling: WarpSpecializedTiling) -> SmemLayout:
    elem = dtype_trait(spec.dtype).size
    q_bytes = tiling.block_m * spec.head_dim * elem
    kv_bytes = tiling.block_n * spec.head_dim * elem
    kv_offset = q_bytes
    barrier_offset = kv_offset + 2 * tiling.stages * kv_bytes
    schedule_offset = barrier_offset + 8 + BARRIER_BYTES_PER_STAGE * tiling.stages
    words = schedule_words(spec)
    total = schedule_offset + 4 * words + ALIGN_SLACK
    return SmemLayout(q_offset=0, q_bytes=q_bytes, kv_offset=kv_offset, k_tile_bytes=kv_bytes, v_tile_bytes=kv_bytes,
                      stage_bytes=2 * kv_bytes, total_bytes=total, swizzle_chunks=8, barrier_offset=barrier_offset,
                      schedule_offset=schedule_offset, schedule_words=words)


def register_estimate(spec: AttentionSpec, tiling: WarpSpecializedTiling) -> int:
    """Consumer registers per thread: O (64 x d) and S (64 x block_n) in fp32 over 128 threads, with
    the overlap also the previous block's P (packed two per register), and the overhead."""
    return spec.head_dim // 2 + tiling.block_n // 2 + p_registers(spec, tiling) + reg_overhead(spec)


def reg_overhead(spec: AttentionSpec) -> int:
    """The consumer registers beside O, S and P (BAND_CONSUMER_REG_OVERHEAD where band_plain())."""
    return BAND_CONSUMER_REG_OVERHEAD if band_plain(spec) else CONSUMER_REG_OVERHEAD


def p_registers(spec: AttentionSpec, tiling: WarpSpecializedTiling) -> int:
    """Registers of the previous block's P with the overlap: (64 x block_n) elements over 128 threads,
    packed into 4-byte registers."""
    if not tiling.intra_wg_overlap:
        return 0
    return 64 * tiling.block_n * dtype_trait(spec.dtype).size // (128 * 4)


def enumerate_tilings(spec: AttentionSpec, pingpong: bool) -> list[WarpSpecializedTiling]:
    """The pipeline's search space (search_space.PINGPONG or WARP_SPECIALIZED) with the spec's stages,
    the intra-warpgroup overlap on or off."""
    space = search_space.PINGPONG if pingpong else search_space.WARP_SPECIALIZED
    stages = (spec.pipeline.stages,) if spec.pipeline.stages else space.auto_stages
    return [WarpSpecializedTiling(block_m=b.block_m, block_n=bn, num_warps=b.num_warps, stages=st,
                                  consumer_warpgroups=b.consumer_warpgroups, intra_wg_overlap=overlap)
            for b, bn, st, overlap in itertools.product(space.blocks, space.block_ns, stages, (True, False))]




def evaluate(spec: AttentionSpec, info: ArchInfo, tiling: WarpSpecializedTiling, pingpong: bool) -> Candidate:
    layout_ = smem_layout(spec, tiling)
    smem, regs = layout_.total_bytes, register_estimate(spec, tiling)
    cap = roles(info, tiling.consumer_warpgroups, pingpong, tiling.intra_wg_overlap).consumer_regs

    def reject(reason: str) -> Candidate:
        return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=False, reason=reason)

    box = v_box_keys(spec)
    if box and tiling.block_n % box:
        return reject(f"block_n {tiling.block_n} is not a multiple of {box}: {spec.dtype.value}'s transposed V "
                      f"tiles are boxes of {box} keys (one 128-byte swizzle row each)")
    if smem > info.smem_per_block:
        return reject(f"block_m {tiling.block_m} block_n {tiling.block_n}, {tiling.stages} stages needs {smem} B "
                      f"({layout_.q_bytes} Q + {tiling.stages} x {layout_.stage_bytes} K/V + barriers, "
                      f"{4 * layout_.schedule_words} live-tile bitmap and {ALIGN_SLACK} alignment); "
                      f"{info.arch.value} allows {info.smem_per_block} B per block")
    if regs > cap:
        p_regs = p_registers(spec, tiling)
        return reject(f"consumer needs ~{regs} registers (O {spec.head_dim // 2} + S {tiling.block_n // 2} + "
                      f"P {p_regs} + {reg_overhead(spec)}); {tiling.consumer_warpgroups} consumer "
                      f"warpgroups get {cap} each after the producer keeps {PRODUCER_REGS}")
    cost = estimate_cost(spec, info, tiling, pingpong)
    return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=True, reason="fits", cost=cost)


def describe_tiling(t: WarpSpecializedTiling) -> str:
    """A tiling as the reasons name it: by its consumer warpgroups."""
    return (f"{t.consumer_warpgroups} consumer warpgroups, block_n {t.block_n}, {t.stages} stages, "
            f"overlap {t.intra_wg_overlap}")


def warp_specialized(tiling: Tiling) -> WarpSpecializedTiling:
    """`tiling` as this family's own kind (its plans and candidates hold no other)."""
    assert isinstance(tiling, WarpSpecializedTiling), f"sm90_fwd plans warp-specialized tilings, not {tiling!r}"
    return tiling


class Sm90Forward(ForwardFamily):
    name = "sm90_fwd"
    path = "TMA + wgmma, warp-specialized / ping-pong"
    pipelines: ClassVar[tuple[PipelineKind, ...]] = (PipelineKind.warp_specialized, PipelineKind.pingpong)
    template = "attn_fwd_hopper.cu.j2"
    column = "overlap"

    def coverage(self) -> Coverage:
        multiple = search_space.HOPPER_HEAD_DIM_MULTIPLE
        return Coverage(archs=search_space.HOPPER_ARCHS, head_dims=tuple(d for d in HEAD_DIMS if d % multiple == 0),
                        dtypes=tuple(d.value for d in DTYPES), masks=tuple(m.value for m in MASKS),
                        kv_layouts=tuple(KV_LAYOUTS), pipelines=tuple(k.value for k in self.pipelines),
                        notes=f"head dims that are multiples of {multiple} (fp8_e4m3: 128 and 256, dense batches); "
                              f"`auto` takes the measured pipeline and tiles of the head dim (MEASURED_TILES)")

    def refuses(self, spec: AttentionSpec, arch: Arch) -> str | None:
        return supports(spec, arch)

    def auto_pipelines(self, spec: AttentionSpec) -> list[PipelineKind]:
        """The measured pipeline for the head dim (MEASURED_TILES), else ping-pong; then the other."""
        first = auto_pipeline(spec)
        return [first, *(k for k in self.pipelines if k is not first)]

    def auto_note(self, spec: AttentionSpec, kind: PipelineKind) -> str:
        if kind is not auto_pipeline(spec):
            return f"{kind.value}, the one of its pipelines whose search space holds the tiles"
        if measured_tiles(spec) is not None:
            table = measured_table(spec)
            return f"{kind.value}, the measured pipeline of hd{spec.head_dim} (sm90_fwd_measured.{table})"
        return f"{kind.value}, its default where no measurement names one"

    # ---- planning ------------------------------------------------------------------------------
    def enumerate_tilings(self, spec: AttentionSpec, kind: PipelineKind) -> list[WarpSpecializedTiling]:
        return enumerate_tilings(spec, kind is PipelineKind.pingpong)

    def evaluate(self, spec: AttentionSpec, info: ArchInfo, tiling: Tiling, kind: PipelineKind) -> Candidate:
        return evaluate(spec, info, warp_specialized(tiling), kind is PipelineKind.pingpong)

    def rank_key(self, spec: AttentionSpec, c: Candidate) -> tuple[Any, ...]:
        """The measured tile table first, then the lowest predicted time, fewer bytes, fewer registers."""
        return (measured_preference(spec, warp_specialized(c.tiling)), rank_time(c), c.smem_bytes, c.regs_estimate)

    def choice_reason(self, spec: AttentionSpec, kind: PipelineKind, best: Candidate,
                      fitting: list[Candidate]) -> str:
        """The measured tile table, or the lowest predicted time; where the table overrode the cost
        model, the model's own pick and both predictions."""
        rank = self.rank_key(spec, best)[0]
        if measured_tiles(spec) is None or rank == 2:
            return lowest_reason(best, fitting)
        assert best.cost is not None
        cost = best.cost
        name = measured_table(spec) if rank == 0 else "MEASURED_TILES"
        table = (f"the measured tiles of hd{spec.head_dim} (sm90_fwd_measured.{name}: "
                 f"{self.describe(best.tiling)}; an H100 sweep measured them fastest)")
        model_pick = min(fitting, key=lambda c: (rank_time(c), c.smem_bytes, c.regs_estimate))
        if rank_time(model_pick) < rank_time(best):
            return (f"{table}, chosen over the cost model's pick [{self.describe(model_pick.tiling)}] "
                    f"({predicted(model_pick)} us predicted; this one {cost.predicted_us} us at seqlen "
                    f"{cost.ref_seqlen}: {cost_terms(best)})")
        return f"{table}, also the {lowest_reason(best, fitting)}"

    def assemble(self, spec: AttentionSpec, arch: Arch, kind: PipelineKind, best: Candidate, reason: str,
                 candidates: tuple[Candidate, ...]) -> KernelPlan:
        assert best.cost is not None
        t = warp_specialized(best.tiling)
        split = roles(arch_info(arch), t.consumer_warpgroups, kind is PipelineKind.pingpong, t.intra_wg_overlap)
        return KernelPlan(spec=spec, arch=arch, family=self.name, pipeline=kind,
                          kernel_name=kernel_name(spec, arch, kind), tiling=t, threads=t.num_warps * 32,
                          smem_bytes=best.smem_bytes, smem=smem_layout(spec, t), regs_estimate=best.regs_estimate,
                          min_blocks_per_sm=1, cost=best.cost, reason=reason, candidates=candidates,
                          roles=split.model_copy(update=softmax_traits(spec, t)), tail_waves=fwd_tail_waves(spec))

    def owns(self, tiling: Tiling) -> bool:
        return isinstance(tiling, WarpSpecializedTiling)

    def describe(self, tiling: Tiling) -> str:
        return describe_tiling(warp_specialized(tiling))

    def column_value(self, tiling: Tiling) -> bool:
        return warp_specialized(tiling).intra_wg_overlap

    def explain_lines(self, plan: KernelPlan) -> list[str]:
        r = plan.roles
        assert r is not None
        return [f"warp roles: 1 producer warpgroup (TMA, setmaxnreg {r.producer_regs}), {r.consumer_warpgroups} "
                f"consumer warpgroups (wgmma, setmaxnreg {r.consumer_regs}); ping-pong {'on' if r.pingpong else 'off'}"
                f"; 'regs est' is per consumer thread", own_ranges_line(r),
                fwd_order_line(plan.tail_waves)]

    # ---- render and launch ---------------------------------------------------------------------
    def plan_line(self, plan: KernelPlan) -> str:
        t, r = plan.tiling, plan.roles
        assert r is not None
        return (f"{plan.pipeline.value} block_m={t.block_m} block_n={t.block_n} warps={t.num_warps} "
                f"consumer_warpgroups={r.consumer_warpgroups} stages={t.stages} overlap={r.intra_wg_overlap} "
                f"regs={r.producer_regs}/{r.consumer_regs} smem={plan.smem_bytes}B"
                + (f" tail_waves={plan.tail_waves:g}" if plan.tail_waves else "")
                + (" own_ranges" if r.own_ranges else "") + (" half_tiles" if r.half_tiles else ""))

    def render(self, plan: KernelPlan) -> KernelSource:
        """The forward's entry point, with a transposed V (fp8) the transpose's (vt_entry), and for varlen the tile
        table's (runtime/tile_table.py)."""
        from ..codegen.renderer import render_source

        entries = (plan.kernel_name, *((vt_entry(plan.kernel_name),) if v_box_keys(plan.spec) else ()),
                   *((tile_table_entry(plan.kernel_name),) if plan.spec.seqlens.value == "varlen" else ()))
        return render_source(plan, self.template, self.context(plan), entries)

    def context(self, plan: KernelPlan) -> dict[str, object]:
        from ..codegen.renderer import common_context

        qk, pv = attention_ops(plan.tiling.block_n, plan.spec.head_dim, dtype_trait(plan.spec.dtype).mma_k,
                               v_transposed=v_box_keys(plan.spec) > 0)
        half = half_qk_op(plan)
        return {**common_context(plan, self.plan_line(plan)), "tiling": plan.tiling, "smem": plan.smem,
                "roles": plan.roles, "qk_op": qk, "pv_op": pv, "half_qk_op": half,
                "wgmma_ops": (qk, pv, *((half,) if half else ())),
                "v_box_keys": v_box_keys(plan.spec), "vt_params": VT_PARAMS, "vt_params_layout": layout(VT_PARAMS),
                "vt_tile": VT_TILE,
                "tail_order": plan.tail_waves > 0, **_params(plan)}

    def prepare(self, plan: KernelPlan, fn: Any, call: Any) -> Any:
        from .sm90_fwd_ready import prepare

        return prepare(plan, fn, call, base_fields(plan.spec), v_box_keys(plan.spec))


def base_fields(spec: AttentionSpec) -> tuple[Field, ...]:
    """The parameter block before the variant's fields: HOPPER_FWD_PARAMS, with the descale factors of fp8."""
    return forward_base(HOPPER_FWD_PARAMS, dtype_trait(spec.dtype).descaled)


def _params(plan: KernelPlan) -> dict[str, object]:
    fields = params_with_variant(base_fields(plan.spec), plan.spec)
    return {"params": fields, "params_layout": layout(fields)}
