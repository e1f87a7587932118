"""Float64 attention of any spec (mask, score mod, sinks) straight from its expressions: what the kernels are
checked against, and what users can check against (`attngen.reference`).

One (batch, head) at a time: S = q k^T x softmax_scale, the score mod, the mask (-inf), a softmax whose
denominator holds the sink, O = P v and the natural-log LSE (-inf for a row that sees nothing and has no
sink). `grads` is the matching backward: dS = P (dP - D) x d score_mod / d score, and the sinks' gradient.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..features.score_mod import ALIBI_SLOPES, SINKS, alibi_slopes
from ..features.variant import Variant, variant_of
from ..spec.model import AttentionSpec


def _array(x: Any) -> np.ndarray:
    """A float64 (or int64) NumPy array from a NumPy array, a torch tensor (any device) or a list."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = x.double() if x.is_floating_point() else x.long()
        return np.asarray(x.numpy())
    arr = np.asarray(x)
    return arr.astype(np.float64) if arr.dtype.kind == "f" else arr


@dataclass
class _Call:
    variant: Variant
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    tensors: dict[str, np.ndarray]
    scalars: dict[str, float]

    @property
    def group(self) -> int:
        return self.q.shape[2] // self.k.shape[2]

    def logits(self, b: int, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(raw scaled scores, modded scores with -inf where hidden, the visibility) of one (batch, head)."""
        sq, sk = self.q.shape[1], self.k.shape[1]
        score = self.q[b, :, h] @ self.k[b, :, h // self.group].T * self.scale
        rows, cols = np.arange(sq), np.arange(sk)
        env = self._env(b, h, rows, cols, score)
        mod = self.variant.score_mod
        modded = score
        if mod is not None:
            from .. import expr as lang

            modded = np.broadcast_to(lang.evaluate(mod.parsed(), env, tensors=self.tensors, scalars=self.scalars),
                                     score.shape).astype(np.float64)
        seen = self.variant.mask.visible(rows, cols, sq, sk, b=b, h=h, tensors=self.tensors, scalars=self.scalars)
        return score, np.where(seen, modded, -np.inf), seen

    def score_grad(self, b: int, h: int, score: np.ndarray) -> np.ndarray | float:
        mod = self.variant.score_mod
        if mod is None:
            return 1.0
        from .. import expr as lang

        env = self._env(b, h, np.arange(score.shape[0]), np.arange(score.shape[1]), score)
        return np.broadcast_to(lang.evaluate(mod.derivative(), env, tensors=self.tensors, scalars=self.scalars),
                               score.shape)

    def _env(self, b: int, h: int, rows: np.ndarray, cols: np.ndarray, score: np.ndarray) -> dict[str, Any]:
        return {"b": b, "h": h, "q_idx": rows[:, None], "kv_idx": cols[None, :], "sq": self.q.shape[1],
                "sk": self.k.shape[1], "score": score}

    def sink(self, h: int) -> float | None:
        return float(self.tensors[SINKS][h]) if self.variant.sinks is not None else None


def _call(spec: AttentionSpec, q: Any, k: Any, v: Any, softmax_scale: float | None,
          kwargs: Mapping[str, Any]) -> _Call:
    variant = variant_of(spec)
    q, k, v = (_array(x) for x in (q, k, v))
    if q.ndim != 4 or k.shape != v.shape or k.ndim != 4 or q.shape[-1] != k.shape[-1] or q.shape[0] != k.shape[0]:
        raise ValueError(f"q (batch, seqlen_q, heads, head_dim) and k, v (batch, seqlen_k, kv_heads, head_dim) "
                         f"expected; got {q.shape}, {k.shape}, {v.shape}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2]:
        raise ValueError(f"q's heads ({q.shape[2]}) must be a multiple of k's ({k.shape[2]})")
    wanted = {a.name: a for a in variant.arguments() if not a.computed}
    unknown = sorted(set(kwargs) - set(wanted))
    missing = sorted(set(wanted) - set(kwargs))
    if unknown or missing:
        raise ValueError(f"spec '{spec.name}' reads {sorted(wanted) or 'no runtime arguments'}; "
                         f"missing {missing}, unexpected {unknown}")
    tensors = {n: _array(x) for n, x in kwargs.items() if wanted[n].is_tensor}
    scalars = {n: float(x) for n, x in kwargs.items() if not wanted[n].is_tensor}
    if any(a.computed for a in variant.arguments()):
        tensors[ALIBI_SLOPES] = np.asarray(alibi_slopes(q.shape[2]))
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    return _Call(variant, q, k, v, scale, tensors, scalars)


def attention(spec: AttentionSpec, q: Any, k: Any, v: Any, *, softmax_scale: float | None = None,
              **tensors: Any) -> tuple[np.ndarray, np.ndarray]:
    """(out, lse) in float64: out (batch, seqlen_q, heads, head_dim), lse (batch, heads, seqlen_q)."""
    c = _call(spec, q, k, v, softmax_scale, tensors)
    batch, sq, heads, _ = c.q.shape
    out = np.zeros(c.q.shape)
    lse = np.full((batch, heads, sq), -np.inf)
    for b in range(batch):
        for h in range(heads):
            _, m, _ = c.logits(b, h)
            p, row_lse = _softmax(m, c.sink(h))
            out[b, :, h] = p @ c.v[b, :, h // c.group]
            lse[b, h] = row_lse
    return out, lse


def _softmax(m: np.ndarray, sink: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities (the sink's share left out) and the LSE of each row of modded scores m."""
    top = m.max(axis=1, initial=-np.inf)
    if sink is not None:
        top = np.maximum(top, sink)
    safe = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(m - safe[:, None])
    total = e.sum(axis=1) + (np.exp(sink - safe) if sink is not None else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(total[:, None] > 0, e / np.where(total > 0, total, 1.0)[:, None], 0.0)
        lse = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
    return p, lse


def grads(spec: AttentionSpec, q: Any, k: Any, v: Any, dout: Any, *, softmax_scale: float | None = None,
          dlse: Any = None, **tensors: Any) -> dict[str, np.ndarray]:
    """Float64 gradients {dq, dk, dv[, dsinks]} of sum(out * dout) (+ sum(lse * dlse) with `dlse`)."""
    c = _call(spec, q, k, v, softmax_scale, tensors)
    out, lse = attention(spec, c.q, c.k, c.v, softmax_scale=c.scale, **{n: tensors[n] for n in tensors})
    return _grads(c, _array(dout), None if dlse is None else _array(dlse), out, lse)


def grads_given(spec: AttentionSpec, q: Any, k: Any, v: Any, dout: Any, out: Any, lse: Any, *,
                softmax_scale: float | None = None, **tensors: Any) -> dict[str, np.ndarray]:
    """Float64 gradients {dq, dk, dv[, dsinks]} of q, k and v where the rows' output and LSE are given (those of
    a longer key sequence of which k and v are a part: the gradients are that sequence's share from this part)."""
    c = _call(spec, q, k, v, softmax_scale, tensors)
    return _grads(c, _array(dout), None, _array(out), _array(lse))


def _grads(c: _Call, do: np.ndarray, dl: np.ndarray | None, out: np.ndarray, lse: np.ndarray) -> dict[str, np.ndarray]:
    batch, sq, heads, _ = c.q.shape
    dq, dk, dv = np.zeros(c.q.shape), np.zeros(c.k.shape), np.zeros(c.v.shape)
    dsinks = np.zeros(heads)
    for b in range(batch):
        for h in range(heads):
            kv_h = h // c.group
            score, m, _ = c.logits(b, h)
            row_lse = lse[b, h][:, None]
            p = np.where(np.isfinite(row_lse), np.exp(m - np.where(np.isfinite(row_lse), row_lse, 0.0)), 0.0)
            delta = (do[b, :, h] * out[b, :, h]).sum(axis=1)
            if dl is not None:
                delta = delta - dl[b, h]
            ds = p * (do[b, :, h] @ c.v[b, :, kv_h].T - delta[:, None]) * c.score_grad(b, h, score)
            dq[b, :, h] = ds @ c.k[b, :, kv_h] * c.scale
            dk[b, :, kv_h] += ds.T @ c.q[b, :, h] * c.scale
            dv[b, :, kv_h] += p.T @ do[b, :, h]
            sink = c.sink(h)
            if sink is not None:
                p_sink = np.where(np.isfinite(lse[b, h]), np.exp(sink - np.where(np.isfinite(lse[b, h]),
                                                                                 lse[b, h], 0.0)), 0.0)
                dsinks[h] -= (p_sink * delta).sum()
    result: dict[str, np.ndarray] = {"dq": dq, "dk": dk, "dv": dv}
    if c.variant.sinks is not None:
        result["dsinks"] = dsinks
    return result
