"""Backward-pass timing: attngen against the SDPA flash (FlashAttention-2) and cuDNN backends.

FlashAttention-3 paper settings (batch = 16384 / seqlen, heads = 2048 / head_dim); backward FLOPs =
2.5 x forward. Each implementation's gradients are checked against a float64 reference on a slice
before timing. Usage: python benchmarks/bench_bwd.py --out bwd.json [--head-dims 64,128]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

import attngen
from attngen.spec import AttentionSpec

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def _grad_fn(kind: str, kernel, q, k, v, dout, causal: bool):  # type: ignore[no-untyped-def]
    if kind == "attngen":
        out = kernel(q, k, v)
        return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(BACKENDS[kind]):
        out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
    return lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)


def _check(grads, q, k, v, dout, causal: bool) -> float:  # type: ignore[no-untyped-def]
    """Relative error of dq on batch 0, heads 0-1, against float64 autograd."""
    q64, k64, v64 = (t[:1, :, :2].double().detach().requires_grad_() for t in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q64, k64) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v64)
    (dq,) = torch.autograd.grad(out, (q64,), dout[:1, :, :2].double())
    got = grads[0][:1, :, :2].double()
    return ((got - dq).norm() / dq.norm()).item()


def run(head_dims: list[int], seqlens: list[int]) -> list[dict]:
    rows = []
    for d in head_dims:
        for causal in (False, True):
            kernel = attngen.compile(AttentionSpec(head_dim=d, dtype="bf16", mask="causal" if causal else "none"))
            for s in seqlens:
                b, h = 16384 // s, 2048 // d
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
                q, k, v = (t.requires_grad_() for t in (q, k, v))
                flops = 2.5 * 4 * b * h * s * s * d * (0.5 if causal else 1.0)
                row = {"head_dim": d, "seqlen": s, "causal": causal}
                for kind in ("attngen", "flash", "cudnn"):
                    try:
                        fn = _grad_fn(kind, kernel, q, k, v, dout, causal)
                        err = _check(fn(), q, k, v, dout, causal)
                        ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
                        row[kind] = {"ms": ms, "tflops": flops / ms / 1e9, "dq_rel_err": err}
                    except Exception as exc:  # a peer without a kernel for the shape is recorded, not fatal
                        row[kind] = {"error": str(exc)[:200]}
                rows.append(row)
                a, f, c = (row[x].get("tflops", float("nan")) for x in ("attngen", "flash", "cudnn"))
                print(f"bwd hd{d} s{s} {'causal' if causal else 'full'}: attngen {a:.0f} flash {f:.0f} cudnn {c:.0f}"
                      f" TFLOP/s  x{a / f:.2f} flash  x{a / c:.2f} cudnn  err {row['attngen'].get('dq_rel_err')}",
                      flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="2048,8192,16384")
    ap.add_argument("--out", default="bwd.json")
    ap.add_argument("--templates", default=None, help="render from this template directory (A/B a change)")
    args = ap.parse_args()
    if args.templates:
        import importlib
        from pathlib import Path

        renderer = importlib.import_module("attngen.render")
        renderer.templates_dir = lambda: Path(args.templates)  # type: ignore[attr-defined]
        renderer._environment.cache_clear()
    rows = run([int(x) for x in args.head_dims.split(",")], [int(x) for x in args.seqlens.split(",")])
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
