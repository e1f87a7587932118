"""attngen.reference: the float64 attention of any spec, checked against independent formulas, and its
gradients (from the derived score-mod derivative and the sinks' formula) against finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attngen
from attngen.features.score_mod import alibi_slopes
from attngen.reference.interp import reference_attention
from attngen.spec.model import AttentionSpec


def _qkv(rng: np.random.Generator, b: int, sq: int, sk: int, h: int, kvh: int, d: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((b, sq, h, d)), rng.standard_normal((b, sk, kvh, d)),
            rng.standard_normal((b, sk, kvh, d)))


def _naive(q: np.ndarray, k: np.ndarray, v: np.ndarray, logits: object, sink: np.ndarray | None = None) -> tuple:
    """Softmax attention with logits(b, h, s) -> modded (-inf hidden) and an optional sink column."""
    b, sq, h, _ = q.shape
    group = h // k.shape[2]
    out, lse = np.zeros(q.shape), np.zeros((b, h, sq))
    for bi in range(b):
        for hi in range(h):
            s = q[bi, :, hi] @ k[bi, :, hi // group].T / math.sqrt(q.shape[-1])
            m = logits(bi, hi, s)  # type: ignore[operator]
            if sink is not None:
                m = np.concatenate([m, np.full((sq, 1), sink[hi])], axis=1)
            top = np.max(m, axis=1, keepdims=True)
            e = np.exp(m - top)
            lse[bi, hi] = (top + np.log(e.sum(axis=1, keepdims=True)))[:, 0]
            p = e / e.sum(axis=1, keepdims=True)
            out[bi, :, hi] = p[:, : k.shape[1]] @ v[bi, :, hi // group]
    return out, lse


@pytest.mark.parametrize("left,right", [(-1, -1), (-1, 0), (5, 3), (0, 0)])
def test_window_masks_match_the_window_reference(left: int, right: int) -> None:
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, 2, 13, 21, 4, 2, 16)
    mask = {(-1, -1): "none", (-1, 0): "causal"}.get((left, right), {"kind": "sliding_window",
                                                                       "window": [left, right]})
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask=mask)
    out, lse = attngen.reference(spec, q, k, v)
    want_out, want_lse = reference_attention(q, k, v, left, right)
    np.testing.assert_allclose(out, want_out, atol=1e-12)
    np.testing.assert_allclose(lse, want_lse, atol=1e-12)


def test_softcap_alibi_sinks_and_chunks_match_independent_formulas() -> None:
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, 1, 20, 20, 4, 4, 8)
    q *= 3
    sinks = rng.standard_normal(4)
    slopes = np.asarray(alibi_slopes(4))
    rows, cols = np.arange(20)[:, None], np.arange(20)[None, :]
    cases = [
        ({"mask": "causal", "score_mod": {"softcap": 5.0}},
         lambda b, h, s: np.where(cols <= rows, 5.0 * np.tanh(s / 5.0), -np.inf), None, {}),
        ({"score_mod": {"alibi": "standard"}},
         lambda b, h, s: s - slopes[h] * np.abs(rows - cols), None, {}),
        ({"mask": {"kind": "chunked", "chunk": 8}, "sinks": "learnable"},
         lambda b, h, s: np.where((rows // 8 == cols // 8) & (cols <= rows), s, -np.inf), sinks, {"sinks": sinks}),
    ]
    for fields, logits, sink, args in cases:
        spec = AttentionSpec(head_dim=64, dtype="bf16", **fields)
        out, lse = attngen.reference(spec, q, k, v, **args)
        want_out, want_lse = _naive(q, k, v, logits, sink)
        np.testing.assert_allclose(out, want_out, atol=1e-12, err_msg=spec.name)
        np.testing.assert_allclose(lse, want_lse, atol=1e-12, err_msg=spec.name)


def test_rows_that_see_nothing_give_zero_and_minus_inf() -> None:
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, 1, 9, 4, 2, 2, 8)
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask={"kind": "sliding_window", "window": [0, 0]})
    out, lse = attngen.reference(spec, q, k, v)
    assert np.all(out[:, :5] == 0) and np.all(np.isneginf(lse[:, :, :5]))


@pytest.mark.parametrize("fields", [
    {"mask": "causal", "score_mod": {"softcap": 3.0}, "sinks": "learnable"},
    {"score_mod": {"alibi": "standard"}},
    {"mask": {"kind": "sliding_window", "window": [4, 0]},
     "score_mod": {"expr": "score * 0.5 + sigmoid(score) - 0.1 * abs(q_idx - kv_idx)"}},
])
def test_gradients_match_finite_differences(fields: dict) -> None:
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, 1, 7, 9, 2, 1, 4)
    dout = rng.standard_normal(q.shape)
    spec = AttentionSpec(head_dim=64, dtype="bf16", **fields)
    args = {"sinks": rng.standard_normal(2)} if "sinks" in fields else {}
    got = attngen.reference.grads(spec, q, k, v, dout, **args)

    def loss(q_: np.ndarray, k_: np.ndarray, v_: np.ndarray, extra: dict) -> float:
        return float((attngen.reference(spec, q_, k_, v_, **extra)[0] * dout).sum())

    inputs = {"dq": q, "dk": k, "dv": v, **({"dsinks": args["sinks"]} if args else {})}
    for name, x in inputs.items():
        numeric = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            for sign in (1, -1):
                x[idx] += sign * 1e-6
                numeric[idx] += sign * loss(q, k, v, args) / 2e-6
                x[idx] -= sign * 1e-6
        np.testing.assert_allclose(got[name], numeric, atol=1e-6, rtol=1e-5, err_msg=f"{spec.name} {name}")


def test_runtime_arguments_are_named() -> None:
    spec = AttentionSpec(head_dim=64, dtype="bf16", mask="prefix_lm")
    q, k, v = _qkv(np.random.default_rng(4), 1, 4, 4, 1, 1, 8)
    with pytest.raises(ValueError, match=r"missing \['prefix_len'\]"):
        attngen.reference(spec, q, k, v)
    out, _ = attngen.reference(spec, q, k, v, prefix_len=np.array([4]))
    full, _ = attngen.reference(AttentionSpec(head_dim=64, dtype="bf16"), q, k, v)
    np.testing.assert_allclose(out, full)  # a prefix covering the sequence is bidirectional
