"""Exhaustive checks of the block schedule on small sizes: no visible element is skipped, no visited
block is wasted, and a block that skips the element mask really has nothing to mask."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attngen.reference import schedule
from attngen.spec.model import AttentionSpec

SEQLENS = (1, 2, 3, 5, 8, 15, 16, 17, 31, 32, 33, 40)
BLOCKS = ((16, 16), (16, 32), (32, 16), (32, 64), (64, 32), (64, 64))
#: (left, right): none, causal, then windows small, lopsided, zero-width and larger than any seqlen.
WINDOWS = ((-1, -1), (-1, 0), (0, 0), (0, -1), (5, 3), (3, 0), (1, 7), (64, -1), (-1, 7), (100, 100))


def _check_config(sq: int, sk: int, bm: int, bn: int, left: int, right: int) -> None:
    vis = schedule.visible_matrix(sq, sk, left, right)
    for m_block in range(schedule.num_m_blocks(sq, bm)):
        r0, r1 = m_block * bm, min((m_block + 1) * bm, sq)
        n_min, n_max = schedule.kv_block_range(m_block, bm, bn, sq, sk, left, right)
        order = schedule.kv_block_order(m_block, bm, bn, sq, sk, left, right)
        assert order == list(range(n_max - 1, n_min - 1, -1))
        block_vis = vis[r0:r1]
        # Every visible element lies in a visited block.
        visited = np.zeros(sk, dtype=bool)
        visited[max(n_min, 0) * bn:max(n_max, 0) * bn] = True
        assert not block_vis[:, ~visited].any(), (m_block, n_min, n_max)
        if n_max <= n_min:
            assert not block_vis.any()
        assert n_min >= 0 and n_max <= schedule.ceil_div(sk, bn)
        for n_block in order:
            c0 = n_block * bn
            # The pair's tile: columns past seqlen_k are padding and count as masked.
            tile = np.zeros((r1 - r0, bn), dtype=bool)
            real = block_vis[:, c0:c0 + bn]
            tile[:, :real.shape[1]] = real
            assert tile.any(), f"visited block {n_block} of query block {m_block} sees nothing"
            needs = schedule.block_needs_mask(n_block, m_block, bm, bn, sq, sk, left, right)
            assert needs == (not tile.all()), (m_block, n_block, needs)


@pytest.mark.parametrize("left,right", WINDOWS)
def test_schedule_exhaustive(left: int, right: int) -> None:
    for sq, sk, (bm, bn) in itertools.product(SEQLENS, SEQLENS, BLOCKS):
        _check_config(sq, sk, bm, bn, left, right)


@pytest.mark.parametrize("left,right", ((-1, 0), (4, 2), (0, -1)))
def test_schedule_all_small_seqlens(left: int, right: int) -> None:
    for sq, sk in itertools.product(range(1, 41), range(1, 41)):
        _check_config(sq, sk, 16, 16, left, right)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(sq=st.integers(1, 300), sk=st.integers(1, 300), bm=st.sampled_from([16, 32, 64, 128]),
       bn=st.sampled_from([16, 32, 64, 128]), left=st.integers(-1, 80), right=st.integers(-1, 80))
def test_schedule_random_sizes(sq: int, sk: int, bm: int, bn: int, left: int, right: int) -> None:
    _check_config(sq, sk, bm, bn, left, right)


def test_visible_scalar_matches_matrix() -> None:
    for sq, sk, (left, right) in itertools.product((1, 7, 20), (1, 9, 20), WINDOWS):
        vis = schedule.visible_matrix(sq, sk, left, right)
        for i, j in itertools.product(range(sq), range(sk)):
            assert schedule.visible(i, j, sq, sk, left, right) == vis[i, j]
        for i in range(sq):
            row = np.flatnonzero(vis[i])
            hi = schedule.key_hi(i, sq, sk, right)
            lo = schedule.key_lo(i, sq, sk, left)
            assert list(row) == list(range(lo, hi + 1))


@pytest.mark.parametrize("sq,sk", ((10, 10), (4, 12), (12, 4), (1, 7)))
def test_visibility_matches_flash_attn_conventions(sq: int, sk: int) -> None:
    off = sk - sq
    ones = np.ones((sq, sk), dtype=bool)
    assert (schedule.visible_matrix(sq, sk, -1, -1) == ones).all()
    assert (schedule.visible_matrix(sq, sk, -1, 0) == np.tril(ones, k=off)).all()
    left, right = 3, 2
    expect = np.tril(ones, k=off + right) & np.triu(ones, k=off - left)
    assert (schedule.visible_matrix(sq, sk, left, right) == expect).all()


def test_causal_interior_blocks_skip_the_mask() -> None:
    sq = sk = 256
    for m_block in range(4):
        order = schedule.kv_block_order(m_block, 64, 64, sq, sk, -1, 0)
        assert order == list(range(m_block, -1, -1))          # diagonal block first
        needs = [schedule.block_needs_mask(n, m_block, 64, 64, sq, sk, -1, 0) for n in order]
        assert needs == [True] + [False] * m_block


def test_causal_rows_before_the_keys_visit_nothing() -> None:
    # seqlen_q 100 > seqlen_k 20, bottom-right aligned: rows 0..79 see no key.
    assert schedule.kv_block_range(0, 64, 32, 100, 20, -1, 0)[1] == 0
    assert schedule.kv_block_order(0, 64, 32, 100, 20, -1, 0) == []
    assert schedule.kv_block_order(1, 64, 32, 100, 20, -1, 0) == [0]


def test_window_properties_of_the_spec() -> None:
    causal = AttentionSpec(head_dim=64, dtype="fp16", mask="causal")
    window = AttentionSpec(head_dim=64, dtype="fp16", mask="sliding_window", window=(5, 3))
    full = AttentionSpec(head_dim=64, dtype="fp16")
    assert (causal.window_left, causal.window_right) == (-1, 0)
    assert (window.window_left, window.window_right) == (5, 3)
    assert (full.window_left, full.window_right) == (-1, -1)
