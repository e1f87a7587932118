"""The flat grid of a packed (varlen) batch: one block per (entry, head, tile) that exists, none past an entry's rows.

A 3-D grid (tiles of the longest entry, heads, entries) launches a block for every tile of the longest entry in
every entry; a block past its entry's rows exits, but only after loading the lengths, ~0.6 us of an SM each on
the H100 (benchmarks/results/h100/varlen_grid: 16 entries of 2k with max_seqlen 32k took the forward from 0.54 to
0.83 ms). The flat grid's blocks find their tile in a table the cubin's `<kernel>_tiles` entry builds on the GPU
from the cumulative lengths (templates/common/tile_table.cuh.j2), so no host sync learns the lengths: the grid is
sized by an upper bound on the tiles and the few blocks past the last one exit. Entries keep the 3-D grid's order
(decreasing work, every head of an entry before the next), and batches of more than MAX_ENTRIES entries keep the
3-D grid (the table's block ranks entries in shared memory). The table also gives the entries' order alone, the
batch_order of kernels that keep a 3-D grid: the sm90 dK/dV kernel measured 7-10% slower on a flat grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ..codegen.abi import TILE_TABLE_MAX_ENTRIES as MAX_ENTRIES
from ..codegen.abi import TILE_TABLE_PARAMS, ctypes_struct

#: Threads of the table's one block (templates/common/tile_table.cuh.j2 kTableThreads).
TABLE_THREADS = 1024


@dataclass(frozen=True)
class TileSide:
    """Which rows of the entries a kernel's blocks tile: the keys (key_side) or the queries, `tile_rows` a block,
    each entry's rows first rounded up to `pad_rows`."""
    key_side: bool
    tile_rows: int
    pad_rows: int = 0

    @property
    def pad(self) -> int:
        return self.pad_rows or self.tile_rows

    def tiles(self, rows: int) -> int:
        """The tiles of an entry of `rows` rows (padded first)."""
        return -(-(-(-rows // self.pad) * self.pad) // self.tile_rows)


def serves(seqs: Any, args: Any) -> bool:
    """Whether a call runs on a flat grid: packed, with at most MAX_ENTRIES entries, and no tensor of its variant
    indexed by the entry (`args`: the call's VariantArgs; those kernels take the entry from blockIdx.z)."""
    return bool(seqs.is_packed) and 0 < seqs.batch <= MAX_ENTRIES and not args.indexes_entries


def blocks(seqs: Any, side: TileSide, heads: int, total_rows: int) -> int:
    """The flat grid's blocks: heads x an upper bound on the entries' tiles (`total_rows` the packed side's rows):
    each entry adds at most one partial padding unit and one partial tile to its rows' share, and no entry has
    more tiles than the longest."""
    per_entry = side.tiles(seqs.seqlen_k if side.key_side else seqs.seqlen_q)
    bound = -(-(total_rows + seqs.batch * (side.pad - 1)) // side.tile_rows) + seqs.batch
    return heads * max(0, min(bound, seqs.batch * per_entry))


@dataclass(frozen=True)
class TileTable:
    """A built table: `rows` (entries + 1, 4) int32 for a flat grid, `order` the entries alone in the rows' order
    (the batch_order of a kernel on a 3-D grid); both on the GPU."""
    rows: Any
    order: Any

    def attach(self, params: Any, entries: int) -> None:
        """Point a flat-grid kernel's parameter block at the table."""
        params.tile_table = self.rows.data_ptr()
        params.tile_entries = entries


def build(fn: Any, stream: int, seqs: Any, side: TileSide) -> TileTable:
    """The table of `side` for a packed call, built on `stream` by the cubin's table entry point `fn` (a
    LoadedFunction)."""
    import torch

    from .driver import launch

    store = torch.empty(5 * seqs.batch + 4, dtype=torch.int32, device=seqs.cu_seqlens_q.device)
    table = TileTable(rows=store[:4 * seqs.batch + 4].view(-1, 4), order=store[4 * seqs.batch + 4:])
    params = _struct()(cu_seqlens_q=seqs.cu_seqlens_q.data_ptr(), cu_seqlens_k=seqs.cu_seqlens_k.data_ptr(),
                       table=table.rows.data_ptr(), order=table.order.data_ptr(), entries=seqs.batch,
                       key_side=int(side.key_side), tile_rows=side.tile_rows, pad_rows=side.pad)
    launch(fn, (1, 1, 1), TABLE_THREADS, stream, params)
    return table


def reference(cu_q: list[int], cu_k: list[int], side: TileSide) -> list[tuple[int, int, int, int]]:
    """The table the kernel builds, in Python: rows (first tile, entry, tiles, 0) by decreasing work (ties by
    index), then (all tiles, -1, 0, 0)."""
    n = len(cu_q) - 1
    sq = [cu_q[i + 1] - cu_q[i] for i in range(n)]
    sk = [cu_k[i + 1] - cu_k[i] for i in range(n)]
    order = sorted(range(n), key=lambda i: (-sq[i] * sk[i], i))
    rows, start = [], 0
    for i in order:
        tiles = side.tiles(sk[i] if side.key_side else sq[i])
        rows.append((start, i, tiles, 0))
        start += tiles
    return [*rows, (start, -1, 0, 0)]


def lookup(table: list[tuple[int, int, int, int]], heads: int, t: int) -> tuple[int, int, int, int]:
    """Block t's (entry, head, tile, tiles), as the kernels' flat_tile finds it (the last row starting at or below
    t, searched 32 rows a step); entry -1 past the last tile."""
    lo, n = 0, len(table)
    while True:
        step = -(-n // 32)
        below = [k for k in range(32) if k * step < n and table[lo + k * step][0] * heads <= t]
        k = max(below)
        if step == 1:
            start, entry, tiles, _ = table[lo + k]
            break
        lo, n = lo + k * step, min(step, n - k * step)
    if entry < 0 or tiles == 0:
        return (-1, 0, 0, 0)
    r = t - start * heads
    return (entry, r // tiles, r % tiles, tiles)


@cache
def _struct() -> type[Any]:
    return ctypes_struct(TILE_TABLE_PARAMS, "TileTableParams")
