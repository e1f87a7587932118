"""Backward-only (with --forward, forward-only) TFLOP/s of attngen's dense kernels (device machine), one line per
configuration: the timing half of an A/B between two checkouts, each run in its own process (PYTHONPATH picks the
checkout).

    PYTHONPATH=/tmp/base python3 benchmarks/time_bwd.py --tag base [--forward] [--deterministic] [--head-dims 128] \
        [--seqlens 2048,8192]
"""

from __future__ import annotations

import argparse

import torch

import attngen
from attngen.bench.measure import time_ms
from attngen.spec.model import AttentionSpec


def tflops(head_dim: int, seqlen: int, causal: bool, forward: bool, deterministic: bool = False) -> float:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none",
                         deterministic=deterministic)
    kernel = attngen.compile(spec)
    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16,
                           requires_grad=not forward) for _ in range(3))
    flops = 4 * batch * heads * seqlen ** 2 * head_dim * (0.5 if causal else 1.0)
    if forward:
        return flops / time_ms(lambda: kernel(q, k, v)) / 1e9
    dout = torch.randn_like(q)
    out = kernel(q, k, v)
    ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    return flops * 2.5 / ms / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", required=True)
    parser.add_argument("--forward", action="store_true", help="time the forward instead of the backward")
    parser.add_argument("--deterministic", action="store_true", help="the deterministic specs")
    parser.add_argument("--head-dims", default="128")
    parser.add_argument("--seqlens", default="2048,8192")
    args = parser.parse_args()
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                rate = tflops(d, s, causal, args.forward, args.deterministic)
                print(f"{args.tag} hd{d} s{s} {'causal' if causal else 'none'}: {rate:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
