"""The order in which the Hopper backward's dK/dV blocks are dispatched under a causal mask (HopperBwdPlan.tail_waves).

The grid is (KV block, KV head, entry), the KV block fastest: chain c = y + Y z (one entry's KV head) dispatches its
blocks from block 0, which a causal mask gives every query tile, down to the last, which sees one; chain after chain.
Dispatch follows that order, so the grid ends on the last chains' heaviest blocks, started when the SMs are already
draining, and the SMs that finish their light blocks idle through them: at hd128 2k causal the first SM went idle
at 591 of 654 us (results/h100/block_trace_phases/hd128_s2048_causal.json), the wave's tail ~6% of the span.

The tail order deals the last `tail` chains' blocks heaviest first across those chains (every one's block 0, then every
one's block 1, ...), so the grid ends on light blocks. Only the tail: a grid dealt so from the start (sections of
chains whose query tiles fit 40 MB of L2; benchmarks/experiments/next-bwd-lpt.patch, results/h100/bwd_lpt) measured
1-5% slower at hd64/128 causal, the blocks in flight spread over more chains' query tiles all through the run. The
kernel computes the same mapping from blockIdx (dkdv_slot in hopper_bwd.cuh.j2); tail_slot is its host mirror.
"""

from __future__ import annotations

import math

from ..features.variant import variant_of
from ..planning.ir import HopperBwdPlan, HopperBwdTiling
from ..spec.model import AttentionSpec, SeqlensKind

#: Waves of the GPU's SMs (one dK/dV block each) that the tail covers: its chains are the fewest whose blocks fill
#: this many waves. Prediction (a greedy list schedule of blocks costing 2 + steps of 64 queries, durations +-10%,
#: 132 SMs, FA3-paper shapes; 0 turns it off): 1.07-1.09 of the ideal span -> 1.01-1.02 at hd128/192/256 2k-8k
#: (hd256 8k and 16k already ~1.01), hd64 1.03 -> 1.01. A module constant for the device A/B.
TAIL_WAVES = 2.0


def tail_order_serves(spec: AttentionSpec, tiling: HopperBwdTiling) -> bool:
    """KV blocks whose work falls with their index (a causal mask: every key sees the queries from its own on), dense
    batches (a packed batch's grid orders its entries longest first already), dQ added in any order (an ordered dQ
    admits a chain's blocks by their rank, which is their dispatch order)."""
    band = variant_of(spec).mask.band
    causal = band is not None and band[0] < 0 <= band[1]
    return causal and spec.seqlens is SeqlensKind.fixed and not tiling.ordered_dq


def tail_waves(spec: AttentionSpec, tiling: HopperBwdTiling) -> float:
    """HopperBwdPlan.tail_waves: TAIL_WAVES where the tail order serves, else 0."""
    return TAIL_WAVES if tail_order_serves(spec, tiling) else 0.0


def tail_chains(kv_blocks: int, chains: int, sms: int, waves: float) -> int:
    """The chains (entry, KV head) at the grid's end whose blocks are dealt heaviest first (BwdParams.tail_chains): the
    fewest whose `kv_blocks` blocks each fill `waves` waves of `sms` blocks, at most all; below 2 the order is the
    grid's own."""
    if kv_blocks < 1 or chains < 1 or sms < 1:
        raise ValueError(f"kv_blocks, chains and sms must be positive, got {kv_blocks}, {chains}, {sms}")
    if waves <= 0:
        return 0
    tail = min(chains, math.ceil(waves * sms / kv_blocks))
    return tail if tail >= 2 else 0


def tail_slot(block: tuple[int, int, int], grid: tuple[int, int, int], tail: int) -> tuple[int, int, int]:
    """The (KV block, KV head, entry slot) of the dK/dV block at blockIdx `block` of `grid` with the last `tail` chains
    dealt heaviest first: the tail's t-th block in dispatch order is block t // tail of its chain t % tail."""
    (x, y, z), (gx, gy, gz) = block, grid
    chains = gy * gz
    chain = y + gy * z
    if tail < 2 or chain < chains - tail:
        return x, y, z
    t = (chain - (chains - tail)) * gx + x
    mine = chains - tail + t % tail
    return t // tail, mine % gy, mine // gy


def order_line(plan: HopperBwdPlan) -> str:
    """The dK/dV blocks' dispatch order, and why, for explain."""
    if plan.tail_waves:
        return (f"block order: KV block fastest, then KV head, then entry; the chains that fill the last "
                f"{plan.tail_waves:g} waves of SMs dealt heaviest block first across each other (a causal mask's "
                f"blocks lighten with their index, and the grid would end on the last chains' heaviest)")
    if plan.dkdv_wgmma.ordered_dq:
        return "block order: by rank within each chain, as the ordered dQ admits them (dq_chains chains side by side)"
    return "block order: KV block fastest, then KV head, then entry (the grid's own)"
