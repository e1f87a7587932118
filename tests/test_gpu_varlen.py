"""GPU tests of per-entry lengths: packed (varlen) sequences forward and backward, and attention over a KV cache
(contiguous and paged, with new keys appended), against the float64 reference sequence by sequence
(attngen.reference.varlen / .varlen_grads / .cache).

Run on a machine with a CUDA device: `python -m pytest -m gpu tests/test_gpu_varlen.py`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
import attngen.runtime.kernel  # noqa: E402
from attngen.features.variant import variant_of  # noqa: E402
from attngen.spec.model import AttentionSpec, DType  # noqa: E402

from .gpu_reference import lse_error, relative_error  # noqa: E402

pytestmark = pytest.mark.gpu

TOLERANCE = {DType.fp16: 4e-3, DType.bf16: 2e-2}
GRAD_TOLERANCE = {DType.fp16: 8e-3, DType.bf16: 3e-2}
LSE_TOLERANCE = 2e-3
#: Query and key lengths per sequence: an empty query, an empty key set, one row, odd lengths, sq > sk and sq < sk.
LENGTHS_Q = [0, 17, 1, 300, 129, 700, 5]
LENGTHS_K = [9, 0, 40, 300, 400, 129, 5]

SPECS = [
    {"head_dim": 128, "dtype": "bf16", "mask": "causal"},
    {"head_dim": 64, "dtype": "fp16", "mask": "none"},
    {"head_dim": 128, "dtype": "fp16", "mask": "sliding_window", "window": [64, 0]},
    {"head_dim": 64, "dtype": "bf16", "mask": "sliding_window", "window": [128, 0], "sinks": "learnable"},
    {"head_dim": 256, "dtype": "bf16", "mask": "causal", "score_mod": {"softcap": 50.0}},
    {"head_dim": 256, "dtype": "bf16", "mask": "causal"},
    {"head_dim": 128, "dtype": "bf16", "mask": {"kind": "chunked", "chunk": 128}, "score_mod": {"alibi": "runtime"}},
    {"head_dim": 96, "dtype": "fp16", "mask": "causal"},
    {"head_dim": 192, "dtype": "bf16", "mask": "sliding_window", "window": [200, 0]},
    {"head_dim": 128, "dtype": "bf16", "name": "streaming_holes",
     "mask": {"expr": "kv_idx <= q_idx + sk - sq and (q_idx + sk - sq - kv_idx <= 64 or kv_idx < 4)"}},
]
_KERNELS: dict[str, attngen.AttentionKernel] = {}


@pytest.fixture(autouse=True)
def _poison(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_POISON", "1")


def _spec(config: dict[str, Any], pipeline: str) -> AttentionSpec | None:
    spec = AttentionSpec(**config)
    arch = attngen.runtime.kernel.current_arch()
    if pipeline == "warp_specialized" and (arch.value != "sm90" or spec.head_dim % 64):
        return None
    if pipeline == "auto":
        return spec
    return AttentionSpec(**{**config, "name": f"{spec.name}_{pipeline}", "pipeline": pipeline})


def _kernel(spec: AttentionSpec) -> attngen.AttentionKernel:
    if spec.name not in _KERNELS:
        _KERNELS[spec.name] = attngen.compile(spec)
    return _KERNELS[spec.name]


def _cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device="cuda")


def _runtime(spec: AttentionSpec, heads: int, gen: torch.Generator) -> dict[str, Any]:
    """The spec's runtime tensors: sinks (with a gradient) and ALiBi slopes."""
    args: dict[str, Any] = {}
    for arg in variant_of(spec).arguments():
        if arg.computed:
            continue
        if arg.name == "sinks":
            args["sinks"] = torch.randn(heads, device="cuda", generator=gen).requires_grad_()
        elif arg.name == "alibi_slopes":
            args["alibi_slopes"] = torch.rand(heads, device="cuda", generator=gen) * 0.1
        else:
            raise AssertionError(f"no inputs for {arg.name}")
    return args


@pytest.mark.parametrize("pipeline", ["auto", "multistage", "warp_specialized"])
@pytest.mark.parametrize("config", SPECS, ids=lambda c: c.get("name") or f"{c['mask']}_{c['head_dim']}")
def test_packed_forward_and_backward(config: dict[str, Any], pipeline: str) -> None:
    spec = _spec(config, pipeline)
    if spec is None:
        pytest.skip("the warp-specialized pipeline runs on sm90 with head_dim a multiple of 64")
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(7)
    dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[spec.dtype.value])
    heads, kv_heads, d = 4, 2, spec.head_dim
    cu_q, cu_k = _cu(LENGTHS_Q), _cu(LENGTHS_K)
    q = torch.randn(sum(LENGTHS_Q), heads, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    k = torch.randn(sum(LENGTHS_K), kv_heads, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    v = torch.randn(sum(LENGTHS_K), kv_heads, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    extra = _runtime(spec, heads, gen)
    out, lse = kernel(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(LENGTHS_Q),
                      max_seqlen_k=max(LENGTHS_K), return_lse=True, **extra)
    plain = {n: t.detach() for n, t in extra.items()}
    ref_out, ref_lse = attngen.reference.varlen(spec, q, k, v, cu_q, cu_k, **plain)
    assert out.shape == q.shape and lse.shape == (heads, q.shape[0])
    assert relative_error(out, torch.from_numpy(ref_out).cuda()) < TOLERANCE[spec.dtype]
    assert lse_error(lse, torch.from_numpy(ref_lse).cuda()) < LSE_TOLERANCE
    dout = torch.randn_like(out)
    out.backward(dout)
    ref = attngen.reference.varlen_grads(spec, q, k, v, dout, cu_q, cu_k, **plain)
    for name, t in (("dq", q), ("dk", k), ("dv", v)):
        err = relative_error(t.grad, torch.from_numpy(ref[name]).cuda())
        assert err < GRAD_TOLERANCE[spec.dtype], f"{name}: {err}"
    if "sinks" in extra:
        err = relative_error(extra["sinks"].grad, torch.from_numpy(ref["dsinks"]).cuda())
        assert err < GRAD_TOLERANCE[spec.dtype], f"dsinks: {err}"


def test_packed_equals_dense_when_lengths_are_equal() -> None:
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(3, 257, 4, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    dense, dense_lse = kernel(q, k, v, return_lse=True)
    cu = torch.arange(0, 4 * 257, 257, dtype=torch.int32, device="cuda")
    packed, packed_lse = kernel(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_seqlens_q=cu, cu_seqlens_k=cu,
                                max_seqlen_q=257, max_seqlen_k=257, return_lse=True)
    assert torch.equal(packed.view_as(dense), dense)
    assert torch.equal(packed_lse.view(4, 3, 257).transpose(0, 1), dense_lse)


@pytest.mark.parametrize("seqlen_q", [1, 5, 16])
@pytest.mark.parametrize("config", [SPECS[0], SPECS[3], SPECS[4]], ids=lambda c: f"{c['mask']}_{c['head_dim']}")
def test_kvcache_contiguous_and_paged(config: dict[str, Any], seqlen_q: int) -> None:
    spec = AttentionSpec(**config)
    kernel = _kernel(spec)
    gen = torch.Generator(device="cuda").manual_seed(11)
    dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[spec.dtype.value])
    batch, heads, kv_heads, d, capacity = 3, 8, 2, spec.head_dim, 1024
    used = torch.tensor([0, 333, 1000 - seqlen_q], dtype=torch.int32, device="cuda")
    k_cache = torch.randn(batch, capacity, kv_heads, d, device="cuda", dtype=dtype, generator=gen)
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(batch, seqlen_q, heads, d, device="cuda", dtype=dtype, generator=gen)
    k_new = torch.randn(batch, seqlen_q, kv_heads, d, device="cuda", dtype=dtype, generator=gen)
    v_new = torch.randn_like(k_new)
    extra = {n: t.detach() for n, t in _runtime(spec, heads, gen).items()}
    results = {}
    for page in (0, 16, 64, 256):
        kc, vc = k_cache.clone(), v_cache.clone()
        if page:
            blocks = capacity // page
            perm = torch.randperm(batch * blocks, device="cuda", generator=gen).to(torch.int32)
            table = perm.view(batch, blocks)
            pool_k = torch.empty(batch * blocks, page, kv_heads, d, device="cuda", dtype=dtype)
            pool_v = torch.empty_like(pool_k)
            pool_k[table.long()] = kc.view(batch, blocks, page, kv_heads, d)
            pool_v[table.long()] = vc.view(batch, blocks, page, kv_heads, d)
            out = kernel.with_kvcache(q, pool_k, pool_v, cache_seqlens=used, k_new=k_new, v_new=v_new,
                                      block_table=table, **extra)
            kc = pool_k[table.long()].reshape(batch, capacity, kv_heads, d)
            vc = pool_v[table.long()].reshape(batch, capacity, kv_heads, d)
        else:
            out = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, k_new=k_new, v_new=v_new, **extra)
        for b in range(batch):
            n = int(used[b])
            assert torch.equal(kc[b, n:n + seqlen_q], k_new[b]) and torch.equal(vc[b, n:n + seqlen_q], v_new[b])
        ref, _ = attngen.reference.cache(spec, q, kc, vc, used + seqlen_q, **extra)
        assert relative_error(out, torch.from_numpy(ref).cuda()) < TOLERANCE[spec.dtype]
        results[page] = out
    for page in (16, 64, 256):
        assert torch.equal(results[page], results[0]), f"page {page} differs from the contiguous cache"


def test_bad_packed_arguments_name_the_argument() -> None:
    kernel = _kernel(AttentionSpec(head_dim=64, dtype="fp16", mask="causal"))
    q = torch.randn(10, 2, 64, device="cuda", dtype=torch.float16)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="max_seqlen_q is 3"):
        kernel(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=3, max_seqlen_k=6)
    with pytest.raises(ValueError, match="cu_seqlens_k must end at the 10 rows"):
        kernel(q, q, q, cu_seqlens_q=cu, cu_seqlens_k=torch.tensor([0, 4, 9], dtype=torch.int32, device="cuda"),
               max_seqlen_q=6, max_seqlen_k=6)
    with pytest.raises(ValueError, match="cu_seqlens_q must be a 1-D int32"):
        kernel(q, q, q, cu_seqlens_q=cu.long(), cu_seqlens_k=cu, max_seqlen_q=6, max_seqlen_k=6)
    with pytest.raises(ValueError, match="3 dims"):
        kernel(q[None], q[None], q[None], cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=6, max_seqlen_k=6)
    cache = torch.randn(2, 32, 2, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"cache_seqlens \(plus the new keys\) must lie in \[0, 32\]"):
        kernel.with_kvcache(q.view(2, 5, 2, 64), cache, cache, cache_seqlens=40)
    assert math.isfinite(float(kernel(q.view(2, 5, 2, 64), q.view(2, 5, 2, 64), q.view(2, 5, 2, 64)).sum()))
