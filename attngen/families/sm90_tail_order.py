"""The order in which the Hopper kernels' blocks are dispatched under a causal mask: the grid's last chains dealt
heaviest block first (HopperBwdPlan.tail_waves for the dK/dV kernel, KernelPlan.tail_waves for the forward).

Both grids run one block per SM and put a chain's blocks fastest: the dK/dV grid is (KV block, KV head, entry), the
forward's (query block, head, entry) with its query blocks reversed. A causal mask makes a chain's first block the
heaviest (KV block 0 sees every query tile; the last query block sees every key) and its last the lightest, so each
chain dispatches heaviest first, chain after chain. Dispatch follows that order, so the grid ends on the last chains'
heaviest blocks, started when the SMs are already draining, and the SMs that finish their light blocks idle through
them: in the backward at hd128 2k causal the first SM went idle at 591 of 654 us
(results/h100/block_trace_phases/hd128_s2048_causal.json), the wave's tail ~6% of the span.

The tail order deals the last `tail` chains' blocks heaviest first across those chains (every one's first block, then
every one's second, ...), so the grid ends on light blocks. Only the tail: a backward grid dealt so from the start
(sections of chains whose query tiles fit 40 MB of L2; benchmarks/experiments/next-bwd-lpt.patch, results/h100/bwd_lpt)
measured 1-5% slower at hd64/128 causal, the blocks in flight spread over more chains' query tiles all through the
run. The kernels compute the same mapping from blockIdx (tail_order.cuh.j2); tail_slot is its host mirror.
"""

from __future__ import annotations

import math

from ..features.variant import variant_of
from ..planning.ir_bwd import HopperBwdPlan, HopperBwdTiling
from ..spec.model import AttentionSpec, SeqlensKind

#: The dK/dV kernel: waves of the GPU's SMs (one block each) that the tail covers, its chains the fewest whose blocks
#: fill this many waves (0: the grid's own order). Predicted (a greedy list schedule of blocks costing 2 + steps of 64
#: queries, durations +-10%, 132 SMs, FA3-paper shapes): 1.07-1.09 of the ideal span -> 1.01-1.02. Measured on the
#: H100 (results/h100/tail_order/tail_1, causal, TFLOP/s against the grid's order): 2 waves +2% at hd64, +4-5.5% at
#: hd128/192 2k-8k, +4.5 / 3.8% at hd256 2k / 4k, level at hd256 8k; 1 wave less at every point but one.
BWD_TAIL_WAVES = 2.0
#: The forward's (Hopper, warp-specialized): the same rule over its query blocks. Measured on the H100
#: (results/h100/tail_order/fwd_tail_1, causal, TFLOP/s against the grid's order): +2.0-3.5% at hd64, +3.7-4.8% at
#: hd128 2k-8k, +6.7-9.6% at hd256 2k-8k, level at hd128/256 16k; three waves read the same as two.
FWD_TAIL_WAVES = 2.0
#: The forward's tail holds at most the chains whose K and V fit this much L2 together (the tail's blocks read their
#: chains' keys side by side). Why: at hd256 16k (16 MB of K and V a chain) a tail of 3 chains measured 2% slower than
#: the grid's order, where 8k's 5 chains of 8 MB gained 7% (results/h100/tail_order/fwd_tail_1). 0: no cap. A module
#: constant for the device A/B.
FWD_TAIL_L2_BYTES = 40 * 2**20


def causal_tail_serves(spec: AttentionSpec) -> bool:
    """Blocks whose work falls along their chain (a causal mask: every key sees the queries from its own on) in dense
    batches (a packed batch's grid orders its entries longest first already)."""
    band = variant_of(spec).mask.band
    causal = band is not None and band[0] < 0 <= band[1]
    return causal and spec.seqlens is SeqlensKind.fixed


def tail_order_serves(spec: AttentionSpec, tiling: HopperBwdTiling) -> bool:
    """The dK/dV kernel: a causal tail (causal_tail_serves) whose dQ is added in any order (an ordered dQ admits a
    chain's blocks by their rank, which is their dispatch order)."""
    return causal_tail_serves(spec) and not tiling.ordered_dq


def bwd_tail_waves(spec: AttentionSpec, tiling: HopperBwdTiling) -> float:
    """HopperBwdPlan.tail_waves: BWD_TAIL_WAVES where the tail order serves, else 0."""
    return BWD_TAIL_WAVES if tail_order_serves(spec, tiling) else 0.0


def fwd_tail_waves(spec: AttentionSpec) -> float:
    """KernelPlan.tail_waves of the Hopper forward: FWD_TAIL_WAVES where the causal tail serves, else 0."""
    return FWD_TAIL_WAVES if causal_tail_serves(spec) else 0.0


def tail_chains(blocks: int, chains: int, sms: int, waves: float, most: int = 0) -> int:
    """The chains (entry, head) at the grid's end whose blocks are dealt heaviest first (the kernels' tail_chains
    parameter): the fewest whose `blocks` blocks each fill `waves` waves of `sms` blocks, at most all and at most
    `most` (0: no cap); below 2 the order is the grid's own (0)."""
    if blocks < 1 or chains < 1 or sms < 1:
        raise ValueError(f"blocks, chains and sms must be positive, got {blocks}, {chains}, {sms}")
    if waves <= 0:
        return 0
    tail = min(chains, math.ceil(waves * sms / blocks), most or chains)
    return tail if tail >= 2 else 0


def call_tail_chains(blocks: int, chains: int, q: object, waves: float, most: int = 0) -> int:
    """tail_chains for a call whose query tensor is `q`, over its GPU's SMs; 0 where `q` is not on a GPU (nothing
    launches those calls: the CPU tests' prepared calls with recorded launches)."""
    import torch

    if not waves or not isinstance(q, torch.Tensor) or not q.is_cuda:
        return 0
    from ..runtime.device import sm_count

    return tail_chains(blocks, chains, sm_count(q.device.index or 0), waves, most)


def fwd_tail_cap(seqlen_k: int, head_dim: int, elem_bytes: int) -> int:
    """The most chains of the forward's tail: as many as FWD_TAIL_L2_BYTES holds of K and V (0: no cap)."""
    chain = 2 * seqlen_k * head_dim * elem_bytes
    return max(1, FWD_TAIL_L2_BYTES // max(1, chain)) if FWD_TAIL_L2_BYTES else 0


def tail_slot(block: tuple[int, int, int], grid: tuple[int, int, int], tail: int) -> tuple[int, int, int]:
    """The (position in its chain, y, z) of the block at blockIdx `block` of `grid` with the last `tail` chains dealt
    heaviest first: the tail's t-th block in dispatch order is position t // tail of its chain t % tail (chain
    y + Y z). The position is the KV block (dK/dV) or the query block counted from the last (forward)."""
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


def fwd_order_line(waves: float) -> str:
    """The Hopper forward's dispatch order, and why, for explain."""
    if waves:
        return (f"block order: query blocks heaviest first, then head, then entry; the chains that fill the last "
                f"{waves:g} waves of SMs dealt heaviest block first across each other (the grid would end on the "
                f"last chains' heaviest)")
    return "block order: query blocks heaviest first, then head, then entry (the grid's own)"
