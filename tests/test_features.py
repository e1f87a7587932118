"""Feature traits: the mask trait's table, its C++ type and names, and its NumPy twin of the schedule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from attngen.codegen.renderer import render
from attngen.features.mask import MASKS, WindowMask, mask_trait
from attngen.planning.planner import plan
from attngen.reference import schedule
from attngen.spec.model import AttentionSpec, MaskKind


def _spec(mask: str, window: list[int] | None = None) -> AttentionSpec:
    return AttentionSpec(head_dim=64, dtype="bf16", mask=mask, window=window)


def test_every_mask_kind_has_a_trait() -> None:
    assert set(MASKS) == set(MaskKind)


@pytest.mark.parametrize(("mask", "window", "cxx", "name"), [
    ("none", None, "WindowMask<-1, -1>", "none"),
    ("causal", None, "WindowMask<-1, 0>", "causal"),
    ("sliding_window", [256, 0], "WindowMask<256, 0>", "window_256_0"),
    ("sliding_window", [-1, 7], "WindowMask<-1, 7>", "window_inf_7"),
])
def test_trait_spellings(mask: str, window: list[int] | None, cxx: str, name: str) -> None:
    trait = mask_trait(_spec(mask, window))
    assert trait.cxx_type == cxx and trait.name_part == name
    assert WindowMask.of(trait.left, trait.right) == trait


@pytest.mark.parametrize("mask,window", [("none", None), ("causal", None), ("sliding_window", [5, 3])])
def test_the_source_takes_the_mask_as_a_type(mask: str, window: list[int] | None) -> None:
    trait = mask_trait(_spec(mask, window))
    for arch in ("sm80", "sm90"):
        code = render(plan(_spec(mask, window), arch)).code
        assert f"using Mask = {trait.cxx_type};" in code and "struct WindowMask" in code
        assert "kWindowLeft" not in code and "kWindowRight" not in code


def test_cost_density() -> None:
    assert mask_trait(_spec("causal")).cost_density == 0.5
    assert mask_trait(_spec("none")).cost_density == 1.0


@pytest.mark.parametrize("left,right", [(-1, -1), (-1, 0), (5, 3), (0, 0), (17, -1)])
def test_numpy_twin_matches_the_schedule(left: int, right: int) -> None:
    mask = WindowMask.of(left, right)
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
