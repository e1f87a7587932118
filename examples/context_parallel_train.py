"""Train a small causal transformer on one long sequence split across GPUs with attngen's context-parallel
attention: each rank holds a zigzag shard of the tokens (chunks r and 2W-1-r of 2W, PyTorch's head-tail
layout), every attention layer runs ContextParallelAttention over the DeviceMesh, and the replicated weights'
gradients are averaged across the ranks.

    torchrun --nproc-per-node 2 examples/context_parallel_train.py [--seqlen 32768] [--steps 5] [--check]

--check also runs the first step's loss on rank 0 with the single-GPU kernel over the whole sequence and prints
both (they agree to bf16 rounding).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh

import attngen
from attngen.distributed import ContextParallelAttention, shard
from attngen.spec.model import AttentionSpec

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
SPEC = AttentionSpec(name="cp_example_causal_hd64", head_dim=64, dtype="bf16", mask="causal")


def rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary embedding at each token's global position (a shard's positions are not consecutive)."""
    half = x.shape[-1] // 2
    freq = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angle = positions[:, :, None, None].float() * freq
    a, b = x[..., :half].float(), x[..., half:].float()
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1).to(x.dtype)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, attention: object) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.d = heads, kv_heads, dim // heads
        self.qkv = nn.Linear(dim, (heads + 2 * kv_heads) * self.d, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attention = attention

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, -1, self.d).split([self.heads, self.kv_heads, self.kv_heads], 2)
        out = self.attention(rope(q, positions), rope(k, positions), v.contiguous())  # type: ignore[operator]
        x = x + self.proj(out.reshape(b, s, -1))
        return x + self.mlp(self.n2(x))


class Model(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, attention: object) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, dim // 64, dim // 128, attention) for _ in range(layers))
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions)
        return self.head(x)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqlen", type=int, default=32768)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("cp",))
    attention = ContextParallelAttention(SPEC, mesh, layout="zigzag")
    torch.manual_seed(0)  # the same weights and data on every rank
    model = Model(vocab=1024, dim=512, layers=2, attention=attention).cuda().to(torch.bfloat16)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 1024, (1, args.seqlen + 1), device="cuda")
    positions = torch.arange(args.seqlen, device="cuda")[None]
    inputs, labels = (shard(t, rank, world, "zigzag") for t in (tokens[:, :-1], tokens[:, 1:]))
    local_positions = shard(positions, rank, world, "zigzag")
    if args.check and rank == 0:
        whole = attngen.compile(SPEC)
        for block in model.blocks:
            block.attention = whole
        with torch.no_grad():
            full = F.cross_entropy(model(tokens[:, :-1], positions).flatten(0, 1).float(), tokens[0, 1:])
        for block in model.blocks:
            block.attention = attention
        print(f"one GPU, whole sequence: loss {full.item():.5f}", flush=True)
    for step in range(args.steps):
        logits = model(inputs, local_positions)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum") / args.seqlen
        optim.zero_grad()
        loss.backward()
        for p in model.parameters():  # the replicated weights: sum each rank's share of the gradient
            dist.all_reduce(p.grad, group=mesh.get_group())
        total = loss.detach().clone()
        dist.all_reduce(total, group=mesh.get_group())
        optim.step()
        if rank == 0:
            print(f"step {step}: loss {total.item():.5f} ({world} GPUs, {args.seqlen} tokens)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
