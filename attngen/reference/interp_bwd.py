"""A NumPy interpreter of the backward kernel's tile schedule, and naive float64 gradients to check it.

`interpret_bwd` executes what the FlashAttention-2 backward kernels execute, in float64:

1. preprocess: ``D_i = sum_d dO[i, d] * O[i, d]`` per query row;
2. main kernel, grid ``(n_block, head, batch)``: K_j, V_j tiles (zero-filled past ``seqlen_k``) and
   dK_j, dV_j accumulators; query blocks from `schedule.q_block_range`, walked downwards from
   ``m_max - 1`` to ``m_min`` (FA2's order: the partial last query block comes first); per pair::

       S   = Q_i K_j^T                                  (raw scores)
       S   = -inf where not visible                     (only if block_needs_mask says so)
       P   = exp2(S * scale_log2 - lse_log2_i)          (lse_log2 = lse * log2 e; +inf for an empty
                                                         row and for padding rows, so P = 0 there)
       dV_j += P^T dO_i
       dP  = dO_i V_j^T
       dS  = P * (dP - D_i)
       dK_j += scale * dS^T Q_i
       dQ_i += scale * dS K_j                           (across KV blocks: atomics or a buffer)

3. dQ: ``deterministic=False`` adds each pair's contribution straight into dQ in grid order (the
   fp32 atomics' order); ``deterministic=True`` writes each KV block's partial dQ to its own slot of
   an ``[n_blocks]`` buffer and sums the slots in order ``0 .. n_blocks - 1`` at the end.
4. GQA: dK/dV are written per query head and summed over each group (kv head = head // group).

`reference_attention_grads` computes the same gradients from the full score matrix by the textbook
formulas, independently of the tiling.
"""

from __future__ import annotations

import math

import numpy as np

from ..features.mask import MaskTrait
from . import schedule
from .interp import LOG2E, _load_tile, _resolve_scale


def _check_bwd_inputs(q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, lse: np.ndarray,
                      dout: np.ndarray) -> None:
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)):
        if t.ndim != 4:
            raise ValueError(f"{name} must be 4-D (batch, seqlen, heads, head_dim), got shape {t.shape}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q {q.shape} and k {k.shape} must agree in batch and head_dim")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"q heads ({q.shape[2]}) must be a multiple of k/v heads ({k.shape[2]})")
    for name, t in (("out", out), ("dout", dout)):
        if t.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {q.shape}, got {t.shape}")
    expect = (q.shape[0], q.shape[2], q.shape[1])
    if lse.shape != expect:
        raise ValueError(f"lse must have shape (batch, heads, seqlen_q) = {expect}, got {lse.shape}")


def _check_tiles(tiles: tuple[int, int]) -> tuple[int, int]:
    block_m, block_n = (int(x) for x in tiles)
    if block_m <= 0 or block_n <= 0:
        raise ValueError(f"plan_bwd_tiles must be positive (block_m, block_n), got {tiles}")
    return block_m, block_n


def preprocess_d(out: np.ndarray, dout: np.ndarray) -> np.ndarray:
    """The preprocess kernel: ``D = rowsum(dO * O)``, shape (batch, heads, seqlen_q)."""
    return np.einsum("bihd,bihd->bhi", dout, out)


def lse_log2(lse: np.ndarray) -> np.ndarray:
    """``lse * log2(e)``, with +inf for rows whose LSE is -inf (they see nothing): their P is 0."""
    return np.where(lse == -np.inf, np.inf, lse * LOG2E)


def _load_rows(x: np.ndarray, start: int, rows: int, fill: float) -> np.ndarray:
    """Entries ``[start, start + rows)`` of a 1-D row vector; entries past the end are ``fill``."""
    tile = np.full(rows, fill, dtype=np.float64)
    stop = min(start + rows, x.shape[0])
    if stop > start:
        tile[: stop - start] = x[start:stop]
    return tile


def _q_block_order(mask: MaskTrait, n_block: int, bm: int, bn: int, sq: int, sk: int) -> list[int]:
    """Query blocks of KV block ``n_block`` in the kernel's order: the last down to the first."""
    return mask.q_block_order(n_block, bm, bn, sq, sk)[::-1]


def _probabilities(s: np.ndarray, lse2_tile: np.ndarray, scale_log2: float, masked: bool,
                   rows: np.ndarray, cols: np.ndarray, sq: int, sk: int, mask: MaskTrait) -> np.ndarray:
    """P recomputed from raw scores and the saved LSE; the element mask only when ``masked``."""
    if masked:
        s = np.where(mask.visible(rows, cols, sq, sk), s, -np.inf)
    return np.exp2(s * scale_log2 - lse2_tile[:, None])


def _kv_block(tiles: tuple[int, int], n_block: int, bh: dict[str, np.ndarray], scale: float,
              mask: MaskTrait, dq_sink: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One grid program of the main kernel: (dK_j, dV_j) tiles (block_n, d), padding rows included.

    ``bh`` holds one (batch, head)'s q, do (seqlen_q, d), lse2, dsum (seqlen_q,) and k, v
    (seqlen_k, d). ``dq_sink`` (seqlen_q, d) receives this block's dQ contributions (valid rows only).
    """
    bm, bn = tiles
    sq, sk = bh["q"].shape[0], bh["k"].shape[0]
    scale_log2 = scale * LOG2E
    k_tile = _load_tile(bh["k"], n_block * bn, bn)
    v_tile = _load_tile(bh["v"], n_block * bn, bn)
    cols = n_block * bn + np.arange(bn)
    dk = np.zeros_like(k_tile)
    dv = np.zeros_like(v_tile)
    for m_block in _q_block_order(mask, n_block, bm, bn, sq, sk):
        r0 = m_block * bm
        q_tile = _load_tile(bh["q"], r0, bm)
        do_tile = _load_tile(bh["do"], r0, bm)
        lse2_tile = _load_rows(bh["lse2"], r0, bm, np.inf)        # padding rows: P = 0
        d_tile = _load_rows(bh["dsum"], r0, bm, 0.0)
        masked = mask.block_needs_mask(n_block, m_block, bm, bn, sq, sk)
        p = _probabilities(q_tile @ k_tile.T, lse2_tile, scale_log2, masked, r0 + np.arange(bm),
                           cols, sq, sk, mask)
        dv += p.T @ do_tile
        dp = do_tile @ v_tile.T
        ds = p * (dp - d_tile[:, None])
        dk += scale * (ds.T @ q_tile)
        n_rows = min(bm, sq - r0)
        dq_sink[r0:r0 + n_rows] += (scale * (ds @ k_tile))[:n_rows]   # padding rows never stored
    return dk, dv


def _head_inputs(arrays: dict[str, np.ndarray], b: int, h: int, kv_h: int) -> dict[str, np.ndarray]:
    return {"q": arrays["q"][b, :, h], "do": arrays["do"][b, :, h], "lse2": arrays["lse2"][b, h],
            "dsum": arrays["dsum"][b, h], "k": arrays["k"][b, :, kv_h], "v": arrays["v"][b, :, kv_h]}


def interpret_bwd(plan_bwd_tiles: tuple[int, int], q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  out: np.ndarray, lse: np.ndarray, dout: np.ndarray, softmax_scale: float | None = None,
                  left: int = -1, right: int = -1,
                  deterministic: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the backward tile schedule in float64: (dq like q, dk like k, dv like v)."""
    q, k, v, out, lse, dout = (np.asarray(t, dtype=np.float64) for t in (q, k, v, out, lse, dout))
    _check_bwd_inputs(q, k, v, out, lse, dout)
    bm, bn = _check_tiles(plan_bwd_tiles)
    batch, sq, heads, d = q.shape
    sk, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = _resolve_scale(softmax_scale, d)
    arrays = {"q": q, "do": dout, "k": k, "v": v, "lse2": lse_log2(lse), "dsum": preprocess_d(out, dout)}
    n_blocks = schedule.ceil_div(sk, bn)
    mask = MaskTrait.window(left, right)
    dq = np.zeros_like(q)
    dq_parts = np.zeros((n_blocks, *q.shape)) if deterministic else None
    dk_heads = np.zeros((batch, sk, heads, d))                # per query head; summed per group below
    dv_heads = np.zeros((batch, sk, heads, d))
    for n_block in range(n_blocks):                           # grid: (n_block, head, batch)
        stored = slice(n_block * bn, min((n_block + 1) * bn, sk))
        n_rows = stored.stop - stored.start
        for h in range(heads):
            for b in range(batch):
                sink = dq[b, :, h] if dq_parts is None else dq_parts[n_block, b, :, h]
                dk_t, dv_t = _kv_block((bm, bn), n_block, _head_inputs(arrays, b, h, h // group), scale,
                                       mask, sink)
                dk_heads[b, stored, h] = dk_t[:n_rows]        # padding rows are never stored
                dv_heads[b, stored, h] = dv_t[:n_rows]
    if dq_parts is not None:
        for n_block in range(n_blocks):                       # fixed order: bitwise reproducible
            dq += dq_parts[n_block]
    dk = dk_heads.reshape(batch, sk, kv_heads, group, d).sum(axis=3)
    dv = dv_heads.reshape(batch, sk, kv_heads, group, d).sum(axis=3)
    return dq, dk, dv


def reference_attention_grads(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray,
                              left: int = -1, right: int = -1,
                              scale: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Naive float64 gradients of attention over the full score matrix: (dq, dk, dv).

    ``P = softmax(scale * Q K^T)`` over the keys each row sees (rows that see none: P = 0),
    ``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - rowsum(P * dP))``, ``dQ = scale dS K``,
    ``dK = scale dS^T Q``; dK and dV summed over each GQA group of query heads.
    """
    q, k, v, dout = (np.asarray(t, dtype=np.float64) for t in (q, k, v, dout))
    batch, sq, heads, d = q.shape
    sk, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    k_full = np.repeat(k, group, axis=2)
    v_full = np.repeat(v, group, axis=2)
    s = np.einsum("bihd,bjhd->bhij", q, k_full) * scale
    vis = schedule.visible_matrix(sq, sk, left, right)
    s = np.where(vis, s, -np.inf)
    row_max = s.max(axis=-1, initial=-np.inf, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(row_max), row_max, 0.0))
    denom = e.sum(axis=-1, keepdims=True)
    p = e / np.where(denom > 0, denom, 1.0)                   # rows seeing nothing: all zeros
    dv_full = np.einsum("bhij,bihd->bjhd", p, dout)
    dp = np.einsum("bihd,bjhd->bhij", dout, v_full)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    dq = scale * np.einsum("bhij,bjhd->bihd", ds, k_full)
    dk_full = scale * np.einsum("bhij,bihd->bjhd", ds, q)
    dk = dk_full.reshape(batch, sk, kv_heads, group, d).sum(axis=3)
    dv = dv_full.reshape(batch, sk, kv_heads, group, d).sum(axis=3)
    return dq, dk, dv
