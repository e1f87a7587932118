"""Sweep of the decode kernels' tiles and split counts on the device machine (the planner's numbers come from
here): for each (warp_keys, stages) the GPU time of one decode step captured in a CUDA graph, at a few shapes,
with the planner's split count and with fixed ones, from a contiguous cache and (--page) from a paged pool in
shuffled blocks. hd128 bf16, 32 query heads over 8 KV heads, seqlen_q 1.

    python3 benchmarks/decode_sweep.py --out $OUT/decode_sweep.json \
        [--shapes 1x1024,1x4096] [--tilings 32x3,16x4] [--splits 0,1,2,4,8] [--page 0,16,256] [--cudnn]

A tiling is warp_keys x stages [x warps] (warps: sm80_decode.DECODE_WARPS when left out); split 0 is the
planner's choice; page 0 a contiguous cache. --cudnn also times SDPA's cuDNN backend (GQA by enable_gqa) on each
contiguous shape in the same process, its rows with "impl": "cudnn".
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import attngen
from attngen.bench import decode as bench_decode
from attngen.bench import measure
from attngen.families import sm80_decode
from attngen.spec.model import AttentionSpec

SHAPES = "1x4096,1x32768,1x131072,8x4096,64x4096,64x32768"
TILINGS = "16x2,16x3,16x4,32x2,32x3"
SPLITS = "0,8,16,32,64,128"


def pairs(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in (item.split("x") for item in text.split(","))]


def tilings(text: str) -> list[tuple[int, int, int]]:
    """(warp_keys, stages, warps) of each item."""
    out = []
    for item in text.split(","):
        parts = [int(x) for x in item.split("x")]
        out.append((parts[0], parts[1], parts[2] if len(parts) > 2 else sm80_decode.DECODE_WARPS))
    return out


def cache(b: int, s: int, page: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """K and V of b entries of s keys, contiguous (page 0) or in a pool of page-row blocks in shuffled order."""
    if not page:
        k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        return k, v, None
    per = -(-s // page)
    k, v = (torch.randn(b * per, page, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    table = torch.randperm(b * per, device="cuda", dtype=torch.int32).view(b, per)
    return k, v, table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default=SHAPES, help="batch x cache keys, comma-separated")
    parser.add_argument("--tilings", default=TILINGS, help="warp_keys x stages, comma-separated")
    parser.add_argument("--splits", default=SPLITS, help="split counts (0: the planner's), comma-separated")
    parser.add_argument("--page", default="0", help="page sizes (0: contiguous), comma-separated")
    parser.add_argument("--cudnn", action="store_true", help="time SDPA's cuDNN backend on the contiguous shapes too")
    args = parser.parse_args()
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    pages = [int(x) for x in args.page.split(",")]
    inputs = {}
    for b, s in pairs(args.shapes):
        q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        used = torch.full((b,), s, dtype=torch.int32, device="cuda")
        for page in pages:
            inputs[(b, s, page)] = (q, *cache(b, s, page), used)
    rows = []
    for wk, st, warps in tilings(args.tilings):
        sm80_decode.WARP_KEYS, sm80_decode.STAGES, sm80_decode.DECODE_WARPS = (wk,), (st,), warps
        kernel = attngen.compile(spec)
        for (b, s, page), (q, k, v, table, used) in inputs.items():
            for splits in (int(x) for x in args.splits.split(",")):
                if splits and b * 8 * splits > 4 * 132 * 8:
                    continue

                def step(q=q, k=k, v=v, table=table, used=used, splits=splits, kernel=kernel):
                    return kernel.with_kvcache(q, k, v, cache_seqlens=used, block_table=table, num_splits=splits)

                us = measure.graph_ms(step) * 1e3
                gbps = 2 * b * s * 8 * 128 * 2 / us / 1e3
                plan = kernel._decode.cubins[next(iter(kernel._decode.cubins))].source.plan
                row = {"warp_keys": wk, "stages": st, "warps": warps, "blocks_per_sm": plan.blocks_per_sm,
                       "batch": b, "cache": s, "page": page, "splits": splits or "auto", "us": round(us, 1),
                       "gbps": round(gbps)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)
    if args.cudnn:
        for (b, s, page), (q, k, v, _table, _used) in inputs.items():
            if page:
                continue
            fn, _ = bench_decode._sdpa("CUDNN_ATTENTION", q, k, v, 4)
            us = measure.graph_ms(fn) * 1e3
            row = {"impl": "cudnn", "batch": b, "cache": s, "us": round(us, 1),
                   "gbps": round(2 * b * s * 8 * 128 * 2 / us / 1e3)}
            rows.append(row)
            print(json.dumps(row), flush=True)
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
