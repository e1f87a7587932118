"""The Hopper backward at hd192: the consumer warpgroups halve the block's 96 KV rows (families/sm90_bwd_halves.py)."""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from attngen.errors import PlanError
from attngen.families import sm90_bwd_halves as halves
from attngen.planning.archs import arch_info
from attngen.planning.ir_bwd import HopperBwdPlan
from attngen.planning.planner_bwd import plan_bwd
from attngen.spec.model import Arch, AttentionSpec

build = importlib.import_module("attngen.toolchain.builder")
H100 = arch_info(Arch.sm90)


def _hgmma_shapes(sass: str) -> dict[str, int]:
    shapes: dict[str, int] = {}
    for shape in re.findall(r"HGMMA\.(64x\d+x16)", sass):
        shapes[shape] = shapes.get(shape, 0) + 1
    return shapes


@pytest.mark.parametrize("head_dim", sorted(halves.DQ_PIECES))
def test_dq_pieces_cover_head_dim_once_from_box_starts_or_inside_a_box(head_dim: int) -> None:
    """Each column once, the warpgroups' widths equal (dQ is a third of a step's products: an uneven split holds the
    other warpgroup at the next barrier), each piece a wgmma N inside one 64-column box of K or whole boxes from a
    box's first column (the MN-major B operand's leading byte offset steps box to box)."""
    cols = [c for wg in halves.DQ_PIECES[head_dim] for c0, n in wg for c in range(c0, c0 + n)]
    assert sorted(cols) == list(range(head_dim))
    assert len({sum(n for _, n in wg) for wg in halves.DQ_PIECES[head_dim]}) == 1
    for wg in halves.DQ_PIECES[head_dim]:
        assert 1 <= len(wg) <= 2, "the template holds one or two pieces a warpgroup"
        for c0, n in wg:
            assert n % 8 == 0 and (c0 % 64 + n <= 64 or (c0 % 64 == 0 and n % 64 == 0)), (c0, n)


def test_halves_tiling_takes_96_kv_rows_and_the_deepest_ring_that_fits() -> None:
    spec = AttentionSpec(head_dim=192, dtype="bf16", mask="causal")
    t = halves.halves_tiling(spec, H100)
    assert (t.block_n, t.block_m, t.stages, t.consumer_wgs, t.threads, t.s_cols) == (96, 64, 2, 2, 384, 64)
    assert t.kv_halves and not t.split and t.dq_red and t.dq_bulk and t.dq_cols == 64 and t.dq_adders == 2
    assert t.smem_bytes <= H100.smem_per_block < halves.halves_layout(spec, 3, 2, 1).total_bytes
    # One dO stage beside two of Q; each warpgroup's dQ (64 queries x 96 columns, fp32) staged for its bulk reduction.
    assert (t.do_stages, t.dq_bulk_wgs, t.dv_early) == (1, 2, True)
    assert t.smem.offset("DS") - t.smem.offset("DO") == 64 * 192 * 2 == (t.smem.offset("DO") - t.smem.offset("Q")) // 2
    assert t.smem.offset("Rows") - t.smem.offset("DQ") == 2 * 64 * 96 * 4 == 2 * halves.staged_dq_bytes(192)
    # Two dO stages and one warpgroup staged take the same bytes; both staged beside two dO stages do not fit.
    assert halves.halves_layout(spec, 2, 1).total_bytes == t.smem_bytes - 16   # dO's own two mbarriers
    assert halves.halves_layout(spec, 2, 2).total_bytes > H100.smem_per_block
    # dK^T and dV^T (2 x 192 x 48 / 128), the scores' 48 and the rows' 4, the overhead.
    assert t.regs_estimate == 144 + 52 + 40 == halves.halves_registers(192) <= t.consumer_regs == 240


@pytest.mark.parametrize("extra", [{"deterministic": True}, {"score_mod": {"softcap": 30.0}}])
def test_halves_add_dq_from_registers_where_staging_does_not_serve(extra: dict[str, object]) -> None:
    """The ordered dQ keeps its turns around reductions from registers; a score mod whose derivative varies per
    element spilled beside the staging: both add all of dQ from registers, with no staging region."""
    spec = AttentionSpec(head_dim=192, dtype="bf16", mask="causal", **extra)  # type: ignore[arg-type]
    t = halves.halves_tiling(spec, H100)
    assert not halves.staged_dq(spec) and not t.dq_bulk and t.smem.offset("Rows") == t.smem.offset("DQ")


def test_halves_say_why_they_do_not_fit() -> None:
    spec = AttentionSpec(head_dim=192, dtype="bf16")
    with pytest.raises(PlanError, match=r"head_dim 192: 3 stages \d+ B, 2 stages \d+ B; sm90 gives 150000 B"):
        halves.halves_tiling(spec, dataclasses.replace(H100, smem_per_block=150_000))
    with pytest.raises(PlanError, match=r"the KV-row halves need ~236 registers per consumer thread; sm90 gives 232"):
        halves.halves_tiling(spec, dataclasses.replace(H100, max_setmaxnreg=232))
    with pytest.raises(PlanError, match="dQ pieces for head dims \\[192\\]"):
        halves.halves_tiling(AttentionSpec(head_dim=128, dtype="bf16"), H100)


def test_the_planner_halves_the_kv_rows_at_hd192_only() -> None:
    for d in (64, 128, 192, 256):
        p = plan_bwd(AttentionSpec(head_dim=d, dtype="bf16", mask="causal"), Arch.sm90)
        assert isinstance(p, HopperBwdPlan)
        assert p.dkdv_wgmma.kv_halves == (d == 192), d
    p = plan_bwd(AttentionSpec(head_dim=192, dtype="bf16"), Arch.sm90)
    assert "KV rows halved" in p.reason
    from attngen.families import get

    family = get(p.family)
    assert "KV rows halved between 2 warpgroups (wg0: KV rows 0-47, dQ columns 0-95; wg1: KV rows 48-95, dQ " \
           "columns 96-191)" in family.plan_line(p)
    assert any("96 KV rows (2 consumer warpgroups" in line for line in family.explain_lines(p))


def test_deterministic_packed_specs_take_the_split_and_say_why() -> None:
    """The ordered dQ's turns beside a packed batch's entry state spill in the halves (12-24 B stores): those specs
    take the head-dim split, the plan's reason naming the refusal; deterministic fixed-length ones keep the halves."""
    det = AttentionSpec(head_dim=192, dtype="bf16", mask="causal", deterministic=True)
    packed = plan_bwd(AttentionSpec(head_dim=192, dtype="bf16", mask="causal", deterministic=True, seqlens="varlen"),
                      Arch.sm90)
    assert isinstance(packed, HopperBwdPlan) and packed.dkdv_wgmma.split and not packed.dkdv_wgmma.kv_halves
    assert "not the KV-row halves: deterministic and packed" in packed.reason
    fixed = plan_bwd(det, Arch.sm90)
    assert isinstance(fixed, HopperBwdPlan) and fixed.dkdv_wgmma.kv_halves
    assert halves.halves_refusal(det) is None
    assert "serve head dims [192]" in str(halves.halves_refusal(AttentionSpec(head_dim=256, dtype="bf16")))


@pytest.mark.parametrize("one_stage", [True, False])
def test_halves_kernel_compiles_to_the_products_and_reductions_it_names(monkeypatch: pytest.MonkeyPatch,
                                                                        one_stage: bool) -> None:
    """Per step and warpgroup: S and dP (head_dim / 16 k-steps of 64 x 48), dV^T and dK^T (4 k-steps x 3 boxes of
    64 x 48), dQ's pieces (6 k-steps each: 64 + 32 columns), P and dS stored transposed by stmatrix.trans; one bulk
    reduction of each warpgroup's staged columns beside one dO stage (DO_ONE_STAGE), else warpgroup 0's 12
    four-float reductions per thread into the tile-ordered accumulator and warpgroup 1's one bulk reduction; no
    spills, the wgmmas kept in flight, no TMA (tensor) reduction."""
    from attngen.toolchain.sass import disassemble, opcodes

    monkeypatch.setattr(halves, "DO_ONE_STAGE", one_stage)
    cubin = build.build_bwd(AttentionSpec(name=f"one{int(one_stage)}", head_dim=192, dtype="bf16", mask="causal"),
                            "sm90")
    t = cubin.source.plan.dkdv_wgmma
    assert t.kv_halves and (t.do_stages, t.dq_bulk_wgs) == ((1, 2) if one_stage else (0, 1))
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 and not r.wgmma_serialized
               for r in cubin.resources)
    sass = disassemble(cubin.data)
    assert _hgmma_shapes(sass) == {"64x48x16": 2 * (2 * 192 // 16 + 2 * 3 * 4), "64x64x16": 2 * 6, "64x32x16": 2 * 6}
    ops = opcodes(sass)
    assert ops["REDG"] == (0 if one_stage else 8 + 4)
    assert all("F32x4" in line for line in sass.splitlines() if "REDG" in line)
    assert ops["UBLKRED"] == (2 if one_stage else 1)
    assert ops["UTMAREDG"] == 0 and ops["LDL"] == ops["STL"] == 0 and ops["HMMA"] == 0
    assert "stmatrix.sync.aligned.m8n8.x4.trans" in cubin.source.code


def test_deterministic_halves_wait_for_each_tiles_turn() -> None:
    """deterministic: both warpgroups add dQ, each once producer warp 1 grants the tile's turn (kDqAdders = 2)."""
    from attngen.toolchain.sass import disassemble, opcodes

    spec = AttentionSpec(head_dim=192, dtype="bf16", mask="causal", deterministic=True)
    cubin = build.build_bwd(spec, "sm90")
    t = cubin.source.plan.dkdv_wgmma
    assert t.kv_halves and t.ordered_dq and t.dq_adders == 2
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in cubin.resources)
    assert "constexpr int kDqAdders = 2;" in cubin.source.code
    assert opcodes(disassemble(cubin.data))["NANOSLEEP"] >= 2


@pytest.mark.parametrize("score_mod", [{"softcap": 30.0}, {"alibi": "runtime"}])
def test_score_mods_spill_at_most_a_word(score_mod: dict[str, object]) -> None:
    """A derivative that varies per element (softcap: P and dS in one pass once dP is there) compiles without spills.
    ALiBi (its per-key terms kept in the loop by an opaque key) spills one word of the walk's state under NVRTC 13.5
    (4 B), one local store and one local load, the load once a step in one warpgroup's loop: an L1 hit beside a
    step's ~100 wgmma k-steps."""
    from attngen.toolchain.sass import disassemble, opcodes

    cubin = build.build_bwd(AttentionSpec(head_dim=192, dtype="fp16", mask="causal", score_mod=score_mod), "sm90")
    assert cubin.source.plan.dkdv_wgmma.kv_halves
    dkdv = next(r for r in cubin.resources if r.name.endswith("_dkdv_wgmma"))
    assert all(r.spill_stores == r.spill_loads == 0 for r in cubin.resources if r is not dkdv)
    assert dkdv.spill_stores + dkdv.spill_loads <= (0 if "softcap" in score_mod else 16)
    ops = opcodes(disassemble(cubin.data))
    assert ops["LDL"] + ops["STL"] <= (0 if "softcap" in score_mod else 4)


def test_a_mask_tested_per_element_compiles_without_spills() -> None:
    """A chunked mask's per-key terms (key / chunk) are kept in the loop by the opaque key: they were hoisted into
    registers the accumulators need (236 B of spill stores under NVRTC 13.5)."""
    cubin = build.build_bwd(AttentionSpec(head_dim=192, dtype="bf16", mask={"kind": "chunked", "chunk": 128}), "sm90")
    assert cubin.source.plan.dkdv_wgmma.kv_halves
    assert all(r.spill_stores == r.spill_loads == r.stack_bytes == 0 for r in cubin.resources)


def test_masked_steps_carry_their_products_into_the_next_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where dV^T goes late (the deterministic plans; here DV_EARLY off), masked specs leave a step's dV^T and dK^T
    running into the next step (CARRY_PRODUCTS_MASKED), unmasked ones wait for them (CARRY_PRODUCTS_UNMASKED); with dV^T
    early no spec carries them (CARRY_PRODUCTS_DV_EARLY). Carried, no other instruction defines the accumulators while a
    product is in flight across the loop's back edge (the first step's products overwrite them): ptxas keeps the wgmmas
    in flight (a zero-initialised accumulator made it serialize every one, C7515: a warpgroup arrive and wait around
    each of the 120 HGMMAs), and the step's last wait is gone from the loop."""
    from attngen.toolchain.sass import disassemble, opcodes

    for mask in ("causal", "none"):
        spec = AttentionSpec(name="carry_early", head_dim=192, dtype="bf16", mask=mask)
        assert halves.dv_early(spec) and not halves.carries_products(spec)
        assert halves.carries_products(spec.model_copy(update={"deterministic": True})) == (mask == "causal")
    monkeypatch.setattr(halves, "DV_EARLY", False)
    for mask, carried in (("causal", True), ({"kind": "sliding_window", "window": [256, 0]}, True), ("none", False)):
        spec = AttentionSpec(name=f"carry_{carried}", head_dim=192, dtype="bf16", mask=mask)
        assert halves.carries_products(spec) == carried
        cubin = build.build_bwd(spec, "sm90")
        t = cubin.source.plan.dkdv_wgmma
        assert t.kv_halves and t.carry_products == carried
        assert f"constexpr bool kCarryProducts = {'true' if carried else 'false'};" in cubin.source.code
        assert not any(r.wgmma_serialized or r.spill_stores for r in cubin.resources), cubin.resources
        ops = opcodes(disassemble(cubin.data))
        assert ops["HGMMA"] == 120 and ops["WARPGROUP"] <= 16, (ops["HGMMA"], ops["WARPGROUP"])


def test_dv_is_issued_before_the_dp_wait_where_p_comes_first() -> None:
    """DV_EARLY: each warpgroup stores its P^T rows and issues dV^T's product (12 HGMMAs: three 64-row boxes x four
    k-steps) after its exps and before dP's wait, so the dS values and the dS^T stores run under it; a softcap's
    derivative varies per element (P and dS in one pass after the wait) and keeps the late order. No spill, the
    wgmmas kept in flight, the same 120 HGMMAs."""
    from attngen.toolchain.sass import disassemble

    for mask in ("none", "causal"):
        spec = AttentionSpec(name=f"early_{mask}", head_dim=192, dtype="bf16", mask=mask)
        assert halves.dv_early(spec)
        cubin = build.build_bwd(spec, "sm90")
        assert cubin.source.plan.dkdv_wgmma.dv_early
        assert "constexpr bool kDvEarly = true;" in cubin.source.code
        assert not any(r.wgmma_serialized or r.spill_stores for r in cubin.resources), cubin.resources
        runs: list[list[object]] = []   # [opcode family, count] runs of the instructions that order a step
        for line in disassemble(cubin.data).splitlines():
            m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
            if m and m.group(1) in ("HGMMA", "MUFU", "STSM", "BAR"):
                if runs and runs[-1][0] == m.group(1):
                    runs[-1][1] += 1   # type: ignore[operator]
                else:
                    runs.append([m.group(1), 1])
        first_exps = next(i for i, (op, _) in enumerate(runs) if op == "MUFU" and _ >= 16)
        after = [op if op != "HGMMA" else f"HGMMA{n}" for op, n in runs[first_exps + 1:first_exps + 6]]
        assert after[:4] == ["STSM", "BAR", "HGMMA12", "BAR"], after   # P^T, its barrier, dV^T, then the dS^T barrier
    softcap = AttentionSpec(name="early_softcap", head_dim=192, dtype="bf16", mask="causal",
                            score_mod={"softcap": 30.0})
    assert not halves.dv_early(softcap)
    assert not plan_bwd(softcap, Arch.sm90).dkdv_wgmma.dv_early  # type: ignore[union-attr]


def test_one_do_stage_keeps_the_wgmmas_in_flight_when_packed() -> None:
    """The one dO stage's wait comes before S's product, with Q's: between S's and dP's issue it made ptxas serialize
    every wgmma of the packed (varlen) kernels (C7515), whose entry state holds more registers."""
    for mask in ("causal", "none"):
        spec = AttentionSpec(name=f"packed_{mask}", head_dim=192, dtype="bf16", mask=mask, seqlens="varlen")
        cubin = build.build_bwd(spec, "sm90")
        assert cubin.source.plan.dkdv_wgmma.do_stages == 1
        assert not any(r.wgmma_serialized or r.spill_stores for r in cubin.resources), cubin.resources
