"""Per-entry lengths on the CPU: the spec's seqlens field and its varlen twin, the parameter block's SeqLens
fields, the packed and cache argument checks, the KV cache's append and gather, and the packed float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attngen  # noqa: E402
from attngen.catalogue import load_catalogue  # noqa: E402
from attngen.codegen.abi import FWD_PARAMS, HOPPER_BWD_PARAMS, ctypes_struct, set_strides  # noqa: E402
from attngen.codegen.renderer import render  # noqa: E402
from attngen.planning.planner import plan  # noqa: E402
from attngen.runtime import kvcache  # noqa: E402
from attngen.runtime.seqlens import Seqlens, check_packed, check_used_keys  # noqa: E402
from attngen.spec.model import AttentionSpec, SeqlensKind  # noqa: E402


def _spec(**extra: object) -> AttentionSpec:
    return AttentionSpec(**{"name": "c", "head_dim": 64, "dtype": "bf16", "mask": "causal", **extra})


def test_varlen_twin_is_its_own_kernel() -> None:
    fixed = _spec()
    twin = fixed.with_seqlens(SeqlensKind.varlen)
    assert twin.seqlens is SeqlensKind.varlen and twin.name == "c_varlen"
    assert twin.spec_hash() != fixed.spec_hash() and twin.with_seqlens(SeqlensKind.fixed) == fixed
    for arch in ("sm80", "sm90"):
        fixed_code, twin_code = (render(plan(s, arch)).code for s in (fixed, twin))
        assert "constexpr bool kVarlen = false;" in fixed_code and "constexpr bool kVarlen = true;" in twin_code
        assert plan(twin, arch).kernel_name.endswith("_varlen")


def test_spec_field_is_validated() -> None:
    assert _spec(seqlens="varlen").seqlens is SeqlensKind.varlen
    with pytest.raises(attngen.SpecError, match="seqlens"):
        _spec(seqlens="ragged")


def _block(fields: tuple) -> object:  # type: ignore[type-arg]
    return ctypes_struct(fields)()


def test_dense_fill_keeps_batch_strides_and_sets_the_lse_layout() -> None:
    q = torch.empty(3, 10, 4, 64)
    k = torch.empty(3, 12, 2, 64)
    params = _block(FWD_PARAMS)
    set_strides(params, q=q, k=k, v=k, o=q)
    info = Seqlens.dense(q, k)
    info.fill(params)
    assert (params.q_batch_stride, params.k_batch_stride) == (q.stride(0), k.stride(0))
    assert (params.lse_batch_stride, params.lse_head_stride) == (4 * 10, 10)
    assert (params.seqlen_q, params.seqlen_k) == (10, 12)
    assert not params.cu_seqlens_q and not params.seqused_k
    assert info.lse_shape() == (3, 4, 10) and info.grid(4) == (3, 4, 3)


def test_packed_fill_zeroes_batch_strides_and_uses_flash_attn_lse_layout() -> None:
    q = torch.empty(45, 4, 64)
    k = torch.empty(70, 2, 64)
    cu_q = torch.tensor([0, 20, 45], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 70], dtype=torch.int32)
    info = Seqlens.packed(q, cu_q, cu_k, 25, 40)
    params = _block(HOPPER_BWD_PARAMS)
    set_strides(params, q=info.entries(q), k=info.entries(k), v=info.entries(k), o=info.entries(q),
                dout=info.entries(q), dq=info.entries(q), dk=info.entries(k), dv=info.entries(k))
    info.fill(params)
    for t in ("q", "k", "v", "o", "dout", "dq", "dk", "dv"):
        assert getattr(params, f"{t}_batch_stride") == 0, t
    assert params.q_row_stride == 4 * 64 and params.k_row_stride == 2 * 64
    assert (params.lse_batch_stride, params.lse_head_stride) == (0, 45)
    assert params.cu_seqlens_q == cu_q.data_ptr() and params.cu_seqlens_k == cu_k.data_ptr()
    assert (params.seqlen_q, params.seqlen_k) == (25, 40)
    assert info.lse_shape() == (4, 45) and info.grid(16) == (2, 4, 2) and info.batch == 2
    assert info.sizes(2) == {"batch": 2, "heads": 4, "kv_heads": 2, "seqlen_q": 25, "seqlen_k": 40}
    # Entry 1 (25 x 40) is more work than entry 0 (20 x 30): the grid visits it first.
    assert info.batch_order.tolist() == [1, 0] and params.batch_order == info.batch_order.data_ptr()


def test_packed_entries_are_visited_longest_first_and_dense_ones_in_order() -> None:
    q = torch.empty(60, 4, 64)
    cu_q = torch.tensor([0, 5, 5, 45, 47, 60], dtype=torch.int32)    # lengths 5, 0, 40, 2, 13
    cu_k = torch.tensor([0, 9, 10, 50, 52, 70], dtype=torch.int32)   # lengths 9, 1, 40, 2, 18
    order = Seqlens.packed(q, cu_q, cu_k, 40, 40).batch_order
    assert order.dtype == torch.int32 and order.tolist() == [2, 4, 0, 3, 1]
    one = Seqlens.packed(q, cu_q[:2], cu_k[:2], 5, 9)
    assert one.batch_order is None
    dense = Seqlens.dense(torch.empty(3, 10, 4, 64), torch.empty(3, 12, 2, 64))
    params = _block(FWD_PARAMS)
    dense.fill(params)
    assert dense.batch_order is None and not params.batch_order


def load_catalogue_spec(name: str) -> AttentionSpec:
    return next(s for s in load_catalogue() if s.name == name)


def test_entry_indexed_tensors_keep_the_grid_order() -> None:
    """A variant tensor indexed by the batch entry keeps the entry in a register; those kernels do not reorder."""
    twin = _spec().with_seqlens(SeqlensKind.varlen)
    doc_twin = load_catalogue_spec("document_bf16_hd128").with_seqlens(SeqlensKind.varlen)
    assert "constexpr bool kOrderEntries = kVarlen && !false;" in render(plan(twin, "sm80")).code
    assert "constexpr bool kOrderEntries = kVarlen && !true;" in render(plan(doc_twin, "sm80")).code


@pytest.mark.parametrize("cu_q, cu_k, max_q, max_k, needle", [
    ([0, 4, 10], [0, 4, 10], 3, 6, "max_seqlen_q is 3 but a sequence has 6 rows"),
    ([0, 4, 10], [0, 5, 9], 6, 6, "cu_seqlens_k must end at the 10 rows"),
    ([1, 4, 10], [0, 4, 10], 6, 6, "cu_seqlens_q must start at 0"),
    ([0, 7, 4, 10], [0, 1, 2, 10], 9, 9, "never decrease"),
    ([0, 4, 10], [0, 4, 10], -1, 6, "max_seqlen_q must be a non-negative int"),
    ([0, 4, 10], [0, 10], 6, 6, "cu_seqlens_k must have 3 entries"),
])
def test_packed_arguments_are_checked(cu_q: list[int], cu_k: list[int], max_q: int, max_k: int, needle: str) -> None:
    q = torch.empty(10, 2, 64)
    with pytest.raises(ValueError, match=needle):
        check_packed(q, q, torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32), max_q, max_k,
                     check_values=True)


def test_packed_dtype_and_pairing_are_checked_without_values() -> None:
    q = torch.empty(10, 2, 64)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    with pytest.raises(ValueError, match="1-D int32"):
        check_packed(q, q, cu.long(), cu, 6, 6, check_values=False)
    with pytest.raises(ValueError, match="both cu_seqlens_q and cu_seqlens_k"):
        check_packed(q, q, cu, None, 6, 6, check_values=False)
    check_packed(q, q, cu, cu, 0, 0, check_values=False)  # the values are trusted


def test_cache_lengths_are_checked() -> None:
    with pytest.raises(ValueError, match=r"must lie in \[0, 32\]"):
        check_used_keys(torch.tensor([3, 40], dtype=torch.int32), 2, 32, torch.device("cpu"), True)
    with pytest.raises(ValueError, match="cache_seqlens must have 2 entries"):
        check_used_keys(torch.tensor([3], dtype=torch.int32), 2, 32, torch.device("cpu"), True)


def test_cache_shapes_are_checked() -> None:
    q = torch.empty(2, 1, 8, 64)
    pool = torch.empty(10, 24, 2, 64)
    table = torch.zeros(2, 3, dtype=torch.int32)
    with pytest.raises(ValueError, match="page_size .* must be a multiple of 16 from 16 to 256, got 24"):
        kvcache._check_cache(q, pool, pool, table)
    with pytest.raises(ValueError, match="block_table must be an int32 tensor"):
        kvcache._check_cache(q, torch.empty(10, 32, 2, 64), torch.empty(10, 32, 2, 64), table.long())
    with pytest.raises(ValueError, match="one entry per batch entry"):
        kvcache._check_cache(q, torch.empty(3, 32, 2, 64), torch.empty(3, 32, 2, 64), None)
    assert kvcache._check_cache(q, torch.empty(10, 32, 2, 64), torch.empty(10, 32, 2, 64), table) == \
        kvcache.CacheShape(capacity=96, page_size=32)


@pytest.mark.parametrize("page", [0, 16])
def test_append_writes_each_entry_at_its_length_and_gather_reads_the_table(page: int) -> None:
    gen = torch.Generator().manual_seed(0)
    batch, capacity, kvh, d = 2, 64, 2, 8
    lengths = torch.tensor([5, 30], dtype=torch.int32)
    k_new = torch.randn(batch, 3, kvh, d, generator=gen)
    dense_k = torch.randn(batch, capacity, kvh, d, generator=gen)
    if page:
        blocks = capacity // page
        table = torch.randperm(batch * blocks, generator=gen).to(torch.int32).view(batch, blocks)
        pool = torch.empty(batch * blocks, page, kvh, d)
        pool[table.long()] = dense_k.view(batch, blocks, page, kvh, d)
        shape = kvcache.CacheShape(capacity=capacity, page_size=page)
    else:
        table, pool, shape = None, dense_k.clone(), kvcache.CacheShape(capacity=capacity)
    pool_v = pool.clone()
    kvcache._append(pool, pool_v, k_new, k_new, lengths, table, shape)
    seen = kvcache._gather(pool, table, shape)
    want = dense_k.clone()
    for b in range(batch):
        want[b, int(lengths[b]):int(lengths[b]) + 3] = k_new[b]
    assert torch.equal(seen, want)


def test_packed_reference_is_the_dense_one_per_sequence() -> None:
    spec = _spec(sinks="learnable")
    rng = np.random.default_rng(1)
    cu_q, cu_k = [0, 0, 5, 12, 12], [0, 3, 3, 20, 25]
    q, k, v = rng.standard_normal((12, 4, 64)), rng.standard_normal((25, 2, 64)), rng.standard_normal((25, 2, 64))
    sinks = rng.standard_normal(4)
    out, lse = attngen.reference.varlen(spec, q, k, v, cu_q, cu_k, sinks=sinks)
    assert out.shape == q.shape and lse.shape == (4, 12)
    o2, l2 = attngen.reference(spec, q[None, 5:12], k[None, 3:20], v[None, 3:20], sinks=sinks)
    np.testing.assert_allclose(out[5:12], o2[0])
    np.testing.assert_allclose(lse[:, 5:12], l2[0])
    # Entry 1 (5 queries, no keys): output 0, the LSE is the sink's alone.
    assert not out[0:5].any()
    np.testing.assert_allclose(lse[:, 0:5], np.broadcast_to(sinks[:, None], (4, 5)))
    dout = rng.standard_normal(q.shape)
    g = attngen.reference.varlen_grads(spec, q, k, v, dout, cu_q, cu_k, sinks=sinks)
    g2 = attngen.reference.grads(spec, q[None, 5:12], k[None, 3:20], v[None, 3:20], dout[None, 5:12], sinks=sinks)
    np.testing.assert_allclose(g["dk"][3:20], g2["dk"][0])
    assert not g["dk"][20:].any() and g["dsinks"].shape == (4,)


def test_packed_reference_slices_batch_tensors_per_entry() -> None:
    spec = AttentionSpec(name="doc", head_dim=64, dtype="bf16",
                         mask={"expr": "doc[b, q_idx] == doc[b, kv_idx]",
                               "tensors": {"doc": {"dtype": "int32", "shape": ["batch", "seqlen_q"]}}})
    rng = np.random.default_rng(2)
    cu = [0, 6, 10]
    q, k, v = (rng.standard_normal((10, 2, 64)) for _ in range(3))
    doc = np.array([[0, 0, 1, 1, 1, 2], [5, 5, 6, 6, 0, 0]])
    out, _ = attngen.reference.varlen(spec, q, k, v, cu, cu, doc=doc)
    o1, _ = attngen.reference(spec, q[None, 6:], k[None, 6:], v[None, 6:], doc=doc[1:2, :4])
    np.testing.assert_allclose(out[6:], o1[0])


def test_cache_reference_uses_each_entrys_keys() -> None:
    spec = _spec()
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 4, 64))
    kc, vc = rng.standard_normal((2, 40, 2, 64)), rng.standard_normal((2, 40, 2, 64))
    out, lse = attngen.reference.cache(spec, q, kc, vc, [7, 33])
    o1, l1 = attngen.reference(spec, q[1:], kc[1:, :33], vc[1:, :33])
    np.testing.assert_allclose(out[1], o1[0])
    np.testing.assert_allclose(lse[1], l1[0])
