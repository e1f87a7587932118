"""The head-dim split backward's two ways of computing the scores, timed in one process (device machine): by product
(warpgroup 0 S^T and P^T, warpgroup 1 dP^T and dS^T; the planner's choice without a per-element score-mod derivative)
against by columns (each warpgroup 32 query columns of both), with the gradients of the two compared.

    python3 benchmarks/ab_split.py [--head-dims 192,256] [--seqlens 2048,8192]
"""

from __future__ import annotations

import argparse


def main() -> int:
    import torch

    from attngen.bench.measure import time_ms
    from attngen.codegen.renderer import render
    from attngen.planning.planner_bwd import plan_bwd
    from attngen.runtime.kernel import AttentionKernel, current_arch
    from attngen.spec.model import AttentionSpec
    from attngen.toolchain.builder import build
    from attngen.toolchain.cache import compile_cached

    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="192,256")
    ap.add_argument("--seqlens", default="2048,8192")
    args = ap.parse_args()
    arch = current_arch()
    for d in map(int, args.head_dims.split(",")):
        for s in map(int, args.seqlens.split(",")):
            for causal in (False, True):
                spec = AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if causal else "none")
                b, h = max(1, 16384 // s), 2048 // d
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                q, k, v = (t.requires_grad_() for t in (q, k, v))
                flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
                kernel = AttentionKernel(spec, {})
                kernel.cubins[arch] = build(spec, arch)
                out = kernel(q, k, v)
                plan = plan_bwd(spec, arch)
                line, grads = [], []
                for by_product in (True, False):
                    t = plan.dkdv_wgmma.model_copy(update={"split_by_product": by_product})
                    kernel.backward.replace(arch, compile_cached(render(plan.model_copy(update={"dkdv_wgmma": t}))))
                    grads.append(torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                    ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))  # noqa: B023
                    line.append(f"{'product' if by_product else 'columns'} {flops / ms / 1e9:.0f}")
                diff = max(((a.float() - c.float()).norm() / c.float().norm()).item()
                           for a, c in zip(grads[0], grads[1], strict=True))
                print(f"hd{d} s{s} {'causal' if causal else 'none'}: {', '.join(line)} TFLOP/s; "
                      f"gradients differ by {diff:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
