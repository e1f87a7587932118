"""The Hopper backward's cost model (sm90_bwd.py's plans): the dK/dV kernel's compute (products, exps and each step's
fixed clocks, one after the other) against its steps' L2 traffic, over the waves, after the preprocess. Each constant
carries the measurement it was calibrated on; `plan_cost` is the one function that reads them.
"""

from __future__ import annotations

from ..features.dtype import dtype_trait
from ..features.mask import mask_trait
from ..planning.archs import ArchInfo
from ..planning.ir_bwd import BwdCost, HopperBwdTiling
from ..planning.planner_bwd import backward_cost, preprocess_us, wave_efficiency
from ..planning.shared import BWD_FLOPS_OVER_FWD, MUFU_PER_CLK, REF_HIDDEN, REF_SEQLEN, ref_forward_flops
from ..spec.model import AttentionSpec

#: Clocks per step (one block_m query tile against the block's 128 KV rows) of the work beside the products and the
#: exps, which the model does not split further: mbarrier waits and wgmma fences between five dependent products,
#: dS = P (dP - D) and the bf16 conversions of P^T and dS^T into shared memory, dQ's fp32 staging and its bulk
#: reduction. Recalibrated on the H100 after the descriptor and bulk-dQ changes (benchmarks/results/h100/peers_3,
#: TFLOP/s at 2k / 8k): hd128 unmasked 468 / 558, which brackets the 496 this predicts at the reference workload
#: (seqlen 4096); hd64 then predicts 449 (379 / 442 measured), hd128 causal 488 (318 / 487), hd64 causal 443
#: (300 / 407). Short sequences read below it (their blocks' K/V loads and dK/dV stores are not overlapped). The
#: first calibration, 3200 (387 TFLOP/s at hd128 4k, bwd_hopper/bwd.json), read 0.69-0.84 of today's kernel.
STEP_OVERHEAD_CLK = 1800
#: An ordered dQ (deterministic specs) against the default, by head dim: each query tile's reductions wait for the KV
#: blocks dispatched before this one, and for their own completion before the turn passes on. Measured on the H100
#: with the turns kept by producer warp 1 and the chains a wave holds interleaved (results/h100/det_ab/v3_chains,
#: 2k-16k): 0.77-0.84 of the default at hd128, 0.74-0.83 at hd192, 0.83-0.88 at hd256, whence 1.2. hd64's 128-query
#: steps take a turn per 128 queries and its ordered dQ runs by bulk reductions: on the H200 (results/h200/model_1,
#: `attngen bench --backward`) its deterministic rows read 0.89 of the default rows' measured / predicted with 1.2,
#: the other head dims 0.97-1.03; 1.07 gives hd64 the default's.
ORDERED_DQ_SLOWDOWN: dict[int, float] = {64: 1.07}
#: ... at every other head dim.
ORDERED_DQ_SLOWDOWN_OTHER = 1.2
#: The L2 traffic of the dK/dV kernel's steps that the H100 sustains, in GB/s: each step reads its query tile's Q
#: and dO (TMA) and adds block_m x head_dim fp32 of dQ into L2. L2 binds on requests more than on bytes, so the rate
#: depends on how wide dQ's reductions are. With red.global.add.v4.f32 (or TMA bulk reductions, whole lines): hd256
#: 8k profiled (results/h100/dq_red/ncu_bwd_red/hd256.txt) moved the same 545M sectors (33.4 GB) in 6.88 ms at L2
#: throughput 83.8%, so ~4850 GB/s; the compute terms predict ~6.0 ms there.
STEP_L2_GBPS = 4850
#: ... with two-float reductions (the split with SPLIT_DQ_V4 off): the same bytes in 10.4 ms at L2 84.8%
#: (results/h100/softmax_rows_1/ncu_bwd_hd256), ~3200 GB/s: four times the requests.
STEP_L2_GBPS_V2 = 3200


def step_l2_bytes(spec: AttentionSpec, t: HopperBwdTiling) -> int:
    """The bytes one step moves through L2: its query tile's Q and dO and their LSE and D rows read, its block_m x
    head_dim fp32 of dQ reduced."""
    e = dtype_trait(spec.dtype).size
    return t.block_m * (2 * spec.head_dim * e + 2 * 4 + spec.head_dim * 4)


def dkdv_terms(spec: AttentionSpec, info: ArchInfo, t: HopperBwdTiling) -> tuple[float, float]:
    """The dK/dV kernel's two bounds at the reference workload (us, before waves and ordering): its compute (the
    useful FLOPs at the wgmma rate, the exps of the recomputed P and STEP_OVERHEAD_CLK per step, one after the
    other: the model grants no overlap) and its steps' L2 traffic at step_l2_gbps; both times the share of tiles
    the mask keeps."""
    n, heads = REF_SEQLEN, REF_HIDDEN // spec.head_dim
    density = mask_trait(spec).cost_density
    sms, clk = info.num_sms_hint, info.clock_ghz * 1e3
    steps = -(-n // t.block_n) * heads * -(-n // t.block_m) * density
    t_exp = heads * n * n * density / (MUFU_PER_CLK * sms * clk)
    t_steps = steps / sms * STEP_OVERHEAD_CLK / clk
    t_mma = BWD_FLOPS_OVER_FWD * ref_forward_flops(spec) / (info.wgmma_flops_per_clk * sms * clk)
    return t_mma + t_exp + t_steps, steps * step_l2_bytes(spec, t) / (step_l2_gbps(t) * 1e3)


def step_l2_gbps(t: HopperBwdTiling) -> int:
    """The L2 rate that bounds the plan's steps: two-float dQ reductions (the split without dq_red) get the lower."""
    return STEP_L2_GBPS_V2 if t.split and not t.dq_red else STEP_L2_GBPS


def plan_cost(spec: AttentionSpec, info: ArchInfo, t: HopperBwdTiling) -> BwdCost:
    """The preprocess, then the dK/dV kernel at the reference workload: the longer of dkdv_terms' bounds over the
    waves of one block per SM, ORDERED_DQ_SLOWDOWN (by head dim) for deterministic plans."""
    kv_blocks = -(-REF_SEQLEN // t.block_n) * (REF_HIDDEN // spec.head_dim)
    ordered = ORDERED_DQ_SLOWDOWN.get(spec.head_dim, ORDERED_DQ_SLOWDOWN_OTHER) if t.ordered_dq else 1.0
    dkdv = max(dkdv_terms(spec, info, t)) / wave_efficiency(info, kv_blocks, 1) * ordered
    return backward_cost(spec, info, [("preprocess", preprocess_us(spec, info)), ("dkdv_wgmma", dkdv)],
                         info.wgmma_flops_per_clk)
