"""GPU tests of attngen.flash_attn_func / flash_attn_varlen_func / flash_attn_with_kvcache against flash_attn's
semantics in float64 (tests/flash_reference.py), on fresh random inputs with outputs poisoned with NaN before
each launch (NaN never passes), and against flash_attn itself where it is installed.

Run on a machine with a CUDA device: `python -m pytest -m gpu tests/test_gpu_compat.py`.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402

from .flash_reference import flash_reference  # noqa: E402
from .gpu_reference import lse_error, relative_error  # noqa: E402

pytestmark = pytest.mark.gpu

#: ‖out − ref‖/‖ref‖ (the variant tier's bounds: score mods add a rounding of their own); LSE max abs error.
TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 2e-2}
GRAD_TOLERANCE = {torch.float16: 8e-3, torch.bfloat16: 3e-2}
LSE_TOLERANCE = 2e-3
#: (batch, seqlen_q, seqlen_k, heads, kv_heads): odd lengths, GQA and MQA, seqlen_q != seqlen_k both ways.
SHAPES = [(2, 333, 333, 4, 2), (1, 129, 700, 4, 1), (1, 700, 129, 2, 2)]
CASES = [
    {}, {"causal": True}, {"window_size": (64, 32)}, {"causal": True, "window_size": (100, 0)},
    {"window_size": (-1, 40)}, {"softcap": 20.0, "causal": True},
    {"alibi": "heads", "causal": True}, {"alibi": "heads"}, {"alibi": "batch_heads", "softcap": 15.0, "causal": True},
]


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")


def randn(*shape: int, dtype: Any, gen: Any) -> Any:
    return torch.randn(*shape, device="cuda", dtype=dtype, generator=gen)


def slopes_for(form: str | None, batch: int, heads: int, gen: Any) -> Any:
    if form is None:
        return None
    shape = (heads,) if form == "heads" else (batch, heads)
    return torch.rand(*shape, device="cuda", generator=gen) * 0.2 + 0.01


def split(case: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    return {k: v for k, v in case.items() if k != "alibi"}, case.get("alibi")


def check(what: str, out: Any, lse: Any, ref_out: Any, ref_lse: Any, dtype: Any) -> None:
    err = relative_error(out, ref_out)
    lerr = lse_error(lse, ref_lse)
    print(f"{what}: out {err:.2e} lse {lerr:.2e}")
    assert err < TOLERANCE[dtype], f"{what}: out error {err:.3e}"
    assert lerr < LSE_TOLERANCE, f"{what}: lse error {lerr:.3e}"


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("dtype", "head_dim"), [(torch.bfloat16, 128), (torch.float16, 64)], ids=str)
def test_flash_attn_func(case: dict[str, Any], shape: tuple[int, ...], dtype: Any, head_dim: int) -> None:
    b, sq, sk, h, kvh = shape
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{case}{shape}{dtype}".encode()))
    q, k, v = randn(b, sq, h, head_dim, dtype=dtype, gen=gen), *(randn(b, sk, kvh, head_dim, dtype=dtype, gen=gen)
                                                                 for _ in range(2))
    kw, form = split(case)
    slopes = slopes_for(form, b, h, gen)
    out, lse, probs = attngen.flash_attn_func(q, k, v, alibi_slopes=slopes, return_attn_probs=True, **kw)
    torch.cuda.synchronize()
    ref_out, ref_lse = flash_reference(q, k, v, alibi=slopes, **kw)
    check(f"{case} {shape} {dtype}", out, lse, ref_out, ref_lse, dtype)
    assert probs is None


@pytest.mark.parametrize("case", [{"causal": True}, {"window_size": (50, 10), "softcap": 10.0},
                                  {"alibi": "heads", "causal": True}], ids=str)
def test_flash_attn_func_gradients(case: dict[str, Any]) -> None:
    b, sq, sk, h, kvh, d, dtype = 2, 200, 260, 4, 2, 128, torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(11)
    q = randn(b, sq, h, d, dtype=dtype, gen=gen).requires_grad_()
    k, v = (randn(b, sk, kvh, d, dtype=dtype, gen=gen).requires_grad_() for _ in range(2))
    dout = randn(b, sq, h, d, dtype=dtype, gen=gen)
    kw, form = split(case)
    slopes = slopes_for(form, b, h, gen)
    grads = torch.autograd.grad(attngen.flash_attn_func(q, k, v, alibi_slopes=slopes, **kw), (q, k, v), dout)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(flash_reference(q64, k64, v64, alibi=slopes, **kw)[0], (q64, k64, v64), dout.double())
    for name, g, r in zip("qkv", grads, ref, strict=True):
        err = relative_error(g, r)
        print(f"{case} d{name}: {err:.2e}")
        assert err < GRAD_TOLERANCE[dtype], f"{case}: d{name} error {err:.3e}"


def test_deterministic_gradients_are_bitwise_reproducible() -> None:
    gen = torch.Generator(device="cuda").manual_seed(12)
    q = randn(2, 300, 8, 128, dtype=torch.bfloat16, gen=gen).requires_grad_()
    k, v = (randn(2, 300, 2, 128, dtype=torch.bfloat16, gen=gen).requires_grad_() for _ in range(2))
    dout = randn(2, 300, 8, 128, dtype=torch.bfloat16, gen=gen)
    runs = [torch.autograd.grad(attngen.flash_attn_func(q, k, v, causal=True, deterministic=True), (q, k, v), dout)
            for _ in range(3)]
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other, strict=True))


# ---- varlen -----------------------------------------------------------------------------------------------

LENS_Q = [0, 17, 300, 1, 129, 64]
LENS_K = [5, 17, 280, 0, 200, 64]


def packed(lens_q: list[int], lens_k: list[int], dtype: Any, gen: Any, h: int = 4, kvh: int = 2,
           d: int = 128) -> tuple[Any, ...]:
    q = randn(sum(lens_q), h, d, dtype=dtype, gen=gen)
    k, v = (randn(sum(lens_k), kvh, d, dtype=dtype, gen=gen) for _ in range(2))
    cu = [torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
          for n in (lens_q, lens_k)]
    return q, k, v, *cu


@pytest.mark.parametrize("case", [{}, {"causal": True}, {"window_size": (30, 0), "causal": True},
                                  {"softcap": 12.0}, {"alibi": "heads", "causal": True}], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_varlen_uneven_lengths(case: dict[str, Any], dtype: Any) -> None:
    gen = torch.Generator(device="cuda").manual_seed(21)
    q, k, v, cu_q, cu_k = packed(LENS_Q, LENS_K, dtype, gen)
    kw, form = split(case)
    slopes = slopes_for(form, len(LENS_Q), 4, gen)
    out, lse, _ = attngen.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(LENS_Q), max(LENS_K), alibi_slopes=slopes,
                                                 return_attn_probs=True, **kw)
    torch.cuda.synchronize()
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    for b in range(len(LENS_Q)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if LENS_Q[b] == 0:
            continue
        ref_out, ref_lse = flash_reference(q[qs][None], k[ks][None], v[ks][None], alibi=slopes, **kw)
        if LENS_K[b] == 0:
            assert torch.equal(out[qs], torch.zeros_like(out[qs])) and torch.isneginf(lse[:, qs]).all()
            continue
        check(f"{case} sequence {b}", out[qs], lse[:, qs], ref_out[0], ref_lse[0], dtype)


@pytest.mark.parametrize(("lens", "d", "deterministic"), [([33, 0, 250, 7], 128, False),
                                                          ([33, 0, 250, 7, 600, 1000], 128, True),
                                                          ([700, 64, 0, 1000, 129, 300], 256, True),
                                                          ([97, 0, 700, 1000, 95, 300], 192, False),
                                                          ([700, 96, 0, 1000, 193, 300], 192, True)])
def test_varlen_gradients(lens: list[int], d: int, deterministic: bool) -> None:
    """Per-sequence gradients against float64; deterministic: bitwise the same over three runs (on sm90 the KV
    blocks of the entries' chains interleave in dispatch order, each chain's ranks still in order)."""
    gen = torch.Generator(device="cuda").manual_seed(22)
    q, k, v, cu_q, cu_k = packed(lens, lens, torch.bfloat16, gen, d=d)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    dout = torch.randn_like(q)

    def run() -> tuple[Any, ...]:
        out = attngen.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens), max(lens), causal=True,
                                             deterministic=deterministic)
        return torch.autograd.grad(out, (q, k, v), dout)

    grads = run()
    if deterministic:
        for _ in range(2):
            assert all(torch.equal(a, b) for a, b in zip(grads, run(), strict=True))
    for b, n in enumerate(lens):
        if n == 0:
            continue
        s = slice(cu_q[b], cu_q[b + 1])
        q64, k64, v64 = (t.detach()[s][None].double().requires_grad_() for t in (q, k, v))
        ref = torch.autograd.grad(flash_reference(q64, k64, v64, causal=True)[0], (q64, k64, v64),
                                  dout[s][None].double())
        for name, g, r in zip("qkv", grads, ref, strict=True):
            err = relative_error(g[s], r[0])
            assert err < GRAD_TOLERANCE[torch.bfloat16], f"sequence {b} d{name} error {err:.3e}"


def test_varlen_paged_equals_contiguous() -> None:
    gen = torch.Generator(device="cuda").manual_seed(23)
    lens, page = [70, 0, 200, 33], 64
    q, k, v, cu_q, cu_k = packed(lens, lens, torch.bfloat16, gen)
    table, pools = _paged_copy([k, v], lens, cu_k, page, gen)
    want = attngen.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 200, 200, causal=True)
    got = attngen.flash_attn_varlen_func(q, *pools, cu_q, cu_k, 200, 200, causal=True, block_table=table)
    assert torch.isfinite(got).all() and torch.equal(got, want)


def _paged_copy(tensors: list[Any], lens: list[int], cu: Any, page: int, gen: Any) -> tuple[Any, list[Any]]:
    """Packed keys copied into shuffled pages of fresh random pools, and the block table that finds them."""
    per_seq = max(-(-n // page) for n in lens)
    blocks = per_seq * len(lens)
    order = torch.randperm(blocks, device="cuda", generator=gen).to(torch.int32)
    table = order.reshape(len(lens), per_seq)
    lengths = torch.tensor(lens, device="cuda")
    seq = torch.repeat_interleave(torch.arange(len(lens), device="cuda"), lengths)
    pos = torch.arange(int(lengths.sum()), device="cuda") - cu.long()[seq]
    pools = []
    for t in tensors:
        pool = randn(blocks, page, *t.shape[1:], dtype=t.dtype, gen=gen)
        pool[table.long()[seq, pos // page], pos % page] = t
        pools.append(pool)
    return table, pools


# ---- KV cache ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", [{"causal": True}, {"causal": True, "window_size": (40, 0)}, {"softcap": 9.0},
                                  {"alibi": "heads", "causal": True}], ids=str)
@pytest.mark.parametrize("seqlen_q", [1, 7])
def test_kvcache_against_the_reference(case: dict[str, Any], seqlen_q: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(31 + seqlen_q)
    b, h, kvh, d, capacity, dtype = 3, 8, 2, 128, 512, torch.bfloat16
    q = randn(b, seqlen_q, h, d, dtype=dtype, gen=gen)
    k_new, v_new = (randn(b, seqlen_q, kvh, d, dtype=dtype, gen=gen) for _ in range(2))
    k_cache, v_cache = (randn(b, capacity, kvh, d, dtype=dtype, gen=gen) for _ in range(2))
    before = k_cache.clone()
    lengths = torch.tensor([0, 100, 480], dtype=torch.int32, device="cuda")
    kw, form = split(case)
    slopes = slopes_for(form, b, h, gen)
    out, lse = attngen.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths,
                                               alibi_slopes=slopes, return_softmax_lse=True, **kw)
    torch.cuda.synchronize()
    for i, n in enumerate(lengths.tolist()):
        assert torch.equal(k_cache[i, n:n + seqlen_q], k_new[i]) and torch.equal(v_cache[i, n:n + seqlen_q], v_new[i])
        assert torch.equal(k_cache[i, :n], before[i, :n]) and torch.equal(k_cache[i, n + seqlen_q:],
                                                                         before[i, n + seqlen_q:])
        keys = slice(0, n + seqlen_q)
        ref_out, ref_lse = flash_reference(q[i:i + 1], k_cache[i:i + 1, keys], v_cache[i:i + 1, keys], alibi=slopes,
                                           **kw)
        check(f"{case} entry {i}", out[i:i + 1], lse[i:i + 1], ref_out, ref_lse, dtype)


@pytest.mark.parametrize("page", [16, 256])
def test_kvcache_paged_equals_contiguous(page: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(41)
    b, h, kvh, d, capacity, dtype = 2, 4, 4, 64, 512, torch.float16
    q = randn(b, 3, h, d, dtype=dtype, gen=gen)
    k_new, v_new = (randn(b, 3, kvh, d, dtype=dtype, gen=gen) for _ in range(2))
    caches = [randn(b, capacity, kvh, d, dtype=dtype, gen=gen) for _ in range(2)]
    cu = torch.tensor([0, capacity, 2 * capacity], dtype=torch.int32, device="cuda")
    table, pools = _paged_copy([c.reshape(-1, kvh, d) for c in caches], [capacity] * b, cu, page, gen)
    lengths = torch.tensor([37, 400], dtype=torch.int32, device="cuda")
    want = attngen.flash_attn_with_kvcache(q, *caches, k_new, v_new, cache_seqlens=lengths, causal=True)
    got = attngen.flash_attn_with_kvcache(q, *pools, k_new, v_new, cache_seqlens=lengths, block_table=table,
                                          causal=True)
    assert torch.isfinite(got).all() and torch.equal(got, want)
    for i, n in enumerate(lengths.tolist()):
        for pos in range(n, n + 3):
            assert torch.equal(pools[0][table[i, pos // page], pos % page], k_new[i, pos - n])


def test_kvcache_int_lengths() -> None:
    gen = torch.Generator(device="cuda").manual_seed(42)
    q = randn(2, 1, 4, 128, dtype=torch.bfloat16, gen=gen)
    k_cache, v_cache = (randn(2, 300, 4, 128, dtype=torch.bfloat16, gen=gen) for _ in range(2))
    out = attngen.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=250, causal=True)
    ref = flash_reference(q, k_cache[:, :250], v_cache[:, :250], causal=True)[0]
    assert relative_error(out, ref) < TOLERANCE[torch.bfloat16]


# ---- flash_attn itself, where installed ----------------------------------------------------------------------

@pytest.mark.parametrize("case", [{"causal": True}, {"window_size": (64, 8)}, {"softcap": 20.0, "causal": True},
                                  {"alibi": "heads", "causal": True}, {"alibi": "batch_heads"}], ids=str)
def test_against_flash_attn(case: dict[str, Any]) -> None:
    flash_attn = pytest.importorskip("flash_attn", reason="flash_attn is not installed on this machine")
    if not hasattr(flash_attn, "flash_attn_func"):   # FlashAttention-4's wheel alone installs flash_attn.cute
        pytest.skip("this flash_attn has no flash_attn_func (FlashAttention-4's CuTe package without FA2's)")
    gen = torch.Generator(device="cuda").manual_seed(51)
    q = randn(2, 257, 8, 128, dtype=torch.bfloat16, gen=gen)
    k, v = (randn(2, 400, 2, 128, dtype=torch.bfloat16, gen=gen) for _ in range(2))
    kw, form = split(case)
    slopes = slopes_for(form, 2, 8, gen)
    ours = attngen.flash_attn_func(q, k, v, alibi_slopes=slopes, return_attn_probs=True, **kw)
    theirs = flash_attn.flash_attn_func(q, k, v, alibi_slopes=slopes, return_attn_probs=True, **kw)
    ref_out, ref_lse = flash_reference(q, k, v, alibi=slopes, **kw)
    assert relative_error(ours[0], ref_out) <= 2 * relative_error(theirs[0], ref_out) + 1e-3
    assert lse_error(ours[1], theirs[1].double()) < LSE_TOLERANCE
