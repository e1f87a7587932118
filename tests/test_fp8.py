"""The fp8 (e4m3) forward foundation: the dtype trait, spec validation, planning refusals, descale argument checks,
and NVRTC compiles of every fp8 forward for the arches with native mma.sync e4m3 (sm89, sm120) with zero
spills. No GPU needed."""

from __future__ import annotations

import pytest

import attngen
from attngen.errors import PlanError, SpecError
from attngen.features.dtype import dtype_trait, out_trait
from attngen.planning.planner import plan
from attngen.planning.planner_bwd import plan_bwd
from attngen.spec.model import AttentionSpec, DType

FP8_HEAD_DIMS = (64, 128, 192, 256)


def fp8(**kw: object) -> AttentionSpec:
    return AttentionSpec(**{"head_dim": 128, "dtype": "fp8_e4m3", **kw})


def test_trait_row() -> None:
    t = dtype_trait(DType.fp8_e4m3)
    assert (t.size, t.mma_k, t.mma, t.torch) == (1, 32, "e4m3", "float8_e4m3fn")
    assert out_trait(t).name == "bf16" and out_trait(dtype_trait(DType.fp16)).name == "fp16"
    assert t.descaled and not t.backward


@pytest.mark.parametrize(("extra", "field", "words"), [
    ({"deterministic": True}, "deterministic", "forward only"),
    ({"seqlens": "varlen"}, "seqlens", "seqlens: fixed"),
    ({"arch": ["sm89", "sm80"]}, "arch", "sm89, sm120"),
    ({"arch": "sm90"}, "arch", "wgmma fp8 path"),
    ({"pipeline": "warp_specialized"}, "pipeline", "multistage"),
    ({"head_dim": 96}, "head_dim", "64, 128, 192, 256"),
])
def test_fp8_refusals_name_the_field(extra: dict, field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        fp8(**extra)
    assert field in str(err.value) and words in str(err.value) and "Remedy" in str(err.value)


def test_fp8_plans_only_where_mma_sync_is_native() -> None:
    spec = fp8(mask="causal")
    for arch in ("sm89", "sm120"):
        p = plan(spec, arch)
        assert p.family == "sm80_fwd" and p.tiling.block_n % 32 == 0
    with pytest.raises(PlanError, match="natively on sm89, sm120"):
        plan(spec, "sm90")
    with pytest.raises(PlanError, match="fp8_e4m3"):
        plan_bwd(spec, "sm89")


def test_one_byte_elements_halve_the_tiles_bytes() -> None:
    a, b = plan(fp8(), "sm89"), plan(AttentionSpec(head_dim=128, dtype="bf16"), "sm89")
    assert a.smem.k_tile_bytes * 2 == a.tiling.block_n * 128 * 2
    assert a.smem.k_tile_bytes / a.tiling.block_n == b.smem.k_tile_bytes / b.tiling.block_n / 2


def test_descale_argument_checks() -> None:
    torch = pytest.importorskip("torch")
    from attngen.runtime.descale import check_descale, pack_descales

    cpu = torch.device("cpu")
    assert check_descale("q_descale", None, 2, 3, cpu).shape == (2, 3)
    assert float(check_descale("q_descale", 0.5, 2, 3, cpu)[1, 2]) == 0.5
    with pytest.raises(ValueError, match="k_descale must have shape"):
        check_descale("k_descale", torch.ones(3, 2), 2, 3, cpu)
    with pytest.raises(ValueError, match="v_descale must have dtype"):
        check_descale("v_descale", torch.ones(2, 3, dtype=torch.float16), 2, 3, cpu)
    q = torch.zeros(2, 5, 6, 64)
    k = torch.zeros(2, 7, 3, 64)
    planes = pack_descales(q, k, {"v_descale": torch.full((2, 3), 4.0)})
    assert planes.shape == (3, 2, 3) and planes.is_contiguous() and float(planes[2, 1, 1]) == 4.0


@pytest.mark.parametrize("arch", ["sm89", "sm120"])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_every_fp8_forward_compiles_without_spills(arch: str, mask: str) -> None:
    for head_dim in FP8_HEAD_DIMS:
        cubin = attngen.build(fp8(head_dim=head_dim, mask=mask), arch)
        (res,) = cubin.resources
        assert 0 < res.registers <= 255
        assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), f"hd{head_dim} {arch}: {res}"
