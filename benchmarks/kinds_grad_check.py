"""The gradients of attngen builds with family constants overridden (device machine), against float64 on fresh random
inputs: for an A/B whose kinds must compute the same thing, before it is timed. Kinds as bwd_interleaved.py's.

    python3 benchmarks/kinds_grad_check.py --kinds "attngen,attngen:sm90_bwd.DEPENDENT_LAUNCH=True" [--head-dims 64,128]
"""

from __future__ import annotations

import argparse

import torch
from bwd_interleaved import overrides

import attngen
from attngen.spec.model import AttentionSpec


def grads(kind: str, index: int, head_dim: int, seqlen: int, causal: bool,
          tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    q, k, v, dout = tensors
    mask = "causal" if causal else "none"
    spec = AttentionSpec(name=f"check_{mask}_hd{head_dim}_kind{index}", head_dim=head_dim, dtype="bf16", mask=mask)
    with overrides(kind.partition("@")[0]):
        kernel = attngen.compile(spec)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = kernel(*leaves)
        return torch.autograd.grad(out, leaves, dout)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dout: torch.Tensor,
              causal: bool) -> tuple[torch.Tensor, ...]:
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    qd, kd, vd = (t.transpose(1, 2) for t in leaves)
    out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal).transpose(1, 2)
    return torch.autograd.grad(out, leaves, dout.double())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", required=True)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlen", type=int, default=1027)
    args = ap.parse_args()
    worst = 0.0
    for d in map(int, args.head_dims.split(",")):
        for causal in (False, True):
            gen = torch.Generator(device="cuda").manual_seed(d + causal)
            shape = (2, args.seqlen, 2048 // d // 4, d)
            tensors = tuple(torch.randn(shape, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(4))
            ref = reference(*tensors, causal)
            for i, kind in enumerate(args.kinds.split(",")):
                got = grads(kind, i, d, args.seqlen, causal, tensors)
                errs = [((g.double() - r).norm() / r.norm()).item() for g, r in zip(got, ref, strict=True)]
                finite = all(torch.isfinite(g).all().item() for g in got)
                worst = max(worst, *errs) if finite else float("inf")
                tag = f"hd{d} {'causal' if causal else 'none'} {kind}"
                print(f"{tag}: relative error dq {errs[0]:.2e} dk {errs[1]:.2e} dv {errs[2]:.2e}"
                      + ("" if finite else " NOT FINITE"))
    print(f"worst {worst:.2e}: {'ok' if worst < 2e-2 else 'FAIL'}")


if __name__ == "__main__":
    main()
