"""How a sequence is split across the ranks of a context-parallel group.

A rank's shard is a list of `Piece`s, each a run of consecutive global positions, laid end to end in the
rank's local tensors. `contiguous` gives rank r the r-th of W equal runs. `zigzag` cuts the sequence into 2W
equal chunks and gives rank r chunks r and 2W-1-r, so that under a causal mask every rank has the same work
(the early chunk sees few keys, the late one many): the layout of PyTorch's head-tail load balancer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class Layout(str, Enum):
    contiguous = "contiguous"
    zigzag = "zigzag"


@dataclass(frozen=True)
class Piece:
    """Global positions [start, start + length) of the sequence, at local rows [local, local + length)."""

    start: int
    length: int
    local: int

    @property
    def stop(self) -> int:
        return self.start + self.length


def layout_of(value: Layout | str) -> Layout:
    try:
        return Layout(value)
    except ValueError:
        allowed = ", ".join(repr(x.value) for x in Layout)
        raise ValueError(f"layout must be one of {allowed}, got {value!r}") from None


def chunks_per_rank(layout: Layout) -> int:
    return 2 if layout is Layout.zigzag else 1


def check_seqlen(seqlen: int, world: int, layout: Layout, what: str = "the sequence") -> None:
    parts = world * chunks_per_rank(layout)
    if seqlen <= 0 or seqlen % parts:
        raise ValueError(f"{what} has {seqlen} positions; a {layout.value} split over {world} ranks needs a positive "
                         f"multiple of {parts}: pad the sequence (and mask the padding) or pick another world size")


def pieces(layout: Layout | str, rank: int, world: int, seqlen: int) -> tuple[Piece, ...]:
    """The pieces of global positions rank `rank` holds, in local order, for a sequence of `seqlen`."""
    layout = layout_of(layout)
    check_seqlen(seqlen, world, layout)
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")
    if layout is Layout.contiguous:
        size = seqlen // world
        return (Piece(rank * size, size, 0),)
    size = seqlen // (2 * world)
    return (Piece(rank * size, size, 0), Piece((2 * world - 1 - rank) * size, size, size))


def shard(x: torch.Tensor, rank: int, world: int, layout: Layout | str = Layout.zigzag,
          dim: int = 1) -> torch.Tensor:
    """Rank `rank`'s shard of the full-sequence tensor `x` (sequence along `dim`), contiguous."""
    import torch

    layout = layout_of(layout)
    parts = pieces(layout, rank, world, x.shape[dim])
    return torch.cat([x.narrow(dim, p.start, p.length) for p in parts], dim=dim).contiguous()


def unshard(shards: list[torch.Tensor], layout: Layout | str = Layout.zigzag, dim: int = 1) -> torch.Tensor:
    """The full-sequence tensor from every rank's shard, in rank order (the inverse of `shard`)."""
    import torch

    layout = layout_of(layout)
    world = len(shards)
    seqlen = sum(s.shape[dim] for s in shards)
    placed: list[tuple[int, torch.Tensor]] = []
    for rank, local in enumerate(shards):
        for p in pieces(layout, rank, world, seqlen):
            placed.append((p.start, local.narrow(dim, p.local, p.length)))
    return torch.cat([t for _, t in sorted(placed, key=lambda item: item[0])], dim=dim)
