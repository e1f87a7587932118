"""How many KV splits a decode call runs: a pure function of the call's shape and the plan's residency.

A decode block holds 16 packed query rows of one KV head of one entry; with few entries and KV heads there are
far fewer blocks than SMs, and each would stream a whole cache alone. Splitting every entry's keys into runs
that separate blocks read (and a combine kernel merges by their LSE) puts every SM to work. The choice:

- no split when the blocks already fill every SM's resident slots (FULL_WAVE of them);
- else the fewest splits whose wave efficiency (blocks / (waves x slots)) reaches EFFICIENCY_SHARE of the best
  any count up to the cap reaches, the cap being MAX_SPLITS and MIN_TILES_PER_SPLIT tiles per split.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Splits at most: the combine kernel's warp reads one LSE per split per lane pass, and past this many the
#: partial outputs (fp32, splits x rows x head_dim) cost more traffic than the extra parallelism returns.
MAX_SPLITS = 128
#: K/V tiles a split keeps at least: a split of one tile leaves its block's cp.async ring empty half the time.
MIN_TILES_PER_SPLIT = 2
#: Share of the resident slots the unsplit blocks must fill to skip splitting (wave tails below it cost more
#: than the combine kernel's launch and its fp32 partials).
FULL_WAVE = 0.8
#: Among split counts, the fewest whose wave efficiency is within this share of the best (fewer splits: less
#: partial traffic, a lighter combine).
EFFICIENCY_SHARE = 0.85


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
    effs = {s: wave_efficiency(blocks * s, slots) for s in range(1, cap + 1)}
    best = max(effs.values())
    splits = min(s for s, e in effs.items() if e >= EFFICIENCY_SHARE * best)
    return SplitChoice(splits, blocks, slots,
                       f"{blocks} blocks for {slots} resident slots ({num_sms} SMs x {blocks_per_sm}): {splits} "
                       f"splits of ~{-(-tiles // splits)} tiles make {blocks * splits} blocks at "
                       f"{effs[splits]:.0%} wave efficiency (best up to {cap} splits: {best:.0%})")
