"""GPU tests of the decode kernels' own checks (runtime.device_checks, DecodeCheck in decode_mainloop.cuh.j2):
lengths outside the cache's rows and table entries outside the pool are never read past the cache, the entries
that hold them come out NaN while the others keep their values, the next call (or check_device_errors) raises
DeviceCheckError naming the argument, and a default decode call, first or remembered, never waits for the GPU.

Run on a machine with a CUDA device: `python -m pytest -m gpu tests/test_gpu_decode_checks.py`.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the GPU tests run on a machine with one", allow_module_level=True)

import attngen  # noqa: E402
from attngen.spec.model import AttentionSpec  # noqa: E402

from .test_gpu_decode import _cache, _check, _paged  # noqa: E402
from .test_gpu_varlen import _kernel  # noqa: E402

pytestmark = pytest.mark.gpu

#: A kernel of its own (its own remembered calls: test_gpu_decode counts the ones of the unnamed spec's kernel).
_SPEC = AttentionSpec(name="decode_checks", head_dim=128, dtype="bf16", mask="causal")


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Poisoned outputs, no host checks, and no count left over from another test."""
    monkeypatch.setenv("ATTNGEN_POISON", "1")
    monkeypatch.delenv("ATTNGEN_HOST_CHECKS", raising=False)
    monkeypatch.delenv("ATTNGEN_TRUST_SEQLENS", raising=False)
    _drain()
    yield
    _drain()


def _drain() -> None:
    with contextlib.suppress(attngen.DeviceCheckError):
        attngen.check_device_errors()


def _setup(page: int, seed: int) -> tuple[Any, ...]:
    kernel = _kernel(_SPEC)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    batch, heads, kv_heads, capacity = 3, 16, 2, 1024
    kc, vc = _cache(_SPEC, batch, capacity, kv_heads, gen)
    q = torch.randn(batch, 1, heads, 128, device="cuda", dtype=kc.dtype, generator=gen)
    used = torch.tensor([700, 5, capacity], dtype=torch.int32, device="cuda")
    k_in, v_in, table = _paged(kc, vc, page, gen) if page else (kc, vc, None)
    return kernel, q, kc, vc, used, k_in, v_in, table


def _good_rows_match(q: Any, kc: Any, vc: Any, used: Any, out: Any, lse: Any, bad: int) -> None:
    """Entry `bad` is NaN in every output and LSE element; the others match the reference."""
    assert torch.isnan(out[bad]).all() and torch.isnan(lse[bad]).all()
    keep = [b for b in range(q.shape[0]) if b != bad]
    _check(_SPEC, q[keep], kc[keep], vc[keep], used[keep], out[keep], lse[keep], {})


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("value", [1025, -3, 2**31 - 1])
@pytest.mark.parametrize("page", [0, 16, 256])
def test_bad_length_is_nan_and_reported(page: int, value: int, splits: int) -> None:
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(page, 10 + page)
    bad = used.clone()
    bad[1] = value
    for _ in range(2):   # the first call and the remembered one
        out, lse = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=bad, block_table=table, num_splits=splits,
                                       return_lse=True)
        torch.cuda.synchronize()
        _good_rows_match(q, kc, vc, used, out, lse, bad=1)
        with pytest.raises(attngen.DeviceCheckError, match=r"cache_seqlens: a length outside \[0, the cache's rows\]"):
            kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table, num_splits=splits)
    # Reported once: the good call after the report runs and raises nothing.
    out, lse = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table, num_splits=splits,
                                   return_lse=True)
    attngen.check_device_errors()
    _check(_SPEC, q, kc, vc, used, out, lse, {})


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize("value", [-1, 2**31 - 1, "pool"])
@pytest.mark.parametrize("page", [16, 256])
def test_bad_table_entry_is_nan_and_reported(page: int, value: Any, splits: int) -> None:
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(page, 20 + page)
    bad_table = table.clone()
    bad_table[2, 1] = k_in.shape[0] if value == "pool" else value   # a used page of entry 2 (capacity keys)
    out, lse = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=bad_table, num_splits=splits,
                                   return_lse=True)
    with pytest.raises(attngen.DeviceCheckError, match=r"block_table: an entry of a used page outside"):
        attngen.check_device_errors()
    _good_rows_match(q, kc, vc, used, out, lse, bad=2)


def test_entries_past_the_length_are_not_checked() -> None:
    """A table row's entries past its entry's length may hold anything (flash_attn's tables do): no report."""
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(16, 30)
    ragged = table.clone()
    ragged[1, 1:] = -1   # entry 1 uses 5 keys: its first page only
    out, lse = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=ragged, return_lse=True)
    attngen.check_device_errors()
    _check(_SPEC, q, kc, vc, used, out, lse, {})


@pytest.mark.parametrize("page", [0, 64])
def test_default_decode_calls_never_wait_for_the_gpu(page: int) -> None:
    """With the kernels checking the values, neither the first call of a shape nor a remembered one syncs."""
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(page, 40 + page)
    kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table)   # compiled and loaded here
    kernel.decode_calls.clear()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            out = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    lse = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table, return_lse=True)[1]
    _check(_SPEC, q, kc, vc, used, out, lse, {})


def test_host_checks_raise_at_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNGEN_HOST_CHECKS", "1")
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(16, 50)
    with pytest.raises(ValueError, match=r"cache_seqlens \(plus the new keys\) must lie in \[0, 1024\]"):
        kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used + 1, block_table=table)
    with pytest.raises(ValueError, match="block_table's entries must index the pool's"):
        kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, block_table=table - 1)


def test_int_lengths_are_checked_at_the_call() -> None:
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(0, 60)
    with pytest.raises(ValueError, match=r"must lie in \[0, 1024\] \(the cache's rows\), got 1025 \+ 0"):
        kernel.with_kvcache(q, k_in, v_in, cache_seqlens=1025)


def test_appends_check_lengths_on_the_host() -> None:
    """k_new is written by the host's indexing: its positions are checked before it runs (one sync)."""
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(0, 70)
    new = torch.randn(3, 1, 2, 128, device="cuda", dtype=kc.dtype)
    with pytest.raises(ValueError, match=r"cache_seqlens \(plus the new keys\) must lie in \[0, 1024\]"):
        kernel.with_kvcache(q, k_in, v_in, cache_seqlens=used, k_new=new, v_new=new)


def test_graph_replays_report_too() -> None:
    """A captured call reads the lengths at each replay: a bad one is counted like an eager call's."""
    kernel, q, kc, vc, used, k_in, v_in, table = _setup(16, 80)
    lengths = used.clone()
    kernel.with_kvcache(q, k_in, v_in, cache_seqlens=lengths, block_table=table)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = kernel.with_kvcache(q, k_in, v_in, cache_seqlens=lengths, block_table=table)
    graph.replay()
    attngen.check_device_errors()
    assert not torch.isnan(out).any()
    lengths[0] = 5000
    graph.replay()
    with pytest.raises(attngen.DeviceCheckError, match="cache_seqlens"):
        attngen.check_device_errors()
    assert torch.isnan(out[0]).all() and not torch.isnan(out[1:]).any()
