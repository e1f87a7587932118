"""Streaming (a mask with holes) at long lengths, forward and gradients, each pipeline, against a float64 torch
reference on the GPU: the device check behind the walks that step over empty tiles (benchmarks/NOTES.md)."""

from __future__ import annotations

import sys

import torch

import attngen
from attngen.catalogue import load_catalogue
from attngen.spec.model import PipelineKind


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int) -> torch.Tensor:
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    kd, vd = (t.repeat_interleave(q.shape[2] // k.shape[2], dim=1) for t in (kd, vd))
    s = qd @ kd.transpose(-1, -2) / q.shape[-1] ** 0.5
    i = torch.arange(q.shape[1], device="cuda")[:, None]
    j = torch.arange(k.shape[1], device="cuda")[None, :]
    seen = (j <= i) & ((i - j <= window) | (j < 4))
    return (s.masked_fill(~seen, float("-inf")).softmax(-1) @ vd).transpose(1, 2)


def main() -> int:
    base = next(s for s in load_catalogue() if s.name == "streaming_bf16_hd128")
    bad = 0
    for pipeline in ("auto", "warp_specialized", "multistage"):
        kind = base.pipeline.model_copy(update={"kind": PipelineKind(pipeline)})
        spec = base if pipeline == "auto" else base.model_copy(update={"name": f"{base.name}_{pipeline}",
                                                                       "pipeline": kind})
        kernel = attngen.compile(spec)
        for b, n, h, kvh in ((2, 2048, 2, 2), (1, 2048, 4, 2), (1, 8192, 4, 2), (2, 8192, 16, 16)):
            torch.manual_seed(n)
            q = torch.randn(b, n, h, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(b, n, kvh, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(b, n, kvh, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            out = kernel(q, k, v)
            torch.cuda.synchronize()
            print(pipeline, b, n, h, kvh, "fwd ran", flush=True)
            dout = torch.randn_like(out)
            grads = torch.autograd.grad(out, (q, k, v), dout)
            torch.cuda.synchronize()
            print(pipeline, b, n, h, kvh, "bwd ran", flush=True)
            qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
            want = reference(qd, kd, vd, 1024)
            want_grads = torch.autograd.grad(want, (qd, kd, vd), dout.double())
            pairs = zip((out, *grads), (want, *want_grads), strict=True)
            errs = [((a.double() - b).norm() / b.norm()).item() for a, b in pairs]
            print(pipeline, b, n, h, kvh, "rel err out dq dk dv", " ".join(f"{e:.2e}" for e in errs), flush=True)
            bad += any(e > 3e-2 or e != e for e in errs)
    return bad


if __name__ == "__main__":
    sys.exit(main())
