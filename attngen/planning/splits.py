"""How many KV splits a decode call runs: a pure function of the call's shape and the plan's residency.

A decode block holds 16 packed query rows of one KV head of one entry; with few entries and KV heads there are
far fewer blocks than SMs, and each would stream a whole cache alone. Splitting every entry's keys into runs
that separate blocks read (and a combine kernel merges by their LSE) puts every SM to work. The choice:

- no split when the blocks already fill FULL_WAVE of the resident slots (SMs x blocks per SM);
- else as many splits as one wave of the slots holds, at most MAX_SPLITS and one per MIN_TILES_PER_SPLIT tiles,
  unless that saves each block no more than COMBINE_COST_TILES tiles of streaming.

Measured on the H100 (benchmarks/results/h100/decode/sweep_1 and sweep_2, NOTES.md): at batch 1 (8 blocks, 132
slots) 16 splits beat 8 and 32 at 32k and 128k keys (70 vs 87 and 84 us at 32k); a second wave of splits always
lost; short caches at half a wave of blocks run best unsplit.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class SplitChoice:
    splits: int
    #: The blocks of one split (batch x kv_heads x row blocks) and the resident slots (SMs x blocks per SM).
    blocks: int
    slots: int
    reason: str


def wave_efficiency(blocks: int, slots: int) -> float:
    """Busy share of the slots over the waves `blocks` blocks take."""
    waves = -(-blocks // slots)
    return blocks / (waves * slots)


def choose_splits(*, batch: int, kv_heads: int, row_blocks: int, keys: int, tile_keys: int, num_sms: int,
                  blocks_per_sm: int) -> SplitChoice:
    """The number of KV splits of one decode call: `keys` the longest entry's keys (the cache's capacity when
    the lengths live on the GPU), `row_blocks` the 16-row blocks of one KV head's packed query rows."""
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
    splits = max(1, min(cap, slots // blocks))
    saved = tiles - -(-tiles // splits)
    if splits > 1 and saved <= COMBINE_COST_TILES:
        return SplitChoice(1, blocks, slots, f"{splits} splits would save {saved} of {tiles} K/V tiles per block, "
                                             f"not more than the combine costs (~{COMBINE_COST_TILES} tiles)")
    return SplitChoice(splits, blocks, slots,
                       f"{blocks} blocks for {slots} resident slots ({num_sms} SMs x {blocks_per_sm}): {splits} "
                       f"splits of ~{-(-tiles // splits)} tiles fill one wave with {blocks * splits} blocks "
                       f"({wave_efficiency(blocks * splits, slots):.0%}; at most {cap} splits of "
                       f"{MIN_TILES_PER_SPLIT} tiles)")
