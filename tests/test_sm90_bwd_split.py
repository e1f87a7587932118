"""The Hopper backward at hd256: the consumer warpgroups split head_dim (families/sm90_bwd_split.py; hd192 halves the
KV rows instead, test_sm90_bwd_halves.py)."""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from attngen.errors import PlanError
from attngen.families.sm90_bwd_split import (
    BOX,
    MAX_STAGES,
    role_registers,
    split_layout,
    split_roles,
    split_stages,
    split_tiling,
    staged_roles,
)
from attngen.planning.archs import arch_info
from attngen.planning.ir_bwd import HopperBwdPlan
from attngen.planning.planner_bwd import plan_bwd
from attngen.spec.model import Arch, AttentionSpec

build = importlib.import_module("attngen.toolchain.builder")
H100 = arch_info(Arch.sm90)


def _covered(starts_and_counts: list[tuple[int, int]]) -> list[int]:
    return [b for start, n in starts_and_counts for b in range(start, start + n)]


@pytest.mark.parametrize("head_dim", [128, 192, 256, 320])
def test_split_roles_cover_every_box_once_and_balance_the_products(head_dim: int) -> None:
    roles = split_roles(head_dim)
    boxes = list(range(head_dim // BOX))
    assert _covered([(r.dkv_box0, r.dkv_boxes) for r in roles]) == boxes
    assert _covered([(r.dq_box0, r.dq_boxes) for r in roles]) == boxes
    work = [2 * r.dkv_boxes + r.dq_boxes for r in roles]
    assert max(work) - min(work) <= 1, work


def test_split_roles_of_the_served_head_dims() -> None:
    as_tuples = [[(r.dkv_box0, r.dkv_boxes, r.dq_box0, r.dq_boxes) for r in split_roles(d)] for d in (192, 256)]
    assert as_tuples == [[(0, 2, 0, 1), (2, 1, 1, 2)], [(0, 2, 0, 2), (2, 2, 2, 2)]]
    with pytest.raises(PlanError, match="head_dim 160: the split needs whole 64-column boxes"):
        split_roles(160)


@pytest.mark.parametrize(("head_dim", "stages", "other", "staged"),
                         [(192, 3, False, [0, 2]), (256, 2, False, [0, 2]), (192, 3, True, [1, 2]),
                          (256, 2, True, [1, 2])])
def test_split_tiling_takes_the_deepest_ring_that_fits(monkeypatch: pytest.MonkeyPatch, head_dim: int, stages: int,
                                                       other: bool, staged: list[int]) -> None:
    from attngen.families import sm90_bwd_split

    monkeypatch.setattr(sm90_bwd_split, "STAGE_OTHER_WG", other)
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal")
    t = split_tiling(spec, H100)
    assert (t.block_n, t.block_m, t.stages, t.consumer_wgs, t.threads, t.s_cols) == (64, 64, stages, 2, 384, 64)
    assert t.split_by_product
    assert t.smem_bytes <= H100.smem_per_block
    assert stages == MAX_STAGES or H100.smem_per_block < split_layout(spec, stages + 1, t.split).total_bytes
    # Causal (dV early): one dO stage and warpgroup 1's dQ boxes staged for its bulk reduction (SPLIT_STAGED_DQ), and
    # as many of warpgroup 0's first ones as fit beside them (STAGE_OTHER_WG): at hd256 one of two.
    assert t.dv_early and t.dq_bulk and t.do_stages == 1
    assert t.smem.offset("DS") - t.smem.offset("DO") == 64 * head_dim * 2
    assert [r.dq_staged for r in t.split] == staged
    assert t.smem.offset("Rows") - t.smem.offset("DQ") == 64 * 64 * 4 * sum(staged)
    if other and staged[0] < t.split[0].dq_boxes:
        more = staged_roles(t.split, staged[0] + 1)
        assert split_layout(spec, stages, more).total_bytes > H100.smem_per_block
    assert t.regs_estimate == max(role_registers(r, 64, True) for r in t.split) <= t.consumer_regs == 240


def test_a_score_mod_with_a_varying_derivative_splits_the_scores_by_columns() -> None:
    """dS^T from P^T alone needs a constant derivative: softcap's varies, so each warpgroup computes 32 query
    columns of both S^T and dP^T (and compiles to the 64x32 products, no spills)."""
    from attngen.toolchain.sass import disassemble

    spec = AttentionSpec(head_dim=256, dtype="bf16", mask="causal", score_mod={"softcap": 50.0})
    t = split_tiling(spec, H100)
    assert not t.split_by_product and t.s_cols == 32
    alibi = AttentionSpec(head_dim=256, dtype="bf16", mask="causal", score_mod={"alibi": "standard"})
    assert split_tiling(alibi, H100).split_by_product, "ALiBi's derivative is 1"
    cubin = build.build_bwd(spec, "sm90")
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in cubin.resources)
    assert _hgmma_shapes(disassemble(cubin.data))["64x32x16"] == 2 * 2 * 256 // 16


def test_split_stages_say_what_each_depth_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from attngen.families import sm90_bwd_split

    monkeypatch.setattr(sm90_bwd_split, "STAGE_OTHER_WG", True)   # each count of warpgroup 0's staged boxes tried
    spec = AttentionSpec(head_dim=256, dtype="bf16")
    small = dataclasses.replace(H100, smem_per_block=150_000)
    want = r"head_dim 256: 3 stages \(4 dQ boxes staged\) \d+ B, .*, 2 stages \(2 dQ boxes staged\) 215096 B; sm90"
    with pytest.raises(PlanError, match=want + " gives 150000 B"):
        split_stages(spec, small)
    ordered = AttentionSpec(head_dim=256, dtype="bf16", deterministic=True)   # nothing staged
    with pytest.raises(PlanError, match=r"head_dim 256: 3 stages \d+ B, 2 stages \d+ B; sm90 gives 150000 B"):
        split_stages(ordered, small)


def test_the_planner_picks_the_split_at_hd256_only() -> None:
    for d in (64, 128, 192, 256):
        p = plan_bwd(AttentionSpec(head_dim=d, dtype="bf16", mask="causal"), Arch.sm90)
        assert isinstance(p, HopperBwdPlan)
        assert bool(p.dkdv_wgmma.split) == (d == 256), d
    p = plan_bwd(AttentionSpec(head_dim=256, dtype="bf16"), Arch.sm90)
    assert "head_dim split" in p.reason


def _hgmma_shapes(sass: str) -> dict[str, int]:
    shapes: dict[str, int] = {}
    for shape in re.findall(r"HGMMA\.(64x\d+x16)", sass):
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


@pytest.mark.parametrize("other", [False, True])
def test_split_kernel_compiles_to_the_products_and_reductions_it_names(monkeypatch: pytest.MonkeyPatch,
                                                                      other: bool) -> None:
    """Per step: S^T and dP^T (head_dim / 16 k-steps of N = 64, one product per warpgroup), dV and dK (4 k-steps
    per warpgroup at N = 64 x its boxes), dQ (4 k-steps per box at N = 64), and 8 four-float reductions per dQ box
    and thread into the tile-ordered accumulator (SPLIT_DQ_V4; 16 two-float ones into the row-major one without),
    the staged boxes (all of warpgroup 1's, warpgroup 0's first) added by one bulk reduction a warpgroup instead where
    SPLIT_STAGED_DQ applies (dV early); no TMA
    tensor reduction, no local memory."""
    from attngen.families import sm90_bwd_split
    from attngen.toolchain.sass import disassemble, opcodes

    monkeypatch.setattr(sm90_bwd_split, "STAGE_OTHER_WG", other)
    head_dim = 256
    spec = AttentionSpec(name=f"products{int(other)}", head_dim=head_dim, dtype="bf16", mask="causal")
    cubin = build.build_bwd(spec, "sm90")
    plan = cubin.source.plan
    assert plan.family == "sm90_bwd" and plan.dkdv_wgmma.split
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in cubin.resources)
    sass = disassemble(cubin.data)
    t = plan.dkdv_wgmma
    assert t.split_by_product and t.s_cols == 64
    want: dict[str, int] = {"64x64x16": 2 * head_dim // 16}   # S^T in one warpgroup, dP^T in the other
    for r in plan.dkdv_wgmma.split:
        want[f"64x{64 * r.dkv_boxes}x16"] = want.get(f"64x{64 * r.dkv_boxes}x16", 0) + 2 * 4
    want["64x64x16"] = want.get("64x64x16", 0) + 4 * head_dim // 64
    assert _hgmma_shapes(sass) == want
    ops = opcodes(sass)
    staged = sum(r.dq_staged for r in t.split)   # SPLIT_STAGED_DQ (and STAGE_OTHER_WG): one reduction a warpgroup
    assert staged == (3 if other else 2)
    assert t.dq_red and ops["REDG"] == 8 * (head_dim // 64 - staged)
    assert ops["UBLKRED"] == sum(1 for r in t.split if r.dq_staged)
    assert all("F32x4" in line for line in sass.splitlines() if "REDG" in line)
    assert ops["UTMAREDG"] == 0 and ops["LDL"] == ops["STL"] == 0 and ops["HMMA"] == 0
    assert "red.global.add.v4.f32" in cubin.source.code and "SplitRole<1>" in cubin.source.code


@pytest.mark.parametrize("bulk", [True, False])
def test_deterministic_hd128_orders_its_dq_reductions(monkeypatch: pytest.MonkeyPatch, bulk: bool) -> None:
    """deterministic at hd64/128: the same wgmma kernel, its dQ reductions waiting on a semaphore per query tile
    (the spin's NANOSLEEP, the release's and the passes' REDG beside the reductions): contiguous bulk reductions into
    the tile-ordered accumulator as the default's (ORDERED_DQ_BULK: UBLKRED, no tensor-map reduction), else tensor-map
    reductions into the row-major one. The default has no semaphore (its only REDG and poll count the block for
    dq_convert's overlap)."""
    from attngen.families import sm90_bwd_rows
    from attngen.toolchain.sass import disassemble, opcodes

    monkeypatch.setattr(sm90_bwd_rows, "ORDERED_DQ_BULK", bulk)
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="none")
    ordered = build.build_bwd(spec.model_copy(update={"deterministic": True, "name": f"ordered{int(bulk)}"}), "sm90")
    default = build.build_bwd(spec, "sm90")
    assert ordered.source.plan.dkdv_wgmma.ordered_dq and not default.source.plan.dkdv_wgmma.ordered_dq
    assert ordered.source.plan.dkdv_wgmma.dq_bulk == bulk
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in ordered.resources)
    o, d = (opcodes(disassemble(c.data)) for c in (ordered, default))
    assert (o["UTMAREDG"] == 0) == bulk and (o["UBLKRED"] > 0) == bulk
    assert d["UTMAREDG"] == 0 and d["UBLKRED"] > 0 and default.source.plan.dkdv_wgmma.dq_bulk
    # The default's one poll and one count are dq_convert's overlap (test_bwd_dq_overlap.py), not a semaphore.
    overlap = int(default.source.plan.dkdv_wgmma.dq_overlap)
    assert o["NANOSLEEP"] > 0 and o["REDG"] > 0 and d["NANOSLEEP"] == overlap and d["REDG"] == overlap
    assert "constexpr bool kOrderedDq = true;" in ordered.source.code


@pytest.mark.parametrize("head_dim", [256])
def test_deterministic_split_waits_for_each_tiles_turn(head_dim: int) -> None:
    """deterministic at hd256: the head_dim split with its v4 reductions, each warpgroup that owns dQ columns
    waiting on the tile's semaphore before its first reduction and moving it on by one after its last (kDqAdders = 2
    per block, the passes too); no spills (a trap in the consumers' wait cost ~2 KB: the wait is bounded without)."""
    from attngen.toolchain.sass import disassemble, opcodes

    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal", deterministic=True)
    cubin = build.build_bwd(spec, "sm90")
    t = cubin.source.plan.dkdv_wgmma
    assert t.split and t.ordered_dq and t.dq_red and t.dq_adders == sum(r.dq_boxes > 0 for r in t.split) == 2
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in cubin.resources)
    code = cubin.source.code
    assert "constexpr bool kOrderedDq = true;" in code and "constexpr int kDqAdders = 2;" in code
    ops = opcodes(disassemble(cubin.data))
    assert ops["NANOSLEEP"] >= 2 and ops["UTMAREDG"] == 0 and ops["REDG"] > 0
    default = build.build_bwd(spec.model_copy(update={"deterministic": False}), "sm90")
    assert opcodes(disassemble(default.data))["NANOSLEEP"] == 0
    assert "constexpr bool kOrderedDq = false;" in default.source.code


def test_ordered_dq_semaphores_are_one_zeroed_int_per_padded_query_tile() -> None:
    torch = pytest.importorskip("torch")
    from attngen.runtime.backward import buffers

    q = torch.randn(3, 100, 4, 64)
    k = v = torch.randn(3, 50, 2, 64)
    b = buffers(q, k, v, accumulate=True, entries=3, pad_rows=64, semaphores=True)
    assert b.dq_sem.dtype == torch.int32 and b.dq_sem.shape == (4, b.rows_stride // 64)
    assert b.rows_stride % 64 == 0 and int(b.dq_sem.abs().sum()) == 0
    assert buffers(q, k, v, accumulate=True, entries=3, pad_rows=64).dq_sem is None
    with pytest.raises(ValueError, match="pass pad_rows"):
        buffers(q, k, v, accumulate=True, semaphores=True)


def _ordered_dq_completes(visits: list[list[bool]], descending: bool, ordered_passes: bool) -> bool:
    """The ordered dQ's semaphore protocol on one (entry, head) with every KV block resident: block n has rank
    blockIdx.x (descending: the last KV block first); its reducing warp adds to the tiles it visits in walk order,
    each once the tile's semaphore reads its rank; its passing warp passes the tiles it does not visit (in its turn
    when `ordered_passes`, else at once). True when every tile's semaphore reaches the number of blocks."""
    blocks, tiles = len(visits), len(visits[0])
    rank = [blocks - 1 - n if descending else n for n in range(blocks)]
    sem = [0] * tiles
    reduces = [[m for m in range(tiles) if visits[n][m]] for n in range(blocks)]
    passes = [[m for m in range(tiles) if not visits[n][m]] for n in range(blocks)]
    if not ordered_passes:
        for n in range(blocks):
            for m in passes[n]:
                sem[m] += 1
            passes[n] = []
    progress = True
    while progress:
        progress = False
        for n in range(blocks):
            for queue in (reduces[n], passes[n]):   # each warp in its own order; a pass lane per tile
                ready = [m for m in queue if sem[m] == rank[n]] if queue is passes[n] else queue[:1]
                for m in ready:
                    if sem[m] == rank[n]:
                        sem[m] += 1
                        queue.remove(m)
                        progress = True
    return all(s == blocks for s in sem)


def _visits(visible, sq: int, sk: int, bm: int = 64, bn: int = 128) -> list[list[bool]]:
    def tile(m: int, n: int) -> bool:
        queries, keys = range(m * bm, min(sq, m * bm + bm)), range(n * bn, min(sk, n * bn + bn))
        return any(visible(q, k) for q in queries for k in keys)

    return [[tile(m, n) for m in range(-(-sq // bm))] for n in range(-(-sk // bn))]


@pytest.mark.parametrize(("name", "visible", "descending"), [
    ("causal", lambda q, k: k <= q, True),
    ("none", lambda q, k: True, False),
    ("window 300 left", lambda q, k: q - 300 <= k <= q, True),
    ("window 200 left 100 right", lambda q, k: q - 200 <= k <= q + 100, True),
    ("prefix-LM 256", lambda q, k: k < 256 or k <= q, False),
    ("chunks of 512", lambda q, k: k // 512 == q // 512 and k <= q, False),
    ("documents", lambda q, k: (q >= 300) == (k >= 300) and k <= q, False),
])
def test_ordered_dq_semaphores_never_deadlock(name: str, visible, descending: bool) -> None:  # type: ignore[no-untyped-def]
    """Passes in their turn complete every tile under every mask kind; passes at once (the first design) leave a
    window bounded on both sides, prefix-LM, chunks and documents waiting forever."""
    visits = _visits(visible, 1024, 1024)
    assert _ordered_dq_completes(visits, descending, ordered_passes=True), name
    unordered = _ordered_dq_completes(visits, descending, ordered_passes=False)
    assert unordered == (name in ("causal", "none")), name


@pytest.mark.parametrize("grid", [(128, 8, 2), (16, 8, 8), (64, 32, 2), (7, 3, 5), (5, 2, 1), (1, 1, 1), (33, 6, 4)])
@pytest.mark.parametrize("chains", [1, 2, 4, 8])
def test_dkdv_slots_are_a_permutation_that_dispatches_a_chains_ranks_in_order(grid, chains: int) -> None:
    """Every (rank, KV head, entry) once; within a chain, rank r's block is dispatched (x fastest, then y, then z)
    after rank r - 1's, which an ordered dQ's waits need to be deadlock-free; the blocks dispatched together spread
    over g chains (the largest power of two dividing the chain count, up to `chains`)."""
    from attngen.families.sm90_dq_tiles import dkdv_slot

    gx, gy, gz = grid
    linear = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
    slots = [dkdv_slot(b, grid, chains) for b in linear]
    assert sorted(slots) == sorted((r, y, z) for r in range(gx) for y in range(gy) for z in range(gz))
    order = {s: i for i, s in enumerate(slots)}
    assert all(order[(r - 1, y, z)] < order[(r, y, z)] for (r, y, z) in slots if r)
    g = min(chains, (gy * gz) & -(gy * gz))
    first = {(y, z) for (_, y, z) in slots[:g]}
    assert len(first) == g
    last = (gx - 1, gy - 1, gz - 1)
    assert dkdv_slot((0, 0, 0), grid, 1) == (0, 0, 0) and dkdv_slot(last, grid, 1) == last


@pytest.mark.parametrize(("kv_blocks", "chains", "sms", "want"), [
    (32, 64, 132, 4), (128, 16, 132, 1), (64, 32, 132, 2), (16, 128, 132, 8), (8, 128, 132, 8), (16, 6, 132, 2),
    (16, 3, 132, 1), (1000, 8, 132, 1), (1, 1, 132, 1), (32, 64, 108, 2)])
def test_dq_chains_are_the_chains_one_wave_holds_dividing_the_grid(kv_blocks: int, chains: int, sms: int,
                                                                    want: int) -> None:
    from attngen.families.sm90_dq_tiles import ORDERED_DQ_CHAINS, dq_chains

    got = dq_chains(kv_blocks, chains, sms)
    assert got == want and got & (got - 1) == 0 and chains % got == 0 and got <= ORDERED_DQ_CHAINS
    with pytest.raises(ValueError, match="positive"):
        dq_chains(0, chains, sms)


def test_ordered_dq_reads_its_chains_from_the_parameters_and_the_default_keeps_the_grid() -> None:
    from attngen.codegen.abi import BWD_PARAMS

    assert "dq_chains" in [f.name for f in BWD_PARAMS]
    for deterministic in (True, False):
        spec = AttentionSpec(head_dim=256, dtype="bf16", deterministic=deterministic)
        code = build.build_bwd(spec, "sm90").source.code
        assert "p.dq_chains" in code and "int dq_chains;" in code
        assert f"constexpr bool kOrderedDq = {'true' if deterministic else 'false'};" in code


def test_dv_is_issued_once_p_is_stored_where_the_scores_split_by_product(monkeypatch: pytest.MonkeyPatch) -> None:
    """DV_EARLY_MASKED: by product, each warpgroup issues its dV product as soon as warpgroup 0's P^T is stored
    (warpgroup 0 after its own barrier, warpgroup 1 after the P-ready one, before its dS values), dK after the dS^T
    barrier; the products are the same 64 HGMMAs, with no spill and none serialized. Not where the scores split by
    columns (a softcap's derivative), nor with DV_EARLY_MASKED off; unmasked with DV_EARLY_UNMASKED and deterministic
    with DV_EARLY_DETERMINISTIC (never staged: its dQ keeps its turns), and not without them."""
    from attngen.families import sm90_bwd_split
    from attngen.toolchain.sass import disassemble, opcodes

    spec = AttentionSpec(name="early256", head_dim=256, dtype="bf16", mask="causal")
    cubin = build.build_bwd(spec, "sm90")
    t = cubin.source.plan.dkdv_wgmma
    assert t.split_by_product and t.dv_early and "constexpr bool kDvEarly = true;" in cubin.source.code
    assert not any(r.wgmma_serialized or r.spill_stores for r in cubin.resources), cubin.resources
    sass = disassemble(cubin.data)
    assert opcodes(sass)["HGMMA"] == 64
    # Warpgroup 1's step: the P-ready barrier, its dV product (4 k-steps of 64 x 128), then the dS values' LDS reads of
    # P^T, before the dS^T stores' barrier.
    # (ptxas may hoist a few of those reads above the product's first k-step.)
    steps = re.findall(r"(BAR\.SYNC|HGMMA\.64x128x16|LDS|STS|HGMMA\.64x64x16)", sass)
    runs = [op for i, op in enumerate(steps) if i == 0 or steps[i - 1] != op]
    dv, lds = "HGMMA.64x128x16", "LDS"
    assert any(runs[i] == "BAR.SYNC" and (runs[i + 1:i + 3] == [dv, lds] or runs[i + 1:i + 4] == [lds, dv, lds])
               for i in range(len(runs))), runs
    cap = AttentionSpec(name="cap256", head_dim=256, dtype="bf16", mask="causal", score_mod={"softcap": 30.0})
    assert not sm90_bwd_split.dv_early(cap)
    assert not plan_bwd(cap, Arch.sm90).dkdv_wgmma.dv_early  # type: ignore[union-attr]
    det = AttentionSpec(name="det256", head_dim=256, dtype="bf16", mask="causal", deterministic=True)
    t_det = plan_bwd(det, Arch.sm90).dkdv_wgmma
    assert t_det.dv_early and t_det.ordered_dq and not t_det.dq_bulk and t_det.do_stages == 0  # type: ignore[union-attr]
    monkeypatch.setattr(sm90_bwd_split, "DV_EARLY_DETERMINISTIC", False)
    assert not plan_bwd(det, Arch.sm90).dkdv_wgmma.dv_early  # type: ignore[union-attr]
    unmasked = AttentionSpec(name="none256", head_dim=256, dtype="bf16", mask="none")
    assert plan_bwd(unmasked, Arch.sm90).dkdv_wgmma.dv_early  # type: ignore[union-attr]
    monkeypatch.setattr(sm90_bwd_split, "DV_EARLY_UNMASKED", False)
    assert not plan_bwd(unmasked, Arch.sm90).dkdv_wgmma.dv_early  # type: ignore[union-attr]
    monkeypatch.setattr(sm90_bwd_split, "DV_EARLY_MASKED", False)
    assert not plan_bwd(spec, Arch.sm90).dkdv_wgmma.dv_early  # type: ignore[union-attr]


@pytest.mark.parametrize("late", [False, True])
def test_the_staging_wait_sits_where_staging_wait_late_says(monkeypatch: pytest.MonkeyPatch, late: bool) -> None:
    """STAGING_WAIT_LATE: warpgroup 1's wait for its last bulk reduction's reads (DEPBAR on the bulk copies'
    scoreboard) comes after its first product (dP^T) and that product's wait, just before the consumers' barrier;
    without it, before the product."""
    from attngen.families import sm90_bwd_split
    from attngen.toolchain.sass import disassemble

    monkeypatch.setattr(sm90_bwd_split, "STAGING_WAIT_LATE", late)
    spec = AttentionSpec(name=f"wait{int(late)}", head_dim=256, dtype="bf16", mask="causal")
    cubin = build.build_bwd(spec, "sm90")
    assert "constexpr bool kStagingWaitLate = " + ("true" if late else "false") in cubin.source.code
    ops = [m.group(1) for m in re.finditer(r"(WARPGROUP\.DEPBAR\.LE gsb0, 0x0|DEPBAR\.LE SB0, 0x0|HGMMA\.64x64x16"
                                           r"|BAR\.SYNC\.DEFER_BLOCKING 0x1,)", disassemble(cubin.data))]
    runs = " | ".join(op for i, op in enumerate(ops) if i == 0 or ops[i - 1] != op)
    wait, product, product_wait, barrier = ("DEPBAR.LE SB0, 0x0", "HGMMA.64x64x16", "WARPGROUP.DEPBAR.LE gsb0, 0x0",
                                            "BAR.SYNC.DEFER_BLOCKING 0x1,")
    order = [product, product_wait, wait, barrier] if late else [wait, product, product_wait, barrier]
    assert " | ".join(order) in runs, runs


def _longest_loop(sass: str) -> int:
    """Instructions in the longest backward branch's span that issues wgmma (the consumers' step loop)."""
    ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", sass)]
    spans = [[o for a, o in ins if int(t.group(1), 16) <= a <= at] for at, op in ins
             if (t := re.search(r"BRA.*0x([0-9a-f]+)", op)) and int(t.group(1), 16) < at]
    return max(len(body) for body in spans if any("HGMMA" in o for o in body))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_ds_store_addresses_are_kept_across_the_steps(monkeypatch: pytest.MonkeyPatch, head_dim: int) -> None:
    """DS_OFFSETS_KEPT: the dS^T stmatrix addresses are computed once and kept (opaque to ptxas), so the step loop is
    shorter than with ptxas recomputing the swizzle every step; no spill, nothing serialized. In the XOR form
    (DS_OFFSETS_XOR) one register at every step size, hd64's 128-query steps included; without it one register a
    k-step, at 64-query steps only (DS_OFFSETS_KEPT_BLOCK_M: hd64 spilled 4 B so)."""
    from attngen.families import sm90_bwd_rows
    from attngen.toolchain.sass import disassemble

    loops = {}
    for kept, xor in ((False, False), (True, False), (True, True)):
        monkeypatch.setattr(sm90_bwd_rows, "DS_OFFSETS_KEPT", kept)
        monkeypatch.setattr(sm90_bwd_rows, "DS_OFFSETS_XOR", xor)
        spec = AttentionSpec(name=f"ds_at{int(kept)}{int(xor)}_{head_dim}", head_dim=head_dim, dtype="bf16",
                             mask="none")
        cubin = build.build_bwd(spec, "sm90")
        on = kept and (xor or head_dim == 128)
        assert f"constexpr bool kDsOffsetsKept = {'true' if on else 'false'};" in cubin.source.code
        assert f"constexpr bool kDsOffsetsXor = {'true' if on and xor else 'false'};" in cubin.source.code
        assert not any(r.spill_stores or r.wgmma_serialized for r in cubin.resources), cubin.resources
        loops[(kept, xor)] = _longest_loop(disassemble(cubin.data))
    assert loops[(True, True)] < loops[(False, False)], loops
    if head_dim == 128:
        assert loops[(True, False)] < loops[(False, False)], loops
    monkeypatch.setattr(sm90_bwd_rows, "DS_OFFSETS_KEPT", True)
    document = {"expr": "doc[b, q_idx] == doc[b, kv_idx] and kv_idx <= q_idx",
                "tensors": {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}}
    holes = plan_bwd(AttentionSpec(name="ds_at_doc", head_dim=head_dim, dtype="bf16", mask=document), Arch.sm90)
    assert holes.dkdv_wgmma.schedule_words and not sm90_bwd_rows.ds_offsets_kept(holes.dkdv_wgmma)

