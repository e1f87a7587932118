"""The sm90 forward's measured configurations: the tiles an H100 run found fastest per head dim, which outrank the cost
model (sm90_fwd's rank_key), and the pipeline `auto` takes from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..features.variant import variant_of
from ..planning.ir import WarpSpecializedTiling
from ..spec.model import AttentionSpec, DType, PipelineKind


@dataclass(frozen=True)
class MeasuredTiles:
    """The fastest Hopper configuration an H100 sweep found for one head dim."""

    pipeline: PipelineKind
    consumer_warpgroups: int
    block_n: int
    stages: int
    overlap: bool


#: Measured choice per head dim: the H100 sweep of every fitting ping-pong tiling at seqlen 8k, bf16
#: (benchmarks/results/h100/hopper/sweep_pingpong_8k.log) and the ablation (ablation.log). The cost
#: model has no term for ptxas's scheduling under register pressure, which is what separates these:
#:   hd64:  3 consumer warpgroups, 192 x 128, no overlap (warp_specialized): 484 TFLOP/s non-causal;
#:          ping-pong 128 x 192 x 3 stages with the overlap: 460 / 431 (non-causal / causal)
#:   hd128: ping-pong 128 x 128, 2 stages, overlap: 638-657 / 571-579; 128 x 160: 623; 128 x 112: 588 / 584
#:   hd256: ping-pong 128 x 80, 2 stages, overlap: 671 / 653; 128 x 64: 639 / 585 (80 x 3 stages is over 227 KB)
#: With two consumer warpgroups the overlap beat the same tiles without it by 2-19%.
MEASURED_TILES: dict[int, MeasuredTiles] = {
    64: MeasuredTiles(PipelineKind.warp_specialized, 3, 128, 2, False),
    128: MeasuredTiles(PipelineKind.pingpong, 2, 128, 2, True),
    256: MeasuredTiles(PipelineKind.pingpong, 2, 80, 2, True),
}
#: Measured choice per head dim for band masks without a score mod (band_plain()), where it differs: hd64's 192 x 128
#: tiles with the overlap, which fit the registers only there (sm90_fwd.BAND_CONSUMER_REG_OVERHEAD), against the same
#: tiles without it, forward TFLOP/s at 2k / 8k / 16k on the H100, two rounds (results/h100/fwd64, fwd64_band):
#: unmasked 450-460 -> 470-471, 487-491 -> 507-517, 514-515 -> 523-528 (192 x 112 with the overlap 444-446, 488-497,
#: 510); causal 312-313 -> 343-349, 410-426 -> 466-470, 453-454 -> 491.
#: hd128's 192 x 128 tiles in three consumer warpgroups without the overlap (O 64 + S 64 + 32 in 160 registers; a
#: score mod's 48 do not fit), against ping-pong 128 x 128 with the overlap, kernel times alternated in one process
#: over 2k / 4k / 8k / 16k (results/h100/fp8_tiles/ab, fwd_3wg): unmasked x1.023-1.032, causal x1.027-1.054, in both
#: runs; 192 x 112 x0.99-1.04. Three warpgroups keep two softmaxes beside one warpgroup's GEMMs.
MEASURED_TILES_BAND: dict[int, MeasuredTiles] = {
    64: MeasuredTiles(PipelineKind.warp_specialized, 3, 128, 2, True),
    128: MeasuredTiles(PipelineKind.warp_specialized, 3, 128, 2, False),
}
#: Measured choice per head dim for fp8_e4m3 under band masks without a score mod (band_plain()): the GEMMs take half
#: the clocks of bf16's while the softmax (one MUFU exp2 a score) does not shrink, so a warpgroup's softmax outlasts
#: the other's GEMMs under ping-pong (Nsight Compute: tensor pipe 44%, stalls on MUFU and the max chain). Three
#: consumer warpgroups of 192 x 128, no overlap (O 64 + S 64 + 32 in 160 registers), keep two softmaxes beside one
#: GEMM. H100 sweep at hd128 (results/h100/fp8_tiles/sweep.txt), TFLOP/s, ping-pong 128 x 128 with the overlap ->
#: 192 x 128: 8k 849-865 -> 933-962, causal 777-791 -> 865-869, 16k 879-885 -> 964-996; 128 x 256 ping-pong without
#: the overlap 921-944 unmasked but 695-715 causal.
MEASURED_TILES_FP8: dict[int, MeasuredTiles] = {
    128: MeasuredTiles(PipelineKind.warp_specialized, 3, 128, 2, False),
}
_TABLES = {"MEASURED_TILES": MEASURED_TILES, "MEASURED_TILES_BAND": MEASURED_TILES_BAND,
           "MEASURED_TILES_FP8": MEASURED_TILES_FP8}


def band_plain(spec: AttentionSpec) -> bool:
    """A band mask (none, causal, a sliding window) and no score mod: beside S the consumers keep two integers a row
    for the mask and nothing per element."""
    return variant_of(spec).mask.band is not None and spec.score_mod is None


def measured_table(spec: AttentionSpec) -> str:
    """The name of the table the spec's measured configuration comes from: where band_plain(), MEASURED_TILES_FP8
    (fp8_e4m3) or MEASURED_TILES_BAND if it names the head dim, else MEASURED_TILES."""
    if band_plain(spec):
        name = "MEASURED_TILES_FP8" if spec.dtype is DType.fp8_e4m3 else "MEASURED_TILES_BAND"
        if spec.head_dim in _TABLES[name]:
            return name
    return "MEASURED_TILES"


def measured_tiles(spec: AttentionSpec) -> MeasuredTiles | None:
    """The measured configuration of the spec's head dim, from measured_table(spec)."""
    return _TABLES[measured_table(spec)].get(spec.head_dim)


def auto_pipeline(spec: AttentionSpec) -> PipelineKind:
    """What `pipeline: auto` picks on sm90 for a head dim the Hopper pipelines serve."""
    measured = measured_tiles(spec)
    return measured.pipeline if measured else PipelineKind.pingpong


def measured_preference(spec: AttentionSpec, tiling: WarpSpecializedTiling) -> int:
    """The ranking's first key: 0 for the spec's measured configuration (measured_tiles), 1 for the head dim's
    general one where the band table names another (what a build takes if the band one spills), else 2."""
    want = measured_tiles(spec)
    if want is None:
        return 0
    got = (tiling.consumer_warpgroups, tiling.block_n, tiling.stages, tiling.intra_wg_overlap)
    ranked = [want, MEASURED_TILES.get(spec.head_dim, want)]
    keys = [(m.consumer_warpgroups, m.block_n, m.stages, m.overlap) for m in ranked]
    return keys.index(got) if got in keys else 2
