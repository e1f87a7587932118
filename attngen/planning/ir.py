"""The IR between planner and renderer: a KernelPlan says everything the template needs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..codegen.abi import tile_table_entry
from ..spec.model import Arch, AttentionSpec, PipelineKind


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MultistageTiling(_Frozen):
    """One point of the sm80_fwd search space: mma.sync warps fed by a cp.async ring."""

    block_m: int
    block_n: int
    num_warps: int
    #: 16-row MMA tiles each warp owns (block_m = 16 * warp_m_tiles * num_warps).
    warp_m_tiles: int
    stages: int
    #: Q fragments held in registers across the KV loop (else re-read from shared memory).
    q_in_regs: bool
    #: Issue the next K/V refill after S = Q K^T instead of before it.
    refill_late: bool = False


class WarpSpecializedTiling(_Frozen):
    """One point of the sm90_fwd search space: a TMA producer warpgroup and wgmma consumer warpgroups."""

    block_m: int
    block_n: int
    num_warps: int
    stages: int
    #: wgmma consumer warpgroups of 64 query rows each (block_m = 64 * consumer_warpgroups).
    consumer_warpgroups: int
    #: softmax(j+1) runs while O += P(j) V(j) is in flight.
    intra_wg_overlap: bool = False

    @property
    def warp_m_tiles(self) -> int:
        """16-row tiles each consumer warp owns: one, its quarter of the warpgroup's m64 wgmma tile."""
        return 1

    @property
    def q_in_regs(self) -> bool:
        """wgmma reads Q from shared memory, never from registers."""
        return False


#: A forward family's tiling: each family plans, evaluates and renders its own kind.
Tiling = MultistageTiling | WarpSpecializedTiling


class CostEstimate(_Frozen):
    """The explicit cost model's numbers for one tiling at the reference workload."""

    ref_seqlen: int
    hbm_bytes: int
    smem_read_bytes: int
    flops: int
    blocks_per_sm: int
    warps_per_sm: int
    tile_efficiency: float
    t_hbm_us: float
    t_mma_us: float
    t_smem_us: float
    latency_hiding: float
    predicted_us: float
    #: What the family ranks its tilings by where that is not predicted_us (planner.rank_time): sm90_fwd ranks by
    #: its model as the H100 sweeps checked it and reports predicted_us with the terms calibrated since
    #: (benchmarks/NOTES.md, issue 13 part 6, continued), so that no choice moved.
    rank_us: float | None = None


class Candidate(_Frozen):
    tiling: Tiling
    smem_bytes: int
    regs_estimate: int
    fits: bool
    reason: str
    cost: CostEstimate | None = None


class SmemRegions(_Frozen):
    """A block's dynamic shared memory as consecutive regions: (name, byte offset) in order, and the total.
    The planner computes it once (`stack`); the template takes the offsets as kSmem<name> and asserts that
    its own tile sizes fill each region exactly."""

    offsets: tuple[tuple[str, int], ...]
    total_bytes: int

    @classmethod
    def stack(cls, regions: list[tuple[str, int]]) -> SmemRegions:
        """Regions of the given sizes, one after another from offset 0."""
        offsets, at = [], 0
        for name, size in regions:
            offsets.append((name, at))
            at += size
        return cls(offsets=tuple(offsets), total_bytes=at)

    def offset(self, name: str) -> int:
        """The byte offset of region `name`."""
        return dict(self.offsets)[name]


class SmemLayout(_Frozen):
    """Byte offsets into the block's dynamic shared memory."""

    q_offset: int
    q_bytes: int
    kv_offset: int
    k_tile_bytes: int
    v_tile_bytes: int
    stage_bytes: int
    total_bytes: int
    #: 16-byte chunks per swizzle atom row: 8 (128-byte rows) or 4 (64-byte rows, head_dim % 64 != 0).
    swizzle_chunks: int
    #: Hopper pipelines: the mbarriers after the K and V stages (0: none).
    barrier_offset: int = 0
    #: Hopper pipelines, masks with holes: the live-tile bitmap after the mbarriers (planning.shared.SCHEDULE_WORDS).
    schedule_offset: int = 0
    schedule_words: int = 0


class WarpRoles(_Frozen):
    """Who does what in a warp-specialized block, and the register split `setmaxnreg` makes."""

    consumer_warpgroups: int
    producer_regs: int
    consumer_regs: int
    pingpong: bool
    intra_wg_overlap: bool
    #: The consumers' softmax: rescale O only when a row's max grows by more than this many log2 units (0:
    #: every block), and take the exp2 of this many 8-column score tiles from a polynomial on the FMA pipe.
    rescale_threshold: float = 0.0
    exp2_poly_tiles: int = 0
    #: Each consumer warpgroup walks only the KV tiles its own 64 query rows see and passes the block's others
    #: (families/sm90_fwd.py OWN_RANGES); False: every warpgroup multiplies every tile of the block's range.
    own_ranges: bool = False
    #: With own_ranges and the intra-warpgroup overlap: a warpgroup's first tile runs at half width (S over its first
    #: block_n / 2 keys, O += P V over half the k-steps) where its rows see none of the second half's keys
    #: (families/sm90_fwd.py HALF_TILES).
    half_tiles: bool = False


class KernelPlan(_Frozen):
    spec: AttentionSpec
    arch: Arch
    #: The kernel family that planned it and renders and launches it (attngen.families.get(family)).
    family: str
    pipeline: PipelineKind
    kernel_name: str
    tiling: Tiling
    threads: int
    smem_bytes: int
    smem: SmemLayout
    regs_estimate: int
    #: __launch_bounds__ min blocks per SM: sets ptxas's register cap.
    min_blocks_per_sm: int
    cost: CostEstimate
    reason: str
    candidates: tuple[Candidate, ...]
    #: Warp-specialized families only.
    roles: WarpRoles | None = None
    #: The Hopper forward under a causal mask: the grid's last chains (entry, head) deal their query blocks heaviest
    #: first across each other, as many chains as fill this many waves of one block per SM
    #: (families/sm90_tail_order.py); 0: the grid's own order.
    tail_waves: float = 0.0

    # Flat views the CLI and manifests promise.
    @property
    def block_m(self) -> int:
        return self.tiling.block_m

    @property
    def block_n(self) -> int:
        return self.tiling.block_n

    @property
    def num_warps(self) -> int:
        return self.tiling.num_warps

    @property
    def stages(self) -> int:
        return self.tiling.stages

    def summary(self) -> dict[str, object]:
        """The plan as `explain --json` and manifest.json give it."""
        return {
            "kernel_name": self.kernel_name,
            "arch": self.arch.value,
            "family": self.family,
            "pipeline": self.pipeline.value,
            "block_m": self.block_m,
            "block_n": self.block_n,
            "num_warps": self.num_warps,
            "warp_m_tiles": self.tiling.warp_m_tiles,
            "stages": self.stages,
            "q_in_regs": self.tiling.q_in_regs,
            "threads": self.threads,
            "smem_bytes": self.smem_bytes,
            "regs_estimate": self.regs_estimate,
            "min_blocks_per_sm": self.min_blocks_per_sm,
            "smem_layout": self.smem.model_dump(),
            "cost": self.cost.model_dump(),
            "reason": self.reason,
            "roles": self.roles.model_dump() if self.roles else None,
            "tail_waves": self.tail_waves,
        }


class DkdvTiling(_Frozen):
    """The dK/dV kernel: a KV block of 16 rows per warp and a head-dim slice stay resident."""

    num_warps: int
    block_n: int
    #: Query rows per step of the loop.
    block_m: int
    #: Head-dim columns of dK/dV one block owns (the head dim / d_chunk blocks share a KV block).
    d_chunk: int
    stages: int
    smem_bytes: int
    #: The regions of smem_bytes, offsets computed once (SmemRegions.stack).
    smem: SmemRegions
    regs_estimate: int
    #: KV rows of a warp's dK/dV tile: 16 (the rows partition: each warp computes its own rows of S^T and dP^T over
    #: every query of the step and owns all d_chunk columns) or 32 (the grid partition: S^T and dP^T in a 2-D warp
    #: grid, P^T and dS^T through shared memory, each warp owns a share of the columns).
    warp_rows: int = 16


class DqTiling(_Frozen):
    """The dQ kernel: a query block of 16 rows per warp stays resident, KV blocks stream."""

    num_warps: int
    block_m: int
    block_n: int
    #: Head-dim columns of dQ one block owns (the head dim / d_chunk blocks share a query block).
    d_chunk: int
    stages: int
    smem_bytes: int
    #: The regions of smem_bytes, offsets computed once (SmemRegions.stack).
    smem: SmemRegions
    regs_estimate: int


class SplitRole(_Frozen):
    """What one consumer warpgroup of a head-dim split owns (HopperBwdTiling.split): the dK and dV columns
    [64 dkv_box0, 64 (dkv_box0 + dkv_boxes)) of all the block's KV rows, and the dQ columns [64 dq_box0,
    64 (dq_box0 + dq_boxes)) of every query tile, one 64-column box per product."""

    dkv_box0: int
    dkv_boxes: int
    dq_box0: int
    dq_boxes: int


class HopperBwdTiling(_Frozen):
    """The sm90 dK/dV kernel: a producer warpgroup (TMA) and wgmma consumer warpgroups; query tiles of
    block_m rows stream through `stages`. Without `split` each of block_n / 64 consumer warpgroups owns 64 KV
    rows and all of head_dim. With `split` (head dims whose dK and dV do not fit one warpgroup's registers) the
    block owns 64 KV rows; the warpgroups split the query columns of S^T and dP^T, share P^T and dS^T through
    shared memory and split head_dim between them for dK, dV and dQ as `split` says. dQ is added from registers
    by vector reductions (`dq_red`; without `split`, else by TMA bulk reductions)."""

    block_m: int
    block_n: int
    stages: int
    producer_regs: int
    consumer_regs: int
    #: The dQ product each consumer warpgroup computes: 64 queries x dq_cols head-dim columns over
    #: all block_n KV rows, at these per-warpgroup offsets of columns and of query rows.
    dq_cols: int
    dq_col_step: int
    dq_query_step: int
    #: dV and dK take P^T and dS^T from shared memory (A operands) instead of registers.
    dkv_from_smem: bool = False
    #: A step issues dV, dQ, then dK, and stages dQ while dK's product runs (else dV and dK, then dQ).
    dq_before_dk: bool = False
    smem_bytes: int
    #: The regions of smem_bytes, offsets computed once (SmemRegions.stack).
    smem: SmemRegions
    regs_estimate: int
    #: Words of the live-tile bitmap of a mask with holes (planning.shared.SCHEDULE_WORDS; 0: none).
    schedule_words: int = 0
    #: One role per consumer warpgroup when head_dim is split between them; empty: 64 KV rows each.
    split: tuple[SplitRole, ...] = ()
    #: With `split`: warpgroup 0 computes all of S^T and P^T, warpgroup 1 all of dP^T and dS^T (P^T read back from
    #: shared memory), each product 64 query columns wide, instead of each warpgroup half the columns of both.
    split_by_product: bool = False
    #: dQ's reductions ordered by per-tile semaphores (deterministic specs): each tile's parts are added in the
    #: KV blocks' dispatch order, so dQ is bitwise reproducible.
    ordered_dq: bool = False
    #: dQ is added from registers by red.global.add.v4.f32 into a tile-ordered fp32 accumulator (per-entry padded
    #: query tiles of block_m x head_dim, each 64 x 64 box of a tile in wgmma fragment order: 512 contiguous bytes a
    #: warp), which the dq_convert kernel turns into dQ. Else the row-major accumulator (flash_attn's layout) that
    #: the host scales: staged and TMA-reduced by a producer warp (64-KV-row consumers; what an ordered dQ needs),
    #: or red.global.add.v2.f32 (split).
    dq_red: bool = False
    #: With dq_red and without split: the consumers stage each dQ product in shared memory in that fragment order
    #: (16-byte stores, conflict-free) and producer warp 1 adds each warpgroup's 64 x 64 box with one contiguous bulk
    #: reduction (cp.reduce.async.bulk .add.f32), off the consumers' path, instead of red.global.add from registers.
    #: With kv_halves: one warpgroup's columns (sm90_bwd_halves.STAGED_WG) staged so and added by one bulk reduction
    #: its own thread issues; the other warpgroup adds from registers.
    dq_bulk: bool = False
    #: With dq_bulk on the 64-KV-row consumers: dq_convert overlaps the dK/dV kernel's last wave. It is launched as a
    #: programmatic dependent, which the dK/dV blocks release as they start, and each of its blocks waits for its own
    #: (entry, KV head): a counter the preprocess zeroes and each dK/dV block adds one to once its dQ reductions are
    #: performed. Else it waits for the whole grid (or runs after it).
    dq_overlap: bool = False
    #: With dq_before_dk and dV/dK fed from registers: dK's product reads dS^T from shared memory (stored there for
    #: dQ's) instead of its packed register copy, which then dies once stored (registers for dQ's accumulator).
    dk_from_smem: bool = False
    #: dS^T tiles in shared memory: 2 alternate by step (one named barrier a step around them instead of two).
    ds_buffers: int = 1
    #: With two dS^T tiles, dV and dK from registers and dQ staged for producer warp 1: a step issues the previous
    #: step's dQ product, once an mbarrier per tile says every consumer warp has stored its dS^T rows there, instead of
    #: its own after a named barrier of both warpgroups; a tile is rewritten once a second mbarrier says both dQ
    #: products that read it are done. The warpgroups then need not meet every step.
    dq_deferred: bool = False
    #: With dq_deferred: warpgroup 1 starts its first step once warpgroup 0's first S^T is ready, so that one's
    #: exps run under the other's products from the start.
    dq_stagger: bool = False
    #: Without split: dK and dV leave through shared memory (each warp's rows packed into the K and V tiles' rows its
    #: warpgroup owned, then written by 16-byte row chunks) instead of by 4-byte stores from the fragments.
    dkv_staged: bool = False
    #: Two consumer warpgroups each own half the block's block_n KV rows at the full head dim, with dK and dV
    #: accumulated transposed (dK^T = Q^T dS: M = head_dim) so that a half need not be a multiple of wgmma's M; P^T and
    #: dS^T go through shared memory, dQ is split by columns and added from registers (families/sm90_bwd_halves.py).
    kv_halves: bool = False
    #: With dq_before_dk, dV/dK from registers and no deferral: dV's product is issued after dS^T's stores (before the
    #: fence that waits for them) and dK's once dV's is done, behind dQ's (FlashAttention-4's order), instead of dV's
    #: before the stores and dQ's and dK's back to back.
    dv_after_ds: bool = False
    #: The 8-query tiles of S^T whose exps run before dP^T's product is waited on; 0: all of them. The rest run after
    #: the wait beside the dS values (FlashAttention-4's order), so that their MUFUs interleave with other work.
    exps_before_dp: int = 0
    #: A step's last products (dK's and dV's; the KV-row halves' dV^T and dK^T) left running into the next step, whose
    #: wait for its S waits for them too and then frees their Q/dO stage, instead of waiting for them at the step's end:
    #: the tensor pipe goes on from one step's products into the next step's S without draining in between.
    carry_products: bool = False

    @property
    def dq_swap(self) -> bool:
        """dQ's product transposed, dQ^T = K^T dS^T, each consumer warpgroup's 64 head-dim columns x all block_m
        queries (dq_cols = block_m): what a block_m that is no multiple of wgmma's M (64) needs (with dq_bulk); the
        accumulator's boxes are then 64 head-dim columns x block_m queries in that product's fragment order."""
        return self.block_m % 64 != 0

    @property
    def consumer_wgs(self) -> int:
        return 2 if self.kv_halves else len(self.split) or self.block_n // 64

    @property
    def dq_adders(self) -> int:
        """How far each KV block moves a query tile's semaphore (ordered_dq): one per warpgroup adding its own dQ
        columns in the split and with kv_halves, else 1 (producer warp 1 issues the tile's reductions)."""
        if self.kv_halves:
            return self.consumer_wgs
        return sum(r.dq_boxes > 0 for r in self.split) or 1

    @property
    def s_cols(self) -> int:
        """Query columns of each warpgroup's S^T and dP^T."""
        return self.block_m // len(self.split) if self.split and not self.split_by_product else self.block_m

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumer_wgs)


class BwdCost(_Frozen):
    """The backward's explicit cost model at the reference workload (planning.shared.REF_SEQLEN, batch 1,
    REF_HIDDEN / head_dim heads): the useful FLOPs (BWD_FLOPS_OVER_FWD x the forward's) and the time its
    kernels are predicted to take. It states what the plan should reach; it does not choose the plan."""

    ref_seqlen: int
    #: Useful FLOPs: 2.5 x the forward's at the reference workload (recomputation not counted).
    flops: int
    #: The useful FLOPs at the family's matrix rate alone (the arch table's peak).
    t_mma_us: float
    #: Each kernel's predicted time in launch order: (entry point suffix, us).
    kernels: tuple[tuple[str, float], ...]
    #: t_mma_us / predicted_us: the share of the matrix peak the plan is predicted to reach.
    efficiency: float
    predicted_us: float


class BwdPlan(_Frozen):
    """The sm80_bwd family's plan: the preprocess, dK/dV and dQ kernels (mma.sync, atomic-free)."""

    spec: AttentionSpec
    arch: Arch
    #: The kernel family that planned it and renders and launches it (attngen.families.get(family)).
    family: str
    #: attn_bwd_<mask>_hd<d>_<dtype>_<arch>_<pipeline>; entry points append _preprocess, _dkdv, _dq (or _dq_convert).
    kernel_name: str
    dkdv: DkdvTiling
    dq: DqTiling
    #: Query rows per block of the preprocess kernel (4 warps x 8 rows).
    preprocess_rows: int = 32
    #: dQ accumulated by the dK/dV kernel with fp32 atomics (5 GEMMs per tile pair, run-to-run
    #: rounding may differ); False: the atomic-free dQ kernel (7 GEMMs, bitwise reproducible).
    dq_atomic: bool = False
    cost: BwdCost
    reason: str
    rejected: tuple[str, ...] = ()

    @property
    def entry_names(self) -> tuple[str, ...]:
        """The preprocess, the dK/dV kernel, then the dQ kernel or (dq_atomic) the kernel converting the accumulator."""
        last = "dq_convert" if self.dq_atomic else "dq"
        return tuple(f"{self.kernel_name}_{k}" for k in ("preprocess", "dkdv", last))

    def summary(self) -> dict[str, object]:
        return {"kernel_name": self.kernel_name, "arch": self.arch.value, "family": self.family,
                "dkdv": self.dkdv.model_dump(), "dq": self.dq.model_dump(), "dq_atomic": self.dq_atomic,
                "preprocess_rows": self.preprocess_rows, "cost": self.cost.model_dump(), "reason": self.reason}


class HopperBwdPlan(_Frozen):
    """The sm90_bwd family's plan: the preprocess kernel, the wgmma dK/dV kernel, which adds dQ into an fp32
    accumulator, and with a tile-ordered accumulator (dkdv_wgmma.dq_red) the kernel that converts it to dQ."""

    spec: AttentionSpec
    arch: Arch
    family: str
    #: Entry points append _preprocess and _dkdv_wgmma, _dq_convert with a tile-ordered dQ (dkdv_wgmma.dq_red), and
    #: _tiles for varlen.
    kernel_name: str
    dkdv_wgmma: HopperBwdTiling
    preprocess_rows: int = 32
    #: The preprocess, the dK/dV kernel and dq_convert are launched as programmatic dependents (archs with
    #: programmatic_launch): each may start its blocks under the last blocks of the grid before it and waits for that
    #: grid's writes in the kernel (the dK/dV kernel's producer after loading K, V and the first Q and dO tiles).
    dependent_launch: bool = False
    #: Under a causal mask, the grid's last chains (entry, KV head) deal their dK/dV blocks heaviest first across the
    #: chains, as many chains as fill this many waves of one block per SM (families/sm90_tail_order.py); 0: the grid's
    #: own order.
    tail_waves: float = 0.0
    cost: BwdCost
    reason: str

    @property
    def entry_names(self) -> tuple[str, ...]:
        convert = (f"{self.kernel_name}_dq_convert",) if self.dkdv_wgmma.dq_red else ()
        # A varlen plan's cubin builds its flat grids' tile tables (runtime/tile_table.py).
        tiles = (tile_table_entry(self.kernel_name),) if self.spec.seqlens.value == "varlen" else ()
        return (f"{self.kernel_name}_preprocess", self.wgmma_entry, *convert, *tiles)

    @property
    def wgmma_entry(self) -> str:
        return f"{self.kernel_name}_dkdv_wgmma"

    def summary(self) -> dict[str, object]:
        return {"kernel_name": self.kernel_name, "arch": self.arch.value, "family": self.family,
                "dkdv_wgmma": self.dkdv_wgmma.model_dump(), "preprocess_rows": self.preprocess_rows,
                "cost": self.cost.model_dump(), "reason": self.reason}


class DecodeTiling(_Frozen):
    """One point of the decode search space: 16 packed query rows per block, its warps splitting each K/V tile
    by keys (warp_keys each), a cp.async ring of `stages` tiles."""

    warp_keys: int
    num_warps: int
    stages: int

    @property
    def tile_keys(self) -> int:
        return self.warp_keys * self.num_warps


class DecodeCandidate(_Frozen):
    tiling: DecodeTiling
    smem_bytes: int
    regs_estimate: int
    #: Resident blocks per SM and the K/V bytes they keep in flight (stages - 1 tiles each).
    blocks_per_sm: int = 0
    inflight_bytes: int = 0
    fits: bool
    reason: str


class DecodePlan(_Frozen):
    """The decode family's plan: the split kernel (16 packed query rows x one KV split per block) and the
    combine kernel that merges the splits by their LSE. The number of splits is chosen per call
    (planning.splits.choose_splits) from the batch, the KV heads, the cache length and the SM count."""

    spec: AttentionSpec
    arch: Arch
    family: str
    #: attn_decode_<variant>_hd<d>_<dtype>_<arch>_splitkv; entry points append _split and _combine.
    kernel_name: str
    tiling: DecodeTiling
    threads: int
    smem: SmemRegions
    min_blocks_per_sm: int
    blocks_per_sm: int
    num_sms: int
    reason: str
    candidates: tuple[DecodeCandidate, ...] = ()
    #: The combine kernel is a programmatic dependent launch: it starts while the split kernel runs and waits
    #: for the partials in the kernel (archs with programmatic_launch).
    overlap_combine: bool = False

    @property
    def smem_bytes(self) -> int:
        return self.smem.total_bytes

    @property
    def entry_names(self) -> tuple[str, ...]:
        return (f"{self.kernel_name}_split", f"{self.kernel_name}_combine")

    def summary(self) -> dict[str, object]:
        return {"kernel_name": self.kernel_name, "arch": self.arch.value, "family": self.family,
                "tiling": self.tiling.model_dump(), "tile_keys": self.tiling.tile_keys, "smem_bytes": self.smem_bytes,
                "blocks_per_sm": self.blocks_per_sm, "reason": self.reason}
