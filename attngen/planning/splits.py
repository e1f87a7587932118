"""How many KV splits a decode call runs: a pure function of the call's shape and the plan's residency.

A decode block holds 16 packed query rows of one KV head of one entry; with few entries and KV heads there are
far fewer blocks than SMs, and each would stream a whole cache alone. Dealing every entry's key tiles out to
separate blocks in turn (split s reads tiles s, s + splits, ...; a combine kernel merges them by their LSE) puts
every SM to work. The choice:

- no split when the blocks already fill FULL_WAVE of the resident slots (SMs x blocks per SM);
- with one block per SM, an SM's pair (the two SMs of a TPC share its path to memory) matters:
  - no split when the blocks nearly fill one SM of every pair (PAIR_SATURATING of the pairs, at most all), the
    cache is contiguous and their streams (BLOCK_STREAM_GBPS each) reach STREAM_SATURATING of the device's DRAM
    bandwidth: alone on their pairs they stream at copy bandwidth (the H100's 64, not the H200's);
  - between one block per pair and FULL_WAVE, some pairs carry two blocks and set the pace: the fewest splits
    (at most BALANCE_SPLITS, each of MIN_BALANCE_TILES tiles at least) whose blocks fill their waves to
    BALANCE_EFFICIENCY, so the scheduler evens the pairs' loads out;
- else as many splits as one wave of the slots holds, at most MAX_SPLITS and one per MIN_TILES_PER_SPLIT tiles,
  unless that saves each block no more than COMBINE_COST_TILES tiles of streaming.

Measured on the H100 (benchmarks/results/h100/decode/sweep_1 and sweep_2, split_rule/, NOTES.md; hd128, 8 KV
heads, 1 block per SM): at batch 1 (8 blocks, 132 slots) 16 splits beat 8 and 32 at 32k and 128k keys (70 vs 87
and 84 us at 32k); short caches at half a wave of blocks run best unsplit; at batch 8 (64 blocks) no split beats
2-4 at 2k-32k keys (364.6 against 367.3 us at 32k, 61.9 against 64.2 at 4k); at batch 10 and 12 (80 and 96
blocks) 3 and 4 splits beat none by 9-12% at 32k keys (462.9 against 507.7 us, 541.3 against 608.6) and by 2-3%
at 4k, while 4 and 3 splits, whose last waves are part-filled, lose (492.0 and 555.6 us). On the H200 (4.8 TB/s
against 3.35) the 64 unsplit blocks of batch 8 read 0.71 of its copy bandwidth where two splits read 0.96
(h200/refresh_1: 358 against 263 us at 32k keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir_decode import DecodeRole

#: Splits at most: the combine kernel's warp reads one LSE per split per lane pass, and past this many the
#: partial outputs (fp32, splits x rows x head_dim) cost more traffic than the extra parallelism returns.
MAX_SPLITS = 128
#: K/V tiles a split keeps at least. At batch 1 over 1k keys (8 tiles) 8 splits of one tile beat 4 of two and 2
#: of four (13.1, 13.9 and 15.1 us); over 4k keys 8 and 16 splits are within 4% (18.8 and 19.5 us)
#: (results/h100/decode/sweep_2).
MIN_TILES_PER_SPLIT = 1
#: Tiles per block a split must save to pay for the combine (its launch, the fp32 partials and their merge):
#: at batch 8 over 1k keys (64 blocks of 8 tiles) one split takes 24.3 us and two 26.1; over 4k keys (32 tiles)
#: two take 66 us and one 80 (sweep_2).
COMBINE_COST_TILES = 4
#: Share of the resident slots the unsplit blocks must fill to skip splitting (wave tails below it cost more
#: than the combine kernel's launch and its fp32 partials).
FULL_WAVE = 0.8
#: Share of the SM pairs (TPCs) whose one block each streams at copy bandwidth: batch 8 x 8 KV heads (64 blocks of
#: 66 pairs) runs best unsplit (split_rule/sweep_1).
PAIR_SATURATING = 0.9
#: What one decode block streams from DRAM, one block per SM (the plan's ~128 KB of K/V in flight): batch 8 x 8 KV
#: heads unsplit over 32k keys, 64 blocks, read 2945 GB/s on the H100 (364.6 us, split_rule/) and 3000 GB/s on
#: the H200 (358 us, h200/refresh_1): ~47 GB/s a block on both, a rate of the block's own issue, not of the memory.
BLOCK_STREAM_GBPS = 47.0
#: Share of the device's DRAM bandwidth (its peak: memory clock x bus width) the unsplit blocks' streams must reach
#: for the pairs' rule to keep them unsplit. The H100's 64 blocks reach 0.90 of its 3352 GB/s and ran best unsplit;
#: the H200's reach 0.62 of the 4814 GB/s its driver reports and ran 35% slower than two splits (splits_1).
STREAM_SATURATING = 0.8
#: Splits the balancing rule takes at most, the K/V tiles each keeps at least, and the wave fill it asks.
BALANCE_SPLITS = 8
MIN_BALANCE_TILES = 8
BALANCE_EFFICIENCY = 0.9
#: Waves of the stream tiling's resident slots (SMs x its blocks per SM) the unsplit blocks must fill for a call to
#: run the waves tiling instead (more blocks per SM, fewer bytes in flight each), and the stream tiling's K/V tiles
#: per block it takes at most. With one block per SM every block starts with its pipeline empty and ends in its
#: merge while the SM streams nothing; a second resident block streams meanwhile, which pays where blocks are short.
#: Measured on the H200 (CUDA graphs, hd128, 8 KV heads; 64-key tiles x 3 stages at 2 blocks/SM against 128 x 3 at
#: 1; benchmarks/results/h200/decode_tiles and decode_waves): batch 24, 32 and 64 x 1k keys (192-512 blocks of 132
#: slots) 40.1 / 46.1 / 78.3 us against 42.5 / 47.7 / 81.4, x 4k 116.5 / 136.9 / 257.1 against 124.0 / 138.1 /
#: 258.2; below a wave the stream tiling wins (batch 16 x 1k, 128 blocks: 28.5 against 31.5; batch 8 x 1k 19.3
#: against 21.2); over 32k keys (256 tiles) it wins too, by less (batch 32 and 64: 974.3 / 1908.8 against 977.1 /
#: 1936.7). Between 4k and 32k keys unmeasured: the limit sits at 8k (64 tiles).
WAVES_MIN_FILL = 1.0
WAVES_MAX_TILES = 64


@dataclass(frozen=True)
class SplitChoice:
    splits: int
    #: The blocks of one split (batch x kv_heads x row blocks) and the resident slots (SMs x blocks per SM).
    blocks: int
    slots: int
    reason: str


@dataclass(frozen=True)
class RoleChoice:
    role: DecodeRole
    reason: str


def choose_role(*, blocks: int, tiles: int, num_sms: int, stream_blocks_per_sm: int,
                waves_blocks_per_sm: int) -> RoleChoice:
    """Which tiling a decode call of `blocks` unsplit blocks of `tiles` stream-tiling K/V tiles each runs: the waves
    tiling (waves_blocks_per_sm, 0 where the spec has none) where the blocks fill WAVES_MIN_FILL waves of the stream
    tiling's slots and keep at most WAVES_MAX_TILES tiles, else the stream tiling."""
    slots = max(1, num_sms * stream_blocks_per_sm)
    fill = f"{blocks} blocks fill {blocks / slots:.2f} waves of the stream tiling's {slots} slots"
    if not waves_blocks_per_sm:
        return RoleChoice(DecodeRole.stream, "no tiling holds more blocks per SM than the stream tiling with as "
                                             "many bytes in flight")
    if blocks < WAVES_MIN_FILL * slots:
        return RoleChoice(DecodeRole.stream, f"{fill}, fewer than {WAVES_MIN_FILL:g}")
    if tiles > WAVES_MAX_TILES:
        return RoleChoice(DecodeRole.stream, f"{fill}, but each streams {tiles} tiles, more than "
                                             f"{WAVES_MAX_TILES}: their starts and ends are a small share")
    return RoleChoice(DecodeRole.waves, f"{fill}, {tiles} tiles each: at {waves_blocks_per_sm} blocks/SM one "
                                        f"block's start and end overlap another's streaming")


def wave_efficiency(blocks: int, slots: int) -> float:
    """Busy share of the slots over the waves `blocks` blocks take."""
    waves = -(-blocks // slots)
    return blocks / (waves * slots)


def choose_splits(*, batch: int, kv_heads: int, row_blocks: int, keys: int, tile_keys: int, num_sms: int,
                  blocks_per_sm: int, dram_gbps: float, paged: bool = False) -> SplitChoice:
    """The number of KV splits of one decode call: `keys` the longest entry's keys (the cache's capacity when
    the lengths live on the GPU), `row_blocks` the 16-row blocks of one KV head's packed query rows, `dram_gbps`
    the device's peak DRAM bandwidth."""
    blocks = max(1, batch * kv_heads * row_blocks)
    slots = max(1, num_sms * blocks_per_sm)
    tiles = max(1, -(-keys // tile_keys))
    cap = max(1, min(MAX_SPLITS, tiles // MIN_TILES_PER_SPLIT))
    if blocks >= FULL_WAVE * slots:
        return SplitChoice(1, blocks, slots, f"{blocks} blocks (batch {batch} x {kv_heads} KV heads x {row_blocks} "
                                             f"row blocks) fill {blocks / slots:.0%} of {slots} resident slots: "
                                             f"no split")
    if cap == 1:
        return SplitChoice(1, blocks, slots, f"{tiles} K/V tile(s) of {tile_keys} keys: too few to split "
                                             f"({MIN_TILES_PER_SPLIT} per split at least)")
    if blocks_per_sm == 1:
        paired = _by_pairs(blocks, num_sms, tiles, paged, dram_gbps)
        if paired is not None:
            return paired
    splits = max(1, min(cap, slots // blocks))
    saved = tiles - -(-tiles // splits)
    pair_rule = blocks_per_sm == 1 and _one_per_pair(blocks, num_sms, paged)
    short = (f"; one per SM pair, {_streams(blocks, dram_gbps)[1]}: short of {STREAM_SATURATING:.0%}, so the "
             f"one-wave rule" if pair_rule else "")
    if splits > 1 and saved <= COMBINE_COST_TILES:
        return SplitChoice(1, blocks, slots, f"{splits} splits would save {saved} of {tiles} K/V tiles per block, "
                                             f"not more than the combine costs (~{COMBINE_COST_TILES} tiles)"
                                             f"{short}")
    return SplitChoice(splits, blocks, slots,
                       f"{blocks} blocks for {slots} resident slots ({num_sms} SMs x {blocks_per_sm}): {splits} "
                       f"splits of ~{-(-tiles // splits)} tiles fill one wave with {blocks * splits} blocks "
                       f"({wave_efficiency(blocks * splits, slots):.0%}; at most {cap} splits of "
                       f"{MIN_TILES_PER_SPLIT} tiles){short}")


def _one_per_pair(blocks: int, num_sms: int, paged: bool) -> bool:
    """Whether `blocks` blocks, one per SM, nearly fill one SM of every pair (PAIR_SATURATING of them, at most all)
    of a contiguous cache. A paged cache's blocks, which look their rows up, do not reach copy bandwidth one per pair
    (batch 8 x 32k keys: 388.6 us unsplit against 365.3 with 2 splits), so they keep the one-wave rule there."""
    pairs = max(1, num_sms // 2)
    return PAIR_SATURATING * pairs <= blocks <= pairs and not paged


def _streams(blocks: int, dram_gbps: float) -> tuple[bool, str]:
    """Whether `blocks` unsplit blocks stream at the device's bandwidth (STREAM_SATURATING of `dram_gbps`), and
    the figures that say so."""
    gbps = blocks * BLOCK_STREAM_GBPS
    return (gbps >= STREAM_SATURATING * dram_gbps,
            f"their streams (~{gbps:.0f} GB/s at {BLOCK_STREAM_GBPS:.0f} a block) reach {gbps / dram_gbps:.0%} of "
            f"the device's {dram_gbps:.0f} GB/s")


def _by_pairs(blocks: int, num_sms: int, tiles: int, paged: bool, dram_gbps: float) -> SplitChoice | None:
    """The split choice where one block per SM makes the SM pairs (TPCs) matter (see the module's rules), or None
    where they do not (the one-wave rule then)."""
    pairs = max(1, num_sms // 2)
    if _one_per_pair(blocks, num_sms, paged):
        saturating, figures = _streams(blocks, dram_gbps)
        if saturating:
            return SplitChoice(1, blocks, num_sms, f"{blocks} blocks, one per SM pair of {pairs}: {figures}, so "
                                                   f"they stream at copy bandwidth unsplit")
    if blocks <= pairs:
        return None
    for splits in range(2, min(BALANCE_SPLITS, tiles // MIN_BALANCE_TILES) + 1):
        if wave_efficiency(blocks * splits, num_sms) >= BALANCE_EFFICIENCY:
            return SplitChoice(splits, blocks, num_sms,
                               f"{blocks} blocks put two on some of the {pairs} SM pairs: {splits} splits of "
                               f"~{-(-tiles // splits)} tiles fill their waves to "
                               f"{wave_efficiency(blocks * splits, num_sms):.0%}, so the pairs' loads even out")
    return SplitChoice(1, blocks, num_sms, f"{blocks} blocks put two on some of the {pairs} SM pairs, but no split "
                                           f"of at most {BALANCE_SPLITS} into {MIN_BALANCE_TILES}+ tiles fills its "
                                           f"waves to {BALANCE_EFFICIENCY:.0%}: no split")
