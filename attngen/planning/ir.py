"""The IR between planner and renderer: a KernelPlan says everything the template needs. The backward's plans are
in ir_bwd, the decode's in ir_decode."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..spec.model import Arch, AttentionSpec, PipelineKind


class IRModel(BaseModel):
    """The base of every IR type: frozen, unknown fields forbidden."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class MultistageTiling(IRModel):
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


class WarpSpecializedTiling(IRModel):
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


class CostEstimate(IRModel):
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


class Candidate(IRModel):
    tiling: Tiling
    smem_bytes: int
    regs_estimate: int
    fits: bool
    reason: str
    cost: CostEstimate | None = None


class SmemRegions(IRModel):
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


class SmemLayout(IRModel):
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


class WarpRoles(IRModel):
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


class KernelPlan(IRModel):
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
