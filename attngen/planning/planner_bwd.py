"""Plan the backward pass: budgets for the dK/dV and dQ kernels, computed here and nowhere else.

The backward holds more tiles at once than the forward (K and V resident with streaming Q and dO,
four GEMMs per step), so it is budgeted separately. dK and dV accumulate in registers; when they
do not fit beside the scores, a block owns only a slice of the head dim (d_chunk) and blocks of
other slices recompute S and dP: the cost model charges that recomputation.
"""

from __future__ import annotations

import itertools

from ..errors import PlanError
from ..families.sm80_fwd import ITER_OVERHEAD_CLK, MAX_COPIES_PER_THREAD
from ..spec.model import Arch, AttentionSpec, PipelineKind
from .archs import ArchInfo, arch_info
from .ir import BwdPlan, DkdvTiling, DqTiling, HopperBwdTiling
from .planner import kernel_name, swizzle_chunks

DKDV_WARPS = (4, 8)
DKDV_BLOCK_MS = (16, 32, 64, 128)
DQ_WARPS = (4, 8)
DQ_BLOCK_NS = (16, 32, 64, 128)
BWD_STAGES = 2
#: Registers beside the accumulators and score tiles (pointers, loop state, fragments, ldmatrix
#: offsets); calibrated with -Xptxas=-v on sm_90a (benchmarks/NOTES.md).
BWD_REG_OVERHEAD = 64
REF_SEQLEN = 4096
#: Let non-deterministic specs accumulate dQ in the dK/dV kernel with fp32 atomics (FlashAttention-2's
#: order). Off: on the H100 it measured 0.57-0.67x FlashAttention-2 against 0.59-0.75x for the
#: atomic-free kernels (benchmarks/results/h100/bwd/bwd_atomic_dq.json, NOTES.md), though it passed
#: the whole GPU backward suite. On again once its dK/dV tiles are larger.
USE_ATOMIC_DQ = False
#: The sm90 wgmma backward (plan_hopper_bwd) where it serves the spec.
USE_HOPPER_BWD = True
REF_HIDDEN = 2048


def d_chunks(spec: AttentionSpec) -> list[int]:
    """Head-dim slices a dK/dV block may own: whole swizzle groups that divide the head dim."""
    group = 8 * swizzle_chunks(spec.head_dim)
    return [c for c in range(group, spec.head_dim + 1, group) if spec.head_dim % c == 0]


#: dQ columns each warp of the dK/dV kernel accumulates with atomics: at most 16 registers.
MAX_ATOMIC_DQ_COLS = 32


def dkdv_smem(spec: AttentionSpec, block_n: int, block_m: int, stages: int, dq_atomic: bool = False) -> int:
    """K and V resident; per stage a Q tile, a dO tile and block_m floats each of lse and D; with
    atomic dQ, the dS^T tile (rows padded by 16 bytes)."""
    e = spec.dtype.itemsize
    ds = block_n * (block_m + 8) * e if dq_atomic else 0
    return 2 * block_n * spec.head_dim * e + stages * (2 * block_m * spec.head_dim * e + 2 * block_m * 4) + ds


def atomic_dq_cols(num_warps: int, block_m: int, d_chunk: int) -> int | None:
    """dQ columns per warp when the dK/dV kernel computes dQ: warps tile (block_m / 16) x the rest;
    None when that tiling does not exist or needs too many registers."""
    warps_m = block_m // 16
    if warps_m > num_warps or num_warps % warps_m:
        return None
    cols = d_chunk // (num_warps // warps_m)
    return cols if cols % 16 == 0 and cols <= MAX_ATOMIC_DQ_COLS else None


def dq_smem(spec: AttentionSpec, block_m: int, block_n: int, stages: int) -> int:
    """Q and dO resident; per stage a K tile and a V tile."""
    e = spec.dtype.itemsize
    return 2 * block_m * spec.head_dim * e + stages * 2 * block_n * spec.head_dim * e


def dkdv_registers(block_m: int, d_chunk: int, info: ArchInfo, dq_cols: int = 0) -> int:
    """dK + dV slices (16 x d_chunk fp32 each over 32 lanes), S^T and dP^T (16 x block_m each), and
    with atomic dQ its 16 x dq_cols accumulator plus addresses."""
    atomic = dq_cols // 2 + 8 if dq_cols else 0
    return d_chunk + block_m + BWD_REG_OVERHEAD + info.extra_registers + atomic


def dq_registers(block_n: int, d_chunk: int, info: ArchInfo) -> int:
    """A dQ slice (16 x d_chunk fp32 over 32 lanes), S and dP (16 x block_n each)."""
    return d_chunk // 2 + block_n + BWD_REG_OVERHEAD + info.extra_registers


def _check(info: ArchInfo, spec: AttentionSpec, smem: int, regs: int, rows: int, threads: int) -> str | None:
    if smem > info.smem_per_block:
        return f"needs {smem} B of shared memory; {info.arch.value} allows {info.smem_per_block} B per block"
    if regs > info.max_regs_per_thread:
        return f"needs ~{regs} registers per thread; at most {info.max_regs_per_thread}: it would spill"
    copies = -(-(rows * spec.head_dim // 8) // threads)
    if copies > MAX_COPIES_PER_THREAD:
        return f"{copies} cp.async copies per thread per tile; above {MAX_COPIES_PER_THREAD} ptxas spills"
    return None


def _relative_time(info: ArchInfo, flops: float, reread_bytes: float, steps: float) -> float:
    """Microseconds: tensor work, re-reads served mostly by L2 (~3x DRAM bandwidth), per-step overhead."""
    clk = info.clock_ghz * 1e3
    return (flops / (info.mma_flops_per_clk * info.num_sms_hint * clk) + reread_bytes / (3 * info.hbm_gbps * 1e3)
            + steps * ITER_OVERHEAD_CLK / (info.num_sms_hint * clk))


def _dkdv_cost(spec: AttentionSpec, info: ArchInfo, t: DkdvTiling, dq_atomic: bool) -> float:
    """At the reference workload: S^T and dP^T recomputed per head-dim slice, Q/dO re-read per KV block
    (and with atomic dQ, dS K for each slice)."""
    n, d, heads = REF_SEQLEN, spec.head_dim, REF_HIDDEN // spec.head_dim
    chunks = d // t.d_chunk
    return _relative_time(info, heads * n * n * (chunks * 4 * d + (6 if dq_atomic else 4) * d),
                          heads * (n // t.block_n) * chunks * n * d * 4,
                          heads * (n // t.block_n) * chunks * (n // t.block_m))


def _dq_cost(spec: AttentionSpec, info: ArchInfo, t: DqTiling) -> float:
    """At the reference workload: S and dP recomputed per head-dim slice, K/V re-read per query block."""
    n, d, heads = REF_SEQLEN, spec.head_dim, REF_HIDDEN // spec.head_dim
    chunks = d // t.d_chunk
    return _relative_time(info, heads * n * n * (chunks * 4 * d + 2 * d),
                          heads * (n // t.block_m) * chunks * n * d * 4,
                          heads * (n // t.block_m) * chunks * (n // t.block_n))


def _dkdv_candidates(spec: AttentionSpec, info: ArchInfo, rejected: list[str],
                     dq_atomic: bool) -> list[DkdvTiling]:
    out = []
    for warps, bm, dc in itertools.product(DKDV_WARPS, DKDV_BLOCK_MS, d_chunks(spec)):
        bn = 16 * warps
        dq_cols = atomic_dq_cols(warps, bm, dc) if dq_atomic else 0
        if dq_cols is None:
            rejected.append(f"dkdv {bn}x{bm} d_chunk {dc}: no warp tiling of its dQ slice within "
                            f"{MAX_ATOMIC_DQ_COLS} columns per warp")
            continue
        smem = dkdv_smem(spec, bn, bm, BWD_STAGES, dq_atomic)
        regs = dkdv_registers(bm, dc, info, dq_cols)
        why = _check(info, spec, smem, regs, max(bn, bm), warps * 32)
        if why:
            rejected.append(f"dkdv {bn}x{bm} d_chunk {dc}: {why}")
            continue
        out.append(DkdvTiling(num_warps=warps, block_n=bn, block_m=bm, d_chunk=dc, stages=BWD_STAGES,
                              smem_bytes=smem, regs_estimate=regs))
    return out


def _dq_candidates(spec: AttentionSpec, info: ArchInfo, rejected: list[str]) -> list[DqTiling]:
    out = []
    for warps, bn, dc in itertools.product(DQ_WARPS, DQ_BLOCK_NS, d_chunks(spec)):
        bm = 16 * warps
        smem, regs = dq_smem(spec, bm, bn, BWD_STAGES), dq_registers(bn, dc, info)
        why = _check(info, spec, smem, regs, max(bn, bm), warps * 32)
        if why:
            rejected.append(f"dq {bm}x{bn} d_chunk {dc}: {why}")
            continue
        out.append(DqTiling(num_warps=warps, block_m=bm, block_n=bn, d_chunk=dc, stages=BWD_STAGES,
                            smem_bytes=smem, regs_estimate=regs))
    return out


#: The sm90 wgmma dK/dV kernel (dQ by TMA bulk reductions) serves non-deterministic specs of these
#: head dims. Its dK and dV accumulators (head_dim fp32 registers per consumer thread together) leave
#: room for the scores only up to 128. Measured on the H100 at 2k-16k: hd64 1.14-1.31x and hd128
#: 1.17-1.37x FlashAttention-2, against 0.63-0.75x for the mma.sync kernels
#: (benchmarks/results/h100/bwd_hopper/, NOTES.md).
HOPPER_BWD_HEAD_DIMS = (64, 128)
#: Query rows per step: 64 at hd128 (registers: dK + dV take 128), 128 at hd64.
HOPPER_BWD_BLOCK_M = {64: 128, 128: 64}
HOPPER_BWD_BLOCK_N = 128
HOPPER_BWD_STAGES = 2
#: Consumer registers beside dK, dV, S^T and dP^T (calibrated with -Xptxas=-v like the forward's).
HOPPER_BWD_REG_OVERHEAD = 40


def plan_hopper_bwd(spec: AttentionSpec, info: ArchInfo) -> tuple[HopperBwdTiling | None, str]:
    """The Hopper dK/dV tiling, or None and why not."""
    from ..families.sm90_fwd import ALIGN_SLACK, roles

    if info.wgmma_flops_per_clk == 0:
        return None, f"{info.arch.value} has no wgmma"
    if spec.deterministic:
        return None, "deterministic: the wgmma kernel adds dQ with TMA bulk reductions (rounding order varies)"
    if spec.head_dim not in HOPPER_BWD_HEAD_DIMS:
        return None, f"head_dim {spec.head_dim}: dK and dV do not fit the consumer registers beside the scores"
    d, bn, st = spec.head_dim, HOPPER_BWD_BLOCK_N, HOPPER_BWD_STAGES
    bm = HOPPER_BWD_BLOCK_M[d]
    e = spec.dtype.itemsize
    # dQ (block_m queries x head_dim over the block's KV rows) split between the two warpgroups: at
    # hd128 by columns (64 each), at hd64 with 128 queries by query rows (64 each); each product
    # covers all KV rows, so every element of the accumulator gets one add per block.
    dq_cols = 64
    col_step, query_step = (64, 0) if bm == 64 else (0, 64)
    # K, V; Q and dO stages; dS^T; one fp32 dQ staging box per consumer warpgroup; mbarriers.
    # ... and per consumer warpgroup a double buffer of the query rows' LSE and D.
    # 128 queries: P^T and dS^T feed dV and dK from shared memory (their packed register copies
    # would spill beside S^T and dP^T: 60 B at hd64), so P^T gets a tile beside dS^T.
    from_smem = bm == 128
    smem = (2 * bn * d * e + 2 * st * bm * d * e + (2 if from_smem else 1) * bn * bm * e + (bn // 64) * 64 * dq_cols * 4
            + (bn // 64) * 2 * 2 * bm * 4 + 8 * (1 + 2 * st) + ALIGN_SLACK)
    split = roles(info, bn // 64, pingpong=False, overlap=False)
    regs = d + bm + HOPPER_BWD_REG_OVERHEAD
    if smem > info.smem_per_block or regs > split.consumer_regs:
        return None, f"needs {smem} B and ~{regs} registers; {info.arch.value} gives {info.smem_per_block} B, " \
                     f"{split.consumer_regs} registers"
    return HopperBwdTiling(block_m=bm, block_n=bn, stages=st, producer_regs=split.producer_regs,
                           consumer_regs=split.consumer_regs, dq_cols=dq_cols, dq_col_step=col_step,
                           dq_query_step=query_step, dkv_from_smem=from_smem, smem_bytes=smem,
                           regs_estimate=regs), "fits"


def plan_bwd(spec: AttentionSpec, arch: Arch | str) -> BwdPlan:
    """The backward kernels' tiles for `spec` on `arch`; PlanError when none fits."""
    arch = Arch(arch)
    info = arch_info(arch)
    rejected: list[str] = []
    dq_atomic = not spec.deterministic and USE_ATOMIC_DQ
    dkdv = sorted(_dkdv_candidates(spec, info, rejected, dq_atomic),
                  key=lambda t: _dkdv_cost(spec, info, t, dq_atomic))
    if not dkdv and dq_atomic:  # the atomic-free kernels need less: fall back to them
        dq_atomic = False
        dkdv = sorted(_dkdv_candidates(spec, info, rejected, False), key=lambda t: _dkdv_cost(spec, info, t, False))
    dq = sorted(_dq_candidates(spec, info, rejected), key=lambda t: _dq_cost(spec, info, t))
    if not dkdv or not dq:
        raise PlanError(f"no backward tiling of spec '{spec.name}' fits {arch.value}:\n  "
                        + "\n  ".join(rejected[:8]) + "\nRemedy: target an arch with more shared memory.")
    best, best_dq = dkdv[0], dq[0]
    reason = (f"dkdv: fewest head-dim slices ({spec.head_dim // best.d_chunk}) and lowest predicted cost of "
              f"{len(dkdv)} fitting; dq: {'accumulated with atomics in dkdv' if dq_atomic else 'atomic-free kernel'}"
              f", lowest predicted cost of {len(dq)} fitting")
    name = kernel_name(spec, arch, PipelineKind.multistage).replace("attn_fwd_", "attn_bwd_", 1)
    hopper, why = plan_hopper_bwd(spec, info) if USE_HOPPER_BWD else (None, "disabled")
    reason += ("; sm90: the wgmma dK/dV kernel (dQ by TMA bulk reductions) replaces dkdv and dq" if hopper
               else f"; no wgmma kernel ({why})")
    return BwdPlan(spec=spec, arch=arch, kernel_name=name, dkdv=best, dq=best_dq, dq_atomic=dq_atomic,
                   hopper=hopper, reason=reason, rejected=tuple(rejected))
