"""The forward kernel's block schedule, as pure integer functions.

This module is the single statement of which (query block, KV block) pairs the CUDA template visits,
in which order, and which of them apply the element mask. The template mirrors these formulas line
by line, and `attngen.reference.interp` executes them in NumPy against naive attention.

Conventions (flash_attn >= 2.1, bottom-right aligned), with ``off = seqlen_k - seqlen_q``:

* query row ``i`` (``0 <= i < seqlen_q``) sees key ``j`` (``0 <= j < seqlen_k``) iff
  ``key_lo(i) <= j <= key_hi(i)``;
* ``key_hi(i) = min(i + off + right, seqlen_k - 1)`` if ``right >= 0``, else ``seqlen_k - 1``;
* ``key_lo(i) = max(i + off - left, 0)`` if ``left >= 0``, else ``0``;
* mask ``none`` is ``left = right = -1``, ``causal`` is ``left = -1, right = 0``, and
  ``sliding_window`` takes ``(left, right)`` from ``spec.window`` (``spec.window_left/right``).

Every integer division below has a non-negative numerator, so C++'s truncating ``/`` gives the same
result as Python's ``//``. Nothing here needs more than 32 bits for seqlens below 2**30.
"""

from __future__ import annotations

import numpy as np


def ceil_div(a: int, b: int) -> int:
    """``(a + b - 1) / b`` for ``a >= 0, b > 0``."""
    return (a + b - 1) // b


def num_m_blocks(seqlen_q: int, block_m: int) -> int:
    """Query blocks in the grid's x dimension: ``ceil_div(seqlen_q, block_m)``."""
    return ceil_div(seqlen_q, block_m)


def key_hi(i: int, seqlen_q: int, seqlen_k: int, right: int) -> int:
    """Last key row ``i`` sees; below 0 when it sees none (causal with seqlen_q > seqlen_k)."""
    if right < 0:                                      # unbounded on the right
        return seqlen_k - 1
    return min(i + seqlen_k - seqlen_q + right, seqlen_k - 1)


def key_lo(i: int, seqlen_q: int, seqlen_k: int, left: int) -> int:
    """First key row ``i`` sees (never below 0)."""
    if left < 0:                                       # unbounded on the left
        return 0
    return max(i + seqlen_k - seqlen_q - left, 0)


def visible(i: int, j: int, seqlen_q: int, seqlen_k: int, left: int, right: int) -> bool:
    """The element mask: does query row ``i`` see key ``j`` (``j >= 0``)?

    This is exactly the test the kernel applies per element on blocks where `block_needs_mask` is
    True. Rows ``i >= seqlen_q`` (padding rows of the last query block) are not checked: they are
    computed on zero-filled Q and never stored.
    """
    off = seqlen_k - seqlen_q
    return (j < seqlen_k                               # keys past the end are zero-filled padding
            and (right < 0 or j <= i + off + right)    # right edge of the window (causal: right = 0)
            and (left < 0 or j >= i + off - left))     # left edge of the window


def visible_tile(rows: np.ndarray, cols: np.ndarray, seqlen_q: int, seqlen_k: int,
                 left: int, right: int) -> np.ndarray:
    """`visible` over the outer product ``rows x cols`` (any indices, padding included): bool 2-D."""
    i = np.asarray(rows, dtype=np.int64)[:, None]
    j = np.asarray(cols, dtype=np.int64)[None, :]
    off = seqlen_k - seqlen_q
    ok = np.broadcast_to(j < seqlen_k, (i.shape[0], j.shape[1]))
    if right >= 0:
        ok = ok & (j <= i + off + right)
    if left >= 0:
        ok = ok & (j >= i + off - left)
    return np.asarray(ok, dtype=bool)


def visible_matrix(seqlen_q: int, seqlen_k: int, left: int, right: int) -> np.ndarray:
    """The full ``(seqlen_q, seqlen_k)`` boolean visibility matrix."""
    return visible_tile(np.arange(seqlen_q), np.arange(seqlen_k), seqlen_q, seqlen_k, left, right)


def last_valid_row(m_block: int, block_m: int, seqlen_q: int) -> int:
    """Last row of query block ``m_block`` that exists: ``min((m_block + 1) * block_m, seqlen_q) - 1``."""
    return min((m_block + 1) * block_m, seqlen_q) - 1


def kv_block_range(m_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                   left: int, right: int) -> tuple[int, int]:
    """KV blocks ``[n_min, n_max)`` that query block ``m_block`` visits.

    ``key_hi`` and ``key_lo`` are non-decreasing in ``i`` and consecutive rows' windows overlap, so
    the keys the block's rows see form one run from ``key_lo(first row)`` to
    ``key_hi(last valid row)``; the range is exactly the KV blocks that run touches (no block in it
    is fully masked). ``n_max <= n_min`` means the block visits nothing: its rows get output 0 and
    LSE -inf.
    """
    row_first = m_block * block_m
    row_last = last_valid_row(m_block, block_m, seqlen_q)
    col_hi = key_hi(row_last, seqlen_q, seqlen_k, right)          # may be < 0: nothing visible
    col_lo = key_lo(row_first, seqlen_q, seqlen_k, left)          # >= 0
    n_max = ceil_div(max(col_hi + 1, 0), block_n)                 # block holding col_hi, plus one
    n_min = col_lo // block_n                                     # block holding col_lo
    return n_min, n_max


def kv_block_order(m_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                   left: int, right: int) -> list[int]:
    """KV blocks in the kernel's order: from ``n_max - 1`` DOWN to ``n_min``.

    Going downwards puts the boundary blocks of a causal mask (and the partial last KV block) first,
    so the kernel can peel the masked iterations off the front of its loop; the first iteration also
    sets the running max from the block nearest the diagonal.
    """
    n_min, n_max = kv_block_range(m_block, block_m, block_n, seqlen_q, seqlen_k, left, right)
    return list(range(n_max - 1, n_min - 1, -1))


def block_needs_mask(n_block: int, m_block: int, block_m: int, block_n: int, seqlen_q: int,
                     seqlen_k: int, left: int, right: int) -> bool:
    """Does some (valid row, column) of this block pair need the element mask?

    Exact: False iff every valid row ``i`` of the query block sees every column ``j`` of the KV
    block (columns ``>= seqlen_k`` count as masked). The three tests are the pair's extreme corners:
    the last column against the end of the keys, the last column against the FIRST row's right edge,
    the first column against the LAST valid row's left edge.
    """
    off = seqlen_k - seqlen_q
    row_first = m_block * block_m
    row_last = last_valid_row(m_block, block_m, seqlen_q)
    col_first = n_block * block_n
    col_last = col_first + block_n - 1
    if col_last >= seqlen_k:                                      # partial last KV block
        return True
    if right >= 0 and col_last > row_first + off + right:         # crosses the right edge
        return True
    return left >= 0 and col_first < row_last + off - left        # crosses the left edge


def q_block_range(n_block: int, block_m: int, block_n: int, seqlen_q: int, seqlen_k: int,
                  left: int, right: int) -> tuple[int, int]:
    """Query blocks ``[m_min, m_max)`` that the backward's KV block ``n_block`` visits.

    The mirror of `kv_block_range`. Column ``j`` is seen by rows ``i`` with
    ``j - off - right <= i`` (if ``right >= 0``) and ``i <= j - off + left`` (if ``left >= 0``),
    ``off = seqlen_k - seqlen_q``; both bounds are non-decreasing in ``j``, so the rows that see some
    valid column of the block form one run from ``row_lo(first column)`` to ``row_hi(last valid
    column)``. The range is exactly the query blocks that run touches. ``m_max <= m_min`` means the
    KV block is seen by no row: its dK and dV are 0.
    """
    off = seqlen_k - seqlen_q
    col_first = n_block * block_n
    col_last = min((n_block + 1) * block_n, seqlen_k) - 1            # last valid column
    row_lo = max(col_first - off - right, 0) if right >= 0 else 0    # first row seeing col_first
    row_hi = min(col_last - off + left, seqlen_q - 1) if left >= 0 else seqlen_q - 1
    m_min = row_lo // block_m                                        # block holding row_lo
    m_max = ceil_div(max(row_hi + 1, 0), block_m)                    # block holding row_hi, plus one
    return m_min, m_max
