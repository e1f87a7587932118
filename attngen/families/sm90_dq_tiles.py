"""The sm90 backward's tile-ordered dQ accumulator (HopperBwdTiling.dq_red) on the host: the layout arithmetic the
kernels share (dq_box and red_dq_frags in templates/common/hopper_bwd_dq.cuh.j2, dq_convert in
hopper_dq_convert.cuh.j2), for the launcher and the tests. The accumulator itself is
runtime.backward.buffers(tiled_dq=True): (heads, rows_stride, head_dim) fp32, each entry's query tiles where the
padded row buffers have them (padded_rows_offset)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

#: Threads of a dq_convert block (kConvertThreads in hopper_dq_convert.cuh.j2).
DQ_CONVERT_THREADS = 256
#: How dQ reaches a tile-ordered accumulator and dQ, for plan_line and explain (both consumer structures).
TILED_DQ_PATH = "red.global.add.v4.f32 into a tile-ordered accumulator, then dq_convert"
#: Chains (the KV blocks of one entry and KV head) an ordered dQ interleaves in dispatch order, at most (dq_chains).
#: More chains beside each other read more heads' Q, dO and dQ from HBM per wave.
ORDERED_DQ_CHAINS = 8
#: Rows and columns of a box of the tile-ordered dQ accumulator (one wgmma dQ product of 64 queries x 64 columns).
DQ_BOX = 64


def tiled_dq_box(block_m: int, head_dim: int, row0: int, col0: int) -> int:
    """The index of the box at query row row0, column col0 of a block_m x head_dim tile: boxes in row-major order
    (kDqBoxes x kHeadDim / 64 of them; dq_box in hopper_bwd_dq.cuh.j2)."""
    if row0 % DQ_BOX or col0 % DQ_BOX or not (0 <= row0 < block_m and 0 <= col0 < head_dim):
        raise ValueError(f"({row0}, {col0}) is not a {DQ_BOX}-aligned box of a {block_m} x {head_dim} tile")
    return row0 // DQ_BOX * (head_dim // DQ_BOX) + col0 // DQ_BOX


def tiled_dq_position(head_dim: int, i: int, swap_rows: int = 0) -> tuple[int, int]:
    """Where value i of a tile of the tile-ordered accumulator goes in the tile (row, column): box i // 4096 in
    row-major box order; in it 8-column tile j, warpgroup thread t, value e of the wgmma fragment dq[j][e] at
    512 j + 4 t + e (a warp's 16-byte reductions cover 512 contiguous bytes); the fragment's rows are
    16 (t / 32) + (t % 32) / 4 (+ 8 for e >= 2), its columns 8 j + 2 (t % 4) + e % 2 (dq_convert's mapping).
    swap_rows: the tile's query rows when its boxes are transposed products (HopperBwdTiling.dq_swap): box
    i // (64 swap_rows) holds head-dim columns 64 box.., the fragment's rows are head-dim columns and its columns
    queries."""
    box, f = divmod(i, DQ_BOX * (swap_rows or DQ_BOX))
    j, rest = divmod(f, 512)
    t, e = divmod(rest, 4)
    frag_row, frag_col = 16 * (t // 32) + (t % 32) // 4 + 8 * (e // 2), 8 * j + 2 * (t % 4) + e % 2
    if swap_rows:
        return frag_col, DQ_BOX * box + frag_row
    boxes_per_row = head_dim // DQ_BOX
    return DQ_BOX * (box // boxes_per_row) + frag_row, DQ_BOX * (box % boxes_per_row) + frag_col


def tiled_dq_rows(accum: torch.Tensor, block_m: int, entry_rows: list[int], swap: bool = False) -> torch.Tensor:
    """What dq_convert computes, unscaled, on the host (for tests): the (flat rows, heads, head_dim) dQ of a
    tile-ordered (heads, rows_stride, head_dim) accumulator whose entries of `entry_rows` queries start at whole
    tiles (padded_rows_offset); swap: its boxes are transposed products (HopperBwdTiling.dq_swap)."""
    import torch

    heads, _, d = accum.shape
    order = torch.tensor([r * d + c for r, c in map(lambda i: tiled_dq_position(d, i, block_m if swap else 0),
                                                             range(block_m * d))])
    out, flat = [], 0
    for b, rows in enumerate(entry_rows):
        start = (flat + b * block_m) // block_m * block_m
        tiles = -(-rows // block_m)
        seg = accum[:, start:start + tiles * block_m].reshape(heads, tiles, block_m * d)
        dense = torch.empty_like(seg)
        dense[..., order] = seg
        out.append(dense.reshape(heads, tiles * block_m, d)[:, :rows].transpose(0, 1))
        flat += rows
    return torch.cat(out)


def dq_chains(kv_blocks: int, chains: int, sms: int) -> int:
    """How many chains (entry, KV head) of `kv_blocks` KV blocks each an ordered dQ's dK/dV grid interleaves in dispatch
    order (BwdParams.dq_chains): as many as fit beside each other in one wave of `sms` blocks, a power of two
    dividing `chains`, at most ORDERED_DQ_CHAINS. A tile's semaphore admits a chain's blocks one at a time; one chain
    filling the SMs pays its ranks' stagger in every wave's first tiles, where chains side by side overlap it.
    Measured on the H100 (results/h100/dq_chains/after_grant, deterministic TFLOP/s, interleaving 1 / 2 / 4): hd256
    2k (32 KV blocks a chain) 230 / 253 / 282 unmasked, 223 / 233 / 240 causal; hd128 8k (64) 473 / 494 / 460 and
    436 / 454 / 427; hd256 8k (128) 312 / 335 / 316 and 310 / 296 / 217 (a causal order's long blocks last)."""
    if kv_blocks < 1 or chains < 1 or sms < 1:
        raise ValueError(f"kv_blocks, chains and sms must be positive, got {kv_blocks}, {chains}, {sms}")
    fit = min(ORDERED_DQ_CHAINS, max(1, sms // kv_blocks))
    g = 1
    while 2 * g <= fit and chains % (2 * g) == 0:
        g *= 2
    return g


def dkdv_slot(block: tuple[int, int, int], grid: tuple[int, int, int], chains: int) -> tuple[int, int, int]:
    """The (rank, KV head, entry slot) of the sm90 dK/dV block at blockIdx `block` of `grid` (dkdv_slot in
    hopper_bwd.cuh.j2). Chain y + Y z is KV head y of entry slot z; with `chains` > 1 (dq_chains) groups of g chains,
    g the largest power of two dividing Y Z up to `chains`, take their g X blocks in dispatch order rank by rank, so
    a block's lower ranks in its chain are dispatched before it."""
    (x, y, z), (gx, gy, gz) = block, grid
    if chains <= 1:
        return x, y, z
    chain = y + gy * z
    g = min(chains, (gy * gz) & -(gy * gz))
    w = (chain % g) * gx + x
    mine = chain - chain % g + w % g
    return w // g, mine % gy, mine // gy
