"""Context-parallel attention: one sequence split across the ranks of a torch.distributed process group.

`ContextParallelAttention(spec, group)` runs a spec's attention over per-rank shards of q, k and v: K and V
circulate around a ring (or are gathered once, for short contexts), each rank's partial outputs merge by LSE,
and the backward circulates the dK/dV sums the same way. Masks and score mods see global positions. `shard`
and `unshard` cut and reassemble full-sequence tensors in the chosen layout.
"""

from .api import ContextParallelAttention
from .layout import Layout, Piece, pieces, shard, unshard
from .plan import CpPlan, Rates, Strategy, choose

__all__ = ["ContextParallelAttention", "CpPlan", "Layout", "Piece", "Rates", "Strategy", "choose", "pieces", "shard",
           "unshard"]
