"""One fp8 (or bf16) forward at hd128 seqlen 8k after a warm-up, for a profiler to capture (fp8_ncu.sh)."""

from __future__ import annotations

import argparse

import torch

import attngen
from attngen.spec.model import AttentionSpec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="fp8_e4m3")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--causal", action="store_true")
    args = parser.parse_args()
    spec = AttentionSpec(head_dim=args.head_dim, dtype=args.dtype, mask="causal" if args.causal else "none")
    kernel = attngen.compile(spec)
    batch, heads = max(1, 16384 // args.seqlen), 2048 // args.head_dim
    x = [torch.randn(batch, args.seqlen, heads, args.head_dim, device="cuda") for _ in range(3)]
    if args.dtype == "fp8_e4m3":
        q, k, v = (t.to(torch.float8_e4m3fn) for t in x)
        s = torch.full((batch, heads), 0.02, device="cuda")

        def run() -> object:
            return kernel(q, k, v, q_descale=s, k_descale=s, v_descale=s)
    else:
        q, k, v = (t.to(torch.bfloat16) for t in x)

        def run() -> object:
            return kernel(q, k, v)
    for _ in range(3):
        run()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
