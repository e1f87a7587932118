"""A/B of a template change on the backward (device machine): the same specs built from two template folders in
one process (ATTNGEN_TEMPLATES enters the cache key), timed alternately, backward only, TFLOP/s.

    python3 benchmarks/ab_bwd.py --base path/to/templates [--head-dims 64,128] [--seqlen 8192] [--rounds 3]

The base folder is the other version's `templates/` (e.g. `git archive <commit> templates | tar -x -C /tmp/base`).
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch

import attngen
from attngen.bench.measure import time_ms
from attngen.spec.model import AttentionSpec
from attngen.spec.variant import MaskKind


def build(spec: AttentionSpec, templates: str | None, q: torch.Tensor) -> attngen.AttentionKernel:
    """The kernel of `spec` rendered from `templates` (None: the shipped ones), its backward built now."""
    if templates:
        os.environ["ATTNGEN_TEMPLATES"] = templates
    else:
        os.environ.pop("ATTNGEN_TEMPLATES", None)
    kernel = attngen.compile(spec)
    torch.autograd.grad(kernel(q, q, q), (q,), torch.ones_like(q))
    os.environ.pop("ATTNGEN_TEMPLATES", None)
    return kernel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for d in map(int, args.head_dims.split(",")):
        for mask in ("none", "causal"):
            print(compare(AttentionSpec(head_dim=d, dtype="bf16", mask=mask, name=f"ab_{mask}_hd{d}"), args.base,
                          args.seqlen, args.rounds), flush=True)


def compare(spec: AttentionSpec, base: str, seqlen: int, rounds: int) -> str:
    d = spec.head_dim
    batch, heads = max(1, 16384 // seqlen), 2048 // d
    q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    causal = spec.mask.kind is MaskKind.causal
    flops = 4 * batch * heads * seqlen ** 2 * d * (0.5 if causal else 1.0) * 2.5
    kernels = {"base": build(spec, base, q), "new": build(spec, None, q)}
    outs = {name: kern(q, k, v) for name, kern in kernels.items()}
    grads = {name: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True) for name, o in outs.items()}
    diff = max((a - b).abs().max().item() for a, b in zip(grads["base"], grads["new"], strict=True))
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, o in outs.items():
            times[name].append(time_ms(lambda o=o: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)))
    tf = {n: flops / statistics.median(t) / 1e9 for n, t in times.items()}
    return (f"hd{d} {'causal' if causal else 'none'} s{seqlen}: base {tf['base']:.0f} new {tf['new']:.0f} TFLOP/s "
            f"(x{tf['new'] / tf['base']:.3f}); max |grad new - base| {diff:.2e}")


if __name__ == "__main__":
    main()
