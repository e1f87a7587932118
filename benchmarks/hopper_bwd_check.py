"""dQ, dK and dV of the backward on the current GPU against float64 autograd, every gradient printed
(the GPU tests stop at the first failure). Usage: python benchmarks/hopper_bwd_check.py [--head-dims 128,64]"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from gpu_reference import reference, relative_error  # noqa: E402

import attngen  # noqa: E402
from attngen.spec.model import AttentionSpec  # noqa: E402

SHAPES = ((2, 1000, 1000, 4, 4), (1, 257, 513, 8, 2), (1, 513, 257, 4, 1), (1, 1, 77, 2, 2), (1, 4097, 4097, 2, 2))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="128,64")
    args = ap.parse_args()
    worst = 0.0
    for d in map(int, args.head_dims.split(",")):
        for mask in ("none", "causal"):
            spec = AttentionSpec(head_dim=d, dtype="bf16", mask=mask)
            kernel = attngen.compile(spec)
            for b, sq, sk, h, kvh in SHAPES:
                q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn(b, sk, kvh, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                v = torch.randn(b, sk, kvh, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                dout = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
                grads = torch.autograd.grad(kernel(q, k, v), (q, k, v), dout)
                q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
                ref, _ = reference(q64, k64, v64, spec.window_left, spec.window_right)
                refs = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
                errs = [relative_error(g, r) for g, r in zip(grads, refs, strict=True)]
                worst = max(worst, *errs)
                print(f"hd{d} {mask} {(b, sq, sk, h, kvh)}: dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e}",
                      flush=True)
    print(f"worst {worst:.2e}: {'PASS' if worst < 2e-2 else 'FAIL'}")
    return 0 if worst < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
