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
    ({"arch": ["sm90", "sm100"]}, "arch", "sm90 (wgmma)"),
    ({"arch": "sm90", "head_dim": 64}, "head_dim", "head_dim 128, 256"),
    ({"pipeline": "pingpong", "head_dim": 192}, "head_dim", "head_dim 128, 256"),
    ({"head_dim": 96}, "head_dim", "64, 128, 192, 256"),
])
def test_fp8_refusals_name_the_field(extra: dict, field: str, words: str) -> None:
    with pytest.raises(SpecError) as err:
        fp8(**extra)
    assert field in str(err.value) and words in str(err.value) and "Remedy" in str(err.value)


def test_fp8_plans_on_native_mma_sync_and_on_wgmma() -> None:
    spec = fp8(mask="causal")
    for arch in ("sm89", "sm120"):
        p = plan(spec, arch)
        assert p.family == "sm80_fwd" and p.tiling.block_n % 32 == 0
    hopper = plan(spec, "sm90")
    assert hopper.family == "sm90_fwd" and hopper.tiling.block_n % 128 == 0
    with pytest.raises(PlanError, match="natively on sm89, sm120"):
        plan(spec, "sm100")
    with pytest.raises(PlanError, match="natively on sm89, sm120"):
        plan(fp8(head_dim=64), "sm90")  # no wgmma fp8 kernel at hd64; mma.sync e4m3 is emulated on sm_90a
    with pytest.raises(PlanError, match="fp8_e4m3"):
        plan_bwd(spec, "sm89")


def test_wgmma_fp8_rejects_tiles_off_the_v_boxes_with_a_reason() -> None:
    p = plan(fp8(head_dim=128), "sm90")
    rejected = [c for c in p.candidates if not c.fits and c.tiling.block_n % 128]
    assert rejected and all("boxes of 128 keys" in c.reason for c in rejected)
    assert {c.tiling.block_n for c in p.candidates if c.fits} == {128, 256}   # one or two 128-key boxes


def test_wgmma_8bit_ops_are_k_major_without_transpose_immediates() -> None:
    from attngen.codegen.wgmma import WgmmaOp, attention_ops

    qk, pv = attention_ops(128, 128, 32, v_transposed=True)
    assert (qk.k, pv.k, qk.trans_b, pv.trans_b) == (32, 32, False, False)
    assert qk.trans_tail == "" and pv.trans_tail == ""
    assert attention_ops(128, 128, 16)[1].trans_tail == ", 1"
    with pytest.raises(ValueError, match="K-major operands only"):
        WgmmaOp(128, a_in_regs=True, trans_b=True, k=32)


def test_transposed_v_holds_each_16_keys_in_the_order_p_is_packed() -> None:
    """Slot 4t + 2h + b of every 16 holds key 8h + 2t + b (the accumulator's keys 2t, 2t + 1 of two 8-key tiles land
    in a lane's k slots 4t..4t + 3), zero keys pad to a multiple of 16, and nothing else moves."""
    torch = pytest.importorskip("torch")
    from attngen.runtime.fp8_layout import slot_keys, v_transposed

    assert slot_keys()[:8] == [0, 1, 8, 9, 2, 3, 10, 11] and sorted(slot_keys()) == list(range(16))
    v = torch.randn(2, 37, 3, 128).to(torch.float8_e4m3fn)
    vt = v_transposed(v)
    assert vt.shape == (2, 3, 128, 48) and vt.dtype == v.dtype and vt.is_contiguous()
    raw, got = v.view(torch.uint8), vt.view(torch.uint8)
    for slot in range(48):
        key = 16 * (slot // 16) + slot_keys()[slot % 16]
        want = raw[:, key] if key < 37 else torch.zeros_like(got[..., slot])
        assert torch.equal(got[..., slot], want), slot


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


@pytest.mark.parametrize("arch", ["sm89", "sm120", "sm90"])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_every_fp8_forward_compiles_without_spills(arch: str, mask: str) -> None:
    for head_dim in FP8_HEAD_DIMS if arch != "sm90" else (128, 256):
        cubin = attngen.build(fp8(head_dim=head_dim, mask=mask), arch)
        # sm90 adds V's transpose as a second entry point
        assert len(cubin.resources) == (2 if arch == "sm90" else 1)
        for res in cubin.resources:
            assert 0 < res.registers <= 255
            assert (res.spill_stores, res.spill_loads, res.stack_bytes) == (0, 0, 0), f"hd{head_dim} {arch}: {res}"


@pytest.mark.parametrize("head_dim", [128, 256])
def test_v_transpose_copies_all_its_chunks_at_once_and_stores_whole_lines(head_dim: int) -> None:
    """sm90's transpose entry point (fp8_v_transpose.cuh.j2, codegen.abi.VT_TILE): a thread's 4 copies (cp.async)
    all in flight before the one wait, its 16 keys x 4 columns read as 16 words and turned around by byte permutes,
    4 16-byte stores; 16 KB of shared memory, no local memory."""
    from attngen.codegen.abi import VT_TILE, vt_entry
    from attngen.toolchain.sass import disassemble, kernel_opcodes

    cubin = attngen.build(fp8(head_dim=head_dim), "sm90")
    entry = vt_entry(cubin.source.plan.kernel_name)
    (res,) = [r for r in cubin.resources if r.name == entry]
    assert res.smem_bytes == VT_TILE.keys * VT_TILE.dims and res.registers <= 64
    ops = kernel_opcodes(disassemble(cubin.data))[entry]
    copies = VT_TILE.keys * VT_TILE.dims // 16 // VT_TILE.threads
    assert ops.count("LDGSTS") == copies and ops.count("LDG") == 0
    assert max(i for i, op in enumerate(ops) if op == "LDGSTS") < ops.index("DEPBAR") < ops.index("BAR")
    # 16 word reads (ptxas pads the copies with never-executed `@!PT LDS RZ, [RZ]`), nothing staged through registers
    assert ops.count("LDS") >= 16 and ops.count("STS") == 0 and ops.count("PRMT") >= 24 and ops.count("STG") == 4
    assert ops.count("LDL") == ops.count("STL") == 0


@pytest.mark.parametrize(("head_dim", "extra"), [
    (128, {"score_mod": {"softcap": 30.0}}),
    (256, {"sinks": "learnable", "mask": "sliding_window", "window": [128, 0]}),
    (256, {"score_mod": {"alibi": "standard"}, "mask": "causal"}),
])
def test_fp8_variants_compile_on_wgmma_without_spills(head_dim: int, extra: dict) -> None:
    cubin = attngen.build(fp8(head_dim=head_dim, **extra), "sm90")
    assert [r.spill_stores + r.spill_loads + r.stack_bytes for r in cubin.resources] == [0, 0]


def test_fp8_hd256_softcap_on_wgmma_is_refused_with_the_spill() -> None:
    """The softcap's tanh needs registers hd256's O (128) and S (64) leave none of: the planner says so."""
    with pytest.raises(PlanError, match="spilled"):
        attngen.build(fp8(head_dim=256, score_mod={"softcap": 30.0}), "sm90")
