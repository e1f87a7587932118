"""What a KV-cache decode call's checks of its lengths and block table cost (device machine): for contiguous and
paged caches at a few shapes, the host's microseconds per call of a loop that never waits (the pace of a decode
loop whose kernels are shorter than its host work), the eager time per call by the bench's timer (do_bench), and
the CUDA-graph time (the kernels alone). Run it once per tree and mode: this tree's defaults (the kernels check),
ATTNGEN_HOST_CHECKS=1 (a host check and a sync per call, as main's default was), or another checkout's Python.
hd128 bf16 causal, 32 query heads over 8 KV heads, seqlen_q 1; the bench's inputs (full caches).

    python3 benchmarks/decode_check_cost.py [--shapes 1x4096,8x4096] [--page 16] [--calls 2000] > out.txt
"""

from __future__ import annotations

import argparse
import os

import torch

import attngen
from attngen.bench import measure
from attngen.spec.model import AttentionSpec


def pool_of(k: torch.Tensor, v: torch.Tensor, page: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The cache as a pool of `page`-row blocks in shuffled order, with its table."""
    b, s, h, d = k.shape
    per = s // page
    table = torch.randperm(b * per, device="cuda", dtype=torch.int32)
    kc, vc = (torch.empty(b * per, page, h, d, device="cuda", dtype=k.dtype) for _ in range(2))
    kc[table.long()] = k.reshape(b * per, page, h, d)
    vc[table.long()] = v.reshape(b * per, page, h, d)
    return kc, vc, table.view(b, per)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1x1024,1x4096,8x4096")
    parser.add_argument("--page", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    mode = {k: os.environ.get(k, "") for k in ("ATTNGEN_HOST_CHECKS", "ATTNGEN_TRUST_SEQLENS")}
    print(f"tree {attngen.__file__}; {mode}")
    kernel = attngen.compile(AttentionSpec(head_dim=128, dtype="bf16", mask="causal"))
    print(f"{'shape':>8s} {'cache':>10s} {'host us/call':>13s} {'eager us':>9s} {'graph us':>9s}")
    cases = []   # every input made before any capture (a failed capture leaves torch's generator unusable)
    for b, s in ((int(x) for x in item.split("x")) for item in args.shapes.split(",")):
        q = torch.randn(b, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        used = torch.full((b,), s, dtype=torch.int32, device="cuda")
        for page in (0, args.page):
            cases.append((b, s, page, q, used, *(pool_of(k, v, page) if page else (k, v, None))))
    for b, s, page, q, used, kc, vc, table in cases:
        def call(q=q, used=used, kc=kc, vc=vc, table=table):  # type: ignore[no-untyped-def]
            return kernel.with_kvcache(q, kc, vc, cache_seqlens=used, block_table=table)

        host = measure.host_us_per_call(call, args.calls, warmup=20)
        eager = measure.time_ms(call) * 1e3
        try:
            graph = f"{measure.graph_ms(call) * 1e3:9.1f}"
        except Exception as exc:  # noqa: BLE001 (a call that syncs cannot be captured: say so)
            graph = f"  capture failed: {type(exc).__name__}"
            torch.cuda.synchronize()
        name = f"page {page}" if page else "contiguous"
        print(f"{b}x{s:<6d} {name:>10s} {host:13.1f} {eager:9.1f} {graph}", flush=True)


if __name__ == "__main__":
    main()
