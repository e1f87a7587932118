"""A NumPy interpreter of a KernelPlan's tile schedule, and naive float64 attention to check it.

`interpret` executes what the forward kernel executes, one grid program at a time, in float64:
the same query/KV tiles (block_m x block_n from the plan), the same KV block range and order
(`attngen.reference.schedule`), zero-filled tiles past the end of K/V (as cp.async zero-fill leaves them),
the element mask only on blocks where `block_needs_mask` says so, and the base-2 online softmax with
the scale folded into exp2 and the division by the row sum deferred to the end. Any disagreement
between the schedule and the mask conventions shows up as a difference from `reference_attention`.
"""

from __future__ import annotations

import math

import numpy as np

from ..features.mask import mask_trait
from ..planning.ir import KernelPlan
from . import schedule

LOG2E = math.log2(math.e)
LN2 = math.log(2.0)


def _check_inputs(plan: KernelPlan, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D (batch, seqlen, heads, head_dim), got shape {t.shape}")
        if t.shape[-1] != plan.spec.head_dim:
            raise ValueError(f"{name} head_dim must be {plan.spec.head_dim}, got {t.shape[-1]}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must have the same batch, got {q.shape[0]} and {k.shape[0]}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"q heads ({q.shape[2]}) must be a multiple of k/v heads ({k.shape[2]})")


def _resolve_scale(softmax_scale: float | None, head_dim: int) -> float:
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if not scale > 0:
        raise ValueError(f"softmax_scale must be positive, got {softmax_scale}")
    return scale


def _load_tile(x: np.ndarray, start: int, rows: int) -> np.ndarray:
    """Rows ``[start, start + rows)`` of a (seqlen, head_dim) matrix; rows past the end are zeros."""
    tile = np.zeros((rows, x.shape[1]), dtype=np.float64)
    stop = min(start + rows, x.shape[0])
    if stop > start:
        tile[: stop - start] = x[start:stop]
    return tile


def _scaled_max(m: np.ndarray, scale_log2: float) -> np.ndarray:
    """``m * scale_log2``, but 0 where ``m`` is -inf (a row with nothing visible yet): no inf - inf."""
    return np.where(m == -np.inf, 0.0, m * scale_log2)


def _query_block(plan: KernelPlan, q_bh: np.ndarray, k_bh: np.ndarray, v_bh: np.ndarray,
                 m_block: int, scale: float, b: int = 0, h: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One grid program: a (block_m, d) output tile and its (block_m,) LSE, padding rows included."""
    bm, bn = plan.block_m, plan.block_n
    sq, sk = q_bh.shape[0], k_bh.shape[0]
    mask = mask_trait(plan.spec)
    scale_log2 = scale * LOG2E
    q_tile = _load_tile(q_bh, m_block * bm, bm)
    rows = m_block * bm + np.arange(bm)
    m_run = np.full(bm, -np.inf)                   # running max of raw scores
    l_run = np.zeros(bm)                           # running sum of exp2, relative to m_run
    acc = np.zeros((bm, q_bh.shape[1]))            # unnormalized O
    points = {"b": b, "h": h}
    for n_block in mask.kv_block_order(m_block, bm, bn, sq, sk, points):
        k_tile = _load_tile(k_bh, n_block * bn, bn)
        v_tile = _load_tile(v_bh, n_block * bn, bn)
        s = q_tile @ k_tile.T
        if mask.block_needs_mask(n_block, m_block, bm, bn, sq, sk, points):
            cols = n_block * bn + np.arange(bn)
            s = np.where(mask.visible(rows, cols, sq, sk, b=b, h=h), s, -np.inf)
        m_new = np.maximum(m_run, s.max(axis=1))
        m_new_scaled = _scaled_max(m_new, scale_log2)
        # Old max unguarded: -inf there gives a factor of exactly 0 on the (zero) accumulators.
        alpha = np.exp2(m_run * scale_log2 - m_new_scaled)
        p = np.exp2(s * scale_log2 - m_new_scaled[:, None])
        l_run = alpha * l_run + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ v_tile
        m_run = m_new
    return _finalize(acc, l_run, _scaled_max(m_run, scale_log2))


def _finalize(acc: np.ndarray, l_run: np.ndarray, m_scaled: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Deferred normalization: O / l, LSE = (m_scaled + log2 l) * ln 2; rows with l == 0: 0, -inf."""
    seen = l_run > 0
    safe_l = np.where(seen, l_run, 1.0)
    out = np.where(seen[:, None], acc / safe_l[:, None], 0.0)
    lse = np.where(seen, (m_scaled + np.log2(safe_l)) * LN2, -np.inf)
    return out, lse


def interpret(plan: KernelPlan, q: np.ndarray, k: np.ndarray, v: np.ndarray,
              softmax_scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Run the plan's schedule in float64: (out like q, lse (batch, heads, seqlen_q), natural log)."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    _check_inputs(plan, q, k, v)
    batch, sq, heads, d = q.shape
    group = heads // k.shape[2]                    # GQA: query heads per K/V head
    scale = _resolve_scale(softmax_scale, d)
    out = np.zeros_like(q)
    lse = np.full((batch, heads, sq), -np.inf)
    bm = plan.block_m
    for m_block in range(schedule.num_m_blocks(sq, bm)):   # grid: (m_block, head, batch)
        stored = slice(m_block * bm, min((m_block + 1) * bm, sq))
        n_rows = stored.stop - stored.start
        for h in range(heads):
            kv_h = h // group
            for b in range(batch):
                o_tile, lse_tile = _query_block(plan, q[b, :, h], k[b, :, kv_h], v[b, :, kv_h],
                                                m_block, scale, b, h)
                out[b, stored, h] = o_tile[:n_rows]          # padding rows are never stored
                lse[b, h, stored] = lse_tile[:n_rows]
    return out, lse


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, left: int, right: int,
                        softmax_scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Naive float64 attention over the full score matrix: (out like q, lse (batch, heads, seqlen_q)).

    Softmax over the keys each row sees (`schedule.visible_matrix`); rows that see none give output 0
    and LSE -inf.
    """
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    _, sq, heads, d = q.shape
    sk, kv_heads = k.shape[1], k.shape[2]
    scale = _resolve_scale(softmax_scale, d)
    k_full = np.repeat(k, heads // kv_heads, axis=2)
    v_full = np.repeat(v, heads // kv_heads, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, k_full) * scale
    vis = schedule.visible_matrix(sq, sk, left, right)
    s = np.where(vis, s, -np.inf)
    row_max = s.max(axis=-1, initial=-np.inf, keepdims=True)
    finite_max = np.where(np.isfinite(row_max), row_max, 0.0)
    p = np.exp(s - finite_max)
    denom = p.sum(axis=-1, keepdims=True)
    seen = denom > 0
    safe = np.where(seen, denom, 1.0)
    out = np.einsum("bhij,bjhd->bihd", p / safe, v_full)
    lse = np.where(seen, finite_max + np.log(safe), -np.inf)[..., 0]
    return out, lse
