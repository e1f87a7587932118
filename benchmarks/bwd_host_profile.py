"""Host cost of one dense forward and one backward call (device machine): microseconds per call of a loop that issues
calls without waiting where the host is the slower side (small shapes: batch 1, 256 queries, hd128 causal: the kernels
take tens of microseconds), then a cProfile of the backward's callees (autograd.grad of one forward).

    python3 benchmarks/bwd_host_profile.py [--calls 300]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from collections.abc import Callable

import torch

import attngen
from attngen.spec.model import AttentionSpec


def per_call_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--seqlen", type=int, default=256)
    args = parser.parse_args()
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    q, k, v = (torch.randn(1, args.seqlen, 16, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    out = kernel(q, k, v)

    def forward() -> None:
        with torch.no_grad():
            kernel(q, k, v)

    def backward() -> None:
        torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    print(f"forward {per_call_us(forward, args.calls):.0f} us/call, backward {per_call_us(backward, args.calls):.0f} "
          f"us/call (b1 s{args.seqlen} hd128 causal, 16 heads)", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.calls):
        backward()
    torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(45)
    print(text.getvalue())
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    print(text.getvalue())


if __name__ == "__main__":
    main()
