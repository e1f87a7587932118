"""The spread of the decode bench's CUDA-graph time between captures (device machine): contiguous and paged calls of
`attngen bench --decode`'s shape (mask none, pages in the cache's order over the same memory), each captured and
timed `--captures` times as measure.graph_ms does once, with cuDNN's SDPA beside them. hd128 bf16, 32 query heads
over 8 KV heads, seqlen_q 1.

    python3 benchmarks/decode_graph_spread.py [--shapes 1x1024] [--page 256] [--captures 6]
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attngen
from attngen.bench import measure
from attngen.spec.model import AttentionSpec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1x1024")
    parser.add_argument("--page", type=int, default=256)
    parser.add_argument("--captures", type=int, default=6)
    args = parser.parse_args()
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="none"))
    for b, s in ((int(x) for x in item.split("x")) for item in args.shapes.split(",")):
        point(kernel, b, s, args.page, args.captures)


def point(kernel: attngen.AttentionKernel, b: int, s: int, page: int, captures: int) -> None:
    q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    used = torch.full((b,), s, dtype=torch.int32, device="cuda")
    table = torch.arange(b * s // page, dtype=torch.int32, device="cuda").view(b, -1)
    pool = (k.view(-1, page, 8, 128), v.view(-1, page, 8, 128))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def cudnn() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

    calls = {"contiguous": lambda: kernel.with_kvcache(q, k, v, cache_seqlens=used),
             "paged": lambda: kernel.with_kvcache(q, *pool, cache_seqlens=used, block_table=table),
             "cudnn": cudnn}
    for round_ in range(2):
        for name, fn in calls.items():
            times = [measure.graph_ms(fn) * 1e3 for _ in range(captures)]
            print(f"{b} x {s} page {page} round {round_} {name}: " + " ".join(f"{t:.1f}" for t in times)
                  + f" | median {sorted(times)[len(times) // 2]:.1f} min {min(times):.1f}", flush=True)

if __name__ == "__main__":
    main()
