"""The sm90 backward's 64-KV-row tiling (hd64, hd128): each consumer warpgroup owns 64 of the block's 128 KV rows and
all of head_dim, its dK and dV accumulators in registers beside S^T and dP^T. The step's choices (query rows, stages,
dS^T tiles, where dV and dK read P^T and dS^T, how dQ is added, the accumulators' starts, the exps' split around dP^T's
wait) are module constants, each with its measurement beside it, so that a device A/B can flip one
(benchmarks/bwd_interleaved.py's `attngen:sm90_bwd_rows.NAME=value` kinds). Its template is
templates/common/hopper_bwd_rows.cuh.j2; the other tilings are sm90_bwd_halves.py (hd192) and sm90_bwd_split.py
(hd256); the family, which picks among them, is sm90_bwd.py.
"""

from __future__ import annotations

from typing import Any

from ..errors import PlanError
from ..features.dtype import dtype_trait
from ..features.variant import variant_of
from ..features.variant_cxx import score_grad_is_const
from ..planning.archs import ArchInfo
from ..planning.ir import SmemRegions
from ..planning.ir_bwd import HopperBwdTiling
from ..planning.shared import ALIGN_SLACK, schedule_words, setmaxnreg_split
from ..spec.model import AttentionSpec
from ..spec.variant import MaskKind
from .sm90_bwd_split import REG_OVERHEAD
from .sm90_dq_tiles import TILED_DQ_PATH

#: Query rows per step: 64 at hd128 (registers: dK + dV take 128), 128 at hd64.
BLOCK_M = {64: 128, 128: 64}
#: Query rows per step of unmasked specs at these head dims (HopperBwdTiling.dq_swap), {128: 80} for FlashAttention's
#: hd128 tile: a fifth more queries per step for the step's fixed work (barriers, the row values' loads, dQ's staging
#: and reduction), where wgmma's M (64) cannot take 80 rows of dS, so dQ's product is transposed, dQ^T = K^T dS^T.
#: Masked specs would keep 64 (a band mask's diagonal tiles waste more of an 80-row step). Off: measured on the H100
#: at hd128 unmasked 2k-16k (results/h100/q80, NOTES.md) 80-query steps read level with 64 (dK before dQ) or 2-4%
#: below (dQ first, dK from shared memory); the profile has the tensor pipe no busier, the warps waiting on the
#: products as before. Compiled and tested (CPU and GPU) with the switch on; a module constant for the device A/B.
BLOCK_M_UNMASKED: dict[int, int] = {}
BLOCK_N = 128
#: The most Q/dO stages, by whether dQ is added from registers (dq_red without dq_bulk); the planner takes the most the
#: shared-memory budget holds, down to MIN_STAGES. Three where dQ is staged in shared memory too: at hd128 (215.6 KB
#: with the boxes) three measured +2-4% over two at 8k, level at 2k and 16k (results/h100/st3); hd64's 128-query
#: tiles (P^T's tile beside dS^T's, and the boxes) hold two. Two stages with red from registers (the device script's
#: red2 variant) measured within the run's noise of three at hd64/128 (results/h100/dq_red).
STAGES = {True: 3, False: 3}
MIN_STAGES = 2
#: Query tiles whose P^T and dS^T feed dV's and dK's products from shared memory (SS: P^T gets a tile beside dS^T,
#: and two named barriers a step order the warpgroups around them) instead of from their packed register copies (RS,
#: FlashAttention's form at every head dim it serves). Empty: the 128-query tiles of hd64 once spilled 60 B with the
#: packed copies beside S^T and dP^T; since the operand descriptors and the late D rows they compile without spills
#: or serialized wgmmas under NVRTC 13.0 and 13.5 (168 registers), and measured on the H100 +5-9% over {128}
#: (results/h100/hd64_rs: 8k 434-439 -> 466-474 TFLOP/s, causal 413 -> 445). A module constant for the device A/B.
DKV_FROM_SMEM_BLOCK_M: frozenset[int] = frozenset()
#: The most dS^T tiles where dV and dK come from registers (ds_buffers), taken before the stages: two alternate by
#: step, so a step's store cannot overwrite what the other warpgroup's previous dQ product reads, and one named barrier
#: a step orders the warpgroups instead of two (FlashAttention-4's dS stages). Measured on the H100
#: (results/h100/hd64_rs, against one tile): hd64 (then two stages) +1-5%, 8k 466-474 -> 472-480, causal 445 ->
#: 458-461, 16k 480 -> 501-505; hd128 (three stages still fit: 226.6 KB) level to +2%.
DS_BUFFERS = 2
#: The query tiles (block_m) whose dQ product is issued in the next step (HopperBwdTiling.dq_deferred), its dS^T tile
#: signalled by mbarriers instead of a named barrier of both consumer warpgroups a step. Why: the warpgroups met at
#: that barrier every step, so their exps and conversions coincided and the tensor pipe idled through them together
#: (results/h100/q80/ncu, NOTES.md). Measured on the H100 (results/h100/dq_deferred/ab_1, timed alternately in one
#: process, against main's order): hd64 (128-query tiles) +3-8%, with DQ_STAGGER_BLOCK_M +6-11%; hd128 (64) -0.3 to
#: +1.9%, with the stagger -1 to -3%: so 128 only. Served where dS^T has two tiles, dV and dK come from registers, dQ
#: is staged for producer warp 1 and not ordered (dq_deferral_serves).
DQ_DEFERRED_BLOCK_M: frozenset[int] = frozenset({128})
#: The query tiles of a deferred dQ whose warpgroup 1 starts once warpgroup 0's first S^T is ready
#: (HopperBwdTiling.dq_stagger): a step's exps of one then run under the other's products from the first step.
DQ_STAGGER_BLOCK_M: frozenset[int] = frozenset({128})
#: dK and dV written through shared memory at the end of a block (HopperBwdTiling.dkv_staged): a warp's 16 rows packed
#: into the K and V tiles' rows by stmatrix, then 16-byte row chunks to global memory, two whole rows a warp store at
#: hd128 where the fragments' 4-byte stores cover 16 bytes of eight rows. Why: against FlashAttention-4 at 2k the
#: dK/dV kernel's time fits ~10 us of fixed cost a block against its ~2 (results/h100/prepared/call_vs_kernels,
#: NOTES.md). A module constant for the device A/B.
DKV_STAGED = True
#: dV written out before the warpgroups meet at the block's end (HopperBwdTiling.dv_out_first). Why: the epilogue's
#: barrier waits for both warpgroups' last dQ products (they read all of K), but a warpgroup's V rows are read only by
#: its own dP^T products; with the stagger warpgroup 0 ends about half a step ahead and waits there. H100 block traces
#: put the epilogue at 1.0-1.2 us at hd64 and 1.8-2.0 us at hd128 (results/h100/block_trace_phases). Off until the
#: device A/B measures it.
DV_OUT_FIRST = False
#: dV's product issued after dS^T's stores and dK's after dV's is done (HopperBwdTiling.dv_after_ds), FlashAttention-4's
#: order, where dQ's product is not deferred (hd128). Measured (results/h100/step_orders, one process, 6 repetitions):
#: alone +0.4-1.4% at hd128; with EXPS_BEFORE_DP's split +0.7-1.0% unmasked, +2.4-3.2% causal. A module constant for
#: the device A/B.
DV_AFTER_DS = True
#: By query tile (block_m): the 8-query tiles of S^T whose exps run before dP^T's product is waited on
#: (HopperBwdTiling.exps_before_dp; a tile not named: all of them). Why: the hd128 causal profile beside
#: FlashAttention-4's (results/h100/step_orders/ncu) has attngen's 32 MUFUs a step issued back to back, ~13k stall
#: samples of `wait` on them against FA4's ~1k, whose exps run half before and half after the wait, interleaved with
#: the dS values and their packing. Measured (step_orders/exps128, exps64): hd128 half before +0.8-0.9% unmasked,
#: +1.7-2.2% causal (2 or 6 of the 8 tiles no better); hd64's 128-query step with 12 of 16 before 2-4% slower (8 of 16
#: spilled 48 B), so it kept all of them; so does a mask with holes (the document mask's varlen twin spilled 4 B).
#: hd64's 8 of 16 fit once S^T's and dP^T's accumulators start at the row values (DP_FROM_D, S_FROM_LSE: no LSE or D
#: array beside them), and are taken only so (exps_before_dp). Measured on the H200 with both, against neither and no
#: split (results/h200/rows_acc_1, rows_acc_2): +0.1-6.4% at 2k-16k (geometric means +0.8% and +3.0% in the two
#: runs); unsplit the accumulators alone read 0.94-0.995 (each product waits for the shared loads of its row values).
#: A module constant for the device A/B.
EXPS_BEFORE_DP: dict[int, int] = {64: 4, 128: 8}
#: dQ added from registers by red.global.add.v4.f32 into the tile-ordered accumulator (HopperBwdTiling.dq_red)
#: instead of staged in shared memory and TMA-reduced by producer warp 1 (main's path, kept for ordered dQ). Why: the
#: staged form's profile (results/h100/bwd_lse_rows/ncu_lse_rows) shows its 16 KB of fp32 stores and the bulk read
#: per warpgroup and step waiting on the shared-memory pipe the products' operands load from; the v4 reductions
#: put 512 contiguous bytes a warp on L2 instead. Which specs take it: dq_red_serves. A module constant so that the
#: device script (benchmarks/dq_red_device.sh) can sed it to False and A/B the two.
DQ_RED = True
#: With the tile-ordered accumulator: dQ staged in shared memory in fragment order and added by producer warp 1's
#: contiguous bulk reductions (HopperBwdTiling.dq_bulk) rather than by red.global.add.v4.f32 from registers. Why: the
#: hd128 profile beside FlashAttention-4's (results/h100/ncu_peer) has the consumers stalled ~15% of their time on
#: the reductions (lg throttle on the REDGs, then the loop's branch waiting for them to read the dQ registers the
#: next step's products overwrite): the LSU takes 16 KB per warpgroup and step, both warpgroups at once.
DQ_BULK = True
#: Whether masked specs take the tile-ordered accumulator too (dq_red_serves); a module constant for the A/B.
DQ_RED_MASKED = True
#: The 64-KV-row consumers' dS^T stmatrix addresses computed once before the steps and kept live (opaque to ptxas),
#: each step adding its dS^T tile's offset, rather than rematerialized from the thread index every step. Why: the hd128
#: kernel executes 7.0 instructions a query against FlashAttention-4's 6.0 (results/h200/ncu_peer_hd128/opmix.txt),
#: the difference per step and mostly such address arithmetic; kept, each STSM's address is one add. Measured
#: x1.009-1.044 at hd128 on the H200 (results/h200/prepared_1).
DS_OFFSETS_KEPT = True
#: Query rows per step where the addresses are kept one register per k-step: hd64's 128-query steps spilled 4 B under
#: the device's NVRTC 13.0 with them (benchmarks/nvrtc_device_check.sh).
DS_OFFSETS_KEPT_BLOCK_M = (64,)
#: The kept addresses as one register, each k-step's address one XOR of it (and the query slab an immediate; the
#: template's ds_offsets says why that holds in the 128-byte swizzle), at every step size: three registers fewer at
#: 64-query steps, seven at 128, where one register a k-step spilled. Measured on the H200 (results/h200/ds_xor): hd64
#: causal +1.8-3.0% and unmasked level against recomputing; hd128 0.981-1.022 against a register a k-step.
DS_OFFSETS_XOR = True


#: dP^T's accumulator starting at D and its product subtracting (HopperBwdTiling.dp_from_d), where the score mod's
#: derivative is one constant. Why: at hd64's 128-query steps S^T, dP^T, dK and dV hold 192 of the consumers' 240
#: registers, and D's 32 values a thread beside them are what made the exps' split around dP^T's wait spill 48-52 B
#: (results/h200/ncu_peer_hd64_2k: the exps issue back to back, 13.5k `wait` samples on MUFU against FA4's 1.8k).
#: Loaded into the accumulator before the product is issued, D needs no registers of its own, and dS^T loses its
#: FADD a value. A module constant for the device A/B.
DP_FROM_D = True
#: S^T's accumulator starting at -LSE / scale_log2 too (HopperBwdTiling.s_from_lse), where there is no score mod: the
#: LSE array's registers freed as well, but S^T's product then waits for the row values' shared loads.
S_FROM_LSE = True


def ds_offsets_kept(t: HopperBwdTiling) -> bool:
    """Whether the 64-KV-row consumers keep their dS^T store addresses live across the steps (DS_OFFSETS_KEPT): at
    the step sizes of DS_OFFSETS_KEPT_BLOCK_M, or every one in the XOR form; not under masks with holes (schedule
    words), whose hd128 varlen twin spilled 4 B with them, as with exps_before_dp."""
    sizes = t.block_m in DS_OFFSETS_KEPT_BLOCK_M or DS_OFFSETS_XOR
    return DS_OFFSETS_KEPT and sizes and not t.schedule_words


def ds_offsets_xor(t: HopperBwdTiling) -> bool:
    """Whether the kept dS^T store addresses take the one-register XOR form (DS_OFFSETS_XOR)."""
    return ds_offsets_kept(t) and DS_OFFSETS_XOR


#: Whether an ordered (deterministic) dQ takes the bulk reductions into the tile-ordered accumulator too, its producer
#: warp waiting for each query tile's turn as before (dq_red_serves). Why: its TMA tensor reductions into the
#: row-major accumulator are the path the default left for bulk reductions (+4-9%, results/h100/dq_bulk), and the
#: deterministic plans read 0.74-0.81 of the default at hd128 on the H200 (results/h200/bwd_suite_1; target 0.8).
#: Measured on the H200 (results/h200/det_1, alternated by CUDA events): hd64 +3.9-13.8%, hd128 +4.8-8.7% at 2k-16k.
#: A module constant for the A/B.
ORDERED_DQ_BULK = True
#: dq_convert overlapping the dK/dV kernel's last wave (HopperBwdTiling.dq_overlap), where dQ is staged for producer
#: warp 1's bulk reductions. Why: dq_convert reads the fp32 accumulator and writes dQ at copy bandwidth after the dK/dV
#: grid, 137 us of a 32k-token x 16-head step at hd128 (results/h100/seqlens/bench_7), while the grid's last wave
#: leaves SMs idle. Measured (results/h100/dq_overlap, CUDA events around calls back to back, alternated with the
#: switch off in one process): +0.7% and +1.1% mean over hd64/128 at 2k-16k, positive at 15 of 20 points, each within
#: its repetitions' spread; bounded by the idle part of the tail. A module constant for the device A/B.
DQ_OVERLAP = True
#: V loaded after the first Q/dO stage, on an mbarrier of its own (HopperBwdTiling.v_late). Why: a block's first S^T
#: waits for K and V together and then for the first stage (the loads issued in that order), so V's bytes (16 KB at
#: hd64, 32 KB at hd128) sit on the path of every block's start; its first dP^T is issued right after S^T, which
#: covers V's transfer. H100 block traces put a block's wait for K and V at 1.3-1.6 us (hd64) and 1.7-1.9 us (hd128)
#: beside 2-2.5 us steps (results/h100/block_trace_phases). Off until the device A/B measures it. Not with an ordered
#: dQ (v_late_serves).
V_LATE = False


def v_late_serves(ordered_dq: bool) -> bool:
    """Whether V is loaded after the first Q/dO stage (V_LATE; HopperBwdTiling.v_late): not with an ordered dQ, whose
    producer warpgroup holds the turns' passes in its 24 registers too (hd64's deterministic causal kernel spilled 28 B
    with V's load in the first step, under NVRTC 13.0)."""
    return V_LATE and not ordered_dq


def rows_tiling(spec: AttentionSpec, info: ArchInfo, ordered_dq: bool) -> HopperBwdTiling:
    """The tiling where each consumer warpgroup owns 64 KV rows and all of head_dim."""
    red = dq_red_serves(spec, ordered_dq)
    bulk = red and DQ_BULK
    from_registers = red and not bulk   # else staged in shared-memory boxes for producer warp 1
    d, bn = spec.head_dim, BLOCK_N
    bm = block_m(spec, bulk)
    swap = bm % 64 != 0
    # dQ (block_m queries x head_dim over the block's KV rows) split between the two warpgroups: at
    # hd128 by columns (64 each), at hd64 with 128 queries by query rows (64 each); each product
    # covers all KV rows, so every element of the accumulator gets one add per block.
    # With dq_swap each warpgroup's product is 64 head-dim columns x all block_m queries (dQ^T = K^T dS^T).
    dq_cols = bm if swap else 64
    col_step, query_step = (0, 64) if bm == 128 else (64, 0)
    from_smem = bm in DKV_FROM_SMEM_BLOCK_M
    words = schedule_words(spec)
    deferral = dq_deferral_serves(bm, staged=not from_registers, ordered_dq=ordered_dq, from_smem=from_smem, swap=swap)
    v_late = v_late_serves(ordered_dq)
    fits = _layouts(spec, bm=bm, from_smem=from_smem, from_registers=from_registers, dq_cols=dq_cols, words=words,
                    deferral=deferral, v_late=v_late)
    st, ds, layout = next((f for f in fits if f[2].total_bytes <= info.smem_per_block), fits[-1])
    deferred = deferral and ds > 1
    smem = layout.total_bytes
    producer_regs, consumer_regs = setmaxnreg_split(info, bn // 64)
    # dK and dV (head_dim fp32 registers a thread together), S^T and dP^T (block_m), the rest; D is read late at
    # more than 64 queries (kDEarly), which leaves its 2 block_m / 8 registers free during the products.
    regs = d + bm + REG_OVERHEAD - (2 * bm // 8 if bm > 64 and not from_smem else 0)
    if smem > info.smem_per_block or regs > consumer_regs:
        raise PlanError(f"needs {smem} B and ~{regs} registers; {info.arch.value} gives {info.smem_per_block} B, "
                        f"{consumer_regs} registers")
    return HopperBwdTiling(block_m=bm, block_n=bn, stages=st, producer_regs=producer_regs,
                           consumer_regs=consumer_regs, dq_cols=dq_cols, dq_col_step=col_step,
                           dq_query_step=query_step, dkv_from_smem=from_smem,
                           dq_before_dk=dq_before_dk(from_smem), dk_from_smem=swap, smem_bytes=smem, smem=layout,
                           regs_estimate=regs, schedule_words=words, ordered_dq=ordered_dq, dq_red=red,
                           dq_bulk=bulk, dq_overlap=bulk and DQ_OVERLAP and info.programmatic_launch and not ordered_dq,
                           ds_buffers=ds, dkv_staged=DKV_STAGED, dv_out_first=DKV_STAGED and DV_OUT_FIRST,
                           dq_deferred=deferred,
                           dq_stagger=deferred and bm in DQ_STAGGER_BLOCK_M,
                           dv_after_ds=DV_AFTER_DS and not from_smem and not swap and not deferred,
                           v_late=v_late,
                           **_row_values(spec, bm, words))


def _row_values(spec: AttentionSpec, block_m: int, words: int) -> dict[str, Any]:
    """Where the row values go (HopperBwdTiling.dp_from_d, s_from_lse: DP_FROM_D, S_FROM_LSE), and the exps split
    around dP^T's wait (exps_before_dp: EXPS_BEFORE_DP; not under a mask with holes). At 128-query steps both
    accumulators start at the row values or neither: the split spilled 48 B without them, and dP^T's alone (under a
    score mod with a constant derivative, which keeps the LSE) turned hd64's `score * 0.5` from no spill into 48 B and
    serialized wgmmas under NVRTC 13.0."""
    s_from_lse = S_FROM_LSE and spec.score_mod is None
    dp_from_d = DP_FROM_D and score_grad_is_const(variant_of(spec)) and (block_m <= 64 or s_from_lse)
    registers = block_m <= 64 or dp_from_d   # at 128 queries dp_from_d holds only with s_from_lse
    return {"dp_from_d": dp_from_d, "s_from_lse": s_from_lse,
            "exps_before_dp": EXPS_BEFORE_DP.get(block_m, 0) if registers and not words else 0}


def dq_deferral_serves(block_m: int, *, staged: bool, ordered_dq: bool, from_smem: bool, swap: bool) -> bool:
    """Whether a step may issue the previous step's dQ product (block_m in DQ_DEFERRED_BLOCK_M;
    HopperBwdTiling.dq_deferred, given two dS^T tiles): dV and dK from registers (P^T's shared tile has one buffer),
    dQ staged for producer warp 1 (it walks the steps in order and finds each box's tile itself), not ordered (an
    ordered dQ keeps its turns in step) and no transposed dQ product (dK reads dS^T from shared memory there)."""
    return block_m in DQ_DEFERRED_BLOCK_M and staged and not ordered_dq and not from_smem and not swap


def _layouts(spec: AttentionSpec, *, bm: int, from_smem: bool, from_registers: bool, dq_cols: int,
             words: int, deferral: bool, v_late: bool) -> list[tuple[int, int, SmemRegions]]:
    """(Q/dO stages, dS^T tiles, layout) in the planner's order of preference: the most dS^T tiles (DS_BUFFERS; one
    where dV and dK read shared memory), then the most stages (STAGES, by whether dQ is added from registers), down to
    MIN_STAGES; a mask with holes (words) keeps two stages (its live-tile walk beside a third stage's index spilled
    16 B at hd128 under NVRTC 13.0). With deferral (dq_deferral_serves) two dS^T tiles take their mbarriers."""
    most = MIN_STAGES if words else STAGES[from_registers]
    return [(st, ds, _rows_layout(spec, bm=bm, stages=st, ds_buffers=ds, from_smem=from_smem,
                                  dq_cols=0 if from_registers else dq_cols, words=words,
                                  deferred=deferral and ds > 1, v_late=v_late))
            for ds in range(1 if from_smem else DS_BUFFERS, 0, -1) for st in range(most, MIN_STAGES - 1, -1)]


def layout_lines(spec: AttentionSpec, info: ArchInfo, t: HopperBwdTiling) -> list[str]:
    """For explain: each shared-memory layout the planner weighed for the 64-KV-row tiling `t`, in its order, up to the
    one it took, and why the ones before were rejected."""
    from_registers = t.dq_red and not t.dq_bulk
    lines = []
    deferral = dq_deferral_serves(t.block_m, staged=not from_registers, ordered_dq=t.ordered_dq,
                                  from_smem=t.dkv_from_smem, swap=t.dk_from_smem)
    for st, ds, regions in _layouts(spec, bm=t.block_m, from_smem=t.dkv_from_smem, from_registers=from_registers,
                                   dq_cols=t.dq_cols, words=t.schedule_words, deferral=deferral, v_late=t.v_late):
        taken = (st, ds) == (t.stages, t.ds_buffers)
        verdict = "taken" if taken else f"rejected: over {info.arch.value}'s {info.smem_per_block} B"
        lines.append(f"{st} stages x {ds} dS^T tile{'s' if ds > 1 else ''}: {regions.total_bytes} B, {verdict}")
        if taken:
            break
    return lines


def _rows_layout(spec: AttentionSpec, *, bm: int, stages: int, ds_buffers: int, from_smem: bool, dq_cols: int,
                words: int, deferred: bool = False, v_late: bool = False) -> SmemRegions:
    """K, V; the Q and dO stages; ds_buffers tiles of dS^T; P^T when dV and dK take it from shared memory (from_smem);
    one fp32 dQ staging box of 64 x dq_cols per consumer warpgroup (0: dQ added from registers); per stage the query
    tile's LSE and D (bulk-copied beside Q and dO); the mbarriers (K and V, each stage's full and empty, with a
    deferred dQ each dS^T tile's stored and free, and V's own last with v_late); a mask with holes' live-tile bitmap
    (planning.shared.SCHEDULE_WORDS). dS^T's rows are whole 128-byte swizzle rows of 64 queries (an 80-query tile takes
    two, the second a quarter used): dK's A operand steps through them by k-steps, dQ^T's B operand reads them
    MN-major."""
    d, bn, e = spec.head_dim, BLOCK_N, dtype_trait(spec.dtype).size
    ds_cols = -(-bm // 64) * 64
    return SmemRegions.stack([
        ("K", bn * d * e), ("V", bn * d * e), ("Q", stages * bm * d * e), ("DO", stages * bm * d * e),
        ("DS", ds_buffers * bn * ds_cols * e), ("P", bn * bm * e if from_smem else 0),
        ("DQ", bn // 64 * 64 * dq_cols * 4),
        ("Rows", stages * 2 * bm * 4), ("Bar", 8 * (1 + 2 * stages + (2 * ds_buffers if deferred else 0) + v_late)),
        ("Schedule", 4 * words), ("Slack", ALIGN_SLACK)])


def block_m(spec: AttentionSpec, bulk: bool) -> int:
    """Query rows per step (BLOCK_M; BLOCK_M_UNMASKED for unmasked specs whose dQ is bulk-reduced into the
    tile-ordered accumulator unordered, the only path that takes a transposed dQ product)."""
    d = spec.head_dim
    if bulk and spec.mask.kind is MaskKind.none and not spec.deterministic and d in BLOCK_M_UNMASKED:
        return BLOCK_M_UNMASKED[d]
    return BLOCK_M[d]


def step_parts(t: HopperBwdTiling) -> list[str]:
    """How the 64-KV-row consumers run a step (not split, not kv_halves), for plan_line and explain."""
    parts = [f"dV and dK from {'shared memory' if t.dkv_from_smem else 'registers'}",
             f"{t.ds_buffers} dS^T tile{'s' if t.ds_buffers > 1 else ''}",
             f"dK and dV out {'through shared memory' if t.dkv_staged else 'from the fragments'}"
             + (", dV before the warpgroups meet" if t.dv_out_first else "")]
    if t.dq_deferred:
        parts.append("dQ's product a step late" + (", warpgroups staggered" if t.dq_stagger else ""))
    if t.dv_after_ds:
        parts.append("dV's product after dS^T's stores")
    if t.exps_before_dp:
        parts.append(f"exps of {t.exps_before_dp} of {t.block_m // 8} query tiles before dP^T's wait")
    if t.v_late:
        parts.append("V loaded after the first Q/dO stage")
    starts = [x for x, on in (("S^T's at -LSE", t.s_from_lse), ("dP^T's at -D", t.dp_from_d)) if on]
    if starts:
        parts.append(f"accumulators start: {' and '.join(starts)}")
    return parts


def dq_line(t: HopperBwdTiling) -> str:
    """How the 64-KV-row consumers add dQ, for plan_line and explain."""
    order = ", ordered by a semaphore per query tile (deterministic)" if t.ordered_dq else ""
    if t.dq_bulk:
        return ("dQ staged in fragment order, by bulk reductions into a tile-ordered accumulator"
                + (", converted under the last wave as each (entry, KV head) completes" if t.dq_overlap else "")
                + order)
    if t.dq_red:
        return f"dQ by {TILED_DQ_PATH}"
    return "dQ by TMA bulk reductions" + order


def dq_red_serves(spec: AttentionSpec, ordered_dq: bool) -> bool:
    """Whether the 64-KV-row consumers add dQ into the tile-ordered accumulator (HopperBwdTiling.dq_red; by bulk
    reductions of staged fragments with DQ_BULK) rather than the row-major one by TMA tensor reductions. An ordered
    dQ (its reductions issued in dispatch order behind semaphores) takes it with ORDERED_DQ_BULK, else the latter.
    Measured on the H100: red from registers, hd128 unmasked +4-6% at 8k, causal -2-8% (results/h100/dq_red/ab.txt);
    with DQ_BULK, masked specs too (DQ_RED_MASKED) and dQ before dK (dq_before_dk), hd128 causal 472-478 -> 503-507
    TFLOP/s at 8k, hd64 403-407 -> 414 (results/h100/dq_stm/ab_bwd.txt)."""
    ordered_ok = not ordered_dq or (DQ_BULK and ORDERED_DQ_BULK)
    return DQ_RED and ordered_ok and (DQ_RED_MASKED or spec.mask.kind is MaskKind.none)


def dq_before_dk(dkv_from_smem: bool) -> bool:
    """Whether a step issues dQ's product before dK's and stages dQ while dK's runs. Measured on the H100
    (results/h100/bwd_overlap_2, against dV and dK first): hd128 unmasked +5-7% at 2k and 8k; hd128 causal -2-3%
    at 8k with the row-major staged dQ, but +6-7% with the tile-ordered bulk path (results/h100/dq_stm: 472-478 ->
    503-507 TFLOP/s); hd64 within 1% while P^T and dS^T fed dV and dK from shared memory (its former form), and with
    them from registers (DKV_FROM_SMEM_BLOCK_M empty) every tile takes it. So every spec with dV and dK fed from
    registers. At 80 queries (dq_swap) dQ's 40 accumulator registers issued beside P^T's and dS^T's packed copies made
    ptxas serialize the wgmmas (C7512; 7-10% below 64-query steps, results/h100/q80_1), and dK before dQ read level
    with 64-query steps (q80_2): dK's product reads dS^T from shared memory there instead (dk_from_smem)."""
    return not dkv_from_smem
