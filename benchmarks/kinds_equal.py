"""Whether kinds that differ only in schedule (bwd_interleaved.py's "attngen:<module>.<CONST>=<literal>;..." kinds)
compute the same forward (and with --backward, the same gradients) bitwise, on fresh random inputs with the outputs
poisoned before each call; the first kind is also held against a float64 reference slice (device machine).

    python3 benchmarks/kinds_equal.py --kinds "attngen,attngen:sm90_fwd.WG_TURNS=True" --head-dims 64 [--backward]
"""

from __future__ import annotations

import argparse
import sys

import torch
from bwd_interleaved import overrides

import attngen
from attngen.bench.measure import make_inputs, reference_slice
from attngen.bench.model import Config
from attngen.spec.model import AttentionSpec


def run(kind: str, index: int, cfg: Config, inputs: tuple[torch.Tensor, ...], *, backward: bool) -> list[torch.Tensor]:
    """The kind's output (and gradients), its kernels built under its overrides; NaN-poisoned buffers beforehand."""
    mask = "causal" if cfg.causal else "none"
    spec = AttentionSpec(name=f"eq_{mask}_hd{cfg.head_dim}_kind{index}", head_dim=cfg.head_dim, dtype="bf16",
                         mask=mask)
    q, k, v = (t.detach().clone().requires_grad_(backward) for t in inputs)
    with overrides(kind):
        kernel = attngen.compile(spec)
        torch.empty(256 << 20, device="cuda").fill_(float("nan"))  # poison what the caching allocator hands out next
        out = kernel(q, k, v)
        if not backward:
            return [out.detach()]
        dout = torch.randn(out.shape, device="cuda", dtype=out.dtype, generator=torch.Generator("cuda").manual_seed(1))
        return [out.detach(), *torch.autograd.grad(out, (q, k, v), dout)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", required=True)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--backward", action="store_true")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    failed = 0
    for head_dim in map(int, args.head_dims.split(",")):
        for causal in (False, True):
            cfg = Config(head_dim, args.seqlen, causal)
            inputs = make_inputs(cfg, "bf16", seed=head_dim + causal)
            results = [run(kind, i, cfg, inputs, backward=args.backward) for i, kind in enumerate(kinds)]
            first = results[0]
            ref = reference_slice(*inputs, causal)
            err = (first[0][0, :, : ref.shape[1]].double() - ref).abs().max().item()
            ok = all(torch.isfinite(t).all() for t in first) and err < 2e-2
            for kind, res in zip(kinds[1:], results[1:], strict=True):
                same = all(torch.equal(a, b) for a, b in zip(first, res, strict=True))
                ok = ok and same
                print(f"hd{head_dim} causal={causal} {kind}: bitwise equal to {kinds[0]}: {same}")
            verdict = "ok" if ok else "FAIL"
            print(f"hd{head_dim} causal={causal}: {kinds[0]} max error against float64 {err:.2e}; {verdict}")
            failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
