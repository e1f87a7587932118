"""Feature traits: the mask, dtype and KV-layout tables, their spellings and NumPy twins, and the families
that serve only the traits their coverage lists."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

import attngen
from attngen import families
from attngen.codegen import abi
from attngen.codegen.renderer import render
from attngen.errors import PlanError
from attngen.families import Direction
from attngen.features.dtype import DTYPES, dtype_trait, trait_of_torch, unscaled
from attngen.features.kv_layout import KV_LAYOUTS, kv_layout_trait
from attngen.features.mask import MASKS, MaskTrait, mask_trait
from attngen.planning.planner import plan
from attngen.reference import schedule
from attngen.spec.model import Arch, AttentionSpec, DType, MaskKind


def _spec(mask: str, window: list[int] | None = None) -> AttentionSpec:
    return AttentionSpec(head_dim=64, dtype="bf16", mask=mask, window=window)


def test_every_mask_kind_has_a_trait() -> None:
    assert set(MASKS) == set(MaskKind)


@pytest.mark.parametrize(("mask", "window", "source", "band", "name"), [
    ("none", None, None, (-1, -1), "none"),
    ("causal", None, "kv_idx <= (q_idx + sk - sq)", (-1, 0), "causal"),
    ("sliding_window", [256, 0], "kv_idx >= (q_idx + sk - sq) - 256 and kv_idx <= (q_idx + sk - sq)",
     (256, 0), "window_256_0"),
    ("sliding_window", [-1, 7], "kv_idx <= (q_idx + sk - sq) + 7", (-1, 7), "window_inf_7"),
])
def test_presets_are_named_expressions(mask: str, window: list[int] | None, source: str | None,
                                       band: tuple[int, int], name: str) -> None:
    trait = mask_trait(_spec(mask, window))
    assert (trait.source, trait.band, trait.name_part) == (source, band, name)
    assert MaskTrait.window(*band) == trait


@pytest.mark.parametrize("mask,window", [("none", None), ("causal", None), ("sliding_window", [5, 3])])
def test_the_source_takes_the_variant_as_a_type(mask: str, window: list[int] | None) -> None:
    trait = mask_trait(_spec(mask, window))
    for arch in ("sm80", "sm90"):
        code = render(plan(_spec(mask, window), arch)).code
        assert "struct Variant {" in code and "const Variant<Params> var(p, batch, head, seq);" in code
        assert f"static constexpr int kLeft = {trait.band[0]};" in code
        assert "WindowMask" not in code and "kWindowLeft" not in code


def test_cost_density() -> None:
    assert mask_trait(_spec("causal")).cost_density == 0.5
    assert mask_trait(_spec("none")).cost_density == 1.0


@pytest.mark.parametrize("left,right", [(-1, -1), (-1, 0), (5, 3), (0, 0), (17, -1)])
def test_numpy_twin_matches_the_schedule(left: int, right: int) -> None:
    mask = MaskTrait.window(left, right)
    for sq, sk, bm, bn in itertools.product((1, 17, 64), (1, 33, 70), (16, 32), (16, 64)):
        rows, cols = np.arange(sq + 5), np.arange(sk + 5)
        np.testing.assert_array_equal(mask.visible(rows, cols, sq, sk),
                                      schedule.visible_tile(rows, cols, sq, sk, left, right))
        for m_block in range(schedule.ceil_div(sq, bm)):
            assert mask.kv_block_order(m_block, bm, bn, sq, sk) == list(
                schedule.kv_block_order(m_block, bm, bn, sq, sk, left, right))
            for n_block in range(schedule.ceil_div(sk, bn)):
                assert mask.block_needs_mask(n_block, m_block, bm, bn, sq, sk) == schedule.block_needs_mask(
                    n_block, m_block, bm, bn, sq, sk, left, right)
        for n_block in range(schedule.ceil_div(sk, bn)):
            assert mask.q_block_range(n_block, bm, bn, sq, sk) == schedule.q_block_range(
                n_block, bm, bn, sq, sk, left, right)


# ---- the dtype trait ----------------------------------------------------------------------------------
def test_every_dtype_has_a_trait_with_its_facts() -> None:
    assert set(DTYPES) == set(DType)
    for dtype, trait in DTYPES.items():
        assert dtype_trait(dtype) is trait and trait.name == dtype.value
        if trait.size == 2:  # 16-bit types
            assert (trait.mma_k, trait.storage, trait.out_name) == (16, "unsigned short", trait.name)
            assert trait.cvt_pack == f"cvt.rn.{trait.mma}x2.f32"
        else:  # 8-bit: k32 MMAs, saturating packs, a 16-bit output
            assert (trait.mma_k, trait.storage, trait.out_name) == (32, "unsigned char", "bf16")
            assert trait.cvt_pack == f"cvt.rn.satfinite.{trait.mma}x2.f32"
        assert trait_of_torch(f"torch.{trait.torch}") is trait
    assert (dtype_trait(DType.bf16).torch, dtype_trait(DType.fp16).torch) == ("bfloat16", "float16")
    with pytest.raises(KeyError, match="no element type of torch dtype 'float64'"):
        trait_of_torch("torch.float64")


def test_dtype_trait_tma_types_are_driver_members() -> None:
    driver = pytest.importorskip("cuda.bindings.driver")
    for trait in DTYPES.values():
        assert hasattr(driver.CUtensorMapDataType, trait.tma), trait.tma


def test_dtype_trait_sizes_agree_with_torch() -> None:
    torch = pytest.importorskip("torch")
    for trait in DTYPES.values():
        assert torch.empty(0, dtype=getattr(torch, trait.torch)).element_size() == trait.size


def test_the_templates_get_the_dtype_trait() -> None:
    spec = AttentionSpec(head_dim=64, dtype="fp16")
    for arch in ("sm80", "sm90"):
        code = render(plan(spec, arch)).code
        assert "cvt.rn.f16x2.f32" in code and "cvt.rn.bf16x2.f32" not in code


def test_no_module_but_the_dtype_trait_spells_dtype_facts() -> None:
    """The C++/PTX/TMA spellings of the element types live in features/dtype.py only."""
    package = Path(attngen.__file__).parent
    facts = {"unsigned short", *(getattr(t, a) for t in DTYPES.values() for a in ("cvt_pack", "tma"))}
    offenders = []
    for path in package.rglob("*.py"):
        if path == package / "features" / "dtype.py":
            continue
        text = path.read_text()
        offenders += [f"{path.relative_to(package)}: {fact}" for fact in facts if fact in text]
    assert not offenders


# ---- the KV-layout trait ------------------------------------------------------------------------------
def test_every_spec_is_dense() -> None:
    assert set(KV_LAYOUTS) == {"dense"}
    trait = kv_layout_trait(_spec("causal"))
    assert trait is KV_LAYOUTS["dense"] and trait.name == "dense"


def test_dense_kv_fields_are_in_every_parameter_block() -> None:
    trait = KV_LAYOUTS["dense"]
    assert trait.runtime_fields == ("k_batch_stride", "k_row_stride", "k_head_stride",
                                    "v_batch_stride", "v_row_stride", "v_head_stride")
    for params in (abi.FWD_PARAMS, abi.BWD_PARAMS, abi.HOPPER_FWD_PARAMS, abi.HOPPER_BWD_PARAMS):
        fields = trait.fields(params)
        assert tuple(f.name for f in fields) == trait.runtime_fields
        assert all(f.ctype == "long long" for f in fields)
    with pytest.raises(AssertionError, match="k_batch_stride"):
        trait.fields(abi.FWD_PARAMS[:5])


def test_dense_kv_gather_is_the_heads_rows() -> None:
    rng = np.random.default_rng(0)
    k, v = rng.standard_normal((2, 7, 3, 4)), rng.standard_normal((2, 7, 3, 4))
    kb, vb = KV_LAYOUTS["dense"].gather(k, v, 1, 2)
    assert kb.shape == (7, 4)
    for j in range(7):
        np.testing.assert_array_equal(kb[j], k[1, j, 2])
        np.testing.assert_array_equal(vb[j], v[1, j, 2])


# ---- families serve the traits their coverage lists ---------------------------------------------------
def test_every_family_lists_every_trait() -> None:
    for family in families.registry():
        cover = family.coverage()
        # Every 16-bit type everywhere; fp8 (descaled, forward only) in the two forward families alone so far.
        assert set(unscaled()) <= set(cover.dtypes) <= {d.value for d in DTYPES}
        assert ("fp8_e4m3" in cover.dtypes) == (family.name in ("sm80_fwd", "sm90_fwd"))
        assert cover.masks == tuple(m.value for m in MASKS)
        assert cover.kv_layouts == ("dense",)


@pytest.mark.parametrize("axis,spec,why", [
    ("dtypes", AttentionSpec(head_dim=128, dtype="bf16"), "dtype bf16: {name} serves fp16"),
    ("masks", AttentionSpec(head_dim=128, dtype="bf16", mask="causal"), "mask causal: {name} serves none"),
    ("kv_layouts", AttentionSpec(head_dim=128, dtype="bf16"), "kv layout dense: {name} serves paged"),
])
def test_a_family_refuses_a_trait_it_does_not_list(monkeypatch: pytest.MonkeyPatch, axis: str, spec: AttentionSpec,
                                                   why: str) -> None:
    narrowed = {"dtypes": ("fp16",), "masks": ("none",), "kv_layouts": ("paged",)}[axis]
    for name, direction in (("sm90_fwd", Direction.forward), ("sm90_bwd", Direction.backward),
                            ("sm80_bwd", Direction.backward)):
        family = families.get(name)
        assert family.serves(spec, Arch.sm90) is None
        cover = dataclasses.replace(family.coverage(), **{axis: narrowed})
        monkeypatch.setattr(family, "coverage", lambda cover=cover: cover)
        assert family.serves(spec, Arch.sm90) == why.format(name=name)
        chosen, refused = families.serving(spec, Arch.sm90, direction)
        assert family not in chosen and refused[name] == why.format(name=name)
    # the forward falls back to the family that still serves it
    assert plan(spec, Arch.sm90).family == "sm80_fwd"


def test_a_layout_no_family_lists_is_refused_by_all(monkeypatch: pytest.MonkeyPatch) -> None:
    from attngen.features import kv_layout

    paged = dataclasses.replace(KV_LAYOUTS["dense"], name="paged")
    monkeypatch.setattr(kv_layout, "kv_layout_trait", lambda spec: paged)
    spec = AttentionSpec(head_dim=128, dtype="bf16")
    chosen, refused = families.serving(spec, Arch.sm90, Direction.forward)
    assert not chosen and refused == {"sm90_fwd": "kv layout paged: sm90_fwd serves dense",
                                      "sm80_fwd": "kv layout paged: sm80_fwd serves dense"}
    with pytest.raises(PlanError, match="kv layout paged: sm80_fwd serves dense"):
        plan(spec, Arch.sm90)


def test_the_mma_k_width_is_the_instructions() -> None:
    from attngen.codegen.wgmma import attention_ops

    for trait in DTYPES.values():
        ops = attention_ops(128, 128, trait.mma_k, v_transposed=trait.wgmma_v_box_keys > 0)
        assert all(f"k{trait.mma_k}_" in op.name for op in ops)
    assert all(op.name.startswith(("wgmma_m64n128k32_", "wgmma_m64n64k32_"))
               for op in attention_ops(128, 64, 32, v_transposed=True))
    code = render(plan(AttentionSpec(head_dim=128, dtype="bf16"), Arch.sm90)).code
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in code


def test_swizzle_rows_follow_the_element_size() -> None:
    from attngen.planning.shared import swizzle_chunks

    assert swizzle_chunks(64, 2) == 8 and swizzle_chunks(96, 2) == 4 and swizzle_chunks(128, 1) == 8
    assert swizzle_chunks(64, 1) == 4 and swizzle_chunks(32, 4) == 8
