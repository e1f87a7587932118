"""Device time of each kernel of one decode step (device machine): torch.profiler's CUDA activity over many
steps, averaged per kernel name, for attngen (split and combine kernels) and cuDNN's SDPA (enable_gqa), beside
the graph time of the whole step (measure.graph_ms). bf16 hd128, 32 query heads over 8 KV heads, seqlen_q 1.

    python3 benchmarks/decode_kernel_times.py [--shapes 1x1024,1x4096]
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

STEPS = 50


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1x1024,1x4096,8x1024,1x32768")
    args = parser.parse_args()
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    for b, s in ((int(x) for x in item.split("x")) for item in args.shapes.split(",")):
        q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        used = torch.full((b,), s, dtype=torch.int32, device="cuda")
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

        def ours(q=q, k=k, v=v, used=used):
            return kernel.with_kvcache(q, k, v, cache_seqlens=used)

        def cudnn(qt=qt, kt=kt, vt=vt):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)

        for name, fn in (("attngen", ours), ("cudnn", cudnn)):
            times = measure.kernel_times_us(fn, STEPS, name_chars=60)
            graph = measure.graph_ms(fn) * 1e3
            parts = ", ".join(f"{k} {t:.1f}" for k, t in sorted(times.items(), key=lambda kv: -kv[1]))
            print(f"b{b} x {s} {name}: graph {graph:.1f} us; kernels {sum(times.values()):.1f} us: {parts}",
                  flush=True)


if __name__ == "__main__":
    main()
