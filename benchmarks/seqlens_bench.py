"""Per-entry lengths on the GPU: decode over a KV cache and a packed (varlen) training step, with the peers in the
same run. Writes JSON and a markdown table under --out.

Decode: hd128 bf16, 32 query heads over 8 KV heads, one query per entry; attngen with_kvcache (contiguous and
paged, page 256) against torch SDPA's FLASH_ATTENTION (FlashAttention-2) and CUDNN_ATTENTION backends on the
same (dense) cache; the bandwidth is the K and V bytes read over the time, beside a device-to-device copy's.

Varlen: packed documents of mixed lengths (causal per document), forward + backward; attngen varlen against
attngen dense causal over the same total tokens and, when torch has it, torch.nn.attention.varlen (FA2).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import torch
from triton.testing import do_bench

import attngen
from attngen.spec.model import AttentionSpec


def _bench(fn: Any) -> float:
    """Median milliseconds."""
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def copy_bandwidth() -> float:
    """GB/s of a 2 GiB device-to-device copy (read + write bytes)."""
    src = torch.randn(1 << 29, device="cuda")
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6


def decode_point(kernel: Any, batch: int, cache: int, heads: int = 32, kv_heads: int = 8, d: int = 128) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(batch * 7 + cache)
    k = torch.randn(batch, cache, kv_heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn_like(k)
    q = torch.randn(batch, 1, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    used = torch.full((batch,), cache, dtype=torch.int32, device="cuda")
    row: dict[str, Any] = {"batch": batch, "cache": cache}
    kv_bytes = 2 * batch * cache * kv_heads * d * 2
    out = kernel.with_kvcache(q, k, v, cache_seqlens=used)
    ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                           enable_gqa=True).transpose(1, 2)
    row["max_abs_err_vs_sdpa"] = float((out.float() - ref.float()).abs().max())
    row["attngen_ms"] = _bench(lambda: kernel.with_kvcache(q, k, v, cache_seqlens=used))
    page = 256
    table = torch.arange(batch * cache // page, device="cuda", dtype=torch.int32).view(batch, -1)
    pool_k, pool_v = k.view(-1, page, kv_heads, d), v.view(-1, page, kv_heads, d)
    row["attngen_paged_ms"] = _bench(lambda: kernel.with_kvcache(q, pool_k, pool_v, cache_seqlens=used,
                                                                 block_table=table))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                # GQA as repeated heads for backends without enable_gqa (the repeat is outside the timing).
                kr, vr = kt.repeat_interleave(heads // kv_heads, 1), vt.repeat_interleave(heads // kv_heads, 1)
                torch.nn.functional.scaled_dot_product_attention(qt, kr, vr)
                row[f"{name}_ms"] = _bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kr, vr))
                row[f"{name}_reads_repeated_kv"] = True
        except RuntimeError as exc:
            row[f"{name}_error"] = str(exc).splitlines()[0][:200]
    for key in [x for x in row if x.endswith("_ms")]:
        row[key.replace("_ms", "_gbps")] = kv_bytes / row[key] / 1e6
    return row


def varlen_point(kernel: Any, lengths: list[int], heads: int = 16, d: int = 128) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(sum(lengths))
    total = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(total, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
               for _ in range(3))
    dout = torch.randn_like(q)
    longest = max(lengths)
    flops = sum(4 * n * n * d * heads / 2 for n in lengths) * 3.5  # causal, forward + backward (2.5x)

    def step_varlen() -> None:
        out = kernel(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest)
        out.backward(dout)

    row: dict[str, Any] = {"total": total, "docs": len(lengths), "longest": longest}
    row["attngen_varlen_ms"] = _bench(step_varlen)
    row["attngen_varlen_tflops"] = flops / row["attngen_varlen_ms"] / 1e9
    seq = 8192
    qd, kd, vd = (torch.randn(total // seq, seq, heads, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                  .requires_grad_() for _ in range(3))
    dd = torch.randn_like(qd)
    dense_flops = 4 * seq * seq * d * heads / 2 * (total // seq) * 3.5

    def step_dense() -> None:
        kernel(qd, kd, vd).backward(dd)

    row["attngen_dense_8k_ms"] = _bench(step_dense)
    row["attngen_dense_8k_tflops"] = dense_flops / row["attngen_dense_8k_ms"] / 1e9
    try:
        from torch.nn.attention.varlen import varlen_attn

        def step_fa2() -> None:
            varlen_attn(q, k, v, cu, cu, longest, longest, is_causal=True).backward(dout)

        row["fa2_varlen_ms"] = _bench(step_fa2)
        row["fa2_varlen_tflops"] = flops / row["fa2_varlen_ms"] / 1e9
    except (ImportError, RuntimeError, TypeError) as exc:
        row["fa2_varlen_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    decode = attngen.compile(AttentionSpec(name="decode_hd128", head_dim=128, dtype="bf16", mask="causal"))
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "copy_gbps": copy_bandwidth(), "decode": [], "varlen": []}
    points = [(1, 32768), (8, 8192), (32, 32768), (1, 131072), (64, 4096)] if not args.quick else [(8, 8192)]
    for batch, cache in points:
        row = decode_point(decode, batch, cache)
        row["attngen_fraction_of_copy"] = row["attngen_gbps"] / result["copy_gbps"]
        result["decode"].append(row)
        print(json.dumps(row), flush=True)
    rng = torch.Generator().manual_seed(0)
    lengths: list[int] = []
    while sum(lengths) < 32768:
        lengths.append(int(2 ** (6 + 7 * torch.rand(1, generator=rng).item())))  # 64 to 8k, log-uniform
    lengths[-1] -= sum(lengths) - 32768
    lengths = [n for n in lengths if n > 0]
    row = varlen_point(decode, lengths)
    result["varlen"].append(row)
    print(json.dumps(row), flush=True)
    (args.out / "seqlens.json").write_text(json.dumps(result, indent=1))
    print(f"copy {result['copy_gbps']:.0f} GB/s", flush=True)
    assert all(math.isfinite(r["attngen_ms"]) for r in result["decode"])


if __name__ == "__main__":
    main()
