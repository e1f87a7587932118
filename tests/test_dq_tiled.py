"""The sm90 backward's tile-ordered dQ accumulator (HopperBwdTiling.dq_red): its layout arithmetic on the host, the
planner's switches (sm90_bwd_rows.DQ_RED, sm90_bwd_split.SPLIT_DQ_V4) and what they render. No GPU needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from attngen.codegen.renderer import render
from attngen.families import sm90_bwd, sm90_bwd_rows, sm90_bwd_split
from attngen.families import sm90_dq_tiles as tiles
from attngen.planning.ir_bwd import HopperBwdPlan
from attngen.planning.planner_bwd import plan_bwd
from attngen.runtime import backward as rt
from attngen.spec.model import Arch, AttentionSpec
from attngen.toolchain import builder as build

SHAPES = [(128, 64), (64, 128), (64, 192), (64, 256)]   # (block_m, head_dim) of hd64, hd128 and the split


def _plan(head_dim: int, **update: object) -> HopperBwdPlan:
    p = plan_bwd(AttentionSpec(**{"head_dim": head_dim, "dtype": "bf16", "mask": "none", **update}), Arch.sm90)
    assert isinstance(p, HopperBwdPlan)
    return p


def _wgmma_fragment(j: int, t: int, e: int) -> tuple[int, int]:
    """Row and column of value e of an m64nNk16 accumulator's 8-column tile j in warpgroup thread t (PTX ISA)."""
    return 16 * (t // 32) + (t % 32) // 4 + 8 * (e // 2), 8 * j + 2 * (t % 4) + e % 2


@pytest.mark.parametrize(("block_m", "head_dim"), SHAPES)
def test_tiled_positions_are_a_permutation_in_fragment_order(block_m: int, head_dim: int) -> None:
    pos = [tiles.tiled_dq_position(head_dim, i) for i in range(block_m * head_dim)]
    assert sorted(pos) == [(r, c) for r in range(block_m) for c in range(head_dim)]
    # One thread's 16-byte reduction is its fragment dq[j][0..3]: two columns of two rows 8 apart.
    for i in range(0, block_m * head_dim, 4):
        (r, c), *rest = pos[i:i + 4]
        assert rest == [(r, c + 1), (r + 8, c), (r + 8, c + 1)]
    # A warp's reductions (32 threads x 16 bytes) cover 512 contiguous bytes: 4 L2 lines against the 8 rows that the
    # row-major two-float adds touch.
    box, j, warp = 1 if head_dim > 64 or block_m > 64 else 0, 3, 2
    first = box * 4096 + 512 * j + 4 * 32 * warp
    rows = {pos[i][0] for i in range(first, first + 128)}
    assert len(rows) == 16 and len({(first + i) * 4 // 128 for i in range(128)}) == 4


def test_transposed_boxes_are_a_permutation_in_fragment_order() -> None:
    """dq_swap (hd128 unmasked, 80-query tiles): each box is one dQ^T product, 64 head-dim columns x 80 queries;
    a thread's 16-byte value is two queries of two head-dim columns 8 apart."""
    block_m, head_dim = 80, 128
    pos = [tiles.tiled_dq_position(head_dim, i, block_m) for i in range(block_m * head_dim)]
    assert sorted(pos) == [(r, c) for r in range(block_m) for c in range(head_dim)]
    for i in range(0, block_m * head_dim, 4):
        (r, c), *rest = pos[i:i + 4]
        assert rest == [(r + 1, c), (r, c + 8), (r + 1, c + 8)]
    assert {c // 64 for r, c in pos[:64 * block_m]} == {0} and {c // 64 for r, c in pos[64 * block_m:]} == {1}


@pytest.fixture
def q80(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 80-query steps of unmasked hd128 (off by default: measured no faster, sm90_bwd_rows.BLOCK_M_UNMASKED)."""
    monkeypatch.setattr(sm90_bwd_rows, "BLOCK_M_UNMASKED", {128: 80})


def test_80_query_steps_are_off_by_default() -> None:
    assert sm90_bwd_rows.BLOCK_M_UNMASKED == {} and _plan(128).dkdv_wgmma.block_m == 64


def test_unmasked_hd128_takes_80_query_steps_with_a_transposed_dq(q80: None) -> None:
    t = _plan(128).dkdv_wgmma
    assert (t.block_m, t.dq_swap, t.dq_cols, t.dq_col_step, t.dq_query_step) == (80, True, 80, 64, 0)
    assert t.dq_bulk and not t.dkv_from_smem and t.dq_before_dk and t.dk_from_smem
    regions = dict(t.smem.offsets)
    assert regions["P"] - regions["DS"] == 128 * 128 * 2, "dS^T in whole 128-byte swizzle rows: two of 64 queries"
    assert regions["Rows"] - regions["DQ"] == 2 * 64 * 80 * 4
    assert t.smem_bytes <= 227 * 1024
    for update in ({"mask": "causal"}, {"deterministic": True}):
        other = _plan(128, **update).dkdv_wgmma
        assert other.block_m == 64 and not other.dq_swap, update
    assert _plan(64).dkdv_wgmma.block_m == 128


def test_the_rows_consumers_own_one_box_each() -> None:
    for head_dim in (64, 128):
        t = _plan(head_dim, mask="causal").dkdv_wgmma
        assert t.dq_red and t.dq_cols == tiles.DQ_BOX and t.consumer_wgs == 2
        boxes = [tiles.tiled_dq_box(t.block_m, head_dim, wg * t.dq_query_step, wg * t.dq_col_step) for wg in (0, 1)]
        assert boxes == [0, 1] == list(range(t.block_m * head_dim // tiles.DQ_BOX ** 2))
    with pytest.raises(ValueError, match="is not a 64-aligned box"):
        tiles.tiled_dq_box(64, 128, 0, 32)


@pytest.mark.parametrize("head_dim", [256])
def test_the_split_roles_dq_boxes_are_the_tiles_boxes(head_dim: int) -> None:
    t = _plan(head_dim).dkdv_wgmma
    assert t.split and t.dq_red and t.block_m == 64
    boxes = [tiles.tiled_dq_box(64, head_dim, 0, 64 * (r.dq_box0 + b)) for r in t.split for b in range(r.dq_boxes)]
    assert boxes == list(range(head_dim // 64))


@pytest.mark.parametrize(("block_m", "head_dim"), SHAPES)
def test_the_accumulator_adds_and_converts_back_to_rows(block_m: int, head_dim: int) -> None:
    """Emulates the kernels' addressing (padded_rows_offset, dq_box, red_dq_frags: value e of dq[j] of thread t of
    box b at b 4096 + 512 j + 4 t + e) over packed entries; tiled_dq_rows (dq_convert's mapping) recovers dQ."""
    heads, lengths = 3, [100, 37, block_m, 1]
    flat = sum(lengths)
    q = torch.zeros(1, flat, heads, head_dim)
    b = rt.buffers(q, q, q, accumulate=True, entries=len(lengths), pad_rows=block_m, tiled_dq=True)
    assert b.dq_accum.shape == (heads, b.rows_stride, head_dim)
    assert b.rows_stride == rt.padded_rows(flat, len(lengths), block_m)
    dq = torch.randn(flat, heads, head_dim)
    acc = b.dq_accum.view(heads, -1)
    boxes_per_row = head_dim // 64
    at = 0
    for entry, rows in enumerate(lengths):
        start = (at + entry * block_m) // block_m * block_m   # padded_rows_offset
        for m in range(-(-rows // block_m)):
            tile = (start + m * block_m) * head_dim
            for box in range(block_m * head_dim // 4096):
                row0, col0 = 64 * (box // boxes_per_row), 64 * (box % boxes_per_row)
                for j in range(8):
                    for t in range(128):
                        for e in range(4):
                            r, c = _wgmma_fragment(j, t, e)
                            q_row = m * block_m + row0 + r
                            # Rows past the entry add zeros (dS is 0 there) into its last tile's padding.
                            v = dq[at + q_row, :, col0 + c] if q_row < rows else torch.zeros(heads)
                            acc[:, tile + box * 4096 + 512 * j + 4 * t + e] += v
        at += rows
    assert torch.equal(tiles.tiled_dq_rows(b.dq_accum, block_m, lengths), dq)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_80_query_steps_compile_without_spills_or_serialized_wgmmas(q80: None, dtype: str) -> None:
    """The kernel of the 80-query plan: its transposed dQ product (HGMMA 64x80 with both operands transposed), dK's
    product from dS^T in shared memory (SS), no spills and no wgmma serialized for want of registers (ptxas C7512,
    which issuing dQ beside P^T's and dS^T's packed copies caused)."""
    from attngen.toolchain.sass import disassemble

    spec = AttentionSpec(head_dim=128, dtype=dtype, mask="none")
    cubin = build.build_bwd(spec, "sm90")
    assert cubin.source.plan.dkdv_wgmma.block_m == 80
    for res in cubin.resources:
        assert (res.spill_stores, res.spill_loads, res.wgmma_serialized) == (0, 0, False), res
    sass = disassemble(cubin.data)
    assert re.search(r"HGMMA\.64x80x16\.F32(\.\w+)? R\d+, gdesc\[UR\d+\]\.tnspA\.tnspB", sass), "dQ^T = K^T dS^T"
    assert len(re.findall(r"HGMMA\.64x128x16\.F32(\.\w+)? R\d+, gdesc", sass)) == 5, "dK from shared memory: 5 k-steps"


def test_the_transposed_accumulator_adds_and_converts_back_to_rows() -> None:
    """The same with dq_swap's boxes (80-query tiles): value e of dq[j] of thread t of warpgroup wg's dQ^T product
    (head-dim columns 64 wg.., queries of the tile) at wg 64 x 80 + 512 j + 4 t + e."""
    block_m, head_dim, heads, lengths = 80, 128, 2, [100, 37, 80, 1]
    flat = sum(lengths)
    q = torch.zeros(1, flat, heads, head_dim)
    b = rt.buffers(q, q, q, accumulate=True, entries=len(lengths), pad_rows=block_m, tiled_dq=True)
    dq = torch.randn(flat, heads, head_dim)
    acc = b.dq_accum.view(heads, -1)
    at = 0
    for entry, rows in enumerate(lengths):
        start = (at + entry * block_m) // block_m * block_m
        for m in range(-(-rows // block_m)):
            tile = (start + m * block_m) * head_dim
            for wg in range(2):
                for j in range(block_m // 8):
                    for t in range(128):
                        for e in range(4):
                            d_col, q_col = _wgmma_fragment(j, t, e)
                            q_row = m * block_m + q_col
                            v = dq[at + q_row, :, 64 * wg + d_col] if q_row < rows else torch.zeros(heads)
                            acc[:, tile + wg * 64 * block_m + 512 * j + 4 * t + e] += v
        at += rows
    assert torch.equal(tiles.tiled_dq_rows(b.dq_accum, block_m, lengths, swap=True), dq)


def test_buffers_refuse_a_tiled_accumulator_without_padded_rows() -> None:
    q = torch.zeros(2, 8, 1, 64)
    with pytest.raises(ValueError, match="tile-ordered"):
        rt.buffers(q, q, q, accumulate=True, tiled_dq=True)
    plain = rt.buffers(q, q, q, accumulate=True, entries=2, pad_rows=64)
    assert plain.dq_accum.shape == (2, 8, 1, 64), "flash_attn's layout unless tile-ordered"


def test_dq_red_switch_keeps_mains_staged_path(monkeypatch: pytest.MonkeyPatch) -> None:
    red = _plan(128)
    monkeypatch.setattr(sm90_bwd_rows, "DQ_RED", False)
    staged = _plan(128)
    assert (red.dkdv_wgmma.dq_red, red.dkdv_wgmma.dq_bulk, red.dkdv_wgmma.stages) == (True, True, 3)
    assert (staged.dkdv_wgmma.dq_red, staged.dkdv_wgmma.dq_bulk, staged.dkdv_wgmma.stages) == (False, False, 3)
    assert staged.entry_names == red.entry_names[:2]
    code = render(staged).code
    assert "kDqRed = false" in code and "_dq_convert(" not in code
    assert "bulk reductions into a tile-ordered" in sm90_bwd.Sm90Backward().plan_line(red)
    assert "TMA bulk reductions" in sm90_bwd.Sm90Backward().plan_line(staged)


def test_dq_bulk_stages_fragments_for_one_bulk_reduction_a_box(monkeypatch: pytest.MonkeyPatch) -> None:
    """DQ_BULK (the default, unmasked): the consumers stage each 64 x 64 dQ product in fragment order in a shared box
    and producer warp 1 adds it with one contiguous bulk reduction; off, they add it from registers (eight four-float
    REDG a thread). Same accumulator. At hd128 both hold three Q/dO stages; at hd64 the boxes leave room for two."""
    from attngen.toolchain.sass import disassemble, opcodes

    bulk = _plan(128)
    monkeypatch.setattr(sm90_bwd_rows, "DQ_BULK", False)
    red = _plan(128)
    b, r = bulk.dkdv_wgmma, red.dkdv_wgmma
    assert (b.dq_red, b.dq_bulk, b.stages) == (True, True, 3) and (r.dq_red, r.dq_bulk, r.stages) == (True, False, 3)
    assert dict(b.smem.offsets)["Rows"] - dict(b.smem.offsets)["DQ"] == 2 * 64 * b.dq_cols * 4
    assert dict(r.smem.offsets)["Rows"] == dict(r.smem.offsets)["DQ"], "no staging boxes when added from registers"
    assert bulk.entry_names == red.entry_names, "both convert the tile-ordered accumulator"
    assert "kDqBulk = true" in render(bulk).code and "kDqBulk = false" in render(red).code
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="none")
    ops = opcodes(disassemble(build.build_bwd(spec, "sm90").data))
    assert ops["REDG"] == 8 and ops["UBLKRED"] == 0, "DQ_BULK off at build time too"


def test_split_dq_v4_switch_keeps_mains_v2_path(monkeypatch: pytest.MonkeyPatch) -> None:
    v4 = _plan(256)
    code = render(v4).code
    assert "kDqRed = true" in code and re.search(r"_dq_convert\(", code) and "red.global.add.v4.f32" in code
    monkeypatch.setattr(sm90_bwd_split, "SPLIT_DQ_V4", False)
    v2 = _plan(256)
    assert not v2.dkdv_wgmma.dq_red and len(v2.entry_names) == 2
    assert not v2.dkdv_wgmma.dq_bulk and v2.dkdv_wgmma.do_stages == 0, "nothing staged without the tile order"
    monkeypatch.setattr(sm90_bwd_split, "SPLIT_STAGED_DQ", False)
    unstaged = _plan(256).dkdv_wgmma.model_copy(update={"dq_red": False})
    assert v2.dkdv_wgmma == unstaged, "the same tiles, stages and layout as the v4 path unstaged"
    assert "kDqRed = false" in render(v2).code and "red.global.add.v2.f32" in sm90_bwd.Sm90Backward().plan_line(v2)


def test_the_switches_are_sed_able() -> None:
    """benchmarks/dq_red_device.sh seds these lines to time the other settings."""
    families = Path(sm90_bwd.__file__).parent
    rows, split = (families / "sm90_bwd_rows.py").read_text(), (families / "sm90_bwd_split.py").read_text()
    assert re.search(r"^DQ_RED = True$", rows, re.M) and re.search(r"^STAGES = \{True: 3, False: 3\}$", rows, re.M)
    assert re.search(r"^SPLIT_DQ_V4 = True$", split, re.M)
    script = (Path(__file__).parents[1] / "benchmarks" / "dq_red_device.sh").read_text()
    for line in ("DQ_RED = False", "SPLIT_DQ_V4 = False", "STAGES = {True: 2, False: 2}"):
        assert line in script


def test_ordered_dq_takes_the_bulk_path_only_with_its_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ordered dQ is bulk-reduced into the tile-ordered accumulator with ORDERED_DQ_BULK (never added from
    registers, never overlapped with dq_convert), else TMA-reduced into the row-major one."""
    det = _plan(64, deterministic=True)
    t = det.dkdv_wgmma
    assert t.ordered_dq and t.dq_red and t.dq_bulk and not t.dq_overlap
    assert "kOrderedDq = true" in render(det).code and det.entry_names[-1].endswith("_dq_convert")
    monkeypatch.setattr(sm90_bwd_rows, "DQ_BULK", False)
    assert not _plan(64, deterministic=True).dkdv_wgmma.dq_red, "never from registers"
    monkeypatch.setattr(sm90_bwd_rows, "DQ_BULK", True)
    monkeypatch.setattr(sm90_bwd_rows, "ORDERED_DQ_BULK", False)
    row_major = _plan(64, deterministic=True)
    assert row_major.dkdv_wgmma.ordered_dq and not row_major.dkdv_wgmma.dq_red and len(row_major.entry_names) == 2
