"""Device time of each kernel of the dense backward, attngen's and FlashAttention-4's, beside the timed call (device
machine): torch.profiler's CUDA activity over STEPS backward calls (autograd.grad of one forward), averaged per kernel,
and do_bench's median of the same call, so that the kernels' sum against the call's time shows what the host or the
gaps between kernels add. Shapes as `attngen bench --backward` (batch 16384 / seqlen, 2048 / head_dim heads). With
--forward, the forward call (inputs without a gradient) instead.

    python3 benchmarks/bwd_kernel_times.py [--head-dims 64,128] [--seqlens 2048,8192] [--rounds 2] [--forward]
"""

from __future__ import annotations

import argparse

import torch

import attngen
from attngen.bench import measure
from attngen.bench.backward import _impl
from attngen.spec.model import AttentionSpec

STEPS = 10


def one(kind: str, head_dim: int, seqlen: int, causal: bool, forward: bool) -> None:
    spec = AttentionSpec(head_dim=head_dim, dtype="bf16", mask="causal" if causal else "none")
    fwd = _impl(kind, attngen.compile(spec) if kind == "attngen" else None, causal)
    batch, heads = max(1, 16384 // seqlen), 2048 // head_dim
    q, k, v = (torch.randn(batch, seqlen, heads, head_dim, device="cuda", dtype=torch.bfloat16,
                           requires_grad=not forward) for _ in range(3))
    flops = (1.0 if forward else 2.5) * 4 * batch * heads * seqlen ** 2 * head_dim * (0.5 if causal else 1.0)
    if forward:
        def step() -> None:
            fwd(q, k, v)
    else:
        dout = torch.randn_like(q)
        out = fwd(q, k, v)

        def step() -> None:
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    call_ms = measure.time_ms(step)
    times = measure.kernel_times_us(step, STEPS)
    total = sum(times.values())
    print(f"{kind} hd{head_dim} s{seqlen} {'causal' if causal else 'none'}: call {call_ms * 1e3:.0f} us "
          f"({flops / call_ms / 1e9:.0f} TFLOP/s), kernels {total:.0f} us ({flops / total / 1e6:.0f} TFLOP/s)")
    for name, us in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"    {us:8.1f} us  {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqlens", default="2048,8192")
    parser.add_argument("--kinds", default="attngen,fa4")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--forward", action="store_true", help="the forward call (no gradient) instead")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for d in map(int, args.head_dims.split(",")):
            for s in map(int, args.seqlens.split(",")):
                for causal in (False, True):
                    for kind in args.kinds.split(","):
                        one(kind, d, s, causal, args.forward)


if __name__ == "__main__":
    main()
