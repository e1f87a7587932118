"""The backward planner: budgets of the dK/dV and dQ kernels, the atomic choice, rejections."""

from __future__ import annotations

import pytest

from attngen.catalogue import load_catalogue
from attngen.errors import PlanError
from attngen.planning.archs import arch_info
from attngen.planning.planner_bwd import atomic_dq_cols, dkdv_registers, dkdv_smem, dq_smem, plan_bwd
from attngen.spec.model import Arch, AttentionSpec

ARCHS = (Arch.sm80, Arch.sm86, Arch.sm90, Arch.sm100)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.value)
def test_catalogue_backward_plans_fit_the_budget(arch: Arch) -> None:
    info = arch_info(arch)
    for spec in load_catalogue():
        try:
            p = plan_bwd(spec, arch)
        except PlanError as exc:
            assert arch is Arch.sm86 and "fits" in str(exc), str(exc)
            continue
        a, b = p.dkdv, p.dq
        assert a.smem_bytes == dkdv_smem(spec, a.block_n, a.block_m, a.stages, p.dq_atomic) <= info.smem_per_block
        assert b.smem_bytes == dq_smem(spec, b.block_m, b.block_n, b.stages) <= info.smem_per_block
        assert a.regs_estimate <= 255 and b.regs_estimate <= 255
        assert spec.head_dim % a.d_chunk == 0 and spec.head_dim % b.d_chunk == 0
        assert all("bwd" in name for name in p.entry_names)
        assert len(p.entry_names) == (4 if p.hopper else 3)
        assert (p.hopper is not None) == (arch is Arch.sm90 and spec.head_dim in (64, 128) and not spec.deterministic)


def test_deterministic_specs_never_use_atomics(monkeypatch: pytest.MonkeyPatch) -> None:
    import attngen.planning.planner_bwd as pb

    base = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    assert not plan_bwd(base, "sm90").dq_atomic  # atomic dQ is off by default (measured slower)
    monkeypatch.setattr(pb, "USE_ATOMIC_DQ", True)
    assert plan_bwd(base, "sm90").dq_atomic
    det = base.model_copy(update={"deterministic": True})
    assert not plan_bwd(det, "sm90").dq_atomic
    assert "atomic-free" in plan_bwd(det, "sm90").reason


def test_atomic_dq_tiling_and_registers() -> None:
    assert atomic_dq_cols(8, 32, 128) == 32       # 2 x 4 warps, 32 columns each
    assert atomic_dq_cols(8, 128, 128) is None    # 8 x 1 warps: 128 columns, too many registers
    assert atomic_dq_cols(4, 128, 64) is None     # more 16-row tiles than warps
    info = arch_info(Arch.sm90)
    assert dkdv_registers(32, 128, info, 32) == dkdv_registers(32, 128, info) + 16 + 8


def test_hd256_backward_on_small_smem_falls_back_or_explains(monkeypatch: pytest.MonkeyPatch) -> None:
    import attngen.planning.planner_bwd as pb

    monkeypatch.setattr(pb, "USE_ATOMIC_DQ", True)
    spec = AttentionSpec(head_dim=256, dtype="bf16")
    p = plan_bwd(spec, "sm86")  # fits only without the dS^T tile: the atomic-free kernels
    assert not p.dq_atomic and p.dkdv.smem_bytes <= 101376
    assert any("shared memory" in r for r in p.rejected)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_atomic_dq_variant_compiles_without_spills(head_dim: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The atomic dQ path stays buildable while it is off by default."""
    import attngen.planning.planner_bwd as pb
    from attngen.codegen.renderer import render_bwd
    from attngen.toolchain.compiler import compile_source

    monkeypatch.setattr(pb, "USE_ATOMIC_DQ", True)
    p = plan_bwd(AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal"), "sm90")
    assert p.dq_atomic
    cubin = compile_source(render_bwd(p))
    assert all((r.spill_stores, r.spill_loads) == (0, 0) for r in cubin.resources), cubin.resources


def test_hopper_backward_serves_sm90_hd128_unless_deterministic() -> None:
    from attngen.planning.planner_bwd import plan_bwd

    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    p = plan_bwd(spec, "sm90")
    assert p.hopper is not None and p.entry_names[-1].endswith("_dkdv_wgmma")
    assert p.hopper.smem_bytes <= 232448 and p.hopper.regs_estimate <= p.hopper.consumer_regs
    assert p.hopper.block_n == 128 and p.hopper.threads == 384 and "wgmma" in p.reason
    assert plan_bwd(spec.model_copy(update={"deterministic": True}), "sm90").hopper is None
    assert plan_bwd(spec, "sm80").hopper is None and plan_bwd(spec, "sm100").hopper is None
    assert "head_dim 256" in plan_bwd(spec.model_copy(update={"head_dim": 256}), "sm90").reason
