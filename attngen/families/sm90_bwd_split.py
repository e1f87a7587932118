"""The Hopper backward at head dims whose dK and dV do not fit one warpgroup's registers (192, 256): the consumer
warpgroups split head_dim between them (HopperBwdTiling.split).

A block owns 64 KV rows of one KV head and walks query tiles of 64 rows. Per step each of the two consumer warpgroups
computes half the query columns of S^T = K Q^T and dP^T = V dO^T (64 x 32), turns them into its half of P^T and dS^T
in shared memory, and once both halves are there adds P^T dO and dS^T Q to its dV and dK columns and computes its dQ
columns (dS K, one 64-column box per product), which it adds to the fp32 accumulator from registers with vector
reductions: by default (SPLIT_DQ_V4) red.global.add.v4.f32 into the tile-ordered accumulator (HopperBwdTiling.dq_red;
dq_convert writes dQ), else red.global.add.v2.f32 into the row-major one. Where the scores split by product, dV's
products are issued once P^T is stored (dv_early); unordered, dO then takes one stage of its own, and warpgroup 1
stages its dQ boxes in shared memory for one bulk reduction a step (SPLIT_STAGED_DQ; its wait for the staging's reads
late in the next step, STAGING_WAIT_LATE). Deterministic specs (HopperBwdTiling.ordered_dq) keep these reductions,
each warpgroup waiting for the tile's semaphore to admit this KV block before its first reduction into the tile and
passing it on after its last (HopperBwdTiling.dq_adders: one step per warpgroup that owns dQ columns). The split
balances the products: a dK/dV box costs two 64 x 64 x 64 products per step, a dQ box one.
"""

from __future__ import annotations

from ..codegen.wgmma import M, WgmmaOp
from ..errors import PlanError
from ..features.dtype import dtype_trait
from ..features.variant import variant_of
from ..features.variant_cxx import hides_keys, score_grad_is_const
from ..planning.archs import ArchInfo
from ..planning.ir import SmemRegions
from ..planning.ir_bwd import HopperBwdTiling, SplitRole
from ..planning.shared import ALIGN_SLACK, schedule_words, setmaxnreg_split
from ..spec.model import AttentionSpec
from .sm90_dq_tiles import TILED_DQ_PATH

#: Consumer registers beside the accumulators and score tiles (pointers, loop state, the query window);
#: calibrated with -Xptxas=-v on sm_90a for the unsplit kernel, which shares the loop.
REG_OVERHEAD = 40
#: KV rows per block and query rows per step: one wgmma M of KV rows (the warpgroups share them), and 64 queries
#: so that P^T and dS^T are one 128-byte swizzle row each.
SPLIT_BLOCK = 64
#: Consumer warpgroups: two halves of the query columns (32 each, wgmma N = 32).
SPLIT_WGS = 2
#: The most Q/dO stages tried, deepest first: the rest of the shared memory after K and V.
MAX_STAGES = 3
#: Head-dim columns of a box: one 128-byte TMA box of bf16/fp16 and one dQ product.
BOX = 64
#: dQ's boxes added by red.global.add.v4.f32 in fragment order into the tile-ordered accumulator (each warp's
#: reduction 512 contiguous bytes: 4 L2 lines) instead of red.global.add.v2.f32 into the row-major one (8 rows of
#: 32 bytes: 8 lines, twice the instructions): a quarter of the L2 requests for the same bytes. Why: the hd256
#: profile (results/h100/softmax_rows_1/ncu_bwd_hd256, NOTES.md issue 13) has L2 at 84.8% with 537M sectors from the
#: v2 reductions and the consumers stalled behind them (long scoreboard, lg throttle). Unmeasured: a module
#: constant so that the device script (benchmarks/dq_red_device.sh) can sed it to False and A/B main's v2 path.
SPLIT_DQ_V4 = True


def split_roles(head_dim: int, wgs: int = SPLIT_WGS) -> tuple[SplitRole, ...]:
    """The dK/dV boxes as even as they divide (the first warpgroups take the odd one), then the dQ boxes each to
    the warpgroup with the least work so far (a dK/dV box is two products per step, a dQ box one), in order, so
    that each warpgroup's boxes are contiguous."""
    if head_dim % BOX:
        raise PlanError(f"head_dim {head_dim}: the split needs whole {BOX}-column boxes")
    boxes = head_dim // BOX
    dkv = [boxes // wgs + (1 if i < boxes % wgs else 0) for i in range(wgs)]
    work = [2 * n for n in dkv]
    dq = [0] * wgs
    for _ in range(boxes):
        least = min(range(wgs), key=lambda w: (work[w], w))
        dq[least] += 1
        work[least] += 1
    return tuple(SplitRole(dkv_box0=sum(dkv[:i]), dkv_boxes=dkv[i], dq_box0=sum(dq[:i]), dq_boxes=dq[i])
                 for i in range(wgs))


def role_registers(role: SplitRole, s_cols: int, by_product: bool = False) -> int:
    """A warpgroup's registers per thread at its peak: dK and dV (64 rows x 64 columns fp32 each per box over 128
    threads), then the larger of its score tiles (S^T and dP^T, 64 x s_cols each; by product one of them and the
    row values) and two dQ boxes in flight (the next one issued before the last one's reductions), and
    REG_OVERHEAD."""
    per_box = BOX * M // 128
    scores = (1 if by_product else 2) * M * s_cols // 128
    dq = per_box * min(2, role.dq_boxes)
    return 2 * per_box * role.dkv_boxes + max(scores, dq) + REG_OVERHEAD


#: With dv_early: dO in one stage (Q keeps two) on mbarriers of its own, freed once the step's dV products are done
#: (after the dS^T barrier), and warpgroup STAGED_WG's dQ boxes staged in shared memory in the accumulator's fragment
#: order and added by one bulk reduction its own thread issues, instead of its 16 red.global.add.v4.f32 a thread a
#: step (HopperBwdTiling.do_stages, dq_bulk). Why: hd192's halves gained 1.4-8.0% from the same move
#: (results/h200/hd192_one_do); at hd256 the staging (32 KB) fits only beside one dO stage. Measured on the H200
#: (results/h200/hd256_staged_dq, alternated by CUDA events): causal +6.4-8.0% at 2k-16k against SPLIT_STAGED_DQ off.
#: A module constant for the A/B.
SPLIT_STAGED_DQ = True
#: The warpgroup whose dQ boxes are all staged (its columns' boxes follow each other in a tile of the accumulator).
STAGED_WG = 1
#: With the staging, the other warpgroup stages as many of its first dQ boxes as the block's shared memory still
#: holds (at hd256 one of its two: 16 KB of the 17 KB left), adding the rest from registers. Why: STAGED_WG's
#: staging took 16 of the 32 red.global.add.v4.f32 a step off the consumers' path for +5.4-9.4%
#: (results/h200/hd256_staged_dq); this takes 8 of the remaining 16. Measured with the wait for the staging's reads at
#: the step's start (results/h200/hd256_staged_wg0): 12% slower; with the wait late (STAGING_WAIT_LATE,
#: results/h200/hd256_wait_late) 1.6-6.1% faster than the early wait but 2.3-5.5% slower than warpgroup 1's staging
#: alone. Off; a module constant for the A/B.
STAGE_OTHER_WG = False
#: A staging warpgroup's thread 0 waits for its last bulk reduction's reads just before the step's first consumer
#: barrier (after the step's first products and the softmax), not at the step's start. Why: at the start the wait
#: holds back the whole warpgroup's first wgmma while the reduction drains to L2 (the halves wait late already).
#: Measured on the H200 (results/h200/hd256_wait_late, alternated by CUDA events): causal +4.3-8.6%, unmasked
#: +6.2-8.2% at 2k-16k. A module constant for the A/B.
STAGING_WAIT_LATE = True


def staged_split(spec: AttentionSpec) -> bool:
    """Whether the split stages dQ boxes beside one dO stage: SPLIT_STAGED_DQ where its dV products go early, into
    the tile-ordered accumulator (SPLIT_DQ_V4: a bulk reduction adds the staged boxes' contiguous bytes), unordered
    (a deterministic dQ keeps its turns around reductions from registers)."""
    return SPLIT_STAGED_DQ and SPLIT_DQ_V4 and not spec.deterministic and dv_early(spec)


def staged_roles(roles: tuple[SplitRole, ...], other: int) -> tuple[SplitRole, ...]:
    """The roles with STAGED_WG's dQ boxes all staged and `other` of each other warpgroup's first ones."""
    return tuple(r.model_copy(update={"dq_staged": r.dq_boxes if w == STAGED_WG else min(other, r.dq_boxes)})
                 for w, r in enumerate(roles))


def split_layout(spec: AttentionSpec, stages: int, roles: tuple[SplitRole, ...] | None = None) -> SmemRegions:
    """K and V (64 rows each), the Q and dO stages (one dO stage on mbarriers of its own where any dQ box is staged),
    dS^T and P^T (64 x 64), the roles' staged dQ boxes (warpgroup by warpgroup), the stages' row values (LSE in log2
    units and D), the mbarriers, the live-tile bitmap of a mask with holes, the alignment slack."""
    d, n = spec.head_dim, SPLIT_BLOCK
    e = dtype_trait(spec.dtype).size
    staged = sum(r.dq_staged for r in roles or split_roles(d))
    do_stages = 1 if staged else 0
    return SmemRegions.stack([
        ("K", n * d * e), ("V", n * d * e), ("Q", stages * n * d * e), ("DO", (do_stages or stages) * n * d * e),
        ("DS", n * n * e), ("P", n * n * e), ("DQ", n * BOX * staged * 4), ("Rows", stages * 2 * n * 4),
        ("Bar", 8 * (1 + 2 * stages + 2 * do_stages)), ("Schedule", 4 * schedule_words(spec)), ("Slack", ALIGN_SLACK)])


def split_stages(spec: AttentionSpec, info: ArchInfo) -> tuple[int, SmemRegions, tuple[SplitRole, ...]]:
    """The deepest Q ring (MAX_STAGES down to 2) whose layout fits the block's shared memory (dO's as deep, or one
    stage where staged_split), and at that depth the most of the other warpgroups' dQ boxes staged beside
    STAGED_WG's (staged_roles; none without STAGE_OTHER_WG)."""
    roles = split_roles(spec.head_dim)
    others = max(r.dq_boxes for r in roles) if STAGE_OTHER_WG else 0
    staged = staged_split(spec)
    candidates = [staged_roles(roles, k) for k in range(others, -1, -1)] if staged else [roles]
    needs = []
    for stages in range(MAX_STAGES, 1, -1):
        for cand in candidates:
            layout = split_layout(spec, stages, cand)
            if layout.total_bytes <= info.smem_per_block:
                return stages, layout, cand
            boxes = f" ({sum(r.dq_staged for r in cand)} dQ boxes staged)" if staged else ""
            needs.append(f"{stages} stages{boxes} {layout.total_bytes} B")
    raise PlanError(f"head_dim {spec.head_dim}: {', '.join(needs)}; {info.arch.value} gives {info.smem_per_block} B "
                    f"per block")


def by_product(spec: AttentionSpec) -> bool:
    """Whether the warpgroups split S^T and dP^T by product (warpgroup 0 S^T and P^T, warpgroup 1 dP^T and dS^T, 64
    query columns each) rather than by columns (32 of both each). By product, each product reads K or V once instead
    of twice, and a 64-wide wgmma from shared memory is not bound by the operand reads as a 32-wide one is (per
    k-step 4 KB in 32 clocks against 3 KB in 16: 128 against 192 B/clock, beyond the 128 shared memory serves). It
    needs dS^T from P^T alone, so a score mod whose derivative varies per element (which needs the raw score where
    dP^T is) splits by columns."""
    return score_grad_is_const(variant_of(spec))


#: By product (by_product), each warpgroup issues its dV columns' product as soon as all of P^T is in shared memory,
#: before warpgroup 1's dS values and the dS^T barrier (HopperBwdTiling.dv_early): masked specs (DV_EARLY_MASKED),
#: unmasked ones (DV_EARLY_UNMASKED) and deterministic ones (DV_EARLY_DETERMINISTIC). Why: both warpgroups' dV and dK
#: waited for that barrier, so the tensor pipe idled through warpgroup 1's dS values and stores (hd192's halves gained
#: 1-4% from the same move, results/h200/hd192_dv_early). Measured on the H200, alternated by CUDA events: causal
#: +2.1-3.2% at 2k-16k (results/h200/hd256_dv_early); unmasked 0.8-1.4% slower alone, but +5.4-9.4% with the dQ staging
#: it brings (SPLIT_STAGED_DQ, results/h200/hd256_staged_dq). Module constants for the A/B.
DV_EARLY_MASKED = True
DV_EARLY_UNMASKED = True
#: The same for deterministic specs (dQ ordered: the dV products do not touch dQ, whose turns stay as they are).
#: Measured on the H200 (results/h200/det_1): causal +0.9-4.6%, unmasked level (0.991-1.017). A module constant for
#: the A/B.
DV_EARLY_DETERMINISTIC = True


def dv_early(spec: AttentionSpec) -> bool:
    """Whether the split issues its dV products early: by product, and DV_EARLY_DETERMINISTIC where dQ is ordered,
    else DV_EARLY_MASKED where a mask hides keys (the kernels' Var::kDense false), else DV_EARLY_UNMASKED."""
    if not by_product(spec):
        return False
    if spec.deterministic:
        return DV_EARLY_DETERMINISTIC
    return DV_EARLY_MASKED if hides_keys(variant_of(spec)) else DV_EARLY_UNMASKED


def split_tiling(spec: AttentionSpec, info: ArchInfo) -> HopperBwdTiling:
    """The split tiling of head_dim; PlanError with the arithmetic when the budget cannot hold it."""
    product = by_product(spec)
    stages, layout, roles = split_stages(spec, info)
    staged = any(r.dq_staged for r in roles)   # one dO stage beside the staging (split_layout)
    s_cols = SPLIT_BLOCK if product else SPLIT_BLOCK // len(roles)
    producer_regs, consumer_regs = setmaxnreg_split(info, len(roles))
    regs = max(role_registers(r, s_cols, product) for r in roles)
    if regs > consumer_regs:
        raise PlanError(f"head_dim {spec.head_dim}: the split needs ~{regs} registers per consumer thread; "
                        f"{info.arch.value} gives {consumer_regs}")
    return HopperBwdTiling(block_m=SPLIT_BLOCK, block_n=SPLIT_BLOCK, stages=stages, producer_regs=producer_regs,
                           consumer_regs=consumer_regs, dq_cols=BOX, dq_col_step=0, dq_query_step=0,
                           dkv_from_smem=True, smem_bytes=layout.total_bytes, smem=layout, regs_estimate=regs,
                           schedule_words=schedule_words(spec), split=roles, split_by_product=product,
                           dq_red=SPLIT_DQ_V4, ordered_dq=spec.deterministic, dv_early=dv_early(spec),
                           do_stages=1 if staged else 0, dq_bulk=staged)


def split_ops(t: HopperBwdTiling, k: int) -> dict[str, object]:
    """The split kernel's wgmma instructions: S^T and dP^T (64 KV rows x s_cols queries, both K-major); dV and dK of
    each box count a warpgroup owns (A = P^T or dS^T from shared memory, B MN-major); one dQ box (A = dS^T read
    M-major, B = K MN-major)."""
    t_op = WgmmaOp(t.s_cols, a_in_regs=False, trans_b=False, k=k)
    acc_ops = tuple(WgmmaOp(BOX * n, a_in_regs=False, trans_b=True, k=k)
                    for n in sorted({r.dkv_boxes for r in t.split}))
    dq_op = WgmmaOp(BOX, a_in_regs=False, trans_b=True, trans_a=True, k=k)
    return {"t_op": t_op, "split_acc_ops": acc_ops, "dq_op": dq_op, "wgmma_ops": (t_op, *acc_ops, dq_op),
            "split_stage_offsets": [BOX * BOX * 4 * sum(r.dq_staged for r in t.split[:w]) for w in range(len(t.split))],
            "split_wait_late": STAGING_WAIT_LATE}


def split_line(t: HopperBwdTiling) -> str:
    """What each warpgroup owns, for plan_line and explain."""
    parts = [f"wg{i}: dK/dV columns {BOX * r.dkv_box0}-{BOX * (r.dkv_box0 + r.dkv_boxes) - 1}, dQ "
             + (f"columns {BOX * r.dq_box0}-{BOX * (r.dq_box0 + r.dq_boxes) - 1}" if r.dq_boxes else "none")
             for i, r in enumerate(t.split)]
    scores = ("S^T in wg0, dP^T in wg1" if t.split_by_product else f"S^T and dP^T {t.s_cols} query columns each")
    dq = (f"by {TILED_DQ_PATH}" if t.dq_red
          else "by red.global.add.v2.f32")
    order = ", each warpgroup's turn at a tile ordered by its semaphore (deterministic)" if t.ordered_dq else ""
    early = ", dV issued once P^T is stored" if t.dv_early else ""
    if t.dq_bulk:
        staged = ", ".join(f"wg{w}'s {r.dq_staged} of {r.dq_boxes}" for w, r in enumerate(t.split) if r.dq_staged)
        dq = f"by {TILED_DQ_PATH} (boxes staged and added by one bulk reduction a warpgroup: {staged}; 1 dO stage)"
    return (f"head_dim split between {len(t.split)} warpgroups ({'; '.join(parts)}), {scores}{early}, dQ added from "
            f"registers {dq}{order}")
