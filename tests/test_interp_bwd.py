"""The backward tile schedule: `schedule.q_block_range` exhaustively, and the NumPy interpreter of
the backward kernels against naive float64 gradients (themselves checked by finite differences)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.features.mask import MaskTrait
from attngen.reference import schedule
from attngen.reference.interp import reference_attention
from attngen.reference.interp_bwd import interpret_bwd, lse_log2, preprocess_d, reference_attention_grads

TOL = 1e-10

#: (left, right): none, causal, then windows zero-width, small, one-sided.
MASKS = ((-1, -1), (-1, 0), (0, 0), (5, 3), (64, -1), (-1, 7))
TILES = ((64, 64), (128, 64), (64, 128), (16, 32))

Arrays = tuple[np.ndarray, ...]


# --- q_block_range: exact, exhaustively on small sizes -----------------------------------------------

SEQLENS = tuple(range(1, 41))
RANGE_TILES = ((16, 16), (16, 32), (32, 16), (64, 64), (3, 5), (1, 4))
RANGE_WINDOWS = ((-1, -1), (-1, 0), (0, 0), (0, -1), (5, 3), (3, 0), (1, 7), (64, -1), (-1, 7), (100, 100))


def _block_visibility(vis: np.ndarray, bm: int, bn: int) -> np.ndarray:
    """``[m, n]``: does the (query block m, KV block n) pair contain a visible element?"""
    sq, sk = vis.shape
    mb, nb = schedule.ceil_div(sq, bm), schedule.ceil_div(sk, bn)
    padded = np.zeros((mb * bm, nb * bn), dtype=bool)
    padded[:sq, :sk] = vis
    return np.asarray(padded.reshape(mb, bm, nb, bn).any(axis=(1, 3)))


def _check_q_range(sq: int, sk: int, bm: int, bn: int, left: int, right: int) -> None:
    blocks = _block_visibility(schedule.visible_matrix(sq, sk, left, right), bm, bn)
    fwd_pairs = set()
    for m_block in range(blocks.shape[0]):
        n_min, n_max = schedule.kv_block_range(m_block, bm, bn, sq, sk, left, right)
        fwd_pairs |= {(m_block, n) for n in range(n_min, n_max)}
    bwd_pairs = set()
    for n_block in range(blocks.shape[1]):
        m_min, m_max = schedule.q_block_range(n_block, bm, bn, sq, sk, left, right)
        expect = np.flatnonzero(blocks[:, n_block]).tolist()
        got = list(range(m_min, m_max))
        assert got == expect, (sq, sk, bm, bn, left, right, n_block, (m_min, m_max))
        assert m_min >= 0
        bwd_pairs |= {(m, n_block) for m in got}
    assert bwd_pairs == fwd_pairs                 # the backward visits exactly the forward's pairs


@pytest.mark.parametrize("left,right", RANGE_WINDOWS)
def test_q_block_range_exhaustive(left: int, right: int) -> None:
    for sq, sk, (bm, bn) in itertools.product(SEQLENS, SEQLENS, RANGE_TILES):
        _check_q_range(sq, sk, bm, bn, left, right)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(sq=st.integers(1, 600), sk=st.integers(1, 600), bm=st.sampled_from([16, 32, 64, 128]),
       bn=st.sampled_from([16, 32, 64, 128]), left=st.integers(-1, 200), right=st.integers(-1, 200))
def test_q_block_range_random_sizes(sq: int, sk: int, bm: int, bn: int, left: int, right: int) -> None:
    _check_q_range(sq, sk, bm, bn, left, right)


def test_q_block_range_causal_examples() -> None:
    # Square causal: KV block n is seen from its diagonal block down to the last query block.
    assert [schedule.q_block_range(n, 64, 64, 256, 256, -1, 0) for n in range(4)] == [(n, 4) for n in range(4)]
    # seqlen_q 20 < seqlen_k 100, bottom-right: every key up to 80 is seen by row 0.
    assert schedule.q_block_range(0, 16, 32, 20, 100, -1, 0) == (0, 2)
    # Window (0, 0) with seqlen_q 100 > seqlen_k 17: key j is seen only by row j + 83.
    assert schedule.q_block_range(0, 16, 16, 100, 17, 0, 0) == (5, 7)
    # Window (5, 3), seqlen_q 17 < seqlen_k 100: keys 0..77 are seen by no row.
    assert schedule.q_block_range(0, 16, 32, 17, 100, 5, 3)[1] <= schedule.q_block_range(0, 16, 32, 17, 100, 5, 3)[0]


# --- the interpreter against naive gradients ---------------------------------------------------------

def _inputs(rng: np.random.Generator, batch: int, sq: int, sk: int, heads: int, kv_heads: int, d: int,
            left: int, right: int, scale: float | None = None) -> Arrays:
    """Fresh normal q, k, v, dout, and the forward's out and lse from the float64 reference."""
    q = rng.standard_normal((batch, sq, heads, d))
    k = rng.standard_normal((batch, sk, kv_heads, d))
    v = rng.standard_normal((batch, sk, kv_heads, d))
    dout = rng.standard_normal((batch, sq, heads, d))
    out, lse = reference_attention(q, k, v, left, right, scale)
    return q, k, v, out, lse, dout


def _grad_errors(tiles: tuple[int, int], window: tuple[int, int], inputs: Arrays, deterministic: bool,
                 scale: float | None = None) -> list[float]:
    """Max abs error of (dq, dk, dv) against the reference; asserts shapes and no NaN/inf."""
    q, k, v, out, lse, dout = inputs
    got = interpret_bwd(tiles, q, k, v, out, lse, dout, softmax_scale=scale, left=window[0],
                        right=window[1], deterministic=deterministic)
    ref = reference_attention_grads(q, k, v, dout, window[0], window[1], scale)
    for g, r, like in zip(got, ref, (q, k, v), strict=True):
        assert g.shape == like.shape == r.shape
        assert np.isfinite(g).all() and np.isfinite(r).all()
    return [float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True)]


def _assert_matches(tiles: tuple[int, int], window: tuple[int, int], inputs: Arrays, deterministic: bool,
                    scale: float | None = None) -> None:
    errors = _grad_errors(tiles, window, inputs, deterministic, scale)
    assert max(errors) < TOL, errors


# (window, batch, seqlen_q, seqlen_k, heads, kv_heads)
CASES = [
    ((-1, -1), 2, 17, 17, 4, 4),
    ((-1, -1), 1, 129, 100, 8, 1),
    ((-1, 0), 2, 129, 129, 4, 2),
    ((-1, 0), 1, 100, 33, 8, 1),              # seqlen_q > seqlen_k: leading rows see nothing
    ((-1, 0), 1, 33, 129, 2, 1),              # seqlen_q < seqlen_k
    ((-1, 0), 1, 1, 17, 2, 2),
    ((-1, 0), 1, 17, 1, 2, 2),
    ((0, 0), 1, 33, 33, 2, 1),
    ((0, 0), 1, 100, 17, 2, 2),
    ((5, 3), 2, 129, 129, 4, 2),
    ((5, 3), 1, 17, 100, 8, 1),               # keys 0..77 seen by no row
    ((64, -1), 1, 129, 100, 2, 2),
    ((64, -1), 1, 100, 129, 8, 1),
    ((-1, 7), 1, 129, 33, 2, 2),
    ((-1, 7), 2, 33, 100, 8, 1),
]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("tiles", TILES)
@pytest.mark.parametrize("window,batch,sq,sk,heads,kv_heads", CASES)
def test_interpreter_matches_reference(window: tuple[int, int], batch: int, sq: int, sk: int, heads: int,
                                       kv_heads: int, tiles: tuple[int, int], deterministic: bool) -> None:
    rng = np.random.default_rng(hash((window, batch, sq, sk, heads, kv_heads)) % 2**32)
    _assert_matches(tiles, window, _inputs(rng, batch, sq, sk, heads, kv_heads, 32, *window), deterministic)


def test_random_shapes_seeded() -> None:
    rng = np.random.default_rng(20240607)
    for _ in range(30):
        window = MASKS[rng.integers(len(MASKS))]
        tiles = TILES[rng.integers(len(TILES))]
        sq, sk = (int(x) for x in rng.choice([1, 17, 33, 100, 129], size=2))
        kv_heads = int(rng.choice([1, 2]))
        heads = kv_heads * int(rng.choice([1, 2, 8]))
        inputs = _inputs(rng, int(rng.integers(1, 3)), sq, sk, heads, kv_heads, 16, *window)
        _assert_matches(tiles, window, inputs, bool(rng.integers(2)))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(sq=st.integers(1, 140), sk=st.integers(1, 140), bm=st.sampled_from([16, 32, 64, 128]),
       bn=st.sampled_from([16, 32, 64, 128]), left=st.integers(-1, 40), right=st.integers(-1, 40),
       group=st.sampled_from([1, 2, 8]), deterministic=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_random_shapes_hypothesis(sq: int, sk: int, bm: int, bn: int, left: int, right: int, group: int,
                                  deterministic: bool, seed: int) -> None:
    inputs = _inputs(np.random.default_rng(seed), 1, sq, sk, group, 1, 16, left, right)
    _assert_matches((bm, bn), (left, right), inputs, deterministic)


def test_both_dq_orders_agree() -> None:
    window = (5, 3)
    inputs = _inputs(np.random.default_rng(11), 2, 129, 100, 4, 2, 32, *window)
    q, k, v, out, lse, dout = inputs
    atomic = interpret_bwd((16, 32), q, k, v, out, lse, dout, left=5, right=3)
    det = interpret_bwd((16, 32), q, k, v, out, lse, dout, left=5, right=3, deterministic=True)
    again = interpret_bwd((16, 32), q, k, v, out, lse, dout, left=5, right=3, deterministic=True)
    assert np.abs(atomic[0] - det[0]).max() < TOL
    assert all(np.array_equal(a, b) for a, b in zip(det, again, strict=True))
    assert np.array_equal(atomic[1], det[1]) and np.array_equal(atomic[2], det[2])  # only dQ differs


def test_rows_and_keys_that_see_nothing_get_zero_gradients() -> None:
    # Causal, seqlen_q 100 > seqlen_k 33: rows 0..66 see no key, lse -inf there.
    q, k, v, out, lse, dout = _inputs(np.random.default_rng(1), 1, 100, 33, 2, 1, 32, -1, 0)
    assert np.isneginf(lse[:, :, :67]).all() and np.isfinite(lse[:, :, 67:]).all()
    for det in (False, True):
        dq, dk, dv = interpret_bwd((16, 32), q, k, v, out, lse, dout, left=-1, right=0, deterministic=det)
        assert not any(np.isnan(g).any() for g in (dq, dk, dv))
        assert (dq[:, :67] == 0).all()
        # Row 67 sees one key (softmax of one score is constant: dQ = 0 up to rounding); the rest see more.
        assert np.abs(dq[:, 67]).max() < TOL and (np.abs(dq[:, 68:]).sum(axis=-1) > 0).all()
    # Window (5, 3), seqlen_q 17 < seqlen_k 100: keys 0..77 are seen by no row.
    q, k, v, out, lse, dout = _inputs(np.random.default_rng(2), 1, 17, 100, 2, 1, 32, 5, 3)
    dq, dk, dv = interpret_bwd((16, 32), q, k, v, out, lse, dout, left=5, right=3)
    assert (dk[:, :78] == 0).all() and (dv[:, :78] == 0).all()
    assert (np.abs(dv[:, 78:]).sum(axis=-1) > 0).all()


def test_softmax_scale_is_honoured() -> None:
    inputs = _inputs(np.random.default_rng(3), 1, 33, 40, 2, 1, 32, 5, 3, scale=0.7)
    _assert_matches((16, 32), (5, 3), inputs, False, scale=0.7)
    q, k, v, out, lse, dout = inputs
    default = interpret_bwd((16, 32), q, k, v, out, lse, dout, left=5, right=3)
    assert np.abs(default[0] - reference_attention_grads(q, k, v, dout, 5, 3, 0.7)[0]).max() > 1e-3


def test_large_scores_stay_finite() -> None:
    q, k, v, _, _, dout = _inputs(np.random.default_rng(4), 1, 33, 33, 2, 2, 32, -1, 0)
    q, k = q * 30, k * 30
    out, lse = reference_attention(q, k, v, -1, 0)
    _assert_matches((16, 32), (-1, 0), (q, k, v, out, lse, dout), True)


def test_preprocess_and_lse_conventions() -> None:
    out = np.arange(24.0).reshape(1, 3, 2, 4)
    dout = np.ones_like(out)
    assert preprocess_d(out, dout).shape == (1, 2, 3)
    assert preprocess_d(out, dout)[0, 1, 2] == out[0, 2, 1].sum()
    lse2 = lse_log2(np.array([-np.inf, 0.0, np.log(2.0)]))
    assert lse2[0] == np.inf and lse2[1] == 0.0 and abs(lse2[2] - 1.0) < 1e-15


# --- the reference against finite differences of the forward reference -----------------------------

def _numeric_grad(loss: Callable[[], float], x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        saved = x[idx]
        x[idx] = saved + eps
        up = loss()
        x[idx] = saved - eps
        down = loss()
        x[idx] = saved
        grad[idx] = (up - down) / (2 * eps)
    return grad


@pytest.mark.parametrize("window", [(-1, 0), (1, 1)])
def test_reference_grads_match_finite_differences(window: tuple[int, int]) -> None:
    # seqlen_q 5 > seqlen_k 4: with causal, row 0 sees nothing; GQA 2:1; a non-default scale.
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 5, 2, 3))
    k = rng.standard_normal((1, 4, 1, 3))
    v = rng.standard_normal((1, 4, 1, 3))
    dout = rng.standard_normal(q.shape)

    def loss() -> float:
        return float((reference_attention(q, k, v, *window, 0.8)[0] * dout).sum())

    ref = reference_attention_grads(q, k, v, dout, *window, 0.8)
    for analytic, x in zip(ref, (q, k, v), strict=True):
        assert np.abs(analytic - _numeric_grad(loss, x)).max() < 1e-6
    out, lse = reference_attention(q, k, v, *window, 0.8)
    got = interpret_bwd((2, 2), q, k, v, out, lse, dout, softmax_scale=0.8, left=window[0], right=window[1])
    assert max(float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True)) < TOL


# --- a broken schedule is caught ---------------------------------------------------------------------

@pytest.mark.parametrize("deterministic", [False, True])
def test_dropping_a_query_block_is_caught(monkeypatch: pytest.MonkeyPatch, deterministic: bool) -> None:
    inputs = _inputs(np.random.default_rng(6), 1, 100, 100, 2, 1, 32, -1, 0)
    _assert_matches((32, 32), (-1, 0), inputs, deterministic)
    real = MaskTrait.q_block_order
    monkeypatch.setattr(MaskTrait, "q_block_order", lambda *args: real(*args)[:-1])
    assert max(_grad_errors((32, 32), (-1, 0), inputs, deterministic)) > 1e-2


def test_starting_a_query_block_late_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _inputs(np.random.default_rng(7), 1, 100, 100, 2, 1, 32, 5, 3)
    real = MaskTrait.q_block_order
    monkeypatch.setattr(MaskTrait, "q_block_order", lambda *args: real(*args)[1:])
    assert max(_grad_errors((16, 16), (5, 3), inputs, False)) > 1e-2


# Each window needs block_needs_mask's right edge (causal) or left edge (a window on tile multiples).
@pytest.mark.parametrize("window", [(-1, 0), (64, -1), (5, 3)])
def test_broken_needs_mask_is_caught(monkeypatch: pytest.MonkeyPatch, window: tuple[int, int]) -> None:
    inputs = _inputs(np.random.default_rng(8), 1, 128, 128, 2, 1, 32, *window)
    _assert_matches((32, 32), window, inputs, False)
    monkeypatch.setattr(MaskTrait, "block_needs_mask", lambda *args: False)
    assert max(_grad_errors((32, 32), window, inputs, False)) > 1e-2


def test_masking_every_block_stays_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MaskTrait, "block_needs_mask", lambda *args: True)
    _assert_matches((16, 32), (5, 3), _inputs(np.random.default_rng(9), 1, 100, 33, 2, 1, 32, 5, 3), True)


def test_rejects_mismatched_inputs() -> None:
    q, k, v, out, lse, dout = _inputs(np.random.default_rng(10), 1, 8, 8, 4, 2, 16, -1, -1)
    with pytest.raises(ValueError, match="multiple"):
        interpret_bwd((16, 16), np.zeros((1, 8, 3, 16)), k, v, np.zeros((1, 8, 3, 16)), np.zeros((1, 3, 8)),
                      np.zeros((1, 8, 3, 16)))
    with pytest.raises(ValueError, match="lse"):
        interpret_bwd((16, 16), q, k, v, out, lse[:, :, :4], dout)
    with pytest.raises(ValueError, match="dout"):
        interpret_bwd((16, 16), q, k, v, out, lse, dout[:, :4])
    with pytest.raises(ValueError, match="plan_bwd_tiles"):
        interpret_bwd((0, 16), q, k, v, out, lse, dout)
