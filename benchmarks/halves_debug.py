"""Where hd192's KV-row-halves backward differs from float64 (device machine): per tensor, per 32-column band and per
8-row band, on small shapes. python3 benchmarks/halves_debug.py"""

from __future__ import annotations

import torch

import attngen
from attngen.spec.model import AttentionSpec
from tests.gpu_reference import reference


def bands(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    err = (got.double() - want).abs()
    scale = want.abs().max().item() + 1e-12
    cols = [f"{err[..., c:c + 32].max().item() / scale:.1e}" for c in range(0, got.shape[-1], 32)]
    rows = [f"{err[:, r:r + 8].max().item() / scale:.1e}" for r in range(0, got.shape[1], 8)]
    print(f"  {name}: max {err.max().item() / scale:.2e} cols32 {' '.join(cols)}")
    print(f"     rows8 {' '.join(rows)}")


def run(spec: AttentionSpec, sq: int, sk: int, heads: int, kvh: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, sq, heads, 192, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(1, sk, kvh, 192, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(1, sk, kvh, 192, device="cuda", dtype=torch.bfloat16, generator=gen)
    do = torch.randn(1, sq, heads, 192, device="cuda", dtype=torch.bfloat16, generator=gen)
    kernel = attngen.compile(spec)
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    out = kernel(qq, kk, vv)
    (out * do).sum().backward()
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    ref, _ = reference(q64, k64, v64, spec.window_left, spec.window_right)
    (ref * do.double()).sum().backward()
    print(f"{spec.mask.kind.value} sq {sq} sk {sk} heads {heads}/{kvh}")
    for name, g, r in (("dv", vv.grad, v64.grad), ("dk", kk.grad, k64.grad), ("dq", qq.grad, q64.grad)):
        bands(name, g, r)


def main() -> None:
    none = AttentionSpec(head_dim=192, dtype="bf16")
    for sq, sk, h, kvh in ((1, 17, 1, 1), (17, 1, 1, 1), (17, 17, 1, 1), (64, 96, 1, 1), (130, 200, 2, 1)):
        run(none, sq, sk, h, kvh)
    run(AttentionSpec(head_dim=192, dtype="bf16", mask="causal"), 130, 200, 2, 1)


if __name__ == "__main__":
    main()
