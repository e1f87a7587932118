"""Device time of each kernel of one packed training step against the dense step over the same tokens (device
machine): torch.profiler's CUDA activity over STEPS forward + backward steps, averaged per kernel, with each
kernel's TFLOP/s (forward FLOPs 4 n^2 d h / 2 per causal document, the backward's 2.5x). The documents are
`attngen bench --varlen`'s (log-uniform 64..8k, seed 0, 32768 tokens), 16 heads, hd128 bf16.

    python3 benchmarks/varlen_kernel_times.py
"""

from __future__ import annotations

import os

import torch

import attngen
from attngen.bench import measure, seqlens
from attngen.spec.model import AttentionSpec

STEPS, HEADS, D = 10, 16, 128


def main() -> None:
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    kernel = attngen.compile(AttentionSpec(head_dim=D, dtype="bf16", mask="causal"))
    lengths = seqlens.doc_lengths(32768, 64, 8192, 0)
    total, longest = sum(lengths), max(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    packed = [torch.randn(total, HEADS, D, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3)]
    dense = [t.detach().view(total // 8192, 8192, HEADS, D).clone().requires_grad_() for t in packed]
    fwd_flops = {"varlen": seqlens.causal_flops(lengths, D, HEADS, passes=1.0),
                 "dense": seqlens.causal_flops([8192] * (total // 8192), D, HEADS, passes=1.0)}

    def varlen_step():
        out = kernel(*packed, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest, max_seqlen_k=longest)
        torch.autograd.grad(out, packed, out)

    def dense_step():
        out = kernel(*dense)
        torch.autograd.grad(out, dense, out)

    for name, step in (("varlen", varlen_step), ("dense", dense_step)):
        times = measure.kernel_times_us(step, STEPS)
        print(f"{name}: {len(lengths) if name == 'varlen' else total // 8192} sequences, forward "
              f"{fwd_flops[name] / 1e9:.0f} GFLOP; {sum(times.values()):.0f} us of kernels per step")
        for k, us in sorted(times.items(), key=lambda kv: -kv[1]):
            share = "" if us < 50 else f" ({fwd_flops[name] / us / 1e6:.0f} TFLOP/s at forward FLOPs, " \
                                      f"{2.5 * fwd_flops[name] / us / 1e6:.0f} at backward)"
            print(f"  {us:8.1f} us  {k}{share}", flush=True)


if __name__ == "__main__":
    main()
