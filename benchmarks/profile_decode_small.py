"""One small decode call, contiguous then paged (the contiguous cache's memory as a pool in its own order, as the
bench lays it out), for Nsight Compute: hd128 bf16, 32 query heads over 8 KV heads, seqlen_q 1.

    ncu -k "regex:_split$" -s 4 -c 2 --set full python benchmarks/profile_decode_small.py --shape 1x1024 --page 256
"""

from __future__ import annotations

import argparse
import os

import torch

import attngen
from attngen.spec.model import AttentionSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1x1024")
    ap.add_argument("--page", type=int, default=256)
    args = ap.parse_args()
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    b, s = (int(x) for x in args.shape.split("x"))
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    used = torch.full((b,), s, dtype=torch.int32, device="cuda")
    table = torch.arange(b * s // args.page, dtype=torch.int32, device="cuda").view(b, -1)
    pool = (k.view(-1, args.page, 8, 128), v.view(-1, args.page, 8, 128))
    for _ in range(2):   # warm: compile, remember the call
        kernel.with_kvcache(q, k, v, cache_seqlens=used)
        kernel.with_kvcache(q, *pool, cache_seqlens=used, block_table=table)
    torch.cuda.synchronize()
    kernel.with_kvcache(q, k, v, cache_seqlens=used)                            # profiled: contiguous
    kernel.with_kvcache(q, *pool, cache_seqlens=used, block_table=table)        # profiled: paged
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
