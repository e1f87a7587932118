"""Sweep of the decode kernels' tiles and split counts on the device machine (the planner's numbers come from
here): for each (warp_keys, stages) the GPU time of one decode step captured in a CUDA graph, at a few shapes,
with the planner's split count and with fixed ones. hd128 bf16, 32 query heads over 8 KV heads, seqlen_q 1.

    python3 benchmarks/decode_sweep.py --out $OUT/decode_sweep.json
"""

from __future__ import annotations

import argparse
import json
import os

import torch

import attngen
from attngen.bench import measure
from attngen.families import sm80_decode
from attngen.spec.model import AttentionSpec

SHAPES = ((1, 4096), (1, 32768), (1, 131072), (8, 4096), (64, 4096), (64, 32768))
TILINGS = ((16, 2), (16, 3), (16, 4), (32, 2), (32, 3))
SPLITS = (0, 8, 16, 32, 64, 128)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    spec = AttentionSpec(head_dim=128, dtype="bf16", mask="causal")
    inputs = {}
    for b, s in SHAPES:
        k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        inputs[(b, s)] = (q, k, v, torch.full((b,), s, dtype=torch.int32, device="cuda"))
    rows = []
    for wk, st in TILINGS:
        sm80_decode.WARP_KEYS, sm80_decode.STAGES = (wk,), (st,)
        kernel = attngen.compile(spec)
        for (b, s), (q, k, v, used) in inputs.items():
            for splits in SPLITS:
                if splits and b * 8 * splits > 4 * 132 * 8:
                    continue

                def step(q=q, k=k, v=v, used=used, splits=splits, kernel=kernel):
                    return kernel.with_kvcache(q, k, v, cache_seqlens=used, num_splits=splits)

                us = measure.graph_ms(step) * 1e3
                gbps = 2 * k.numel() * 2 / us / 1e3
                plan = kernel._decode.cubins[next(iter(kernel._decode.cubins))].source.plan
                row = {"warp_keys": wk, "stages": st, "blocks_per_sm": plan.blocks_per_sm, "batch": b, "cache": s,
                       "splits": splits or "auto", "us": round(us, 1), "gbps": round(gbps)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                with open(out, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
