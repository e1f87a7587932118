"""Compile a spec with attngen, run it, and compare it with PyTorch's reference attention.

    python examples/compile_and_run.py                    # the shipped causal bf16 hd128 spec
    python examples/compile_and_run.py path/to/spec.yaml

Without a CUDA device it still plans and compiles the kernel (for sm90) and prints what it built.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import attngen

SPEC = Path(__file__).resolve().parent.parent / "specs" / "causal_bf16_hd128.yaml"


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Float64 softmax attention in flash_attn's layout, GQA by repeating k and v heads."""
    groups = q.shape[2] // k.shape[2]
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        sq, sk = scores.shape[-2:]
        visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(diagonal=sk - sq)
        scores = scores.masked_fill(~visible, float("-inf"))
    return (scores.softmax(dim=-1) @ v).transpose(1, 2)


def main(path: Path) -> None:
    spec = attngen.load_spec(path)
    if not torch.cuda.is_available():
        cubin = attngen.build(spec, "sm90")
        res = cubin.resources[0]
        print(f"no CUDA device: built {cubin.source.plan.kernel_name} for sm90 "
              f"({len(cubin.data)} bytes, {res.registers} registers, {res.spill_stores} spill stores)")
        return
    kernel = attngen.compile(spec)  # for the current GPU unless the spec names its arches
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[spec.dtype.value]
    batch, seqlen_q, seqlen_k, heads, kv_heads = 2, 1000, 1500, 16, 2
    q = torch.randn(batch, seqlen_q, heads, spec.head_dim, device="cuda", dtype=dtype)
    k = torch.randn(batch, seqlen_k, kv_heads, spec.head_dim, device="cuda", dtype=dtype)
    v = torch.randn_like(k)
    out, lse = kernel(q, k, v, return_lse=True)
    if spec.mask.value in ("none", "causal"):
        ref = reference(q, k, v, causal=spec.mask.value == "causal")
        err = ((out.double() - ref).norm() / ref.norm()).item()
        print(f"{kernel}: relative error vs float64 reference {err:.2e}")
    print(f"out {tuple(out.shape)} {out.dtype}, lse {tuple(lse.shape)} {lse.dtype}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else SPEC)
