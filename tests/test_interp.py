"""The NumPy interpreter of a KernelPlan's tile schedule against naive float64 attention."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.features.mask import MaskTrait
from attngen.planning.ir import KernelPlan, MultistageTiling
from attngen.planning.planner import plan
from attngen.reference.interp import interpret, reference_attention
from attngen.spec.model import AttentionSpec

TOL = 1e-10

#: (left, right) -> spec fields.
MASKS: dict[tuple[int, int], dict[str, object]] = {
    (-1, -1): {"mask": "none"},
    (-1, 0): {"mask": "causal"},
    (0, 0): {"mask": "sliding_window", "window": (0, 0)},
    (5, 3): {"mask": "sliding_window", "window": (5, 3)},
    (64, -1): {"mask": "sliding_window", "window": (64, -1)},
    (-1, 7): {"mask": "sliding_window", "window": (-1, 7)},
    (0, -1): {"mask": "sliding_window", "window": (0, -1)},
    (20, 0): {"mask": "sliding_window", "window": (20, 0)},
}


def _spec(window: tuple[int, int], head_dim: int = 64, dtype: str = "bf16") -> AttentionSpec:
    return AttentionSpec(head_dim=head_dim, dtype=dtype, **MASKS[window])


def _with_tiles(p: KernelPlan, block_m: int, block_n: int) -> KernelPlan:
    """The same plan with other tile sizes: exercises many blocks on small seqlens."""
    tiling = MultistageTiling(block_m=block_m, block_n=block_n, num_warps=max(1, block_m // 16), warp_m_tiles=1,
                              stages=2, q_in_regs=True)
    return p.model_copy(update={"tiling": tiling})


def _inputs(rng: np.random.Generator, batch: int, sq: int, sk: int, heads: int, kv_heads: int,
            d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q = rng.standard_normal((batch, sq, heads, d))
    k = rng.standard_normal((batch, sk, kv_heads, d))
    v = rng.standard_normal((batch, sk, kv_heads, d))
    return q, k, v


def _errors(p: KernelPlan, q: np.ndarray, k: np.ndarray, v: np.ndarray,
            scale: float | None = None) -> tuple[float, float]:
    """Max abs errors (out, finite lse); asserts identical -inf positions and no NaN."""
    out, lse = interpret(p, q, k, v, softmax_scale=scale)
    ref_out, ref_lse = reference_attention(q, k, v, p.spec.window_left, p.spec.window_right, scale)
    assert out.shape == q.shape and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    assert np.isfinite(out).all()
    finite = np.isfinite(ref_lse)
    lse_err = float(np.abs(lse[finite] - ref_lse[finite]).max()) if finite.any() else 0.0
    return float(np.abs(out - ref_out).max()), lse_err


def _out_error(p: KernelPlan, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> float:
    out, _ = interpret(p, q, k, v)
    ref, _ = reference_attention(q, k, v, p.spec.window_left, p.spec.window_right)
    return float(np.abs(out - ref).max())


def _assert_matches(p: KernelPlan, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                    scale: float | None = None) -> None:
    out_err, lse_err = _errors(p, q, k, v, scale)
    assert out_err < TOL and lse_err < TOL, (out_err, lse_err)


# (window, batch, seqlen_q, seqlen_k, heads, kv_heads, (block_m, block_n) or None for the planner's)
CASES = [
    ((-1, -1), 2, 17, 17, 4, 4, None),
    ((-1, -1), 1, 129, 100, 8, 1, None),
    ((-1, 0), 2, 129, 129, 4, 2, None),
    ((-1, 0), 1, 100, 33, 8, 1, None),          # seqlen_q > seqlen_k: leading rows see nothing
    ((-1, 0), 1, 33, 129, 2, 1, None),          # seqlen_q < seqlen_k
    ((-1, 0), 1, 1, 17, 2, 2, (16, 16)),
    ((-1, 0), 1, 17, 1, 2, 2, (16, 16)),
    ((-1, 0), 2, 129, 100, 4, 2, (16, 32)),
    ((-1, 0), 1, 100, 129, 8, 1, (32, 16)),
    ((0, 0), 1, 33, 33, 2, 1, (16, 16)),
    ((0, 0), 1, 100, 17, 2, 2, (32, 16)),
    ((5, 3), 2, 129, 129, 4, 2, (16, 16)),
    ((5, 3), 1, 17, 100, 8, 1, None),
    ((5, 3), 1, 100, 17, 2, 1, (16, 32)),
    ((64, -1), 1, 129, 129, 2, 2, None),
    ((64, -1), 1, 100, 129, 4, 1, (32, 32)),
    ((-1, 7), 1, 129, 33, 2, 2, (16, 16)),
    ((-1, 7), 2, 33, 100, 8, 1, None),
    ((0, -1), 1, 100, 100, 2, 1, (16, 16)),
    ((20, 0), 1, 129, 100, 4, 2, (32, 16)),
]


@pytest.mark.parametrize("window,batch,sq,sk,heads,kv_heads,tiles", CASES)
def test_interpreter_matches_reference(window: tuple[int, int], batch: int, sq: int, sk: int,
                                       heads: int, kv_heads: int,
                                       tiles: tuple[int, int] | None) -> None:
    p = plan(_spec(window), "sm80")
    if tiles is not None:
        p = _with_tiles(p, *tiles)
    rng = np.random.default_rng(hash((window, batch, sq, sk, heads, kv_heads)) % 2**32)
    _assert_matches(p, *_inputs(rng, batch, sq, sk, heads, kv_heads, 64))


@pytest.mark.parametrize("head_dim,arch,mask", [
    (64, "sm80", (-1, 0)), (128, "sm86", (-1, 0)), (128, "sm90", (-1, -1)),
    (256, "sm86", (-1, 0)), (256, "sm90", (5, 3)), (96, "sm89", (64, -1)),
])
def test_planned_tilings(head_dim: int, arch: str, mask: tuple[int, int]) -> None:
    p = plan(_spec(mask, head_dim=head_dim), arch)
    rng = np.random.default_rng(head_dim)
    for sq, sk in ((129, 100), (100, 129), (1, 17)):
        _assert_matches(p, *_inputs(rng, 1, sq, sk, 2, 1, head_dim))


def test_plans_differ_in_block_sizes() -> None:
    shapes = {(p.block_m, p.block_n) for p in (plan(_spec((-1, 0), head_dim=hd), a)
                                              for hd in (64, 128, 256) for a in ("sm80", "sm86", "sm90"))}
    assert len(shapes) >= 3


def test_random_shapes_seeded() -> None:
    rng = np.random.default_rng(20240601)
    base = {w: plan(_spec(w), "sm80") for w in MASKS}
    for _ in range(40):
        window = list(MASKS)[rng.integers(len(MASKS))]
        bm, bn = (int(x) for x in rng.choice([16, 32, 64], size=2))
        sq, sk = (int(x) for x in rng.choice([1, 17, 33, 100, 129], size=2))
        kv_heads = int(rng.choice([1, 2]))
        heads = kv_heads * int(rng.choice([1, 2, 8]))
        p = _with_tiles(base[window], bm, bn)
        _assert_matches(p, *_inputs(rng, int(rng.integers(1, 3)), sq, sk, heads, kv_heads, 64))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(sq=st.integers(1, 150), sk=st.integers(1, 150), bm=st.sampled_from([16, 32, 64, 128]),
       bn=st.sampled_from([16, 32, 64, 128]), window=st.sampled_from(sorted(MASKS)),
       kv_heads=st.sampled_from([1, 2]), group=st.sampled_from([1, 2, 8]), seed=st.integers(0, 2**32 - 1))
def test_random_shapes_hypothesis(sq: int, sk: int, bm: int, bn: int, window: tuple[int, int],
                                  kv_heads: int, group: int, seed: int) -> None:
    p = _with_tiles(plan(_spec(window), "sm80"), bm, bn)
    _assert_matches(p, *_inputs(np.random.default_rng(seed), 1, sq, sk, kv_heads * group, kv_heads, 64))


def test_rows_that_see_nothing_give_zero_and_neg_inf() -> None:
    p = plan(_spec((-1, 0)), "sm80")
    q, k, v = _inputs(np.random.default_rng(1), 1, 100, 33, 2, 1, 64)
    out, lse = interpret(p, q, k, v)
    assert (out[:, :67] == 0).all() and np.isneginf(lse[:, :, :67]).all()
    assert np.isfinite(lse[:, :, 67:]).all() and (np.abs(out[:, 67:]).sum(axis=-1) > 0).all()


def test_softmax_scale_is_honoured() -> None:
    p = _with_tiles(plan(_spec((5, 3)), "sm80"), 16, 16)
    q, k, v = _inputs(np.random.default_rng(2), 1, 33, 40, 2, 1, 64)
    _assert_matches(p, q, k, v, scale=0.7)
    default, _ = interpret(p, q, k, v)
    scaled, _ = interpret(p, q, k, v, softmax_scale=0.7)
    assert np.abs(default - scaled).max() > 1e-3


def test_large_scores_stay_finite() -> None:
    p = _with_tiles(plan(_spec((-1, 0)), "sm80"), 16, 16)
    q, k, v = _inputs(np.random.default_rng(3), 1, 33, 33, 2, 2, 64)
    _assert_matches(p, q * 30, k * 30, v)


# Each case needs exactly one of block_needs_mask's three tests: the partial last KV block, the
# right edge (causal), the left edge (a window with seqlens that are tile multiples).
@pytest.mark.parametrize("window,seqlen", [((-1, -1), 100), ((-1, 0), 128), ((64, -1), 128)])
def test_broken_needs_mask_is_caught(monkeypatch: pytest.MonkeyPatch, window: tuple[int, int],
                                     seqlen: int) -> None:
    p = _with_tiles(plan(_spec(window), "sm80"), 32, 32)
    inputs = _inputs(np.random.default_rng(4), 1, seqlen, seqlen, 2, 1, 64)
    _assert_matches(p, *inputs)
    monkeypatch.setattr(MaskTrait, "block_needs_mask", lambda *args: False)
    assert _out_error(p, *inputs) > 1e-2


def test_broken_needs_mask_is_caught_with_planned_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    p = plan(_spec((-1, 0)), "sm80")
    inputs = _inputs(np.random.default_rng(4), 1, 100, 100, 2, 1, 64)
    monkeypatch.setattr(MaskTrait, "block_needs_mask", lambda *args: False)
    assert _out_error(p, *inputs) > 1e-2


def test_masking_every_block_stays_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _with_tiles(plan(_spec((5, 3)), "sm80"), 16, 16)
    monkeypatch.setattr(MaskTrait, "block_needs_mask", lambda *args: True)
    _assert_matches(p, *_inputs(np.random.default_rng(5), 1, 100, 33, 2, 1, 64))


def test_skipping_a_block_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _with_tiles(plan(_spec((-1, 0)), "sm80"), 32, 32)
    inputs = _inputs(np.random.default_rng(6), 1, 100, 100, 2, 1, 64)
    real = MaskTrait.kv_block_order
    monkeypatch.setattr(MaskTrait, "kv_block_order", lambda *args: real(*args)[:-1])
    assert _out_error(p, *inputs) > 1e-2


def test_rejects_mismatched_inputs() -> None:
    p = plan(_spec((-1, 0)), "sm80")
    q, k, v = _inputs(np.random.default_rng(7), 1, 8, 8, 3, 2, 64)
    with pytest.raises(ValueError, match="multiple"):
        interpret(p, q, k, v)
    q, k, v = _inputs(np.random.default_rng(7), 1, 8, 8, 2, 2, 32)
    with pytest.raises(ValueError, match="head_dim"):
        interpret(p, q, k, v)
