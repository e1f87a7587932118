"""Run one attngen forward kernel a few times, for a profiler to capture (ncu -k regex:attn_fwd -c 1).

    ncu --section SpeedOfLight --section WarpStateStats python benchmarks/profile_one.py --head-dim 128
"""

from __future__ import annotations

import argparse

import torch

import attngen
from attngen.spec.model import AttentionSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--pipeline", default="auto")
    ap.add_argument("--backward", action="store_true", help="run forward and backward")
    args = ap.parse_args()
    d, s = args.head_dim, args.seqlen
    spec = AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if args.causal else "none", pipeline=args.pipeline)
    kernel = attngen.compile(spec)
    b, h = max(1, 16384 // s), 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=args.backward)
               for _ in range(3))
    for _ in range(3):
        out = kernel(q, k, v)
        if args.backward:
            out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    print(kernel.cubins[next(iter(kernel.cubins))].source.plan.summary()["kernel_name"])


if __name__ == "__main__":
    main()
