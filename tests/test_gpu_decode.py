"""GPU tests of the split-KV decode kernels (attngen/families/sm80_decode.py): short queries (1 to 16 rows) over
a KV cache, contiguous and paged, every mask, score mod and sink of the variant language, GQA groups packed into
one tile, one split and many, against the float64 reference (attngen.reference.cache).

Run on a machine with a CUDA device: `python -m pytest -m gpu tests/test_gpu_decode.py`.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
from attngen.spec.model import AttentionSpec  # noqa: E402

from .gpu_reference import lse_error, relative_error  # noqa: E402
from .test_gpu_varlen import LSE_TOLERANCE, SPECS, TOLERANCE, _kernel, _runtime  # noqa: E402

pytestmark = pytest.mark.gpu

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")


def _cache(spec: AttentionSpec, batch: int, capacity: int, kv_heads: int, gen: torch.Generator) -> tuple[Any, Any]:
    shape = (batch, capacity, kv_heads, spec.head_dim)
    dtype = _DTYPES[spec.dtype.value]
    return (torch.randn(shape, device="cuda", dtype=dtype, generator=gen),
            torch.randn(shape, device="cuda", dtype=dtype, generator=gen))


def _paged(kc: Any, vc: Any, page: int, gen: torch.Generator) -> tuple[Any, Any, Any]:
    """The cache as a shuffled pool of `page`-row blocks and its block table."""
    batch, capacity, kv_heads, d = kc.shape
    blocks = capacity // page
    table = torch.randperm(batch * blocks, device="cuda", generator=gen).to(torch.int32).view(batch, blocks)
    pool_k = torch.empty(batch * blocks, page, kv_heads, d, device="cuda", dtype=kc.dtype)
    pool_v = torch.empty_like(pool_k)
    pool_k[table.long()] = kc.view(batch, blocks, page, kv_heads, d)
    pool_v[table.long()] = vc.view(batch, blocks, page, kv_heads, d)
    return pool_k, pool_v, table


def _check(spec: AttentionSpec, q: Any, kc: Any, vc: Any, used: Any, out: Any, lse: Any, extra: dict[str, Any]) -> None:
    ref, ref_lse = attngen.reference.cache(spec, q, kc, vc, used, **extra)
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert relative_error(out, torch.from_numpy(ref).cuda()) < TOLERANCE[spec.dtype]
    assert lse_error(lse, torch.from_numpy(ref_lse).cuda()) < LSE_TOLERANCE


@pytest.mark.parametrize("splits", [0, 1, 5])
@pytest.mark.parametrize("seqlen_q", [1, 3, 16])
@pytest.mark.parametrize("config", SPECS, ids=lambda c: c.get("name") or f"{c['mask']}_{c['head_dim']}")
def test_decode_matches_reference(config: dict[str, Any], seqlen_q: int, splits: int) -> None:
    """Entries of no key, one, a partial tile and a long cache; 8 query heads over 2 KV heads (16 x seqlen_q
    packed rows: one block at seqlen_q 1, several at 3 and 16); auto, one and five splits."""
    spec = AttentionSpec(**config)
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(seqlen_q * 10 + splits)
    batch, heads, kv_heads, capacity = 4, 8, 2, 2048
    kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, seqlen_q, heads, spec.head_dim, device="cuda", dtype=kc.dtype, generator=gen)
    used = torch.tensor([seqlen_q - 1 if seqlen_q > 1 else 0, 1 + seqlen_q, 77, capacity - 3], dtype=torch.int32,
                        device="cuda")
    extra = {n: t.detach() for n, t in _runtime(spec, heads, gen).items()}
    out, lse = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, num_splits=splits, return_lse=True,
                                   split_kv=True, **extra)
    _check(spec, q, kc, vc, used, out, lse, extra)


@pytest.mark.parametrize("group", [1, 8])
def test_decode_group_sizes(group: int) -> None:
    """MHA (a block holds 16 query positions of one head) and a group of 8 with 16 queries (128 packed rows,
    eight blocks per KV head)."""
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(group)
    batch, kv_heads, seqlen_q, capacity = 2, 2, 16, 4096
    kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, seqlen_q, kv_heads * group, 128, device="cuda", dtype=kc.dtype, generator=gen)
    used = torch.tensor([4000, 129], dtype=torch.int32, device="cuda")
    out, lse = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, return_lse=True)
    _check(spec, q, kc, vc, used, out, lse, {})


@pytest.mark.parametrize("page", [16, 48, 256])
@pytest.mark.parametrize("config", [SPECS[0], SPECS[3], SPECS[7]], ids=lambda c: c.get("name") or c["mask"])
def test_decode_paged_equals_contiguous(config: dict[str, Any], page: int) -> None:
    """The paged pool is read in place (no gather) and gives the contiguous cache's bits, new keys appended."""
    spec = AttentionSpec(**config)
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(page)
    batch, heads, kv_heads, seqlen_q, capacity = 3, 8, 2, 2, 48 * 64
    kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, seqlen_q, heads, spec.head_dim, device="cuda", dtype=kc.dtype, generator=gen)
    k_new = torch.randn(batch, seqlen_q, kv_heads, spec.head_dim, device="cuda", dtype=kc.dtype, generator=gen)
    v_new = torch.randn_like(k_new)
    used = torch.tensor([5, 1500, capacity - seqlen_q], dtype=torch.int32, device="cuda")
    extra = {n: t.detach() for n, t in _runtime(spec, heads, gen).items()}
    pool_k, pool_v, table = _paged(kc, vc, page, gen)
    paged = kernel.with_kvcache(q, pool_k, pool_v, cache_seqlens=used, k_new=k_new, v_new=v_new, block_table=table,
                                **extra)
    dense, lse = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, k_new=k_new, v_new=v_new, return_lse=True,
                                     **extra)
    assert torch.equal(paged, dense)
    _check(spec, q, kc, vc, used + seqlen_q, dense, lse, extra)


@pytest.mark.parametrize("config", [SPECS[0], SPECS[3]], ids=lambda c: c.get("name") or c["mask"])
def test_calls_that_fill_whole_waves_run_the_waves_tiling(config: dict[str, Any]) -> None:
    """A batch whose blocks fill the stream tiling's slots runs the waves tiling (more blocks per SM): exact
    against float64 over entries of no key, one, a partial tile and a full cache; paged gives the contiguous bits;
    a batch of fewer blocks runs the stream tiling, exact too."""
    from attngen.planning.ir_decode import DecodeRole

    spec = AttentionSpec(**config)
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(11)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    heads, kv_heads, capacity = 8, 4, 1024
    batch = -(-sms // kv_heads) + 2   # more blocks (batch x KV heads) than SMs
    kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, 1, heads, spec.head_dim, device="cuda", dtype=kc.dtype, generator=gen)
    used = torch.randint(1, capacity + 1, (batch,), dtype=torch.int32, device="cuda", generator=gen)
    used[:4] = torch.tensor([0, 1, 77, capacity], dtype=torch.int32)
    extra = {n: t.detach() for n, t in _runtime(spec, heads, gen).items()}
    decode = kernel.decode_kernels()
    if decode.stream_plan(attngen.runtime.kernel.current_arch()).waves_tiling is None:
        pytest.skip("this GPU's budget holds no second decode tiling")
    assert decode.ready(q, kc, vc, None).role is DecodeRole.waves
    assert decode.ready(q[:4], kc[:4], vc[:4], None).role is DecodeRole.stream
    out, lse = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, return_lse=True, split_kv=True, **extra)
    _check(spec, q, kc, vc, used, out, lse, extra)
    pool_k, pool_v, table = _paged(kc, vc, 64, gen)
    assert torch.equal(kernel.with_kvcache(q, pool_k, pool_v, cache_seqlens=used, block_table=table, split_kv=True,
                                           **extra), out)
    few, few_lse = kernel.with_kvcache(q[:4], kc[:4], vc[:4], cache_seqlens=used[:4], return_lse=True,
                                       split_kv=True, **extra)
    _check(spec, q[:4], kc[:4], vc[:4], used[:4], few, few_lse, extra)


def test_decode_arguments_name_the_problem() -> None:
    spec = AttentionSpec(head_dim=64, dtype="fp16", mask="causal")
    kernel = _kernel(spec)
    cache = torch.randn(2, 64, 2, 64, device="cuda", dtype=torch.float16)
    q = torch.randn(2, 17, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="split_kv=True: the decode kernels take at most 16 queries"):
        kernel.with_kvcache(q, cache, cache, cache_seqlens=10, split_kv=True)
    with pytest.raises(ValueError, match="num_splits must be an int from 0"):
        kernel.with_kvcache(q[:, :1], cache, cache, cache_seqlens=10, num_splits=1000)
    with pytest.raises(ValueError, match="num_splits applies to the split-KV decode kernels"):
        kernel.with_kvcache(q, cache, cache, cache_seqlens=10, num_splits=2)
    # The forward kernels and the decode kernels agree on one call.
    one = q[:, :4].contiguous()
    fwd = kernel.with_kvcache(one, cache, cache, cache_seqlens=40, split_kv=False)
    dec = kernel.with_kvcache(one, cache, cache, cache_seqlens=40, split_kv=True, num_splits=3)
    assert relative_error(dec, fwd) < 4e-3


@pytest.mark.parametrize("page", [0, 64])
def test_repeated_shapes_run_the_remembered_call_and_stay_checked(page: int) -> None:
    """A decode loop's later calls of one shape skip the shape checks (runtime.kvcache remembers the first):
    fresh caches, queries and lengths still give the reference's results, lengths or table entries out of range
    still raise (on the host under ATTNGEN_HOST_CHECKS=1; tests/test_gpu_decode_checks.py has the kernels'
    own checks), and a misaligned view of the same shape is copied, not read in place."""
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(1000 + page)
    batch, heads, kv_heads, capacity = 3, 16, 2, 1024
    remembered = len(kernel.decode_calls)
    for step in range(3):
        kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
        q = torch.randn(batch, 1, heads, 128, device="cuda", dtype=kc.dtype, generator=gen)
        used = torch.randint(1, capacity + 1, (batch,), device="cuda", generator=gen, dtype=torch.int32)
        k_in, v_in, table = _paged(kc, vc, page, gen) if page else (kc, vc, None)
        out, lse = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table, return_lse=True)
        _check(spec, q, kc, vc, used, out, lse, {})
        assert len(kernel.decode_calls) == remembered + 1, f"step {step}: one remembered call for one shape"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("ATTNGEN_HOST_CHECKS", "1")
        with pytest.raises(ValueError, match="cache_seqlens"):
            kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used + capacity, block_table=table)
        if table is not None:
            with pytest.raises(ValueError, match="block_table's entries must index"):
                kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table + k_in.shape[0])
    # The same shape and strides 8 bytes off a 16-byte boundary.
    storage = torch.empty(q.numel() + 4, device="cuda", dtype=q.dtype)
    shifted = storage.as_strided(q.shape, q.stride(), storage_offset=4).copy_(q)
    assert shifted.data_ptr() % 16 == 8
    out, lse = kernel.with_kvcache(shifted, k_in, v_in, cache_seqlens=used, block_table=table, return_lse=True)
    _check(spec, q, kc, vc, used, out, lse, {})


@pytest.mark.parametrize("splits", [17, 40, 128])
@pytest.mark.parametrize("config", [SPECS[0], SPECS[3], SPECS[4]], ids=lambda c: c.get("name") or c["mask"])
def test_many_splits_merge_right(config: dict[str, Any], splits: int) -> None:
    """The combine past the splits whose partials it loads with the LSE (8 at hd256, 16 below) and past 32
    splits (a lane's second LSE), with a sink, hd64 (half the lanes hold no columns) and hd256 (two column
    passes); entries with fewer tiles than splits leave splits empty."""
    spec = AttentionSpec(**config)
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(splits)
    batch, heads, kv_heads, capacity = 2, 8, 2, 16384
    kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, 2, heads, spec.head_dim, device="cuda", dtype=kc.dtype, generator=gen)
    used = torch.tensor([capacity - 5, 700], dtype=torch.int32, device="cuda")
    extra = {n: t.detach() for n, t in _runtime(spec, heads, gen).items()}
    out, lse = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, num_splits=splits, return_lse=True, **extra)
    _check(spec, q, kc, vc, used, out, lse, extra)


@pytest.mark.parametrize("splits", [0, 3, 8])
@pytest.mark.parametrize("config", [SPECS[0], SPECS[1], SPECS[3]], ids=lambda c: c.get("name") or c["mask"])
def test_decode_ignores_table_entries_past_each_length(config: dict[str, Any], splits: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A paged block may look its first tiles' table entries up before it reads its entry's length (the causal
    and unmasked walks start at tile 0); entries past an entry's last page then hold anything (here -1 and
    2^31 - 1, unchecked: ATTNGEN_TRUST_SEQLENS) and the output is the well-formed table's, bit for bit."""
    monkeypatch.setenv("ATTNGEN_TRUST_SEQLENS", "1")
    spec = AttentionSpec(**config)
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(splits + 100)
    batch, heads, kv_heads, page, capacity = 4, 8, 2, 16, 4096
    kc, vc = _cache(spec, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, 1, heads, spec.head_dim, device="cuda", dtype=kc.dtype, generator=gen)
    used = torch.tensor([0, 5, 300, capacity - 1], dtype=torch.int32, device="cuda")
    extra = {n: t.detach() for n, t in _runtime(spec, heads, gen).items()}
    pool_k, pool_v, table = _paged(kc, vc, page, gen)
    ragged = table.clone()
    for b, n in enumerate(used.tolist()):
        ragged[b, (n + page - 1) // page:] = -1 if b % 2 else 2**31 - 1
    calls = [kernel.with_kvcache(q, pool_k, pool_v, cache_seqlens=used, block_table=t, num_splits=splits,
                                 return_lse=True, **extra) for t in (table, ragged)]
    assert torch.equal(calls[0][0], calls[1][0]) and torch.equal(calls[0][1], calls[1][1])
    _check(spec, q, kc, vc, used, calls[1][0], calls[1][1], extra)
