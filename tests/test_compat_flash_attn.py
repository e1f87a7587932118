"""attngen.flash_attn_func / flash_attn_varlen_func / flash_attn_with_kvcache on the CPU: the spec each call's
options map to (spec_for, a pure function), the arguments refused by name, and the plumbing (layouts, varlen,
paged pools, the KV cache written in place, flash_attn's LSE) against flash_attn's semantics written out in
float64 torch, with a fake kernel (tests/fake_kernel.py) that computes the spec's own float64 reference."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

import attngen
from attngen.compat import kernels
from attngen.compat.options import KernelOptions, make_options, spec_for

torch = pytest.importorskip("torch")

from . import fake_kernel  # noqa: E402
from .flash_reference import flash_reference  # noqa: E402


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    fake_kernel.install(monkeypatch)
    yield
    kernels.clear_cache()


def qkv(b: int, sq: int, sk: int, h: int = 4, kvh: int = 2, d: int = 64, seed: int = 0) -> tuple[Any, Any, Any]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, h, d, generator=gen, dtype=torch.float64),
            torch.randn(b, sk, kvh, d, generator=gen, dtype=torch.float64),
            torch.randn(b, sk, kvh, d, generator=gen, dtype=torch.float64))


def close(got: Any, want: Any) -> None:
    assert got.shape == want.shape
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    torch.testing.assert_close(got.double()[finite], want.double()[finite], rtol=1e-5, atol=1e-5)


# ---- spec_for: a pure function of the options -------------------------------------------------------------

def opts(**kw: Any) -> KernelOptions:
    return make_options(**{"head_dim": 64, "dtype": "bfloat16", **kw})


@pytest.mark.parametrize(("kw", "mask", "score_mod"), [
    ({}, "none", None),
    ({"causal": True}, "causal", None),
    ({"window_size": (-1, 0)}, "causal", None),
    ({"causal": True, "window_size": (4095, 7)}, "window_4095_0", None),
    ({"window_size": (3, -1)}, "window_3_inf", None),
    ({"window_size": (2, 5)}, "window_2_5", None),
    ({"softcap": 50}, "none", "softcap50"),
    ({"alibi": "heads", "causal": True}, "causal", "alibi_rt"),
])
def test_spec_for_uses_the_presets(kw: dict[str, Any], mask: str, score_mod: str | None) -> None:
    spec = spec_for(opts(**kw))
    assert spec.mask.name_part == mask
    assert (spec.score_mod.name_part if spec.score_mod else None) == score_mod
    assert spec.head_dim == 64 and spec.dtype.value == "bf16"


def test_spec_for_writes_softcap_with_alibi_and_batch_slopes_as_one_expression() -> None:
    spec = spec_for(opts(softcap=30.0, alibi="batch_heads", sinks=True))
    assert spec.score_mod is not None and spec.score_mod.expr is not None
    assert "tanh" in spec.score_mod.expr and "slopes[b, h]" in spec.score_mod.expr
    assert spec.score_mod.tensors["slopes"].shape == ("batch", "heads")
    assert spec.sinks.value == "learnable"
    assert opts(softcap=30.0, alibi="batch_heads").slopes_kwarg == "slopes"
    assert opts(alibi="heads").slopes_kwarg == "alibi_slopes"


def test_spec_for_deterministic_and_dtype() -> None:
    det = spec_for(opts(deterministic=True, dtype="float16"))
    assert det.deterministic and det.name.endswith("_det") and det.dtype.value == "fp16"
    assert not spec_for(opts()).deterministic


@pytest.mark.parametrize(("kw", "needle"), [
    ({"dtype": "float32"}, "torch.float32"),
    ({"head_dim": 80}, "head_dim 80"),
])
def test_spec_for_refuses(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        spec_for(opts(**kw))


@pytest.mark.parametrize(("kw", "needle"), [
    ({"window_size": (-2, 0)}, "window_size"), ({"window_size": (1,)}, "window_size"),
    ({"window_size": (1.5, 0)}, "window_size"), ({"softcap": -1.0}, "softcap"), ({"softcap": math.inf}, "softcap"),
])
def test_options_refuse_bad_values(kw: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        opts(**kw)


def test_options_are_a_frozen_cache_key(fake: None) -> None:
    q, k, v = qkv(1, 5, 7)
    for _ in range(2):
        attngen.flash_attn_func(q, k, v, causal=True)
    attngen.flash_attn_func(q, k, v)
    assert kernels.cached_options() == [opts(causal=True, dtype="float64"), opts(dtype="float64")]
    assert all(isinstance(key, kernels.CacheKey) for key in kernels._KERNELS)
    with pytest.raises(AttributeError):
        opts().head_dim = 128  # type: ignore[misc]


# ---- flash_attn_func --------------------------------------------------------------------------------------

CASES = [
    {}, {"causal": True}, {"window_size": (3, 2)}, {"causal": True, "window_size": (4, -1)},
    {"window_size": (-1, 2)}, {"softcap": 5.0}, {"softcap": 5.0, "causal": True, "window_size": (6, 0)},
    {"alibi": "heads"}, {"alibi": "heads", "causal": True}, {"alibi": "batch_heads", "softcap": 4.0},
    {"alibi": "batch_heads", "causal": True, "softcap": 4.0}, {"alibi": "heads", "causal": True, "window_size": (5, 0)},
]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize(("sq", "sk"), [(9, 9), (5, 13), (13, 5)])
def test_flash_attn_func_matches_flash_attn(fake: None, case: dict[str, Any], sq: int, sk: int) -> None:
    q, k, v = qkv(2, sq, sk)
    kw = {key: val for key, val in case.items() if key != "alibi"}
    slopes = _slopes(case.get("alibi"), 2, 4)
    out, lse, probs = attngen.flash_attn_func(q, k, v, alibi_slopes=slopes, return_attn_probs=True,
                                              softmax_scale=0.2, **kw)
    ref_out, ref_lse = flash_reference(q, k, v, alibi=slopes, scale=0.2, **kw)
    close(out, ref_out)
    close(lse, ref_lse)
    assert probs is None
    close(attngen.flash_attn_func(q, k, v, alibi_slopes=slopes, softmax_scale=0.2, **kw), ref_out)


def _slopes(form: str | None, batch: int, heads: int) -> Any:
    if form is None:
        return None
    gen = torch.Generator().manual_seed(7)
    return torch.rand((heads,) if form == "heads" else (batch, heads), generator=gen) * 0.5 + 0.05


@pytest.mark.parametrize(("kw", "needle"), [
    ({"dropout_p": 0.1}, "dropout_p"),
    ({"alibi_slopes": torch.ones(4, dtype=torch.float64)}, "alibi_slopes must be a torch.float32"),
    ({"alibi_slopes": torch.ones(1, 2, 4)}, "alibi_slopes must have shape"),
    ({"window_size": (-3, 0)}, "window_size"),
    ({"softcap": -0.5}, "softcap"),
])
def test_flash_attn_func_refuses_by_name(fake: None, kw: dict[str, Any], needle: str) -> None:
    q, k, v = qkv(1, 4, 4)
    with pytest.raises(ValueError, match=needle):
        attngen.flash_attn_func(q, k, v, **kw)


def test_flash_attn_func_real_compile_refuses_fp32_and_cpu() -> None:
    kernels.clear_cache()
    q, k, v = (t.float() for t in qkv(1, 4, 4))
    with pytest.raises(ValueError, match="torch.float16 or torch.bfloat16"):
        attngen.flash_attn_func(q, k, v)
    with pytest.raises(ValueError, match="CUDA tensors"):
        attngen.flash_attn_func(*(t.bfloat16() for t in (q, k, v)))
    with pytest.raises(ValueError, match="q must be a torch.Tensor"):
        attngen.flash_attn_func(q.tolist(), k, v)


# ---- flash_attn_varlen_func -------------------------------------------------------------------------------

def packed(lens_q: list[int], lens_k: list[int], seed: int = 1) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), 4, 64, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(sum(lens_k), 2, 64, generator=gen, dtype=torch.float64) for _ in range(2))
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32) for n in (lens_q, lens_k))
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("case", [{"causal": True}, {"window_size": (2, 1)},
                                  {"causal": True, "alibi": "batch_heads"}, {"alibi": "heads", "softcap": 3.0}],
                         ids=str)
def test_varlen_matches_each_sequence(fake: None, case: dict[str, Any]) -> None:
    lens_q, lens_k = [3, 0, 7, 1], [5, 4, 7, 0]
    q, k, v, cu_q, cu_k = packed(lens_q, lens_k)
    kw = {key: val for key, val in case.items() if key != "alibi"}
    slopes = _slopes(case.get("alibi"), 4, 4)
    out, lse, _ = attngen.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                                 alibi_slopes=slopes, return_attn_probs=True, **kw)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    for b in range(4):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        entry = slopes[b] if slopes is not None and slopes.dim() == 2 else slopes
        ref_out, ref_lse = flash_reference(q[qs][None], k[ks][None], v[ks][None], alibi=entry, **kw)
        close(out[qs], ref_out[0])
        close(lse[:, qs], ref_lse[0])


def test_varlen_paged_equals_contiguous(fake: None) -> None:
    lens = [5, 9, 2]
    q, k, v, cu_q, cu_k = packed(lens, lens)
    page, pages = 4, torch.randperm(12, generator=torch.Generator().manual_seed(3)).to(torch.int32)
    table = pages.reshape(3, 4)
    pool_k, pool_v = (torch.randn(12, page, 2, 64, dtype=torch.float64) for _ in range(2))
    for b, n in enumerate(lens):
        for p in range(n):
            pool_k[table[b, p // page], p % page] = k[cu_k[b] + p]
            pool_v[table[b, p // page], p % page] = v[cu_k[b] + p]
    want = attngen.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 9, 9, causal=True)
    got = attngen.flash_attn_varlen_func(q, pool_k, pool_v, cu_q, cu_k, 9, 9, causal=True, block_table=table)
    assert torch.equal(got, want)


# ---- flash_attn_with_kvcache ------------------------------------------------------------------------------

def test_kvcache_writes_new_keys_and_attends_to_the_prefix(fake: None) -> None:
    q, k_new, v_new = qkv(2, 3, 3, seed=4)
    k_cache, v_cache = (torch.randn(2, 16, 2, 64, dtype=torch.float64) for _ in range(2))
    before = k_cache.clone()
    lengths = torch.tensor([4, 9], dtype=torch.int32)
    slopes = _slopes("heads", 2, 4)
    out, lse = attngen.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths,
                                               causal=True, alibi_slopes=slopes, return_softmax_lse=True)
    for b, n in enumerate(lengths.tolist()):
        assert torch.equal(k_cache[b, n:n + 3], k_new[b]) and torch.equal(v_cache[b, n:n + 3], v_new[b])
        assert torch.equal(k_cache[b, :n], before[b, :n]) and torch.equal(k_cache[b, n + 3:], before[b, n + 3:])
        ref_out, ref_lse = flash_reference(q[b:b + 1], k_cache[b:b + 1, :n + 3], v_cache[b:b + 1, :n + 3],
                                           causal=True, alibi=slopes)
        close(out[b:b + 1], ref_out)
        close(lse[b:b + 1], ref_lse)


def test_kvcache_paged_equals_contiguous(fake: None) -> None:
    q, k_new, v_new = qkv(2, 1, 1, seed=5)
    contiguous = [torch.randn(2, 8, 2, 64, dtype=torch.float64) for _ in range(2)]
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    paged = [torch.empty(4, 4, 2, 64, dtype=torch.float64) for _ in range(2)]
    for pool, cache in zip(paged, contiguous, strict=True):
        for b in range(2):
            for p in range(8):
                pool[table[b, p // 4], p % 4] = cache[b, p]
    lengths = torch.tensor([2, 6], dtype=torch.int32)
    want = attngen.flash_attn_with_kvcache(q, *contiguous, k_new, v_new, cache_seqlens=lengths, causal=True)
    got = attngen.flash_attn_with_kvcache(q, *paged, k_new, v_new, cache_seqlens=lengths, block_table=table,
                                          causal=True)
    assert torch.equal(got, want)


def test_kvcache_int_lengths_and_whole_cache(fake: None) -> None:
    q, k_cache, v_cache = qkv(2, 2, 6, seed=6)
    whole = attngen.flash_attn_with_kvcache(q, k_cache, v_cache, causal=True)
    close(whole, flash_reference(q, k_cache, v_cache, causal=True)[0])
    four = attngen.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=4, num_splits=3)
    close(four, flash_reference(q, k_cache[:, :4], v_cache[:, :4])[0])
    assert fake_kernel.KVCACHE_SPLITS[-1] == 3  # a short query's num_splits reaches the decode kernels


@pytest.mark.parametrize(("kw", "needle"), [
    ({"rotary_cos": torch.ones(4, 32)}, "rotary_cos"), ({"rotary_sin": torch.ones(4, 32)}, "rotary_sin"),
    ({"cache_batch_idx": torch.zeros(2, dtype=torch.int32)}, "cache_batch_idx"),
    ({"cache_leftpad": torch.zeros(2, dtype=torch.int32)}, "cache_leftpad"),
    ({"num_splits": -1}, "num_splits"), ({"k": torch.ones(2, 1, 2, 64)}, "k and v"),
    ({"cache_seqlens": torch.zeros(2, dtype=torch.int64)}, "cache_seqlens"),
])
def test_kvcache_refuses_by_name(fake: None, kw: dict[str, Any], needle: str) -> None:
    q, k_cache, v_cache = qkv(2, 1, 6)
    with pytest.raises(ValueError, match=needle):
        attngen.flash_attn_with_kvcache(q, k_cache, v_cache, **kw)


def test_kvcache_new_keys_need_lengths(fake: None) -> None:
    q, k_cache, v_cache = qkv(2, 1, 6)
    with pytest.raises(ValueError, match="cache_seqlens is required"):
        attngen.flash_attn_with_kvcache(q, k_cache, v_cache, k=q[:, :, :2], v=q[:, :, :2])
