"""The backward's IR: the plans of the mma.sync backward (BwdPlan: a dK/dV kernel and a dQ kernel) and of the
wgmma backward (HopperBwdPlan), and the costs the planner ranks them by."""

from __future__ import annotations

from ..codegen.abi import tile_table_entry
from ..spec.model import Arch, AttentionSpec
from .ir import IRModel, SmemRegions


class DkdvTiling(IRModel):
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


class DqTiling(IRModel):
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


class SplitRole(IRModel):
    """What one consumer warpgroup of a head-dim split owns (HopperBwdTiling.split): the dK and dV columns
    [64 dkv_box0, 64 (dkv_box0 + dkv_boxes)) of all the block's KV rows, and the dQ columns [64 dq_box0,
    64 (dq_box0 + dq_boxes)) of every query tile, one 64-column box per product. With HopperBwdTiling.dq_bulk the
    first dq_staged of its dQ boxes are staged in shared memory in fragment order and added by one bulk reduction its
    thread 0 issues; the rest it adds from registers."""

    dkv_box0: int
    dkv_boxes: int
    dq_box0: int
    dq_boxes: int
    dq_staged: int = 0


class HopperBwdTiling(IRModel):
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
    #: its own thread issues; the other warpgroup adds from registers. With split: each warpgroup's first
    #: SplitRole.dq_staged boxes so, beside one dO stage.
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
    #: With dkv_staged: each warpgroup packs and writes its dV rows before the warpgroups meet (only its own products
    #: read its V rows), then dK's once both warpgroups' dQ products, which read all of K, are done.
    dv_out_first: bool = False
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
    #: Without split or kv_halves, under a constant score-mod derivative: dP^T's accumulator starts at -D (each query
    #: column's value; the preprocess writes D's padded rows negated), so that it ends at dP^T - D and each dS^T value
    #: is one FMUL: no D array in registers beside S^T and dP^T, no FADD per element.
    dp_from_d: bool = False
    #: The same for S^T without a score mod: its accumulator starts at -LSE / scale_log2 (each query column's; the
    #: preprocess writes the LSE rows so), so that P^T = exp2(acc scale_log2) needs no LSE array in registers either.
    s_from_lse: bool = False
    #: Without split or kv_halves: V arrives on an mbarrier of its own, loaded after the first Q/dO stage, so that the
    #: block's first S^T waits for K, Q, dO and the row values only and V lands under it (dP^T's product waits for V).
    v_late: bool = False
    #: A step's last products (dK's and dV's; the KV-row halves' dV^T and dK^T) left running into the next step, whose
    #: wait for its S waits for them too and then frees their Q/dO stage, instead of waiting for them at the step's end:
    #: the tensor pipe goes on from one step's products into the next step's S without draining in between.
    carry_products: bool = False
    #: With kv_halves: a warpgroup stores its P^T rows and issues dV^T += dO^T P before it waits for dP, so that the dS
    #: values, their stores and the warpgroups' barriers run under that product (FlashAttention-4's order at hd192);
    #: else dV^T after dQ's product, beside dK^T. With split_by_product: each warpgroup issues its dV columns once
    #: warpgroup 0's P^T is stored, under warpgroup 1's dS values, instead of with dK after the dS^T barrier.
    dv_early: bool = False
    #: dO's stages when they differ from Q's (0: dO shares Q's `stages` and their mbarriers). With kv_halves and
    #: dv_early: one dO stage on mbarriers of its own, freed once the step's dV^T is done, so that the stage's bytes
    #: hold both warpgroups' dQ staging (dq_bulk_wgs 2); Q keeps `stages`.
    do_stages: int = 0
    #: With kv_halves and dq_bulk: how many warpgroups stage their dQ columns for a bulk reduction of their own (1:
    #: sm90_bwd_halves.STAGED_WG alone, the other adding from registers; 2: both).
    dq_bulk_wgs: int = 1

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


class BwdCost(IRModel):
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


class BwdPlan(IRModel):
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


class HopperBwdPlan(IRModel):
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
