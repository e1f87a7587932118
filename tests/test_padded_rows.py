"""The backward's padded row buffers (D and the LSE in log2 units, one tile of query rows bulk-copied per step):
the kernels' offset formula (features/seqlens.cuh.j2 padded_rows_offset) keeps every entry's rows, rounded up
to a tile, inside its own aligned slice of runtime.backward.padded_rows values."""

from __future__ import annotations

import random

import pytest

from attngen.runtime.backward import padded_rows


def entry_start(flat_row: int, entry: int, tile: int) -> int:
    """padded_rows_offset's per-entry part, as the template computes it."""
    return (flat_row + entry * tile) // tile * tile


@pytest.mark.parametrize("tile", [64, 128])
@pytest.mark.parametrize("seed", range(20))
def test_entries_get_disjoint_whole_tiles(tile: int, seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.choice([0, 1, tile - 1, tile, tile + 1, rng.randint(0, 5000)]) for _ in range(rng.randint(1, 12))]
    stride = padded_rows(sum(lengths), len(lengths), tile)
    assert stride % tile == 0
    taken: list[tuple[int, int]] = []
    flat = 0
    for entry, n in enumerate(lengths):
        start = entry_start(flat, entry, tile)
        end = start + -(-n // tile) * tile  # the rows a step's copy reads: whole tiles
        assert start % tile == 0 and end <= stride, (lengths, entry)
        taken.append((start, end))
        flat += n
    for (_, end), (start, _) in zip(taken, taken[1:], strict=False):
        assert end <= start, (lengths, taken)


def test_dense_batches_use_the_same_formula() -> None:
    # dense: entry b's flat row is b x seqlen_q
    for seqlen, batch, tile in ((17, 3, 128), (4096, 2, 64), (100, 5, 64)):
        stride = padded_rows(seqlen * batch, batch, tile)
        ends = [entry_start(b * seqlen, b, tile) + -(-seqlen // tile) * tile for b in range(batch)]
        starts = [entry_start(b * seqlen, b, tile) for b in range(batch)]
        assert max(ends) <= stride
        assert all(e <= s for e, s in zip(ends, starts[1:], strict=False))
