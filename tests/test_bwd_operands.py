"""Where the sm90 backward's dV and dK products read P^T and dS^T (packed registers or shared memory,
sm90_bwd_rows.DKV_FROM_SMEM_BLOCK_M), how the shared-memory budget is spent on dS^T tiles (sm90_bwd_rows.DS_BUFFERS)
and Q/dO stages, how dK and dV leave (sm90_bwd_rows.DKV_STAGED), and which tiles issue dQ's product a step late with
the warpgroups staggered (sm90_bwd_rows.DQ_DEFERRED_BLOCK_M, DQ_STAGGER_BLOCK_M), and how the 64-query step orders
its exps and dV's product (sm90_bwd_rows.EXPS_BEFORE_DP, DV_AFTER_DS). No GPU needed: plans, rendered code and, for a
few, the compiled SASS."""

from __future__ import annotations

import pytest

from attngen.codegen.renderer import render
from attngen.families import sm90_bwd, sm90_bwd_rows
from attngen.planning.archs import arch_info
from attngen.planning.ir_bwd import HopperBwdPlan, HopperBwdTiling
from attngen.planning.planner_bwd import plan_bwd
from attngen.spec.model import Arch, AttentionSpec
from attngen.toolchain import builder as build
from attngen.toolchain.sass import disassemble, kernel_opcodes, opcodes

BUDGET = arch_info(Arch.sm90).smem_per_block


def _spec(head_dim: int, **update: object) -> AttentionSpec:
    return AttentionSpec.model_validate({"head_dim": head_dim, "dtype": "bf16", "mask": "none", **update})


def _plan(head_dim: int, **update: object) -> HopperBwdPlan:
    p = plan_bwd(_spec(head_dim, **update), Arch.sm90)
    assert isinstance(p, HopperBwdPlan)
    return p


def _tiling(head_dim: int, **update: object) -> HopperBwdTiling:
    return _plan(head_dim, **update).dkdv_wgmma


def _region(t: HopperBwdTiling, name: str) -> int:
    """The bytes of region `name` (to the next region's offset)."""
    offsets = t.smem.offsets
    names = [n for n, _ in offsets]
    i = names.index(name)
    return offsets[i + 1][1] - offsets[i][1]


def test_dv_and_dk_read_registers_at_both_head_dims() -> None:
    """RS products at hd64 (128-query steps) and hd128: no P^T tile, dQ before dK, and the kernel told so."""
    for head_dim in (64, 128):
        t = _tiling(head_dim)
        assert not t.dkv_from_smem and t.dq_before_dk and _region(t, "P") == 0, head_dim
        code = render(_plan(head_dim)).code
        assert "constexpr bool kDkvFromSmem = false;" in code and "constexpr int kDsBuffers = 2;" in code


def test_ds_tiles_come_before_stages_in_the_budget() -> None:
    """Two dS^T tiles, then the most Q/dO stages: hd128 keeps three stages beside them (226.6 KB), hd64's 128-query
    stages leave room for two (three would pass sm90's budget)."""
    t128, t64 = _tiling(128), _tiling(64)
    assert (t128.stages, t128.ds_buffers, t64.stages, t64.ds_buffers) == (3, 2, 2, 2)
    assert _region(t128, "DS") == 2 * 128 * 64 * 2 and _region(t64, "DS") == 2 * 128 * 128 * 2
    assert t128.smem_bytes <= BUDGET and t64.smem_bytes <= BUDGET
    three = sm90_bwd_rows._rows_layout(_spec(64), bm=128, stages=3, ds_buffers=2, from_smem=False, dq_cols=64,
                                  words=0)
    assert three.total_bytes > BUDGET


def test_a_mask_with_holes_keeps_two_stages_and_two_ds_tiles() -> None:
    t = _tiling(128, mask={"expr": "(q_idx // 128) % 2 == (kv_idx // 128) % 2"})
    assert t.schedule_words > 0 and (t.stages, t.ds_buffers) == (sm90_bwd_rows.MIN_STAGES, 2)


def test_one_ds_tile_takes_the_stages_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sm90_bwd_rows, "DS_BUFFERS", 1)
    t128, t64 = _tiling(128), _tiling(64)
    assert (t128.stages, t128.ds_buffers, t64.stages, t64.ds_buffers) == (3, 1, 3, 1)


def test_shared_memory_operands_keep_one_ds_tile_and_a_p_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SS form (DKV_FROM_SMEM_BLOCK_M = {128}, hd64's former default): P^T beside one dS^T tile (both barriers
    needed: a warpgroup's store may not overwrite what the other's products of the step before still read), dV and dK
    issued before dQ; it still compiles without spills."""
    monkeypatch.setattr(sm90_bwd_rows, "DKV_FROM_SMEM_BLOCK_M", frozenset({128}))
    t = _tiling(64)
    assert t.dkv_from_smem and not t.dq_before_dk and t.ds_buffers == 1
    assert _region(t, "P") == _region(t, "DS") == 128 * 128 * 2
    assert not _tiling(128).dkv_from_smem, "hd128's 64-query steps unaffected"
    cubin = build.build_bwd(_spec(64), "sm90")
    dkdv = [r for r in cubin.resources if r.name.endswith("dkdv_wgmma")]
    assert dkdv and not any(r.spill_stores or r.wgmma_serialized for r in dkdv)


def test_two_ds_tiles_drop_a_named_barrier_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step's barrier before dS^T's store is gone with two tiles (the barrier after it stays): one BAR fewer in the
    SASS (the preprocess and dq_convert kernels beside it unchanged), the same HGMMAs, and no spills either way."""
    def counts() -> dict[str, int]:
        cubin = build.build_bwd(_spec(128), "sm90")
        assert not any(r.spill_stores or r.wgmma_serialized for r in cubin.resources)
        return opcodes(disassemble(cubin.data))

    two = counts()
    monkeypatch.setattr(sm90_bwd_rows, "DS_BUFFERS", 1)
    one = counts()
    assert one["BAR"] == two["BAR"] + 1 and one["HGMMA"] == two["HGMMA"] > 0


def test_dk_and_dv_leave_through_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """dkv_staged (64-KV-row warpgroups; the head_dim split keeps its own stores): dK and dV packed into shared memory
    by stmatrix and written by 16-byte row chunks, fewer global stores than the fragments' 4-byte ones, no spills; the
    switch off restores the fragments' stores."""
    assert _tiling(64).dkv_staged and _tiling(128, mask="causal").dkv_staged
    assert not _tiling(256).dkv_staged

    def counts() -> dict[str, int]:
        cubin = build.build_bwd(_spec(128, mask="causal"), "sm90")
        assert not any(r.spill_stores or r.wgmma_serialized for r in cubin.resources)
        return opcodes(disassemble(cubin.data))

    staged = counts()
    monkeypatch.setattr(sm90_bwd_rows, "DKV_STAGED", False)
    assert not _tiling(128).dkv_staged
    frags = counts()
    assert staged["STG"] < frags["STG"] and staged["STSM"] > frags["STSM"]


def test_explain_says_which_layouts_were_rejected_and_why() -> None:
    """explain lists the (stages, dS^T tiles) layouts the planner weighed up to the one it took, each rejected one with
    the budget it passed."""
    plan = _plan(64)
    lines = sm90_bwd.Sm90Backward().explain_lines(plan)
    layouts = [line for line in lines if line.startswith("shared memory")]
    # 233,528 B, and 32 B of the deferred dQ's mbarriers (the deferral tests below)
    assert layouts == [f"shared memory, 3 stages x 2 dS^T tiles: {233560} B, rejected: over sm90's {BUDGET} B",
                       f"shared memory, 2 stages x 2 dS^T tiles: {plan.dkdv_wgmma.smem_bytes} B, taken"]
    assert [line for line in sm90_bwd.Sm90Backward().explain_lines(_plan(128)) if line.startswith("shared memory")] \
        == [f"shared memory, 3 stages x 2 dS^T tiles: {_tiling(128).smem_bytes} B, taken"]


@pytest.mark.parametrize("mask", ["none", "causal", "sliding_window"])
def test_hd64_defers_dq_and_staggers_hd128_does_not(mask: str) -> None:
    """hd64's 128-query tiles take the deferral and the stagger (measured faster), hd128's 64-query tiles neither
    (measured level, the stagger slower); the deferral's four mbarriers (two dS^T tiles, stored and free) sit in the
    layout and the kernel is told."""
    extra = {"window": [256, 0]} if mask == "sliding_window" else {}
    t64, t128 = _plan(64, mask=mask, **extra).dkdv_wgmma, _plan(128, mask=mask, **extra).dkdv_wgmma
    assert t64.dq_deferred and t64.dq_stagger and t64.ds_buffers == 2
    assert not t128.dq_deferred and not t128.dq_stagger
    assert _region(t64, "Bar") == 8 * (1 + 2 * t64.stages + 2 * 2)
    assert _region(t128, "Bar") == 8 * (1 + 2 * t128.stages)
    code = render(_plan(64, mask=mask, **extra)).code
    assert "constexpr bool kDqDeferred = true;" in code and "constexpr bool kDqStagger = true;" in code
    assert "dQ's product a step late, warpgroups staggered" in sm90_bwd.Sm90Backward().plan_line(_plan(64))


def test_ordered_dq_and_shared_memory_operands_keep_the_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ordered dQ (deterministic) keeps its turns in step, and P^T / dS^T from shared memory (one dS^T tile) have no
    second tile to alternate: neither defers; an empty DQ_DEFERRED_BLOCK_M turns it off and the stagger with it."""
    assert not _plan(64, deterministic=True).dkdv_wgmma.dq_deferred
    monkeypatch.setattr(sm90_bwd_rows, "DKV_FROM_SMEM_BLOCK_M", frozenset({128}))
    assert not _plan(64).dkdv_wgmma.dq_deferred
    monkeypatch.setattr(sm90_bwd_rows, "DKV_FROM_SMEM_BLOCK_M", frozenset())
    monkeypatch.setattr(sm90_bwd_rows, "DQ_DEFERRED_BLOCK_M", frozenset())
    t = _plan(64).dkdv_wgmma
    assert not t.dq_deferred and not t.dq_stagger and _region(t, "Bar") == 8 * (1 + 2 * t.stages)


def test_explain_counts_the_deferral_in_every_layout_it_weighed() -> None:
    """explain's rejected three-stage layout of hd64 includes the deferral's mbarriers as the taken one does."""
    plan = _plan(64)
    lines = [line for line in sm90_bwd.Sm90Backward().explain_lines(plan) if line.startswith("shared memory")]
    three = sm90_bwd_rows._rows_layout(_spec(64), bm=128, stages=3, ds_buffers=2, from_smem=False, dq_cols=64, words=0,
                                  deferred=True)
    assert lines[0].startswith(f"shared memory, 3 stages x 2 dS^T tiles: {three.total_bytes} B, rejected")
    assert lines[1] == f"shared memory, 2 stages x 2 dS^T tiles: {plan.dkdv_wgmma.smem_bytes} B, taken"


def _dkdv_ops(spec: AttentionSpec) -> tuple[list[str], str]:
    cubin = build.build_bwd(spec, "sm90")
    dkdv = [r for r in cubin.resources if r.name.endswith("dkdv_wgmma")]
    assert dkdv and not any(r.spill_stores or r.wgmma_serialized for r in dkdv), dkdv
    sass = disassemble(cubin.data)
    ops = next(v for name, v in kernel_opcodes(sass).items() if name.endswith("dkdv_wgmma"))
    return ops, sass


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_deferred_kernel_compiles_clean_with_the_last_dq_after_the_loop(monkeypatch: pytest.MonkeyPatch,
                                                                        mask: str) -> None:
    """Deferred: no spill and no serialized wgmma (a wgmma under a branch serialized them all, so the first step's dQ
    product is issued unconditionally); one dQ product more in the SASS (the last step's, after the loop: block_n / 16
    k-steps); the stagger's arrive on named barrier 2 of both consumer warpgroups. Off: neither."""
    deferred, sass = _dkdv_ops(_spec(64, mask=mask))
    assert "BAR.ARV 0x2, 0x100" in sass
    monkeypatch.setattr(sm90_bwd_rows, "DQ_DEFERRED_BLOCK_M", frozenset())
    main, sass_off = _dkdv_ops(_spec(64, mask=mask))
    assert "BAR.ARV 0x2, 0x100" not in sass_off
    assert deferred.count("HGMMA") == main.count("HGMMA") + sm90_bwd_rows.BLOCK_N // 16
    assert deferred.count("SYNCS") > main.count("SYNCS")


def _longest_mufu_run(ops: list[str]) -> int:
    best = run = 0
    for op in ops:
        run = run + 1 if op.startswith("MUFU") else 0
        best = max(best, run)
    return best


@pytest.mark.parametrize("mask", ["none", "causal"])
def test_hd128_splits_its_exps_around_the_dp_wait(monkeypatch: pytest.MonkeyPatch, mask: str) -> None:
    """hd128's 64-query step runs the exps of 4 of its 8 query tiles before dP^T's wait and the rest beside the dS
    values, with dV's product after dS^T's stores; hd64 (deferred, 128 queries) splits 8 of its 16 (test below). In
    the SASS the 32 MUFUs a thread issues per step no longer run back to back (16 at most; 28 or more with
    EXPS_BEFORE_DP empty, as ptxas interleaves an instruction or two, and with the accumulators from the row values
    off: sm90_bwd_rows.DP_FROM_D, with which ptxas interleaves them even unsplit), with no spill."""
    t128, t64 = _tiling(128, mask=mask), _tiling(64, mask=mask)
    assert (t128.exps_before_dp, t128.dv_after_ds) == (4, True)
    assert (t64.exps_before_dp, t64.dv_after_ds) == (8, False)
    document = {"expr": "doc[b, q_idx] == doc[b, kv_idx] and kv_idx <= q_idx",
                "tensors": {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}}
    assert _tiling(128, mask=document).exps_before_dp == 0   # a mask with holes: its varlen twin spilled 4 B split
    line = sm90_bwd.Sm90Backward().plan_line(_plan(128, mask=mask))
    assert "dV's product after dS^T's stores, exps of 4 of 8 query tiles before dP^T's wait" in line
    assert "constexpr int kExpsBeforeDp = 4;" in render(_plan(128, mask=mask)).code
    split, _ = _dkdv_ops(_spec(128, mask=mask))
    monkeypatch.setattr(sm90_bwd_rows, "EXPS_BEFORE_DP", {})
    monkeypatch.setattr(sm90_bwd_rows, "DV_AFTER_DS", False)
    assert (_tiling(128, mask=mask).exps_before_dp, _tiling(128, mask=mask).dv_after_ds) == (0, False)
    assert "constexpr int kExpsBeforeDp = kQTiles;" in render(_plan(128, mask=mask)).code
    unsplit, _ = _dkdv_ops(_spec(128, mask=mask))
    monkeypatch.setattr(sm90_bwd_rows, "DP_FROM_D", False)
    whole, _ = _dkdv_ops(_spec(128, mask=mask))
    runs = (_longest_mufu_run(split), _longest_mufu_run(unsplit), _longest_mufu_run(whole))
    assert runs[0] <= 16 and runs[1] <= 16 and runs[2] >= 28, runs


def test_accumulators_start_at_the_row_values() -> None:
    """sm90_bwd_rows.DP_FROM_D: the 64-KV-row consumers' S^T accumulator starts at -LSE / scale_log2 where there is no
    score mod, dP^T's at -D where the score mod's derivative is one constant; the preprocess writes those row values
    so. In the SASS of hd64's dK/dV kernel no FADD is left of the dS values' dP - D (128 with it off under the device's
    NVRTC 13.0, 64 under newer ones), with no spill; its exps split 8 of 16 tiles around dP^T's wait, which the
    registers freed allow only when both start so. hd192 and hd256 keep the subtraction."""
    cases = {None: (True, True), "alibi": (False, True), "softcap": (False, False)}
    for mod, want in cases.items():
        score_mod = {"alibi": {"alibi": "standard"}, "softcap": {"softcap": 20.0}}.get(mod or "")
        t = _tiling(128, mask="causal", score_mod=score_mod)
        assert (t.s_from_lse, t.dp_from_d) == want, mod
    assert not any((_tiling(d).s_from_lse, _tiling(d).dp_from_d) != (False, False) for d in (192, 256))
    assert _tiling(64).exps_before_dp == 8
    alibi64 = _tiling(64, score_mod={"alibi": "standard"})   # 128-query steps: both or neither
    assert (alibi64.s_from_lse, alibi64.dp_from_d, alibi64.exps_before_dp) == (False, False, 0)
    _dkdv_ops(_spec(64, score_mod={"expr": "score * 0.5"}))   # no spill, no serialized wgmma (dP^T's alone: 48 B)
    line = sm90_bwd.Sm90Backward().plan_line(_plan(64))
    assert "accumulators start: S^T's at -LSE and dP^T's at -D" in line
    step = next(x for x in sm90_bwd.Sm90Backward().explain_lines(_plan(64)) if x.startswith("step: "))
    assert step.endswith("exps of 8 of 16 query tiles before dP^T's wait; accumulators start: S^T's at -LSE and "
                         "dP^T's at -D"), step   # explain says how a step runs too
    code = render(_plan(64)).code
    assert "constexpr bool kLseRowsOverScale = true;" in code and "constexpr bool kDRowsNegated = true;" in code
    assert "constexpr bool kDpFromD = true;" in code and "constexpr bool kSFromLse = true;" in code
    on, _ = _dkdv_ops(_spec(64))
    assert sum(op.startswith("FADD") for op in on) == 0


def test_accumulators_off_subtract_after_the_products(monkeypatch: pytest.MonkeyPatch) -> None:
    """With sm90_bwd_rows.DP_FROM_D off the row values stay as they were (the LSE in log2 units, D) and the dS values
    subtract D after dP^T's product."""
    monkeypatch.setattr(sm90_bwd_rows, "DP_FROM_D", False)
    monkeypatch.setattr(sm90_bwd_rows, "S_FROM_LSE", False)
    t = _tiling(64)
    assert (t.s_from_lse, t.dp_from_d, t.exps_before_dp) == (False, False, 0)   # the split spilled without them
    code = render(_plan(64)).code
    assert "constexpr bool kLseRowsOverScale = false;" in code and "constexpr bool kDRowsNegated = false;" in code
    off, _ = _dkdv_ops(_spec(64))
    assert sum(op.startswith("FADD") for op in off) >= 64


HOLES = {"expr": "(q_idx // 128) % 2 == (kv_idx // 128) % 2"}


@pytest.mark.parametrize(("head_dim", "update"), [(64, {"mask": "none"}), (64, {"mask": "causal"}),
                                                  (128, {"mask": "causal"}), (128, {"mask": HOLES})])
def test_v_late_takes_an_mbarrier_of_its_own(monkeypatch: pytest.MonkeyPatch, head_dim: int,
                                             update: dict[str, object]) -> None:
    """sm90_bwd_rows.V_LATE: V loaded after the first Q/dO stage on an mbarrier of its own (8 bytes more, the last
    mbarrier), the plan and explain say so, and the dK/dV kernel compiles with no spill and no serialized wgmma, with
    the same wgmmas and more mbarrier operations (SYNCS: V's init, arm and wait); off (the default) renders kVLate
    false and the layout of before."""
    off = _tiling(head_dim, **update)
    assert not off.v_late and "constexpr bool kVLate = false;" in render(_plan(head_dim, **update)).code
    without, _ = _dkdv_ops(_spec(head_dim, **update))
    monkeypatch.setattr(sm90_bwd_rows, "V_LATE", True)
    on = _tiling(head_dim, **update)
    assert on.v_late and _region(on, "Bar") == _region(off, "Bar") + 8 and on.smem_bytes == off.smem_bytes + 8
    assert (on.stages, on.ds_buffers) == (off.stages, off.ds_buffers)
    assert "constexpr bool kVLate = true;" in render(_plan(head_dim, **update)).code
    assert "V loaded after the first Q/dO stage" in sm90_bwd.Sm90Backward().plan_line(_plan(head_dim, **update))
    with_v, _ = _dkdv_ops(_spec(head_dim, **update))
    assert with_v.count("HGMMA") == without.count("HGMMA")
    assert with_v.count("SYNCS") > without.count("SYNCS"), (with_v.count("SYNCS"), without.count("SYNCS"))


def test_v_late_stays_off_with_an_ordered_dq(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ordered (deterministic) dQ keeps V with K: its producer warpgroup's 24 registers hold the turns' passes too,
    and V's load in the first step made hd64's deterministic causal kernel spill 28 B under NVRTC 13.0."""
    monkeypatch.setattr(sm90_bwd_rows, "V_LATE", True)
    for head_dim in (64, 128):
        t = _tiling(head_dim, mask="causal", deterministic=True)
        assert t.ordered_dq and not t.v_late, head_dim


@pytest.mark.parametrize("head_dim", [64, 128])
def test_dv_out_first_writes_dv_before_the_warpgroups_meet(monkeypatch: pytest.MonkeyPatch, head_dim: int) -> None:
    """sm90_bwd_rows.DV_OUT_FIRST: with dK and dV staged, each warpgroup packs and writes its dV rows before the
    epilogue's barrier and dK's after it; the plan says so and the kernel compiles with no spill and the same wgmmas,
    the same global stores (16-byte row chunks of both tiles). Off (the default) renders kDvOutFirst false."""
    assert not _tiling(head_dim).dv_out_first and "constexpr bool kDvOutFirst = false;" in render(_plan(head_dim)).code
    without, _ = _dkdv_ops(_spec(head_dim, mask="causal"))
    monkeypatch.setattr(sm90_bwd_rows, "DV_OUT_FIRST", True)
    t = _tiling(head_dim)
    assert t.dv_out_first and t.dkv_staged and t.smem_bytes == _tiling(head_dim).smem_bytes
    assert "constexpr bool kDvOutFirst = true;" in render(_plan(head_dim)).code
    assert "dK and dV out through shared memory, dV before the warpgroups meet" in \
        sm90_bwd.Sm90Backward().plan_line(_plan(head_dim))
    first, _ = _dkdv_ops(_spec(head_dim, mask="causal"))
    assert first.count("HGMMA") == without.count("HGMMA") and first.count("STG") == without.count("STG")
    monkeypatch.setattr(sm90_bwd_rows, "DKV_STAGED", False)
    assert not _tiling(head_dim).dv_out_first   # only with dK and dV staged
