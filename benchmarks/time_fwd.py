"""Forward-only TFLOP/s of attngen's dense kernels (device machine), one line per configuration: the timing half of
an A/B between checkouts or variants, each run in its own process (PYTHONPATH picks the code).

    PYTHONPATH=/tmp/variant python3 benchmarks/time_fwd.py --tag variant [--head-dims 64,128,256] [--seqlens 2048,8192]
"""

from __future__ import annotations

import argparse

import torch

import attngen
from attngen.bench.measure import time_ms
from attngen.spec.model import AttentionSpec


def tflops(head_dim: int, seqlen: int, causal: bool) -> float:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none")
    kernel = attngen.compile(spec)
    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ms = time_ms(lambda: kernel(q, k, v))
    return 4 * batch * heads * seqlen ** 2 * head_dim * (0.5 if causal else 1.0) / ms / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", required=True)
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--seqlens", default="2048,8192")
    args = parser.parse_args()
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                print(f"{args.tag} hd{d} s{s} {'causal' if causal else 'none'}: {tflops(d, s, causal):.0f} TFLOP/s",
                      flush=True)


if __name__ == "__main__":
    main()
