"""The decode's IR: the split-KV kernels' tiling, the candidates the planner weighed and the plan."""

from __future__ import annotations

from enum import Enum

from ..spec.model import Arch, AttentionSpec
from .ir import IRModel, SmemRegions


class DecodeTiling(IRModel):
    """One point of the decode search space: 16 packed query rows per block, its warps splitting each K/V tile
    by keys (warp_keys each), a cp.async ring of `stages` tiles."""

    warp_keys: int
    num_warps: int
    stages: int

    @property
    def tile_keys(self) -> int:
        return self.warp_keys * self.num_warps


class DecodeRole(str, Enum):
    """Which of a spec's two decode tilings a call runs (planning.splits.choose_role). `stream` keeps the most K/V
    bytes in flight per block: few blocks over long caches. `waves` keeps more blocks resident per SM, so that one
    block's first copies and its merge overlap another's streaming: calls whose blocks fill whole waves."""

    stream = "stream"
    waves = "waves"


class DecodeCandidate(IRModel):
    tiling: DecodeTiling
    smem_bytes: int
    regs_estimate: int
    #: Resident blocks per SM and the K/V bytes they keep in flight (stages - 1 tiles each).
    blocks_per_sm: int = 0
    inflight_bytes: int = 0
    fits: bool
    reason: str


class DecodePlan(IRModel):
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
    role: DecodeRole = DecodeRole.stream
    #: The stream plan's note of the spec's waves tiling (more blocks per SM), None where no candidate holds more
    #: blocks per SM than this plan; the waves plan itself leaves it None.
    waves_tiling: DecodeTiling | None = None

    @property
    def waves_blocks_per_sm(self) -> int:
        """The waves tiling's resident blocks per SM (its candidate's), 0 without one."""
        return next((c.blocks_per_sm for c in self.candidates if c.tiling == self.waves_tiling), 0)

    @property
    def smem_bytes(self) -> int:
        return self.smem.total_bytes

    @property
    def entry_names(self) -> tuple[str, ...]:
        return (f"{self.kernel_name}_split", f"{self.kernel_name}_combine")

    def summary(self) -> dict[str, object]:
        return {"kernel_name": self.kernel_name, "arch": self.arch.value, "family": self.family,
                "tiling": self.tiling.model_dump(), "tile_keys": self.tiling.tile_keys, "smem_bytes": self.smem_bytes,
                "blocks_per_sm": self.blocks_per_sm, "role": self.role.value, "reason": self.reason}
