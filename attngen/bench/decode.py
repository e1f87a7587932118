"""`attngen bench --decode`: attention over a KV cache, a few query rows per entry, as in token generation.

Per (head dim, batch, cache length): attngen's `kernel.with_kvcache` over a contiguous cache and over the same
bytes as a paged pool (page 256), torch SDPA's FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends,
and FlashAttention-4's cache entry point where flash_attn.cute has one. Each output is checked against float32
attention of batch element 0 before it is timed; the rate is the cache's K+V bytes over the time, beside a
device-to-device copy's bandwidth measured in the same run.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import measure, peers, seqlens
from .peers import Unavailable
from .peers import first as _first
from .seqlens import DecodeOptions, DecodePoint

Log = Callable[[str], None]
Fn = Callable[[], Any]
SDPA = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}


def run(options: DecodeOptions, log: Log = print) -> tuple[Path, list[Path], float]:
    """Every point that fits the memory limit; reports rewritten after each. Returns (folder, files, seconds)."""
    import torch

    from . import output, seqlens_report
    from .runner import BenchError

    if not torch.cuda.is_available():
        raise BenchError("the benchmark needs a CUDA GPU; torch sees none")
    started = time.perf_counter()
    env = measure.environment()
    target = options.out or output.default_folder(env["gpu"], seqlens.DECODE_PREFIX)
    points, skipped = seqlens.decode_points(options)
    copy = measure.copy_bandwidth()
    results: dict[str, Any] = {"suite": "decode", "environment": env, "copy": copy, "settings": _settings(options),
                               "skipped": skipped, "rows": []}
    log(f"attngen bench --decode on {env['gpu']} -> {target}; copy {copy['copy_gbps']:.0f} GB/s; "
        f"{len(points)} point(s), {len(skipped)} skipped (memory)")
    kernels: dict[int, Any] = {}
    paths: list[Path] = []
    for i, point in enumerate(points):
        if point.head_dim not in kernels:
            kernels[point.head_dim] = _compile(point.head_dim, options.dtype)
        row = run_point(point, options, kernels[point.head_dim], copy["copy_gbps"], seed=i)
        results["rows"].append(row)
        log(seqlens_report.decode_line(row))
        paths = seqlens_report.write_decode(results, target, log=None)
        torch.cuda.empty_cache()
    paths = seqlens_report.write_decode(results, target, log=log)
    return target, paths, time.perf_counter() - started


def _settings(options: DecodeOptions) -> dict[str, Any]:
    return {"head_dims": list(options.head_dims), "heads": options.heads, "kv_heads": options.kv_heads,
            "seqlen_q": options.seqlen_q, "batches": list(options.batches), "caches": list(options.caches),
            "page_size": options.page_size, "memory_gib": options.memory_gib, "dtype": options.dtype,
            "peers": list(options.peers), "timer": measure.timer_name(), "statistic": "median",
            "check": "float32 attention of batch element 0, relative L2 error", "checks": seqlens.DECODE_CHECK_NOTE,
            "gqa": seqlens.GQA_NOTE, "mask": seqlens.MASK_NOTE}


def _compile(head_dim: int, dtype: str) -> Any:
    import attngen
    from attngen.spec.model import AttentionSpec

    try:
        return attngen.compile(AttentionSpec.model_validate(
            {"name": f"decode_hd{head_dim}", "head_dim": head_dim, "dtype": dtype, "mask": "none"}))
    except Exception as exc:  # recorded on every row; the peers still run
        return exc


def run_point(point: DecodePoint, options: DecodeOptions, kernel: Any, copy_gbps: float, seed: int) -> dict[str, Any]:
    """One point: fresh inputs, every implementation checked then timed; rates and ratios."""
    import torch

    b, s, d, page = point.batch, point.cache, point.head_dim, options.page_size
    dtype = measure.torch_dtype(options.dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    k, v = (torch.randn(b, s, options.kv_heads, d, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    q = torch.randn(b, options.seqlen_q, options.heads, d, device="cuda", dtype=dtype, generator=gen)
    used = torch.full((b,), s, dtype=torch.int32, device="cuda")
    table = torch.arange(b * s // page, dtype=torch.int32, device="cuda").view(b, -1)
    pool = (k.view(-1, page, options.kv_heads, d), v.view(-1, page, options.kv_heads, d))
    ref = reference(q, k, v)
    nbytes = seqlens.kv_bytes(b, s, options.kv_heads, d)
    row: dict[str, Any] = {"head_dim": d, "batch": b, "cache": s, "kv_bytes": nbytes, "impls": {}}
    makers: dict[str, Callable[[], tuple[Fn, dict[str, Any]]]] = {
        "attngen": lambda: _attngen(kernel, q, k, v, used=used),
        "attngen_paged": lambda: _attngen(kernel, q, *pool, used=used, block_table=table)}
    for name in options.peers:
        makers[name] = _peer(name, q, k, v, used, options.group)
    for name, make in makers.items():
        entry = measure_one(make, ref, options.dtype)
        if entry.get("ms"):
            entry["gbps"] = seqlens.gbps(nbytes, entry["ms"])
            entry["fraction_of_copy"] = entry["gbps"] / copy_gbps
        if entry.get("graph_ms"):
            entry["graph_gbps"] = seqlens.gbps(nbytes, entry["graph_ms"])
            entry["graph_fraction_of_copy"] = entry["graph_gbps"] / copy_gbps
        row["impls"][name] = entry
    row["ratios"] = seqlens.decode_ratios({n: e.get("ms") for n, e in row["impls"].items()}, options.peers)
    row["graph_ratios"] = seqlens.decode_ratios({n: e.get("graph_ms") for n, e in row["impls"].items()},
                                                options.peers)
    return row


def _peer(name: str, q: Any, k: Any, v: Any, used: Any, group: int) -> Callable[[], tuple[Fn, dict[str, Any]]]:
    if name == "fa4":
        return lambda: _fa4(q, k, v, used)
    return lambda: _sdpa(SDPA[name], q, k, v, group)


def reference(q: Any, k: Any, v: Any) -> Any:
    """float32 attention of batch element 0 over its whole cache: (seqlen_q, heads, head_dim)."""
    sq, h, d = q.shape[1:]
    hkv = k.shape[2]
    qf = q[0].float().permute(1, 0, 2).reshape(hkv, (h // hkv) * sq, d)  # query head i reads kv head i // group
    kf, vf = (t[0].float().transpose(0, 1) for t in (k, v))  # (hkv, cache, d)
    p = ((qf @ kf.transpose(1, 2)) * d**-0.5).softmax(-1)
    return (p @ vf).reshape(h, sq, d).transpose(0, 1)


def measure_one(make: Callable[[], tuple[Fn, dict[str, Any]]], ref: Any, dtype: str) -> dict[str, Any]:
    """Prepare, check batch element 0 against `ref`, then time (every implementation with its defaults)."""
    from .model import TOLERANCE

    try:
        fn, info = make()
        err = measure.relative_error(fn()[0], ref.double())
        if not err < TOLERANCE[dtype]:
            return {"status": "wrong", "rel_err": err, **info,
                    "error": f"relative error {err:.2e} over {TOLERANCE[dtype]:g}; not timed"}
        ms = measure.time_ms(fn)
        graph = _graph_ms(fn)
    except Unavailable as exc:
        return {"status": "unavailable", "error": str(exc)}
    except Exception as exc:  # a peer without a kernel for the shape is recorded, not fatal
        return {"status": "error", "error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}
    return {"status": "ok", "ms": ms, "rel_err": err, **graph, **info}


def _graph_ms(fn: Fn) -> dict[str, Any]:
    """{"graph_ms": ...} of fn captured in a CUDA graph, or why it could not be captured."""
    try:
        return {"graph_ms": measure.graph_ms(fn)}
    except Exception as exc:  # an implementation that cannot be captured keeps its eager time
        return {"graph_error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}


def _attngen(kernel: Any, q: Any, k: Any, v: Any, **kw: Any) -> tuple[Fn, dict[str, Any]]:
    if isinstance(kernel, Exception):
        raise Unavailable(f"compile failed: {type(kernel).__name__}: {kernel}"[:300])
    used, table = kw["used"], kw.get("block_table")
    return lambda: kernel.with_kvcache(q, k, v, cache_seqlens=used, block_table=table), {}


def _sdpa(backend_name: str, q: Any, k: Any, v: Any, group: int) -> tuple[Fn, dict[str, Any]]:
    """One SDPA backend; GQA through enable_gqa where the backend takes it, else K/V repeated to the query heads
    (the repeat made once, outside the timing)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name, None)
    if backend is None:
        raise Unavailable(f"this torch has no SDPBackend.{backend_name}")
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def call(kk: Any, vv: Any, gqa: bool) -> Fn:
        def fn() -> Any:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qt, kk, vv, enable_gqa=gqa).transpose(1, 2)
        return fn

    if group == 1:
        return call(kt, vt, False), {"reads_repeated_kv": False}
    try:
        fn = call(kt, vt, True)
        fn()
        return fn, {"reads_repeated_kv": False}
    except RuntimeError:
        kr, vr = (t.repeat_interleave(group, 1) for t in (kt, vt))
        return call(kr, vr, False), {"reads_repeated_kv": True}


def _fa4(q: Any, k: Any, v: Any, used: Any) -> tuple[Fn, dict[str, Any]]:
    """flash_attn.cute's flash_attn_with_kvcache, else its flash_attn_varlen_func with seqused_k (batched q and
    cache); Unavailable when it has neither."""
    fa4 = peers.fa4()
    if hasattr(fa4, "flash_attn_with_kvcache"):
        kvcache = fa4.flash_attn_with_kvcache
        return lambda: _first(kvcache(q, k, v, cache_seqlens=used)), {"entry": "flash_attn_with_kvcache"}
    varlen = getattr(fa4, "flash_attn_varlen_func", None)
    if varlen is None or "seqused_k" not in inspect.signature(varlen).parameters:
        raise Unavailable("flash_attn.cute has no flash_attn_with_kvcache and no flash_attn_varlen_func(seqused_k=)")
    return lambda: _first(varlen(q, k, v, seqused_k=used, causal=False)), {"entry": "flash_attn_varlen_func"}
