"""The mma.sync backward (every arch): a preprocess, a dK/dV kernel that adds dQ with fp32 atomics, and dq_convert;
for deterministic specs a dQ kernel of its own instead of the atomics.

The backward holds more tiles at once than the forward (K and V resident with streaming Q and dO, four
GEMMs per step), so it has its own budget. dK and dV accumulate in registers; when they do not fit
beside the scores, a block owns only a slice of the head dim (d_chunk) and blocks of other slices
recompute S and dP: the cost model charges that recomputation. Its template is attn_bwd.cu.j2, its parameter block
abi.BWD_PARAMS.

dQ (FlashAttention-2's order, 5 GEMMs per tile pair): the dK/dV kernel stages dS^T in shared memory and adds
dS K with fp32 atomics into a group-ordered accumulator (each warp's reduction instruction covers 128 contiguous
bytes; row-major two-float adds touched twice the L2 sectors and bound the kernel), which dq_convert scales into
dQ. D and the LSE come from row buffers padded per entry to the query step, copied by cp.async. A deterministic
spec takes the atomic-free kernels instead (7 GEMMs per tile pair, every gradient summed in a fixed order, bitwise
reproducible). Measured on the H100 at 8k (results/h100/sm80_atomic): the atomic plans 1.14-1.27x the
atomic-free ones at hd64/128.

The atomic dK/dV kernel has two warp partitions (DkdvTiling.warp_rows). Rows: each warp owns 16 KV rows and computes
its S^T and dP^T over the whole step, reading all of Q and dO twice per step. Grid (FlashAttention-2's): S^T and dP^T
in a 2-D warp grid, P^T and dS^T through shared memory, 32-row dK/dV tiles over a share of the columns: a quarter
fewer shared-memory reads per flop at hd128. The cost model ranks both by their shared-memory reads per step
(dkdv_smem_reads), which bound these kernels on the H100: the grid measured 0.92-1.00x FlashAttention-2 at
hd64/128/256 where the rows partition measured 0.72-0.87x (results/h100/sm80_grid).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..codegen.abi import BWD_PARAMS, layout
from ..errors import PlanError
from ..features.dtype import dtype_trait, with_backward
from ..features.kv_layout import KV_LAYOUTS
from ..features.mask import MASKS, mask_trait
from ..features.variant import params_with_variant, variant_of
from ..planning import shared
from ..planning.archs import ArchInfo
from ..planning.ir import SmemRegions
from ..planning.ir_bwd import BwdCost, BwdPlan, DkdvTiling, DqTiling
from ..planning.planner_bwd import BackwardFamily, LoadFunction, backward_cost, preprocess_us, wave_efficiency
from ..planning.shared import kernel_name, swizzle_chunks
from ..spec.model import HEAD_DIMS, Arch, AttentionSpec, PipelineKind
from .base import Coverage
from .sm80_bwd_ready import DQ_CONVERT_THREADS, ReadySm80Backward, convert_rows, prepare

DKDV_WARPS = (4, 8)
DKDV_BLOCK_MS = (16, 32, 64, 128)
DQ_WARPS = (4, 8)
DQ_BLOCK_NS = (16, 32, 64, 128)
BWD_STAGES = 2
#: KV rows of a warp's dK/dV tile in the grid partition (DkdvTiling.warp_rows).
GRID_WARP_ROWS = 32
GRID_BLOCK_NS = (64, 128)
#: Warps of a grid block: 8 only (4-warp grids were not measured; one 4-warp block per SM hides little latency).
GRID_WARPS = (8,)
#: Registers beside the accumulators and score tiles (pointers, loop state, fragments, ldmatrix
#: offsets); calibrated with -Xptxas=-v on sm_90a (benchmarks/NOTES.md).
BWD_REG_OVERHEAD = 64
#: The grid partition's (its dK/dV and dQ warp tiles take fewer address registers): ptxas fit 128 x 128 at hd64,
#: 128 x 64 at hd128 and 64 x 64 at hd256 (8 warps, whole head dim) in 253-254 registers without spills on sm_90a
#: where the rows partition's 64 + 8 estimated 264.
GRID_REG_OVERHEAD = 48
#: Registers an atomic dK/dV kernel keeps for each runtime tensor of the variant (its address and the values a step
#: reads): document_bf16_hd128's packed kernel at 128 x 32 (estimated at 248 without this term) took 255 and
#: spilled 8 B on sm80.
ATOMIC_TENSOR_ARG_REGS = 8
#: dQ columns each warp of the dK/dV kernel accumulates with atomics: at most 16 registers.
MAX_ATOMIC_DQ_COLS = 32
#: Why dQ is added with atomics unless the spec is deterministic, as explain says it.
ATOMIC_DQ_WHY = ("dQ by fp32 atomics (5 GEMMs per tile pair against the atomic-free kernels' 7): measured 1.14-1.26x "
                 "the atomic-free kernels on the H100 at hd64/128 (deterministic specs take those)")


def d_chunks(spec: AttentionSpec) -> list[int]:
    """Head-dim slices a dK/dV block may own: whole swizzle groups that divide the head dim."""
    group = 8 * swizzle_chunks(spec.head_dim, dtype_trait(spec.dtype).size)
    return [c for c in range(group, spec.head_dim + 1, group) if spec.head_dim % c == 0]


def dkdv_layout(spec: AttentionSpec, block_n: int, block_m: int, stages: int,
                dq_atomic: bool = False, grid: bool = False) -> SmemRegions:
    """K and V resident; per stage a Q tile, a dO tile and block_m floats each of lse and D; with
    atomic dQ, the dS^T tile (rows padded by 16 bytes); the grid partition adds a P^T tile like it."""
    e = dtype_trait(spec.dtype).size
    kv, q = block_n * spec.head_dim * e, block_m * spec.head_dim * e
    ds = block_n * (block_m + 8) * e if dq_atomic else 0
    regions = [("K", kv), ("V", kv), ("Stages", stages * (2 * q + 2 * block_m * 4)), ("DS", ds)]
    return SmemRegions.stack(regions + ([("PT", ds)] if grid else []))


def dkdv_smem(spec: AttentionSpec, block_n: int, block_m: int, stages: int, dq_atomic: bool = False,
              grid: bool = False) -> int:
    return dkdv_layout(spec, block_n, block_m, stages, dq_atomic, grid).total_bytes


@dataclass(frozen=True)
class GridShape:
    """The grid partition of a dK/dV block (warp_rows 32): warps_n x warps_c warps; a warp's S^T and dP^T are
    32 x s_cols, its dK and dV 32 x acc_cols, its dQ part 32 x dq_cols."""

    warps_n: int
    warps_c: int
    s_cols: int
    acc_cols: int
    dq_cols: int


def grid_shape(num_warps: int, block_n: int, block_m: int, d_chunk: int) -> GridShape | None:
    """The grid partition of (num_warps, block_n, block_m, d_chunk), None where the warps do not tile it in whole
    k-steps (16 columns) with a power-of-two run of 16-byte chunks per warp (the template's ColumnRun)."""
    warps_n = block_n // GRID_WARP_ROWS
    if warps_n == 0 or block_n % GRID_WARP_ROWS or num_warps % warps_n:
        return None
    warps_c = num_warps // warps_n
    s_cols, acc_cols = block_m // warps_c, d_chunk // warps_c
    dq_m = block_m // GRID_WARP_ROWS
    if dq_m == 0 or num_warps % dq_m or block_m % warps_c or d_chunk % warps_c:
        return None
    dq_cols = d_chunk // (num_warps // dq_m)
    runs = acc_cols // 8
    if s_cols % 16 or acc_cols % 16 or dq_cols % 16 or runs & (runs - 1):
        return None
    return GridShape(warps_n, warps_c, s_cols, acc_cols, dq_cols)


def grid_registers(g: GridShape, info: ArchInfo, tensor_args: int = 0) -> int:
    """S^T and dP^T (32 x s_cols fp32 each over 32 lanes) or, once they are in shared memory, dQ's part; dK and dV
    (32 x acc_cols each); GRID_REG_OVERHEAD and the variant's runtime tensors."""
    return (max(2 * g.s_cols, g.dq_cols) + 2 * g.acc_cols + GRID_REG_OVERHEAD + info.extra_registers
            + ATOMIC_TENSOR_ARG_REGS * tensor_args)


def dkdv_smem_reads(spec: AttentionSpec, t: DkdvTiling, dq_atomic: bool) -> int:
    """Shared-memory bytes a dK/dV block reads (and the grid writes) per query step: ldmatrix operands of S^T, dP^T,
    dV, dK and (atomic) dQ's part, summed over the warps. The rows partition's warps each read the step's whole Q
    and dO tiles twice; the grid's a 32-row share of them and of P^T and dS^T."""
    e, d, w = dtype_trait(spec.dtype).size, spec.head_dim, t.num_warps
    bn, bm, dc = t.block_n, t.block_m, t.d_chunk
    g = grid_shape(w, bn, bm, dc) if t.warp_rows == GRID_WARP_ROWS else None
    if g is not None:
        return e * (w * (2 * (32 + g.s_cols) * d + 2 * (32 + g.acc_cols) * bm + (32 + g.dq_cols) * bn)
                    + 2 * bn * bm)
    dq_cols = atomic_dq_cols(w, bm, dc, dc) if dq_atomic else None
    return e * w * (2 * (16 + bm) * d + 2 * bm * dc + ((16 + dq_cols) * bn if dq_cols else 0))


def atomic_dq_cols(num_warps: int, block_m: int, d_chunk: int, max_cols: int = MAX_ATOMIC_DQ_COLS) -> int | None:
    """dQ columns per warp when the dK/dV kernel computes dQ: warps tile (block_m / 16) x the rest;
    None when that tiling does not exist or needs more than `max_cols` columns (registers)."""
    warps_m = block_m // 16
    if warps_m > num_warps or num_warps % warps_m:
        return None
    cols = d_chunk // (num_warps // warps_m)
    return cols if cols % 16 == 0 and cols <= max_cols else None


def dq_layout(spec: AttentionSpec, block_m: int, block_n: int, stages: int) -> SmemRegions:
    """Q and dO resident; per stage a K tile and a V tile."""
    e = dtype_trait(spec.dtype).size
    q, kv = block_m * spec.head_dim * e, block_n * spec.head_dim * e
    return SmemRegions.stack([("Q", q), ("DO", q), ("Stages", stages * 2 * kv)])


def dq_smem(spec: AttentionSpec, block_m: int, block_n: int, stages: int) -> int:
    return dq_layout(spec, block_m, block_n, stages).total_bytes


def dkdv_registers(block_m: int, d_chunk: int, info: ArchInfo, dq_cols: int = 0, tensor_args: int = 0) -> int:
    """dK + dV slices (16 x d_chunk fp32 each over 32 lanes), S^T and dP^T (16 x block_m each), and
    with atomic dQ its 16 x dq_cols accumulator plus addresses, and the variant's runtime tensors (tensor_args)."""
    atomic = dq_cols // 2 + 8 + ATOMIC_TENSOR_ARG_REGS * tensor_args if dq_cols else 0
    return d_chunk + block_m + BWD_REG_OVERHEAD + info.extra_registers + atomic


def tensor_args(spec: AttentionSpec) -> int:
    """The runtime tensors the spec's mask and score mod read (their pointers in the parameter block)."""
    return sum(1 for f in variant_of(spec).param_fields() if f.ctype.endswith("*"))


def dq_registers(block_n: int, d_chunk: int, info: ArchInfo) -> int:
    """A dQ slice (16 x d_chunk fp32 over 32 lanes), S and dP (16 x block_n each)."""
    return d_chunk // 2 + block_n + BWD_REG_OVERHEAD + info.extra_registers


def _check(info: ArchInfo, spec: AttentionSpec, smem: int, regs: int, rows: int, threads: int) -> str | None:
    if smem > info.smem_per_block:
        return f"needs {smem} B of shared memory; {info.arch.value} allows {info.smem_per_block} B per block"
    if regs > info.max_regs_per_thread:
        return f"needs ~{regs} registers per thread; at most {info.max_regs_per_thread}: it would spill"
    copies = -(-(rows * spec.head_dim * dtype_trait(spec.dtype).size // shared.CP_ASYNC_BYTES) // threads)
    if copies > shared.MAX_COPIES_PER_THREAD:
        return f"{copies} cp.async copies per thread per tile; above {shared.MAX_COPIES_PER_THREAD} ptxas spills"
    return None


def _relative_time(info: ArchInfo, flops: float, reread_bytes: float, steps: float, smem_bytes: float = 0) -> float:
    """Microseconds: tensor work or the shared-memory reads that feed it (whichever binds: on the H100 the dK/dV
    kernels' times followed their shared-memory reads per flop, results/h100/sm80_grid), re-reads served mostly
    by L2 (~3x DRAM bandwidth), per-step overhead."""
    clk = info.clock_ghz * 1e3
    mma = flops / (info.mma_flops_per_clk * info.num_sms_hint * clk)
    smem = smem_bytes / (info.smem_bytes_per_clk * info.num_sms_hint * clk)
    return (max(mma, smem) + reread_bytes / (3 * info.hbm_gbps * 1e3)
            + steps * shared.ITER_OVERHEAD_CLK / (info.num_sms_hint * clk))


def dkdv_cost(spec: AttentionSpec, info: ArchInfo, t: DkdvTiling, dq_atomic: bool) -> float:
    """At the reference workload: S^T and dP^T recomputed per head-dim slice, Q/dO re-read per KV block
    (and with atomic dQ, dS K for each slice)."""
    n, d, heads = shared.REF_SEQLEN, spec.head_dim, shared.REF_HIDDEN // spec.head_dim
    e = dtype_trait(spec.dtype).size
    chunks = d // t.d_chunk
    steps = heads * (n // t.block_n) * chunks * (n // t.block_m)
    # Atomic dQ: every KV block adds fp32 dQ for every query row, read and written in L2 (twice a read's cost).
    atomics = heads * (n // t.block_n) * n * d * 4 * 2 if dq_atomic else 0
    return _relative_time(info, heads * n * n * (chunks * 4 * d + (6 if dq_atomic else 4) * d),
                          heads * (n // t.block_n) * chunks * n * d * 2 * e + atomics, steps,
                          steps * dkdv_smem_reads(spec, t, dq_atomic))


def dq_cost(spec: AttentionSpec, info: ArchInfo, t: DqTiling) -> float:
    """At the reference workload: S and dP recomputed per head-dim slice, K/V re-read per query block."""
    n, d, heads = shared.REF_SEQLEN, spec.head_dim, shared.REF_HIDDEN // spec.head_dim
    e = dtype_trait(spec.dtype).size
    chunks = d // t.d_chunk
    return _relative_time(info, heads * n * n * (chunks * 4 * d + 2 * d),
                          heads * (n // t.block_m) * chunks * n * d * 2 * e,
                          heads * (n // t.block_m) * chunks * (n // t.block_n))


def plan_cost(spec: AttentionSpec, info: ArchInfo, dkdv: DkdvTiling, dq: DqTiling, dq_atomic: bool) -> BwdCost:
    """The plan's predicted time at the reference workload: the preprocess, then dkdv_cost and dq_cost (the
    ranking's terms) times the share of tiles the mask keeps, over the waves each kernel's grid fills. Not
    calibrated: on the H100 these kernels measured 190-200 TFLOP/s at hd128, seqlen 4096-16384 (the deterministic
    column of benchmarks/results/h100/bwd_hopper/bwd.json) where this predicts ~280; the bench's measured/model
    column keeps the gap in view."""
    density = mask_trait(spec).cost_density
    heads = shared.REF_HIDDEN // spec.head_dim
    n = shared.REF_SEQLEN

    def kernel(cost: float, rows: int, d_chunk: int, t: DkdvTiling | DqTiling) -> float:
        blocks = -(-n // rows) * (spec.head_dim // d_chunk) * heads
        resident = shared.resident_blocks(info, t.smem_bytes, t.regs_estimate, t.num_warps * 32)
        return cost * density / wave_efficiency(info, blocks, resident)

    kernels = [("preprocess", preprocess_us(spec, info)),
               ("dkdv", kernel(dkdv_cost(spec, info, dkdv, dq_atomic), dkdv.block_n, dkdv.d_chunk, dkdv))]
    if not dq_atomic:
        kernels.append(("dq", kernel(dq_cost(spec, info, dq), dq.block_m, dq.d_chunk, dq)))
    return backward_cost(spec, info, kernels, info.mma_flops_per_clk)


def dkdv_candidates(spec: AttentionSpec, info: ArchInfo, rejected: list[str], dq_atomic: bool,
                    max_dq_cols: int = MAX_ATOMIC_DQ_COLS, check_registers: bool = True) -> list[DkdvTiling]:
    """The dK/dV tilings the budget holds; `max_dq_cols` bounds an atomic dQ slice per warp, and without
    `check_registers` the register estimate rejects nothing (ptxas decides: benchmarks/sweep_bwd.py --atomic)."""
    out = []
    for warps, bm, dc in itertools.product(DKDV_WARPS, DKDV_BLOCK_MS, d_chunks(spec)):
        bn = 16 * warps
        dq_cols = atomic_dq_cols(warps, bm, dc, max_dq_cols) if dq_atomic else 0
        if dq_cols is None:
            rejected.append(f"dkdv {bn}x{bm} d_chunk {dc}: no warp tiling of its dQ slice within "
                            f"{max_dq_cols} columns per warp")
            continue
        layout = dkdv_layout(spec, bn, bm, BWD_STAGES, dq_atomic)
        smem, regs = layout.total_bytes, dkdv_registers(bm, dc, info, dq_cols, tensor_args(spec))
        why = _check(info, spec, smem, regs if check_registers else 0, max(bn, bm), warps * 32)
        if why:
            rejected.append(f"dkdv {bn}x{bm} d_chunk {dc}: {why}")
            continue
        out.append(DkdvTiling(num_warps=warps, block_n=bn, block_m=bm, d_chunk=dc, stages=BWD_STAGES,
                              smem_bytes=smem, smem=layout, regs_estimate=regs))
    return out


def grid_candidates(spec: AttentionSpec, info: ArchInfo, rejected: list[str],
                    check_registers: bool = True) -> list[DkdvTiling]:
    """The grid partition's dK/dV tilings (atomic dQ only) the budget holds."""
    out = []
    for warps, bn, bm, dc in itertools.product(GRID_WARPS, GRID_BLOCK_NS, DKDV_BLOCK_MS, d_chunks(spec)):
        g = grid_shape(warps, bn, bm, dc)
        if g is None:
            rejected.append(f"dkdv grid {bn}x{bm} d_chunk {dc}, {warps} warps: no grid of 32-row warp tiles in "
                            f"whole 16-column k-steps")
            continue
        layout = dkdv_layout(spec, bn, bm, BWD_STAGES, True, grid=True)
        smem, regs = layout.total_bytes, grid_registers(g, info, tensor_args(spec))
        why = _check(info, spec, smem, regs if check_registers else 0, max(bn, bm), warps * 32)
        if why:
            rejected.append(f"dkdv grid {bn}x{bm} d_chunk {dc}, {warps} warps: {why}")
            continue
        out.append(DkdvTiling(num_warps=warps, block_n=bn, block_m=bm, d_chunk=dc, stages=BWD_STAGES,
                              smem_bytes=smem, smem=layout, regs_estimate=regs, warp_rows=GRID_WARP_ROWS))
    return out


def dq_candidates(spec: AttentionSpec, info: ArchInfo, rejected: list[str]) -> list[DqTiling]:
    out = []
    for warps, bn, dc in itertools.product(DQ_WARPS, DQ_BLOCK_NS, d_chunks(spec)):
        bm = 16 * warps
        layout = dq_layout(spec, bm, bn, BWD_STAGES)
        smem, regs = layout.total_bytes, dq_registers(bn, dc, info)
        why = _check(info, spec, smem, regs, max(bn, bm), warps * 32)
        if why:
            rejected.append(f"dq {bm}x{bn} d_chunk {dc}: {why}")
            continue
        out.append(DqTiling(num_warps=warps, block_m=bm, block_n=bn, d_chunk=dc, stages=BWD_STAGES,
                            smem_bytes=smem, smem=layout, regs_estimate=regs))
    return out


class Sm80Backward(BackwardFamily):
    name = "sm80_bwd"
    path = "mma.sync + cp.async, dQ by fp32 atomics (atomic-free when deterministic)"
    template = "attn_bwd.cu.j2"

    def coverage(self) -> Coverage:
        return Coverage(archs=tuple(a.value for a in Arch), head_dims=HEAD_DIMS, dtypes=with_backward(),
                        masks=tuple(m.value for m in MASKS), kv_layouts=tuple(KV_LAYOUTS),
                        pipelines=tuple(k.value for k in PipelineKind),
                        notes="every arch (sm80 and later), deterministic or not (the spec's pipeline picks the "
                              "forward's only); bitwise reproducible gradients; where no family before it in "
                              "FAMILIES serves")

    def serves(self, spec: AttentionSpec, arch: Arch) -> str | None:
        return self.trait_refusal(spec)

    # ---- planning ------------------------------------------------------------------------------
    def plan(self, spec: AttentionSpec, info: ArchInfo, exclude: Mapping[Any, str] | None = None, *,
             atomic_dq: bool = True) -> BwdPlan:
        """The dK/dV and dQ tiles of lowest predicted cost; the dK/dV kernel adds dQ with atomics unless the spec is
        deterministic or `atomic_dq` is False (the atomic-free dQ kernel, for sweeps)."""
        arch = info.arch
        rejected: list[str] = []
        dq_atomic = atomic_dq and not spec.deterministic
        dkdv = sorted(dkdv_candidates(spec, info, rejected, dq_atomic)
                      + (grid_candidates(spec, info, rejected) if dq_atomic else []),
                      key=lambda t: dkdv_cost(spec, info, t, dq_atomic))
        if not dkdv and dq_atomic:  # the atomic-free kernels need less: fall back to them
            dq_atomic = False
            dkdv = sorted(dkdv_candidates(spec, info, rejected, False), key=lambda t: dkdv_cost(spec, info, t, False))
        dq = sorted(dq_candidates(spec, info, rejected), key=lambda t: dq_cost(spec, info, t))
        if not dkdv or not dq:
            raise PlanError(f"no backward tiling of spec '{spec.name}' fits {arch.value}:\n  "
                            + "\n  ".join(rejected[:8]) + "\nRemedy: target an arch with more shared memory.")
        best, best_dq = dkdv[0], dq[0]
        dq_how = "accumulated with atomics in dkdv" if dq_atomic else "atomic-free kernel"
        reason = (f"dkdv: fewest head-dim slices ({spec.head_dim // best.d_chunk}) and lowest predicted cost of "
                  f"{len(dkdv)} fitting; dq: {dq_how}, lowest predicted cost of {len(dq)} fitting")
        return BwdPlan(spec=spec, arch=arch, family=self.name,
                       kernel_name=kernel_name(spec, arch, PipelineKind.multistage, "bwd"), dkdv=best, dq=best_dq,
                       dq_atomic=dq_atomic, cost=plan_cost(spec, info, best, best_dq, dq_atomic), reason=reason,
                       rejected=tuple(rejected))

    def explain_lines(self, plan: BwdPlan) -> list[str]:
        a, b = plan.dkdv, plan.dq
        dq = ("dQ added by the dK/dV kernel with fp32 atomics, then dq_convert" if plan.dq_atomic else
              f"dQ {b.block_m} x {b.block_n}, {b.num_warps} warps, head-dim slice {b.d_chunk}, {b.smem_bytes} B, "
              f"~{b.regs_estimate} registers")
        return [f"dK/dV {a.block_n} KV rows x {a.block_m} query rows per step, {a.num_warps} warps, head-dim slice "
                f"{a.d_chunk}, {a.smem_bytes} B, ~{a.regs_estimate} registers; {dq}",
                ATOMIC_DQ_WHY if plan.dq_atomic else "dQ by the atomic-free kernel: the spec is deterministic, or "
                                                      "atomic dQ was turned off by the caller"]

    # ---- render and launch ---------------------------------------------------------------------
    def plan_line(self, plan: BwdPlan) -> str:
        a, b = plan.dkdv, plan.dq
        return (f"dkdv {a.block_n}x{a.block_m} warps={a.num_warps} d_chunk={a.d_chunk} smem={a.smem_bytes}B; "
                f"dq {b.block_m}x{b.block_n} warps={b.num_warps} d_chunk={b.d_chunk} smem={b.smem_bytes}B")

    def context(self, plan: BwdPlan) -> dict[str, object]:
        from ..codegen.renderer import common_context

        chunks = swizzle_chunks(plan.spec.head_dim, dtype_trait(plan.spec.dtype).size)
        fields = params_with_variant(BWD_PARAMS, plan.spec)
        # Atomic dQ: D and the LSE padded per entry to the query step (the dK/dV kernel copies a step's rows
        # whole), and the group-ordered accumulator beside them, zeroed by the preprocess.
        atomic = plan.dq_atomic
        return {**common_context(plan, self.plan_line(plan)), "bwd": plan, "params": fields,
                "params_layout": layout(fields), "swizzle_chunks": chunks,
                "pad_rows": plan.dkdv.block_m if atomic else 0, "zero_dq_accum": atomic, "zero_dkdv_done": False,
                "lse_rows_over_scale": False, "d_rows_negated": False,
                "dependent_launch": False,
                "convert_threads": DQ_CONVERT_THREADS, "convert_rows": convert_rows(plan.dkdv.block_m)}

    def prepare(self, plan: BwdPlan, function: LoadFunction, call: Any) -> ReadySm80Backward:
        return prepare(plan, function, call)
