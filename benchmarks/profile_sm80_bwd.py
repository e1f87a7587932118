"""Run one mma.sync-family backward (or FlashAttention-2's, torch's SDPA flash backend) a few times, for a profiler
to capture; the kernels of the last run are listed with their device times.

    python benchmarks/profile_sm80_bwd.py --head-dim 64 --impl atomic     (dK/dV kernel adding dQ with atomics)
    python benchmarks/profile_sm80_bwd.py --head-dim 64 --impl free       (the planner's atomic-free kernels)
    python benchmarks/profile_sm80_bwd.py --head-dim 64 --impl fa2
    ncu -k regex:dkdv -c 1 --set full python benchmarks/profile_sm80_bwd.py --impl atomic
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from attngen.bench import measure
from attngen.spec.model import AttentionSpec

sys.path.insert(0, os.path.dirname(__file__))


def attngen_runner(spec: AttentionSpec, atomic: bool):  # type: ignore[no-untyped-def]
    """A kernel whose backward is the mma.sync family's: the planner's plan, or the cheapest atomic-dQ plan."""
    import sweep_bwd

    from attngen.codegen.renderer import render
    from attngen.runtime.kernel import AttentionKernel, current_arch
    from attngen.toolchain.builder import build
    from attngen.toolchain.cache import compile_cached

    arch = current_arch()
    kernel = AttentionKernel(spec, {})
    kernel.cubins[arch] = build(spec, arch)
    plans = sweep_bwd.atomic_variants(spec, arch, 1) if atomic else sweep_bwd.variants(spec, arch, 1)
    kernel.backward.replace(arch, compile_cached(render(plans[0])))
    print(plans[0].dkdv, plans[0].dq, "atomic" if plans[0].dq_atomic else "")
    return kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--impl", choices=("atomic", "free", "fa2"), default="atomic")
    args = ap.parse_args()
    d, s = args.head_dim, args.seqlen
    b, h = max(1, 16384 // s), 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
    if args.impl == "fa2":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run() -> torch.Tensor:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=args.causal).transpose(1, 2)
    else:
        spec = AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if args.causal else "none",
                             pipeline="multistage")
        kernel = attngen_runner(spec, args.impl == "atomic")

        def run() -> torch.Tensor:
            return kernel(q, k, v)
    times = measure.kernel_times_us(lambda: run().backward(dout), steps=1, name_chars=160, warmup=2)
    for name, us in times.items():
        print(f"kernel {name}: {us:.0f} us")


if __name__ == "__main__":
    main()
