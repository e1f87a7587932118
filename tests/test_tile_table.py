"""The flat grid of a packed batch (attngen/runtime/tile_table.py): the tile table's order and starts, the blocks'
lookup (the kernels' flat_tile, mirrored in Python) covering every (entry, head, tile) once in the 3-D grid's
order, the grid's upper bound, and which plans build a table."""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from attngen.codegen.abi import tile_table_entry
from attngen.codegen.renderer import render
from attngen.features.variant import variant_of
from attngen.planning.planner import plan
from attngen.planning.planner_bwd import plan_bwd
from attngen.runtime import tile_table
from attngen.runtime.tile_table import TileSide
from attngen.runtime.variant_args import KernelVariant, VariantArgs
from attngen.spec.loader import load_spec
from attngen.spec.model import Arch, AttentionSpec


def _cu(lengths: list[int]) -> list[int]:
    return [0, *itertools.accumulate(lengths)]


def _seqs(lq: list[int], lk: list[int]) -> SimpleNamespace:
    return SimpleNamespace(is_packed=True, batch=len(lq), seqlen_q=max(lq), seqlen_k=max(lk))


def test_rows_are_entries_by_decreasing_work_then_a_closing_row() -> None:
    lq, lk = [100, 0, 300, 300, 5], [100, 40, 300, 10, 5]
    table = tile_table.reference(_cu(lq), _cu(lk), TileSide(key_side=False, tile_rows=128))
    # work: 10000, 0, 90000, 3000, 25 -> entries 2, 0, 3, 4, 1
    assert [r[1] for r in table] == [2, 0, 3, 4, 1, -1]
    assert [r[2] for r in table[:-1]] == [3, 1, 3, 1, 0]
    assert [r[0] for r in table] == [0, 3, 4, 7, 8, 8]


def test_ties_keep_the_entries_order_and_padding_rounds_first() -> None:
    table = tile_table.reference(_cu([64, 64, 64]), _cu([64, 64, 64]), TileSide(key_side=True, tile_rows=32,
                                                                               pad_rows=128))
    assert [r[1] for r in table] == [0, 1, 2, -1]
    assert [r[2] for r in table[:-1]] == [4, 4, 4]   # 64 rows padded to 128: four 32-row tiles


@pytest.mark.parametrize("entries", [1, 7, 33, 100, 1500])
def test_every_tile_of_every_head_is_one_block_in_the_3d_grids_order(entries: int) -> None:
    rng = random.Random(entries)
    lq = [rng.choice([0, 1, rng.randrange(1, 700)]) for _ in range(entries)]
    lk = [rng.choice([0, rng.randrange(1, 700)]) for _ in range(entries)]
    heads = 3
    for side in (TileSide(False, 128), TileSide(True, 128), TileSide(False, 32, pad_rows=64)):
        table = tile_table.reference(_cu(lq), _cu(lk), side)
        total = table[-1][0]
        seen = [tile_table.lookup(table, heads, t) for t in range(total * heads)]
        expected = [(entry, h, tile, tiles) for _, entry, tiles, _ in table[:-1]
                    for h in range(heads) for tile in range(tiles)]
        assert seen == expected
        bound = tile_table.blocks(_seqs(lq, lk), side, heads, sum(lk if side.key_side else lq))
        assert total * heads <= bound
        longest = max(lk if side.key_side else lq)
        grid_3d = heads * entries * -(-(-(-longest // side.pad) * side.pad) // side.tile_rows)
        assert bound <= grid_3d
        for t in range(total * heads, bound):
            assert tile_table.lookup(table, heads, t)[0] == -1


def _args(spec: AttentionSpec) -> VariantArgs:
    """A call's VariantArgs for a kernel of `spec` (what the launchers pass tile_table.serves)."""
    kernel = KernelVariant.of(variant_of(spec))
    return VariantArgs(kernel.fields, indexes_entries=kernel.indexes_entries)


def test_large_batches_and_entry_indexed_variants_keep_the_3d_grid() -> None:
    spec = _args(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    assert tile_table.serves(SimpleNamespace(is_packed=True, batch=tile_table.MAX_ENTRIES), spec)
    assert not tile_table.serves(SimpleNamespace(is_packed=True, batch=tile_table.MAX_ENTRIES + 1), spec)
    assert not tile_table.serves(SimpleNamespace(is_packed=False, batch=4), spec)
    document = _args(load_spec(Path(__file__).parent.parent / "specs" / "document_bf16_hd128.yaml"))
    assert not tile_table.serves(SimpleNamespace(is_packed=True, batch=4), document)


def test_varlen_sm90_plans_carry_the_table_builder() -> None:
    varlen = AttentionSpec(head_dim=128, dtype="bf16", mask="causal", seqlens="varlen")
    dense = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    for spec, built in ((varlen, True), (dense, False)):
        fwd, bwd = plan(spec, Arch.sm90), plan_bwd(spec, Arch.sm90)
        for kernel_plan in (fwd, bwd):
            source = render(kernel_plan)
            name = tile_table_entry(kernel_plan.kernel_name)
            assert (name in source.entry_names) is built
            assert (f"{name}(const attngen::TileTableParams p)" in source.code) is built
