"""The backward planner: the family chosen, budgets of the dK/dV and dQ kernels, the atomic option, rejections."""

from __future__ import annotations

import pytest

from attngen.catalogue import load_catalogue
from attngen.errors import PlanError
from attngen.families import sm90_bwd_rows
from attngen.families.sm80_bwd import Sm80Backward, atomic_dq_cols, dkdv_registers, dkdv_smem, dq_smem
from attngen.families.sm90_bwd_halves import staged_dq
from attngen.families.sm90_bwd_split import staged_split
from attngen.planning.archs import arch_info
from attngen.planning.ir_bwd import BwdPlan, HopperBwdPlan
from attngen.planning.planner_bwd import plan_bwd
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
        hopper = arch is Arch.sm90 and spec.head_dim % 64 == 0 and not spec.deterministic
        assert p.family == ("sm90_bwd" if hopper else "sm80_bwd") and p.summary()["family"] == p.family
        assert all("bwd" in name for name in p.entry_names)
        if isinstance(p, HopperBwdPlan):
            convert = (f"{p.kernel_name}_dq_convert",) if p.dkdv_wgmma.dq_red else ()
            assert p.entry_names == (f"{p.kernel_name}_preprocess", f"{p.kernel_name}_dkdv_wgmma", *convert)
            t = p.dkdv_wgmma
            assert t.dq_red == (not t.ordered_dq), "tile-ordered unless ordered (row-major, TMA tensor reductions)"
            staged = (staged_dq(spec) if t.kv_halves else staged_split(spec) if t.split
                      else t.dq_red and not t.split)
            assert t.dq_bulk == staged, ("the 64-KV-row consumers stage it; the halves, one or both warpgroups' where "
                                         "unordered; the split, one warpgroup's beside one dO stage, dV early")
            assert p.dkdv_wgmma.smem_bytes <= info.smem_per_block
            continue
        assert isinstance(p, BwdPlan) and len(p.entry_names) == 3
        a, b = p.dkdv, p.dq
        grid = a.warp_rows == 32
        assert not grid or p.dq_atomic, "the grid partition adds dQ with atomics"
        assert a.smem_bytes == dkdv_smem(spec, a.block_n, a.block_m, a.stages, p.dq_atomic, grid) <= info.smem_per_block
        assert b.smem_bytes == dq_smem(spec, b.block_m, b.block_n, b.stages) <= info.smem_per_block
        assert a.regs_estimate <= 255 and b.regs_estimate <= 255
        assert spec.head_dim % a.d_chunk == 0 and spec.head_dim % b.d_chunk == 0


def _mma(spec: AttentionSpec, arch: str, atomic_dq: bool = False) -> BwdPlan:
    """The sm80_bwd family's own plan (whichever family plan_bwd would pick)."""
    return Sm80Backward().plan(spec, arch_info(Arch(arch)), atomic_dq=atomic_dq)


def test_deterministic_specs_never_use_atomics() -> None:
    base = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    assert not _mma(base, "sm90").dq_atomic  # atomic dQ is an option, off by default (measured slower)
    assert _mma(base, "sm90", atomic_dq=True).dq_atomic
    det = base.model_copy(update={"deterministic": True})
    assert not _mma(det, "sm90", atomic_dq=True).dq_atomic
    assert not plan_bwd(det, "sm80").dq_atomic and "atomic-free" in plan_bwd(det, "sm80").reason
    hopper = plan_bwd(det, "sm90")  # the wgmma kernel's TMA reductions, ordered by semaphores
    assert isinstance(hopper, HopperBwdPlan) and hopper.dkdv_wgmma.ordered_dq and "deterministic" in hopper.reason
    assert not plan_bwd(base, "sm90").dkdv_wgmma.ordered_dq


def test_atomic_dq_tiling_and_registers() -> None:
    assert atomic_dq_cols(8, 32, 128) == 32       # 2 x 4 warps, 32 columns each
    assert atomic_dq_cols(8, 128, 128) is None    # 8 x 1 warps: 128 columns, too many registers
    assert atomic_dq_cols(4, 128, 64) is None     # more 16-row tiles than warps
    info = arch_info(Arch.sm90)
    assert dkdv_registers(32, 128, info, 32) == dkdv_registers(32, 128, info) + 16 + 8


def test_hd256_backward_on_small_smem_falls_back_or_explains() -> None:
    spec = AttentionSpec(head_dim=256, dtype="bf16")
    p = _mma(spec, "sm86", atomic_dq=True)  # fits only without the dS^T tile: the atomic-free kernels
    assert not p.dq_atomic and p.dkdv.smem_bytes <= 101376
    assert any("shared memory" in r for r in p.rejected)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_atomic_dq_variant_compiles_without_spills(head_dim: int) -> None:
    """The atomic dQ option stays buildable while it is off by default."""
    from attngen.codegen.renderer import render
    from attngen.toolchain.compiler import compile_source

    p = _mma(AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal"), "sm90", atomic_dq=True)
    assert p.dq_atomic
    cubin = compile_source(render(p))
    assert all((r.spill_stores, r.spill_loads) == (0, 0) for r in cubin.resources), cubin.resources


def test_hopper_backward_serves_sm90_hd128_deterministic_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from attngen.planning.planner_bwd import considered_bwd

    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    p = plan_bwd(spec, "sm90")
    assert isinstance(p, HopperBwdPlan) and p.entry_names[1].endswith("_dkdv_wgmma")
    assert len(p.entry_names) == 3 and p.dkdv_wgmma.dq_red and p.dkdv_wgmma.dq_bulk, "causal too (dq_red_serves)"
    assert p.dkdv_wgmma.dq_before_dk, "dV and dK from registers: dQ's product before dK's (dq_before_dk)"
    unmasked = plan_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="none"), "sm90")
    assert isinstance(unmasked, HopperBwdPlan) and unmasked.entry_names[2].endswith("_dq_convert")
    h = unmasked.dkdv_wgmma
    assert h.smem_bytes <= 232448 and h.regs_estimate <= h.consumer_regs
    assert h.block_n == 128 and h.threads == 384 and "wgmma" in p.reason
    det = plan_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="none", deterministic=True), "sm90")
    assert isinstance(det, HopperBwdPlan) and det.dkdv_wgmma.ordered_dq
    # The ordered dQ stages its boxes in fragment order for bulk reductions into the tile-ordered accumulator as the
    # default does (ORDERED_DQ_BULK; producer warp 1 issues them in each tile's turn), not overlapped with dq_convert;
    # without the switch, the row-major staged path (tensor-map reductions, no dq_convert). The same boxes, 3 stages,
    # tiles and registers either way.
    assert det.dkdv_wgmma.dq_red and det.dkdv_wgmma.dq_bulk and not det.dkdv_wgmma.dq_overlap
    assert len(det.entry_names) == 3 and det.dkdv_wgmma.stages == 3
    monkeypatch.setattr(sm90_bwd_rows, "ORDERED_DQ_BULK", False)
    row_major = plan_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="none", deterministic=True), "sm90")
    assert isinstance(row_major, HopperBwdPlan) and len(row_major.entry_names) == 2
    assert not row_major.dkdv_wgmma.dq_red and row_major.dkdv_wgmma.stages == 3
    assert h.dq_red and h.dq_bulk
    dq_bytes = [t.smem.offset("Rows") - t.smem.offset("DQ") for t in (det.dkdv_wgmma, row_major.dkdv_wgmma, h)]
    assert dq_bytes == [2 * 64 * 64 * 4] * 3 and h.stages == 3
    same = ("block_m", "block_n", "producer_regs", "consumer_regs", "dq_cols", "dq_col_step", "dq_query_step",
            "dkv_from_smem", "dq_before_dk", "regs_estimate")
    assert all(getattr(t.dkdv_wgmma, f) == getattr(h, f) for f in same for t in (det, row_major))
    holes = AttentionSpec(head_dim=128, dtype="bf16", deterministic=True, mask={
        "expr": "doc[b, q_idx] == doc[b, kv_idx] and kv_idx <= q_idx",
        "tensors": {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}})
    assert plan_bwd(holes, "sm90").family == "sm80_bwd", "a mask with holes: the mma.sync kernels when deterministic"
    det256 = plan_bwd(AttentionSpec(head_dim=256, dtype="bf16", mask="causal", deterministic=True), "sm90")
    assert isinstance(det256, HopperBwdPlan) and det256.dkdv_wgmma.split and det256.dkdv_wgmma.ordered_dq
    assert det256.dkdv_wgmma.dq_red and det256.dkdv_wgmma.dq_adders == 2
    assert plan_bwd(spec, "sm80").family == "sm80_bwd" and plan_bwd(spec, "sm100").family == "sm80_bwd"
    why = dict(considered_bwd(spec.model_copy(update={"head_dim": 96}), "sm90"))
    assert "head_dim 96" in why["sm90_bwd"] and why["sm80_bwd"].startswith("chosen")
    assert "comes before it" in dict(considered_bwd(spec, "sm90"))["sm80_bwd"]


def test_backward_layouts_are_computed_once() -> None:
    """Each backward kernel's shared memory is the planner's stack of regions (the template asserts its tile
    sizes fill them): offsets ascend from 0, and the total is the budgeted smem_bytes."""
    from attngen.families.sm90_bwd import tiling as hopper_tiling
    from attngen.planning.archs import arch_info

    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    p = Sm80Backward().plan(spec, arch_info(Arch.sm90))
    tilings = [p.dkdv, p.dq, hopper_tiling(spec, arch_info(Arch.sm90))]
    for t in tilings:
        offsets = [offset for _, offset in t.smem.offsets]
        assert offsets[0] == 0 and offsets == sorted(offsets)
        assert t.smem.total_bytes == t.smem_bytes
    assert [name for name, _ in tilings[0].smem.offsets] == ["K", "V", "Stages", "DS", "PT"]   # the grid's P^T
    assert [name for name, _ in tilings[2].smem.offsets][:4] == ["K", "V", "Q", "DO"]


@pytest.mark.parametrize(("head_dim", "mask", "first"), [(128, "none", True), (128, "causal", True),
                                                         (128, "sliding_window", True), (64, "none", True),
                                                         (64, "causal", True)])
def test_hopper_backward_issues_dq_before_dk_where_it_measured_faster(head_dim: int, mask: str, first: bool) -> None:
    """dV, dQ, then dK (dQ staged while dK runs) where dV and dK are fed from registers (hd64 and hd128, masked or
    not). The step's order reaches the kernel as kDqBeforeDk."""
    from attngen.codegen.renderer import render

    extra = {"window": [64, 0]} if mask == "sliding_window" else {}
    spec = AttentionSpec.model_validate({"head_dim": head_dim, "dtype": "bf16", "mask": mask, **extra})
    plan = plan_bwd(spec, Arch.sm90)
    assert isinstance(plan, HopperBwdPlan) and plan.dkdv_wgmma.dq_before_dk is first
    assert f"constexpr bool kDqBeforeDk = {'true' if first else 'false'};" in render(plan).code


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.value)
def test_backward_plans_carry_their_cost(arch: Arch) -> None:
    """Useful FLOPs 2.5 x the forward's at the reference workload (batch 1, 2048 / head_dim heads, seqlen 4096),
    kernels' times adding up to the predicted time, and a share of the matrix peak between 0 and 1."""
    from attngen.features.mask import mask_trait

    for spec in load_catalogue():
        try:
            p = plan_bwd(spec, arch)
        except PlanError:
            continue
        c = p.cost
        forward = 2048 // spec.head_dim * 4 * 4096**2 * spec.head_dim * mask_trait(spec).cost_density
        assert c.ref_seqlen == 4096 and c.flops == int(2.5 * forward), spec.name
        assert c.predicted_us == pytest.approx(sum(us for _, us in c.kernels), abs=0.02)
        names = [name for name, _ in c.kernels]
        if isinstance(p, HopperBwdPlan):
            assert names == ["preprocess", "dkdv_wgmma"]
        else:
            assert names == ["preprocess", "dkdv", *([] if p.dq_atomic else ["dq"])]
        assert 0 < c.efficiency <= 1 and c.efficiency == pytest.approx(c.t_mma_us / c.predicted_us, abs=2e-3)
        assert p.summary()["cost"] == c.model_dump()


def test_hopper_backward_cost_meets_its_calibration() -> None:
    """sm90_bwd_cost's step overhead is calibrated on hd128 unmasked (468 / 558 TFLOP/s measured on the H100 at 2k / 8k,
    peers_3: the reference workload's 4k between them); the causal plan does half the work, and the atomic-free
    sm80_bwd plan on sm90 is predicted slower."""
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="none")
    full = plan_bwd(spec, Arch.sm90)
    assert isinstance(full, HopperBwdPlan)
    assert 468 < full.cost.flops / full.cost.predicted_us / 1e6 < 558
    causal = plan_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), Arch.sm90)
    assert causal.cost.flops * 2 == full.cost.flops
    assert causal.cost.predicted_us < 0.55 * full.cost.predicted_us
    det = plan_bwd(spec.model_copy(update={"deterministic": True}), Arch.sm90)
    assert isinstance(det, HopperBwdPlan) and det.dkdv_wgmma.ordered_dq
    assert det.cost.predicted_us > full.cost.predicted_us
    mma = plan_bwd(spec.model_copy(update={"deterministic": True}), Arch.sm80)
    assert isinstance(mma, BwdPlan)


@pytest.mark.parametrize("head_dim", [256])
def test_hopper_backward_split_is_bounded_by_its_l2_traffic(head_dim: int) -> None:
    """The hd256 split (64 KV rows per block) reads Q and dO and reduces dQ once per 64 KV rows: the model bounds
    it by that L2 traffic at sm90_bwd_cost.step_l2_gbps (profiled at hd256: L2 84% busy with v2 and with v4 reductions),
    which predicts the H100's measured TFLOP/s at 8k within 10%: 364-386 unmasked and 332-370 causal with v4
    (results/h100/dq_red, peers_2), 264 / 254 with v2 (softmax_rows_1). The compute terms alone predict ~400. hd128
    (128 KV rows per block) moves half the bytes per FLOP and stays compute-bound."""
    from attngen.families import sm90_bwd_cost, sm90_bwd_split
    from attngen.features.mask import mask_trait
    from attngen.planning.shared import REF_HIDDEN, REF_SEQLEN

    def l2_us(p: HopperBwdPlan) -> float:
        t = p.dkdv_wgmma
        steps = -(-REF_SEQLEN // t.block_n) * (REF_HIDDEN // p.spec.head_dim) * -(-REF_SEQLEN // t.block_m)
        l2_bytes = steps * mask_trait(p.spec).cost_density * sm90_bwd_cost.step_l2_bytes(p.spec, t)
        return l2_bytes / (sm90_bwd_cost.step_l2_gbps(t) * 1e3)

    points = [(False, "none", 264), (False, "causal", 254)]
    for v4, mask, measured in points + [(True, "none", 375), (True, "causal", 355)]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sm90_bwd_split, "SPLIT_DQ_V4", v4)
            p = plan_bwd(AttentionSpec(head_dim=head_dim, dtype="bf16", mask=mask), Arch.sm90)
        assert isinstance(p, HopperBwdPlan) and p.dkdv_wgmma.dq_red == v4
        assert dict(p.cost.kernels)["dkdv_wgmma"] >= l2_us(p) * 0.999
        assert p.cost.flops / p.cost.predicted_us / 1e6 == pytest.approx(measured, rel=0.1)
    hd128 = plan_bwd(AttentionSpec(head_dim=128, dtype="bf16", mask="none"), Arch.sm90)
    assert isinstance(hd128, HopperBwdPlan)
    assert dict(hd128.cost.kernels)["dkdv_wgmma"] > 1.2 * l2_us(hd128)


@pytest.mark.parametrize(("head_dim", "tile"), [(64, (128, 128, 64)), (128, (128, 64, 128)), (256, (64, 64, 256))])
def test_sm90_mma_sync_backward_takes_the_grid_partition(head_dim: int, tile: tuple[int, int, int]) -> None:
    """On sm90 the atomic plans take the grid partition's tiles measured fastest (results/h100/sm80_grid): its
    shared-memory reads per flop are the lower (the cost model's binding term there), and a deterministic spec
    keeps the rows partition (its dQ kernel has no grid)."""
    from attngen.families.sm80_bwd import dkdv_candidates, dkdv_cost, dkdv_smem_reads
    from attngen.planning.archs import arch_info
    from attngen.planning.ir_bwd import DkdvTiling

    info = arch_info(Arch.sm90)
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal", pipeline="multistage")
    p = Sm80Backward().plan(spec, info)
    a = p.dkdv
    assert p.dq_atomic and a.warp_rows == 32 and (a.block_n, a.block_m, a.d_chunk, a.num_warps) == (*tile, 8)
    rows = Sm80Backward().plan(spec.model_copy(update={"deterministic": True}), info)
    assert rows.dkdv.warp_rows == 16 and not rows.dq_atomic
    best_rows = min(dkdv_candidates(spec, info, [], True), key=lambda t: dkdv_cost(spec, info, t, True))

    def flops_per_byte(t: DkdvTiling) -> float:   # S^T, dP^T over the head dim; dV, dK, dQ over the slice
        return 2 * t.block_n * t.block_m * (2 * head_dim + 3 * t.d_chunk) / dkdv_smem_reads(spec, t, True)
    assert flops_per_byte(a) > 1.15 * flops_per_byte(best_rows)   # 1.2 at hd64, 1.37 at hd128
