"""The multistage forward (sm80 and later): mma.sync m16n8k16 tensor cores fed by a cp.async ring.

Its budget arithmetic lives here and nowhere else: `smem_layout` (bytes), `register_estimate`
(registers per thread) and `estimate_cost` (the cost model); every candidate tiling is evaluated and a
rejected one keeps the arithmetic that rejected it. Its template is attn_fwd.cu.j2, its parameter block
abi.FWD_PARAMS.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, ClassVar

from ..codegen.abi import FWD_PARAMS, Field, forward_base, layout, with_variant
from ..features.dtype import DTYPES, dtype_trait
from ..features.kv_layout import KV_LAYOUTS
from ..features.mask import MASKS, mask_trait
from ..features.variant import params_with_variant
from ..planning import search_space
from ..planning.archs import ArchInfo, arch_info
from ..planning.ir import Candidate, CostEstimate, KernelPlan, MultistageTiling, SmemLayout, Tiling
from ..planning.planner import ForwardFamily, cost_terms, lowest_reason, predicted
from ..planning.shared import (
    CP_ASYNC_BYTES,
    ITER_OVERHEAD_CLK,
    MAX_COPIES_PER_THREAD,
    MUFU_PER_CLK,
    REF_HIDDEN,
    REF_SEQLEN,
    kernel_name,
    resident_blocks,
    swizzle_chunks,
)
from ..spec.model import HEAD_DIMS, Arch, AttentionSpec, PipelineKind
from .base import Coverage

#: Registers beside the O, S and Q tiles and the per-tile A fragments: pointers, loop counters,
#: softmax statistics, B fragments in flight, ldmatrix offsets. Calibrated with -Xptxas=-v (NVRTC
#: 13.5) on sm_90a over the whole search space at hd 64/128/256 (benchmarks/NOTES.md): every tiling
#: within 255 compiles without spills, and every tiling that spills is over 255 or over
#: MAX_COPIES_PER_THREAD. Other NVRTC releases differ a little: the build re-plans around spills.
REG_OVERHEAD = 16
#: Blocks of this many warps issue the K/V refill after S = Q K^T. Measured on the H100 (A/B of the
#: same tiles, benchmarks/NOTES.md): 8-warp hd256 +4% (295 -> 307 TFLOP/s non-causal, 270 -> 279
#: causal); 4-warp hd128 unchanged non-causal and -2% causal, so 4-warp blocks refill first.
REFILL_LATE_WARPS = 8
#: Resident warps per SM below which the cost model charges for exposed latency.
WARPS_TO_HIDE_LATENCY = 8
#: Tilings an H100 sweep measured fastest where the model ranks them low, by (arch, head dim); they outrank the model
#: there and are tried nowhere else. hd256 on sm90: one K and one V buffer (stages 1, FlashAttention-2's order),
#: 64 x 64 with 4 warps, 96 KB so two blocks reside: 328.7 / 313.4 TFLOP/s non-causal / causal at 8k against 313.3 /
#: 278.4 for the model's 128 x 64 x 2 stages and FA2's 327.9 / 286.8 in the same run
#: (benchmarks/results/h100/sm80_fwd_sweep/split_kv). The model charges each query block's K/V reads to HBM, where
#: they come from L2, so it counts 64-row blocks' twice as costly.
MEASURED: dict[tuple[Arch, int], MultistageTiling] = {
    (Arch.sm90, 256): MultistageTiling(block_m=64, block_n=64, num_warps=4, warp_m_tiles=1, stages=1,
                                       q_in_regs=False, refill_late=False),
}
#: The ctypes twin of the kernel's parameter block.
#: The reference workload (REF_SEQLEN, REF_HIDDEN), the copy limit MAX_COPIES_PER_THREAD, the loop overhead
#: ITER_OVERHEAD_CLK and the exp2 rate MUFU_PER_CLK are shared with other families: planning/shared.py, with
#: their reasons.


def smem_layout(spec: AttentionSpec, tiling: MultistageTiling) -> SmemLayout:
    """Shared memory of one block: a resident Q tile, then `stages` K/V tile pairs."""
    elem = dtype_trait(spec.dtype).size
    q_bytes = tiling.block_m * spec.head_dim * elem
    k_bytes = tiling.block_n * spec.head_dim * elem
    v_bytes = k_bytes
    stage = k_bytes + v_bytes
    total = q_bytes + tiling.stages * stage
    return SmemLayout(q_offset=0, q_bytes=q_bytes, kv_offset=q_bytes, k_tile_bytes=k_bytes,
                      v_tile_bytes=v_bytes, stage_bytes=stage, total_bytes=total,
                      swizzle_chunks=swizzle_chunks(spec.head_dim, dtype_trait(spec.dtype).size))


def register_estimate(spec: AttentionSpec, tiling: MultistageTiling, info: ArchInfo) -> int:
    """32-bit registers per thread: O and S accumulators, optional Q fragments, A fragments, overhead
    and the target's reserve."""
    rows = tiling.warp_m_tiles  # 16-row tiles; each thread holds 2 rows of each
    o_acc = rows * spec.head_dim // 2        # (16 x d) fp32 per tile / 32 lanes
    # (16 x block_n) fp32 per tile / 32 lanes, weighted 9/8: the packed P of a k-step lives beside
    # the scores (calibration: hd64 128 x 128 with 2 warp tiles spills 8 B at estimate 240, hd128
    # 128 x 64 with 2 warp tiles does not).
    s_acc = rows * tiling.block_n // 2 * 9 // 8
    q_frag = q_fragment_registers(spec, tiling)
    a_frag = 16 * rows                        # A fragments of the current and the next k-step
    return o_acc + s_acc + q_frag + a_frag + REG_OVERHEAD + info.extra_registers


def q_fragment_registers(spec: AttentionSpec, tiling: Tiling) -> int:
    """Registers of the Q fragments when Q stays in registers: (16 x d) elements per tile over 32 lanes,
    packed into 4-byte registers."""
    if not tiling.q_in_regs:
        return 0
    return tiling.warp_m_tiles * 16 * spec.head_dim * dtype_trait(spec.dtype).size // (32 * 4)


def copies_per_thread(spec: AttentionSpec, tiling: MultistageTiling) -> int:
    """16-byte cp.async copies each thread issues for one K tile."""
    tile_bytes = tiling.block_n * spec.head_dim * dtype_trait(spec.dtype).size
    return -(-(tile_bytes // CP_ASYNC_BYTES) // (tiling.num_warps * 32))


def estimate_cost(spec: AttentionSpec, info: ArchInfo, tiling: MultistageTiling, smem: int,
                  regs: int) -> CostEstimate:
    """Predicted time of one forward pass at the reference workload (batch x heads fill hidden 2048)."""
    n, d, elem = REF_SEQLEN, spec.head_dim, dtype_trait(spec.dtype).size
    heads = REF_HIDDEN // d
    causal = mask_trait(spec).cost_density
    m_blocks = -(-n // tiling.block_m)
    # IO model: Q and O once, K and V once per query block (half of them under a causal mask).
    hbm = heads * (2 * n * d * elem + causal * m_blocks * 2 * n * d * elem)
    flops = heads * 4 * n * n * d * causal
    # Each warp reads the whole K and V tile per KV block (and Q when it is not in registers).
    kv_blocks = m_blocks * -(-n // tiling.block_n) * causal
    per_block = tiling.num_warps * 2 * tiling.block_n * d * elem
    if not tiling.q_in_regs:
        per_block += tiling.block_m * d * elem
    smem_read = heads * kv_blocks * per_block
    blocks = resident_blocks(info, smem, regs, tiling.num_warps * 32)
    warps = blocks * tiling.num_warps
    hiding = min(1.0, warps / WARPS_TO_HIDE_LATENCY)
    waves = -(-(m_blocks * heads) // max(1, blocks * info.num_sms_hint))
    tile_eff = (m_blocks * heads) / (waves * max(1, blocks * info.num_sms_hint))
    clk = info.clock_ghz * 1e3  # clocks per microsecond
    t_hbm = hbm / (info.hbm_gbps * 1e3)
    t_mma = flops / (info.mma_flops_per_clk * info.num_sms_hint * clk)
    t_smem = smem_read / (info.smem_bytes_per_clk * info.num_sms_hint * clk)
    t_exp = heads * n * n * causal / (MUFU_PER_CLK * info.num_sms_hint * clk)
    iters_per_sm = kv_blocks * heads / info.num_sms_hint
    t_iter = iters_per_sm * ITER_OVERHEAD_CLK / clk / max(1, blocks)
    predicted = max(t_hbm, t_mma + t_exp + 0.5 * t_smem + t_iter) / (hiding * tile_eff)
    return CostEstimate(ref_seqlen=n, hbm_bytes=int(hbm), smem_read_bytes=int(smem_read), flops=int(flops),
                        blocks_per_sm=blocks, warps_per_sm=warps, tile_efficiency=round(tile_eff, 4),
                        t_hbm_us=round(t_hbm, 2), t_mma_us=round(t_mma, 2), t_smem_us=round(t_smem, 2),
                        latency_hiding=round(hiding, 3), predicted_us=round(predicted, 2))


def enumerate_tilings(spec: AttentionSpec) -> list[MultistageTiling]:
    """The multistage search space (search_space.MULTISTAGE) with the spec's stages, Q in registers or not;
    block_n a multiple of the MMA's k (32 keys per P V step for fp8)."""
    space = search_space.MULTISTAGE
    stages = (spec.pipeline.stages,) if spec.pipeline.stages else space.auto_stages
    k = dtype_trait(spec.dtype).mma_k
    searched = [MultistageTiling(block_m=b.block_m, block_n=bn, num_warps=b.num_warps, warp_m_tiles=b.warp_m_tiles,
                                 stages=st, q_in_regs=q_regs, refill_late=b.num_warps >= REFILL_LATE_WARPS)
                for b, bn, st, q_regs in itertools.product(space.blocks, space.block_ns, stages, (True, False))
                if bn % k == 0]
    measured = [t for (_, d), t in MEASURED.items() if d == spec.head_dim and not spec.pipeline.stages]
    return measured + [t for t in searched if t not in measured]


def evaluate(spec: AttentionSpec, info: ArchInfo, tiling: MultistageTiling) -> Candidate:
    layout_ = smem_layout(spec, tiling)
    smem, regs = layout_.total_bytes, register_estimate(spec, tiling, info)
    dims = f"hd{spec.head_dim} {spec.dtype.value} block_m {tiling.block_m} block_n {tiling.block_n}"

    def reject(reason: str) -> Candidate:
        return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=False, reason=reason)

    if smem > info.smem_per_block:
        return reject(f"{dims}, {tiling.stages} stages needs {smem} B of shared memory "
                      f"({layout_.q_bytes} Q + {tiling.stages} x {layout_.stage_bytes} K/V); "
                      f"{info.arch.value} allows {info.smem_per_block} B per block")
    if regs > info.max_regs_per_thread:
        return reject(f"needs ~{regs} registers per thread (O {tiling.warp_m_tiles * spec.head_dim // 2}"
                      f" + S {tiling.warp_m_tiles * tiling.block_n // 2 * 9 // 8}"
                      f" + Q {q_fragment_registers(spec, tiling)}"
                      f" + A {16 * tiling.warp_m_tiles} + {REG_OVERHEAD} + {info.extra_registers} for "
                      f"{info.arch.value}); at most "
                      f"{info.max_regs_per_thread}: it would spill")
    measured = MEASURED.get((info.arch, spec.head_dim)) == tiling
    if tiling.stages == 1 and not measured:
        return reject(f"one K/V buffer is measured only where MEASURED names it "
                      f"({', '.join(f'{a.value} hd{d}' for a, d in MEASURED)})")
    copies = copies_per_thread(spec, tiling)
    if copies > MAX_COPIES_PER_THREAD:
        return reject(f"{copies} cp.async copies per thread per K tile ({tiling.block_n} x {spec.head_dim} "
                      f"over {tiling.num_warps * 32} threads); above {MAX_COPIES_PER_THREAD} ptxas spills addresses")
    cost = estimate_cost(spec, info, tiling, smem, regs)
    if cost.blocks_per_sm == 0:
        return reject("no block of this size can be resident on one SM")
    if measured:   # outranks the model's choice: an H100 sweep measured it fastest (MEASURED)
        return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=True,
                         reason="fits; measured fastest on this arch (MEASURED)",
                         cost=cost.model_copy(update={"rank_us": 0.0}))
    return Candidate(tiling=tiling, smem_bytes=smem, regs_estimate=regs, fits=True, reason="fits", cost=cost)


def multistage(tiling: Tiling) -> MultistageTiling:
    """`tiling` as this family's own kind (its plans and candidates hold no other)."""
    assert isinstance(tiling, MultistageTiling), f"sm80_fwd plans multistage tilings, not {tiling!r}"
    return tiling


class Sm80Forward(ForwardFamily):
    name = "sm80_fwd"
    path = "mma.sync + cp.async"
    pipelines: ClassVar[tuple[PipelineKind, ...]] = (PipelineKind.multistage,)
    template = "attn_fwd.cu.j2"
    column = "q in regs"

    def coverage(self) -> Coverage:
        return Coverage(archs=tuple(a.value for a in Arch), head_dims=HEAD_DIMS, dtypes=tuple(d.value for d in DTYPES),
                        masks=tuple(m.value for m in MASKS), kv_layouts=tuple(KV_LAYOUTS),
                        pipelines=tuple(k.value for k in self.pipelines),
                        notes="every arch (sm80 and later; fp8_e4m3 on sm89 and sm120); `auto` where no family "
                              "before it in FAMILIES serves")

    def refuses(self, spec: AttentionSpec, arch: Arch) -> str | None:
        trait = dtype_trait(spec.dtype)
        if trait.mma_sync_archs is not None and arch.value not in trait.mma_sync_archs:
            return (f"mma.sync runs {trait.name} natively on {', '.join(trait.mma_sync_archs)} only, not "
                    f"{arch.value}")
        return None

    # ---- planning ------------------------------------------------------------------------------
    def choice_reason(self, spec: AttentionSpec, kind: PipelineKind, best: Candidate,
                      fitting: list[Candidate]) -> str:
        if best.cost is not None and best.cost.rank_us is not None:
            return (f"measured fastest on the H100 (sm80_fwd.MEASURED), which outranks the model: predicted "
                    f"{best.cost.predicted_us} us at seqlen {best.cost.ref_seqlen} ({cost_terms(best)}) against the "
                    f"model's best {min(predicted(c) for c in fitting)} us; the model charges each query block's K/V "
                    f"reads to HBM, where they come from L2")
        return lowest_reason(best, fitting)

    def enumerate_tilings(self, spec: AttentionSpec, kind: PipelineKind) -> list[MultistageTiling]:
        return enumerate_tilings(spec)

    def evaluate(self, spec: AttentionSpec, info: ArchInfo, tiling: Tiling, kind: PipelineKind) -> Candidate:
        return evaluate(spec, info, multistage(tiling))

    def assemble(self, spec: AttentionSpec, arch: Arch, kind: PipelineKind, best: Candidate, reason: str,
                 candidates: tuple[Candidate, ...]) -> KernelPlan:
        info = arch_info(arch)
        assert best.cost is not None
        t = multistage(best.tiling)
        # __launch_bounds__ min blocks: as many as the budget lets reside, while keeping the 255 cap.
        min_blocks = max(1, min(best.cost.blocks_per_sm, info.regs_per_sm // (t.num_warps * 32 * 255) or 1))
        return KernelPlan(spec=spec, arch=arch, family=self.name, pipeline=kind,
                          kernel_name=kernel_name(spec, arch, kind), tiling=t, threads=t.num_warps * 32,
                          smem_bytes=best.smem_bytes, smem=smem_layout(spec, t), regs_estimate=best.regs_estimate,
                          min_blocks_per_sm=min_blocks, cost=best.cost, reason=reason, candidates=candidates)

    def owns(self, tiling: Tiling) -> bool:
        return isinstance(tiling, MultistageTiling)

    def describe(self, tiling: Tiling) -> str:
        t = tiling
        return f"block_m {t.block_m}, block_n {t.block_n}, {t.num_warps} warps, {t.stages} stages"

    def column_value(self, tiling: Tiling) -> bool:
        return multistage(tiling).q_in_regs

    # ---- render and launch ---------------------------------------------------------------------
    def plan_line(self, plan: KernelPlan) -> str:
        t = multistage(plan.tiling)
        return (f"{plan.pipeline.value} block_m={t.block_m} block_n={t.block_n} warps={t.num_warps} "
                f"warp_m_tiles={t.warp_m_tiles} stages={t.stages} q_in_regs={t.q_in_regs} smem={plan.smem_bytes}B")

    def context(self, plan: KernelPlan) -> dict[str, object]:
        from ..codegen.renderer import common_context

        return {**common_context(plan, self.plan_line(plan)), "tiling": plan.tiling, "smem": plan.smem,
                "min_blocks_per_sm": plan.min_blocks_per_sm, **_params(plan)}

    def prepare(self, plan: KernelPlan, fn: Any, call: Any) -> ReadySm80Forward:
        from ..runtime.driver import PreparedLaunch
        from ..runtime.forward import param_template

        params = param_template(with_variant(base_fields(plan.spec), call.args.fields), call)
        return ReadySm80Forward(params=params, launch=PreparedLaunch(fn, call.seqs.grid(plan.block_m), plan.threads))


@dataclass(frozen=True)
class ReadySm80Forward:
    """The mma.sync forward of one geometry, ready to run: its parameter block's shape-dependent fields and its
    launch."""

    params: Any
    launch: Any

    def run(self, call: Any, stream: int) -> None:
        from ..runtime.forward import call_fields

        self.launch(stream, self.params.make(lambda p: call_fields(p, call)))


def base_fields(spec: AttentionSpec) -> tuple[Field, ...]:
    """The parameter block before the variant's fields: FWD_PARAMS, and the descale factors of a descaled dtype."""
    return forward_base(FWD_PARAMS, dtype_trait(spec.dtype).descaled)


def _params(plan: KernelPlan) -> dict[str, object]:
    fields = params_with_variant(base_fields(plan.spec), plan.spec)
    return {"params": fields, "params_layout": layout(fields)}
