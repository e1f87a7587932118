"""The Hopper backward at hd192 with the KV rows halved between the consumer warpgroups (HopperBwdTiling.kv_halves).

A block owns 96 KV rows of one KV head and walks query tiles of 64 rows; consumer warpgroup g owns KV rows [48 g, 48
g + 48) at the full head dim. Per step it computes S = Q K^T and dP = dO V^T for its rows (64 queries x 48 keys:
wgmma's M is the queries), writes P and dS transposed into shared memory (P^T and dS^T, 96 x 64, the halves side by
side), and accumulates dV^T += dO^T P and dK^T += Q^T dS (M = head_dim in three 64-row products, N = its 48 keys, A
read M-major from the stage's tiles): 48 rows could not be wgmma's M, head_dim can. Once both halves are in place it
computes its half of dQ = dS K over all 96 keys (A = dS^T read M-major, B = K MN-major) in two products (64 + 32
columns, DQ_PIECES) and adds it into the tile-ordered accumulator: staged in shared memory and added by one bulk
reduction of its own (both warpgroups beside one dO stage: DO_ONE_STAGE; one of them beside two: STAGED_WG), or from
registers by red.global.add.v4.f32 where dQ is ordered (deterministic). dV^T's product goes ahead of the dS values
where it can (DV_EARLY). Why the halves: the head-dim split (sm90_bwd_split.py) reads a query tile's Q and dO and
adds its dQ once per 64 KV rows and is bound by that L2 traffic at hd192 (results/h100/ncu_bwd_hd192: L2 86%,
compute 40%); 96 rows carry 1.5x the FLOPs per byte. The accumulators (dK^T and dV^T: 2 x 192 x 48 fp32 over 128
threads, 144 registers) fit beside the scores (48) or dQ's half (48) in the 240 a consumer gets. FlashAttention-4's
Hopper backward takes the same shape at hd192 (64 x 96, its dK and dV products swapped).
"""

from __future__ import annotations

from ..codegen.wgmma import M, WgmmaOp
from ..errors import PlanError
from ..features.dtype import dtype_trait
from ..planning.archs import ArchInfo
from ..planning.ir import SmemRegions
from ..planning.ir_bwd import HopperBwdTiling
from ..planning.shared import ALIGN_SLACK, schedule_words, setmaxnreg_split
from ..spec.model import AttentionSpec, SeqlensKind
from .sm90_bwd_split import REG_OVERHEAD
from .sm90_dq_tiles import DQ_BOX

#: Query rows per step: one wgmma M of S and dP, and one 128-byte swizzle row of P^T and dS^T.
BLOCK_M = 64
#: KV rows per consumer warpgroup: S's N. Two of them make the block's 96.
HALF_ROWS = 48
WGS = 2
#: The most Q/dO stages tried, deepest first (three need 245 KB at hd192).
MAX_STAGES = 3
#: Each warpgroup's dQ columns as (first column, width) products of N <= 64 inside one 64-column box of K, or of whole
#: boxes from a box's first column (a wider product runs on into the next box at the leading byte offset): warpgroup
#: 0 columns 0-95, warpgroup 1 columns 96-191, the middle box's halves each a 32-wide product.
DQ_PIECES: dict[int, tuple[tuple[tuple[int, int], ...], ...]] = {
    192: (((0, 64), (64, 32)), ((96, 32), (128, 64))),
}
#: The head dims that take this tiling: those with dQ pieces.
HALVES_HEAD_DIMS = tuple(sorted(DQ_PIECES))
#: The warpgroup whose dQ columns are staged in shared memory (in the accumulator's fragment order) and added by one
#: bulk reduction (HopperBwdTiling.dq_bulk), where the ordered dQ does not keep turns: its columns (96-191, box 1's
#: second half and box 2) are one contiguous run of a tile in the accumulator. Warpgroup 0 adds from registers: both
#: staged would take 48 KB, and two stages already hold 198.7 of 227 KB (the reductions held 14-19% of the stall
#: samples, results/h100/halves/ncu).
STAGED_WG = 1
#: A step's dV^T and dK^T products left running into the next step (HopperBwdTiling.carry_products), its S's wait
#: waiting for them too, for masked specs (CARRY_PRODUCTS_MASKED) and unmasked ones (CARRY_PRODUCTS_UNMASKED). Why:
#: each step ended by draining the tensor pipe (both warpgroups near together, as they meet at the dS^T barriers)
#: before the next step's S was issued. Measured on the H100 (results/h100/carry, two runs, timed alternately in one
#: process against waiting steps): causal +1.0-3.3% at 2k-16k; unmasked 0.98-1.01 (16k 1.5-1.8% slower in both
#: runs), so masked specs only. Module constants for the device A/B.
CARRY_PRODUCTS_MASKED = True
CARRY_PRODUCTS_UNMASKED = False
#: A warpgroup stores its P^T rows and issues dV^T's product before it waits for dP (HopperBwdTiling.dv_early), where
#: P comes before dP (a score mod's derivative that varies per element takes both in one pass) and dQ is not ordered.
#: Why: the two warpgroups meet at the dS^T barriers every step, so after dP's product the tensor pipe idled through
#: both warpgroups' dS values, the stores and two barriers; FlashAttention-4 issues dV before dS at hd192. Measured on
#: the H200 (results/h200/hd192_dv_early, alternated by CUDA events against the late order): unmasked +1.2-6.0% at
#: 2k-16k; causal level with the carried products and +1.6-3.1% over them without (CARRY_PRODUCTS_DV_EARLY); the
#: deterministic plans level unmasked and 2-3% slower causal, so not where dQ is ordered. Module constant for the A/B.
DV_EARLY = True
#: With dv_early and a staged dQ: dO in one stage (Q keeps two), its 24 KB holding warpgroup 0's dQ staging too, so that
#: neither warpgroup adds dQ from registers (HopperBwdTiling.do_stages, dq_bulk_wgs). Why: warpgroup 0's 12 REDG a step
#: were what remained of the reductions that held 14-19% of the stall samples (results/h100/halves/ncu), and a second
#: staging does not fit beside two dO stages (223 of 227 KB); FlashAttention-4's hd192 keeps one dO stage. dV^T, dO's
#: last reader, is waited for after the dS^T barrier, and the next dO load has the rest of the step. Measured on the
#: H200 (results/h200/hd192_one_do, alternated by CUDA events against two shared stages): unmasked +1.4-3.0%, causal
#: +6.0-8.0% at 2k-16k. Module constant for the A/B.
DO_ONE_STAGE = True
#: With dv_early, a step's dV^T and dK^T carried into the next step (the early dV^T already keeps the tensor pipe busy
#: across the step): measured slower both ways on the H200, unmasked x0.97, causal x0.97-0.98 (orders_2).
CARRY_PRODUCTS_DV_EARLY = False


def halves_refusal(spec: AttentionSpec) -> str | None:
    """Why the halves do not serve `spec` (the head-dim split then does), or None. Deterministic packed specs: the
    ordered dQ's turns beside a packed batch's entry state spilled 12-24 B of stores (24-64 B of loads) under NVRTC
    13.0 and 13.5, where every other form compiles without spills."""
    if spec.head_dim not in HALVES_HEAD_DIMS:
        return f"head_dim {spec.head_dim}: the KV-row halves serve head dims {list(HALVES_HEAD_DIMS)}"
    if spec.deterministic and spec.seqlens is SeqlensKind.varlen:
        return "deterministic and packed: the KV-row halves spill beside the ordered dQ's turns"
    return None


def staged_dq(spec: AttentionSpec) -> bool:
    """Whether STAGED_WG stages its dQ: not where the ordered dQ keeps turns around reductions from registers
    (deterministic), nor under a score mod whose derivative varies per element (its one pass of P and dS spilled
    28 B of stores beside the staging under NVRTC 13.5)."""
    from ..features.variant import variant_of
    from ..features.variant_cxx import score_grad_is_const

    return not spec.deterministic and score_grad_is_const(variant_of(spec))


def staged_dq_bytes(head_dim: int) -> int:
    """STAGED_WG's dQ columns of a 64-query step in fp32: its staging buffer."""
    return BLOCK_M * sum(n for _, n in DQ_PIECES[head_dim][STAGED_WG]) * 4


def halves_layout(spec: AttentionSpec, stages: int, staged_wgs: int, do_stages: int = 0) -> SmemRegions:
    """K and V (96 rows), the Q and dO stages (do_stages of dO when not 0, on mbarriers of their own), dS^T and P^T
    (96 x 64), `staged_wgs` warpgroups' dQ staging, the stages' row values (LSE in log2 units and D), the mbarriers,
    the live-tile bitmap of a mask with holes, the alignment slack."""
    d, n, m = spec.head_dim, WGS * HALF_ROWS, BLOCK_M
    e = dtype_trait(spec.dtype).size
    return SmemRegions.stack([
        ("K", n * d * e), ("V", n * d * e), ("Q", stages * m * d * e), ("DO", (do_stages or stages) * m * d * e),
        ("DS", n * m * e), ("P", n * m * e), ("DQ", staged_wgs * staged_dq_bytes(d)), ("Rows", stages * 2 * m * 4),
        ("Bar", 8 * (1 + 2 * stages + 2 * do_stages)), ("Schedule", 4 * schedule_words(spec)), ("Slack", ALIGN_SLACK)])


def do_one_stage(spec: AttentionSpec) -> bool:
    """Whether dO takes one stage and both warpgroups stage their dQ: DO_ONE_STAGE where dV^T goes early (dO's last
    reader then done by the dS^T barrier) and dQ is staged."""
    return DO_ONE_STAGE and dv_early(spec) and staged_dq(spec)


def halves_registers(head_dim: int) -> int:
    """A consumer thread's registers at its peak: dK^T and dV^T (head_dim x 48 fp32 each over 128 threads), then
    the larger of S and dP (64 x 48 each) with the rows' LSE and D, and its widest dQ share (DQ_PIECES), and
    REG_OVERHEAD."""
    acc = 2 * head_dim * HALF_ROWS // 128
    scores = 2 * M * HALF_ROWS // 128 + 4
    dq = M * max(sum(n for _, n in pieces) for pieces in DQ_PIECES[head_dim]) // 128
    return acc + max(scores, dq) + REG_OVERHEAD


def halves_tiling(spec: AttentionSpec, info: ArchInfo) -> HopperBwdTiling:
    """The tiling; PlanError with the arithmetic when the budget cannot hold it."""
    d = spec.head_dim
    if d not in DQ_PIECES:
        raise PlanError(f"head_dim {d}: the KV-row halves have dQ pieces for head dims {sorted(DQ_PIECES)}")
    producer_regs, consumer_regs = setmaxnreg_split(info, WGS)
    regs = halves_registers(d)
    if regs > consumer_regs:
        raise PlanError(f"head_dim {d}: the KV-row halves need ~{regs} registers per consumer thread; "
                        f"{info.arch.value} gives {consumer_regs}")
    needs = []
    staged = staged_dq(spec)
    one = do_one_stage(spec)   # both warpgroups staged beside one dO stage, else STAGED_WG alone where staged
    bulk_wgs = WGS if one else 1
    for stages in range(MAX_STAGES, 1, -1):
        layout = halves_layout(spec, stages, bulk_wgs if staged else 0, 1 if one else 0)
        if layout.total_bytes <= info.smem_per_block:
            return HopperBwdTiling(block_m=BLOCK_M, block_n=WGS * HALF_ROWS, stages=stages,
                                   producer_regs=producer_regs, consumer_regs=consumer_regs, dq_cols=DQ_BOX,
                                   dq_col_step=0, dq_query_step=0, dkv_from_smem=True,
                                   smem_bytes=layout.total_bytes, smem=layout, regs_estimate=regs,
                                   schedule_words=schedule_words(spec), kv_halves=True, dq_red=True,
                                   dq_bulk=staged, ordered_dq=spec.deterministic,
                                   carry_products=carries_products(spec), dv_early=dv_early(spec),
                                   do_stages=1 if one else 0, dq_bulk_wgs=bulk_wgs)
        needs.append(f"{stages} stages {layout.total_bytes} B")
    raise PlanError(f"head_dim {d}: {', '.join(needs)}; {info.arch.value} gives {info.smem_per_block} B per block")


def dv_early(spec: AttentionSpec) -> bool:
    """Whether dV^T's product is issued before dP's wait: DV_EARLY where P comes out before dP (no score mod whose
    derivative varies per element) and dQ is not ordered (deterministic)."""
    from ..features.variant import variant_of
    from ..features.variant_cxx import score_grad_is_const

    return DV_EARLY and not spec.deterministic and score_grad_is_const(variant_of(spec))


def carries_products(spec: AttentionSpec) -> bool:
    """Whether a step's dV^T and dK^T products run on into the next step: CARRY_PRODUCTS_DV_EARLY where dv_early(),
    else CARRY_PRODUCTS_UNMASKED where no mask hides a key (the kernels' Var::kDense) and CARRY_PRODUCTS_MASKED where
    one does."""
    from ..features.variant import variant_of
    from ..features.variant_cxx import hides_keys

    if dv_early(spec):
        return CARRY_PRODUCTS_DV_EARLY
    return CARRY_PRODUCTS_MASKED if hides_keys(variant_of(spec)) else CARRY_PRODUCTS_UNMASKED


def halves_ops(head_dim: int, k: int) -> dict[str, object]:
    """The instructions: S and dP (64 queries x 48 keys, both operands K-major); dV^T and dK^T (64 head-dim rows x 48
    keys per product, A = dO or Q read M-major, B = P^T or dS^T K-major); dQ's pieces (A = dS^T read M-major, B = K
    MN-major), one per width."""
    s_op = WgmmaOp(HALF_ROWS, a_in_regs=False, trans_b=False, k=k)
    acc_op = WgmmaOp(HALF_ROWS, a_in_regs=False, trans_b=False, trans_a=True, k=k)
    widths = sorted({n for wg in DQ_PIECES[head_dim] for _, n in wg})
    dq_ops = tuple(WgmmaOp(n, a_in_regs=False, trans_b=True, trans_a=True, k=k) for n in widths)
    return {"s_op": s_op, "acc_op": acc_op, "dq_piece_ops": dq_ops, "dq_pieces": DQ_PIECES[head_dim],
            "staged_wg": STAGED_WG, "wgmma_ops": (s_op, acc_op, *dq_ops)}


def halves_line(t: HopperBwdTiling, head_dim: int) -> str:
    """What each warpgroup owns, for plan_line and explain."""
    cols = [f"wg{i}: KV rows {HALF_ROWS * i}-{HALF_ROWS * (i + 1) - 1}, dQ columns {pieces[0][0]}-"
            f"{pieces[-1][0] + pieces[-1][1] - 1}" for i, pieces in enumerate(DQ_PIECES[head_dim])]
    order = ", each warpgroup's turn at a tile ordered by its semaphore (deterministic)" if t.ordered_dq else ""
    if t.dq_bulk and t.dq_bulk_wgs == WGS:
        how = "each warpgroup's staged in fragment order and added by one bulk reduction of its own"
    elif t.dq_bulk:
        how = (f"wg{STAGED_WG}'s staged in fragment order and added by one bulk reduction, the other's from "
               "registers by red.global.add.v4.f32")
    else:
        how = "added from registers by red.global.add.v4.f32"
    if t.do_stages:
        how += f" ({t.do_stages} dO stage beside {t.stages} of Q)"
    early = ", dV^T issued before dP's wait" if t.dv_early else ""
    carry = ", a step's dV^T and dK^T running on into the next step's S" if t.carry_products else ""
    return (f"KV rows halved between {WGS} warpgroups ({'; '.join(cols)}), dK^T and dV^T at the full head dim, "
            f"dQ {how} into a tile-ordered accumulator{order}{early}{carry}")
