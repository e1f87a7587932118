"""Run one attngen forward kernel a few times, for a profiler to capture (ncu -k regex:attn_fwd -c 1); with
--impl fa4, FlashAttention-4's (flash_attn.cute) on the same inputs; --impl cudnn, torch SDPA's cuDNN backend. An
attngen impl ending in '#deterministic' builds the deterministic plan. The kernels of the last run are listed.

    ncu --section SpeedOfLight --section WarpStateStats python benchmarks/profile_one.py --head-dim 128
    python benchmarks/profile_one.py --backward --impl "attngen:sm90_bwd_rows.DQ_DEFERRED_BLOCK_M=[64]"   (constants
    overridden as in bwd_interleaved.py's kinds)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from bwd_interleaved import deterministic_flag, overrides

import attngen
from attngen.spec.model import AttentionSpec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--pipeline", default="auto")
    ap.add_argument("--backward", action="store_true", help="run forward and backward")
    ap.add_argument("--impl", default="attngen",
                    help="attngen, fa4, cudnn, or attngen:<module>.<CONST>=<literal>;... (#deterministic: its "
                         "deterministic plan)")
    args = ap.parse_args()
    args.impl, args.deterministic = deterministic_flag(args.impl)
    # attngen's kernels are built under the kind's overrides, the backward's at its first call in the warm-up
    with overrides(args.impl):
        run = warmed_up(args)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    for event in prof.key_averages():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            print(f"kernel {event.key[:160]}: {event.device_time_total:.0f} us")


def warmed_up(args: argparse.Namespace) -> Callable[[], None]:
    """One call (forward, and backward with --backward) of the implementation on fresh inputs, run twice."""
    d, s = args.head_dim, args.seqlen
    b, h = max(1, 16384 // s), 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=args.backward)
               for _ in range(3))
    if args.impl == "fa4":
        import flash_attn.cute as fa4

        def forward() -> torch.Tensor:
            out = fa4.flash_attn_func(q, k, v, causal=args.causal)
            return out[0] if isinstance(out, tuple) else out
    elif args.impl == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def forward() -> torch.Tensor:   # SDPA takes (batch, heads, seqlen, head_dim)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=args.causal)
            return out.transpose(1, 2)
    else:
        spec = AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if args.causal else "none",
                             pipeline=args.pipeline, deterministic=args.deterministic)
        kernel = attngen.compile(spec)

        def forward() -> torch.Tensor:
            return kernel(q, k, v)
        print(kernel.cubins[next(iter(kernel.cubins))].source.plan.summary()["kernel_name"])

    def run() -> None:
        out = forward()
        if args.backward:
            out.backward(torch.randn_like(out))
    for _ in range(2):
        run()
    return run


if __name__ == "__main__":
    main()
