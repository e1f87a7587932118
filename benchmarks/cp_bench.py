"""Context-parallel forward+backward on 2 GPUs against one GPU doing the same total work (device machine,
nvidia-h200-x2), with a timing breakdown that shows whether the ring's transfers hide behind the compute.

    python3 benchmarks/cp_bench.py --seqlen 131072 --out $OUT/cp

For each mask (none, causal), hd128, bf16, 16 query heads over 16 KV heads (FlashAttention-3's hidden 2048)
and batch 1, it times (CUDA events, median of --iters after a warm-up, a barrier before each iteration):
  single    one GPU, the whole sequence, the spec's kernel (rank 0 alone)
  cp        2 ranks, ContextParallelAttention (zigzag ring), fwd+bwd
  cp_fwd    its forward alone
  compute   the same ring with every send/recv replaced by a local copy: the compute alone
  comm      the ring's transfers alone: W-1 K/V shifts forward; W-1 K/V and W dK/dV shifts backward
Writes cp.json and cp.md under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off on shared hosts


@dataclass(frozen=True)
class LocalGroup:
    """A Group whose shifts return the tensors sent (no communication): the ring's compute alone."""

    group: Any
    rank: int
    world: int

    def shift(self, tensors: Any, by: int = 1) -> Callable[[], list[Any]]:
        kept = [t.clone() for t in tensors]
        return lambda: kept


def _time(fn: Callable[[], Any], iters: int, barrier: Callable[[], None]) -> float:
    import torch

    fn()
    times = []
    for _ in range(iters):
        barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _inputs(seqlen: int, heads: int, kv_heads: int, d: int, seed: int) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)

    def r(h: int) -> Any:
        return torch.randn(1, seqlen, h, d, device="cuda", dtype=torch.bfloat16, generator=g)

    return r(heads), r(kv_heads), r(kv_heads), r(heads)


def _single(spec: Any, args: argparse.Namespace) -> float:
    import torch

    import attngen

    kernel = attngen.compile(spec)
    q, k, v, dout = _inputs(args.seqlen, args.heads, args.kv_heads, 128, 1)
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    def step() -> None:
        out = kernel(q, k, v)
        torch.autograd.grad(out, (q, k, v), dout)

    return _time(step, args.iters, lambda: None)


def _cp(spec: Any, args: argparse.Namespace, rank: int, world: int) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    from attngen.distributed import ContextParallelAttention, shard

    q, k, v, dout = (shard(t, rank, world, "zigzag") for t in _inputs(args.seqlen, args.heads, args.kv_heads, 128, 1))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    attention = ContextParallelAttention(spec, strategy="ring")

    def step() -> None:
        out = attention(q, k, v)
        torch.autograd.grad(out, (q, k, v), dout)

    def forward() -> None:
        with torch.no_grad():
            attention(q, k, v)

    result = {"cp": _time(step, args.iters, dist.barrier), "cp_fwd": _time(forward, args.iters, dist.barrier)}
    real_group = attention.group
    attention.group = LocalGroup(None, rank, world)  # type: ignore[assignment]
    result["compute"] = _time(step, args.iters, dist.barrier)
    attention.group = real_group
    kv = (k.detach(), v.detach())
    dkv = tuple(torch.zeros(k.shape, dtype=torch.float32, device="cuda") for _ in range(2))

    def comm() -> None:
        for _ in range(world - 1):
            real_group.shift(kv)()
        for _ in range(world - 1):
            real_group.shift(kv)()
        for _ in range(world):
            real_group.shift(dkv)()

    result["comm"] = _time(comm, args.iters, dist.barrier)
    result["plan"] = attention.plan(q, k).reason  # type: ignore[assignment]
    return result


def worker(rank: int, world: int, init: str, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    from attngen.spec.model import AttentionSpec

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world)
    rows = []
    for mask in args.masks.split(","):
        spec = AttentionSpec(head_dim=128, dtype="bf16", mask=mask)
        single = _single(spec, args) if rank == 0 else float("nan")
        dist.barrier()
        cp = _cp(spec, args, rank, world)
        flops = 4 * args.heads * args.seqlen ** 2 * 128 * (0.5 if mask == "causal" else 1.0) * 3.5
        rows.append({"mask": mask, "seqlen": args.seqlen, "single_ms": single, **cp,
                     "speedup": single / cp["cp"], "single_tflops": flops / single / 1e9,
                     "cp_tflops_per_gpu": flops / cp["cp"] / 1e9 / world,
                     "hidden": 1 - (cp["cp"] - cp["compute"]) / max(cp["comm"], 1e-9)})
        if rank == 0:
            print(json.dumps(rows[-1]), flush=True)
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "world": world,
                "heads": args.heads, "kv_heads": args.kv_heads, "iters": args.iters, "time": time.ctime()}
        (out / "cp.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        lines = [f"# Context-parallel fwd+bwd, {meta['gpu']} x{world}, hd128 bf16, {args.heads}/{args.kv_heads} heads, "
                 f"batch 1", "", "| mask | seqlen | 1 GPU ms | 2 GPUs ms | speedup | fwd ms | compute-only ms | "
                 "comm-only ms | 1 GPU TFLOP/s | CP TFLOP/s per GPU |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['mask']} | {r['seqlen']} | {r['single_ms']:.1f} | {r['cp']:.1f} | {r['speedup']:.2f} | "
                         f"{r['cp_fwd']:.1f} | {r['compute']:.1f} | {r['comm']:.1f} | {r['single_tflops']:.0f} | "
                         f"{r['cp_tflops_per_gpu']:.0f} |")
        lines += ["", f"plan: {rows[-1]['plan']}"]
        (out / "cp.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    dist.destroy_process_group()


def main() -> None:
    import socket

    import torch.multiprocessing as mp

    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlen", type=int, default=131072)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=16)
    parser.add_argument("--masks", default="none,causal")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--out", default="cp")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args.world, f"tcp://127.0.0.1:{port}", args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
