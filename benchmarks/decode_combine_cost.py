"""What the split-KV decode's combine costs inside a CUDA graph: for a few small shapes, the graph time of the
whole call (the split kernel, then the combine kernel as a programmatic dependent launch), of the split kernel
alone (its partials left unmerged), of one unsplit kernel, and of cuDNN's SDPA and a one-kernel floor (a 1-element
fill) in the same process. hd128 bf16, 32 query heads over 8 KV heads, seqlen_q 1. ATTNGEN_TEMPLATES set to
another checkout's templates times that checkout's kernels.

    python3 benchmarks/decode_combine_cost.py [--shapes 1x1024,1x4096] [--page 0,256] [--order ordered]
        [--mask none] > out.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import attngen
from attngen.bench import measure
from attngen.spec.model import AttentionSpec


def us(fn) -> float:  # type: ignore[no-untyped-def]
    return min(measure.graph_ms(fn) for _ in range(3)) * 1e3


def paged(k: torch.Tensor, v: torch.Tensor, page: int, shuffled: bool = True
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k and v of (batch, keys, 8, 128) as a pool of page-row blocks (in shuffled or in the cache's order), with
    its table."""
    b, s = k.shape[:2]
    per = s // page
    table = (torch.randperm(b * per, device="cuda", dtype=torch.int32) if shuffled
             else torch.arange(b * per, device="cuda", dtype=torch.int32))
    kc, vc = torch.empty_like(k).view(b * per, page, 8, 128), torch.empty_like(v).view(b * per, page, 8, 128)
    kc[table.long()] = k.reshape(b * per, page, 8, 128)
    vc[table.long()] = v.reshape(b * per, page, 8, 128)
    return kc, vc, table.view(b, per)


def cudnn_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):  # type: ignore[no-untyped-def]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def call() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)
    return call


def point(kernel, b: int, s: int, pages: list[int], shuffled: bool) -> None:  # type: ignore[no-untyped-def]
    decode = kernel.decode_kernels()
    q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    used = torch.full((b,), s, dtype=torch.int32, device="cuda")
    k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    cudnn = cudnn_call(q, k, v)
    ref = cudnn().float()
    peer = us(cudnn)
    scale = 1.0 / math.sqrt(128)
    vargs = decode.args(q, [], [])
    for page in pages:
        kc, vc, table = paged(k, v, page, shuffled) if page else (k, v, None)
        out = kernel.with_kvcache(q, kc, vc, cache_seqlens=used, block_table=table)
        err = ((out.float() - ref).norm() / ref.norm()).item()
        assert math.isfinite(err) and err < 2e-2, err
        times = []
        ready = decode.ready(q, kc, vc, table)
        alone = dataclasses.replace(ready, launches=ready.launches[:1])
        for r in (ready, alone, decode.ready(q, kc, vc, table, num_splits=1)):
            times.append(us(functools.partial(r.run, q, kc, vc, used, table, scale, vargs)))
        carved = float("nan")
        if len(ready.launches) > 1:
            combine = ready.launches[1].fn.function
            carveout(combine, 100)
            carved = us(functools.partial(ready.run, q, kc, vc, used, table, scale, vargs))
            carveout(combine, -1)
        print(f"{b} x {s} | {page} | {ready.shape.num_splits} | {times[0]:.1f} | {carved:.1f} | {times[1]:.1f} | "
              f"{times[2]:.1f} | {peer:.1f} | {peer / times[0]:.2f} | err {err:.1e}", flush=True)


def carveout(function: object, percent: int) -> None:
    """The function's preferred shared-memory carveout (percent of the SM's maximum; -1: no preference)."""
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
    (err,) = driver.cuFuncSetAttribute(function, attr, percent)
    assert err == driver.CUresult.CUDA_SUCCESS, err


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1x1024,1x4096,1x32768,1x131072,8x1024,8x4096")
    parser.add_argument("--page", default="0,256")
    parser.add_argument("--order", choices=("shuffled", "ordered"), default="shuffled",
                        help="the pool's pages in shuffled order or in the cache's")
    parser.add_argument("--mask", choices=("causal", "none"), default="causal")
    args = parser.parse_args()
    os.environ["ATTNGEN_TRUST_SEQLENS"] = "1"
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask=args.mask))
    tiny = torch.empty(1, device="cuda")
    print(f"floor (one 1-element fill): {us(lambda: tiny.fill_(1.0)):.1f} us")
    print("batch x keys | page | splits | call (split + combine) | call, combine's carveout 100% | split kernel "
          "alone | unsplit | cudnn | cudnn / call   (us, CUDA graph)")
    pages = [int(x) for x in args.page.split(",")]
    for item in args.shapes.split(","):
        b, s = (int(x) for x in item.split("x"))
        point(kernel, b, s, pages, args.order == "shuffled")


if __name__ == "__main__":
    main()
