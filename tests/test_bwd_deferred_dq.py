"""The sm90 backward's deferred dQ (sm90_bwd.DQ_DEFERRED_BLOCK_M, DQ_STAGGER_BLOCK_M): which plans take it, the
mbarriers it adds to the layout, what explain and the plan line say, and the compiled kernel (no spill, no serialized
wgmma, the last step's dQ product after the loop, the stagger's barrier). No GPU needed."""

from __future__ import annotations

import pytest

from attngen.codegen.renderer import render
from attngen.families import sm90_bwd
from attngen.planning.ir import HopperBwdPlan, HopperBwdTiling
from attngen.planning.planner_bwd import plan_bwd
from attngen.spec.model import Arch, AttentionSpec
from attngen.toolchain import builder as build
from attngen.toolchain.sass import disassemble, kernel_opcodes


def _spec(head_dim: int, **update: object) -> AttentionSpec:
    return AttentionSpec.model_validate({"head_dim": head_dim, "dtype": "bf16", "mask": "none", **update})


def _plan(head_dim: int, **update: object) -> HopperBwdPlan:
    p = plan_bwd(_spec(head_dim, **update), Arch.sm90)
    assert isinstance(p, HopperBwdPlan)
    return p


def _bar_bytes(t: HopperBwdTiling) -> int:
    offsets = dict(t.smem.offsets)
    return offsets["Schedule"] - offsets["Bar"]


@pytest.mark.parametrize("mask", ["none", "causal", "sliding_window"])
def test_hd64_defers_dq_and_staggers_hd128_does_not(mask: str) -> None:
    """hd64's 128-query tiles take the deferral and the stagger (measured faster), hd128's 64-query tiles neither
    (measured level, the stagger slower); the deferral's four mbarriers (two dS^T tiles, stored and free) sit in the
    layout and the kernel is told."""
    extra = {"window": [256, 0]} if mask == "sliding_window" else {}
    t64, t128 = _plan(64, mask=mask, **extra).dkdv_wgmma, _plan(128, mask=mask, **extra).dkdv_wgmma
    assert t64.dq_deferred and t64.dq_stagger and t64.ds_buffers == 2
    assert not t128.dq_deferred and not t128.dq_stagger
    assert _bar_bytes(t64) == 8 * (1 + 2 * t64.stages + 2 * 2)
    assert _bar_bytes(t128) == 8 * (1 + 2 * t128.stages)
    code = render(_plan(64, mask=mask, **extra)).code
    assert "constexpr bool kDqDeferred = true;" in code and "constexpr bool kDqStagger = true;" in code
    assert "dQ's product a step late, warpgroups staggered" in sm90_bwd.Sm90Backward().plan_line(_plan(64))


def test_ordered_dq_and_shared_memory_operands_keep_the_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ordered dQ (deterministic) keeps its turns in step, and P^T / dS^T from shared memory (one dS^T tile) have no
    second tile to alternate: neither defers; an empty DQ_DEFERRED_BLOCK_M turns it off and the stagger with it."""
    assert not _plan(64, deterministic=True).dkdv_wgmma.dq_deferred
    monkeypatch.setattr(sm90_bwd, "DKV_FROM_SMEM_BLOCK_M", frozenset({128}))
    assert not _plan(64).dkdv_wgmma.dq_deferred
    monkeypatch.setattr(sm90_bwd, "DKV_FROM_SMEM_BLOCK_M", frozenset())
    monkeypatch.setattr(sm90_bwd, "DQ_DEFERRED_BLOCK_M", frozenset())
    t = _plan(64).dkdv_wgmma
    assert not t.dq_deferred and not t.dq_stagger and _bar_bytes(t) == 8 * (1 + 2 * t.stages)


def test_explain_counts_the_deferral_in_every_layout_it_weighed() -> None:
    """explain's rejected three-stage layout of hd64 includes the deferral's mbarriers as the taken one does."""
    plan = _plan(64)
    lines = [line for line in sm90_bwd.Sm90Backward().explain_lines(plan) if line.startswith("shared memory")]
    three = sm90_bwd._rows_layout(_spec(64), bm=128, stages=3, ds_buffers=2, from_smem=False, dq_cols=64, words=0,
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
    monkeypatch.setattr(sm90_bwd, "DQ_DEFERRED_BLOCK_M", frozenset())
    main, sass_off = _dkdv_ops(_spec(64, mask=mask))
    assert "BAR.ARV 0x2, 0x100" not in sass_off
    assert deferred.count("HGMMA") == main.count("HGMMA") + sm90_bwd.BLOCK_N // 16
    assert deferred.count("SYNCS") > main.count("SYNCS")
