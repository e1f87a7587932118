"""The Hopper forward's cost model (sm90_fwd.py's plans): the products at the measured matmul rate, the softmax as far
as the pipeline leaves it exposed, each KV step's and each query block's fixed clocks, and the HBM and L2 traffic.
Each constant carries the measurement it was calibrated on; `estimate_cost` is the one function that reads them.
"""

from __future__ import annotations

from ..features.dtype import dtype_trait
from ..features.mask import mask_trait
from ..planning.archs import ArchInfo, matmul_ceiling
from ..planning.ir import CostEstimate, WarpSpecializedTiling
from ..planning.shared import MUFU_PER_CLK, REF_HIDDEN, REF_SEQLEN
from ..planning.splits import wave_efficiency
from ..spec.model import AttentionSpec

#: Fixed cost of one KV iteration of a consumer warpgroup (two mbarrier waits, wgmma fence, commit
#: and wait, turn barriers), in clocks.
ITER_OVERHEAD_CLK = 400
#: Softmax work per score on the FP32 and SFU pipes, in units of one exp2 (max, scale-and-subtract,
#: exp2, sum, pack): exp2 runs at MUFU_PER_CLK (planning/shared.py), the FP32 ops at 128.
SOFTMAX_COST_PER_EXP = 1.5
#: L2 bandwidth over HBM bandwidth (H100: ~12 TB/s of L2 against 3 TB/s measured HBM).
L2_OVER_HBM = 4
#: Clocks of one query block beside its KV steps: the prologue (Q's copy, the first K tile's wait, the first
#: S = Q K^T with nothing beside it) and the epilogue (the last O += P V, O's rescale and store, the LSE's).
#: Calibrated on the H100 (benchmarks/results/h100/model_1/fwd/bench.json, unmasked rows): the bench's 2k and 8k
#: rows launch the same blocks (16k tokens each) of 16 and 64 KV steps, so the two times give B and the step's s:
#: hd128 B = 4600 and s = 3190 clocks at 1.83 GHz (hd64's give 2700 and 3170).
BLOCK_OVERHEAD_CLK = 4500
#: A mask that keeps part of the score matrix (cost_density < 1: causal, prefix-LM) costs more per FLOP it keeps:
#: its diagonal tiles run whole and are masked element by element (a density of 0.5 leaves them out: at seqlen
#: 4096 they add 3% of the tiles at hd128 128 x 128, 9% at hd64 192 x 128), and its blocks are of unequal length,
#: so the longest run on alone at the end (each head's heaviest block starts first, but the heads one after
#: another). On model_1's causal rows the measured times exceed the unmasked rows' B and s on the tiles they visit
#: by 9% / 7% (hd128, 2k / 8k) and 7% / 6% (hd64): with the diagonal tiles ~1.11 (hd128) and ~1.16 (hd64), whence
#: 1.13 then. Since, the causal kernels deal each head's heaviest blocks first in the last waves and walk their own
#: rows' tiles, and the H200's bench (benchmarks/results/h200/model_1/fwd/bench.json, hd64 / 128 / 256 at 2k-16k) read
#: the causal rows 0.70-0.96 of predicted (geometric mean 0.81) against the unmasked rows' 0.81-0.94 (0.86) with 1.13.
#: 1.06 gives the causal rows the unmasked rows' mean (0.75-1.02, 0.87): no bias of their own left. One factor for
#: every tiling: it ranks nothing.
PARTIAL_MASK_SLOWDOWN = 1.06


def mma_flops_per_us(info: ArchInfo, bits: int = 16) -> float:
    """The rate the consumers' wgmma products run at for `bits`-bit operands, FLOP per microsecond: the arch's
    measured matmul ceiling of that width (archs.matmul_ceiling; on the H100 760 TFLOP/s at 16 bits, 1249 at 8), not
    the datasheet's wgmma rate (4096 FLOP/clk x 132 SMs x 1.83 GHz = 989 at 16 bits, twice that at 8), which the
    tensor pipe does not hold under load (the clock drops; cuBLAS reaches 736-802). On model_1's hd128 rows a
    128 x 128 x 128 step ran ~3190 clocks against 2048 at the datasheet rate and ~2670 at the measured one. Where no
    ceiling of that width was measured, the datasheet rate (the 8-bit products priced at the 16-bit ceiling read the
    H100's fp8 kernels 0.49-0.67 of their predicted time: benchmarks/results/h100/fp8_tiles/fwd_refresh/fp8)."""
    peak = peak_flops_per_us(info) * 16 / bits
    ceiling = matmul_ceiling(info.arch, bits)
    return min(peak, ceiling.flops_per_s / 1e6) if ceiling.measured and ceiling.bits == bits else peak


def peak_flops_per_us(info: ArchInfo) -> float:
    """The datasheet's 16-bit wgmma rate, FLOP per microsecond: the ranking's at every operand width (the 8-bit
    tilings' order is the table's, sm90_fwd_measured.MEASURED_TILES_FP8, or this model's at the 16-bit rate)."""
    return info.wgmma_flops_per_clk * info.num_sms_hint * info.clock_ghz * 1e3


#: The share of the softmax that runs under wgmma products, by (ping-pong, overlap), as the ranking counts it.
#: Ping-pong hides it under the other warpgroup's products, the overlap under the warpgroup's own O += P V; two
#: consumer warpgroups interleave about half of it on their own. Measured (hd128 8k, 128 x 128): both 638 TFLOP/s,
#: ping-pong alone 569.
HIDDEN = {(True, True): 1.0, (True, False): 0.8, (False, True): 0.8, (False, False): 0.5}


def softmax_hidden(tiling: WarpSpecializedTiling, pingpong: bool) -> float:
    """The share of the softmax under products as predicted_us counts it: HIDDEN, except that without ping-pong and
    overlap the other warpgroups' products run while one runs its softmax, 1 - 1/warpgroups (2: HIDDEN's half;
    3: two thirds, which model_1's hd64 rows give: a 192 x 128 step took ~3170 clocks = 2000 of products at the
    measured rate + ITER_OVERHEAD_CLK + a third of the softmax's 2300)."""
    if pingpong or tiling.intra_wg_overlap:
        return HIDDEN[(pingpong, tiling.intra_wg_overlap)]
    return 1 - 1 / tiling.consumer_warpgroups


def exposed(t_mma: float, t_soft: float, hidden: float) -> float:
    """The products and the softmax with `hidden` of the shorter under the longer."""
    return max(t_mma, t_soft) + (1 - hidden) * min(t_mma, t_soft)


def estimate_cost(spec: AttentionSpec, info: ArchInfo, tiling: WarpSpecializedTiling, pingpong: bool) -> CostEstimate:
    """Forward time at the reference workload (one block per SM): the products and the softmax as far as the
    pipeline leaves it exposed, plus each KV step's fixed clocks, over the waves of the blocks; or the HBM and L2
    traffic if that takes longer. rank_us, which ranks the tilings, takes the products at the 16-bit datasheet rate
    and HIDDEN; predicted_us at the measured matmul rate of the operands' width, with softmax_hidden,
    BLOCK_OVERHEAD_CLK per query block and PARTIAL_MASK_SLOWDOWN (calibrated on model_1 after the tilings were
    chosen: they move no choice)."""
    n, d, elem = REF_SEQLEN, spec.head_dim, dtype_trait(spec.dtype).size
    bits = 8 * elem
    heads = REF_HIDDEN // d
    causal = mask_trait(spec).cost_density
    m_blocks = -(-n // tiling.block_m)
    kv_blocks = m_blocks * -(-n // tiling.block_n) * causal
    # Q, O, K and V cross HBM once; the re-reads of K and V by later query blocks come from L2.
    hbm = heads * 4 * n * d * elem
    l2_reread = heads * causal * (m_blocks - 1) * 2 * n * d * elem
    flops = heads * 4 * n * n * d * causal
    sms, clk = info.num_sms_hint, info.clock_ghz * 1e3
    tile_eff = wave_efficiency(m_blocks * heads, sms)
    t_hbm = hbm / (info.hbm_gbps * 1e3) + l2_reread / (L2_OVER_HBM * info.hbm_gbps * 1e3)
    t_mma = flops / mma_flops_per_us(info, bits)
    t_soft = SOFTMAX_COST_PER_EXP * heads * n * n * causal / (MUFU_PER_CLK * sms * clk)
    t_iter = kv_blocks * heads / sms * ITER_OVERHEAD_CLK / clk
    t_block = m_blocks * heads / sms * BLOCK_OVERHEAD_CLK / clk
    hidden = softmax_hidden(tiling, pingpong)
    slowdown = PARTIAL_MASK_SLOWDOWN if causal < 1 else 1.0
    predicted = max(t_hbm, exposed(t_mma, t_soft, hidden) + t_iter + t_block) * slowdown / tile_eff
    ranked = exposed(flops / peak_flops_per_us(info), t_soft, HIDDEN[(pingpong, tiling.intra_wg_overlap)])
    return CostEstimate(ref_seqlen=n, hbm_bytes=int(hbm), smem_read_bytes=0, flops=int(flops), blocks_per_sm=1,
                        warps_per_sm=tiling.num_warps, tile_efficiency=round(tile_eff, 4), t_hbm_us=round(t_hbm, 2),
                        t_mma_us=round(t_mma, 2), t_smem_us=0.0, latency_hiding=round(hidden, 3),
                        predicted_us=round(predicted, 2), rank_us=round(max(t_hbm, ranked + t_iter) / tile_eff, 2))
